// The once-per-step part of training:
//   Accumulate(g)            micro-batch gradients -> their sum over the step
//   SquareSum(g) -> []       sum of squares, for the global gradient norm
//   AddN(s0, s1, ...) -> []  total
//   ClipCoef(total) -> []    min(1, max_norm / (sqrt(total) + 1e-6)), as PyTorch's clip_grad_norm_
//   SgdUpdate(W, g[, coef]) -> [momentum]      PyTorch's SGD (momentum, nesterov, weight decay)
//   AdamWUpdate(W, g[, coef]) -> [m, v]        PyTorch's AdamW (decoupled weight decay)
// The update ops mutate W in place; their outputs are persistent optimizer state (ValueKind kState).
//
// SBP: the updates are elementwise, so W, g and the state share one SBP (S under ZeRO, else B).
// Accumulate is a sum (S and P pass); SquareSum of a split is a partial sum; AddN adds partials;
// ClipCoef is nonlinear on a scalar (B only).
#include "ops/defs.h"

namespace fr::defs {

Out InferAccumulate(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  return std::vector<ir::TensorType>{in[0]};
}

Out InferScalar(const ir::Node& n, Types in) {
  for (size_t i = 0; i < in.size(); ++i) RETURN_IF_ERROR(ExpectFloat(n, in, static_cast<int>(i)));
  if (n.op != OpKind::kSquareSum) {  // AddN and ClipCoef combine scalars
    for (const ir::TensorType& t : in)
      if (t.shape.numel() != 1) return Status::Invalid(n.name + ": expects scalars, got " + t.shape.ToString());
  }
  return std::vector<ir::TensorType>{{DType::kF32, Shape{}}};
}

Out InferSgdUpdate(const ir::Node& n, Types in) {
  if (n.attrs.Float("momentum") > 0) return std::vector<ir::TensorType>{in[0]};
  return std::vector<ir::TensorType>{};
}

Out InferAdamWUpdate(const ir::Node&, Types in) { return std::vector<ir::TensorType>{in[0], in[0]}; }

// ---- SBP rules ----

// Accumulate(g [5, 7]) sums micro-batch gradients into its output: (S(0)) -> S(0), (S(1)) -> S(1),
// (P) -> P (sum_k sum_m g_mk = sum_m g_m), (B) -> B.
Sigs SbpAccumulate(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i)
    if (Splits(in[0].shape[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// SquareSum(g [5, 7]) -> []: each device's sum of squares over its piece is a partial sum:
// (S(0)) -> P, (S(1)) -> P, (B) -> B. Not (P): (a + b)^2 != a^2 + b^2.
Sigs SbpSquareSum(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i)
    if (Splits(in[0].shape[i], parts)) AddSig(s, {{Sbp::S(i)}, {Sbp::P()}});
  return s;
}

// AddN(s0, s1, s2) of scalars: (P, P, P) -> P, (B, B, B) -> B. A mix would add a B term once per
// device.
Sigs SbpAddN(const ir::Node& n, Types, Types, int64_t) {
  return {Uniform(n, 1, Sbp::B()), Uniform(n, 1, Sbp::P())};
}

// ClipCoef(total []) = min(1, max_norm / sqrt(total)): nonlinear, on a scalar: (B) -> B only.
Sigs SbpClipCoef(const ir::Node& n, Types, Types, int64_t) { return {Uniform(n, 1, Sbp::B())}; }

// SgdUpdate(W, g[, coef]) -> [momentum], AdamWUpdate(W, g[, coef]) -> [m, v]: elementwise in W, g
// and the state, with the scalar clip coefficient whole. W [5, 7] under ZeRO:
//   (S(0), S(0), B) -> (S(0), S(0))     AdamW: m and v split like W
//   (B, B, B)       -> (B, B)
// No P: a parameter is whole on every device that holds it, and AdamW is nonlinear in g.
Sigs SbpUpdate(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s{Uniform(n, out.size(), Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i) {
    if (!Splits(in[0].shape[i], parts)) continue;
    sbp::Signature g = Uniform(n, out.size(), Sbp::S(i));
    for (size_t k = 2; k < g.in.size(); ++k) g.in[k] = Sbp::B();
    AddSig(s, g);
  }
  return s;
}

}  // namespace fr::defs
