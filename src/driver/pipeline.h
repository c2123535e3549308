// The compile pipeline shared by `flowrun train` and `flowrun plan` (DESIGN.md §2):
// config -> dataset -> ONNX import with shapes bound -> training graph -> Plan.
#pragma once

#include <map>
#include <memory>
#include <string>

#include "base/status.h"
#include "config/config.h"
#include "data/dataset.h"
#include "ir/onnx_import.h"
#include "ir/training.h"
#include "plan/plan.h"

namespace fr {

struct Compiled {
  std::unique_ptr<data::Dataset> dataset;
  std::map<std::string, std::string> input_field;  // graph input -> data field
  ir::TrainingGraph training;
  ir::Plan plan;
  double flops_per_step = 0;    // matmul FLOPs, forward and backward, whole step
  int64_t tokens_per_step = 0;  // global_batch x seq_len for tokens, else global_batch samples
  std::shared_ptr<const ir::OnnxModel> model;  // the parsed model.onnx (save: writes a copy)
};

// Compiles for `ranks` ranks (the world size of a run, or `plan --ranks`): Prepare, then the Plan.
Result<Compiled> Compile(const Config& cfg, int ranks);

// The pipeline up to the training graph: dataset, import with the config's shapes, training graph
// (c.plan stays empty). `flowrun search` prepares once per micro-batch size and assigns many times,
// from one `model` read once (cfg.model.onnx's; null: read it here).
Result<Compiled> Prepare(const Config& cfg, std::shared_ptr<const ir::OnnxModel> model = nullptr);

// Training supports what this version runs: CPU tensors.
Status CheckTrainable(const Config& cfg);

}  // namespace fr
