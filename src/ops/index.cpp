// Tile, Pad and GatherElements. Import moves Tile's repeats and Pad's pads, value and mode into
// attributes (`repeats`; `pads` [begin..., end...], `value`, `mode`). Their gradients reuse ops that
// exist where one serves: a tile's gradient sums the tiles (Reshape then ReduceSum), a constant
// pad's is the Slice of the padded region back out; the other pads (PadGrad) and GatherElements
// (GatherElementsGrad) scatter back.
#include "ops/defs.h"

namespace fr::defs {

Out InferTile(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  const std::vector<int64_t> rep = n.attrs.Ints("repeats");
  if (static_cast<int>(rep.size()) != x.rank()) {
    return Status::Invalid(n.name + ": Tile needs one repeat per axis of " + x.ToString() + ", got " + std::to_string(rep.size()));
  }
  std::vector<int64_t> d;
  for (int i = 0; i < x.rank(); ++i) {
    if (rep[static_cast<size_t>(i)] < 0) return Status::Invalid(n.name + ": Tile repeats must be >= 0");
    int64_t v = 0;
    if (__builtin_mul_overflow(x[i], rep[static_cast<size_t>(i)], &v)) return Status::Invalid(n.name + ": Tile overflows");
    d.push_back(v);
  }
  RETURN_IF_ERROR(CheckDims(d).With(n.name + ": "));
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

// Y [r0 * d0, r1 * d1, ...] viewed as [r0, d0, r1, d1, ...]: dX sums over the r axes.
void GradTile(GradCtx& c) {
  const Shape x = c.type(c.in(0)).shape;
  const std::vector<int64_t> rep = c.node().attrs.Ints("repeats");
  std::vector<int64_t> view, axes;
  for (int i = 0; i < x.rank(); ++i) {
    axes.push_back(static_cast<int64_t>(view.size()));
    view.push_back(rep[static_cast<size_t>(i)]);
    view.push_back(x[i]);
  }
  ir::Attrs shape, sum;
  shape.Set("shape", view);
  sum.Set("axes", axes);
  sum.Set("keepdims", int64_t{0});
  c.set_din(0, c.Op(OpKind::kReduceSum, {c.Op(OpKind::kReshape, {c.dout(0)}, shape, "tiles")}, sum, "sum"));
}

// Tile(X [5, 7]), repeats [1, 3]: an axis repeated once splits as it is; every tile of a piece
// is a piece of the tiles, so P passes (a copy is linear).
//   (S(0)) -> S(0), (P) -> P
Sigs SbpTile(const ir::Node& n, Types in, Types, int64_t parts) {
  const std::vector<int64_t> rep = n.attrs.Ints("repeats");
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i)
    if (rep[static_cast<size_t>(i)] == 1 && Splits(in[0].shape[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  if (in[0].dtype == DType::kF32) AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// Pad(X) with attributes pads [begin..., end...] and mode (kPadConstant with `value`, reflect,
// edge, wrap); PadGrad(dY) -> dX of the same attributes.
Out InferPad(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  const std::vector<int64_t> p = n.attrs.Ints("pads");
  const int64_t mode = n.attrs.Int("mode", kPadConstant);
  if (mode < kPadConstant || mode > kPadWrap) return Status::Invalid(n.name + ": unknown Pad mode " + std::to_string(mode));
  if (static_cast<int>(p.size()) != 2 * x.rank()) return Status::Invalid(n.name + ": Pad needs 2 pads per axis of " + x.ToString());
  std::vector<int64_t> d;
  for (int i = 0; i < x.rank(); ++i) {
    const int64_t b = p[static_cast<size_t>(i)], e = p[static_cast<size_t>(i + x.rank())];
    if (b < 0 || e < 0) return Status::Invalid(n.name + ": negative pads (cropping) are not supported");
    if (b > (int64_t{1} << 40) || e > (int64_t{1} << 40)) return Status::Invalid(n.name + ": pads out of range");
    if (mode != kPadConstant && (b > 0 || e > 0) && x[i] == 0) return Status::Invalid(n.name + ": an empty axis has nothing to pad from");
    if (mode == kPadReflect && (b >= x[i] || e >= x[i]) && (b > 0 || e > 0)) {
      return Status::Invalid(n.name + ": reflect pads must be smaller than the axis (" + std::to_string(x[i]) + "), as PyTorch's are");
    }
    d.push_back(x[i] + b + e);
  }
  RETURN_IF_ERROR(CheckDims(d).With(n.name + ": "));
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

Out InferPadGrad(const ir::Node& n, Types in) {
  const Shape& y = in[0].shape;
  const std::vector<int64_t> p = n.attrs.Ints("pads");
  if (static_cast<int>(p.size()) != 2 * y.rank()) return Status::Invalid(n.name + ": PadGrad needs 2 pads per axis of " + y.ToString());
  std::vector<int64_t> d;
  for (int i = 0; i < y.rank(); ++i) {
    d.push_back(y[i] - p[static_cast<size_t>(i)] - p[static_cast<size_t>(i + y.rank())]);
    if (d.back() < 0) return Status::Invalid(n.name + ": pads larger than " + y.ToString());
  }
  return std::vector<ir::TensorType>{{DType::kF32, Shape(d)}};
}

// Constant padding: dX is the padded region's inside, a Slice of dY. The other modes read some
// elements several times: PadGrad sums dY back onto them.
void GradPad(GradCtx& c) {
  if (c.node().attrs.Int("mode", kPadConstant) != kPadConstant) {
    c.set_din(0, c.Op(OpKind::kPadGrad, {c.dout(0)}, c.node().attrs));
    return;
  }
  const Shape x = c.type(c.in(0)).shape;
  const std::vector<int64_t> p = c.node().attrs.Ints("pads");
  std::vector<int64_t> starts, ends, steps;
  for (int i = 0; i < x.rank(); ++i) {
    starts.push_back(p[static_cast<size_t>(i)]);
    ends.push_back(p[static_cast<size_t>(i)] + x[i]);
    steps.push_back(1);
  }
  ir::Attrs a;
  a.Set("starts", starts);
  a.Set("ends", ends);
  a.Set("steps", steps);
  c.set_din(0, c.Op(OpKind::kSlice, {c.dout(0)}, a, "inside"));
}

// Pad(X [5, 7]), pads [0, 1, 0, 2]: an axis padded by nothing splits as it is; P where every
// output is an input element or 0 (reflect, edge, wrap; constant with value 0).
//   (S(0)) -> S(0), (P) -> P unless constant with a value other than 0
// PadGrad(dY [6, 9]) of those pads: (S(0)) -> S(0), (P) -> P (it only sums dY's elements).
Sigs SbpPad(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  const std::vector<int64_t> p = n.attrs.Ints("pads");
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < x.rank(); ++i)
    if (p[static_cast<size_t>(i)] == 0 && p[static_cast<size_t>(i + x.rank())] == 0 && Splits(x[i], parts)) {
      AddSig(s, Uniform(n, 1, Sbp::S(i)));
    }
  const bool zero_fill = n.attrs.Int("mode", kPadConstant) != kPadConstant || n.attrs.Float("value", 0.0) == 0.0;
  if (in[0].dtype == DType::kF32 && zero_fill) AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// GatherElements(data, indices, axis) -> Y like indices: Y[..., i, ...] = data[..., indices[..., i,
// ...], ...] along `axis`; elsewhere the index dims must not exceed data's.
Out InferGatherElements(const ir::Node& n, Types in) {
  const Shape &x = in[0].shape, &idx = in[1].shape;
  if (in[1].dtype != DType::kI64 && in[1].dtype != DType::kI32) return Status::Invalid(n.name + ": GatherElements indices must be int64 or int32");
  auto a = x.Axis(n.attrs.Int("axis", 0));
  if (!a.ok()) return a.status().With(n.name + ": ");
  if (idx.rank() != x.rank()) return Status::Invalid(n.name + ": indices " + idx.ToString() + " must have data's rank " + x.ToString());
  for (int i = 0; i < x.rank(); ++i)
    if (i != *a && idx[i] > x[i]) return Status::Invalid(n.name + ": indices " + idx.ToString() + " exceed data " + x.ToString());
  return std::vector<ir::TensorType>{{in[0].dtype, idx}};
}

Out InferGatherElementsGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const ir::TensorType data{DType::kF32, Shape(n.attrs.Ints("shape"))};
  const std::vector<ir::TensorType> fwd = {data, in[1]};
  auto y = InferGatherElements(n, fwd);
  FR_CHECK(y.ok() && (*y)[0].shape == in[0].shape, n.name + ": dY is not a GatherElements of " + data.shape.ToString());
  return std::vector<ir::TensorType>{data};
}

void GradGatherElements(GradCtx& c) {
  ir::Attrs a = c.node().attrs;
  a.Set("shape", c.type(c.in(0)).shape.dims());
  c.set_din(0, c.Op(OpKind::kGatherElementsGrad, {c.dout(0), c.in(1)}, a));
}

// GatherElements(data [5, 7], indices [5, 3]), axis 1: rows other than the gather axis split
// alike where data and indices have the same dim:
//   (S(0), S(0)) -> S(0);  (P, B) -> P (a gather moves elements)
Sigs SbpGatherElements(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape &x = in[0].shape, &idx = in[1].shape;
  const int a = *x.Axis(n.attrs.Int("axis", 0));
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < x.rank(); ++i)
    if (i != a && x[i] == idx[i] && Splits(x[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::S(i)}});
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin}) AddSig(s, {{Sbp::P(r), Sbp::B()}, {Sbp::P(r)}});
  return s;
}

// GatherElementsGrad(dY [5, 3], indices [5, 3]) -> dData [5, 7]: (S(0), S(0)) -> S(0) where the
// dims match; linear in dY: (P, B) -> P.
Sigs SbpGatherElementsGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape &x = out[0].shape, &idx = in[1].shape;
  const int a = *x.Axis(n.attrs.Int("axis", 0));
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < x.rank(); ++i)
    if (i != a && x[i] == idx[i] && Splits(x[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::S(i)}});
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

}  // namespace fr::defs
