// Math ops: Sqrt, Reciprocal, Neg, Exp, Log, Abs, Sign, Sin, Cos, Pow, Clip, IsNaN, and the
// reductions ReduceSum, ReduceMean, ReduceMax over attribute `axes` (sorted, non-negative; import
// reads them from the ONNX attribute or input) with `keepdims`.
//
// Gradients are built from existing ops where one serves (Sqrt: dY / 2Y; Exp: dY * Y; Sin: dY *
// cos X ...), so they need no kernels of their own; Clip and ReduceMax have one each (ClipGrad,
// ReduceMaxGrad). The SBP rules and their worked examples sit above each rule.
#include <cmath>

#include "ops/defs.h"

namespace fr::defs {

namespace {

ir::ValueId Scaled(GradCtx& c, ir::ValueId v, double alpha, const char* tag) {
  ir::Attrs a;
  a.Set("alpha", alpha);
  return c.Op(OpKind::kScale, {v}, a, tag);
}

// The input's shape with 1 at every reduced axis.
Shape KeptShape(const Shape& x, const std::vector<int64_t>& axes) {
  std::vector<int64_t> d = x.dims();
  for (int64_t a : axes) d[static_cast<size_t>(a)] = 1;
  return Shape(d);
}

bool Reduced(const std::vector<int64_t>& axes, int i) { return std::find(axes.begin(), axes.end(), i) != axes.end(); }

}  // namespace

Out InferNeg(const ir::Node& n, Types in) {
  if (in[0].dtype != DType::kF32 && in[0].dtype != DType::kI64) {
    return Status::Invalid(n.name + ": Neg takes float32 or int64, got " + std::string(Name(in[0].dtype)));
  }
  return std::vector<ir::TensorType>{in[0]};
}

// Dropout(X): ratio in [0, 1) (attribute; import reads ONNX's input), key (the mask's seed).
Out InferDropout(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  const double ratio = n.attrs.Float("ratio");
  if (!(ratio >= 0 && ratio < 1)) return Status::Invalid(n.name + ": Dropout's ratio must be in [0, 1)");
  return std::vector<ir::TensorType>{in[0]};
}

Out InferPow(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(ExpectFloat(n, in, 1));
  return InferBinary(n, in);
}

Out InferIsNaN(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  return std::vector<ir::TensorType>{{DType::kBool, in[0].shape}};
}

// Clip(X) to [min, max] (attributes; either may be absent).
Out InferClip(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  if (n.attrs.Has("min") && n.attrs.Has("max") && n.attrs.Float("min") > n.attrs.Float("max")) {
    return Status::Invalid(n.name + ": Clip's min is above its max");
  }
  return std::vector<ir::TensorType>{in[0]};
}

Out InferReduce(const ir::Node& n, Types in) {
  const Shape& x = in[0].shape;
  if (n.op == OpKind::kReduceSum) {
    if (in[0].dtype != DType::kF32 && in[0].dtype != DType::kI64) {
      return Status::Invalid(n.name + ": ReduceSum takes float32 or int64, got " + std::string(Name(in[0].dtype)));
    }
  } else if (n.op == OpKind::kReduceMax) {
    if (in[0].dtype != DType::kF32 && in[0].dtype != DType::kI64) {
      return Status::Invalid(n.name + ": ReduceMax takes float32 or int64, got " + std::string(Name(in[0].dtype)));
    }
  } else {
    RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  }
  const std::vector<int64_t> axes = n.attrs.Ints("axes");
  int64_t prev = -1;
  for (int64_t a : axes) {
    if (a <= prev || a >= x.rank()) return Status::Invalid(n.name + ": bad reduction axes for " + x.ToString());
    if (x[static_cast<int>(a)] == 0 && n.op == OpKind::kReduceMax) {
      return Status::Invalid(n.name + ": ReduceMax over an empty axis of " + x.ToString());
    }
    prev = a;
  }
  std::vector<int64_t> d;
  const bool keep = n.attrs.Int("keepdims", 1) != 0;
  for (int i = 0; i < x.rank(); ++i) {
    if (!Reduced(axes, i)) {
      d.push_back(x[i]);
    } else if (keep) {
      d.push_back(1);
    }
  }
  return std::vector<ir::TensorType>{{in[0].dtype, Shape(d)}};
}

// ReduceMaxGrad(dY, X, Y) -> dX: dY where X equals its maximum, shared evenly among ties (as
// PyTorch's amax does), 0 elsewhere.
Out InferReduceMaxGrad(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(ExpectFloat(n, in, 1));
  return std::vector<ir::TensorType>{in[1]};
}

void GradSqrt(GradCtx& c) {  // dX = dY / (2 Y)
  c.set_din(0, c.Op(OpKind::kDiv, {Scaled(c, c.dout(0), 0.5, "half"), c.out(0)}, {}, "div"));
}
void GradReciprocal(GradCtx& c) {  // dX = -dY Y^2
  ir::ValueId y2 = c.Op(OpKind::kMul, {c.out(0), c.out(0)}, {}, "y2");
  c.set_din(0, Scaled(c, c.Op(OpKind::kMul, {c.dout(0), y2}, {}, "mul"), -1.0, "neg"));
}
// Y = X * mask / (1 - ratio), so dX = dY * mask / (1 - ratio): Dropout of dY with the same
// attributes, which draws the same mask again (cpu::Dropout) instead of keeping it.
void GradDropout(GradCtx& c) { c.set_din(0, c.Op(OpKind::kDropout, {c.dout(0)}, c.node().attrs)); }

void GradNeg(GradCtx& c) { c.set_din(0, c.Op(OpKind::kNeg, {c.dout(0)})); }
void GradExp(GradCtx& c) { c.set_din(0, c.Op(OpKind::kMul, {c.dout(0), c.out(0)})); }
void GradLog(GradCtx& c) { c.set_din(0, c.Op(OpKind::kDiv, {c.dout(0), c.in(0)})); }
void GradAbs(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kMul, {c.dout(0), c.Op(OpKind::kSign, {c.in(0)}, {}, "sign")}, {}, "mul"));
}
void GradSign(GradCtx& c) { c.set_din(0, c.Zeros(c.type(c.in(0)).shape)); }
void GradSin(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kMul, {c.dout(0), c.Op(OpKind::kCos, {c.in(0)}, {}, "cos")}, {}, "mul"));
}
void GradCos(GradCtx& c) {
  ir::ValueId prod = c.Op(OpKind::kMul, {c.dout(0), c.Op(OpKind::kSin, {c.in(0)}, {}, "sin")}, {}, "mul");
  c.set_din(0, Scaled(c, prod, -1.0, "neg"));
}

// Y = A^B: dA = dY B A^(B - 1) (no division by A, which may be 0); dB = dY Y ln A.
void GradPow(GradCtx& c) {
  if (c.need(0)) {
    ir::ValueId b_minus_1 = c.Op(OpKind::kSub, {c.in(1), c.Scalar(1.f)}, {}, "b_minus_1");
    ir::ValueId pw = c.Op(OpKind::kPow, {c.in(0), b_minus_1}, {}, "pow");
    ir::ValueId prod = c.Op(OpKind::kMul, {c.dout(0), c.Op(OpKind::kMul, {c.in(1), pw}, {}, "b_pow")}, {}, "mul");
    c.set_din(0, c.SumTo(prod, c.type(c.in(0)).shape));
  }
  if (c.need(1)) {
    ir::ValueId ylog = c.Op(OpKind::kMul, {c.out(0), c.Op(OpKind::kLog, {c.in(0)}, {}, "log")}, {}, "y_log");
    c.set_din(1, c.SumTo(c.Op(OpKind::kMul, {c.dout(0), ylog}, {}, "mul_b"), c.type(c.in(1)).shape));
  }
}

void GradClip(GradCtx& c) { c.set_din(0, c.Op(OpKind::kClipGrad, {c.dout(0), c.in(0)}, c.node().attrs)); }

// The gradient of a sum is dY broadcast back over the reduced axes; of a mean, that over the count.
void GradReduceSumMean(GradCtx& c) {
  const Shape x = c.type(c.in(0)).shape;
  const std::vector<int64_t> axes = c.node().attrs.Ints("axes");
  ir::Attrs keep, full;
  keep.Set("shape", KeptShape(x, axes).dims());
  full.Set("shape", x.dims());
  ir::ValueId g = c.Op(OpKind::kExpand, {c.Op(OpKind::kReshape, {c.dout(0)}, keep, "keep")}, full, "expand");
  if (c.node().op == OpKind::kReduceMean) {
    int64_t count = 1;
    for (int64_t a : axes) count *= x[static_cast<int>(a)];
    g = Scaled(c, g, 1.0 / static_cast<double>(count), "mean");
  }
  c.set_din(0, g);
}

void GradReduceMax(GradCtx& c) {
  c.set_din(0, c.Op(OpKind::kReduceMaxGrad, {c.dout(0), c.in(0), c.out(0)}, c.node().attrs));
}

// ---- SBP rules ----

// Sqrt, Reciprocal, Exp, Log, Abs, Sign, Sin, Cos, Clip, IsNaN: nonlinear, as SbpActivation: any
// split passes through, no P. Neg is linear: as Scale, plus (P) -> P. So is Dropout, whose mask
// is fixed by the element's logical index: Dropout(X [4, 7]) has (S(0)) -> S(0), (S(1)) -> S(1),
// (B) -> B and (P) -> P, the pieces of P all masked alike.
Sigs SbpNeg(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpActivation(n, in, out, parts);
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// Pow(X [4, 7], B [7]): the broadcast splits, (S(0), B) -> S(0), (S(1), S(0)) -> S(1); no P.
Sigs SbpPow(const ir::Node& n, Types in, Types out, int64_t parts) { return BroadcastSplits(n, in, out, parts); }

// ClipGrad(dY, X): elementwise and linear in dY, as the activations' gradients.
Sigs SbpClipGrad(const ir::Node& n, Types in, Types out, int64_t parts) { return SbpActivationGrad(n, in, out, parts); }

// ReduceSum(X [4, 5, 7], axes [1], keepdims 0) -> [4, 7]:
//   (S(0)) -> S(0)      rows are reduced independently
//   (S(2)) -> S(1)      axis 2 of X is axis 1 of Y
//   (S(1)) -> P         each device sums its part of the reduced axis
//   (P)    -> P         summing is linear
// ReduceMean the same: a piece divides by the logical count (set by PhysicalReduceMean), so the
// pieces of a split reduced axis sum to the mean. ReduceMax: (S(1)) -> P(max), (P(max)) -> P(max).
Sigs SbpReduce(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  const std::vector<int64_t> axes = n.attrs.Ints("axes");
  const bool keep = n.attrs.Int("keepdims", 1) != 0;
  const sbp::Reduce r = n.op == OpKind::kReduceMax ? sbp::Reduce::kMax : sbp::Reduce::kSum;
  Sigs s{Uniform(n, 1, Sbp::B())};
  int j = 0;  // output axis of input axis i
  for (int i = 0; i < x.rank(); ++i) {
    const bool reduced = Reduced(axes, i);
    if (Splits(x[i], parts)) AddSig(s, {{Sbp::S(i)}, {reduced ? Sbp::P(r) : Sbp::S(j)}});
    if (!reduced || keep) ++j;
  }
  // An empty reduction is the identity, which any P passes through; so does a max of maxes.
  if (in[0].dtype == DType::kF32 || r == sbp::Reduce::kMax) AddSig(s, Uniform(n, 1, Sbp::P(r)));
  return s;
}

// A piece of a split reduced axis divides by the logical count, not its own.
// A piece draws the mask of its place in the logical tensor: the mask is the same on every layout.
void PhysicalDropout(ir::Node& n, Types logical_in, Types, Starts start) {
  n.attrs.Set("start", std::vector<int64_t>(start.begin(), start.end()));
  n.attrs.Set("logical", logical_in[0].shape.dims());
}

void PhysicalReduceMean(ir::Node& n, Types logical_in, Types, Starts) {
  int64_t count = 1;
  for (int64_t a : n.attrs.Ints("axes")) count *= logical_in[0].shape[static_cast<int>(a)];
  n.attrs.Set("count", count);
}

// ReduceMaxGrad(dY [4, 1], X [4, 7], Y [4, 1]), axes [1]: the kept axes split with all three
// (ties are counted within a row, which stays whole):
//   (S(0), S(0), S(0)) -> S(0)
//   (P, B, B)          -> P      linear in dY
Sigs SbpReduceMaxGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[1].shape;
  const std::vector<int64_t> axes = n.attrs.Ints("axes");
  const bool keep = n.attrs.Int("keepdims", 1) != 0;
  Sigs s{Uniform(n, 1, Sbp::B())};
  int j = 0;
  for (int i = 0; i < x.rank(); ++i) {
    const bool reduced = Reduced(axes, i);
    if (!reduced && Splits(x[i], parts)) AddSig(s, {{Sbp::S(j), Sbp::S(i), Sbp::S(j)}, {Sbp::S(i)}});
    if (!reduced || keep) ++j;
  }
  AddSig(s, {{Sbp::P(), Sbp::B(), Sbp::B()}, {Sbp::P()}});
  return s;
}

}  // namespace fr::defs
