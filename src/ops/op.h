// OpDef: everything about one op kind in one row: shape inference, gradient rule and kernels per
// device type. The table lives in ops/registry.cpp and is indexed by OpKind.
//
// Contracts:
//  - infer: given the node (attributes) and input types, returns output types or a Status naming
//    what is wrong. It never reads tensor data. Absent optional inputs have an empty shape and are
//    marked by kNoValue in node.in; infer receives them as TensorType{} and must not rely on them.
//  - grad: appends backward nodes to the graph through the GradCtx and sets din[i] for every input
//    with need[i]. Gradients are always float32 and have the input's shape.
//  - kernel: reads ctx.in, writes ctx.out (preallocated with the inferred types). Kernels for ops
//    with Phase kOptimizer mutate in[0] (the parameter) and their outputs (optimizer state) in
//    place. A kernel returns a non-ok Status only for bad data (e.g. a label out of range).
//  - sbp: every legal SBP signature of the node on one mesh axis of `parts` (>= 2) devices, given
//    its LOGICAL input and output types (absent optional inputs: TensorType{}, always B). The
//    first is all-B; there are no duplicates. A split is offered only where every split dim has
//    at least `parts` elements (sbp::Check); P means P(sum) unless a rule says otherwise. An
//    input may be P only where the op is linear in it (DESIGN.md §1). tests/sbp/rules_test.cpp
//    evaluates every signature on physical pieces against the logical result.
//    N-D meshes: a signature is proved for the types it was asked about. When several mesh axes
//    split the same tensor axis, mesh axis a > 0 splits the pieces left by the earlier axes, so
//    ask its rule about those piece types: Reshape's S(i) -> S(j) with in[i] != out[j] needs
//    both dims to split evenly at every level ([6, 2] -> [12] is fine for 2 parts of the logical
//    6 and 12, not for 2 parts of the pieces 3 and 6).
//  - physical: nullptr when the node runs unchanged on a physical piece. Otherwise it adjusts a
//    copy of the node to run on one device's piece, given the logical input types, the physical
//    output types (the output's piece under the chosen signature) and where output 0's piece
//    starts in the logical output (zeros for B and P); after it, infer on the physical input
//    types gives exactly those physical output types.
#pragma once

#include <optional>
#include <span>
#include <string>
#include <string_view>
#include <unordered_map>
#include <unordered_set>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "graph/graph.h"
#include "graph/op_kind.h"
#include "sbp/signature.h"

namespace fr {

struct KernelCtx {
  const ir::Node& node;
  std::span<const Tensor> in;   // absent optional inputs are undefined Tensors
  std::span<const Tensor> out;  // preallocated, inferred shapes
  int64_t step = 0;             // optimizer step, from 0
  int64_t micro = 0;            // micro-batch within the step
  int64_t micros = 1;           // micro-batches per step
  // The stream a device kernel queues its work on (the task's device's compute stream); null
  // for CPU kernels, which run at once.
  DeviceStream* stream = nullptr;
};

class GradCtx;

using InferFn = Result<std::vector<ir::TensorType>> (*)(const ir::Node&, std::span<const ir::TensorType>);
using GradFn = void (*)(GradCtx&);
using KernelFn = Status (*)(const KernelCtx&);
// An optimizer update's multi-tensor form: updates every member of an update group (plan/plan.h)
// at once, each member's context as its own kernel would get it; the same bits as one kernel
// call per member.
using GroupKernelFn = Status (*)(std::span<const KernelCtx> members);
using SbpFn = std::vector<sbp::Signature> (*)(const ir::Node& n, std::span<const ir::TensorType> in,
                                              std::span<const ir::TensorType> out, int64_t parts);
using PhysicalFn = void (*)(ir::Node& physical, std::span<const ir::TensorType> logical_in,
                            std::span<const ir::TensorType> physical_out, std::span<const int64_t> out0_start);

struct OpDef {
  const char* name;
  bool onnx;       // imported from ONNX nodes of this op_type
  int min_in, max_in;
  InferFn infer;
  GradFn grad;     // nullptr: the op is never on a gradient path (losses' labels, optimizer ops)
  KernelFn cpu;
  SbpFn sbp;            // never nullptr
  PhysicalFn physical;  // nullptr: the node runs unchanged on physical pieces
};

const OpDef& Def(OpKind k);
std::optional<OpKind> OnnxOp(std::string_view op_type);
// "Add, Div, Erf, ..." sorted, for error messages.
std::string SupportedOnnxOps();
// The kernel for a device type; for a device whose backend is not built, a kernel that fails with a
// clear message.
KernelFn Kernel(OpKind k, DeviceType d);
// Op k's group kernel for a device type (the optimizer updates have one); null for other ops.
GroupKernelFn GroupKernel(OpKind k, DeviceType d);

// Appends nodes to a graph, inferring output types as it goes. Used by ONNX import, autodiff and
// the training-graph builder.
class Builder {
 public:
  explicit Builder(ir::Graph& g);
  ir::Graph& graph() { return g_; }
  // Adds a node; returns its outputs. `name` names the node; outputs are "name:0", "name:1"...
  Result<std::vector<ir::ValueId>> Add(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs,
                                       std::string name, ir::Phase phase);
  // Single-output form for ops built by flowrun itself; failure is an internal error.
  ir::ValueId Op(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs, std::string name,
                 ir::Phase phase);
  ir::ValueId Const(std::string name, Tensor t);
  // `base`, or `base_N` for the first N that no node uses yet.
  std::string UniqueName(const std::string& base);

 private:
  ir::Graph& g_;
  std::unordered_set<std::string> names_;
  std::unordered_map<std::string, int> next_suffix_;  // UniqueName: the last suffix tried per base
};

// A gradient rule's node that shape inference refused (a forward node of a malformed model can
// pass its own inference and still give a backward node none can have). GradCtx throws it; the
// autodiff catches it and returns its status, naming the forward node.
struct GradFailure {
  Status status;
};

// What a gradient rule sees. The node is a copy: the graph grows while rules run.
class GradCtx {
 public:
  GradCtx(Builder& b, ir::Node node, std::vector<ir::ValueId> dout, std::vector<bool> need)
      : b_(b), node_(std::move(node)), dout_(std::move(dout)), need_(std::move(need)),
        din_(node_.in.size(), ir::kNoValue) {}
  const ir::Node& node() const { return node_; }
  ir::ValueId in(int i) const { return node_.in[static_cast<size_t>(i)]; }
  ir::ValueId out(int i) const { return node_.out[static_cast<size_t>(i)]; }
  // A copy: the graph's values grow as rules add nodes, so a reference into them would dangle.
  ir::TensorType type(ir::ValueId v) const { return b_.graph().type(v); }
  ir::ValueId dout(int i) const { return dout_[static_cast<size_t>(i)]; }
  bool need(int i) const { return static_cast<size_t>(i) < need_.size() && need_[static_cast<size_t>(i)]; }
  void set_din(int i, ir::ValueId g) { din_[static_cast<size_t>(i)] = g; }
  const std::vector<ir::ValueId>& din() const { return din_; }
  // Adds a backward node named after the forward node; throws GradFailure if inference refuses it.
  ir::ValueId Op(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs = {}, const std::string& tag = "grad");
  // The same, for ops with several outputs.
  std::vector<ir::ValueId> OpN(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs, const std::string& tag);
  // Sums `g` down to `target`'s shape (undoing broadcasting); identity if shapes match. `target` is
  // a copy: a caller's c.type(v).shape dangles once another argument adds a node (values grow).
  ir::ValueId SumTo(ir::ValueId g, Shape target);
  // A float32 constant of zeros: the gradient of an output nothing uses, or a Where's other branch.
  // Throws GradFailure past the memory budget (base/process.h).
  ir::ValueId Zeros(const Shape& s);
  // A float32 scalar constant.
  ir::ValueId Scalar(float v);

 private:
  Builder& b_;
  ir::Node node_;
  std::vector<ir::ValueId> dout_;
  std::vector<bool> need_;
  std::vector<ir::ValueId> din_;
};

// Shared inference helpers.
Result<std::vector<ir::TensorType>> SameAsInput0(const ir::Node&, std::span<const ir::TensorType> in);
Status ExpectFloat(const ir::Node& n, std::span<const ir::TensorType> in, int i);

}  // namespace fr
