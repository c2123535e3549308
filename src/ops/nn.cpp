// Softmax, LogSoftmax (opset 13+: along one axis), LayerNormalization (normalises over the dims
// from `axis` to the end, then scale and optional bias) and RMSNorm (its root-mean-square form).
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

// RMSNorm(X, scale) -> (Y, InvRms): Y = X * InvRms * scale, InvRms = 1 / sqrt(mean(X^2) + epsilon)
// over the dims from `axis` on (ir/rewrite.cpp fuses it from the exported chain); InvRms keeps the
// reduced dims as 1, as LayerNormalization's statistics do.
Out InferRMSNorm(const ir::Node& n, Types in) {
  ASSIGN_OR_RETURN(std::vector<ir::TensorType> ln, InferLayerNorm(n, in.subspan(0, 2)));
  return std::vector<ir::TensorType>{ln[0], ln[2]};
}

// RMSNormGrad(dY, X, scale, inv_rms) -> dX, dScale.
Out InferRMSNormGrad(const ir::Node&, Types in) { return std::vector<ir::TensorType>{in[1], in[2]}; }

void GradRMSNorm(GradCtx& c) {
  FR_CHECK(c.dout(1) == ir::kNoValue, "gradient through the RMS statistics");
  auto g = c.OpN(OpKind::kRMSNormGrad, {c.dout(0), c.in(0), c.in(1), c.out(1)}, c.node().attrs, "grad");
  for (int i = 0; i < 2; ++i)
    if (c.need(i)) c.set_din(i, g[static_cast<size_t>(i)]);
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

// ---- SBP rules ----

// Softmax, LogSoftmax along `axis`: rows along the axis are independent, so any other axis splits;
// no P (softmax is nonlinear). Softmax(X [4, 5, 7], axis 1):
//   (S(0)) -> S(0), (S(2)) -> S(2), (B) -> B; never S(1).
Sigs SbpSoftmax(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  const int axis = *x.Axis(n.attrs.Int("axis", -1));
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < x.rank(); ++i)
    if (i != axis && Splits(x[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  return s;
}

// SoftmaxGrad(dY, Y), LogSoftmaxGrad(dY, Y): the same splits on both inputs, and both linear in dY
// (dx = y * (dy - <dy, y>), dx = dy - exp(y) * sum(dy)), so (P, B) -> P. On [5, 7], axis -1:
//   (S(0), S(0)) -> S(0), (P, B) -> P, (B, B) -> B
Sigs SbpSoftmaxGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpSoftmax(n, in, out, parts);
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// LayerNormalization(X, scale, bias) -> (Y, Mean, InvStdDev), normalising the dims from `axis` on:
// the dims before it are independent rows; scale and bias (whole, B) act along the normalised
// ones. X [4, 5, 7], axis 2, scale [7], bias [7]:
//   (S(0), B, B) -> (S(0), S(0), S(0))     Mean and InvStdDev are [4, 5, 1]
//   (S(1), B, B) -> (S(1), S(1), S(1))
//   (B, B, B)    -> (B, B, B)
Sigs SbpLayerNorm(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  const int axis = *x.Axis(n.attrs.Int("axis", -1));
  Sigs s{Uniform(n, 3, Sbp::B())};
  for (int i = 0; i < axis; ++i) {
    if (!Splits(x[i], parts)) continue;
    sbp::Signature g = Uniform(n, 3, Sbp::S(i));
    for (size_t k = 1; k < g.in.size(); ++k) g.in[k] = Sbp::B();
    AddSig(s, g);
  }
  return s;
}

// LayerNormGrad(dY, X, scale, mean, rstd) -> (dX, dScale, dBias). Rows split as in the forward op;
// dScale and dBias sum over rows, so each device holds a partial sum. All three outputs are linear
// in dY. X [4, 5, 7], axis 2:
//   (S(0), S(0), B, S(0), S(0)) -> (S(0), P, P)
//   (P, B, B, B, B)             -> (P, P, P)
Sigs SbpLayerNormGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[1].shape;
  const int axis = *x.Axis(n.attrs.Int("axis", -1));
  Sigs s{Uniform(n, 3, Sbp::B())};
  for (int i = 0; i < axis; ++i) {
    if (!Splits(x[i], parts)) continue;
    Sbp si = Sbp::S(i);
    AddSig(s, {{si, si, Sbp::B(), si, si}, {si, Sbp::P(), Sbp::P()}});
  }
  AddSig(s, {{Sbp::P(), Sbp::B(), Sbp::B(), Sbp::B(), Sbp::B()}, {Sbp::P(), Sbp::P(), Sbp::P()}});
  return s;
}

// RMSNorm(X, scale) -> (Y, InvRms): as LayerNormalization without a bias. X [4, 5, 7], axis 2:
//   (S(0), B) -> (S(0), S(0)), (S(1), B) -> (S(1), S(1)), (B, B) -> (B, B)
Sigs SbpRMSNorm(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  const int axis = *x.Axis(n.attrs.Int("axis", -1));
  Sigs s{Uniform(n, 2, Sbp::B())};
  for (int i = 0; i < axis; ++i)
    if (Splits(x[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::B()}, {Sbp::S(i), Sbp::S(i)}});
  return s;
}

// RMSNormGrad(dY, X, scale, inv_rms) -> (dX, dScale): rows split as in the forward op, dScale a
// partial sum over them; both linear in dY. X [4, 5, 7], axis 2:
//   (S(0), S(0), B, S(0)) -> (S(0), P), (P, B, B, B) -> (P, P), (B, B, B, B) -> (B, B)
Sigs SbpRMSNormGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[1].shape;
  const int axis = *x.Axis(n.attrs.Int("axis", -1));
  Sigs s{Uniform(n, 2, Sbp::B())};
  for (int i = 0; i < axis; ++i) {
    if (!Splits(x[i], parts)) continue;
    const Sbp si = Sbp::S(i);
    AddSig(s, {{si, si, Sbp::B(), si}, {si, Sbp::P()}});
  }
  AddSig(s, {{Sbp::P(), Sbp::B(), Sbp::B(), Sbp::B()}, {Sbp::P(), Sbp::P()}});
  return s;
}

}  // namespace fr::defs
