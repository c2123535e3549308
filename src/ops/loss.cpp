// Losses, appended by the training-graph builder (they are not ONNX ops):
//   CrossEntropy(logits [..., C], labels [...] int64) -> mean over label positions of
//     -log softmax(logits)[label], as a scalar; with attribute sum = 1 the sum instead, and labels
//     equal to attribute ignore_index (where given) left out. The training graph divides that sum
//     by the count of the other labels (ir/training.cpp), which under data parallelism is every
//     rank's: an all-reduce like the sum's.
//   Mse(pred, target) -> mean over all elements of (pred - target)^2.
// Their gradients are fused kernels taking the upstream scalar gradient as input 0.
//
// SBP: S on any batch-like axis gives P (each rank sums its part; the mean divides by the global
// count, which the physical hook stores in attr "count"); the class axis of the logits must not be
// split. The losses are nonlinear in their inputs and take no P; their gradients are linear in dL.
#include "ops/defs.h"

namespace fr::defs {

Out InferCrossEntropy(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const Shape &lg = in[0].shape, &lb = in[1].shape;
  if (in[1].dtype != DType::kI64) {
    return Status::Invalid(n.name + ": cross_entropy labels must be int64 class indices, got " +
                           std::string(Name(in[1].dtype)));
  }
  Shape expect(std::vector<int64_t>(lg.dims().begin(), lg.dims().end() - (lg.rank() ? 1 : 0)));
  if (lg.rank() < 1 || lb != expect) {
    return Status::Invalid(n.name + ": cross_entropy labels " + lb.ToString() + " must have the logits' shape " +
                           lg.ToString() + " without the class axis, i.e. " + expect.ToString());
  }
  return std::vector<ir::TensorType>{{DType::kF32, Shape{}}};
}

Out InferMse(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  if (in[1].dtype != DType::kF32 || in[1].shape != in[0].shape) {
    return Status::Invalid(n.name + ": mse target must be float32 with the output's shape " + in[0].shape.ToString() +
                           ", got " + std::string(Name(in[1].dtype)) + in[1].shape.ToString());
  }
  return std::vector<ir::TensorType>{{DType::kF32, Shape{}}};
}

// (dLoss, prediction, labels) -> dPrediction.
Out InferLossGrad(const ir::Node&, Types in) { return std::vector<ir::TensorType>{in[1]}; }

void GradCrossEntropy(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kCrossEntropyGrad, {c.dout(0), c.in(0), c.in(1)}, c.node().attrs));
}

void GradMse(GradCtx& c) { c.set_din(0, c.Op(OpKind::kMseGrad, {c.dout(0), c.in(0), c.in(1)})); }

// ---- SBP rules ----

// CrossEntropy(logits [3, 5, 7], labels [3, 5]) -> loss []: rows are independent, the class axis
// is not. Each device's mean over its rows, divided by the logical row count, is a partial sum:
//   (S(0), S(0)) -> P, (S(1), S(1)) -> P, (B, B) -> B
Sigs SbpCrossEntropy(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  const Shape& lg = in[0].shape;
  for (int i = 0; i + 1 < lg.rank(); ++i)
    if (Splits(lg[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::P()}});
  return s;
}

// Mse(pred [5, 7], target [5, 7]) -> loss []: every axis is elementwise.
//   (S(0), S(0)) -> P, (S(1), S(1)) -> P, (B, B) -> B
Sigs SbpMse(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i)
    if (Splits(in[0].shape[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::P()}});
  return s;
}

// CrossEntropyGrad(dL [], logits [5, 7], labels [5]) and MseGrad(dL [], pred [5, 7], target [5, 7])
// -> d [5, 7]: the rows (CrossEntropy) or elements (Mse) are independent given the whole dL, and
// the result is linear in dL:
//   (B, S(0), S(0)) -> S(0); MseGrad also (B, S(1), S(1)) -> S(1); (P, B, B) -> P; (B, B, B) -> B
Sigs SbpLossGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  const Shape& x = in[1].shape;
  const int split_axes = n.op == OpKind::kCrossEntropyGrad ? x.rank() - 1 : x.rank();
  for (int i = 0; i < split_axes; ++i)
    if (Splits(x[i], parts)) AddSig(s, {{Sbp::B(), Sbp::S(i), Sbp::S(i)}, {Sbp::S(i)}});
  AddSig(s, {{Sbp::P(), Sbp::B(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// The kernels average over attr "count" when it is there: the logical number of rows (logits
// without the class axis) for CrossEntropy and its gradient, of elements for Mse and its gradient.
void PhysicalCrossEntropy(ir::Node& n, Types logical_in, Types, Starts) {
  const Shape& lg = logical_in[n.op == OpKind::kCrossEntropy ? 0 : 1].shape;
  const int64_t classes = lg[lg.rank() - 1];
  n.attrs.Set("count", classes ? lg.numel() / classes : int64_t{0});
}

void PhysicalMse(ir::Node& n, Types logical_in, Types, Starts) {
  n.attrs.Set("count", logical_in[n.op == OpKind::kMse ? 0 : 1].shape.numel());
}

}  // namespace fr::defs
