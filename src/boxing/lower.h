// Lowering: turns the training graph into a Plan of tasks and registers.
//
// This is the one-device lowering: every task is on rank 0; compute tasks run on the "compute"
// stream and the data loader on its own "data" stream so it prefetches ahead of compute. The
// data regsts get two slots (double buffering); every other regst one, which is all a single
// compute stream can use. The SBP issue adds per-rank expansion and boxing tasks here.
#pragma once

#include "base/status.h"
#include "ir/plan.h"
#include "ir/training.h"

namespace fr::boxing {

struct LowerOptions {
  int64_t steps = 1;
  int64_t micro_batches = 1;
};

Result<ir::Plan> Lower(const ir::TrainingGraph& tg, const LowerOptions& opt);

}  // namespace fr::boxing
