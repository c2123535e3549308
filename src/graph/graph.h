// The logical Graph: tensors (Values) and ops (Nodes) with static shapes, in the consistent view
// (one logical shape for the whole cluster). Nodes are kept in a topological order: a node's inputs
// are produced by earlier nodes, or are graph inputs, parameters or constants.
//
// A Graph owns everything in it; ids index its vectors and stay valid while nodes are appended.
// It is not thread-safe; it is built once, then only read.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <variant>
#include <vector>

#include "base/tensor.h"
#include "graph/op_kind.h"

namespace fr::ir {

using ValueId = int32_t;
using NodeId = int32_t;
inline constexpr ValueId kNoValue = -1;

enum class ValueKind : uint8_t {
  kInput,       // fed by the data loader each micro-batch
  kParam,       // trainable: initial value in `data`, updated by an optimizer node
  kConst,       // fixed: value in `data`
  kActivation,  // produced by a node
  kState,       // persistent optimizer state, owned by its update node
};

struct TensorType {
  DType dtype = DType::kF32;
  Shape shape;
  bool operator==(const TensorType&) const = default;
};

struct Value {
  std::string name;
  TensorType type;
  ValueKind kind = ValueKind::kActivation;
  Tensor data;            // kParam initial value, kConst value
  NodeId producer = -1;   // for kActivation and kState
  int producer_slot = 0;
  ValueId grad_of = kNoValue;  // backward values: the forward value this is (a part of) the gradient of
  std::string split_from;      // a part a rewrite cut from the parameter of this name (ir/rewrite.h)
};

using AttrValue = std::variant<int64_t, double, std::vector<int64_t>, std::vector<double>, std::string>;

// Op attributes by name. Read at plan time and by kernels; the set per op is small.
class Attrs {
 public:
  void Set(const std::string& k, AttrValue v) { m_[k] = std::move(v); }
  bool Has(const std::string& k) const { return m_.count(k) != 0; }
  int64_t Int(const std::string& k, int64_t def = 0) const;
  double Float(const std::string& k, double def = 0) const;
  const std::vector<int64_t>& Ints(const std::string& k) const;  // empty if absent
  std::vector<int64_t> IntsOr(const std::string& k, std::vector<int64_t> def) const;
  const std::vector<double>& Floats(const std::string& k) const;
  std::string Str(const std::string& k, const std::string& def = "") const;
  const std::map<std::string, AttrValue>& all() const { return m_; }

 private:
  std::map<std::string, AttrValue> m_;
};

// Which part of a training step a node belongs to. Forward, loss and backward nodes run once per
// micro-batch; accumulation turns micro-batch gradients into one per step; optimizer nodes run once
// per step.
enum class Phase : uint8_t { kForward, kLoss, kBackward, kAccumulate, kOptimizer };

struct Node {
  std::string name;
  OpKind op;
  std::vector<ValueId> in;   // kNoValue for an absent optional input
  std::vector<ValueId> out;
  Attrs attrs;
  Phase phase = Phase::kForward;
  NodeId origin = -1;  // backward nodes: the forward node whose gradient they compute
  std::string split_from;  // a part a rewrite cut from the node of this name (ir/rewrite.h)
  // The nodes a rewrite fused into this one, by name: stage globs match them too, so a user who
  // cuts stages by the names in the ONNX file meets the fused node.
  std::vector<std::string> fused_from;

  // Whether `glob` names this node: its own name, the node it was cut from, or one it replaced.
  bool AnswersTo(std::string_view glob) const;
};

struct Graph {
  std::vector<Value> values;
  std::vector<Node> nodes;
  std::vector<ValueId> inputs;   // kInput values, in ONNX order
  std::vector<ValueId> outputs;  // graph outputs
  std::vector<ValueId> params;   // kParam values
  // Float initializers import holds constant rather than training, and why (ir/onnx_import.cpp).
  struct Held {
    std::string name;
    TensorType type;
    std::string why;
  };
  std::vector<Held> held;
  // Initializers import found to be a transposed copy of an embedding table (a tied head) and
  // replaced by Transpose(table): one parameter trains, and save writes the copy from it.
  struct Tie {
    std::string copy, table;
  };
  std::vector<Tie> tied;
  // Initializers the exporter merged for their equal values, which import gave each reader after
  // the first a copy of (INIT@NODE) to train apart.
  struct Copy {
    std::string copy, original;
  };
  std::vector<Copy> copies;
  // A BatchNormalization's running statistic in training mode: after every micro-batch, as in
  // PyTorch, initializer = momentum * initializer + (1 - momentum) * unbias * batch; the trainer
  // keeps it (driver/running_stats.h) and `save:` writes it. Nothing in the graph reads it.
  struct Running {
    std::string initializer;
    ValueId batch = kNoValue;  // the micro-batch's statistic, [1, C, 1, ...]
    double momentum = 0.9;
    double unbias = 1;         // n / (n - 1) for the variance: PyTorch's running variance is unbiased
    Tensor initial;            // the initializer's value in the file
  };
  std::vector<Running> running;
  int opset = 0;

  const Value& value(ValueId v) const { return values[static_cast<size_t>(v)]; }
  Value& value(ValueId v) { return values[static_cast<size_t>(v)]; }
  const Node& node(NodeId n) const { return nodes[static_cast<size_t>(n)]; }
  const TensorType& type(ValueId v) const { return value(v).type; }

  ValueId AddValue(std::string name, TensorType t, ValueKind kind, Tensor data = {});
  // Appends a node whose outputs already exist as values; sets their producer.
  NodeId AddNode(Node n);
  // The id of a value by name, or kNoValue.
  ValueId Find(const std::string& name) const;
  // Keeps the nodes with keep[n], in order, and renumbers producers. Values stay.
  void KeepNodes(const std::vector<bool>& keep);
  // Whether node op `op` produced v (false for sources).
  bool ProducedBy(ValueId v, OpKind op) const { return value(v).producer >= 0 && node(value(v).producer).op == op; }
  // Consumers of each value: node ids, in node order.
  std::vector<std::vector<NodeId>> Consumers() const;
};

}  // namespace fr::ir
