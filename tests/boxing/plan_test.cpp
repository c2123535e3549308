// Physical plans of the bundled MLPs under each parallel strategy (DESIGN.md §1, §5), built
// in-process through the command line's own pipeline (driver/pipeline.h: LoadConfig + Compile), so
// the hints and layouts here are the ones a user writes in `parallel:`.
//
// Each test checks what must hold for any correct plan of its strategy and, where the plan is
// fixed by the strategy, the bytes moved per rank per step against a figure worked out by hand
// from the model's shapes (boxing/boxing.h gives the per-collective formulas). Bad parallel input
// is checked both in-process and through the binary (FLOWRUN_BIN, as tests/cli/cli_test.cpp).
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <numeric>
#include <set>
#include <string>
#include <vector>

#include "actor/world.h"
#include "assign/assign.h"
#include "assign/step.h"
#include "base/glob.h"
#include "base/hash.h"
#include "config/config.h"
#include "driver/layout.h"
#include "driver/pipeline.h"
#include "flowrun_cmd.h"
#include "ops/op.h"
#include "plan/plan_serialize.h"

namespace {

using fr::ir::BoxingEdge;
using fr::ir::Graph;
using fr::ir::Plan;
using fr::ir::TaskDesc;
using fr::ir::TaskKind;
using fr::ir::ValueId;

fr::Result<fr::Compiled> Build(const std::string& config, int ranks, const std::vector<std::string>& set) {
  ASSIGN_OR_RETURN(fr::Config cfg, fr::LoadConfig(config, set));
  return fr::Compile(cfg, ranks);
}

#define ASSERT_BUILT(c) ASSERT_TRUE((c).ok()) << (c).status().message()

const fr::ir::ValuePlacement& Placed(const Plan& p, ValueId v) {
  for (const auto& vp : p.values)
    if (vp.value == v) return vp;
  ADD_FAILURE() << "value " << v << " has no placement";
  static const fr::ir::ValuePlacement kNone;
  return kNone;
}

std::vector<const BoxingEdge*> EdgesOf(const Plan& p, ValueId v) {
  std::vector<const BoxingEdge*> out;
  for (const BoxingEdge& e : p.edges)
    if (e.value == v) out.push_back(&e);
  return out;
}

// Whether a boxing task moves (a piece of) value v: one of its outputs holds it, or a send's
// input. A gradient bucket's all-reduce moves several values.
bool Moves(const Plan& p, const TaskDesc& t, ValueId v) {
  if (t.kind != TaskKind::kBoxing) return false;
  if (t.out.empty()) return p.regsts[static_cast<size_t>(t.move.in[0])].value == v;
  for (int r : t.out)
    if (p.regsts[static_cast<size_t>(r)].value == v) return true;
  return false;
}

const TaskDesc& ProducerOf(const Plan& p, int regst) {
  return p.tasks[static_cast<size_t>(p.regsts[static_cast<size_t>(regst)].producer)];
}

// Bytes `rank` moves per step for the boxing of one value: Plan::BytesMoved on the plan cut down
// to those tasks.
int64_t MovedFor(const Plan& p, ValueId v, int rank) {
  Plan q;
  q.micro_batches = p.micro_batches;
  q.regsts = p.regsts;
  for (const TaskDesc& t : p.tasks) {
    if (!Moves(p, t, v)) continue;
    TaskDesc only = t;  // a bucket's all-reduce, cut down to v's input
    if (t.move.op == fr::boxing::Op::kAllReduce && t.move.in.size() > 1) {
      only.move.in.clear();
      for (size_t i = 0; i < t.out.size(); ++i)
        if (p.regsts[static_cast<size_t>(t.out[i])].value == v) only.move.in.push_back(t.move.in[i]);
    }
    q.tasks.push_back(only);
  }
  return q.BytesMoved(rank);
}

const fr::ir::Node* NodeNamed(const Graph& g, const std::string& name) {
  for (const auto& n : g.nodes)
    if (n.name == name) return &n;
  return nullptr;
}

bool IsSink(const std::string& consumer) { return consumer == "loss" || consumer == "grad_norm"; }

// A strategy is a chain of the steps boxing/boxing.h lists, " > "-separated, each with "@axis" on
// an N-D mesh; or one of the whole-tensor strategies.
bool KnownStrategy(const std::string& s) {
  static const std::set<std::string> kWhole = {"identity", "send-recv", "fallback"};
  static const std::set<std::string> kSteps = {"keep", "copy", "slice", "zero-fill", "assemble", "all-reduce",
                                               "reduce-scatter", "all-gather", "all-to-all"};
  if (kWhole.count(s)) return true;
  size_t at = 0;
  while (at <= s.size()) {
    size_t end = s.find(" > ", at);
    std::string step = s.substr(at, end == std::string::npos ? std::string::npos : end - at);
    step = step.substr(0, step.find('@'));
    if (!kSteps.count(step)) return false;
    if (end == std::string::npos) break;
    at = end + 3;
  }
  return true;
}

// What the compiler chose, for the test log: forward signatures, boxing edges, bytes per rank.
void Record(const char* what, const fr::Compiled& c) {
  const Plan& p = c.plan;
  const Graph& g = c.training.graph;
  std::printf("[ record ] %s\n", what);
  for (size_t n = 0; n < g.nodes.size(); ++n)
    if (g.nodes[n].phase == fr::ir::Phase::kForward) std::printf("    %-14s %s\n", g.nodes[n].name.c_str(), p.node_sig[n].c_str());
  for (const BoxingEdge& e : p.edges) {
    std::printf("    edge %s: %s -> %s: %s, %lld B per rank per %s; value sends per step, by rank:", g.value(e.value).name.c_str(),
                e.src.ToString().c_str(), e.dst.ToString().c_str(), e.strategy.c_str(),
                static_cast<long long>(e.bytes_per_rank), e.per_step ? "step" : "micro-batch");
    for (int r = 0; r < p.ranks; ++r) std::printf(" %lld", static_cast<long long>(MovedFor(p, e.value, r)));
    std::printf("\n");
  }
  for (int r = 0; r < p.ranks; ++r) std::printf("    rank %d moves %lld B per step\n", r, static_cast<long long>(p.BytesMoved(r)));
}

// ---------------------------------------------------------------------------------------------
// Data parallel: x split over 4 ranks, everything else chosen by the compiler, at a global batch
// of 1024 (2 micro-batches of 512). At the bundled batch of 64 these models are latency-bound
// (seven per-step all-reduces of small gradients) and the cost model rightly prefers a plan with
// fewer messages, tensor-parallel in places; with real batches data parallelism is the optimum.

struct DataParallelCase {
  const char* config;
  int64_t param_bytes;     // f32 parameters, counted by hand from the model (below)
  int64_t moved_rank0;     // Plan::BytesMoved per step, by hand
  int64_t moved_others;
};

// Bytes per rank per step. Each gradient is all-reduced once per step (accumulation runs before
// the reduction), and an all-reduce over p = 4 ranks costs 2(p-1)/p = 1.5 x its bytes:
//   mlp:         fc1 128x64 + 128, fc2 128x128 + 128, fc3 10x128 + 10 = 26122 floats = 104488 B
//                -> 1.5 x 104488 = 156732 B
//   mlp_ln_gelu: fc1 64x32 + 64, ln 64 + 64, fc2 64x64 + 64, fc3 8x64 + 8 = 6920 floats = 27680 B
//                -> 1.5 x 27680 = 41520 B
// The loss sink: the loss summed over the micro-batches is P over the 4 ranks, and it is
// all-reduced once a step in the first gradient bucket, so every rank moves 1.5 x 4 B = 6 B more
// and rank 0 reads its own copy. The gradient norm is already B, so rank 0 reads it too: 0 B.
const DataParallelCase kDataParallel[] = {
    {"configs/mlp.yaml", 104488, 156732 + 6, 156732 + 6},
    {"configs/mlp_ln_gelu.yaml", 27680, 41520 + 6, 41520 + 6},
};

TEST(Plan, DataParallel_1n4d) {
  for (const DataParallelCase& tc : kDataParallel) {
    SCOPED_TRACE(tc.config);
    auto c = Build(tc.config, 4, {"parallel.sbp={x: [\"S(0)\"]}", "train.global_batch=1024", "train.micro_batch=512"});
    ASSERT_BUILT(c);
    const Plan& p = c->plan;
    const Graph& g = c->training.graph;
    ASSERT_EQ(p.ranks, 4);
    ASSERT_EQ(p.micro_batches, 2);

    int64_t param_bytes = 0;
    std::set<int> buckets;
    for (const auto& pg : c->training.params) {
      const std::string& name = g.value(pg.param).name;
      SCOPED_TRACE(name);
      param_bytes += g.type(pg.param).shape.numel() * 4;
      EXPECT_EQ(Placed(p, pg.param).sbp, fr::sbp::NdSbp{fr::sbp::Sbp::B()});
      // Exactly one boxing of the gradient: P -> B by one all-reduce over all 4 ranks, once per step.
      auto edges = EdgesOf(p, pg.grad);
      ASSERT_EQ(edges.size(), 1u);
      EXPECT_EQ(edges[0]->src.ToString(), "[P]");
      EXPECT_EQ(edges[0]->dst.ToString(), "[B]");
      EXPECT_EQ(edges[0]->strategy, "all-reduce");
      EXPECT_TRUE(edges[0]->per_step);
      const auto& cons = edges[0]->consumers;
      EXPECT_NE(std::find(cons.begin(), cons.end(), g.node(pg.update).name), cons.end());
      int variables = 0;
      for (const TaskDesc& t : p.tasks) {
        if (t.kind != TaskKind::kVariable || t.param != pg.param) continue;
        ++variables;
        const TaskDesc& feed = ProducerOf(p, t.in[1].regst);  // in[1]: the gradient
        EXPECT_EQ(feed.kind, TaskKind::kBoxing);
        EXPECT_EQ(feed.move.op, fr::boxing::Op::kAllReduce);
        EXPECT_EQ(feed.move.group, (std::vector<int>{0, 1, 2, 3}));
        const auto j = std::find(feed.out.begin(), feed.out.end(), t.in[1].regst) - feed.out.begin();
        ASSERT_LT(static_cast<size_t>(j), feed.move.in.size());
        EXPECT_EQ(ProducerOf(p, feed.move.in[static_cast<size_t>(j)]).logical, g.value(pg.grad).producer);  // straight from accumulation
      }
      EXPECT_EQ(variables, 4);
      int reductions = 0;
      for (const TaskDesc& t : p.tasks) reductions += Moves(p, t, pg.grad);
      EXPECT_EQ(reductions, 4) << "one all-reduce task per rank";
      EXPECT_GE(edges[0]->bucket, 0) << "every gradient rides in a bucket";
      buckets.insert(edges[0]->bucket);
    }
    EXPECT_EQ(param_bytes, tc.param_bytes) << "the model changed: redo the arithmetic above";
    // The gradients are reduced by one all-reduce per bucket and rank, and nothing else moves:
    // as many buckets as the bytes need (GradientBuckets_1n2d checks the packing).
    EXPECT_EQ(static_cast<int64_t>(buckets.size()),
              (param_bytes + fr::boxing::kDefaultBucketBytes - 1) / fr::boxing::kDefaultBucketBytes);
    for (int r = 0; r < 4; ++r) {
      int collectives = 0;
      for (const TaskDesc& t : p.tasks) collectives += t.rank == r && t.kind == TaskKind::kBoxing && !t.move.group.empty();
      EXPECT_EQ(collectives, static_cast<int>(buckets.size())) << "rank " << r;
    }

    // No boxing in the forward pass; the only edges are gradient all-reduces and the sinks.
    std::string stray;
    for (const BoxingEdge& e : p.edges) {
      for (const std::string& consumer : e.consumers) {
        const fr::ir::Node* n = NodeNamed(g, consumer);
        if (IsSink(consumer) || (n && n->phase != fr::ir::Phase::kForward && e.strategy == "all-reduce")) continue;
        stray += "\n  " + g.value(e.value).name + ": " + e.src.ToString() + " -> " + e.dst.ToString() + " (" + e.strategy +
                 ") for " + consumer;
      }
    }
    EXPECT_TRUE(stray.empty()) << "boxing besides the gradient all-reduces:" << stray;
    EXPECT_EQ(p.BytesMoved(0), tc.moved_rank0);
    for (int r = 1; r < 4; ++r) EXPECT_EQ(p.BytesMoved(r), tc.moved_others) << "rank " << r;
  }
}

// ---------------------------------------------------------------------------------------------
// 2-D hybrid on a 2x2 mesh: data parallel on mesh axis 0, fc1.weight hinted split on mesh axis 1.

// Bytes: each gradient that reaches its update by one all-reduce along mesh axis 0 (groups of
// p = 2) costs 2(p-1)/p = 1 x the parameter's piece per step, e.g. fc2.weight [B, S(1)] of the
// mlp: a [128, 64] f32 piece, 32768 B. A gradient that is partial on both axes and replicated on
// both ([P, P] -> [B, B], all-reduce@0 > all-reduce@1) costs the whole tensor twice: fc3.weight
// 10x128 f32, 2 x 5120 = 10240 B.
//
// The totals are recorded next to data parallelism over the same 4 ranks (DataParallel_1n4d),
// which shares compute as widely, so a hybrid layout that moves more buys nothing. Not asserted:
// the cost model does not achieve it yet (the fallback boxing of fc1's gradient is priced with no
// per-message latency, and per-op refinement stops in local optima).
struct HybridCase {
  const char* config;
  int64_t data_parallel_bytes;  // the most any rank moves under DataParallel_1n4d
};
const HybridCase kHybrid[] = {{"configs/mlp.yaml", 156740}, {"configs/mlp_ln_gelu.yaml", 41528}};

TEST(Plan, Hybrid_2x2) {
  for (const HybridCase& tc : kHybrid) {
    const char* config = tc.config;
    SCOPED_TRACE(config);
    auto c = Build(config, 4,
                   {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", \"B\"], fc1.weight: [\"B\", \"S(0)\"]}"});
    ASSERT_BUILT(c);
    const Plan& p = c->plan;
    const Graph& g = c->training.graph;
    ASSERT_EQ(p.stages[0].ToString(), "cpu 0-3 as 2x2");
    EXPECT_EQ(Placed(p, g.Find("x")).sbp.ToString(), "[S(0), B]");
    EXPECT_EQ(Placed(p, g.Find("fc1.weight")).sbp.ToString(), "[B, S(0)]");
    // Mesh axis 1 groups are {0,1} and {2,3}; axis 0 groups are {0,2} and {1,3}.
    auto along_axis0 = [](const std::vector<int>& group) {
      return group == std::vector<int>{0, 2} || group == std::vector<int>{1, 3};
    };
    for (const auto& pg : c->training.params) {
      const std::string& name = g.value(pg.param).name;
      SCOPED_TRACE(name);
      const fr::sbp::NdSbp& nd = Placed(p, pg.param).sbp;
      ASSERT_EQ(nd.size(), 2);
      // Data parallelism on axis 0 replicates every weight there.
      EXPECT_TRUE(nd[0].is_broadcast()) << nd.ToString();
      // The update reads its gradient as the parameter's own piece.
      for (const TaskDesc& t : p.tasks) {
        if (t.kind != TaskKind::kVariable || t.param != pg.param) continue;
        EXPECT_EQ(p.regsts[static_cast<size_t>(t.in[1].regst)].type, p.regsts[static_cast<size_t>(t.out[0])].type);
      }
      // A gradient summed over axis 1 for a weight split there is reduce-scattered, never
      // all-reduced (which would sum what each device then throws away).
      if (nd[1].is_split()) {
        for (const TaskDesc& t : p.tasks) {
          if (t.kind == TaskKind::kBoxing && Moves(p, t, pg.grad) && t.move.op == fr::boxing::Op::kAllReduce) {
            EXPECT_TRUE(along_axis0(t.move.group)) << t.name;
          }
        }
      }
      // Bytes of the plain gradient all-reduces, by hand (above).
      const int64_t piece = p.regsts[static_cast<size_t>(Placed(p, pg.param).regsts[0])].bytes();
      for (const BoxingEdge* e : EdgesOf(p, pg.grad)) {
        if (e->strategy == "all-reduce@0") {
          EXPECT_EQ(e->bytes_per_rank, piece);
        } else if (e->strategy == "all-reduce@0 > all-reduce@1") {
          EXPECT_EQ(e->bytes_per_rank, 2 * piece);
        }
      }
    }
    for (const BoxingEdge& e : p.edges) EXPECT_TRUE(KnownStrategy(e.strategy)) << e.strategy;
    int64_t most = 0;
    for (int r = 0; r < 4; ++r) {
      EXPECT_GT(p.BytesMoved(r), 0) << "rank " << r;
      most = std::max(most, p.BytesMoved(r));
    }
    Record(config, *c);
    std::printf("    at most %lld B per rank per step; data parallelism on 4 ranks: %lld\n", static_cast<long long>(most),
                static_cast<long long>(tc.data_parallel_bytes));
  }
}

// gpt_mini on a 2x2 mesh with only the batch hinted on axis 0: the assignment splits the batch on
// both axes, and each weight's gradient is all-reduced over axis 0 every micro-batch on its way to
// its accumulator (then over axis 1 in the step's bucket). The runtime starts each such
// all-reduce when its backward op finishes and only the accumulator waits for it, so the step
// model counts them in flight together: their latencies, one after another, would be more than
// all the predicted communication.
TEST(Plan, GradientsIntoAccumulatorsOverlap_2x2) {
  // Which layout the assigner picks here depends on the cluster's figures, so the case fixes them
  // (gpt.yaml's as measured before Open MPI's yield was turned off) instead of taking whatever the
  // bundled config was last calibrated to.
  const std::vector<std::string> set = {
      "parallel.mesh=[2, 2]", "parallel.sbp={idx: [\"S(0)\", B]}", "train.micro_batch=16", "cluster.flops=3.7e+10",
      "cluster.bandwidth={intra: 1.5e+09, inter: 1.5e+09}", "cluster.latency={intra: 1.0e-04, inter: 1.0e-04}",
      "cluster.p2p_latency=1.1e-04", "cluster.op_overhead=1.0e-05", "cluster.element_seconds={stream: 2.0e-10, special: 1.7e-09}",
      "cluster.busy_speedup=[2.41, 1.92, 1.21, 1.00]"};
  auto c = Build("configs/gpt.yaml", 4, set);
  ASSERT_BUILT(c);
  const Plan& p = c->plan;
  int into_accumulators = 0;
  for (const BoxingEdge& e : p.edges) {
    if (e.per_step || e.strategy != "all-reduce@0" || e.consumers.size() != 1) continue;
    if (e.consumers[0].size() > 9 && e.consumers[0].substr(e.consumers[0].size() - 9) == "/grad_acc") ++into_accumulators;
  }
  ASSERT_GE(into_accumulators, 10) << "the plan no longer reduces gradients per micro-batch; pick another case";
  auto cfg = fr::LoadConfig("configs/gpt.yaml", set);
  ASSERT_TRUE(cfg.ok());
  const double latency = cfg->cluster.latency_intra;  // one round for a pair
  EXPECT_LT(p.predicted.comm_s, into_accumulators * latency / 2)
      << into_accumulators << " all-reduces into accumulators, " << latency << " s latency each";
  EXPECT_GT(p.predicted.comm_s, latency);  // the last one's latency is still paid
}

// ZeRO on gpt_mini's 4 data-parallel ranks, with one and with two micro-batches: the plan stays
// data-parallel with the parameters sharded. Every parameter is gathered for its readers once a
// step in a bucket, no forward activation moves between ranks, the step costs at most 20% more than without
// ZeRO (predicted 11% more with one micro-batch: plain data parallelism's once-a-step all-reduces
// run through shared memory, priced at 9.2 GB/s read with the inputs in place, while ZeRO's
// reduce-scatters and gathers go through MPI; this bound was 10% before that price), and with two micro-batches every gradient is reduce-scattered into its shard in a bucket
// (with one, the plan all-reduces them per micro-batch on their way into the accumulators). The assigner once settled on gathering the tokens and splitting the weights as
// tensor parallelism does, all-reducing activations every micro-batch: predicted 18.2 and 20.1 ms
// against 11.3 and 12.9 without ZeRO, and measured about 1.5x slower than sharded data parallelism.
TEST(Plan, ZeroStaysDataParallel_1n4d) {
  for (const char* micro : {"16", "8"}) {
    SCOPED_TRACE(std::string("micro_batch ") + micro);
    const std::vector<std::string> dp = {"parallel.sbp={idx: [\"S(0)\"]}", std::string("train.micro_batch=") + micro};
    auto plain = Build("configs/gpt.yaml", 4, dp);
    std::vector<std::string> with_zero = dp;
    with_zero.push_back("parallel.zero=true");
    auto zero = Build("configs/gpt.yaml", 4, with_zero);
    ASSERT_BUILT(plain);
    ASSERT_BUILT(zero);
    const Plan& p = zero->plan;
    const Graph& g = zero->training.graph;
    int gathered = 0, scattered = 0;
    for (const BoxingEdge& e : p.edges) {
      const fr::ir::Value& v = g.value(e.value);
      if (v.kind == fr::ir::ValueKind::kParam) {
        EXPECT_EQ(e.strategy, "all-gather") << v.name;
        EXPECT_GE(e.bucket, 0) << v.name;
        ++gathered;
      }
      if (v.producer >= 0 && g.node(v.producer).phase == fr::ir::Phase::kForward) {
        EXPECT_EQ(e.bytes_per_rank, 0) << v.name << " moves " << e.strategy;
      }
      if (e.per_step && e.strategy == "reduce-scatter") {  // a gradient into its shard: in a bucket
        EXPECT_GE(e.bucket, 0) << v.name;
        ++scattered;
      }
    }
    EXPECT_EQ(gathered, static_cast<int>(g.params.size()));
    if (std::string(micro) == "8") {
      EXPECT_EQ(scattered, static_cast<int>(g.params.size()));
    }
    EXPECT_LT(p.predicted.step_s, 1.2 * plain->plan.predicted.step_s)
        << "ZeRO " << p.predicted.step_s << " s, without " << plain->plan.predicted.step_s << " s";
  }
}

// parallel.bucket_kib sets the buckets' size: 32 KiB gives more buckets than the default, none
// over 32 KiB but for a gradient larger than that alone.
TEST(Plan, BucketSizeFromConfig_1n2d) {
  auto count = [](const Plan& p, const fr::ir::Graph& g, int64_t limit) {
    std::map<int, int64_t> bytes;
    for (const BoxingEdge& e : p.edges)
      if (e.bucket >= 0) bytes[e.bucket] += g.type(e.value).shape.numel() * static_cast<int64_t>(fr::SizeOf(g.type(e.value).dtype));
    std::map<int, int> members;
    for (const BoxingEdge& e : p.edges)
      if (e.bucket >= 0) ++members[e.bucket];
    for (const auto& [b, n] : bytes) EXPECT_TRUE(n <= limit || members[b] == 1) << "bucket " << b << ": " << n << " bytes";
    return bytes.size();
  };
  auto base = Build("configs/gpt.yaml", 2, {"parallel.sbp={idx: [\"S(0)\"]}"});
  auto small = Build("configs/gpt.yaml", 2, {"parallel.sbp={idx: [\"S(0)\"]}", "parallel.bucket_kib=32"});
  ASSERT_BUILT(base);
  ASSERT_BUILT(small);
  EXPECT_GT(count(small->plan, small->training.graph, 32 << 10), count(base->plan, base->training.graph, fr::boxing::kDefaultBucketBytes));
}

// Update groups: a device's variables with alike updates whose gradients share a bucket (or have
// none) update as one group, one group kernel call. gpt_mini on one rank: its 29 parameters, all
// AdamW with the same clip coefficient and no buckets, are one group. On 2 data-parallel ranks:
// one group per rank and gradient bucket that holds two or more parameters, and no group mixes
// ranks, buckets, ops, attributes or coefficients.
TEST(Plan, UpdateGroupsFollowGradientBuckets) {
  for (const int ranks : {1, 2}) {
    SCOPED_TRACE(std::to_string(ranks) + " rank(s)");
    auto c = ranks == 1 ? Build("configs/gpt.yaml", 1, {}) : Build("configs/gpt.yaml", 2, {"parallel.sbp={idx: [\"S(0)\"]}"});
    ASSERT_BUILT(c);
    const Plan& p = c->plan;
    const Graph& g = c->training.graph;
    auto bucket_of = [&](const TaskDesc& t) {
      for (const BoxingEdge* e : EdgesOf(p, g.node(t.logical).in[1]))
        if (e->bucket >= 0) return e->bucket;
      return -1;
    };
    std::map<int, std::vector<const TaskDesc*>> groups;
    std::map<std::pair<int, int>, int> per_bucket;  // (rank, bucket) -> variables
    int variables = 0;
    for (const TaskDesc& t : p.tasks) {
      if (t.kind != TaskKind::kVariable) continue;
      ++variables;
      ++per_bucket[{t.rank, bucket_of(t)}];
      if (t.update_group >= 0) groups[t.update_group].push_back(&t);
    }
    ASSERT_EQ(variables, 29 * ranks);
    for (const auto& [id, members] : groups) {
      ASSERT_GE(members.size(), 2u) << "group " << id;
      const TaskDesc& f = *members[0];
      for (const TaskDesc* t : members) {
        EXPECT_EQ(t->rank, f.rank) << t->name;
        EXPECT_EQ(t->device, f.device) << t->name;
        EXPECT_EQ(p.nodes[static_cast<size_t>(t->node)].op, fr::OpKind::kAdamWUpdate) << t->name;
        EXPECT_TRUE(p.nodes[static_cast<size_t>(t->node)].attrs.all() == p.nodes[static_cast<size_t>(f.node)].attrs.all()) << t->name;
        ASSERT_EQ(t->in.size(), 3u) << t->name << ": no clip coefficient";
        EXPECT_EQ(t->in[2].regst, f.in[2].regst) << t->name;
        EXPECT_EQ(bucket_of(*t), bucket_of(f)) << t->name;
      }
    }
    int expected = 0, grouped = 0;
    for (const auto& [key, n] : per_bucket) expected += n >= 2;
    for (const auto& [id, members] : groups) grouped += static_cast<int>(members.size());
    EXPECT_EQ(static_cast<int>(groups.size()), expected);
    int alone = 0;
    for (const auto& [key, n] : per_bucket) alone += n == 1;
    EXPECT_EQ(grouped + alone, variables) << "a variable that could join a group updates alone";
    if (ranks == 1) {
      EXPECT_EQ(groups.size(), 1u);
    } else {
      EXPECT_GE(groups.size(), 4u) << "gpt_mini's buckets are several per rank";
    }
  }
}

// gpt_mini's 29 gradients (550 KiB) on 2 data-parallel ranks fill several buckets, none over
// kDefaultBucketBytes: the runtime starts each when its last gradient is accumulated, so all but
// the last reduce while backward still runs. The loss's sum over the micro-batches, partial on
// each rank, rides in the first: the sinks read rank 0's own copy, so no stage of their own.
TEST(Plan, GradientBuckets_1n2d) {
  auto c = Build("configs/gpt.yaml", 2, {"parallel.sbp={idx: [\"S(0)\"]}"});
  ASSERT_BUILT(c);
  const Plan& p = c->plan;
  std::map<int, int64_t> bucket_bytes;  // each bucket's gradients, whole (data parallel: on every rank)
  int64_t grads = 0, bucketed = 0;
  for (const BoxingEdge& e : p.edges) {
    if (e.strategy != "all-reduce" || !e.per_step) continue;
    ++grads;
    if (e.bucket < 0) continue;
    ++bucketed;
    const auto& type = c->training.graph.type(e.value);
    bucket_bytes[e.bucket] += type.shape.numel() * static_cast<int64_t>(fr::SizeOf(type.dtype));
  }
  EXPECT_EQ(grads, 29 + 1);  // and the loss's sum
  EXPECT_EQ(bucketed, grads) << "every gradient all-reduce rides in a bucket";
  EXPECT_EQ(p.stages.size(), 1u);
  EXPECT_EQ(p.pipeline_stages, 1);
  int64_t total = 0;
  for (const auto& [b, bytes] : bucket_bytes) {
    EXPECT_LE(bytes, fr::boxing::kDefaultBucketBytes) << "bucket " << b;
    total += bytes;
  }
  EXPECT_GE(bucket_bytes.size(), static_cast<size_t>((total + fr::boxing::kDefaultBucketBytes - 1) /
                                                     fr::boxing::kDefaultBucketBytes));
  EXPECT_GE(bucket_bytes.size(), 2u);
  // Packed greedily in the order backward makes the gradients (the node order of the ops that make
  // them): a bucket closes only when the next gradient would not fit.
  const fr::ir::Graph& g = c->training.graph;
  auto made = [&](const BoxingEdge& e) { return g.value(g.node(g.value(e.value).producer).in[0]).producer; };
  std::map<int, std::pair<fr::ir::NodeId, int64_t>> first;  // bucket -> its first-made gradient and its bytes
  for (const BoxingEdge& e : p.edges) {
    if (e.bucket < 0) continue;
    const int64_t bytes = g.type(e.value).shape.numel() * static_cast<int64_t>(fr::SizeOf(g.type(e.value).dtype));
    auto it = first.find(e.bucket);
    if (it == first.end() || made(e) < it->second.first) first[e.bucket] = {made(e), bytes};
  }
  for (auto it = bucket_bytes.begin(); std::next(it) != bucket_bytes.end(); ++it) {
    const int next = std::next(it)->first;
    EXPECT_LT(first[it->first].first, first[next].first) << "bucket " << next << " holds earlier gradients";
    EXPECT_GT(it->second + first[next].second, fr::boxing::kDefaultBucketBytes) << "bucket " << it->first << " closed early";
  }
  // Packed in the order backward makes the gradients: the last bucket holds the last gradients
  // (the embeddings', made by the first op's backward) and only the remainder, so what is left to
  // reduce after backward is small.
  int wte = -1;
  for (const BoxingEdge& e : p.edges)
    if (e.bucket >= 0 && c->training.graph.value(e.value).name.starts_with("wte.weight")) wte = e.bucket;
  EXPECT_EQ(wte, bucket_bytes.rbegin()->first) << "the token embedding's gradient is made last";
  for (int r = 0; r < 2; ++r) {  // one collective task per bucket and rank
    int collectives = 0;
    for (const TaskDesc& t : p.tasks)
      collectives += t.rank == r && t.kind == TaskKind::kBoxing && t.move.op == fr::boxing::Op::kAllReduce && t.name.starts_with("bucket");
    EXPECT_EQ(collectives, static_cast<int>(bucket_bytes.size())) << "rank " << r;
  }
}

// ---------------------------------------------------------------------------------------------
// Two pipeline stages of one rank each.

struct PipelineCase {
  const char* config;
  const char* stages;              // parallel.stages
  std::vector<std::string> first;  // stage 0's globs, again
  const char* activation;          // the forward value crossing from stage 0 to stage 1
  int64_t activation_bytes;        // its micro-batch piece: [micro_batch, features] f32
  int64_t params_on_1;             // parameters on stage 1: each sends a 4 B grad_sq per step
  int64_t moved[2];                // by hand, below
};

// Stage 0 sends the activation every micro-batch and the clip coefficient once per step; stage 1
// sends the activation's gradient every micro-batch, a squared gradient norm per parameter it owns
// per step, and the loss summed over the micro-batches once per step (M = 2):
//   mlp:         [32,128] f32 = 16384 B; rank 0: 2 x 16384 + 4 = 32772; rank 1: 2 x 16384 + 4 x 4 + 4 = 32788
//   mlp_ln_gelu: [16,64] f32 = 4096 B;   rank 0: 2 x 4096 + 4 = 8196;    rank 1: 2 x 4096 + 4 x 4 + 4 = 8212
//   gpt (cut after block 0, on the residual stream, which block 1 reads twice: its gradient's two
//   parts are summed on stage 1 and cross back once):
//                [8,64,64] f32 = 131072 B; rank 0: 2 x 131072 + 4 = 262148; rank 1: 2 x 131072 + 15 x 4 + 4 = 262208
const PipelineCase kPipeline[] = {
    {"configs/mlp.yaml", R"([["/fc1/*", "/Relu"], ["*"]])", {"/fc1/*", "/Relu"}, "/Relu_output_0", 16384, 4,
     {32772, 32788}},
    {"configs/mlp_ln_gelu.yaml", R"([["/fc1/*", "/ln/*", "/act/*"], ["*"]])", {"/fc1/*", "/ln/*", "/act/*"},
     "/act/Mul_1_output_0", 4096, 4, {8196, 8212}},
    {"configs/gpt.yaml", R"([["/wte/*", "/wpe/*", "/Add", "/blocks.0/*"], ["*"]])", {"/wte/*", "/wpe/*", "/Add", "/blocks.0/*"},
     "/blocks.0/Add_1_output_0", 131072, 15, {262148, 262208}},
};

TEST(Plan, Pipeline_1n2d) {
  for (const PipelineCase& tc : kPipeline) {
    SCOPED_TRACE(tc.config);
    auto c = Build(tc.config, 2, {"parallel.mesh=[1]", std::string("parallel.stages=") + tc.stages});
    ASSERT_BUILT(c);
    const Plan& p = c->plan;
    const Graph& g = c->training.graph;
    ASSERT_EQ(p.stages.size(), 2u);  // rank 0 alone is stage 0: the sinks need no stage of their own
    EXPECT_EQ(p.pipeline_stages, 2);
    EXPECT_EQ(p.stages[0].ToString(), "cpu 0");
    EXPECT_EQ(p.stages[1].ToString(), "cpu 1");

    // Forward nodes by glob, backward nodes with the forward node they differentiate.
    auto first_stage = [&](const fr::ir::Node& n) {
      for (const std::string& glob : tc.first)
        if (fr::GlobMatch(glob, n.name)) return true;
      return false;
    };
    for (const TaskDesc& t : p.tasks) {
      if (t.kind != TaskKind::kCompute) continue;
      const fr::ir::Node& n = g.node(t.logical);
      if (n.phase == fr::ir::Phase::kForward) {
        EXPECT_EQ(t.rank, first_stage(n) ? 0 : 1) << n.name;
      } else if (n.phase == fr::ir::Phase::kBackward && n.op == fr::OpKind::kAdd && g.value(n.out[0]).grad_of >= 0) {
        // A gradient sum goes with its parts when they were made on one stage, else with the
        // forward node whose output's gradient it sums.
        std::set<int> parts;
        for (ValueId part : n.in) parts.insert(Placed(p, part).stage);
        EXPECT_EQ(t.rank, parts.size() == 1 ? *parts.begin() : (first_stage(g.node(n.origin)) ? 0 : 1)) << n.name;
      } else if (n.phase == fr::ir::Phase::kBackward && n.origin >= 0) {
        EXPECT_EQ(t.rank, first_stage(g.node(n.origin)) ? 0 : 1) << n.name;
      } else if (n.phase == fr::ir::Phase::kLoss) {
        EXPECT_EQ(t.rank, 1) << n.name;
      }
    }

    // Every edge between the stages is send-recv; the activation crosses forward and its gradient
    // backward, each with the activation's bytes, every micro-batch.
    const ValueId act = g.Find(tc.activation);
    ASSERT_NE(act, fr::ir::kNoValue);
    int forward = 0, backward = 0;
    for (const BoxingEdge& e : p.edges) {
      SCOPED_TRACE(g.value(e.value).name);
      ASSERT_NE(e.src_stage, e.dst_stage);  // one rank per stage: nothing to box within a stage
      EXPECT_EQ(e.strategy, "send-recv");
      if (e.value == act) {
        ++forward;
        EXPECT_EQ(e.src_stage, 0);
        EXPECT_EQ(e.bytes_per_rank, tc.activation_bytes);
        EXPECT_FALSE(e.per_step);
      } else if (!e.per_step && g.type(e.value).shape.rank() > 0) {
        ++backward;  // the gradient flowing back into stage 0
        EXPECT_EQ(e.src_stage, 1);
        EXPECT_EQ(g.type(e.value).shape, g.type(act).shape);
        EXPECT_EQ(e.bytes_per_rank, tc.activation_bytes);
      } else {
        EXPECT_LE(e.bytes_per_rank, 4);  // scalars: the loss, norms, the clip coefficient
      }
      // The movement is a send on the producer's rank and a receive on the consumer's.
      for (const TaskDesc& t : p.tasks) {
        if (!Moves(p, t, e.value)) continue;
        EXPECT_TRUE(t.move.op == fr::boxing::Op::kSend || t.move.op == fr::boxing::Op::kRecv) << t.name;
        EXPECT_EQ(t.move.peer, 1 - t.rank) << t.name;
      }

      // Registers on a micro-batch edge between stages have one slot per stage, at both ends, so
      // stage 0 can run micro-batch m+1 while stage 1 holds m (plan/lower.h).
      if (e.per_step || e.dst_stage >= 2) continue;
      for (int r : Placed(p, e.value).regsts) EXPECT_EQ(p.regsts[static_cast<size_t>(r)].regst_num, 2) << "producer's";
      for (const TaskDesc& t : p.tasks) {
        if (t.kind == TaskKind::kBoxing && t.move.op == fr::boxing::Op::kRecv && Moves(p, t, e.value)) {
          EXPECT_EQ(p.regsts[static_cast<size_t>(t.out[0])].regst_num, 2) << "received";
        }
      }
    }
    EXPECT_EQ(forward, 1);
    EXPECT_EQ(backward, 1);
    // A register that stays within its stage keeps one slot, unless the stage's backward reads it:
    // then stage k keeps it for up to S - k micro-batches, so that its forward can run ahead of
    // its backward while the later stages work (plan/lower.h).
    const auto consumers = g.Consumers();
    int saved = 0;
    for (const fr::ir::ValuePlacement& vp : p.values) {
      const fr::ir::Value& v = g.value(vp.value);
      if (v.producer < 0 || g.node(v.producer).phase != fr::ir::Phase::kForward || !EdgesOf(p, vp.value).empty()) continue;
      bool read_by_backward = false;
      for (fr::ir::NodeId u : consumers[static_cast<size_t>(vp.value)])
        read_by_backward |= g.node(u).phase == fr::ir::Phase::kBackward;
      saved += read_by_backward;
      for (int r : vp.regsts)
        EXPECT_EQ(p.regsts[static_cast<size_t>(r)].regst_num, read_by_backward ? 2 - vp.stage : 1) << v.name;
    }
    EXPECT_GT(saved, 0);

    int64_t on_1 = 0;
    for (const auto& pg : c->training.params) on_1 += Placed(p, pg.param).stage == 1;
    EXPECT_EQ(on_1, tc.params_on_1);
    EXPECT_EQ(p.BytesMoved(0), tc.moved[0]);
    EXPECT_EQ(p.BytesMoved(1), tc.moved[1]);
  }
}

// ---------------------------------------------------------------------------------------------
// Tensor parallel from one hint: fc1.weight [128, 64] (ONNX Gemm, transB: [out, in]) split on its
// output features over 2 ranks, nothing else hinted. Megatron's layout must fall out: fc1 is
// column-parallel (x replicated, output split on features), fc2's weight [128, 128] is split on
// its input features (S(1) in the [out, in] layout: row-parallel), so fc2 reads fc1's activation
// with no movement and produces partial sums; one all-reduce follows the pair, per micro-batch:
//   [32, 128] f32 = 16384 B, all-reduce factor 2(p-1)/p = 1 on 2 ranks -> 16384 B per rank per
//   micro-batch, 32768 B per step (2 micro-batches).
// The backward mirrors it: no movement of fc1/fc2's activations, weights or gradients.

TEST(Plan, TensorParallel_1n2d) {
  auto c = Build("configs/mlp.yaml", 2, {"parallel.sbp={fc1.weight: [\"S(0)\"]}"});
  ASSERT_BUILT(c);
  const Plan& p = c->plan;
  const Graph& g = c->training.graph;
  const ValueId w1 = g.Find("fc1.weight"), w2 = g.Find("fc2.weight");
  EXPECT_EQ(Placed(p, w1).sbp.ToString(), "[S(0)]");
  EXPECT_EQ(Placed(p, w2).sbp.ToString(), "[S(1)]") << "fc2 row-parallel";
  EXPECT_EQ(Placed(p, g.Find("/fc1/Gemm_output_0")).sbp.ToString(), "[S(1)]");
  EXPECT_EQ(Placed(p, g.Find("/Relu_output_0")).sbp.ToString(), "[S(1)]");
  EXPECT_EQ(Placed(p, g.Find("/fc2/Gemm_output_0")).sbp.ToString(), "[P]");
  for (const TaskDesc& t : p.tasks) {
    if (t.kind != TaskKind::kVariable || (t.param != w1 && t.param != w2)) continue;
    fr::Shape half = t.param == w1 ? fr::Shape{64, 64} : fr::Shape{128, 64};
    EXPECT_EQ(p.regsts[static_cast<size_t>(t.out[0])].type.shape, half) << t.name;
    EXPECT_EQ(p.regsts[static_cast<size_t>(t.in[1].regst)].type.shape, half) << "its gradient";
  }

  // The pair's one all-reduce.
  const ValueId h2 = g.Find("/fc2/Gemm_output_0");
  auto e = EdgesOf(p, h2);
  ASSERT_EQ(e.size(), 1u);
  EXPECT_EQ(e[0]->strategy, "all-reduce");
  EXPECT_EQ(e[0]->dst.ToString(), "[B]");
  EXPECT_FALSE(e[0]->per_step);
  EXPECT_EQ(e[0]->bytes_per_rank, 16384);
  for (int r = 0; r < 2; ++r) EXPECT_EQ(MovedFor(p, h2, r), 32768) << "rank " << r;

  // Nothing else moves bytes for fc1 and fc2: not their activations, weights or gradients.
  for (const BoxingEdge& x : p.edges) {
    const std::string& name = g.value(x.value).name;
    EXPECT_TRUE(KnownStrategy(x.strategy)) << name << ": " << x.strategy;
    if (x.value == h2) continue;
    bool pair = name.rfind("fc1.", 0) == 0 || name.rfind("fc2.", 0) == 0 || name.rfind("/fc1/", 0) == 0 ||
                name.rfind("/fc2/", 0) == 0 || name.rfind("/Relu/", 0) == 0 || name == "/Relu_output_0";
    if (pair) {
      EXPECT_EQ(x.bytes_per_rank, 0) << name << ": " << x.strategy;
    }
  }
  Record("configs/mlp.yaml, fc1.weight: [S(0)] on 2 ranks", *c);
}


// gpt_mini from hints on its QKV and FC weights only. Tensor parallelism pays where a micro-batch's
// activations are small next to the weights and collectives are cheap: one sequence per
// micro-batch, and the cluster description of a fast interconnect (on this machine's own
// description, or with 8 sequences per micro-batch, data parallelism with the hinted weights
// gathered once a step costs less, and the compiler picks it). The hint names the fused QKV
// projection, which ir::Rewrite then splits into q, k and v, each column-parallel: attention
// falls out Megatron's way, heads split, the output projection row-parallel with one all-reduce
// after it. The MLP is not Megatron's: the compiler replicates it and gathers the FC weight once a
// step, which by its cost model is cheaper than the MLP forced into Megatron's layout (two
// all-reduces per micro-batch); the test checks that.
const std::vector<std::string> kFastInterconnect = {
    "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
    "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6", "cluster.op_overhead=0",
    "train.global_batch=2", "train.micro_batch=1"};

TEST(Plan, GptTensorParallelFromQkvFcHints_1n2d) {
  const std::string qkv_fc = "\"/blocks.*/attn/qkv/MatMul:1\": [\"S(1)\"], \"/blocks.*/mlp/fc/MatMul:1\": [\"S(1)\"]";
  auto with = [&](std::string hints) {
    std::vector<std::string> set = kFastInterconnect;
    set.push_back("parallel.sbp={" + hints + "}");
    return set;
  };
  auto c = Build("configs/gpt.yaml", 2, with(qkv_fc));
  ASSERT_BUILT(c);
  const Plan& p = c->plan;
  const Graph& g = c->training.graph;
  auto sig = [&](const std::string& node) {
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (g.nodes[n].name == node) return p.node_sig[n];
    ADD_FAILURE() << "no node " << node;
    return std::string();
  };
  for (int b = 0; b < 2; ++b) {
    const std::string blk = "/blocks." + std::to_string(b);
    SCOPED_TRACE(blk);
    for (int j = 0; j < 3; ++j) {  // q, k and v: column-parallel, each by heads
      const std::string part = "[" + std::to_string(j) + "]";
      EXPECT_EQ(sig(blk + "/attn/qkv/MatMul" + part), "([B], [S(1)]) -> ([S(2)])");
    }
    EXPECT_EQ(sig(blk + "/attn/MatMul"), "([S(1)], [S(1)]) -> ([S(1)])") << "scores, per head";
    EXPECT_EQ(sig(blk + "/attn/Softmax"), "([S(1)], [B]) -> ([S(1)])");
    EXPECT_EQ(sig(blk + "/attn/MatMul_1"), "([S(1)], [S(1)]) -> ([S(1)])");
    EXPECT_EQ(sig(blk + "/attn/proj/MatMul"), "([S(2)], [S(0)]) -> ([P])") << "row-parallel";
  }
  // The hinted weights stay split: each rank holds half of every q, k, v and FC weight.
  int hinted = 0;
  for (const fr::ir::Node& n : g.nodes) {
    const bool qkv = n.split_from.find("/attn/qkv/MatMul") != std::string::npos;
    if (n.phase != fr::ir::Phase::kForward || !(qkv || n.name.ends_with("/mlp/fc/MatMul"))) continue;
    EXPECT_EQ(Placed(p, n.in[1]).sbp.ToString(), "[S(1)]") << n.name;
    ++hinted;
  }
  EXPECT_EQ(hinted, 2 * 4);
  const double chosen = p.predicted.step_s;
  auto megatron = Build("configs/gpt.yaml", 2,
                        with(qkv_fc + ", \"/blocks.*/mlp/proj/MatMul:1\": [\"S(0)\"], " +
                             "\"/blocks.*/mlp/act/Gelu:0\": [\"S(2)\"], \"/blocks.*/mlp/fc/MatMul:0\": [B]"));
  ASSERT_BUILT(megatron);
  const double forced = megatron->plan.predicted.step_s;
  std::printf("[ record ] predicted step: %.3f ms as chosen, %.3f ms with the MLP forced to Megatron's layout\n",
              chosen * 1e3, forced * 1e3);
  EXPECT_LE(chosen, forced) << "the compiler's MLP layout costs more than Megatron's";
  Record("configs/gpt.yaml, QKV and FC weights [S(1)] on 2 ranks, fast interconnect, micro-batch 1", *c);
}

// ---------------------------------------------------------------------------------------------
// Bad parallel input: Status::Invalid in-process, exit code 2 from the binary, and a message that
// starts with its component and names the key or tensor at fault.

struct BadCase {
  const char* what;
  int ranks;
  std::vector<std::string> set;
  const char* component;           // the message's first word
  std::vector<std::string> names;  // each must appear in the message
};

const BadCase kBad[] = {
    {"ranks do not fit the mesh", 4, {"parallel.mesh=[3]"}, "[config]", {"configs/mlp.yaml", "parallel.mesh", "3 ranks", "4"}},
    {"split axis out of range", 4, {"parallel.sbp={x: [\"S(5)\"]}"}, "[sbp]", {"'x'", "S(5)", "[32, 64]", "axis 5"}},
    {"unknown node glob in stages", 2, {"parallel.stages=[[\"/nope/*\"], [\"*\"]]"}, "[config]",
     {"parallel.stages", "stage 0", "'/nope/*'", "matches no node"}},
    {"a data input hinted partial", 2, {"parallel.sbp={x: [\"P\"]}"}, "[sbp]",
     {"op '/fc1/Gemm' (Gemm)", "takes its inputs as they are", "'x' is hinted [P]", "accepts:"}},
    {"hint glob matches nothing", 4, {"parallel.sbp={\"nothing*\": [\"S(0)\"]}"}, "[sbp]", {"'nothing*'", "matches no tensor"}},
    {"hint on a node input index past size_t", 2, {"parallel.sbp={\"/fc1/Gemm:99999999999999999999999\": [\"B\"]}"}, "[sbp]",
     {"'/fc1/Gemm:99999999999999999999999'", "node '/fc1/Gemm' has no input 99999999999999999999999"}},
    {"hint with the wrong number of mesh axes", 4, {"parallel.sbp={x: [\"S(0)\", \"B\"]}"}, "[config]",
     {"parallel.sbp.x", "2 entries", "mesh has 1 axis"}},
    {"hint the producing op cannot honour", 2, {"parallel.sbp={x: [\"S(0)\"], /Relu_output_0: [\"P\"]}"}, "[sbp]",
     {"'/Relu_output_0'", "[P]", "op '/Relu' (Relu)", "(S(0)) -> S(0)", "(B) -> B"}},
};

using fr::testing::Flowrun;
using fr::testing::Output;

TEST(Plan, BadParallelInput) {
  for (const BadCase& tc : kBad) {
    SCOPED_TRACE(tc.what);
    auto c = Build("configs/mlp.yaml", tc.ranks, tc.set);
    ASSERT_FALSE(c.ok());
    const fr::Status& s = c.status();
    EXPECT_EQ(s.code(), fr::Code::kInvalidInput);
    EXPECT_EQ(s.exit_code(), 2);
    EXPECT_EQ(s.message().rfind(std::string(tc.component) + " ", 0), 0u) << s.message();
    for (const std::string& name : tc.names) EXPECT_NE(s.message().find(name), std::string::npos) << name << " in: " << s.message();

    std::vector<std::string> args = {"plan", "configs/mlp.yaml", "--ranks", std::to_string(tc.ranks)};
    for (const std::string& kv : tc.set) args.insert(args.end(), {"--set", kv});
    Output r = Flowrun(args);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_EQ(r.out, "flowrun: " + s.message() + "\n") << "the binary reports what Compile does";
  }
}

// ---------------------------------------------------------------------------------------------
// Serialization (plan/plan_serialize.h): the same config compiles to the same bytes; anything that
// changes the plan changes the hash.

TEST(Plan, Serialize_1n4d) {
  // FNV-1a 64 reference values (the FNV authors' test vectors).
  EXPECT_EQ(fr::Fnv1a64(""), 0xcbf29ce484222325ull);
  EXPECT_EQ(fr::Fnv1a64("a"), 0xaf63dc4c8601ec8cull);
  EXPECT_EQ(fr::Fnv1a64("foobar"), 0x85944171f73967e8ull);

  const std::vector<std::string> dp = {"parallel.sbp={x: [\"S(0)\"]}"};
  auto a = Build("configs/mlp.yaml", 4, dp);
  auto b = Build("configs/mlp.yaml", 4, dp);
  ASSERT_BUILT(a);
  ASSERT_BUILT(b);
  const std::string bytes = fr::ir::SerializePlan(a->plan);
  EXPECT_GT(bytes.size(), 104488u) << "holds at least the initial parameter pieces";
  EXPECT_EQ(bytes, fr::ir::SerializePlan(b->plan));
  EXPECT_EQ(fr::ir::PlanHash(a->plan), fr::ir::PlanHash(b->plan));
  {  // the hash covers the parameter pieces' values, not only their types
    fr::ir::Plan c = a->plan;
    size_t k = 0;
    while (k < c.consts.size() && (c.consts[k].dtype() != fr::DType::kF32 || c.consts[k].numel() == 0)) ++k;
    ASSERT_LT(k, c.consts.size());
    fr::Tensor changed(c.consts[k].dtype(), c.consts[k].shape());
    changed.CopyFrom(c.consts[k]);
    changed.data<float>()[0] += 1.0f;
    c.consts[k] = changed;
    EXPECT_NE(fr::ir::PlanHash(c), fr::ir::PlanHash(a->plan));
  }
  std::printf("[ record ] mlp.yaml data parallel on 4 ranks: %zu bytes, hash %016llx\n", bytes.size(),
              static_cast<unsigned long long>(fr::ir::PlanHash(a->plan)));

  struct Other { const char* what; const char* config; int ranks; std::vector<std::string> set; };
  const Other others[] = {
      {"another config", "configs/mlp_ln_gelu.yaml", 4, dp},
      {"another rank count", "configs/mlp.yaml", 2, dp},
      {"another layout", "configs/mlp.yaml", 4, {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", \"B\"]}"}},
      {"one device", "configs/mlp.yaml", 1, {}},
  };
  std::set<uint64_t> seen = {fr::ir::PlanHash(a->plan)};
  for (const Other& o : others) {
    SCOPED_TRACE(o.what);
    auto c = Build(o.config, o.ranks, o.set);
    ASSERT_BUILT(c);
    EXPECT_TRUE(seen.insert(fr::ir::PlanHash(c->plan)).second);
  }

  // Small edits anywhere in the plan show.
  Plan p = a->plan;
  p.regsts.back().regst_num += 1;
  EXPECT_NE(fr::ir::PlanHash(p), fr::ir::PlanHash(a->plan)) << "a register count";
  p = a->plan;
  p.consts[0] = p.consts[0].Clone();
  p.consts[0].data<float>()[0] += 1;
  EXPECT_NE(fr::ir::PlanHash(p), fr::ir::PlanHash(a->plan)) << "a parameter's initial value";
  p = a->plan;
  auto boxing = std::find_if(p.tasks.rbegin(), p.tasks.rend(), [](const TaskDesc& t) { return t.kind == TaskKind::kBoxing; });
  ASSERT_NE(boxing, p.tasks.rend());
  boxing->move.tag += 1;
  EXPECT_NE(fr::ir::PlanHash(p), fr::ir::PlanHash(a->plan)) << "a boxing task's field";
}

// A micro-batch's gradient made by MatMul, SumTo or GatherGrad and read only by its accumulator
// in the layout it keeps is made by the accumulator's task, adding into the step's sum (the node
// marked "accumulate"): no task of its own, no register, no boxing. gpt_mini on one rank and data
// parallel on two: 19 of 29 (the 10 LayerNorm gradients come from a node with three outputs). A
// gradient that moves before it is accumulated stays apart: on the 2 x 2 mesh of
// GradientsIntoAccumulatorsOverlap_2x2, all but three are all-reduced over axis 0 first; the
// embeddings' and blocks.0.attn.proj.bias's (256 bytes, whose once-a-step all-reduce runs
// through shared memory, cluster.shared_allreduce) are summed first and reduced once a step.
TEST(Plan, GradientOpsRunInTheirAccumulators) {
  struct Case {
    std::vector<std::string> set;
    int ranks, folded_at_least, folded_at_most;
  };
  for (const Case& tc : {Case{{}, 1, 19, 19}, Case{{"parallel.sbp={idx: [\"S(0)\"]}"}, 2, 19, 19},
                         Case{{"parallel.mesh=[2, 2]", "parallel.sbp={idx: [\"S(0)\", B]}", "train.micro_batch=16",
                               "cluster.flops=3.7e+10", "cluster.bandwidth={intra: 1.5e+09, inter: 1.5e+09}",
                               "cluster.latency={intra: 1.0e-04, inter: 1.0e-04}", "cluster.p2p_latency=1.1e-04", "cluster.op_overhead=1.0e-05",
                               "cluster.element_seconds={stream: 2.0e-10, special: 1.7e-09}",
                               "cluster.busy_speedup=[2.41, 1.92, 1.21, 1.00]"},
                              4, 3, 3}}) {
    SCOPED_TRACE(testing::Message() << tc.ranks << " rank(s)");
    auto c = Build("configs/gpt.yaml", tc.ranks, tc.set);
    ASSERT_BUILT(c);
    const Plan& p = c->plan;
    const Graph& g = c->training.graph;
    std::set<fr::ir::NodeId> with_tasks;
    for (const TaskDesc& t : p.tasks)
      if (t.kind == TaskKind::kCompute) with_tasks.insert(t.logical);
    int folded = 0;
    for (const TaskDesc& t : p.tasks) {
      if (t.kind != TaskKind::kCompute || g.node(t.logical).op != fr::OpKind::kAccumulate) continue;
      const fr::ir::Node& run = p.nodes[static_cast<size_t>(t.node)];
      if (run.op == fr::OpKind::kAccumulate) {
        EXPECT_EQ(run.attrs.Int("accumulate"), 0) << run.name;
        continue;
      }
      const ValueId grad = g.node(t.logical).in[0];
      const fr::ir::Node& made = g.node(g.value(grad).producer);
      EXPECT_EQ(run.op, made.op) << run.name;
      EXPECT_EQ(run.attrs.Int("accumulate"), 1) << run.name;
      EXPECT_EQ(run.name, g.node(t.logical).name);
      EXPECT_TRUE(run.op == fr::OpKind::kMatMul || run.op == fr::OpKind::kSumTo || run.op == fr::OpKind::kGatherGrad)
          << run.name;
      EXPECT_FALSE(with_tasks.count(g.value(grad).producer)) << made.name << " runs twice";
      EXPECT_TRUE(EdgesOf(p, grad).empty()) << made.name << "'s output moves, yet is folded";
      for (const auto& r : p.regsts) EXPECT_NE(r.value, grad) << made.name << " has a register";
      if (t.rank == 0) ++folded;
    }
    EXPECT_GE(folded, tc.folded_at_least);
    EXPECT_LE(folded, tc.folded_at_most);
  }
}

// The cost model's price of one op (sbp::OpSeconds): a matrix product its FLOPs at `flops`; any
// other op the elements it reads and writes, at the stream price, or the special one for ops
// with exp or erf per element; without measured prices, 16 and 80 FLOPs' time per element.
TEST(Plan, OpSecondsByKind) {
  auto c = Build("configs/gpt.yaml", 1, {});
  ASSERT_BUILT(c);
  const Graph& g = c->training.graph;
  fr::sbp::Cluster cl;
  cl.flops = 1e10;
  cl.stream_element = 3e-10;
  cl.special_element = 2e-9;
  auto elements = [&](const fr::ir::Node& n) {
    double e = 0;
    for (ValueId v : n.in)
      if (v != fr::ir::kNoValue) e += static_cast<double>(g.type(v).shape.numel());
    for (ValueId v : n.out) e += static_cast<double>(g.type(v).shape.numel());
    return e;
  };
  fr::sbp::Cluster unmeasured = cl;
  unmeasured.stream_element = unmeasured.special_element = 0;
  std::set<fr::OpKind> seen;
  for (const fr::ir::Node& n : g.nodes) {
    const double s = fr::sbp::OpSeconds(g, n, cl);
    if (n.op == fr::OpKind::kMatMul) {
      EXPECT_GT(fr::sbp::OpFlops(g, n), 0) << n.name;
      EXPECT_DOUBLE_EQ(s, fr::sbp::OpFlops(g, n) / cl.flops) << n.name;
      seen.insert(n.op);
      continue;
    }
    bool special = n.op == fr::OpKind::kGelu || n.op == fr::OpKind::kMaskedSoftmax || n.op == fr::OpKind::kLayerNormalization;
    bool stream = n.op == fr::OpKind::kAdd || n.op == fr::OpKind::kTranspose || n.op == fr::OpKind::kAccumulate;
    if (!special && !stream) continue;
    seen.insert(n.op);
    EXPECT_EQ(fr::sbp::OpFlops(g, n), 0) << n.name;
    EXPECT_DOUBLE_EQ(s, elements(n) * (special ? cl.special_element : cl.stream_element)) << n.name;
    EXPECT_DOUBLE_EQ(fr::sbp::OpSeconds(g, n, unmeasured), elements(n) * (special ? 80 : 16) / cl.flops) << n.name;
  }
  EXPECT_EQ(seen.size(), 7u);
}

// The step model charges the parameters' squared gradient norms, crossing from a later pipeline
// stage to the one that sums them, one latency together, not one each: with their latencies
// taken out, the step is one (the largest) latency shorter.
TEST(Plan, PipelineNormPartsPayOneLatency_1n2d) {
  auto cfg = fr::LoadConfig("configs/gpt.yaml", {"parallel.stages=[[\"/wte/*\", \"/wpe/*\", \"/Add\", \"/blocks.0/*\"], [\"*\"]]"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto c = fr::Prepare(*cfg);
  ASSERT_BUILT(c);
  auto o = fr::Layout(*cfg, c->training, 2);
  ASSERT_TRUE(o.ok()) << o.status().message();
  auto a = fr::sbp::Assign(c->training, *o);
  ASSERT_TRUE(a.ok()) << a.status().message();
  const Graph& g = c->training.graph;
  fr::sbp::Assignment without = *a;
  int parts = 0;
  double most = 0;
  for (fr::sbp::PricedEdge& e : without.edges) {
    if (!e.per_step || !g.ProducedBy(e.value, fr::OpKind::kSquareSum)) continue;
    ++parts;
    most = std::max(most, e.latency);
    e.seconds -= e.latency;
    e.latency = 0;
  }
  EXPECT_GE(parts, 10);  // the second stage's parameters
  ASSERT_GT(most, 0);
  const fr::sbp::StepTime with_t = fr::sbp::ModelStep(g, *o, *a, 2);
  const fr::sbp::StepTime without_t = fr::sbp::ModelStep(g, *o, without, 2);
  EXPECT_NEAR(with_t.stages[0].step_s - without_t.stages[0].step_s, most, 1e-12);
}

// The collectives a run prepares: gpt_mini's 2-rank data parallelism reduces its gradients in 7
// buckets, each a float32 sum all-reduce over both ranks that may go through shared memory with
// its largest act's bytes, laid out as the runtime lays out a bucket (boxing::BucketOffsets: each
// piece at a 64-byte boundary); under a smaller budget only the buckets that fit, in id order, do,
// and the rest take 0 (MPI). The loss's sum rides in the first bucket.
TEST(Plan, SharedMemoryAllReducesStayWithinTheBudget) {
  auto c = Build("configs/gpt.yaml", 2, {"parallel.sbp={idx: [\"S(0)\"]}"});
  ASSERT_BUILT(c);
  const Plan& p = c->plan;
  std::map<int, int64_t> bucket_bytes;  // collective id -> its bytes per rank, laid out
  int64_t all = 0;
  for (const TaskDesc& t : p.tasks) {
    if (t.kind != TaskKind::kBoxing || t.move.collective < 0) continue;
    ASSERT_EQ(t.move.op, fr::boxing::Op::kAllReduce) << t.name;
    std::vector<int64_t> pieces;
    for (int r : t.move.in) pieces.push_back(p.regsts[static_cast<size_t>(r)].bytes());
    int64_t laid_out = 0;
    fr::boxing::BucketOffsets(pieces, &laid_out);
    if (t.rank == 0) all += std::accumulate(pieces.begin(), pieces.end(), int64_t{0});
    EXPECT_LT(laid_out - std::accumulate(pieces.begin(), pieces.end(), int64_t{0}), 64 * static_cast<int64_t>(pieces.size()));
    bucket_bytes[t.move.collective] = laid_out;
  }
  ASSERT_EQ(bucket_bytes.size(), 7u);
  EXPECT_EQ(all, 136960 * 4 + 4);  // every parameter's gradient, once, and the loss's sum
  const fr::actor::CollectiveSetup whole = fr::actor::SetUpCollectives(p);
  ASSERT_EQ(whole.groups.size(), 7u);
  for (const auto& [id, bytes] : bucket_bytes) {
    EXPECT_EQ(whole.groups[static_cast<size_t>(id)], (std::vector<int>{0, 1}));
    EXPECT_EQ(whole.input_bytes[static_cast<size_t>(id)], bytes) << "collective " << id;
  }
  const int64_t budget = 300 << 10;
  const fr::actor::CollectiveSetup part = fr::actor::SetUpCollectives(p, budget);
  int64_t used = 0;
  int admitted = 0;
  for (const auto& [id, bytes] : bucket_bytes) {
    const int64_t got = part.input_bytes[static_cast<size_t>(id)];
    EXPECT_TRUE(got == 0 || got == bytes) << "collective " << id;
    if (got == 0) {
      EXPECT_GT(used + bytes, budget) << "collective " << id << " fits but was left to MPI";
    } else {
      used += got;
      ++admitted;
    }
  }
  EXPECT_LE(used, budget);
  EXPECT_GE(admitted, 1);
  EXPECT_LT(admitted, 7);
}

// A once-a-step float32 sum all-reduce within a node is priced by cluster.shared_allreduce: one
// latency for the step's gradient buckets together and the bytes read (2 ranks x each gradient)
// at its bandwidth. gpt_mini's 2-rank data parallelism: a latency 10 us longer makes the step
// 10 us longer, half the bandwidth adds 2 x 547,840 bytes at it; with the two ranks on two nodes
// the figures change nothing.
TEST(Plan, OnceAStepAllReducesArePricedThroughSharedMemory_1n2d) {
  auto step = [](const std::string& shared, std::vector<std::string> more = {}) {
    more.push_back("parallel.sbp={idx: [\"S(0)\"]}");
    more.push_back("cluster.shared_allreduce=" + shared);
    auto c = Build("configs/gpt.yaml", 2, more);
    EXPECT_TRUE(c.ok()) << c.status().message();
    return c.ok() ? c->plan.predicted.step_s : 0.0;
  };
  const double base = step("{latency: 7.5e-05, bandwidth: 5.3e+09}");
  EXPECT_NEAR(step("{latency: 8.5e-05, bandwidth: 5.3e+09}") - base, 1e-5, 1e-9);
  const double read = 2.0 * 136960 * 4;
  EXPECT_NEAR(step("{latency: 7.5e-05, bandwidth: 2.65e+09}") - base, read / 2.65e9 - read / 5.3e9, 1e-9);
  const std::vector<std::string> two_nodes = {"cluster.devices_per_node=1", "cluster.busy_speedup=[]"};
  EXPECT_EQ(step("{latency: 7.5e-05, bandwidth: 5.3e+09}", two_nodes), step("{latency: 8.5e-04, bandwidth: 1.0e+09}", two_nodes));
}

}  // namespace
