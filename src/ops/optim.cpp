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

}  // namespace fr::defs
