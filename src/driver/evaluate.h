// Evaluation during training (the `eval:` section, DESIGN.md §5): the mean loss over the held-out
// batches, forward only, with the training's current parameters, on the training's layout.
//
// The evaluation plan (CompileEval) has no gradient, norm or optimizer tasks. Its runtime, made at
// the first evaluation, evaluates the training's (Runtime's `evaluates`): its variables are the
// training's parameters themselves and its registers come from the training's pool, so an
// evaluation copies nothing and holds little memory of its own. Both runtimes share the
// communicator: the evaluation's collectives
// are numbered after the training's (EvalCollectives). Each evaluation reads eval.steps batches
// of train.global_batch from the start of the held-out data, in order: the same batches every time.
// A BatchNormalization that training updates normalizes with its running statistics (PyTorch's
// eval mode): the evaluation's variables of them are set from this rank's RunningStats each time.
#pragma once

#include <memory>

#include "actor/runtime.h"
#include "actor/world.h"
#include "config/config.h"
#include "data/dataset.h"
#include "driver/pipeline.h"
#include "driver/running_stats.h"

namespace fr {

class Evaluator {
 public:
  // For `train` (Compile's result) on this rank. Errors as CompileEval's.
  static Result<std::unique_ptr<Evaluator>> Make(const Config& cfg, const Compiled& train, int rank, actor::Communicator* comm,
                                                 int first_collective);
  const ir::Plan& plan() const { return plan_; }
  // The mean loss of the held-out batches with `train`'s parameters now (call between its runs;
  // always with the same runtime, which must outlive this evaluator's runs). `ro`: the training's
  // run options (deadlines, signals, threads); the rest is the evaluation's.
  Result<double> Evaluate(actor::Runtime& train, const RunningStats& running, actor::RunOptions ro);

 private:
  Evaluator() = default;
  ir::TrainingGraph graph_;
  ir::Plan plan_;
  std::unique_ptr<data::Loader> loader_;
  std::unique_ptr<actor::Runtime> rt_;  // made by the first Evaluate
  actor::Communicator* comm_ = nullptr;
  int64_t steps_ = 0;
  int rank_ = 0;
  std::vector<ir::ValueId> running_;  // variables of running statistics, in graph_
};

// The collectives `train` and `eval` need, in one list for Communicator::Prepare: the training's
// (with their input buffers), then the evaluation's (numbered after them, without).
actor::CollectiveSetup EvalCollectives(const ir::Plan& train, const ir::Plan* eval);

}  // namespace fr
