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
// The step time of a candidate is sbp::ModelStep's (assign/step.h), the figure `flowrun plan`
// prints: per stage s, one micro-batch's work W_s (forward, backward, their boxing), the same C_s
// with every stage busy at once, and the once-a-step work U_s (gradient sync, norm, optimizer);
//   step = sum_s W_s + (M - 1) x max_s C_s + max_s U_s,
// the runtime's 1F1B-like pipeline schedule (plan/lower.h). On CPU ranks that share a node's
// cores, a stage computing while the others wait gets their cores: its compute in W runs
// cluster.busy_speedup[its ranks on the node - 1] times faster. Without stages more micro-batches
// only add per-micro-batch work, so such a layout's next count is priced only when the fewer
// does not fit in memory; a pipeline's next count, up to 2 x pp, while its counts so far got faster.
// Memory per device mirrors what the Plan allocates: each parameter piece, its optimizer state,
// and every register the stage's tasks produce (data inputs double-buffered, tensors crossing
// stages with pp slots, what stage s keeps for its backward with min(pp - s, M)). Candidates whose
// batch does not divide, or whose fullest device exceeds cluster.memory_gib, are pruned and
// counted.
#pragma once

#include <chrono>
#include <functional>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"
#include "config/config.h"

namespace fr::search {

struct Options {
  int ranks = 0;                       // 0: cluster nodes x devices_per_node, else parallel.ranks
  std::vector<int64_t> micro_batches;  // micro-batch counts to try; empty: 1, 2, 4, ..., 32 that divide
  bool zero = true;                    // also try ZeRO where dp > 1
  // Only layouts whose stages have this device mesh (`--mesh 2x2`): [dp, tp] with both above 1,
  // or one axis, [n], for dp n or tp n; pp is what the ranks leave. Empty: every mesh.
  std::vector<int64_t> mesh;
  int exact = 16;                      // re-price this many of the quickest with the full assignment
  // Called with a line such as "search: 2 training graph(s) built, 40 candidate(s) priced quickly,
  // 0 in full, 25 s so far" at most every `progress_every` while a search runs (a million ranks
  // take minutes), from any thread.
  std::function<void(const std::string&)> progress;
  std::chrono::milliseconds progress_every{10000};
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

// `--mesh`'s text, "2x2" or "4", as Options::mesh; an error names the flag.
Result<std::vector<int64_t>> ParseMesh(const std::string& text);

// The ranked table (top `top` rows), the pruning summary, and what failed when nothing fits.
std::string Table(const Outcome& o, int top);
// The winner against the runner-up: per stage, and every boxing edge that differs.
std::string Explain(const Outcome& o);

// Spearman's rank correlation of two equally long series (average ranks for ties).
double Spearman(const std::vector<double>& a, const std::vector<double>& b);

}  // namespace fr::search
