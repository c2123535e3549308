// The step log: one line per `log.every` steps (and the last step) on stdout, in the format of
// DESIGN.md §5, and one JSON object per logged step in `log.jsonl` when set.
//
// log.jsonl is an AtomicFile (base/file.h), published at the first record and appended after: a
// log at the path from an earlier run is replaced only once this run has a record to show (never
// truncated up front, nor by a run that fails before its first step), and from then on the records
// are at the path as the run goes, for a reader following it and after a job that a failing rank
// aborted (a rename at the end would never happen then). Each record is one checked write: the
// first that fails (a full disk) stops the run with an error, and the file keeps whole records.
#pragma once

#include <cstdio>
#include <optional>
#include <string>

#include "actor/runtime.h"
#include "base/file.h"
#include "base/schedule.h"
#include "base/status.h"

namespace fr {

struct StepLogOptions {
  int64_t steps = 0;
  int64_t first_step = 0;     // steps done before this run (a checkpoint's)
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
  explicit StepLog(StepLogOptions o) : o_(std::move(o)), logged_step_(o_.first_step - 1) {}
  Status Open();  // creates the JSONL file's temporary file beside it (and its folder)
  // Logs the step; an error when its loss or gradient norm is not finite (the run diverged), or
  // when its record cannot be written ("[train] log.jsonl: cannot write 'PATH': REASON").
  Status OnStep(const actor::StepRecord& r);
  // Logs an evaluation after `step` steps: a line (`eval step N/M | eval_loss X | T ms`) and a
  // JSONL record {"step", "eval_loss", "eval_ms"}. Its time, and a checkpoint's (Pause), are left
  // out of the step times.
  Status OnEval(int64_t step, double loss, double seconds);
  void Pause(double seconds) {
    paused_ += seconds;
    paused_total_ += seconds;
  }
  // Flushes the JSONL file to disk and closes it (AtomicFile::Commit), whether the run succeeded or
  // not: a failed run's log says how it failed. Nothing to do after a failed write.
  Status Close();
  // Mean step time over all steps after the first (which includes warm-up).
  double MeanStepSeconds() const;
  double last_loss() const { return last_loss_; }

 private:
  // Appends one JSONL line to the open log (published at the first); a failed write closes it.
  Status Record(const std::string& line);

  StepLogOptions o_;
  std::optional<AtomicFile> jsonl_;  // empty: no log.jsonl, or a write to it failed
  double prev_seconds_ = 0, logged_seconds_ = 0, first_step_end_ = 0, last_end_ = 0, last_loss_ = 0;
  double paused_ = 0;            // since the last logged step: evaluations and checkpoints
  double paused_total_ = 0, paused_at_first_ = 0, paused_at_last_ = 0;  // at the first and last step's end
  int64_t logged_step_;
};

}  // namespace fr
