// Softmax, LogSoftmax (opset 13+: along one axis) and LayerNormalization (normalises over the
// dims from `axis` to the end, then scale and optional bias).
//
// LayerNormalization always has three outputs in flowrun: Y, Mean and InvStdDev (ONNX's optional
// outputs), so that the backward pass reuses the statistics instead of recomputing them.
//
// SBP: softmax takes S on any axis but its own; layer-norm S on the batch-like dims before `axis`.
// Neither takes P. Scale and bias are B; their gradients come out P over the split axis.
#include "ops/defs.h"

namespace fr::defs {

Out InferSoftmax(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  auto ax = in[0].shape.Axis(n.attrs.Int("axis", -1));
  if (!ax.ok()) return ax.status().With(n.name + ": ");
  return std::vector<ir::TensorType>{in[0]};
}

void GradSoftmax(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kSoftmaxGrad, {c.dout(0), c.out(0)}, c.node().attrs));
}

void GradLogSoftmax(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kLogSoftmaxGrad, {c.dout(0), c.out(0)}, c.node().attrs));
}

Out InferLayerNorm(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(ExpectFloat(n, in, 1));
  const Shape& x = in[0].shape;
  auto ax = x.Axis(n.attrs.Int("axis", -1));
  if (!ax.ok()) return ax.status().With(n.name + ": ");
  Shape norm(std::vector<int64_t>(x.dims().begin() + *ax, x.dims().end()));
  if (in[1].shape != norm) {
    return Status::Invalid(n.name + ": scale " + in[1].shape.ToString() + " must have the normalised shape " +
                           norm.ToString());
  }
  if (n.in.size() > 2 && n.in[2] != ir::kNoValue && in[2].shape != norm) {
    return Status::Invalid(n.name + ": bias " + in[2].shape.ToString() + " must have the normalised shape " +
                           norm.ToString());
  }
  std::vector<int64_t> stat(x.dims().begin(), x.dims().begin() + *ax);
  stat.resize(static_cast<size_t>(x.rank()), 1);  // ONNX keeps the reduced dims as 1
  return std::vector<ir::TensorType>{in[0], {DType::kF32, Shape(stat)}, {DType::kF32, Shape(stat)}};
}

// LayerNormGrad(dY, X, scale, mean, inv_std) -> dX, dScale, dBias.
Out InferLayerNormGrad(const ir::Node&, Types in) {
  return std::vector<ir::TensorType>{in[1], in[2], in[2]};
}

void GradLayerNorm(GradCtx& c) {
  ir::ValueId dy = c.dout(0);
  FR_CHECK(c.dout(1) == ir::kNoValue && c.dout(2) == ir::kNoValue, "gradient through layer-norm statistics");
  auto g = c.OpN(OpKind::kLayerNormGrad, {dy, c.in(0), c.in(1), c.out(1), c.out(2)}, c.node().attrs, "grad");
  for (int i = 0; i < 3; ++i)
    if (c.need(i)) c.set_din(i, g[static_cast<size_t>(i)]);
}

}  // namespace fr::defs
