// Reshape and Transpose. ONNX's Reshape, Flatten, Squeeze and Unsqueeze all import as Reshape with
// the target shape resolved into the attribute `shape`; Identity and Dropout import as nothing.
//
// SBP: reshape keeps a split when the split axis maps to an axis whose leading part is unchanged
// (e.g. S(0) through [B, T, C] -> [B*T, C]); P passes through (linear). Transpose permutes split axes.
#include "ops/defs.h"

namespace fr::defs {

Out InferReshape(const ir::Node& n, Types in) {
  Shape target(n.attrs.Ints("shape"));
  if (target.numel() != in[0].shape.numel()) {
    return Status::Invalid(n.name + ": cannot reshape " + in[0].shape.ToString() + " to " + target.ToString());
  }
  return std::vector<ir::TensorType>{{in[0].dtype, target}};
}

void GradReshape(GradCtx& c) {
  ir::Attrs a;
  a.Set("shape", c.type(c.in(0)).shape.dims());
  c.set_din(0, c.Op(OpKind::kReshape, {c.dout(0)}, a));
}

Out InferTranspose(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  std::vector<int64_t> perm = n.attrs.Ints("perm");
  if (perm.empty()) {  // ONNX default: reverse the dims
    for (int i = x.rank() - 1; i >= 0; --i) perm.push_back(i);
  }
  if (static_cast<int>(perm.size()) != x.rank()) {
    return Status::Invalid(n.name + ": perm has " + std::to_string(perm.size()) + " entries for rank " +
                           std::to_string(x.rank()));
  }
  std::vector<bool> seen(perm.size(), false);
  std::vector<int64_t> out;
  for (int64_t p : perm) {
    if (p < 0 || p >= x.rank() || seen[static_cast<size_t>(p)]) {
      return Status::Invalid(n.name + ": perm is not a permutation of 0.." + std::to_string(x.rank() - 1));
    }
    seen[static_cast<size_t>(p)] = true;
    out.push_back(x[static_cast<int>(p)]);
  }
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(out)}};
}

void GradTranspose(GradCtx& c) {
  std::vector<int64_t> perm = c.node().attrs.Ints("perm");
  int r = c.type(c.in(0)).shape.rank();
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  std::vector<int64_t> inv(perm.size());
  for (size_t i = 0; i < perm.size(); ++i) inv[static_cast<size_t>(perm[i])] = static_cast<int64_t>(i);
  ir::Attrs a;
  a.Set("perm", inv);
  c.set_din(0, c.Op(OpKind::kTranspose, {c.dout(0)}, a));
}

}  // namespace fr::defs
