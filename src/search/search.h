// `flowrun search`: how should this model run on this cluster?
//
// The outer loop enumerates layouts whose degrees multiply to the rank count: pipeline stages pp,
// then a stage mesh [dp, tp] (axes of size 1 dropped), the micro-batch count M, and ZeRO on or
// off when dp > 1. Each candidate becomes a config: the data inputs are hinted S(0) along the dp
// axis, the tp axis is left to the compiler (it splits ops where that pays: Megatron's layout
// where weights are large against activations, replication where not), and pipeline stages are
// cut by dynamic programming over the forward ops in order, balancing modelled compute plus the
// transfer of the tensors that cross each cut. SBP assignment (sbp::Assign) then prices the
// candidate. Every candidate is first priced with the assigner's quick passes (greedy starts and
// refinement); the 16 quickest are then re-priced with its group moves too, exactly as `flowrun
// plan` plans them, and the table is ranked on those prices.
//
// The step time of a candidate, from the assignment's per-op compute and per-edge boxing:
//   per stage s:  W_s  one micro-batch's work (forward, backward, their boxing),
//                 U_s  once-a-step work (gradient sync, norm, optimizer);
//   step = M x sum_s W_s + max_s U_s,   bubble = the busiest stage's idle time, M x (sum W - its W).
// This is the runtime's pipeline schedule (boxing/lower.h): an activation a stage saves for its
// backward has one slot, so the stage starts micro-batch m+1 only after its backward of m, which
// waits for the later stages: micro-batches pass through the stages in turn, and pipelines pay
// off only in memory until the runtime schedules 1F1B. Measured, this ranks candidates far better
// than the GPipe formula (M + pp - 1) x max W + max U (README, Searching for a strategy). On CPU
// ranks that share a node's cores, a stage computing while the others wait gets
// their cores: its compute in W runs cluster.busy_speedup[its ranks on the node - 1] times faster
// (once-a-step work runs with every rank busy). Parameters are ready when the step
// starts, so their movements to their readers (ZeRO's gathers) are in flight together and pay
// one latency per stage, not one each. With one stage and no parameter movement, the step is
// the assignment's own total, the figure `flowrun plan` prints.
// Memory per device mirrors what the Plan allocates: each parameter piece, its optimizer state,
// and every register the stage's tasks produce (data inputs double-buffered, tensors crossing
// stages with pp slots). Candidates whose batch does not divide, or whose fullest device exceeds
// cluster.memory_gib, are pruned and counted.
#pragma once

#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "cli/config.h"

namespace fr::search {

struct Options {
  int ranks = 0;                       // 0: cluster nodes x devices_per_node, else parallel.ranks
  std::vector<int64_t> micro_batches;  // micro-batch counts to try; empty: 1, 2, 4, ..., 32 that divide
  bool zero = true;                    // also try ZeRO where dp > 1
  int exact = 16;                      // re-price this many of the quickest with the full assignment
};

struct EdgeCost {
  std::string what;       // "fc1 out: [S(1)] -> [S(0)] on stage 0"
  double seconds = 0;     // per step
};

struct StageCost {
  double micro_s = 0;     // W: one micro-batch
  double step_s = 0;      // U: once a step
  double memory = 0;      // bytes, on the stage's fullest device
};

struct Candidate {
  int dp = 1, tp = 1, pp = 1;
  int64_t micro_batches = 1;
  bool zero = false;
  Config config;          // runnable: `mpirun -n RANKS flowrun train` on ConfigToYaml(config)
  std::string pruned;     // why it cannot run; empty when feasible
  bool exact = false;     // priced with the full assignment (else the quick passes only)
  double step_s = 0, compute_s = 0, comm_s = 0, bubble_s = 0, tokens_per_s = 0;
  double memory = 0;      // bytes on the fullest device
  std::vector<StageCost> stages;
  std::vector<EdgeCost> edges;                                 // boxing, costliest first
  std::vector<std::pair<std::string, double>> peak_tensors;    // on the fullest device, largest first
  uint64_t plan_key = 0;  // equal for candidates the assigner planned alike (every op's placement and signature)
  std::string Name() const;  // "dp2 tp2 pp1 m4 zero"
};

struct Outcome {
  int ranks = 0;
  double capacity = 0;              // bytes per device
  std::vector<Candidate> ranked;    // feasible, fastest first
  std::vector<Candidate> pruned;    // with the reason
  double seconds = 0;               // wall time of the search
  double graphs_s = 0, quick_s = 0, exact_s = 0;  // of which: training graphs, quick and full pricing
};

Result<Outcome> Search(const Config& cfg, const Options& opt);

// The ranked table (top `top` rows), the pruning summary, and what failed when nothing fits.
std::string Table(const Outcome& o, int top);
// The winner against the runner-up: per stage, and every boxing edge that differs.
std::string Explain(const Outcome& o);

// Spearman's rank correlation of two equally long series (average ranks for ties).
double Spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fr::search
