#include "search/search.h"

#include <algorithm>
#include <array>
#include <atomic>
#include <chrono>
#include <cmath>
#include <cstdio>
#include <limits>
#include <map>
#include <memory>
#include <mutex>
#include <thread>

#include "assign/assign.h"
#include "assign/step.h"
#include "base/hash.h"
#include "base/report.h"
#include "driver/layout.h"
#include "driver/pipeline.h"

namespace fr::search {
namespace {

using ir::NodeId;
using ir::ValueId;
constexpr double kInf = std::numeric_limits<double>::infinity();

// "2x2", "4": how --mesh is written.
std::string MeshText(const std::vector<int64_t>& mesh) {
  std::string s;
  for (int64_t a : mesh) s += (s.empty() ? "" : "x") + std::to_string(a);
  return s;
}

std::vector<int> Divisors(int n) {
  std::vector<int> d;
  for (int i = 1; i <= n; ++i)
    if (n % i == 0) d.push_back(i);
  return d;
}

// Forward ops in order with the modelled seconds of each (forward and the backward derived from
// it) on one device, and the seconds to move what crosses a cut before op i (activations forward,
// their gradients back).
struct CutModel {
  std::vector<NodeId> ops;
  std::vector<double> work;   // per op
  std::vector<double> cross;  // per position i: cost of cutting between ops[i-1] and ops[i]
};

CutModel ModelCuts(const ir::TrainingGraph& tg, const ClusterConfig& cl) {
  const ir::Graph& g = tg.graph;
  CutModel m;
  std::vector<int> pos(g.nodes.size(), -1);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    if (g.nodes[n].phase != ir::Phase::kForward) continue;
    pos[n] = static_cast<int>(m.ops.size());
    m.ops.push_back(static_cast<NodeId>(n));
    m.work.push_back(0);
  }
  const sbp::Cluster cost = ClusterOf(cl);
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    NodeId owner = node.phase == ir::Phase::kForward ? static_cast<NodeId>(n) : node.origin;
    if (owner < 0 || pos[static_cast<size_t>(owner)] < 0) continue;
    m.work[static_cast<size_t>(pos[static_cast<size_t>(owner)])] += sbp::OpSeconds(g, node, cost);
  }
  // A forward value produced at position p and last read (forward) at q crosses every cut in
  // (p, q]: its bytes forward and its gradient's back.
  m.cross.assign(m.ops.size() + 1, 0);
  auto consumers = g.Consumers();
  for (size_t i = 0; i < m.ops.size(); ++i) {
    for (ValueId v : g.node(m.ops[i]).out) {
      int last = static_cast<int>(i);
      for (NodeId u : consumers[static_cast<size_t>(v)])
        if (pos[static_cast<size_t>(u)] >= 0) last = std::max(last, pos[static_cast<size_t>(u)]);
      double bytes = static_cast<double>(g.type(v).shape.numel() * static_cast<int64_t>(SizeOf(g.type(v).dtype)));
      double t = 2 * (bytes / cl.bandwidth_intra + (cl.p2p_latency > 0 ? cl.p2p_latency : cl.latency_intra));
      for (int c = static_cast<int>(i) + 1; c <= last; ++c) m.cross[static_cast<size_t>(c)] += t;
    }
  }
  return m;
}

// Contiguous cut of the forward ops into `pp` stages minimising the busiest stage's modelled time
// (its work plus the transfers at its cuts), by dynamic programming. Returns the first op of each
// stage after the first.
std::vector<size_t> BalancedCuts(const CutModel& m, int pp) {
  const size_t n = m.ops.size();
  std::vector<double> prefix(n + 1, 0);
  for (size_t i = 0; i < n; ++i) prefix[i + 1] = prefix[i] + m.work[i];
  // best[k][i]: the least possible busiest-stage time covering ops [0, i) with k stages.
  std::vector<std::vector<double>> best(static_cast<size_t>(pp) + 1, std::vector<double>(n + 1, kInf));
  std::vector<std::vector<size_t>> from(static_cast<size_t>(pp) + 1, std::vector<size_t>(n + 1, 0));
  best[0][0] = 0;
  for (size_t k = 1; k <= static_cast<size_t>(pp); ++k) {
    for (size_t i = k; i <= n; ++i) {
      for (size_t j = k - 1; j < i; ++j) {
        if (best[k - 1][j] == kInf) continue;
        double stage = prefix[i] - prefix[j] + (j > 0 ? m.cross[j] : 0) + (i < n ? m.cross[i] : 0);
        double t = std::max(best[k - 1][j], stage);
        if (t < best[k][i]) {
          best[k][i] = t;
          from[k][i] = j;
        }
      }
    }
  }
  std::vector<size_t> cuts;
  for (size_t k = static_cast<size_t>(pp), i = n; k > 1; --k) {
    i = from[k][i];
    cuts.push_back(i);
  }
  std::reverse(cuts.begin(), cuts.end());
  return cuts;
}

// Calls f(i) for i in [0, n) on up to `threads` threads (this one included).
template <typename F>
void ParallelFor(size_t n, unsigned threads, F f) {
  std::atomic<size_t> next{0};
  auto worker = [&] {
    for (size_t i = next++; i < n; i = next++) f(i);
  };
  std::vector<std::thread> pool;
  for (unsigned t = 1; t < threads && t < n; ++t) pool.emplace_back(worker);
  worker();
  for (std::thread& t : pool) t.join();
}

// Counts a search's work and passes a line to Options::progress at most every progress_every.
class Progress {
 public:
  Progress(const Options& o, std::chrono::steady_clock::time_point t0)
      : sink_(o.progress), every_(o.progress_every), t0_(t0), last_(t0) {}
  void Graph() { Count(&graphs_); }
  void Priced(bool thorough) { Count(thorough ? &full_ : &quick_); }

 private:
  void Count(std::atomic<int>* n) {
    ++*n;
    if (!sink_) return;
    std::lock_guard<std::mutex> lock(mu_);
    const auto now = std::chrono::steady_clock::now();
    if (now - last_ < every_) return;
    last_ = now;
    const auto seconds = std::chrono::duration_cast<std::chrono::seconds>(now - t0_).count();
    sink_("search: " + std::to_string(graphs_) + " training graph(s) built, " + std::to_string(quick_) +
          " candidate(s) priced quickly, " + std::to_string(full_) + " in full, " + std::to_string(seconds) + " s so far");
  }
  const std::function<void(const std::string&)>& sink_;
  const std::chrono::milliseconds every_;
  const std::chrono::steady_clock::time_point t0_;
  std::atomic<int> graphs_{0}, quick_{0}, full_{0};
  std::mutex mu_;
  std::chrono::steady_clock::time_point last_;  // guarded by mu_
};

struct Prepared {
  Compiled c;
  CutModel cuts;
};

// Equal for layouts the assigner planned alike: stages, each op's stage and signature, micro-batches.
uint64_t PlanKey(const ir::Graph& g, const sbp::AssignOptions& ao, const sbp::Assignment& a, int64_t micro_batches) {
  std::string what;
  for (const sbp::Placement& st : ao.stages) what += st.ToString() + '\xff';
  for (size_t n = 0; n < g.nodes.size(); ++n) what += std::to_string(ao.node_stage[n]) + a.node_sig[n].ToString() + '\xff';
  return Fnv1a64(what + std::to_string(micro_batches));
}

// The step model's times, and the boxing edges by their cost, costliest first.
void SetTimes(const ir::Graph& g, const sbp::Assignment& a, const sbp::StepTime& t, int stages, Candidate* cand) {
  cand->stages.assign(static_cast<size_t>(stages), StageCost{});
  for (int s = 0; s < stages; ++s) {
    cand->stages[static_cast<size_t>(s)].micro_s = t.stages[static_cast<size_t>(s)].micro_s;
    cand->stages[static_cast<size_t>(s)].step_s = t.stages[static_cast<size_t>(s)].step_s;
  }
  cand->step_s = t.step_s;
  cand->bubble_s = t.bubble_s;
  cand->comm_s = t.comm_s;
  cand->compute_s = t.compute_s;
  for (size_t i = 0; i < a.edges.size(); ++i) {
    const sbp::PricedEdge& e = a.edges[i];
    if (e.seconds <= 0) continue;
    std::string where = stages > 1 ? " on stage " + std::to_string(e.dst_stage) : "";
    cand->edges.push_back({g.value(e.value).name + ": " + e.have.ToString() + " -> " + e.want.ToString() + where +
                               (e.per_step ? ", per step" : ", per micro-batch"),
                           t.edge_s[i]});
  }
  std::sort(cand->edges.begin(), cand->edges.end(), [](const EdgeCost& x, const EdgeCost& y) {
    return x.seconds != y.seconds ? x.seconds > y.seconds : x.what < y.what;
  });
}

// A tensor a stage's device 0 holds while nodes born..dies run (0 .. N-1: all step).
struct Held {
  std::string name;
  double bytes;
  int born, dies;
};

// What each stage's device 0 holds (uneven splits give it the most), as ir::Plan::MemoryOf
// counts it: parameters, optimizer state, per-step values, the loader's double buffer, pipeline
// edges (a slot per stage) and what stage s keeps for its backward (S - s slots, at most M) all
// step; a per-micro-batch value from its producer to its last consumer, in node order.
std::vector<std::vector<Held>> HeldTensors(const ir::TrainingGraph& tg, const sbp::AssignOptions& ao, const sbp::Assignment& a,
                                           int64_t micro_batches) {
  const ir::Graph& g = tg.graph;
  const int S = static_cast<int>(ao.stages.size()), N = static_cast<int>(g.nodes.size());
  std::vector<std::vector<Held>> held(static_cast<size_t>(S));
  auto piece = [&](ValueId v, const sbp::NdSbp& nd, int stage) {
    const sbp::Placement& p = ao.stages[static_cast<size_t>(stage)];
    return static_cast<double>(sbp::PieceShape(g.type(v).shape, nd, p, 0).numel() * static_cast<int64_t>(SizeOf(g.type(v).dtype)));
  };
  std::map<ValueId, int> updates;
  std::vector<bool> is_update(g.nodes.size(), false);
  for (const ir::ParamGrad& pg : tg.params) {
    updates[pg.param] = static_cast<int>(g.node(pg.update).out.size());
    is_update[static_cast<size_t>(pg.update)] = true;
  }
  const std::vector<std::vector<ir::NodeId>> consumers = g.Consumers();
  auto span = [&](ValueId v, bool whole_step) {
    const ir::Value& val = g.value(v);
    if (whole_step || val.producer < 0 || consumers[static_cast<size_t>(v)].empty()) return std::make_pair(0, N - 1);
    return std::make_pair(static_cast<int>(val.producer), static_cast<int>(consumers[static_cast<size_t>(v)].back()));
  };
  for (size_t v = 0; v < g.values.size(); ++v) {
    const ir::Value& val = g.values[v];
    if (!a.value_sbp[v].size() || val.kind == ir::ValueKind::kConst) continue;
    const int st = a.value_stage[v];
    double bytes = piece(static_cast<ValueId>(v), a.value_sbp[v], st);
    bool whole_step = true;
    if (val.kind == ir::ValueKind::kParam) {
      auto it = updates.find(static_cast<ValueId>(v));
      bytes *= 1 + (it == updates.end() ? 0 : it->second);  // the parameter and its optimizer state
    } else if (val.kind == ir::ValueKind::kInput) {
      bytes *= 2;  // the loader fills one while the step reads the other
    } else if (val.producer >= 0 && is_update[static_cast<size_t>(val.producer)]) {
      continue;  // the update writes the parameter and its state in place
    } else if (val.producer >= 0) {
      const ir::Node& n = g.node(val.producer);
      whole_step = n.phase == ir::Phase::kOptimizer || n.op == OpKind::kAccumulate;
      const int64_t kept = std::min<int64_t>(S - st, micro_batches);  // slots kept for the backward
      if (kept > 1 && n.phase == ir::Phase::kForward) {
        for (ir::NodeId u : consumers[v]) {
          if (g.node(u).phase != ir::Phase::kBackward) continue;
          bytes *= static_cast<double>(kept);
          whole_step = true;
          break;
        }
      }
    }
    const auto [born, dies] = span(static_cast<ValueId>(v), whole_step);
    held[static_cast<size_t>(st)].push_back({val.name, bytes, born, dies});
  }
  for (const sbp::PricedEdge& e : a.edges) {
    if (e.want.any_partial() && !e.have.any_partial()) continue;  // zero-fill reads in place
    double bytes = piece(e.value, e.want, e.dst_stage);
    const bool crosses = e.dst_stage != a.value_stage[static_cast<size_t>(e.value)];
    if (crosses && !e.per_step) bytes *= S;
    const auto [born, dies] = span(e.value, e.per_step || crosses);
    held[static_cast<size_t>(e.dst_stage)].push_back({g.value(e.value).name + " (moved to " + e.want.ToString() + ")", bytes, born, dies});
  }
  return held;
}

// Each stage's peak (the most held at once), the fullest stage's, and the largest tensors held at
// that peak: what is reported when nothing fits.
void SetMemory(const std::vector<std::vector<Held>>& held, int nodes, Candidate* cand) {
  const int S = static_cast<int>(held.size());
  std::vector<int> peak_at(static_cast<size_t>(S), -1);
  for (int s = 0; s < S; ++s) {
    std::vector<double> delta(static_cast<size_t>(nodes) + 1, 0);
    for (const Held& h : held[static_cast<size_t>(s)]) {
      delta[static_cast<size_t>(h.born)] += h.bytes;
      delta[static_cast<size_t>(h.dies) + 1] -= h.bytes;
    }
    double live = 0, peak = -1;
    for (int i = 0; i < nodes; ++i) {
      live += delta[static_cast<size_t>(i)];
      if (live > peak) {
        peak = live;
        peak_at[static_cast<size_t>(s)] = i;
      }
    }
    cand->stages[static_cast<size_t>(s)].memory = std::max(peak, 0.0);
  }
  int fullest = 0;
  for (int s = 0; s < S; ++s)
    if (cand->stages[static_cast<size_t>(s)].memory > cand->stages[static_cast<size_t>(fullest)].memory) fullest = s;
  cand->memory = cand->stages[static_cast<size_t>(fullest)].memory;
  cand->peak_tensors.clear();
  const int at = peak_at[static_cast<size_t>(fullest)];
  for (const Held& h : held[static_cast<size_t>(fullest)])
    if (h.born <= at && at <= h.dies) cand->peak_tensors.emplace_back(h.name, h.bytes);
  std::sort(cand->peak_tensors.begin(), cand->peak_tensors.end(),
            [](const auto& x, const auto& y) { return x.second != y.second ? x.second > y.second : x.first < y.first; });
  if (cand->peak_tensors.size() > 6) cand->peak_tensors.resize(6);
}

// Prices a candidate whose config is set: assignment, stage times, memory. `thorough`: with the
// assigner's group moves, as `flowrun plan` assigns.
void Price(const Prepared& prep, int ranks, bool thorough, sbp::PriceCache* prices, Candidate* cand) {
  const ir::TrainingGraph& tg = prep.c.training;
  const ir::Graph& g = tg.graph;
  auto ao = Layout(cand->config, tg, ranks);
  if (!ao.ok()) {
    cand->pruned = ao.status().message();
    return;
  }
  ao->group_moves = thorough;
  ao->prices = prices;
  Candidate fresh;  // the layout kept, every price cleared (a leader is priced twice)
  fresh.dp = cand->dp;
  fresh.tp = cand->tp;
  fresh.pp = cand->pp;
  fresh.micro_batches = cand->micro_batches;
  fresh.zero = cand->zero;
  fresh.config = std::move(cand->config);
  fresh.exact = thorough;
  *cand = std::move(fresh);
  auto a = sbp::Assign(tg, *ao);
  if (!a.ok()) {
    cand->pruned = a.status().message();
    return;
  }
  cand->plan_key = PlanKey(g, *ao, *a, cand->micro_batches);
  SetTimes(g, *a, sbp::ModelStep(g, *ao, *a, ranks), static_cast<int>(ao->stages.size()), cand);
  cand->tokens_per_s = static_cast<double>(prep.c.tokens_per_step) / cand->step_s;
  SetMemory(HeldTensors(tg, *ao, *a, cand->micro_batches), static_cast<int>(g.nodes.size()), cand);
}

}  // namespace

Result<std::vector<int64_t>> ParseMesh(const std::string& text) {
  std::vector<int64_t> mesh;
  size_t at = 0;
  while (at <= text.size()) {
    size_t end = text.find('x', at);
    if (end == std::string::npos) end = text.size();
    const std::string axis = text.substr(at, end - at);
    if (axis.empty() || axis.size() > 7 || axis.find_first_not_of("0123456789") != std::string::npos) {
      return Status::Invalid("[search] --mesh '" + text + "': expected N or AxB, such as 4 or 2x2");
    }
    mesh.push_back(std::stoll(axis));
    at = end + 1;
  }
  return mesh;
}

std::string Candidate::Name() const {
  std::string s = "dp" + std::to_string(dp) + " tp" + std::to_string(tp) + " pp" + std::to_string(pp) + " m" +
                  std::to_string(micro_batches);
  return zero ? s + " zero" : s;
}

namespace {

double Since(std::chrono::steady_clock::time_point t) {
  return std::chrono::duration<double>(std::chrono::steady_clock::now() - t).count();
}

// The rank count searched for, and the --mesh filter checked against it.
Result<int> SearchedRanks(const Config& cfg, const Options& opt) {
  const ClusterConfig& cl = cfg.cluster;
  const int ranks = opt.ranks > 0 ? opt.ranks
                    : cfg.parallel.ranks > 0 ? static_cast<int>(cfg.parallel.ranks)
                    : cl.given && cl.devices_per_node > 0 ? static_cast<int>(cl.nodes * cl.devices_per_node)
                                                          : 0;
  if (ranks < 1) {
    return Status::Invalid("[search] " + cfg.path +
                           ": how many ranks? give --ranks N, parallel.ranks, or cluster.nodes and cluster.devices_per_node");
  }
  if (cl.given && cl.devices_per_node > 0 && cl.nodes * cl.devices_per_node < ranks) {
    return Status::Invalid("[search] " + cfg.path + ": the cluster has " + std::to_string(cl.nodes) + " x " +
                           std::to_string(cl.devices_per_node) + " devices, fewer than the " + std::to_string(ranks) +
                           " ranks searched for");
  }
  if (opt.mesh.empty()) return ranks;
  const std::string mesh_text = MeshText(opt.mesh);
  int64_t devices = 1;
  for (int64_t a : opt.mesh) devices *= a;
  if (opt.mesh.size() > 2 || devices < 1 || std::any_of(opt.mesh.begin(), opt.mesh.end(), [](int64_t a) { return a < 1; })) {
    return Status::Invalid("[search] --mesh " + mesh_text + ": a stage's mesh is N or AxB (data x tensor parallel)");
  }
  if (opt.mesh.size() == 2 && (opt.mesh[0] == 1 || opt.mesh[1] == 1)) {
    return Status::Invalid("[search] --mesh " + mesh_text + ": an axis of 1 divides nothing; write --mesh " + std::to_string(devices));
  }
  if (ranks % devices) {
    return Status::Invalid("[search] --mesh " + mesh_text + ": " + std::to_string(devices) + " devices a stage do not divide the " +
                           std::to_string(ranks) + " ranks");
  }
  return ranks;
}

// The micro-batch counts to try: the options' or every power of two up to 32 that divides the
// global batch.
Result<std::vector<int64_t>> MicroBatchCounts(const Config& cfg, const Options& opt) {
  std::vector<int64_t> counts = opt.micro_batches;
  if (counts.empty())
    for (int64_t m = 1; m <= 32; m *= 2)
      if (cfg.train.global_batch % m == 0) counts.push_back(m);
  for (int64_t m : counts) {
    if (m < 1 || cfg.train.global_batch % m) {
      return Status::Invalid("[search] " + cfg.path + ": micro-batch count " + std::to_string(m) +
                             " does not divide train.global_batch (" + std::to_string(cfg.train.global_batch) + ")");
    }
  }
  return counts;
}

// One training graph per micro-batch size, built when a candidate first needs it (counts that are
// dominated are never priced), several in parallel, from the model read and parsed once (every
// graph's parameters read their initial values from it in place).
class Graphs {
 public:
  Graphs(const Config& cfg, std::shared_ptr<const ir::OnnxModel> model, unsigned threads, Progress* progress, double* seconds)
      : cfg_(cfg), model_(std::move(model)), threads_(threads), progress_(progress), seconds_(seconds) {}

  Status Build(std::vector<int64_t> need) {
    const auto t = std::chrono::steady_clock::now();
    std::erase_if(need, [&](int64_t m) { return prepared_.count(m) > 0; });
    std::sort(need.begin(), need.end());
    need.erase(std::unique(need.begin(), need.end()), need.end());
    std::vector<std::unique_ptr<Prepared>> built(need.size());
    std::vector<Status> failed(need.size(), Status::Ok());
    ParallelFor(need.size(), threads_, [&](size_t i) {
      Config c = cfg_;
      c.train.micro_batch = cfg_.train.global_batch / need[i];
      c.parallel = ParallelConfig{};
      Result<Compiled> compiled = Prepare(c, model_);
      if (!compiled.ok()) {
        failed[i] = compiled.status();
        return;
      }
      auto p = std::make_unique<Prepared>();
      p->c = std::move(compiled).value();
      p->cuts = ModelCuts(p->c.training, cfg_.cluster);
      built[i] = std::move(p);
      progress_->Graph();
    });
    for (size_t i = 0; i < need.size(); ++i) {
      RETURN_IF_ERROR(failed[i]);
      prepared_[need[i]] = std::move(built[i]);
    }
    *seconds_ += Since(t);
    return Status::Ok();
  }
  const Prepared& at(int64_t micro_batches) const { return *prepared_.at(micro_batches); }
  const Prepared& first() const { return *prepared_.begin()->second; }

 private:
  const Config& cfg_;
  std::shared_ptr<const ir::OnnxModel> model_;
  unsigned threads_;
  Progress* progress_;
  double* seconds_;
  std::map<int64_t, std::unique_ptr<Prepared>> prepared_;
};

// The pipeline stages of `pp` balanced cuts of the model, as stage globs (the last takes the rest).
std::vector<std::vector<std::string>> StageGlobs(const Prepared& any, int pp) {
  std::vector<std::vector<std::string>> stages;
  if (pp == 1) return stages;
  std::vector<size_t> cuts = BalancedCuts(any.cuts, pp);
  size_t begin = 0;
  for (size_t k = 0; k <= cuts.size(); ++k) {
    size_t end = k < cuts.size() ? cuts[k] : any.cuts.ops.size();
    std::vector<std::string> names;
    if (k + 1 < static_cast<size_t>(pp)) {
      for (size_t i = begin; i < end; ++i) names.push_back(any.c.training.graph.node(any.cuts.ops[i]).name);
    } else {
      names.push_back("*");
    }
    stages.push_back(std::move(names));
    begin = end;
  }
  return stages;
}

// Every layout of `ranks`: pp stages (balanced cuts of `any`), dp x tp per stage, each micro-batch
// count, with and without ZeRO; those --mesh rules out are left out, those that cannot run are
// marked pruned.
std::vector<Candidate> Enumerate(const Config& cfg, const Options& opt, int ranks, const std::vector<int64_t>& counts,
                                 const Prepared& any) {
  std::vector<Candidate> cands;
  for (int pp : Divisors(ranks)) {
    if (static_cast<size_t>(pp) > any.cuts.ops.size()) continue;
    const std::vector<std::vector<std::string>> stages = StageGlobs(any, pp);
    const int per = ranks / pp;
    for (int dp : Divisors(per)) {
      const int tp = per / dp;
      for (int64_t m : counts) {
        for (bool zero : {false, true}) {
          if (zero && (dp == 1 || !opt.zero)) continue;
          Candidate c;
          c.dp = dp;
          c.tp = tp;
          c.pp = pp;
          c.micro_batches = m;
          c.zero = zero;
          c.config = cfg;
          c.config.train.micro_batch = cfg.train.global_batch / m;
          ParallelConfig& par = c.config.parallel;
          par.ranks = ranks;
          par.stages = stages;
          par.mesh.clear();
          if (dp > 1) par.mesh.push_back(dp);
          if (tp > 1) par.mesh.push_back(tp);
          if (par.mesh.empty()) par.mesh.push_back(1);
          par.sbp.clear();
          if (dp > 1) {
            std::vector<std::string> nd = {"S(0)"};
            if (tp > 1) nd.push_back("B");
            for (const auto& [input, field] : cfg.model.inputs) par.sbp.emplace_back(input, nd);
          }
          par.zero = zero;
          if (!opt.mesh.empty() && par.mesh != opt.mesh) continue;
          if (c.config.train.micro_batch % dp) {
            c.pruned = "a micro-batch of " + std::to_string(c.config.train.micro_batch) + " does not split over dp " + std::to_string(dp);
          }
          cands.push_back(std::move(c));
        }
      }
    }
  }
  return cands;
}

bool Faster(const Candidate* a, const Candidate* b) { return a->step_s != b->step_s ? a->step_s < b->step_s : a->Name() < b->Name(); }

// Layouts the assigner planned alike (a tensor-parallel axis it chose to use for data, say) are
// one strategy: the one named by the most data parallelism stands for them.
void MergeSamePlans(std::vector<Candidate>& cands) {
  std::map<uint64_t, Candidate*> planned;
  for (Candidate& c : cands) {
    if (!c.pruned.empty() || !c.exact) continue;
    Candidate*& first = planned[c.plan_key];
    if (!first) {
      first = &c;
      continue;
    }
    Candidate* keep = std::make_tuple(c.dp, -c.tp) > std::make_tuple(first->dp, -first->tp) ? &c : first;
    Candidate* drop = keep == first ? &c : first;
    drop->pruned = "the same plan as " + keep->Name();
    first = keep;
  }
}

}  // namespace

// Phases: the ranks and micro-batch counts; the first training graph (the pipeline cuts are made
// on it); every layout; quick pricing of each layout's chain of micro-batch counts as far as it
// pays; the quickest priced again exactly, as `flowrun plan` will plan them; layouts planned
// alike merged.
Result<Outcome> Search(const Config& cfg, const Options& opt) {
  const auto t0 = std::chrono::steady_clock::now();
  Progress progress(opt, t0);
  Outcome out;
  ASSIGN_OR_RETURN(out.ranks, SearchedRanks(cfg, opt));
  out.capacity = cfg.cluster.memory_gib * static_cast<double>(1LL << 30);
  ASSIGN_OR_RETURN(const std::vector<int64_t> counts, MicroBatchCounts(cfg, opt));

  const unsigned threads = std::max(1u, std::min(std::thread::hardware_concurrency(), 8u));
  const auto t_read = std::chrono::steady_clock::now();
  ASSIGN_OR_RETURN(std::shared_ptr<const ir::OnnxModel> model, ir::ReadOnnx(cfg.model.onnx));
  out.graphs_s += Since(t_read);
  Graphs graphs(cfg, model, threads, &progress, &out.graphs_s);
  RETURN_IF_ERROR(graphs.Build({counts.front()}));

  std::vector<Candidate> cands = Enumerate(cfg, opt, out.ranks, counts, graphs.first());
  if (cands.empty()) {  // only a mesh rules every layout out; any rank count has dp = ranks
    return Status::Invalid("[search] --mesh " + MeshText(opt.mesh) + ": " + cfg.path + "'s model cuts into at most " +
                           std::to_string(graphs.first().cuts.ops.size()) + " pipeline stages, and " +
                           std::to_string(out.ranks) + " ranks with this mesh need more");
  }

  // Candidates are independent and the graphs read only, so they are priced in parallel; their
  // movements repeat, so their boxing prices are shared.
  sbp::PriceCache prices;
  auto price_all = [&](const std::vector<Candidate*>& list, bool thorough) {
    ParallelFor(list.size(), threads, [&](size_t i) {
      Candidate& c = *list[i];
      Price(graphs.at(c.micro_batches), out.ranks, thorough, &prices, &c);
      progress.Priced(thorough);
      if (c.pruned.empty() && c.memory > out.capacity) {
        c.pruned = "memory " + HumanBytes(c.memory) + " per device > capacity " + HumanBytes(out.capacity);
      }
    });
  };
  // Without pipeline stages, more micro-batches compute the same and only add per-micro-batch
  // latency and op overhead, so under the model they never run faster: such a layout's next
  // micro-batch count is priced only when the fewer did not fit in memory. A pipeline's stages
  // overlap more with more micro-batches (assign/step.h) while each adds its overhead: its next
  // count, up to 2 x pp, is priced while the counts so far ran faster each time.
  std::map<std::string, std::vector<Candidate*>> chains;  // "dp tp pp zero" -> by count
  std::vector<Candidate*> batch;
  for (Candidate& c : cands) {
    if (!c.pruned.empty()) continue;
    auto& chain = chains[std::to_string(c.dp) + " " + std::to_string(c.tp) + " " + std::to_string(c.pp) + (c.zero ? " z" : "")];
    if (chain.empty()) batch.push_back(&c);
    chain.push_back(&c);
  }
  std::vector<Candidate*> priced;
  const auto t_quick = std::chrono::steady_clock::now();
  const double graphs_before_quick = out.graphs_s;
  // Pipelines usually get faster over several counts, which the chains reach one at a time: their
  // graphs are built up front, on every thread at once.
  if (std::any_of(batch.begin(), batch.end(), [](const Candidate* c) { return c->pp > 1; })) {
    std::vector<int64_t> all;
    for (const auto& [key, chain] : chains)
      if (chain.front()->pp > 1)
        for (const Candidate* c : chain)
          if (c->micro_batches <= 2 * c->pp) all.push_back(c->micro_batches);
    RETURN_IF_ERROR(graphs.Build(all));
  }
  while (!batch.empty()) {
    std::vector<int64_t> need;
    for (const Candidate* c : batch) need.push_back(c->micro_batches);
    RETURN_IF_ERROR(graphs.Build(need));
    price_all(batch, false);
    priced.insert(priced.end(), batch.begin(), batch.end());
    std::vector<Candidate*> next;
    for (auto& [key, chain] : chains) {
      for (size_t i = 0; i + 1 < chain.size(); ++i) {
        Candidate* c = chain[i];
        if (std::find(batch.begin(), batch.end(), c) == batch.end()) continue;
        // A pipeline's next count while this one ran faster than the one before (or that did not
        // fit), up to 2 x pp micro-batches: the fill and drain are then under a third of the step.
        const bool faster = c->pp > 1 && c->pruned.empty() && chain[i + 1]->micro_batches <= 2 * c->pp &&
                            (i == 0 || !chain[i - 1]->pruned.empty() || c->step_s < chain[i - 1]->step_s);
        if (c->pruned.starts_with("memory") || faster) {
          next.push_back(chain[i + 1]);
        } else {
          const std::string why = c->pp == 1 ? "more micro-batches only add per-micro-batch work"
                                  : chain[i + 1]->micro_batches > 2 * c->pp ? "a pipeline takes at most 2 x pp"
                                                                             : "more micro-batches were slower";
          for (size_t j = i + 1; j < chain.size(); ++j) chain[j]->pruned = "dominated by " + c->Name() + " (" + why + ")";
        }
      }
    }
    batch = std::move(next);
  }
  std::vector<Candidate*> feasible;
  for (Candidate* c : priced)
    if (c->pruned.empty()) feasible.push_back(c);
  std::stable_sort(feasible.begin(), feasible.end(), Faster);
  feasible.resize(std::min(feasible.size(), static_cast<size_t>(std::max(opt.exact, 0))));
  out.quick_s = Since(t_quick) - (out.graphs_s - graphs_before_quick);
  const auto t_exact = std::chrono::steady_clock::now();
  price_all(feasible, true);
  out.exact_s = Since(t_exact);

  MergeSamePlans(cands);
  for (Candidate& c : cands) (c.pruned.empty() ? out.ranked : out.pruned).push_back(std::move(c));
  std::stable_sort(out.ranked.begin(), out.ranked.end(), [](const Candidate& a, const Candidate& b) { return Faster(&a, &b); });
  out.seconds = Since(t0);
  return out;
}

std::string Table(const Outcome& o, int top) {
  std::string s;
  char line[320];
  std::snprintf(line, sizeof line, "%-4s %-22s %10s %12s %22s %7s %7s\n", "rank", "layout", "step ms", "tokens/s",
                "memory / device", "comm", "bubble");
  s += line;
  for (size_t i = 0; i < o.ranked.size() && static_cast<int>(i) < top; ++i) {
    const Candidate& c = o.ranked[i];
    double busy = c.compute_s + c.comm_s;
    std::snprintf(line, sizeof line, "%-4zu %-22s %10s %12.0f %22s %6.0f%% %6.0f%%\n", i + 1, c.Name().c_str(),
                  ((c.exact ? "" : "~") + HumanMs(c.step_s)).c_str(), c.tokens_per_s, (HumanBytes(c.memory) + " / " + HumanBytes(o.capacity)).c_str(),
                  busy > 0 ? 100 * c.comm_s / busy : 0.0, c.step_s > 0 ? 100 * c.bubble_s / c.step_s : 0.0);
    s += line;
  }
  std::map<std::string, int> why;
  for (const Candidate& c : o.pruned) {
    std::string reason = c.pruned.substr(0, c.pruned.find(" per device"));
    if (reason.starts_with("memory")) reason = "memory over capacity";
    else if (reason.find("does not split") != std::string::npos) reason = "batch does not split over dp";
    else if (reason.starts_with("dominated")) reason = "dominated (more micro-batches)";
    else if (reason.starts_with("the same plan")) reason = "planned alike with another";
    ++why[reason];
  }
  s += std::to_string(o.ranked.size() + o.pruned.size()) + " candidates: " + std::to_string(o.ranked.size()) +
       " priced and feasible, " + std::to_string(o.pruned.size()) + " pruned";
  std::string sep = " (";
  for (const auto& [reason, n] : why) {
    s += sep + std::to_string(n) + " " + reason;
    sep = ", ";
  }
  s += o.pruned.empty() ? "\n" : ")\n";
  bool quick = false;
  for (const Candidate& c : o.ranked) quick = quick || !c.exact;
  if (quick) s += "~: priced with the assigner's quick passes only (outside the leaders re-priced in full)\n";
  if (o.ranked.empty() && !o.pruned.empty()) {
    // Nothing fits: the least hungry candidate, and what fills its fullest device.
    const Candidate* least = nullptr;
    for (const Candidate& c : o.pruned)
      if (c.memory > 0 && (!least || c.memory < least->memory)) least = &c;
    s += "nothing fits";
    if (least) {
      s += ": the least memory is " + least->Name() + " at " + HumanBytes(least->memory) + " per device against " +
           HumanBytes(o.capacity) + " (cluster.memory_gib); at its peak:\n";
      for (const auto& [name, bytes] : least->peak_tensors) s += "  " + HumanBytes(bytes) + "  " + name + "\n";
    } else {
      s += ": " + o.pruned.front().Name() + ": " + o.pruned.front().pruned + "\n";
    }
  }
  return s;
}

std::string Explain(const Outcome& o) {
  if (o.ranked.size() < 2) return "explain: fewer than two feasible candidates\n";
  const Candidate& a = o.ranked[0];
  const Candidate& b = o.ranked[1];
  std::string s = "explain: " + a.Name() + " (" + HumanMs(a.step_s) + " ms) against " + b.Name() + " (" + HumanMs(b.step_s) + " ms)\n";
  s += "  per stage: one micro-batch / once a step / memory\n";
  for (size_t k = 0; k < std::max(a.stages.size(), b.stages.size()); ++k) {
    auto cell = [&](const Candidate& c) {
      if (k >= c.stages.size()) return std::string("-");
      const StageCost& st = c.stages[k];
      return HumanMs(st.micro_s) + " ms / " + HumanMs(st.step_s) + " ms / " + HumanBytes(st.memory);
    };
    s += "    stage " + std::to_string(k) + ": " + cell(a) + "  |  " + cell(b) + "\n";
  }
  s += "  bubble " + HumanMs(a.bubble_s) + " ms | " + HumanMs(b.bubble_s) + " ms\n";
  // Edges keyed by what moves; those in one plan only, or priced differently, differ.
  std::map<std::string, std::pair<double, double>> edges;
  for (const EdgeCost& e : a.edges) edges[e.what].first += e.seconds;
  for (const EdgeCost& e : b.edges) edges[e.what].second += e.seconds;
  std::vector<std::pair<std::string, std::pair<double, double>>> diff;
  for (const auto& [what, t] : edges)
    if (std::abs(t.first - t.second) > 1e-12) diff.emplace_back(what, t);
  std::sort(diff.begin(), diff.end(), [](const auto& x, const auto& y) {
    double dx = std::abs(x.second.first - x.second.second), dy = std::abs(y.second.first - y.second.second);
    return dx != dy ? dx > dy : x.first < y.first;
  });
  s += "  boxing edges that differ (ms per step, " + a.Name() + " | " + b.Name() + "): " + std::to_string(diff.size()) + "\n";
  for (const auto& [what, t] : diff) {
    s += "    " + (t.first > 0 ? HumanMs(t.first) : std::string("-")) + " | " + (t.second > 0 ? HumanMs(t.second) : std::string("-")) +
         "  " + what + "\n";
  }
  double ta = 0, tb = 0;
  for (const EdgeCost& e : a.edges) ta += e.seconds;
  for (const EdgeCost& e : b.edges) tb += e.seconds;
  s += "  boxing total " + HumanMs(ta) + " ms | " + HumanMs(tb) + " ms\n";
  return s;
}

double Spearman(const std::vector<double>& a, const std::vector<double>& b) {
  auto ranks = [](const std::vector<double>& x) {
    std::vector<size_t> idx(x.size());
    for (size_t i = 0; i < idx.size(); ++i) idx[i] = i;
    std::sort(idx.begin(), idx.end(), [&](size_t i, size_t j) { return x[i] < x[j]; });
    std::vector<double> r(x.size());
    for (size_t i = 0; i < idx.size();) {
      size_t j = i;
      while (j + 1 < idx.size() && x[idx[j + 1]] == x[idx[i]]) ++j;
      for (size_t k = i; k <= j; ++k) r[idx[k]] = (static_cast<double>(i + j) / 2) + 1;
      i = j + 1;
    }
    return r;
  };
  if (a.size() != b.size() || a.size() < 2) return 0;
  std::vector<double> ra = ranks(a), rb = ranks(b);
  double ma = 0, mb = 0;
  for (size_t i = 0; i < a.size(); ++i) ma += ra[i], mb += rb[i];
  ma /= static_cast<double>(a.size());
  mb /= static_cast<double>(b.size());
  double num = 0, da = 0, db = 0;
  for (size_t i = 0; i < a.size(); ++i) {
    num += (ra[i] - ma) * (rb[i] - mb);
    da += (ra[i] - ma) * (ra[i] - ma);
    db += (rb[i] - mb) * (rb[i] - mb);
  }
  return da > 0 && db > 0 ? num / std::sqrt(da * db) : 0;
}

}  // namespace fr::search
