// The step model: a training step's predicted time from an assignment's per-op compute and
// per-edge boxing (sbp::Assign), as the runtime schedules them. `flowrun plan` prints it and
// `flowrun search` ranks candidates by it: one model for both.
//
// Per pipeline stage s, W_s is one micro-batch's work (forward, backward, their boxing), C_s the
// same with every stage busy at once (below), and U_s the once-a-step work (gradient sync, norm,
// optimizer); for M micro-batches
//
//   step = sum_s W_s + (M - 1) x max_s C_s + max_s U_s,
//   bubble = the busiest stage's idle time: step - U - W_b - (M - 1) x C_b.
//
// This is the runtime's pipeline schedule (plan/lower.h): stage s keeps what its backward reads
// for up to S - s micro-batches and runs its ready work oldest micro-batch first, so the first
// micro-batch fills the pipeline stage by stage and every later one costs the slowest stage's
// work, all stages computing at once (in C a hop between stages costs its bytes but not its
// latency, which other micro-batches' work hides, where each rank has a device of its own). With
// one stage it is M x W + U. Movements in flight
// together pay one latency:
//   - parameters are ready when the step starts, so their movements to their readers (ZeRO's
//     gathers, tensor-parallel slices) pay their bytes and the latency of one, per stage, and
//     with one micro-batch a step the inputs' movements share it (prefetched, they are in flight
//     with the parameters' when the step starts);
//   - the step's gradient reductions (all-reduces in buckets, ZeRO's reduce-scatters) start as
//     their accumulators finish and complete together: the same;
//   - a micro-batch's gradients moving into their accumulators (all-reduced over one mesh axis
//     per micro-batch) start as their backward ops finish, and only the accumulators wait for
//     them: the same, per micro-batch;
//   - the parameters' squared gradient norms crossing to the stage that sums them: the same.
// On CPU ranks that share a node's cores, `flops` was measured with every rank busy; a stage
// computing while the others wait gets more of the cores, so its compute in W runs
// Cluster::busy_speedup[its ranks on the node - 1] times faster, as `flowrun env` measured it;
// in C and in the once-a-step work every rank is busy.
#pragma once

#include <vector>

#include "assign/assign.h"
#include "graph/graph.h"

namespace fr::sbp {

struct StageTime {
  double micro_s = 0;  // W
  double step_s = 0;   // U
  double comm_s = 0;   // of W x M + U: data movement
};

struct StepTime {
  std::vector<StageTime> stages;
  double step_s = 0;
  double bubble_s = 0;
  int busiest = 0;                 // the stage with the most work per step
  double compute_s = 0, comm_s = 0;  // the busiest stage's work per step, split
  // Per Assignment::edges entry, what it adds to its stage's work per step: its price less the
  // latency it shares with movements in flight with it, its hop latency by the receiver's wait.
  std::vector<double> edge_s;
};

// `ranks`: the world size (ranks per node when the cluster gives no devices_per_node).
StepTime ModelStep(const ir::Graph& g, const AssignOptions& o, const Assignment& a, int ranks);

}  // namespace fr::sbp
