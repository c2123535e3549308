// Ops that move elements without arithmetic: Reshape, Transpose, Gather (with its scatter-add
// gradient), Concat, Split, Slice (with SliceGrad), Expand; and the shape arithmetic PyTorch exports
// around them: Shape, ConstantOfShape, Range. ONNX's Reshape, Flatten, Squeeze and Unsqueeze all
// import as Reshape with the target shape resolved into the attribute `shape`; Identity and Dropout
// import as nothing. Inputs that decide an output's shape (Split sizes, Slice bounds, Expand's
// shape, ConstantOfShape's shape, Range's length) must be constants: import moves them into
// attributes, so that inference never reads tensor data.
//
// SBP: reshape keeps a split when the split axis maps to an axis whose leading part is unchanged
// (e.g. S(0) through [B, T, C] -> [B*T, C] when B splits evenly); P passes through (linear).
// Transpose permutes split axes; Gather, Concat, Split, Slice and Expand keep splits of the axes
// they do not cut. All of them only move elements, so P(max) and P(min) pass too. Shape,
// ConstantOfShape and Range only ever fold at import: all-B rules and no gradients.
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
void AddPartials(const ir::Node& n, Sigs& s, size_t outs = 1) {
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin})
    AddSig(s, Uniform(n, outs, Sbp::P(r)));
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
void PhysicalReshape(ir::Node& n, Types, Types physical_out, Starts) { n.attrs.Set("shape", physical_out[0].shape.dims()); }

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

// ---- Gather and its gradient ----

namespace {

bool IsIndex(DType t) { return t == DType::kI64 || t == DType::kI32; }

}  // namespace

// Gather(data [d_0 .. d_{r-1}], indices [i_0 .. i_{q-1}]) along axis a
//   -> [d_0 .. d_{a-1}, i_0 .. i_{q-1}, d_{a+1} .. d_{r-1}]; negative indices count from the end.
Out InferGather(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  if (!IsIndex(in[1].dtype)) {
    return Status::Invalid(n.name + ": Gather indices must be int64 or int32, got " + std::string(Name(in[1].dtype)));
  }
  auto a = x.Axis(n.attrs.Int("axis", 0));
  if (!a.ok()) return a.status().With(n.name + ": ");
  std::vector<int64_t> d(x.dims().begin(), x.dims().begin() + *a);
  d.insert(d.end(), in[1].shape.dims().begin(), in[1].shape.dims().end());
  d.insert(d.end(), x.dims().begin() + *a + 1, x.dims().end());
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

void GradGather(GradCtx& c) {
  const Shape x = c.type(c.in(0)).shape;
  ir::Attrs a;
  a.Set("axis", int64_t{*x.Axis(c.node().attrs.Int("axis", 0))});
  a.Set("shape", x.dims());
  c.set_din(0, c.Op(OpKind::kGatherGrad, {c.dout(0), c.in(1)}, a));
}

// GatherGrad(dY, indices) -> dData of attribute `shape`, zero but where Gather read: there it sums
// the dY rows that read each element (an embedding row used twice gets both rows' gradients).
Out InferGatherGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const ir::TensorType data{DType::kF32, Shape(n.attrs.Ints("shape"))};
  const std::vector<ir::TensorType> fwd = {data, in[1]};
  auto y = InferGather(n, fwd);
  if (!y.ok()) return y.status();
  if ((*y)[0].shape != in[0].shape) {
    return Status::Invalid(n.name + ": dY " + in[0].shape.ToString() + " is not the Gather of " +
                           data.shape.ToString() + " by indices " + in[1].shape.ToString());
  }
  return std::vector<ir::TensorType>{data};
}

// ---- Concat and Split ----

Out InferConcat(const ir::Node& n, Types in) {
  if (!n.attrs.Has("axis")) return Status::Invalid(n.name + ": Concat needs an axis");
  const Shape& x0 = in[0].shape;
  auto a = x0.Axis(n.attrs.Int("axis"));
  if (!a.ok()) return a.status().With(n.name + ": ");
  std::vector<int64_t> d = x0.dims();
  d[static_cast<size_t>(*a)] = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    const Shape& xi = in[i].shape;
    if (in[i].dtype != in[0].dtype) return Status::Invalid(n.name + ": Concat input dtypes differ");
    bool same = xi.rank() == x0.rank();
    for (int k = 0; same && k < x0.rank(); ++k) same = k == *a || xi[k] == x0[k];
    if (!same) {
      return Status::Invalid(n.name + ": input " + std::to_string(i) + " " + xi.ToString() + " does not match " +
                             x0.ToString() + " off axis " + std::to_string(*a));
    }
    d[static_cast<size_t>(*a)] += xi[*a];
  }
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

void GradConcat(GradCtx& c) {
  const int a = *c.type(c.in(0)).shape.Axis(c.node().attrs.Int("axis"));
  std::vector<int64_t> sizes;
  for (size_t i = 0; i < c.node().in.size(); ++i) sizes.push_back(c.type(c.in(static_cast<int>(i))).shape[a]);
  ir::Attrs at;
  at.Set("axis", int64_t{a});
  at.Set("split", sizes);
  std::vector<ir::ValueId> parts = c.OpN(OpKind::kSplit, {c.dout(0)}, at, "grad");
  for (size_t i = 0; i < parts.size(); ++i)
    if (c.need(static_cast<int>(i))) c.set_din(static_cast<int>(i), parts[i]);
}

// Split(X) along `axis` into pieces of the sizes in attribute `split` (import resolves ONNX's split
// input, or the equal split, into it), one output each.
Out InferSplit(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  auto a = x.Axis(n.attrs.Int("axis", 0));
  if (!a.ok()) return a.status().With(n.name + ": ");
  const std::vector<int64_t>& sizes = n.attrs.Ints("split");
  int64_t total = 0;
  for (int64_t v : sizes) {
    if (v < 0) return Status::Invalid(n.name + ": negative split size " + std::to_string(v));
    // Sizes that wrap around int64 would add up to the dim and slice outside the input.
    if (__builtin_add_overflow(total, v, &total)) return Status::Invalid(n.name + ": split sizes overflow int64");
  }
  if (sizes.empty() || total != x[*a]) {
    return Status::Invalid(n.name + ": split sizes " + Shape(sizes).ToString() + " do not add up to dim " +
                           std::to_string(*a) + " of " + x.ToString());
  }
  std::vector<ir::TensorType> out;
  for (int64_t v : sizes) {
    std::vector<int64_t> d = x.dims();
    d[static_cast<size_t>(*a)] = v;
    out.push_back({in[0].dtype, Shape(d)});
  }
  return out;
}

void GradSplit(GradCtx& c) {
  std::vector<ir::ValueId> parts;
  for (size_t i = 0; i < c.node().out.size(); ++i) {
    ir::ValueId d = c.dout(static_cast<int>(i));
    parts.push_back(d != ir::kNoValue ? d : c.Zeros(c.type(c.out(static_cast<int>(i))).shape));
  }
  ir::Attrs at;
  at.Set("axis", int64_t{*c.type(c.in(0)).shape.Axis(c.node().attrs.Int("axis", 0))});
  c.set_din(0, c.Op(OpKind::kConcat, parts, at));
}

// ---- Slice ----
//
// Attributes `starts`, `ends` and `steps` have one entry per axis, normalised by import from ONNX's
// inputs (negative positions resolved, clamped, absent axes whole): a step > 0 takes start,
// start + step, ... below end; a step < 0 takes them above end (end may be -1).

namespace {

// Positions are within an axis (import clamps them), but a step may be any int64: the count is
// taken over the step's magnitude, unsigned, so that neither end - start + step nor -INT64_MIN
// overflows.
int64_t SliceLen(int64_t start, int64_t end, int64_t step) {
  const int64_t span = step > 0 ? end - start : start - end;
  if (span <= 0) return 0;
  const uint64_t magnitude = step > 0 ? static_cast<uint64_t>(step) : uint64_t{0} - static_cast<uint64_t>(step);
  return static_cast<int64_t>((static_cast<uint64_t>(span) - 1) / magnitude + 1);
}

Result<Shape> SliceOf(const ir::Node& n, const Shape& x) {
  const auto &st = n.attrs.Ints("starts"), &en = n.attrs.Ints("ends"), &sp = n.attrs.Ints("steps");
  const auto r = static_cast<size_t>(x.rank());
  if (st.size() != r || en.size() != r || sp.size() != r) {
    return Status::Invalid(n.name + ": starts, ends and steps need one entry per axis of " + x.ToString());
  }
  std::vector<int64_t> out;
  for (size_t d = 0; d < r; ++d) {
    const int64_t dim = x[static_cast<int>(d)];
    if (sp[d] == 0) return Status::Invalid(n.name + ": slice step 0 on axis " + std::to_string(d));
    const int64_t len = SliceLen(st[d], en[d], sp[d]), last = st[d] + (len - 1) * sp[d];
    if (len > 0 && (st[d] < 0 || st[d] >= dim || last < 0 || last >= dim)) {
      return Status::Invalid(n.name + ": slice " + std::to_string(st[d]) + ":" + std::to_string(en[d]) + ":" +
                             std::to_string(sp[d]) + " leaves axis " + std::to_string(d) + " of " + x.ToString());
    }
    out.push_back(len);
  }
  return Shape(out);
}

// Whether the slice keeps axis d of x whole: the only axes SBP may split.
bool Whole(const ir::Node& n, const Shape& x, int d) {
  const auto i = static_cast<size_t>(d);
  return n.attrs.Ints("starts")[i] == 0 && n.attrs.Ints("steps")[i] == 1 && n.attrs.Ints("ends")[i] == x[d];
}

// A piece of a whole axis is sliced whole: the end becomes the piece's size.
void SetWholeEnds(ir::Node& n, const Shape& logical, const Shape& physical) {
  std::vector<int64_t> ends = n.attrs.Ints("ends");
  for (int d = 0; d < logical.rank(); ++d)
    if (Whole(n, logical, d)) ends[static_cast<size_t>(d)] = physical[d];
  n.attrs.Set("ends", ends);
}

}  // namespace

Out InferSlice(const ir::Node& n, Types in) {
  ASSIGN_OR_RETURN(Shape y, SliceOf(n, in[0].shape));
  return std::vector<ir::TensorType>{{in[0].dtype, y}};
}

void GradSlice(GradCtx& c) {
  ir::Attrs a = c.node().attrs;
  a.Set("shape", c.type(c.in(0)).shape.dims());
  c.set_din(0, c.Op(OpKind::kSliceGrad, {c.dout(0)}, a));
}

// SliceGrad(dY) -> dX of attribute `shape`: dY where the slice took its elements, zeros elsewhere.
Out InferSliceGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const Shape x(n.attrs.Ints("shape"));
  ASSIGN_OR_RETURN(Shape y, SliceOf(n, x));
  if (y != in[0].shape) {
    return Status::Invalid(n.name + ": dY " + in[0].shape.ToString() + " is not the slice " + y.ToString() + " of " +
                           x.ToString());
  }
  return std::vector<ir::TensorType>{{DType::kF32, x}};
}

// ---- Expand ----

// Expand(X) broadcasts X and attribute `shape` together (ONNX's rule is two-way: a 1 in `shape`
// keeps X's dim).
Out InferExpand(const ir::Node& n, Types in) {
  auto y = Broadcast(in[0].shape, Shape(n.attrs.Ints("shape")));
  if (!y.ok()) return y.status().With(n.name + ": ");
  return std::vector<ir::TensorType>{{in[0].dtype, *y}};
}

void GradExpand(GradCtx& c) { c.set_din(0, c.SumTo(c.dout(0), c.type(c.in(0)).shape)); }

// ---- Shape arithmetic: folded at import, never differentiated ----

namespace {

Result<DType> DTypeAttr(const ir::Node& n) {
  const int64_t t = n.attrs.Int("dtype", static_cast<int64_t>(DType::kF32));
  if (t < 0 || t >= kNumDTypes) return Status::Invalid(n.name + ": bad dtype " + std::to_string(t));
  return static_cast<DType>(t);
}

}  // namespace

// Shape(X) -> int64 [k]: X's dims from `start` to `end` (opset 15; negative counts from the end,
// both clamped). Import folds it from X's static type whatever X is; the kernel reads only the
// input's shape.
Out InferShape(const ir::Node& n, Types in) {
  const int64_t r = in[0].shape.rank();
  auto clamp = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
  const int64_t b = clamp(n.attrs.Int("start", 0)), e = clamp(n.attrs.Int("end", r));
  return std::vector<ir::TensorType>{{DType::kI64, Shape{std::max<int64_t>(e - b, 0)}}};
}

// ConstantOfShape(shape) -> attribute `shape` (import resolves the constant input into it), filled
// with `value` as attribute `dtype` (a flowrun DType; float32 0 by default).
Out InferConstantOfShape(const ir::Node& n, Types in) {
  const std::vector<int64_t>& d = n.attrs.Ints("shape");
  if (in[0].dtype != DType::kI64 || in[0].shape.rank() != 1 || in[0].shape[0] != static_cast<int64_t>(d.size())) {
    return Status::Invalid(n.name + ": ConstantOfShape needs a 1-D int64 shape of " + std::to_string(d.size()) +
                           " entries, got " + std::string(Name(in[0].dtype)) + " " + in[0].shape.ToString());
  }
  RETURN_IF_ERROR(CheckDims(d).With(n.name + ": "));
  ASSIGN_OR_RETURN(DType t, DTypeAttr(n));
  return std::vector<ir::TensorType>{{t, Shape(d)}};
}

// Range(start, limit, delta), scalars of one type -> [size]: start + i * delta. The length depends
// on the values, so import computes attribute `size` from the constant inputs.
Out InferRange(const ir::Node& n, Types in) {
  for (size_t i = 0; i < 3; ++i) {
    if (in[i].shape.rank() != 0 || in[i].dtype != in[0].dtype) {
      return Status::Invalid(n.name + ": Range needs three scalars of one type");
    }
  }
  if (in[0].dtype != DType::kF32 && !IsIndex(in[0].dtype)) {
    return Status::Invalid(n.name + ": Range of " + std::string(Name(in[0].dtype)) + " is not supported");
  }
  const int64_t size = n.attrs.Int("size", -1);
  if (size < 0) return Status::Invalid(n.name + ": Range needs its length");
  return std::vector<ir::TensorType>{{in[0].dtype, Shape{size}}};
}

// ---- SBP rules of the ops above ----

// Gather(data [V, C], indices [B, T]), axis 0 -> [B, T, C], the embedding lookup. The output's axes
// are data's axes before `axis`, then the indices' axes, then data's axes after it:
//   (B, S(0))    -> S(0)     each device looks up its rows of indices
//   (B, S(1))    -> S(1)
//   (S(1), B)    -> S(2)     a column slice of the table gives those columns of every row
//   (P, B)       -> P        a lookup moves elements: P(max) and P(min) pass too
//   (B, B)       -> B
// No (S(0), B): a split vocabulary needs a masked lookup (rows a device lacks read as zero,
// output P), which this kernel does not do.
Sigs SbpGather(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape &x = in[0].shape, &idx = in[1].shape;
  const int a = *x.Axis(n.attrs.Int("axis", 0)), q = idx.rank();
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < q; ++i)
    if (Splits(idx[i], parts)) AddSig(s, {{Sbp::B(), Sbp::S(i)}, {Sbp::S(a + i)}});
  for (int j = 0; j < x.rank(); ++j)
    if (j != a && Splits(x[j], parts)) AddSig(s, {{Sbp::S(j), Sbp::B()}, {Sbp::S(j < a ? j : j + q - 1)}});
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin})
    AddSig(s, {{Sbp::P(r), Sbp::B()}, {Sbp::P(r)}});
  return s;
}

// GatherGrad(dY [B, T, C], indices [B, T]), axis 0 -> dData [V, C]: each device scatter-adds its
// rows into a whole table of zeros, so a split of the indices gives partial sums.
//   (S(0), S(0)) -> P
//   (S(1), S(1)) -> P
//   (S(2), B)    -> S(1)     columns stay columns
//   (P, B)       -> P        linear in dY
Sigs SbpGatherGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape &x = out[0].shape, &idx = in[1].shape;
  const int a = static_cast<int>(n.attrs.Int("axis")), q = idx.rank();
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < q; ++i)
    if (Splits(idx[i], parts)) AddSig(s, {{Sbp::S(a + i), Sbp::S(i)}, {Sbp::P()}});
  for (int j = 0; j < x.rank(); ++j)
    if (j != a && Splits(x[j], parts)) AddSig(s, {{Sbp::S(j < a ? j : j + q - 1), Sbp::B()}, {Sbp::S(j)}});
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// A device's dData piece is the whole table (P) or its columns (S).
void PhysicalGatherGrad(ir::Node& n, Types, Types physical_out, Starts) {
  n.attrs.Set("shape", physical_out[0].shape.dims());
}

// Concat(X [4, 5], Y [4, 3]), axis 1 -> [4, 8]: pieces concatenate alike along any other axis.
//   (S(0), S(0)) -> S(0), (P, P) -> P (any reduction), (B, B) -> B; never S(1)
Sigs SbpConcat(const ir::Node& n, Types, Types out, int64_t parts) {
  const Shape& y = out[0].shape;
  const int a = *y.Axis(n.attrs.Int("axis"));
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int j = 0; j < y.rank(); ++j)
    if (j != a && Splits(y[j], parts)) AddSig(s, Uniform(n, 1, Sbp::S(j)));
  AddPartials(n, s);
  return s;
}

// Split(X [4, 9]), axis 1, split [3, 6] -> [4, 3], [4, 6]: any other axis splits every output alike;
// the sizes concern the unsplit axis, so pieces run the node unchanged.
//   (S(0)) -> (S(0), S(0)), (P) -> (P, P) (any reduction), (B) -> (B, B)
Sigs SbpSplit(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape& x = in[0].shape;
  const int a = *x.Axis(n.attrs.Int("axis", 0));
  Sigs s{Uniform(n, out.size(), Sbp::B())};
  for (int j = 0; j < x.rank(); ++j)
    if (j != a && Splits(x[j], parts)) AddSig(s, Uniform(n, out.size(), Sbp::S(j)));
  AddPartials(n, s, out.size());
  return s;
}

// Slice(X [4, 6, 5]), starts [0, 1, 0], ends [4, 5, 5], steps [1, 2, 1] -> [4, 2, 5]: axes kept whole
// split, a cut axis does not.
//   (S(0)) -> S(0), (S(2)) -> S(2), never S(1); P (any reduction) -> the same P; (B) -> B
Sigs SbpSlice(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int d = 0; d < x.rank(); ++d)
    if (Whole(n, x, d) && Splits(x[d], parts)) AddSig(s, Uniform(n, 1, Sbp::S(d)));
  AddPartials(n, s);
  return s;
}

void PhysicalSlice(ir::Node& n, Types logical_in, Types physical_out, Starts) {
  SetWholeEnds(n, logical_in[0].shape, physical_out[0].shape);
}

// SliceGrad(dY [4, 2, 5]) -> dX [4, 6, 5] for the slice above: dY in place, zeros elsewhere.
//   (S(0)) -> S(0), (S(2)) -> S(2), (P) -> P (linear), (B) -> B
Sigs SbpSliceGrad(const ir::Node& n, Types, Types out, int64_t parts) {
  const Shape& x = out[0].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int d = 0; d < x.rank(); ++d)
    if (Whole(n, x, d) && Splits(x[d], parts)) AddSig(s, Uniform(n, 1, Sbp::S(d)));
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

void PhysicalSliceGrad(ir::Node& n, Types, Types physical_out, Starts) {
  SetWholeEnds(n, Shape(n.attrs.Ints("shape")), physical_out[0].shape);
  n.attrs.Set("shape", physical_out[0].shape.dims());
}

// Expand(X [5, 1]), shape [3, 5, 7] -> [3, 5, 7]: an output axis splits X where X has it and
// leaves X whole where X is broadcast along it.
//   (B) -> S(0), (S(0)) -> S(1), (B) -> S(2), P (any reduction) -> the same P, (B) -> B
Sigs SbpExpand(const ir::Node& n, Types in, Types out, int64_t parts) {
  const Shape& y = out[0].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < y.rank(); ++i)
    if (Splits(y[i], parts)) AddSig(s, {{AlignedSplit(in[0].shape, y.rank(), i)}, {Sbp::S(i)}});
  AddPartials(n, s);
  return s;
}

// A piece expands to its own piece of the target.
void PhysicalExpand(ir::Node& n, Types, Types physical_out, Starts) { n.attrs.Set("shape", physical_out[0].shape.dims()); }

// Shape, ConstantOfShape, Range: folded at import, so never placed; B alone is always right
// (Shape of a split piece would give the piece's dims).
Sigs SbpFoldOnly(const ir::Node& n, Types, Types out, int64_t) { return {Uniform(n, out.size(), Sbp::B())}; }

// ---- GatherND ----

// GatherND(data [d_0 .. d_{r-1}], indices [i_0 .. i_{q-2}, k]), batch_dims 0 -> [i_0 .. i_{q-2},
// d_k .. d_{r-1}]: each index tuple of k picks a slice of data (negative entries count from the
// end). Exporters write it for advanced indexing, such as an attention mask's mask[:, None, None, :].
Out InferGatherND(const ir::Node& n, Types in) {
  const Shape &x = in[0].shape, &idx = in[1].shape;
  if (!IsIndex(in[1].dtype)) return Status::Invalid(n.name + ": GatherND indices must be int64 or int32");
  if (idx.rank() < 1 || idx[idx.rank() - 1] < 1 || idx[idx.rank() - 1] > x.rank()) {
    return Status::Invalid(n.name + ": GatherND indices " + idx.ToString() + " must end in a tuple length in [1, " +
                           std::to_string(x.rank()) + "] for data " + x.ToString());
  }
  const int64_t k = idx[idx.rank() - 1];
  std::vector<int64_t> d(idx.dims().begin(), idx.dims().end() - 1);
  d.insert(d.end(), x.dims().begin() + k, x.dims().end());
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

// GatherNDGrad(dY, indices) -> dData of attribute `shape`: zeros, and each slice's dY added back.
Out InferGatherNDGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const ir::TensorType data{DType::kF32, Shape(n.attrs.Ints("shape"))};
  const std::vector<ir::TensorType> fwd = {data, in[1]};
  auto y = InferGatherND(n, fwd);
  FR_CHECK(y.ok() && (*y)[0].shape == in[0].shape, n.name + ": dY " + in[0].shape.ToString() + " is not a GatherND of " +
                                                       data.shape.ToString());
  return std::vector<ir::TensorType>{data};
}

void GradGatherND(GradCtx& c) {
  ir::Attrs a;
  a.Set("shape", c.type(c.in(0)).shape.dims());
  c.set_din(0, c.Op(OpKind::kGatherNDGrad, {c.dout(0), c.in(1)}, a));
}

// GatherND(data [4, 7], indices [4, 1, 2]) -> [4, 1]: the index tuples' leading axes split the
// output's; data stays whole (a tuple may point anywhere in it). A gather moves elements, so any P
// passes.
//   (B, S(0)) -> S(0);  (P, B) -> P
Sigs SbpGatherND(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& idx = in[1].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i + 1 < idx.rank(); ++i)
    if (Splits(idx[i], parts)) AddSig(s, {{Sbp::B(), Sbp::S(i)}, {Sbp::S(i)}});
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin}) AddSig(s, {{Sbp::P(r), Sbp::B()}, {Sbp::P(r)}});
  return s;
}

// GatherNDGrad(dY [4, 1], indices [4, 1, 2]) -> dData [4, 7]: each device adds its slices into
// whole zeros: (S(0), S(0)) -> P; linear in dY: (P, B) -> P.
Sigs SbpGatherNDGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& idx = in[1].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i + 1 < idx.rank(); ++i)
    if (Splits(idx[i], parts)) AddSig(s, {{Sbp::S(i), Sbp::S(i)}, {Sbp::P()}});
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// ---- ScatterND ----

// ScatterND(data [d_0 .. d_{r-1}], indices [i_0 .. i_{q-2}, k], updates [i_0 .. i_{q-2}, d_k ..
// d_{r-1}]) -> data with each index tuple's slice replaced by (attribute add = 0) or increased by
// (add = 1) its updates slice. Exporters write it for slice assignment (x[:, 0] = y).
Out InferScatterND(const ir::Node& n, Types in) {
  const Shape &x = in[0].shape, &idx = in[1].shape, &u = in[2].shape;
  if (in[0].dtype != in[2].dtype) return Status::Invalid(n.name + ": ScatterND updates must have data's type");
  const std::vector<ir::TensorType> gather = {in[0], in[1]};
  ASSIGN_OR_RETURN(std::vector<ir::TensorType> want, InferGatherND(n, gather));
  if (u != want[0].shape) {
    return Status::Invalid(n.name + ": ScatterND updates " + u.ToString() + " must be " + want[0].shape.ToString() + " for data " +
                           x.ToString() + " and indices " + idx.ToString());
  }
  return std::vector<ir::TensorType>{in[0]};
}

// dUpdates is the slices of dY the updates went to (GatherND). dData is dY where nothing was
// replaced: dY with the scattered slices zeroed (ScatterND of zeros), or dY itself for add.
void GradScatterND(GradCtx& c) {
  if (c.need(2)) c.set_din(2, c.Op(OpKind::kGatherND, {c.dout(0), c.in(1)}));
  if (!c.need(0)) return;
  if (c.node().attrs.Int("add") != 0) {
    c.set_din(0, c.dout(0));
    return;
  }
  const ir::ValueId zeros = c.Zeros(c.type(c.in(2)).shape);
  c.set_din(0, c.Op(OpKind::kScatterND, {c.dout(0), c.in(1), zeros}, c.node().attrs));
}

// ScatterND(data [5, 7], indices [3, 1], updates [3, 7]): the slices' own axes split data,
// updates and the output alike, each device scattering its columns; the output is linear in data
// and updates together, so (P, B, P) -> P. Never a split of the index tuples.
//   (S(1), B, S(1)) -> S(1);  (P, B, P) -> P
Sigs SbpScatterND(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape &x = in[0].shape, &idx = in[1].shape;
  const int64_t k = idx[idx.rank() - 1], lead = idx.rank() - 1;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int j = static_cast<int>(k); j < x.rank(); ++j)
    if (Splits(x[j], parts)) AddSig(s, {{Sbp::S(j), Sbp::B(), Sbp::S(static_cast<int>(j - k + lead))}, {Sbp::S(j)}});
  if (in[0].dtype == DType::kF32) AddSig(s, {{Sbp::P(), Sbp::B(), Sbp::P()}, {Sbp::P()}});
  return s;
}

}  // namespace fr::defs
