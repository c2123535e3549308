// `flowrun search` (src/search/search.h) on the bundled models, in process and through the binary:
// pruning by memory, the written YAML planned back by `flowrun plan`'s pipeline to the same
// prediction, --explain naming the boxing edges that differ, balanced pipeline cuts, bad input.
#include <gtest/gtest.h>
#include <sys/wait.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <map>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "config/config.h"
#include "driver/pipeline.h"
#include "flowrun_cmd.h"
#include "search/search.h"

namespace {

using fr::search::Candidate;
using fr::search::Outcome;

fr::Result<Outcome> SearchFor(const std::string& config, int ranks, const std::vector<std::string>& set = {},
                              int exact = fr::search::Options{}.exact) {
  ASSIGN_OR_RETURN(fr::Config cfg, fr::LoadConfig(config, set));
  fr::search::Options o;
  o.ranks = ranks;
  o.exact = exact;
  return fr::search::Search(cfg, o);
}

#define ASSERT_OK(r) ASSERT_TRUE((r).ok()) << (r).status().message()

bool Contains(const std::string& s, const std::string& part) { return s.find(part) != std::string::npos; }

// By default the 16 quickest candidates are re-priced in full, the rest keep their quick price;
// a leader planned exactly like another is not ranked twice.
TEST(Search, SixteenLeadersInFull_16) {
  auto o = SearchFor("configs/gpt.yaml", 16, {"cluster.nodes=2", "cluster.devices_per_node=8", "cluster.busy_speedup=[]"});
  ASSERT_OK(o);
  ASSERT_GT(o->ranked.size(), 16u);
  int exact = 0, alike = 0;
  for (const Candidate& c : o->ranked) exact += c.exact;
  for (const Candidate& c : o->pruned) {
    if (!c.pruned.starts_with("the same plan as ")) continue;
    ++alike;
    EXPECT_TRUE(c.exact) << c.Name();
    const std::string twin = c.pruned.substr(17);
    const Candidate* kept = nullptr;
    for (const Candidate& r : o->ranked)
      if (r.Name() == twin) kept = &r;
    ASSERT_NE(kept, nullptr) << c.Name() << " " << c.pruned;
    EXPECT_EQ(kept->plan_key, c.plan_key);
    EXPECT_DOUBLE_EQ(kept->step_s, c.step_s) << "one plan, one price";
  }
  EXPECT_EQ(exact + alike, 16);
}

// Every layout of 4 ranks is enumerated: pp x dp x tp = 4, micro-batch counts that divide the
// batch of 64, ZeRO where dp > 1. The ranked list is sorted and feasible; more micro-batches than
// the fewest that fit are dominated (same compute, more per-micro-batch work, no stage overlap).
TEST(Search, EnumeratesAndRanks_4) {
  auto o = SearchFor("configs/mlp.yaml", 4, {}, /*exact=*/1000);
  ASSERT_OK(o);
  EXPECT_EQ(o->ranks, 4);
  std::set<std::string> layouts, ranked;
  for (const Candidate& c : o->ranked) {
    EXPECT_EQ(c.dp * c.tp * c.pp, 4) << c.Name();
    EXPECT_EQ(64 % c.micro_batches, 0) << c.Name();
    EXPECT_GT(c.step_s, 0) << c.Name();
    EXPECT_TRUE(c.pruned.empty());
    EXPECT_TRUE(c.exact) << c.Name() << ": every candidate of this small search is priced in full";
    EXPECT_TRUE(layouts.insert(c.Name()).second) << "twice: " << c.Name();
    ranked.insert(c.Name());
  }
  for (size_t i = 1; i < o->ranked.size(); ++i) EXPECT_LE(o->ranked[i - 1].step_s, o->ranked[i].step_s);
  for (const Candidate& c : o->pruned) {
    EXPECT_TRUE(layouts.insert(c.Name()).second) << "twice: " << c.Name();
    if (c.pruned.starts_with("dominated")) {
      EXPECT_GT(c.micro_batches, 1) << c.Name();
      Candidate fewer = c;
      fewer.micro_batches = 1;
      EXPECT_TRUE(ranked.count(fewer.Name())) << c.Name() << " dominated, but " << fewer.Name() << " not ranked";
    } else {
      // The only other pruning on this model: 32 micro-batches of 2 rows do not split over dp 4.
      EXPECT_TRUE(Contains(c.pruned, "does not split over dp")) << c.Name() << ": " << c.pruned;
    }
  }
  EXPECT_EQ(layouts.size(), 54u) << "(pp, dp, tp) = 6 layouts x 6 counts + ZeRO where dp > 1 (3 x 6)";
  for (const char* want : {"dp4 tp1 pp1 m1", "dp1 tp4 pp1 m1", "dp2 tp2 pp1 m1 zero", "dp1 tp1 pp4 m1", "dp2 tp1 pp2 m1"})
    EXPECT_TRUE(ranked.count(want)) << want;
}

// --mesh keeps the layouts whose stages have that device mesh: 2x2 is dp2 x tp2 in one stage, 2
// is two stages of dp2 or tp2, 1 is a 4-stage pipeline; what does not fit is an error naming --mesh.
TEST(Search, MeshRestrictsLayouts) {
  ASSERT_OK(fr::search::ParseMesh("2x2"));
  EXPECT_EQ(*fr::search::ParseMesh("2x2"), (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(*fr::search::ParseMesh("16"), (std::vector<int64_t>{16}));
  for (const char* bad : {"", "x", "2x", "x2", "2*2", "-2", "2x2x", "99999999"}) {
    auto m = fr::search::ParseMesh(bad);
    ASSERT_FALSE(m.ok()) << bad;
    EXPECT_TRUE(Contains(m.status().message(), "--mesh '" + std::string(bad) + "'")) << m.status().message();
  }
  auto cfg = fr::LoadConfig("configs/mlp.yaml", {});
  ASSERT_OK(cfg);
  auto search = [&](std::vector<int64_t> mesh, int ranks = 4) {
    fr::search::Options o;
    o.ranks = ranks;
    o.mesh = std::move(mesh);
    return fr::search::Search(*cfg, o);
  };
  struct Want {
    std::vector<int64_t> mesh;
    std::set<std::string> layouts;  // dp tp pp of the ranked and planned candidates
  };
  for (const Want& w : {Want{{2, 2}, {"dp2 tp2 pp1"}}, Want{{2}, {"dp2 tp1 pp2", "dp1 tp2 pp2"}},
                        Want{{1}, {"dp1 tp1 pp4"}}, Want{{4}, {"dp4 tp1 pp1", "dp1 tp4 pp1"}}}) {
    auto o = search(w.mesh);
    ASSERT_OK(o);
    ASSERT_FALSE(o->ranked.empty());
    std::set<std::string> seen;
    for (const auto* list : {&o->ranked, &o->pruned})
      for (const Candidate& c : *list) {
        seen.insert("dp" + std::to_string(c.dp) + " tp" + std::to_string(c.tp) + " pp" + std::to_string(c.pp));
        EXPECT_EQ(c.config.parallel.mesh, w.mesh) << c.Name();
      }
    EXPECT_EQ(seen, w.layouts) << w.mesh.size();
  }
  for (auto [mesh, ranks, want] : {std::tuple{std::vector<int64_t>{3}, 4, "3 devices a stage do not divide the 4 ranks"},
                                   std::tuple{std::vector<int64_t>{2, 1}, 4, "write --mesh 2"},
                                   std::tuple{std::vector<int64_t>{2, 2, 2}, 8, "N or AxB"},
                                   std::tuple{std::vector<int64_t>{0}, 4, "N or AxB"},
                                   std::tuple{std::vector<int64_t>{1}, 8, "cuts into at most 5 pipeline stages"}}) {
    auto o = search(mesh, ranks);
    ASSERT_FALSE(o.ok()) << want;
    EXPECT_TRUE(Contains(o.status().message(), "[search] --mesh ")) << o.status().message();
    EXPECT_TRUE(Contains(o.status().message(), want)) << o.status().message();
  }
}

// A search reports how far it has got through Options::progress (`flowrun search` prints it on
// stderr every 10 s): here after every graph and pricing, counting up to the search's own totals.
TEST(Search, ReportsProgress) {
  auto cfg = fr::LoadConfig("configs/mlp.yaml", {});
  ASSERT_OK(cfg);
  fr::search::Options o;
  o.ranks = 4;
  o.progress_every = std::chrono::milliseconds(0);
  std::mutex mu;
  std::vector<std::string> lines;
  o.progress = [&](const std::string& line) {
    std::lock_guard<std::mutex> lock(mu);
    lines.push_back(line);
  };
  auto r = fr::search::Search(*cfg, o);
  ASSERT_OK(r);
  ASSERT_FALSE(lines.empty());
  for (const std::string& l : lines) {
    EXPECT_TRUE(l.starts_with("search: ")) << l;
    EXPECT_TRUE(Contains(l, " training graph(s) built, ") && Contains(l, " candidate(s) priced quickly, ") &&
                Contains(l, " in full, ") && Contains(l, " s so far"))
        << l;
  }
  int exact = 0;
  for (const Candidate& c : r->ranked) exact += c.exact;
  EXPECT_TRUE(Contains(lines.back(), " in full, ")) << lines.back();
  EXPECT_GE(std::stoi(lines.back().substr(lines.back().find("quickly, ") + 9)), exact) << lines.back();
}

// A memory limit between the hungriest and the leanest candidate prunes some and keeps others;
// below every candidate, nothing fits and the table says what fills memory at the peak.
TEST(Search, PrunesByMemory) {
  auto all = SearchFor("configs/mlp.yaml", 4);
  ASSERT_OK(all);
  double lo = 1e30, hi = 0;
  for (const Candidate& c : all->ranked) lo = std::min(lo, c.memory), hi = std::max(hi, c.memory);
  ASSERT_LT(lo, hi);
  const double limit = (lo + hi) / 2;
  auto o = SearchFor("configs/mlp.yaml", 4, {"cluster.memory_gib=" + std::to_string(limit / double(1LL << 30))});
  ASSERT_OK(o);
  int by_memory = 0;
  for (const Candidate& c : o->pruned) {
    if (!Contains(c.pruned, "memory")) continue;
    ++by_memory;
    EXPECT_GT(c.memory, o->capacity) << c.Name();
  }
  EXPECT_GT(by_memory, 0);
  EXPECT_FALSE(o->ranked.empty());
  for (const Candidate& c : o->ranked) EXPECT_LE(c.memory, o->capacity) << c.Name();
  EXPECT_TRUE(Contains(fr::search::Table(*o, 5), std::to_string(by_memory) + " memory over capacity"));

  auto none = SearchFor("configs/mlp.yaml", 4, {"cluster.memory_gib=1e-6"});
  ASSERT_OK(none);
  EXPECT_TRUE(none->ranked.empty());
  std::string t = fr::search::Table(*none, 5);
  EXPECT_TRUE(Contains(t, "nothing fits")) << t;
  EXPECT_TRUE(Contains(t, "cluster.memory_gib")) << t;
  EXPECT_TRUE(Contains(t, "fc2.weight")) << "the largest parameter fills the peak:\n" << t;
}

// The best candidate written as YAML loads back, and `flowrun plan`'s pipeline plans it to the
// prediction the search made: both run the same step model (assign/step.h) on the same assignment.
TEST(Search, WrittenYamlRoundTripsThroughPlan) {
  for (const char* config : {"configs/mlp.yaml", "configs/gpt.yaml"}) {
    SCOPED_TRACE(config);
    auto o = SearchFor(config, 4);
    ASSERT_OK(o);
    ASSERT_FALSE(o->ranked.empty());
    const Candidate* one_stage = nullptr;
    for (const Candidate& c : o->ranked)
      if (c.pp == 1) {
        one_stage = &c;
        break;
      }
    ASSERT_NE(one_stage, nullptr);
    for (const Candidate* c : std::vector<const Candidate*>{&o->ranked.front(), one_stage}) {
      SCOPED_TRACE(c->Name());
      std::string path = testing::TempDir() + "/search_best.yaml";
      std::ofstream(path) << fr::ConfigToYaml(c->config);
      auto back = fr::LoadConfig(path);
      ASSERT_OK(back);
      EXPECT_EQ(fr::ConfigToYaml(*back), fr::ConfigToYaml(c->config));
      EXPECT_EQ(back->parallel.ranks, 4);
      EXPECT_EQ(back->train.micro_batch * c->micro_batches, back->train.global_batch);
      auto plan = fr::Compile(*back, 4);
      ASSERT_OK(plan);
      EXPECT_EQ(plan->plan.ranks, 4);
      EXPECT_EQ(plan->plan.stages.size() >= static_cast<size_t>(c->pp), true);
      EXPECT_NEAR(plan->plan.predicted.step_s, c->step_s, 1e-9 * c->step_s) << "plan and search price the same assignment";
      EXPECT_NEAR(plan->plan.predicted.bubble_s, c->bubble_s, 1e-9 * c->step_s);
    }
  }
}

// --explain: every boxing edge in one of the two plans and not the other is named.
TEST(Search, ExplainNamesTheEdgesThatDiffer) {
  auto o = SearchFor("configs/mlp.yaml", 4);
  ASSERT_OK(o);
  ASSERT_GE(o->ranked.size(), 2u);
  std::string e = fr::search::Explain(*o);
  const Candidate& a = o->ranked[0];
  const Candidate& b = o->ranked[1];
  EXPECT_TRUE(Contains(e, a.Name()) && Contains(e, b.Name())) << e;
  std::set<std::string> in_a, in_b;
  for (const auto& x : a.edges) in_a.insert(x.what);
  for (const auto& x : b.edges) in_b.insert(x.what);
  int differ = 0;
  for (const auto* pair : {&in_a, &in_b}) {
    const auto& other = pair == &in_a ? in_b : in_a;
    for (const std::string& w : *pair) {
      if (other.count(w)) continue;
      ++differ;
      EXPECT_TRUE(Contains(e, w)) << w << "\n" << e;
    }
  }
  EXPECT_GT(differ, 0) << "the two leaders move different tensors\n" << e;
  EXPECT_TRUE(Contains(e, "boxing edges that differ")) << e;
  // An edge both plans share at the same price is not listed.
  for (const auto& x : a.edges)
    for (const auto& y : b.edges)
      if (x.what == y.what && x.seconds == y.seconds) {
        EXPECT_FALSE(Contains(e, x.what)) << x.what;
      }
}

// Pipeline stages are cut where the modelled work balances: for gpt_mini on 2 stages neither
// stage holds more than 3/4 of the forward work, and the cut config plans.
TEST(Search, BalancedPipelineCut) {
  auto o = SearchFor("configs/gpt.yaml", 2);
  ASSERT_OK(o);
  const Candidate* pp2 = nullptr;
  for (const Candidate& c : o->ranked)
    if (c.pp == 2 && c.micro_batches == 1) pp2 = &c;
  ASSERT_NE(pp2, nullptr);
  ASSERT_EQ(pp2->config.parallel.stages.size(), 2u);
  EXPECT_FALSE(pp2->config.parallel.stages[0].empty());
  EXPECT_EQ(pp2->config.parallel.stages[1], std::vector<std::string>{"*"});
  ASSERT_EQ(pp2->stages.size(), 2u);
  double w0 = pp2->stages[0].micro_s, w1 = pp2->stages[1].micro_s;
  EXPECT_LT(std::max(w0, w1) / (w0 + w1), 0.75) << w0 << " " << w1;
  // One micro-batch passes through the stages in turn (assign/step.h), so a step is W0 + W1 + the
  // larger once-a-step work, and the busiest stage idles while the other works.
  double u0 = pp2->stages[0].step_s, u1 = pp2->stages[1].step_s;
  EXPECT_NEAR(pp2->step_s, w0 + w1 + std::max(u0, u1), 1e-12);
  double busiest = w0 + u0 >= w1 + u1 ? w0 : w1;
  EXPECT_NEAR(pp2->bubble_s, w0 + w1 - busiest, 1e-12);
  // A rank per device (no busy_speedup) against 2 ranks sharing 1 core, where a rank computing
  // alone runs 1.6 times as fast: so does a stage's compute while the other waits (its boxing does not).
  auto own = SearchFor("configs/gpt.yaml", 2, {"cluster.devices_per_node=2", "cluster.busy_speedup=[1, 1]"});
  auto shared = SearchFor("configs/gpt.yaml", 2, {"cluster.devices_per_node=2", "cluster.busy_speedup=[1.6, 1]"});
  ASSERT_OK(own);
  ASSERT_OK(shared);
  auto find = [&](const Outcome& out) -> const Candidate* {
    for (const Candidate& c : out.ranked)
      if (c.Name() == pp2->Name()) return &c;
    return nullptr;
  };
  const Candidate* slow = find(*own);
  const Candidate* fast = find(*shared);
  ASSERT_NE(slow, nullptr);
  ASSERT_NE(fast, nullptr);
  EXPECT_LT(fast->stages[0].micro_s, slow->stages[0].micro_s);
  EXPECT_GE(fast->stages[0].micro_s, slow->stages[0].micro_s / 1.6 - 1e-12);
  EXPECT_LT(fast->step_s, slow->step_s);
  auto plan = fr::Compile(pp2->config, 2);
  ASSERT_OK(plan);
}

// A pipeline's stages overlap with more micro-batches (the runtime runs a stage's oldest ready
// micro-batch first and keeps S - k of its activations, plan/lower.h): more micro-batches, up
// to 2 x pp, are priced while they pay, and on a device per rank 4 of them cost less than one micro-batch's work
// four times over, more than one pass through the stages, and less than one micro-batch.
TEST(Search, PipelineMicroBatchesOverlap) {
  auto o = SearchFor("configs/gpt.yaml", 2, {"cluster.devices_per_node=2", "cluster.busy_speedup=[]"}, /*exact=*/1000);
  ASSERT_OK(o);
  const Candidate *m1 = nullptr, *m4 = nullptr;
  for (const Candidate& c : o->ranked) {
    if (c.pp == 2 && !c.zero && c.micro_batches == 1) m1 = &c;
    if (c.pp == 2 && !c.zero && c.micro_batches == 4) m4 = &c;
  }
  ASSERT_NE(m1, nullptr);
  ASSERT_NE(m4, nullptr) << "a pipeline's 4 micro-batches were not priced";
  // A pipeline's counts are priced until one runs slower than the one before.
  std::map<std::string, double> step;
  for (const Candidate& c : o->ranked) step[c.Name()] = c.step_s;
  for (const Candidate& c : o->pruned) {
    if (c.pp == 1 || !c.pruned.starts_with("dominated")) continue;
    if (Contains(c.pruned, "(a pipeline takes at most 2 x pp)")) {
      EXPECT_GT(c.micro_batches, 2 * c.pp) << c.Name();
      continue;
    }
    EXPECT_TRUE(Contains(c.pruned, "(more micro-batches were slower)")) << c.Name() << ": " << c.pruned;
    const std::string by = c.pruned.substr(std::string("dominated by ").size(), c.pruned.find(" (") - std::string("dominated by ").size());
    const Candidate* slower = nullptr;
    for (const Candidate& r : o->ranked)
      if (r.Name() == by) slower = &r;
    ASSERT_NE(slower, nullptr) << c.Name() << ": " << c.pruned;
    EXPECT_LT(slower->micro_batches, c.micro_batches);
    Candidate before = *slower;
    before.micro_batches = slower->micro_batches / 2;
    ASSERT_TRUE(step.count(before.Name())) << c.Name() << ": " << c.pruned;
    EXPECT_GE(slower->step_s, step[before.Name()]) << c.Name();
  }
  const double w0 = m4->stages[0].micro_s, w1 = m4->stages[1].micro_s;
  const double u = std::max(m4->stages[0].step_s, m4->stages[1].step_s);
  EXPECT_LT(m4->step_s, 4 * (w0 + w1) + u);
  EXPECT_GT(m4->step_s, w0 + w1 + u);
  EXPECT_LT(m4->step_s, m1->step_s);
  EXPECT_LT(m4->bubble_s, m1->bubble_s);
}

// With cluster.p2p_wake a pipeline's hops are priced by how long their receiver waited: the MLP's
// 4-stage pipeline, whose stages compute tens of microseconds, gets cheaper with a table whose
// short waits see messages sooner than p2p_latency says; a table that is p2p_latency at every wait
// changes nothing, and neither changes a layout without hops between stages.
TEST(Search, HopsPricedByTheReceiversWait) {
  const std::vector<std::string> base = {"cluster.devices_per_node=4", "cluster.p2p_latency=1.0e-4",
                                         "cluster.busy_speedup=[1.8, 1.8, 1.0, 1.0]"};
  auto with = [&](const std::string& wake) {
    std::vector<std::string> set = base;
    set.push_back("cluster.p2p_wake=" + wake);
    return set;
  };
  auto plain = SearchFor("configs/mlp.yaml", 4, base, /*exact=*/1000);
  auto flat = SearchFor("configs/mlp.yaml", 4, with("[[1.0e-4, 1.0e-4], [1.0e-3, 1.0e-4]]"), 1000);
  auto wake = SearchFor("configs/mlp.yaml", 4, with("[[2.0e-4, 2.0e-5], [9.0e-4, 1.0e-4]]"), 1000);
  ASSERT_OK(plain);
  ASSERT_OK(flat);
  ASSERT_OK(wake);
  std::map<std::string, double> p, f, w;
  for (const Candidate& c : plain->ranked) p[c.Name()] = c.step_s;
  for (const Candidate& c : flat->ranked) f[c.Name()] = c.step_s;
  for (const Candidate& c : wake->ranked) w[c.Name()] = c.step_s;
  ASSERT_TRUE(p.count("dp1 tp1 pp4 m1") && w.count("dp1 tp1 pp4 m1"));
  for (const auto& [name, step] : p) {
    SCOPED_TRACE(name);
    ASSERT_TRUE(f.count(name) && w.count(name));
    EXPECT_DOUBLE_EQ(f[name], step);
    if (Contains(name, " pp1 ")) {
      EXPECT_DOUBLE_EQ(w[name], step);
    }
  }
  // Six hops a step, each to a rank that waited well under 0.2 ms: 80 us cheaper each.
  EXPECT_NEAR(p["dp1 tp1 pp4 m1"] - w["dp1 tp1 pp4 m1"], 6 * 80e-6, 1e-9);
  // --explain's per-edge costs are the step model's: the first hop 80 us cheaper there too.
  auto hop = [](const Outcome& o) {
    for (const Candidate& c : o.ranked)
      if (c.Name() == "dp1 tp1 pp4 m1")
        for (const fr::search::EdgeCost& e : c.edges)
          if (e.what.starts_with("/fc1/Gemm_output_0:")) return e.seconds;
    return -1.0;
  };
  ASSERT_GT(hop(*plain), 0);
  EXPECT_NEAR(hop(*plain) - hop(*wake), 80e-6, 1e-9);
}

using fr::testing::Flowrun;
using fr::testing::Output;

TEST(Search, CommandLine) {
  std::string out = testing::TempDir() + "/search_cli_best.yaml";
  Output r = Flowrun({"search", "configs/mlp.yaml", "--ranks", "4", "--explain", "--out", out});
  ASSERT_EQ(r.code, 0) << r.out;
  for (const char* want : {"rank", "layout", "step ms", "tokens/s", "memory / device", "comm", "bubble", "candidates:",
                           "pruned", "explain:", "search time", "best:"})
    EXPECT_TRUE(Contains(r.out, want)) << want << "\n" << r.out;
  Output p = Flowrun({"plan", out, "--dump"});
  EXPECT_EQ(p.code, 0) << p.out;
  EXPECT_TRUE(Contains(p.out, "predicted step time")) << p.out;

  // --validate runs the top candidates under mpirun and compares: here 2 of them, 6 steps, 1 round.
  Output v = Flowrun({"search", "configs/mlp.yaml", "--ranks", "2", "--validate", "2", "--validate-steps", "6",
                      "--validate-repeats", "1", "--out", ""},
                     "OMPI_ALLOW_RUN_AS_ROOT=1 OMPI_ALLOW_RUN_AS_ROOT_CONFIRM=1 ");
  ASSERT_EQ(v.code, 0) << v.out;
  for (const char* want : {"validate: the top 2 on this machine, 6 steps each under mpirun -n 2", "predicted ms",
                           "measured ms", "Spearman rank correlation, predicted vs measured: ", "the predicted best (",
                           "measured / predicted: ", "spread "})
    EXPECT_TRUE(Contains(v.out, want)) << want << "\n" << v.out;

  // --out is checked before searching: the config it read, or its model, is never replaced.
  for (const char* input : {"configs/mlp.yaml", "models/mlp.onnx"}) {
    Output onto = Flowrun({"search", "configs/mlp.yaml", "--ranks", "2", "--out", input});
    EXPECT_EQ(onto.code, 2) << onto.out;
    EXPECT_TRUE(Contains(onto.out, std::string("[search] --out: '") + input + "' is ")) << onto.out;
    EXPECT_TRUE(Contains(onto.out, "an input of the run: refusing to overwrite it")) << onto.out;
    EXPECT_FALSE(Contains(onto.out, "search time")) << "refused before searching\n" << onto.out;
  }

  Output bad = Flowrun({"search", "configs/mlp_ln_gelu.yaml"});  // no parallel.ranks, no cluster: section
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_TRUE(Contains(bad.out, "[search] configs/mlp_ln_gelu.yaml")) << bad.out;
  EXPECT_TRUE(Contains(bad.out, "--ranks")) << bad.out;
  Output big = Flowrun({"search", "configs/gpt.yaml", "--ranks", "8"});  // its cluster: has 1 x 4 devices
  EXPECT_EQ(big.code, 2) << big.out;
  EXPECT_TRUE(Contains(big.out, "fewer than the 8 ranks")) << big.out;
  Output mesh = Flowrun({"search", "configs/mlp.yaml", "--ranks", "4", "--mesh", "2x2", "--out", ""});
  ASSERT_EQ(mesh.code, 0) << mesh.out;
  EXPECT_TRUE(Contains(mesh.out, "on 4 rank(s), stage mesh 2x2")) << mesh.out;
  EXPECT_TRUE(Contains(mesh.out, "dp2 tp2 pp1 m1")) << mesh.out;
  EXPECT_FALSE(Contains(mesh.out, "dp4")) << mesh.out;
  Output bad_mesh = Flowrun({"search", "configs/mlp.yaml", "--ranks", "4", "--mesh", "2by2"});
  EXPECT_EQ(bad_mesh.code, 2) << bad_mesh.out;
  EXPECT_TRUE(Contains(bad_mesh.out, "--mesh '2by2'")) << bad_mesh.out;
  Output odd = Flowrun({"search", "configs/mlp.yaml", "--ranks", "4", "--micro-batches", "3"});
  EXPECT_EQ(odd.code, 2) << odd.out;
  EXPECT_TRUE(Contains(odd.out, "micro-batch count 3")) << odd.out;
}

}  // namespace
