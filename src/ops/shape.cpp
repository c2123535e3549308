// Reshape and Transpose. ONNX's Reshape, Flatten, Squeeze and Unsqueeze all import as Reshape with
// the target shape resolved into the attribute `shape`; Identity and Dropout import as nothing.
//
// SBP: reshape keeps a split when the split axis maps to an axis whose leading part is unchanged
// (e.g. S(0) through [B, T, C] -> [B*T, C] when B splits evenly); P passes through (linear).
// Transpose permutes split axes. Both only move elements, so P(max) and P(min) pass too.
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

// ---- SBP rules ----

namespace {

// Partial pieces of any reduction pass through an op that only moves elements:
// max_k(move(X_k)) = move(max_k X_k).
void AddPartials(const ir::Node& n, Sigs& s) {
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin}) AddSig(s, Uniform(n, 1, Sbp::P(r)));
}

int64_t Prod(const Shape& s, int end) {
  int64_t p = 1;
  for (int i = 0; i < end; ++i) p *= s[i];
  return p;
}

}  // namespace

// Reshape X [I] -> Y [O]. A split of input axis i cuts the flat data into the runs
// [a*L + begin_k * L / I[i], a*L + end_k * L / I[i]) for a < prod(I[:i]), L = prod(I[i:]), where
// [begin_k, end_k) = sbp::SplitRange(I[i], parts, k); a split of output axis j likewise with O.
// Device k holds the same elements in the same order iff prod(I[:i]) == prod(O[:j]) (then L is the
// same) and begin_k(I[i]) / I[i] == begin_k(O[j]) / O[j] for every k. That holds when I[i] == O[j];
// otherwise iff both dims divide evenly by parts. Only if: the condition keeps the pieces' sizes in
// proportion; an uneven split of d = q * parts + r gives r pieces of q + 1, then pieces of q, so the
// ratio (q + 1) / q fixes q and the place of the drop fixes r, and an even split has no drop. So
// two uneven dims line up only if equal. On an N-D mesh the condition concerns the dims each mesh
// axis actually splits (see OpDef::sbp in ops/op.h). Worked examples:
//   [4, 5, 6] -> [20, 6]:  S(0) -> S(0) when 4 and 20 divide by parts (parts 2, not 3)
//                          S(2) -> S(1) (6 == 6 after the same 20 leading elements); S(1): none
//   [6, 5] -> [6, 1, 5]:   S(0) -> S(0), S(1) -> S(2)
//   [5, 6] -> [30]:        S(0) -> none: 5 splits unevenly, so no output split lines up
//   (P) -> P, (P(max)) -> P(max), (P(min)) -> P(min), (B) -> B
Sigs SbpReshape(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape &x = in[0].shape, &y = out[0].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < x.rank(); ++i) {
    if (!Splits(x[i], parts)) continue;
    for (int j = 0; j < y.rank(); ++j) {
      if (!Splits(y[j], parts) || Prod(x, i) != Prod(y, j)) continue;
      if (x[i] == y[j] || (x[i] % parts == 0 && y[j] % parts == 0)) AddSig(s, {{Sbp::S(i)}, {Sbp::S(j)}});
    }
  }
  AddPartials(n, s);
  return s;
}

// A piece reshapes to its own piece of the target.
void PhysicalReshape(ir::Node& n, Types, Types physical_out) { n.attrs.Set("shape", physical_out[0].shape.dims()); }

// Transpose: output axis j is input axis perm[j]. Transpose(X [2, 5, 7], perm [1, 2, 0]) -> [5, 7, 2]:
//   (S(1)) -> S(0), (S(2)) -> S(1), (S(0)) -> S(2), P (any reduction) -> the same P, (B) -> B
Sigs SbpTranspose(const ir::Node& n, Types in, Types out, int64_t parts) {
  std::vector<int64_t> perm = n.attrs.Ints("perm");
  const int r = in[0].shape.rank();
  if (perm.empty())
    for (int i = r - 1; i >= 0; --i) perm.push_back(i);
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int j = 0; j < r; ++j) {
    if (Splits(out[0].shape[j], parts)) {
      AddSig(s, {{Sbp::S(static_cast<int>(perm[static_cast<size_t>(j)]))}, {Sbp::S(j)}});
    }
  }
  AddPartials(n, s);
  return s;
}

}  // namespace fr::defs
