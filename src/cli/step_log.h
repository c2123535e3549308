// The step log: one line per `log.every` steps (and the last step) on stdout, in the format of
// DESIGN.md §5, and one JSON object per logged step in `log.jsonl` when set.
#pragma once

#include <cstdio>
#include <fstream>
#include <string>

#include "actor/runtime.h"
#include "base/status.h"
#include "ops/schedule.h"

namespace fr {

struct StepLogOptions {
  int64_t steps = 0;
  int64_t every = 1;
  std::string jsonl;          // empty: none
  Schedule schedule;
  double flops_per_step = 0;
  int64_t tokens_per_step = 0;
  bool tokens = false;        // "tok/s" for token data, "samples/s" otherwise
  int devices = 1;
};

class StepLog {
 public:
  explicit StepLog(StepLogOptions o) : o_(std::move(o)) {}
  Status Open();  // creates the JSONL file (and its directory)
  // Logs the step; an error when its loss or gradient norm is not finite (the run diverged).
  Status OnStep(const actor::StepRecord& r);
  // Mean step time over all steps after the first (which includes warm-up).
  double MeanStepSeconds() const;
  double last_loss() const { return last_loss_; }

 private:
  StepLogOptions o_;
  std::ofstream jsonl_;
  double prev_seconds_ = 0, logged_seconds_ = 0, first_step_end_ = 0, last_end_ = 0, last_loss_ = 0;
  int64_t logged_step_ = -1;
};

}  // namespace fr
