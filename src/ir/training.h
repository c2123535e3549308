// The training graph: the imported forward Graph plus loss, backward, micro-batch accumulation,
// gradient clipping and optimizer updates, each node tagged with its Phase.
//
// Per micro-batch: forward, loss (the mean over the micro-batch), backward seeded with 1/M so the
// accumulated gradient is that of the mean loss over the global batch. Per step: the micro-batches'
// losses summed (what the step log reports, over M, so that ranks exchange the loss once a step,
// with the gradients, not once per micro-batch), the gradients'
// global L2 norm, PyTorch's clip coefficient when clipping is on, and one update node per
// parameter. Parameters the loss does not depend on become constants and are listed in `frozen`.
// Nodes whose results nothing uses are removed.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "base/schedule.h"
#include "graph/graph.h"

namespace fr::ir {

struct OptimizerSpec {
  enum class Type { kSgd, kAdamW } type = Type::kSgd;
  double momentum = 0, weight_decay = 0, grad_clip = 0;
  bool nesterov = false;
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;
  Schedule schedule;
};

struct TrainingSpec {
  enum class Loss { kCrossEntropy, kMse } loss = Loss::kCrossEntropy;
  std::string loss_input;       // the forward value the loss reads (an ONNX output name)
  std::string labels;           // name of the labels graph input to add
  TensorType labels_type;       // its type, batch = micro_batch
  int64_t micro_batches = 1;    // M
  std::optional<int64_t> ignore_index;  // cross-entropy labels of this value are left out
  OptimizerSpec optimizer;
  // Evaluation: the loss and its per-step sum only, no backward, norm or updates (tg.params have
  // no grad or update; grad_norm_sq stays kNoValue). Parameters the loss does not read become
  // constants, as in training.
  bool forward_only = false;
  std::string config_path;      // the config file, named in messages; may be empty
};

struct ParamGrad {
  ValueId param = kNoValue;
  ValueId grad = kNoValue;       // accumulated over the step
  NodeId update = -1;
};

struct TrainingGraph {
  Graph graph;
  ValueId loss = kNoValue;          // per micro-batch
  ValueId loss_sum = kNoValue;      // per step: loss summed over the micro-batches
  ValueId grad_norm_sq = kNoValue;  // per step
  std::vector<ParamGrad> params;
  std::vector<std::string> frozen;  // initializers that do not affect the loss
};

// Errors start with "[config] CONFIG_PATH: " and name the config key they come from ("model.loss...").
Result<TrainingGraph> BuildTraining(Graph forward, const TrainingSpec& spec);

}  // namespace fr::ir
