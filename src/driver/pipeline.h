// The compile pipeline shared by `flowrun train` and `flowrun plan` (DESIGN.md §2):
// config -> dataset -> ONNX import with shapes bound -> training graph -> Plan.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>

#include "base/status.h"
#include "config/config.h"
#include "data/dataset.h"
#include "ir/onnx_import.h"
#include "ir/training.h"
#include "plan/lower.h"
#include "plan/plan.h"

namespace fr {

struct Compiled {
  std::unique_ptr<data::Dataset> dataset;
  std::unique_ptr<data::Dataset> eval_dataset;     // with an eval: section (data::SplitForEval)
  std::map<std::string, std::string> input_field;  // graph input -> data field
  ir::TrainingGraph training;
  ir::Plan plan;
  double flops_per_step = 0;    // matmul FLOPs, forward and backward, whole step
  int64_t tokens_per_step = 0;  // global_batch x seq_len for tokens, else global_batch samples
  std::shared_ptr<const ir::OnnxModel> model;  // the parsed model.onnx (save: writes a copy)
  // What the plan was lowered from, for the evaluation plan (CompileEval); none on one rank.
  std::optional<sbp::Assignment> assignment;
  boxing::LowerOptions lower;
};

// The evaluation plan of an `eval:` section: the forward graph with the loss (no backward, no
// optimizer, dropout off), lowered on `train`'s layout, every value and op as the training plan
// has it, for cfg.eval.steps steps on the training's micro-batches. Its collectives are numbered
// from `first_collective` on, after the training plan's, so that one communicator serves both.
// Errors name the config (a model with BatchNormalization, whose evaluation would need its
// running statistics, is not evaluated yet).
Result<ir::Plan> CompileEval(const Config& cfg, const Compiled& train, int first_collective, ir::TrainingGraph* graph);

// Compiles for `ranks` ranks (the world size of a run, or `plan --ranks`): Prepare, then the Plan.
Result<Compiled> Compile(const Config& cfg, int ranks);

// The pipeline up to the training graph: dataset, import with the config's shapes, training graph
// (c.plan stays empty). `flowrun search` prepares once per micro-batch size and assigns many times,
// from one `model` read once (cfg.model.onnx's; null: read it here).
Result<Compiled> Prepare(const Config& cfg, std::shared_ptr<const ir::OnnxModel> model = nullptr);

// The device of a training run, made ready: on CUDA, this rank's GPU selected (its local rank
// among the node's ranks picks it) and the CUDA module loaded. What it returns starts the line the
// run prints about its device (actor::UseDeviceCollectives adds its collectives); empty on the CPU.
Result<std::string> PrepareDevice(const Config& cfg);

}  // namespace fr
