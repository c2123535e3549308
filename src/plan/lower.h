// Lowering: turns the training graph and its SBP assignment into the physical Plan.
//
// Every logical op becomes one compute task per device of its placement, running a physical copy
// of the node. Every edge whose producer's (placement, nd-SBP) differs from what the consumer's
// signature wants gets the boxing tasks of boxing::Box, once per (tensor, placement, nd-SBP)
// wanted, shared by the consumers that want it. Data inputs are read per rank (each rank its
// pieces); each parameter becomes one variable task per device holding its piece. The loss and
// the squared gradient norm are boxed to B on rank 0, where the sinks feed the step log.
//
// Gradient buckets: the per-step all-reduces of gradient accumulators over the same group (and
// ZeRO's reduce-scatters, along the same axis) are not one task each: they are fused, in the order
// backward produces them, into buckets of at most LowerOptions::bucket_bytes per device, one collective
// task per device and bucket with one input and one output regst per gradient (Plan::edges
// records each gradient's bucket). A bucket pays one latency and one collective call, and starts
// when its last gradient is accumulated: gpt_mini's 29 gradients (550 KiB) are 7 buckets, all but
// the last two of which reduce while the last micro-batch's backward still runs; the last holds
// the token embedding's (64 KiB). Under ZeRO the parameters' per-step all-gathers ride in
// parameter buckets the same way, in the order the step first reads them.
//
// Update groups: a device's variables with alike update nodes (one op, the same attributes and
// clip coefficient) whose gradients are in one bucket, or in none, form a group (TaskDesc::
// update_group) that updates in one call of the op's group kernel (ops/op.h): a GPT-2's ~150
// parameters are a few multi-tensor launches a step, not ~150.
//
// Streams: "compute" for ops and variables, "data" for the loader (it prefetches: its regsts get
// two slots), "comm" for boxing. Other regsts get one slot, except in a pipeline of S stages:
//   - the regsts of a per-micro-batch edge between two stages, the producer's and every regst of
//     the edge's boxing (the send side and the received pieces), get regst_num = S;
//   - what stage k's backward reads of its forward (the activations it saves) gets S - k slots,
//     at most the micro-batch count.
//
// The pipeline schedule this gives, with the runtime running a pipeline rank's ready acts oldest
// micro-batch first (actor/runtime.h): stage k runs the forward of micro-batch m+1 while the
// later stages still work on m, up to S - k micro-batches ahead of its backward, and a backward
// that is ready goes before a newer forward: 1F1B. Within a stage the micro-batches stay in order,
// so gradients accumulate in the same order as on one rank. Boxing regsts within a stage keep one
// slot, so a stage that moves data for its backward (tensor parallelism inside a stage) overlaps
// less.
#pragma once

#include "assign/assign.h"
#include "base/status.h"
#include "ir/training.h"
#include "plan/plan.h"

namespace fr::boxing {

struct LowerOptions {
  int64_t steps = 1;
  int64_t micro_batches = 1;
  std::vector<sbp::Placement> stages;  // empty: one device
  std::vector<int> node_stage;         // per node (with stages)
  bool zero = false;                   // ZeRO: parameters' per-step gathers ride in buckets
  int64_t bucket_bytes = kDefaultBucketBytes;  // per device (parallel.bucket_kib)
};

Result<ir::Plan> Lower(const ir::TrainingGraph& tg, const sbp::Assignment& a, const LowerOptions& opt);

// One device of type `device`, every tensor B: the plan of a single-process run.
Result<ir::Plan> LowerOneDevice(const ir::TrainingGraph& tg, int64_t steps, int64_t micro_batches,
                                DeviceType device = DeviceType::kCpu);

}  // namespace fr::boxing
