// ONNX import: reads a ModelProto and builds the forward Graph with every shape static.
//
// The caller binds each ONNX graph input to a type (dtype and full shape, batch = micro_batch).
// Import then folds every subgraph whose inputs are all constants (Constant nodes, shape
// arithmetic) by running its CPU kernels, folds Shape from its input's static type whatever the
// input is, moves the constant inputs that decide shapes into attributes (ir/onnx_lower.h: one
// static Reshape for Reshape/Flatten/Squeeze/Unsqueeze, Split sizes, Slice bounds...), drops
// Identity (and Dropout in inference mode or with model.dropout: false), and infers every shape.
//
// Float initializers of rank >= 1 become parameters (kParam); everything else constant. Two
// PyTorch export habits are undone: an Identity of a parameter (the eval-mode export merges
// initializers of equal value) gives a parameter of its own, and a parameter that no float path
// connects to a graph output (a registered buffer such as a causal mask, read through Equal)
// becomes a constant, with the nodes it feeds folded. Errors start with "[onnx] FILE: " and name
// the node, its op type and the opset.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <string>
#include <string_view>

#include "base/status.h"
#include "graph/graph.h"

namespace fr::ir {

// A graph input as the file declares it: dims of -1 are dynamic (dim_param or unknown).
struct OnnxInput {
  std::string name;
  DType dtype = DType::kF32;
  std::vector<int64_t> dims;
};

// A parsed ONNX file. Imports read its initializers in place (the graph's parameters keep it
// alive), so imports of one model at several batch sizes (flowrun search: one per micro-batch
// size) share one read, one parse and one copy of the weights.
struct OnnxModel;

Result<std::shared_ptr<const OnnxModel>> ReadOnnx(const std::string& path);

// The opsets flowrun imports.
inline constexpr int64_t kMinOnnxOpset = 13, kMaxOnnxOpset = 21;

// The op kind whose kernels run an ONNX op type; none for op types import resolves itself
// (Constant, Identity) or does not know.
std::optional<OpKind> OnnxKernelKind(std::string_view op_type);

// `flowrun ops`: every ONNX op type flowrun imports, its opsets and the devices with its kernel.
std::string OnnxOpsTable();

// The graph inputs that are not initializers, in file order.
Result<std::vector<OnnxInput>> OnnxInputs(const std::string& path);

// What the config says about the model. trainable/frozen override which float initializers train:
// globs over initializer names; a glob that matches none is an error, prefixed with `where`.
struct ImportOptions {
  std::vector<std::string> trainable, frozen;
  std::string where;  // "[config] FILE: "
  std::vector<std::string> untie;  // model.untie: transposed copies of a table to keep separate
  std::vector<std::string> tie;    // model.tie: merged initializers to train as one
  bool dropout = true;  // model.dropout: false imports Dropout as the identity
  int64_t seed = 0;     // train.seed: dropout masks derive from it and the node's name
  // Evaluation: a BatchNormalization in training mode normalizes with its running statistics, as
  // in inference mode, and those become parameters (variables) for the trainer to set each time.
  bool batchnorm_inference = false;
};

Result<Graph> ImportOnnx(const std::string& path, const std::map<std::string, TensorType>& inputs,
                         const ImportOptions& rules = {});
Result<Graph> ImportOnnx(std::shared_ptr<const OnnxModel> model, const std::map<std::string, TensorType>& inputs,
                         const ImportOptions& rules = {});

// The same, from serialized bytes; `path` is used in messages.
Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& path,
                              const std::map<std::string, TensorType>& inputs, const ImportOptions& rules = {});

}  // namespace fr::ir
