// Convolutional ops over NCHW tensors: Conv (2-D, groups, strides, padding, dilation), MaxPool and
// AveragePool, and their gradients. Import resolves ONNX's auto_pad and defaults, so every node
// carries attributes `kernel` [kH, kW], `strides`, `pads` [top, left, bottom, right] and
// `dilations` (pools: `ceil_mode`; AveragePool: `count_include_pad`; Conv: `group`). Gradients
// that must know their input's shape carry it as `x_shape` (`w_shape` for the weight's).
//
//   Conv(X [N, C, H, W], W [M, C/group, kH, kW], [B [M]]) -> Y [N, M, OH, OW]
//   ConvGradData(dY, W) -> dX;  ConvGradWeight(dY, X) -> dW
//   MaxPool(X) -> Y;  MaxPoolGrad(dY, X) -> dX, dY to each window's first maximum (as PyTorch)
//   AveragePool(X) -> Y;  AveragePoolGrad(dY) -> dX
//
// GlobalAveragePool imports as ReduceMean over H and W, BatchNormalization as the ops of its
// formula (ir/onnx_import.cpp), so neither needs an op of its own here.
#include "base/process.h"
#include "ops/defs.h"

namespace fr::defs {

namespace {

struct Window {
  int64_t k[2], s[2], p[4], d[2];
};

Window WindowOf(const ir::Node& n) {
  Window w{};
  const auto k = n.attrs.Ints("kernel"), s = n.attrs.IntsOr("strides", {1, 1}), p = n.attrs.IntsOr("pads", {0, 0, 0, 0}),
             d = n.attrs.IntsOr("dilations", {1, 1});
  for (size_t i = 0; i < 2; ++i) {
    w.k[i] = i < k.size() ? k[i] : 0;
    w.s[i] = i < s.size() ? s[i] : 1;
    w.d[i] = i < d.size() ? d[i] : 1;
  }
  for (size_t i = 0; i < 4; ++i) w.p[i] = i < p.size() ? p[i] : 0;
  return w;
}

// Output size along spatial axis i (0: H, 1: W) of an input of size x.
Result<int64_t> OutSize(const ir::Node& n, const Window& w, int i, int64_t x) {
  const int64_t span = w.d[i] * (w.k[i] - 1) + 1, padded = x + w.p[i] + w.p[i + 2];
  if (w.k[i] < 1 || w.s[i] < 1 || w.d[i] < 1 || w.p[i] < 0 || w.p[i + 2] < 0) {
    return Status::Invalid(n.name + ": kernel, strides and dilations must be >= 1 and pads >= 0");
  }
  if (padded < span) {
    return Status::Invalid(n.name + ": a window of " + std::to_string(span) + " does not fit the padded input of " +
                           std::to_string(padded));
  }
  const bool ceil = n.attrs.Int("ceil_mode") != 0;
  int64_t out = (padded - span + (ceil ? w.s[i] - 1 : 0)) / w.s[i] + 1;
  // With ceil_mode, a last window that would start in the bottom/right padding is dropped (PyTorch).
  if (ceil && (out - 1) * w.s[i] >= x + w.p[i]) --out;
  return out;
}

Status Expect4D(const ir::Node& n, const ir::TensorType& t, const char* what) {
  if (t.dtype != DType::kF32 || t.shape.rank() != 4) {
    return Status::Invalid(n.name + ": " + what + " must be float32 [N, C, H, W], got " + std::string(Name(t.dtype)) +
                           t.shape.ToString());
  }
  return Status::Ok();
}

Result<Shape> PooledShape(const ir::Node& n, const Shape& x) {
  const Window w = WindowOf(n);
  ASSIGN_OR_RETURN(int64_t oh, OutSize(n, w, 0, x[2]));
  ASSIGN_OR_RETURN(int64_t ow, OutSize(n, w, 1, x[3]));
  return Shape{x[0], x[1], oh, ow};
}

Result<Shape> ConvShape(const ir::Node& n, const Shape& x, const Shape& wt) {
  const int64_t g = n.attrs.Int("group", 1);
  if (g < 1 || x[1] % g || wt[0] % g || wt[1] * g != x[1]) {
    return Status::Invalid(n.name + ": weight " + wt.ToString() + " and group " + std::to_string(g) + " do not fit input " +
                           x.ToString() + " (weight [M, C / group, kH, kW], M a multiple of group)");
  }
  if (n.attrs.Ints("kernel") != std::vector<int64_t>{wt[2], wt[3]}) {
    return Status::Invalid(n.name + ": kernel " + Shape(n.attrs.Ints("kernel")).ToString() + " differs from the weight's " +
                           wt.ToString());
  }
  ASSIGN_OR_RETURN(Shape p, PooledShape(n, x));
  // The kernels' im2col buffer: one sample's group of windows, [C/g * kH * kW, OH * OW] floats.
  const double scratch = 4.0 * static_cast<double>(wt[1]) * static_cast<double>(wt[2]) * static_cast<double>(wt[3]) *
                         static_cast<double>(p[2]) * static_cast<double>(p[3]);
  if (scratch > MemoryBudgetBytes() / 4) {
    return Status::Invalid(n.name + ": its im2col buffer of " + std::to_string(static_cast<int64_t>(scratch / (1 << 20))) +
                           " MiB is more than this machine can spare");
  }
  return Shape{x[0], wt[0], p[2], p[3]};
}

}  // namespace

Out InferConv(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(Expect4D(n, in[0], "the input"));
  RETURN_IF_ERROR(Expect4D(n, in[1], "the weight"));
  ASSIGN_OR_RETURN(Shape y, ConvShape(n, in[0].shape, in[1].shape));
  if (Present(n, 2) && (in[2].dtype != DType::kF32 || in[2].shape != Shape{y[1]})) {
    return Status::Invalid(n.name + ": bias " + in[2].shape.ToString() + " must be float32 [" + std::to_string(y[1]) + "]");
  }
  return std::vector<ir::TensorType>{{DType::kF32, y}};
}

// ConvGradData(dY, W) -> dX of shape attribute x_shape.
Out InferConvGradData(const ir::Node& n, Types in) {
  const Shape x(n.attrs.Ints("x_shape"));
  FR_CHECK(x.rank() == 4, n.name + ": x_shape");
  ASSIGN_OR_RETURN(Shape y, ConvShape(n, x, in[1].shape));
  FR_CHECK(y == in[0].shape, n.name + ": dY " + in[0].shape.ToString() + " is not the output of " + x.ToString());
  return std::vector<ir::TensorType>{{DType::kF32, x}};
}

// ConvGradWeight(dY, X) -> dW of shape attribute w_shape.
Out InferConvGradWeight(const ir::Node& n, Types in) {
  const Shape w(n.attrs.Ints("w_shape"));
  FR_CHECK(w.rank() == 4, n.name + ": w_shape");
  ASSIGN_OR_RETURN(Shape y, ConvShape(n, in[1].shape, w));
  FR_CHECK(y == in[0].shape, n.name + ": dY " + in[0].shape.ToString() + " is not the output of " + in[1].shape.ToString());
  return std::vector<ir::TensorType>{{DType::kF32, w}};
}

Out InferPool(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(Expect4D(n, in[0], "the input"));
  if (n.attrs.Ints("kernel").size() != 2) return Status::Invalid(n.name + ": pooling needs a 2-D kernel");
  ASSIGN_OR_RETURN(Shape y, PooledShape(n, in[0].shape));
  return std::vector<ir::TensorType>{{DType::kF32, y}};
}

// MaxPoolGrad(dY, X) -> dX like X; AveragePoolGrad(dY) -> dX of shape x_shape.
Out InferPoolGrad(const ir::Node& n, Types in) {
  const Shape x = n.op == OpKind::kMaxPoolGrad ? in[1].shape : Shape(n.attrs.Ints("x_shape"));
  FR_CHECK(x.rank() == 4, n.name + ": pooled input");
  auto y = PooledShape(n, x);
  FR_CHECK(y.ok() && *y == in[0].shape, n.name + ": dY " + in[0].shape.ToString() + " is not the pooling of " + x.ToString());
  return std::vector<ir::TensorType>{{DType::kF32, x}};
}

void GradConv(GradCtx& c) {
  ir::Attrs a = c.node().attrs;
  if (c.need(0)) {
    ir::Attrs ad = a;
    ad.Set("x_shape", c.type(c.in(0)).shape.dims());
    c.set_din(0, c.Op(OpKind::kConvGradData, {c.dout(0), c.in(1)}, ad, "dX"));
  }
  if (c.need(1)) {
    ir::Attrs aw = a;
    aw.Set("w_shape", c.type(c.in(1)).shape.dims());
    c.set_din(1, c.Op(OpKind::kConvGradWeight, {c.dout(0), c.in(0)}, aw, "dW"));
  }
  if (c.need(2)) {  // the bias: dY summed over N, H and W
    const int64_t m = c.type(c.in(2)).shape[0];
    ir::Attrs shape;
    shape.Set("shape", std::vector<int64_t>{m});
    c.set_din(2, c.Op(OpKind::kReshape, {c.SumTo(c.dout(0), Shape{m, 1, 1})}, shape, "dB"));
  }
}

void GradMaxPool(GradCtx& c) { c.set_din(0, c.Op(OpKind::kMaxPoolGrad, {c.dout(0), c.in(0)}, c.node().attrs)); }

void GradAveragePool(GradCtx& c) {
  ir::Attrs a = c.node().attrs;
  a.Set("x_shape", c.type(c.in(0)).shape.dims());
  c.set_din(0, c.Op(OpKind::kAveragePoolGrad, {c.dout(0)}, a));
}

// ---- SBP rules ----
//
// Conv(X [4, 6, 5, 5], W [8, 6, 3, 3], B [8]), group 1:
//   (S(0), B, B)    -> S(0)   samples are convolved independently (data parallelism)
//   (B, S(0), S(0)) -> S(1)   each device computes its output channels
//   (S(1), S(1), -) -> P      input channels split with the weight's: partial sums (no bias only)
//   (P, B, -)       -> P      linear in X (no bias only)
// With groups, only the sample split: channel splits would cut across groups.
Sigs SbpConv(const ir::Node& n, Types in, Types out, int64_t parts) {
  const bool bias = Present(n, 2);
  Sigs s{Uniform(n, 1, Sbp::B())};
  auto sig = [&](Sbp x, Sbp w, Sbp b, Sbp y) {
    sbp::Signature g{{x, w}, {y}};
    if (n.in.size() > 2) g.in.push_back(b);
    return g;
  };
  if (Splits(in[0].shape[0], parts)) AddSig(s, sig(Sbp::S(0), Sbp::B(), Sbp::B(), Sbp::S(0)));
  if (n.attrs.Int("group", 1) == 1) {
    if (Splits(out[0].shape[1], parts)) AddSig(s, sig(Sbp::B(), Sbp::S(0), Sbp::S(0), Sbp::S(1)));
    if (!bias && Splits(in[0].shape[1], parts)) AddSig(s, sig(Sbp::S(1), Sbp::S(1), Sbp::B(), Sbp::P()));
  }
  if (!bias) AddSig(s, sig(Sbp::P(), Sbp::B(), Sbp::B(), Sbp::P()));
  return s;
}

// ConvGradData(dY [4, 8, 3, 3], W [8, 6, 3, 3]) -> dX [4, 6, 5, 5], group 1:
//   (S(0), B) -> S(0);  (S(1), S(0)) -> P (output channels summed);  (B, S(1)) -> S(1);  (P, B) -> P
Sigs SbpConvGradData(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  if (Splits(in[0].shape[0], parts)) AddSig(s, {{Sbp::S(0), Sbp::B()}, {Sbp::S(0)}});
  if (n.attrs.Int("group", 1) == 1) {
    if (Splits(in[0].shape[1], parts)) AddSig(s, {{Sbp::S(1), Sbp::S(0)}, {Sbp::P()}});
    if (Splits(out[0].shape[1], parts)) AddSig(s, {{Sbp::B(), Sbp::S(1)}, {Sbp::S(1)}});
  }
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// ConvGradWeight(dY [4, 8, 3, 3], X [4, 6, 5, 5]) -> dW [8, 6, 3, 3], group 1:
//   (S(0), S(0)) -> P (summed over samples);  (S(1), B) -> S(0);  (B, S(1)) -> S(1);  (P, B) -> P
Sigs SbpConvGradWeight(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  if (Splits(in[0].shape[0], parts)) AddSig(s, {{Sbp::S(0), Sbp::S(0)}, {Sbp::P()}});
  if (n.attrs.Int("group", 1) == 1) {
    if (Splits(in[0].shape[1], parts)) AddSig(s, {{Sbp::S(1), Sbp::B()}, {Sbp::S(0)}});
    if (Splits(in[1].shape[1], parts)) AddSig(s, {{Sbp::B(), Sbp::S(1)}, {Sbp::S(1)}});
  }
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// MaxPool(X [4, 6, 5, 5]) and AveragePool: samples and channels pool independently.
//   (S(0)) -> S(0), (S(1)) -> S(1); AveragePool is linear: (P) -> P. MaxPool: no P.
Sigs SbpPool(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < 2; ++i)
    if (Splits(in[0].shape[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  if (n.op == OpKind::kAveragePool || n.op == OpKind::kAveragePoolGrad) AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// MaxPoolGrad(dY, X): (S(0), S(0)) -> S(0), (S(1), S(1)) -> S(1), linear in dY: (P, B) -> P.
Sigs SbpMaxPoolGrad(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < 2; ++i)
    if (Splits(in[1].shape[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// A piece's gradient has the piece's shape.
void PhysicalConvGradData(ir::Node& n, Types, Types physical_out, Starts) { n.attrs.Set("x_shape", physical_out[0].shape.dims()); }
void PhysicalConvGradWeight(ir::Node& n, Types, Types physical_out, Starts) { n.attrs.Set("w_shape", physical_out[0].shape.dims()); }

}  // namespace fr::defs
