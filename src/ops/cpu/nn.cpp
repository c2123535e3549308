// CPU kernels for softmax, log-softmax and layer-norm, forward and backward. Softmax-like ops view
// the tensor as [outer, axis, inner]; the last-axis case (inner == 1) is the fast, common one.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

// Applies f(base, stride, n) on every softmax row, the rows spread over the kernel threads.
template <typename F>
void Rows(const KernelCtx& c, F f) {
  AxisView v = ViewAround(c.in[0].shape(), AxisOf(c, c.in[0].shape()));
  ParallelFor(v.outer * v.inner, v.dim, [&](int64_t begin, int64_t end) {
    for (int64_t k = begin; k < end; ++k) {
      const int64_t o = k / v.inner, i = k % v.inner;
      f(o * v.dim * v.inner + i, v.inner, v.dim);
    }
  });
}

}  // namespace

// Softmax-like kernels take the contiguous path when the axis is the last one (stride 1): there
// the exp and the sums vectorise.

Status Softmax(const KernelCtx& c) {
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  Rows(c, [&](int64_t base, int64_t st, int64_t n) {
    if (st == 1) {
      const float* xr = x + base;
      float* yr = y + base;
      const float m = MaxOf(xr, n);
      for (int64_t j = 0; j < n; ++j) yr[j] = Exp(xr[j] - m);
      const float inv = 1.f / SumOf(n, [&](int64_t j) { return yr[j]; });
      for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
      return;
    }
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[base + j * st]);
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) s += (y[base + j * st] = Exp(x[base + j * st] - m));
    float inv = 1.f / s;
    for (int64_t j = 0; j < n; ++j) y[base + j * st] *= inv;
  });
  return Status::Ok();
}

Status LogSoftmax(const KernelCtx& c) {
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  Rows(c, [&](int64_t base, int64_t st, int64_t n) {
    if (st == 1) {
      const float* xr = x + base;
      float* yr = y + base;
      const float m = MaxOf(xr, n);
      const float lse = m + std::log(SumOf(n, [&](int64_t j) { return Exp(xr[j] - m); }));
      for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] - lse;
      return;
    }
    float m = -INFINITY;
    for (int64_t j = 0; j < n; ++j) m = std::max(m, x[base + j * st]);
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) s += Exp(x[base + j * st] - m);
    float lse = m + std::log(s);
    for (int64_t j = 0; j < n; ++j) y[base + j * st] = x[base + j * st] - lse;
  });
  return Status::Ok();
}

// dx = y * (dy - sum(dy * y)).
Status SoftmaxGrad(const KernelCtx& c) {
  const float* dy = c.in[0].data<float>();
  const float* y = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  Rows(c, [&](int64_t base, int64_t st, int64_t n) {
    if (st == 1) {
      const float *dyr = dy + base, *yr = y + base;
      float* dxr = dx + base;
      const float dot = SumOf(n, [&](int64_t j) { return dyr[j] * yr[j]; });
      for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
      return;
    }
    float dot = 0.f;
    for (int64_t j = 0; j < n; ++j) dot += dy[base + j * st] * y[base + j * st];
    for (int64_t j = 0; j < n; ++j) dx[base + j * st] = y[base + j * st] * (dy[base + j * st] - dot);
  });
  return Status::Ok();
}

// dx = dy - exp(y) * sum(dy).
Status LogSoftmaxGrad(const KernelCtx& c) {
  const float* dy = c.in[0].data<float>();
  const float* y = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  Rows(c, [&](int64_t base, int64_t st, int64_t n) {
    if (st == 1) {
      const float *dyr = dy + base, *yr = y + base;
      float* dxr = dx + base;
      const float s = SumOf(n, [&](int64_t j) { return dyr[j]; });
      for (int64_t j = 0; j < n; ++j) dxr[j] = dyr[j] - Exp(yr[j]) * s;
      return;
    }
    float s = 0.f;
    for (int64_t j = 0; j < n; ++j) s += dy[base + j * st];
    for (int64_t j = 0; j < n; ++j) dx[base + j * st] = dy[base + j * st] - Exp(y[base + j * st]) * s;
  });
  return Status::Ok();
}

Status LayerNormalization(const KernelCtx& c) {
  const Tensor& X = c.in[0];
  int axis = AxisOf(c, X.shape());
  int64_t inner = 1;
  for (int i = axis; i < X.shape().rank(); ++i) inner *= X.shape()[i];
  int64_t outer = X.numel() / (inner ? inner : 1);
  const float eps = static_cast<float>(c.node.attrs.Float("epsilon", 1e-5));
  const float* x = X.data<float>();
  const float* g = c.in[1].data<float>();
  const float* b = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  float* y = c.out[0].data<float>();
  float* mean = c.out[1].data<float>();
  float* rstd = c.out[2].data<float>();
  ParallelFor(outer, inner, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const float* xr = x + o * inner;
      float* yr = y + o * inner;
      const float mu = SumOf(inner, [xr](int64_t j) { return xr[j]; }) / static_cast<float>(inner);
      const float v = SumOf(inner, [xr, mu](int64_t j) { return (xr[j] - mu) * (xr[j] - mu); });
      const float r = 1.f / std::sqrt(v / static_cast<float>(inner) + eps);
      // Two loops, not b ? b[j] : 0 in one (a masked load when vectorised; see the GELU's loops).
      if (b) {
        for (int64_t j = 0; j < inner; ++j) yr[j] = (xr[j] - mu) * r * g[j] + b[j];
      } else {
        for (int64_t j = 0; j < inner; ++j) yr[j] = (xr[j] - mu) * r * g[j] + 0.f;
      }
      mean[o] = mu;
      rstd[o] = r;
    }
  });
  return Status::Ok();
}

// In the exported chain's order and precision: the mean of squares summed in double (as ReduceMean
// does), r = 1 / sqrt(float(mean) + eps), y = (x * r) * scale.
Status RMSNorm(const KernelCtx& c) {
  const Tensor& X = c.in[0];
  const int axis = AxisOf(c, X.shape());
  int64_t inner = 1;
  for (int i = axis; i < X.shape().rank(); ++i) inner *= X.shape()[i];
  const int64_t outer = X.numel() / (inner ? inner : 1);
  const float eps = static_cast<float>(c.node.attrs.Float("epsilon", 1e-6));
  const float* x = X.data<float>();
  const float* g = c.in[1].data<float>();
  float* y = c.out[0].data<float>();
  float* inv = c.out[1].data<float>();
  for (int64_t o = 0; o < outer; ++o) {
    const float* xr = x + o * inner;
    float* yr = y + o * inner;
    const double s = SumOf<double>(inner, [xr](int64_t j) { return static_cast<double>(xr[j] * xr[j]); });
    const float r = 1.f / std::sqrt(static_cast<float>(s / static_cast<double>(inner)) + eps);
    for (int64_t j = 0; j < inner; ++j) yr[j] = (xr[j] * r) * g[j];
    inv[o] = r;
  }
  return Status::Ok();
}

// With xh = x * r and g = dy * scale: dx = r * (g - xh * mean(g * xh)); dscale = sum over rows
// of dy * xh.
Status RMSNormGrad(const KernelCtx& c) {
  const Tensor& X = c.in[1];
  const int axis = AxisOf(c, X.shape());
  int64_t inner = 1;
  for (int i = axis; i < X.shape().rank(); ++i) inner *= X.shape()[i];
  const int64_t outer = X.numel() / (inner ? inner : 1);
  const float* dy = c.in[0].data<float>();
  const float* x = X.data<float>();
  const float* scale = c.in[2].data<float>();
  const float* inv = c.in[3].data<float>();
  float* dx = c.out[0].data<float>();
  float* dscale = c.out[1].data<float>();
  c.out[1].Zero();
  const float inv_n = 1.f / static_cast<float>(inner);
  for (int64_t o = 0; o < outer; ++o) {
    const float* dyr = dy + o * inner;
    const float* xr = x + o * inner;
    float* dxr = dx + o * inner;
    const float r = inv[o];
    const float sum_gx = SumOf(inner, [&](int64_t j) { return dyr[j] * scale[j] * (xr[j] * r); });
    for (int64_t j = 0; j < inner; ++j) dscale[j] += dyr[j] * (xr[j] * r);
    for (int64_t j = 0; j < inner; ++j) dxr[j] = r * (dyr[j] * scale[j] - xr[j] * r * sum_gx * inv_n);
  }
  return Status::Ok();
}

// With xh = (x - mean) * rstd and g = dy * scale:
//   dx = rstd * (g - mean(g) - xh * mean(g * xh)); dscale = sum over rows of dy * xh; dbias = sum dy.
Status LayerNormGrad(const KernelCtx& c) {
  const Tensor& X = c.in[1];
  int axis = AxisOf(c, X.shape());
  int64_t inner = 1;
  for (int i = axis; i < X.shape().rank(); ++i) inner *= X.shape()[i];
  int64_t outer = X.numel() / (inner ? inner : 1);
  const float* dy = c.in[0].data<float>();
  const float* x = X.data<float>();
  const float* scale = c.in[2].data<float>();
  const float* mean = c.in[3].data<float>();
  const float* rstd = c.in[4].data<float>();
  float* dx = c.out[0].data<float>();
  float* dscale = c.out[1].data<float>();
  float* dbias = c.out[2].data<float>();
  c.out[1].Zero();
  c.out[2].Zero();
  const float inv_n = 1.f / static_cast<float>(inner);
  // dx row by row; dscale and dbias column by column, each column's rows summed in order as one
  // pass over the rows would: the threads split the rows, then the columns.
  ParallelFor(outer, inner, [&](int64_t begin, int64_t end) {
    for (int64_t o = begin; o < end; ++o) {
      const float* dyr = dy + o * inner;
      const float* xr = x + o * inner;
      float* dxr = dx + o * inner;
      const float mu = mean[o], r = rstd[o];
      const float sum_g = SumOf(inner, [&](int64_t j) { return dyr[j] * scale[j]; });
      const float sum_gx = SumOf(inner, [&](int64_t j) { return dyr[j] * scale[j] * ((xr[j] - mu) * r); });
      for (int64_t j = 0; j < inner; ++j) {
        const float xh = (xr[j] - mu) * r;
        dxr[j] = r * (dyr[j] * scale[j] - sum_g * inv_n - xh * sum_gx * inv_n);
      }
    }
  });
  ParallelFor(inner, outer, [&](int64_t begin, int64_t end) {
    for (int64_t o = 0; o < outer; ++o) {
      const float* dyr = dy + o * inner;
      const float* xr = x + o * inner;
      const float mu = mean[o], r = rstd[o];
      for (int64_t j = begin; j < end; ++j) {
        dscale[j] += dyr[j] * ((xr[j] - mu) * r);
        dbias[j] += dyr[j];
      }
    }
  });
  return Status::Ok();
}

}  // namespace fr::cpu
