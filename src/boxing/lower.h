// Lowering: turns the training graph and its SBP assignment into the physical Plan.
//
// Every logical op becomes one compute task per device of its placement, running a physical copy
// of the node. Every edge whose producer's (placement, nd-SBP) differs from what the consumer's
// signature wants gets the boxing tasks of boxing::Box, once per (tensor, placement, nd-SBP)
// wanted, shared by the consumers that want it. Data inputs are read per rank (each rank its
// pieces); each parameter becomes one variable task per device holding its piece. The loss and
// the squared gradient norm are boxed to B on rank 0, where the sinks feed the step log.
//
// Gradient buckets: the per-step all-reduces of gradient accumulators over the same group are not
// one task each: they are fused, in the order backward produces them, into buckets of at most
// kGradientBucketBytes per device, one all-reduce task per device and bucket with one input and
// one output regst per gradient (Plan::edges records each gradient's bucket). A bucket pays one
// latency and one collective call, and starts when its last gradient is accumulated: gpt_mini's
// 29 gradients (550 KiB) are 3 buckets, two of which reduce while the last micro-batch's backward
// still runs; the last, the remainder, holds the embeddings' (80 KiB).
//
// Streams: "compute" for ops and variables, "data" for the loader (it prefetches: its regsts get
// two slots), "comm" for boxing. Other regsts get one slot, except those of a per-micro-batch edge
// between two pipeline stages: the producer's regsts and every regst of the edge's boxing (the
// send side and the received pieces) get regst_num = S, the number of stages.
//
// The pipeline schedule this gives (there is no scheduler; it follows from the slots): stage k
// may start the forward of micro-batch m+1 while stage k+1 still holds m, and a stage runs at most
// S micro-batches ahead of the backward that frees their slots. Within a rank, ready acts run in
// the order their inputs arrive, so when a forward and a backward are both ready neither has
// priority: this is GPipe-like with a bounded number of micro-batches in flight, not 1F1B (which
// would prefer the backward to cap live activations at S - k on stage k). Slots are counted per
// regst, so an activation that stays within stage k but is saved for its backward keeps one slot
// and still holds stage k's forward of m+1 until the backward of m has read it; only regsts on
// stage-crossing edges are widened.
#pragma once

#include "base/status.h"
#include "ir/plan.h"
#include "ir/training.h"
#include "sbp/assign.h"

namespace fr::boxing {

struct LowerOptions {
  int64_t steps = 1;
  int64_t micro_batches = 1;
  std::vector<sbp::Placement> stages;  // empty: one device
  std::vector<int> node_stage;         // per node (with stages)
};

Result<ir::Plan> Lower(const ir::TrainingGraph& tg, const sbp::Assignment& a, const LowerOptions& opt);

// One device, every tensor B: the plan of a single-process run.
Result<ir::Plan> LowerOneDevice(const ir::TrainingGraph& tg, int64_t steps, int64_t micro_batches);

}  // namespace fr::boxing
