// Gemm and MatMul.
//
// Gemm (ONNX): Y = alpha * op(A) · op(B) + beta * C, A and B 2-D, C broadcast to Y.
// MatMul (ONNX, numpy semantics, rank >= 2): Y[..., M, N] = op(A)[..., M, K] · op(B)[..., K, N]
// with broadcast batch dims. flowrun adds attributes transA / transB (on the last two dims) and
// alpha, so that gradients are MatMuls too, and `contract_batch`: with transA, A [..., T, M] and
// B [..., T, N] of the same batch dims give Y [M, N] = alpha * sum over the batch and T of
// A^T B, one product over the flattened rows. That is a weight's gradient when the weight is
// shared across the batch: one large product instead of one per batch entry and a SumTo.
//
// SBP rule (one mesh axis), the classic table for Y = A·B, A [M, K], B [K, N]:
//   A     B     Y
//   S(0)  B     S(0)     rows of A are independent
//   B     S(1)  S(1)     columns of B are independent
//   S(1)  S(0)  P        the contraction is split: partial sums
//   P     B     P        linear in A
//   B     P     P        linear in B
//   B     B     B
// With transA (transB) the M and K (K and N) axes of A (B) swap; batch axes and Gemm's C are in
// the rules at the end of this file.
#include "ops/defs.h"

namespace fr::defs {
namespace {

ir::Attrs MatMulAttrs(bool ta, bool tb, double alpha) {
  ir::Attrs a;
  if (ta) a.Set("transA", int64_t{1});
  if (tb) a.Set("transB", int64_t{1});
  if (alpha != 1.0) a.Set("alpha", alpha);
  return a;
}

// Appends dA and dB for Y = alpha * op(A) op(B) (see the derivation in DESIGN notes of the README).
void MatMulGrads(GradCtx& c, bool ta, bool tb, double alpha) {
  ir::ValueId a = c.in(0), b = c.in(1), dy = c.dout(0);
  if (c.need(0)) {
    ir::ValueId da = !ta ? c.Op(OpKind::kMatMul, {dy, b}, MatMulAttrs(false, !tb, alpha), "dA")
                         : c.Op(OpKind::kMatMul, {b, dy}, MatMulAttrs(tb, true, alpha), "dA");
    c.set_din(0, c.SumTo(da, c.type(a).shape));
  }
  if (c.need(1)) {
    if (c.type(b).shape.rank() == 2 && c.type(a).shape.rank() > 2 && !ta) {  // a weight shared across the batch
      ir::Attrs at = MatMulAttrs(true, false, alpha);
      at.Set("contract_batch", int64_t{1});
      c.set_din(1, !tb ? c.Op(OpKind::kMatMul, {a, dy}, at, "dB") : c.Op(OpKind::kMatMul, {dy, a}, at, "dB"));
      return;
    }
    ir::ValueId db = !tb ? c.Op(OpKind::kMatMul, {a, dy}, MatMulAttrs(!ta, false, alpha), "dB")
                         : c.Op(OpKind::kMatMul, {dy, a}, MatMulAttrs(true, ta, alpha), "dB");
    c.set_din(1, c.SumTo(db, c.type(b).shape));
  }
}

}  // namespace

Out InferMatMul(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(ExpectFloat(n, in, 1));
  const Shape &a = in[0].shape, &b = in[1].shape;
  if (n.attrs.Int("contract_batch")) {
    if (!n.attrs.Int("transA") || n.attrs.Int("transB") || a.rank() < 3 || b.rank() != a.rank() ||
        !std::equal(a.dims().begin(), a.dims().end() - 1, b.dims().begin())) {
      return Status::Invalid(n.name + ": contract_batch needs transA and operands [..., T, M] and [..., T, N] with the "
                             "same leading dims, got " + a.ToString() + " x " + b.ToString());
    }
    return std::vector<ir::TensorType>{{DType::kF32, Shape{a[a.rank() - 1], b[b.rank() - 1]}}};
  }
  if (a.rank() < 2 || b.rank() < 2) {
    return Status::Invalid(n.name + ": MatMul with a 1-D operand (" + a.ToString() + " x " + b.ToString() +
                           ") is not supported; reshape to 2-D");
  }
  bool ta = n.attrs.Int("transA"), tb = n.attrs.Int("transB");
  int64_t m = ta ? a[a.rank() - 1] : a[a.rank() - 2], ka = ta ? a[a.rank() - 2] : a[a.rank() - 1];
  int64_t kb = tb ? b[b.rank() - 1] : b[b.rank() - 2], nn = tb ? b[b.rank() - 2] : b[b.rank() - 1];
  if (ka != kb) {
    return Status::Invalid(n.name + ": inner dimensions differ: " + a.ToString() + " x " + b.ToString());
  }
  Shape ba(std::vector<int64_t>(a.dims().begin(), a.dims().end() - 2));
  Shape bb(std::vector<int64_t>(b.dims().begin(), b.dims().end() - 2));
  auto batch = Broadcast(ba, bb);
  if (!batch.ok()) return batch.status().With(n.name + ": batch dims: ");
  std::vector<int64_t> out = batch->dims();
  out.push_back(m);
  out.push_back(nn);
  return std::vector<ir::TensorType>{{DType::kF32, Shape(out)}};
}

Out InferGemm(const ir::Node& n, Types in) {
  if (in[0].shape.rank() != 2 || in[1].shape.rank() != 2) {
    return Status::Invalid(n.name + ": Gemm needs 2-D A and B, got " + in[0].shape.ToString() + " and " +
                           in[1].shape.ToString());
  }
  auto y = InferMatMul(n, in.subspan(0, 2));
  if (!y.ok()) return y;
  if (n.in.size() > 2 && n.in[2] != ir::kNoValue) {
    auto b = Broadcast(in[2].shape, (*y)[0].shape);
    if (!b.ok() || *b != (*y)[0].shape) {
      return Status::Invalid(n.name + ": C " + in[2].shape.ToString() + " does not broadcast to " +
                             (*y)[0].shape.ToString());
    }
  }
  return y;
}

void GradMatMul(GradCtx& c) {
  const auto& at = c.node().attrs;
  MatMulGrads(c, at.Int("transA"), at.Int("transB"), at.Float("alpha", 1.0));
}

void GradGemm(GradCtx& c) {
  const auto& at = c.node().attrs;
  MatMulGrads(c, at.Int("transA"), at.Int("transB"), at.Float("alpha", 1.0));
  if (c.need(2)) {
    ir::ValueId dc = c.SumTo(c.dout(0), c.type(c.in(2)).shape);
    double beta = at.Float("beta", 1.0);
    if (beta != 1.0) {
      ir::Attrs s;
      s.Set("alpha", beta);
      dc = c.Op(OpKind::kScale, {dc}, s, "dC");
    }
    c.set_din(2, dc);
  }
}

// ---- SBP rules ----

// Gemm: Y [M, N] = alpha * op(A) op(B) + beta * C, C broadcast to Y (absent: B). The classic table,
// with C following Y: split where it has the axis (dim > 1), else B; P when Y is P, since the
// pieces' beta * C_k must sum to beta * C. Worked example, A [5, 7], B [7, 6], C [6]:
//   (S(0), B,    B)    -> S(0)
//   (B,    S(1), S(0)) -> S(1)
//   (S(1), S(0), P)    -> P
//   (P,    B,    P)    -> P
//   (B,    P,    P)    -> P
// With transA, A is [7, 5]: its M axis is 0 -> 1 and its K axis 1 -> 0 (same for B with transB).
Sigs SbpGemm(const ir::Node& n, Types in, Types out, int64_t parts) {
  const bool ta = n.attrs.Int("transA"), tb = n.attrs.Int("transB");
  const bool has_c = Present(n, 2);
  const Shape& y = out[0].shape;
  const int64_t k = in[0].shape[ta ? 0 : 1];
  const int a_m = ta ? 1 : 0, a_k = 1 - a_m, b_k = tb ? 1 : 0, b_n = 1 - b_k;
  auto with_c = [&](Sbp a, Sbp b, Sbp c, Sbp y_sbp) {
    sbp::Signature g{{a, b}, {y_sbp}};
    if (n.in.size() > 2) g.in.push_back(has_c ? c : Sbp::B());
    return g;
  };
  auto c_split = [&](int i) { return has_c ? AlignedSplit(in[2].shape, 2, i) : Sbp::B(); };
  Sigs s{Uniform(n, 1, Sbp::B())};
  if (Splits(y[0], parts)) AddSig(s, with_c(Sbp::S(a_m), Sbp::B(), c_split(0), Sbp::S(0)));
  if (Splits(y[1], parts)) AddSig(s, with_c(Sbp::B(), Sbp::S(b_n), c_split(1), Sbp::S(1)));
  if (Splits(k, parts)) AddSig(s, with_c(Sbp::S(a_k), Sbp::S(b_k), Sbp::P(), Sbp::P()));
  AddSig(s, with_c(Sbp::P(), Sbp::B(), Sbp::P(), Sbp::P()));
  AddSig(s, with_c(Sbp::B(), Sbp::P(), Sbp::P(), Sbp::P()));
  return s;
}

// MatMul with contract_batch: Y [M, N] = sum over every axis but the last of A [..., T, M] and
// B [..., T, N]. A contracted axis split on both gives each device a partial sum; M splits Y's
// rows, N its columns. A [4, 5, 7], B [4, 5, 6] -> Y [7, 6]:
//   (S(0), S(0)) -> P, (S(1), S(1)) -> P    the batch and T are summed over
//   (S(2), B) -> S(0), (B, S(2)) -> S(1)
//   (P, B) -> P, (B, P) -> P, (B, B) -> B
namespace {
Sigs SbpContractBatch(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape &a = in[0].shape, &y = out[0].shape;
  const int last = a.rank() - 1;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < last; ++i)
    if (Splits(a[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::P()}});
  if (Splits(y[0], parts)) AddSig(s, {{Sbp::S(last), Sbp::B()}, {Sbp::S(0)}});
  if (Splits(y[1], parts)) AddSig(s, {{Sbp::B(), Sbp::S(last)}, {Sbp::S(1)}});
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  AddSig(s, {{Sbp::B(), Sbp::P()}, {Sbp::P()}});
  return s;
}
}  // namespace

// MatMul: Y [..., M, N] = alpha * op(A) [..., M, K] op(B) [..., K, N], batch dims broadcast. A
// batch axis of Y splits A and B on their aligned batch axis where they have it (dim > 1) and
// leaves B where they broadcast; M, N and K follow the classic table. Worked example,
// A [3, 1, 5, 7], B [4, 7, 6] -> Y [3, 4, 5, 6]:
//   (S(0), B)    -> S(0)    only A has axis 0
//   (B,    S(0)) -> S(1)    axis 1 of Y is B's axis 0; A broadcasts it
//   (S(2), B)    -> S(2)    M
//   (B,    S(2)) -> S(3)    N
//   (S(3), S(1)) -> P       K
//   (P, B) -> P, (B, P) -> P, (B, B) -> B
Sigs SbpMatMul(const ir::Node& n, Types in, Types out, int64_t parts) {
  if (n.attrs.Int("contract_batch")) return SbpContractBatch(n, in, out, parts);
  const bool ta = n.attrs.Int("transA"), tb = n.attrs.Int("transB");
  const Shape &a = in[0].shape, &b = in[1].shape, &y = out[0].shape;
  const int ra = a.rank(), rb = b.rank(), r = y.rank();
  const int a_m = ta ? ra - 1 : ra - 2, a_k = ta ? ra - 2 : ra - 1;
  const int b_k = tb ? rb - 1 : rb - 2, b_n = tb ? rb - 2 : rb - 1;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < r - 2; ++i) {
    if (Splits(y[i], parts)) AddSig(s, {{AlignedSplit(a, r, i), AlignedSplit(b, r, i)}, {Sbp::S(i)}});
  }
  if (Splits(y[r - 2], parts)) AddSig(s, {{Sbp::S(a_m), Sbp::B()}, {Sbp::S(r - 2)}});
  if (Splits(y[r - 1], parts)) AddSig(s, {{Sbp::B(), Sbp::S(b_n)}, {Sbp::S(r - 1)}});
  if (Splits(a[a_k], parts)) AddSig(s, {{Sbp::S(a_k), Sbp::S(b_k)}, {Sbp::P()}});
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  AddSig(s, {{Sbp::B(), Sbp::P()}, {Sbp::P()}});
  return s;
}

}  // namespace fr::defs
