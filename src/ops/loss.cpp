// Losses, appended by the training-graph builder (they are not ONNX ops):
//   CrossEntropy(logits [..., C], labels [...] int64) -> mean over label positions of
//     -log softmax(logits)[label], as a scalar.
//   Mse(pred, target) -> mean over all elements of (pred - target)^2.
// Their gradients are fused kernels taking the upstream scalar gradient as input 0.
//
// SBP: S on any batch-like axis gives P (each rank sums its part; the mean divides by the global
// count); the class axis of the logits must not be split.
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
  c.set_din(0, c.Op(OpKind::kCrossEntropyGrad, {c.dout(0), c.in(0), c.in(1)}));
}

void GradMse(GradCtx& c) { c.set_din(0, c.Op(OpKind::kMseGrad, {c.dout(0), c.in(0), c.in(1)})); }

}  // namespace fr::defs
