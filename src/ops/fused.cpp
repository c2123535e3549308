// Fused ops: the graph rewrites of ir/rewrite.h make them from op chains that exporters spell out,
// so a transformer layer runs fewer kernels over fewer intermediate tensors; ONNX's own Gelu
// (opset 20) imports as Gelu without a bias. Each computes what its chain did, with the same
// operations in the same order; results agree to rounding (the compiler may fuse a multiply and an
// add into one FMA in one place and not the other). tests/ops checks them against their chains and
// finite differences.
//
//   Gelu(X, [bias]) -> Y = (H * (erf(H / div) + one)) * half, H = X + bias
//       the erf GELU with the bias add before it; attributes div, one, half are the export's
//       constants (sqrt 2, 1, 0.5). With attribute tanh = 1, the tanh approximation instead
//       (ONNX Gelu with approximate='tanh'): 0.5 H (1 + tanh(sqrt(2/pi) (H + 0.044715 H^3))).
//   GeluGrad(dY, X, [bias]) -> dX, the chain's backward arithmetic; the bias gradient is SumTo(dX).
//   Silu(X) -> Y = X * (1 / (1 + exp(-X))), as Mul(X, Sigmoid(X)) exports SiLU (Llama's MLP).
//   SiluGrad(dY, X) -> dX = dY * S + ((dY * X) * S) * (1 - S), S = sigmoid(X): the chain's
//       backward (the Mul's two gradients, the Sigmoid's, their sum), S recomputed from X, so
//       neither the sigmoid nor anything else is kept for it.
//   MaskedSoftmax(X, [cond]) -> softmax over the last axis of (cond == fill_if ? fill : X op scale),
//       op = * or / (attribute `divide`); cond is a bool mask broadcast to X. Attention's scale,
//       causal mask and softmax in one pass.
//   MaskedSoftmaxGrad(dY, Y, [cond]) -> dX = (masked ? 0 : Y * (dY - <dY, Y>)) op scale.
#include "ops/defs.h"

namespace fr::defs {

namespace {

Status CheckBias(const ir::Node& n, Types in, int x, int bias) {
  if (!Present(n, static_cast<size_t>(bias))) return Status::Ok();
  RETURN_IF_ERROR(ExpectFloat(n, in, bias));
  const Shape& s = in[static_cast<size_t>(x)].shape;
  if (s.rank() == 0 || in[static_cast<size_t>(bias)].shape != Shape{s[s.rank() - 1]}) {
    return Status::Invalid(n.name + ": bias " + in[static_cast<size_t>(bias)].shape.ToString() +
                           " must have the last dim of " + s.ToString());
  }
  return Status::Ok();
}

Status CheckMask(const ir::Node& n, Types in, int x, int cond) {
  if (!Present(n, static_cast<size_t>(cond))) return Status::Ok();
  const ir::TensorType& c = in[static_cast<size_t>(cond)];
  const Shape& s = in[static_cast<size_t>(x)].shape;
  auto b = Broadcast(c.shape, s);
  if (c.dtype != DType::kBool || !b.ok() || *b != s)
    return Status::Invalid(n.name + ": the mask must be bool and broadcast to " + s.ToString() + ", got " +
                           std::string(Name(c.dtype)) + c.shape.ToString());
  return Status::Ok();
}

// (P, B, ...) -> P: a gradient linear in dY, the other inputs whole.
sbp::Signature LinearInDy(const ir::Node& n) {
  sbp::Signature g{std::vector<Sbp>(n.in.size(), Sbp::B()), {Sbp::P()}};
  g.in[0] = Sbp::P();
  return g;
}

}  // namespace

Out InferGelu(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(CheckBias(n, in, 0, 1));
  return std::vector<ir::TensorType>{in[0]};
}

Out InferGeluGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(CheckBias(n, in, 1, 2));
  FR_CHECK(in[0].shape == in[1].shape, n.name + ": gradient operand shapes differ");
  return std::vector<ir::TensorType>{in[1]};
}

void GradGelu(GradCtx& c) {
  std::vector<ir::ValueId> in = {c.dout(0), c.in(0)};
  if (c.node().in.size() > 1) in.push_back(c.in(1));
  ir::ValueId dx = c.Op(OpKind::kGeluGrad, in, c.node().attrs);
  if (c.need(0)) c.set_din(0, dx);
  if (c.need(1)) c.set_din(1, c.SumTo(dx, c.type(c.in(1)).shape));
}

void GradSilu(GradCtx& c) { c.set_din(0, c.Op(OpKind::kSiluGrad, {c.dout(0), c.in(0)})); }

Out InferMaskedSoftmax(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  if (in[0].shape.rank() == 0) return Status::Invalid(n.name + ": needs at least one axis");
  RETURN_IF_ERROR(CheckMask(n, in, 0, 1));
  return std::vector<ir::TensorType>{in[0]};
}

Out InferMaskedSoftmaxGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(CheckMask(n, in, 1, 2));
  FR_CHECK(in[0].shape == in[1].shape, n.name + ": gradient operand shapes differ");
  return std::vector<ir::TensorType>{in[1]};
}

void GradMaskedSoftmax(GradCtx& c) {
  std::vector<ir::ValueId> in = {c.dout(0), c.out(0)};
  if (c.node().in.size() > 1) in.push_back(c.in(1));
  c.set_din(0, c.Op(OpKind::kMaskedSoftmaxGrad, in, c.node().attrs));
}

// ---- SBP rules ----

// Gelu(X [4, 5, 7], bias [7]): any axis of X splits, the bias with the last one; no P (nonlinear).
//   (S(0), B) -> S(0), (S(2), S(0)) -> S(2), (B, B) -> B
Sigs SbpGelu(const ir::Node& n, Types in, Types out, int64_t parts) { return BroadcastSplits(n, in, out, parts); }

// GeluGrad(dY, X, bias): the same splits, and linear in dY, so (P, B, B) -> P.
//   (S(2), S(2), S(0)) -> S(2), (P, B, B) -> P
Sigs SbpGeluGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = BroadcastSplits(n, in, out, parts);
  AddSig(s, LinearInDy(n));
  return s;
}

// MaskedSoftmax(X [2, 3, 5, 5], cond [1, 1, 5, 5]): every axis but the last splits, the mask with
// X where it is not broadcast; never the last axis (a row's softmax needs the whole row), no P.
//   (S(0), B) -> S(0), (S(2), S(2)) -> S(2), (B, B) -> B; never S(3)
Sigs SbpMaskedSoftmax(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs all = BroadcastSplits(n, in, out, parts), s;
  const int last = out[0].shape.rank() - 1;
  for (const sbp::Signature& g : all)
    if (!(g.out[0].is_split() && g.out[0].axis() == last)) s.push_back(g);
  return s;
}

// MaskedSoftmaxGrad(dY, Y, cond): as the forward op on every input, and linear in dY.
//   (S(0), S(0), B) -> S(0), (P, B, B) -> P
Sigs SbpMaskedSoftmaxGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpMaskedSoftmax(n, in, out, parts);
  AddSig(s, LinearInDy(n));
  return s;
}

}  // namespace fr::defs
