// CPU kernels for elementwise ops. Binary ops broadcast through ForEachRow, with contiguous inner
// loops the compiler vectorises.
#include <cmath>

#include "ops/cpu/broadcast.h"
#include "ops/cpu/kernels.h"

namespace fr::cpu {
namespace {

template <typename T, typename F>
void BinaryT(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
    for (int64_t i = 0, n = out.numel(); i < n; ++i) po[i] = f(pa[i], pb[i]);
    return;
  }
  ForEachRow(a.shape(), b.shape(), out.shape(),
             [&](int64_t oa, int64_t ob, int64_t oo, int64_t n, int64_t sa, int64_t sb) {
               const T* x = pa + oa;
               const T* y = pb + ob;
               T* z = po + oo;
               if (sa == 1 && sb == 1) {
                 for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], y[i]);
               } else if (sa == 1) {
                 const T yv = y[0];
                 for (int64_t i = 0; i < n; ++i) z[i] = f(x[i], yv);
               } else if (sb == 1) {
                 const T xv = x[0];
                 for (int64_t i = 0; i < n; ++i) z[i] = f(xv, y[i]);
               } else {
                 for (int64_t i = 0; i < n; ++i) z[i] = f(x[0], y[0]);
               }
             });
}

template <typename F>
Status Binary(const KernelCtx& c, F f) {
  switch (c.out[0].dtype()) {
    case DType::kF32: BinaryT<float>(c.in[0], c.in[1], c.out[0], f); return Status::Ok();
    case DType::kI64: BinaryT<int64_t>(c.in[0], c.in[1], c.out[0], f); return Status::Ok();
    default: return Status::Runtime("[ops] " + c.node.name + ": unsupported dtype");
  }
}

template <typename F>
Status Unary(const KernelCtx& c, F f) {
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = f(x[i]);
  return Status::Ok();
}

// out = f(dy, z) for the activations' gradients, where z is the forward input or output.
template <typename F>
Status UnaryGrad(const KernelCtx& c, F f) {
  const float* dy = c.in[0].data<float>();
  const float* z = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) dx[i] = f(dy[i], z[i]);
  return Status::Ok();
}

}  // namespace

Status Add(const KernelCtx& c) { return Binary(c, [](auto a, auto b) { return a + b; }); }
Status Sub(const KernelCtx& c) { return Binary(c, [](auto a, auto b) { return a - b; }); }
Status Mul(const KernelCtx& c) { return Binary(c, [](auto a, auto b) { return a * b; }); }
Status Div(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    for (int64_t v : c.in[1].span<int64_t>())
      if (v == 0) return Status::Invalid("[ops] " + c.node.name + ": integer division by zero");
  }
  return Binary(c, [](auto a, auto b) { return a / b; });
}

Status Relu(const KernelCtx& c) { return Unary(c, [](float x) { return x > 0.f ? x : 0.f; }); }
Status Tanh(const KernelCtx& c) { return Unary(c, [](float x) { return std::tanh(x); }); }
Status Sigmoid(const KernelCtx& c) { return Unary(c, [](float x) { return 1.f / (1.f + std::exp(-x)); }); }
Status Erf(const KernelCtx& c) { return Unary(c, [](float x) { return std::erf(x); }); }
Status Scale(const KernelCtx& c) {
  const float a = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  return Unary(c, [a](float x) { return a * x; });
}

Status ReluGrad(const KernelCtx& c) { return UnaryGrad(c, [](float dy, float y) { return y > 0.f ? dy : 0.f; }); }
Status TanhGrad(const KernelCtx& c) { return UnaryGrad(c, [](float dy, float y) { return dy * (1.f - y * y); }); }
Status SigmoidGrad(const KernelCtx& c) {
  return UnaryGrad(c, [](float dy, float y) { return dy * y * (1.f - y); });
}
Status ErfGrad(const KernelCtx& c) {
  constexpr float k2OverSqrtPi = 1.1283791670955126f;
  return UnaryGrad(c, [](float dy, float x) { return dy * k2OverSqrtPi * std::exp(-x * x); });
}

Status SumTo(const KernelCtx& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  y.Zero();
  const float* px = x.data<float>();
  float* py = y.data<float>();
  // Iterate x's rows; y is "broadcast" onto x's shape with stride 0 along the summed dims.
  ForEachRow(x.shape(), y.shape(), x.shape(),
             [&](int64_t ox, int64_t oy, int64_t, int64_t n, int64_t, int64_t sy) {
               const float* r = px + ox;
               float* o = py + oy;
               if (sy == 1) {
                 for (int64_t i = 0; i < n; ++i) o[i] += r[i];
               } else {
                 float s = 0.f;
                 for (int64_t i = 0; i < n; ++i) s += r[i];
                 o[0] += s;
               }
             });
  return Status::Ok();
}

}  // namespace fr::cpu
