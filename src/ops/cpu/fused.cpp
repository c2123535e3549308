// CPU kernels of the fused ops (ops/fused.cpp). Each repeats its unfused chain's float operations
// in the same order, with the same vectorised exp/erf (vmath.h); what it saves is the passes over
// memory and the intermediate tensors.
#include <algorithm>
#include <cmath>
#include <vector>

#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

// The tanh approximation, as PyTorch computes it: 0.5 h (1 + tanh(b (h + k h^3))).
constexpr float kTanhBeta = kGeluTanhBeta, kTanhKappa = kGeluTanhKappa;

// For each row of X (all dims but the last), the offset of its row in the mask `cond` broadcast
// to X; `col` is 1 when the mask has X's last dim and 0 when it is broadcast along it.
std::vector<int64_t> MaskRows(const fr::Shape& x, const fr::Shape& cond, int64_t& col) {
  const int r = x.rank(), lead = r - cond.rank();
  std::vector<int64_t> stride(static_cast<size_t>(r), 0);
  int64_t s = 1;
  for (int i = r - 1; i >= lead; --i) {
    const int64_t d = cond[i - lead];
    stride[static_cast<size_t>(i)] = d == 1 ? 0 : s;
    s *= d;
  }
  col = stride[static_cast<size_t>(r - 1)];
  std::vector<int64_t> rows(static_cast<size_t>(x.numel() / x[r - 1]));
  std::vector<int64_t> at(static_cast<size_t>(r), 0);  // index over the leading dims
  for (int64_t& o : rows) {
    o = 0;
    for (int i = 0; i + 1 < r; ++i) o += at[static_cast<size_t>(i)] * stride[static_cast<size_t>(i)];
    for (int i = r - 2; i >= 0; --i) {
      if (++at[static_cast<size_t>(i)] < x[i]) break;
      at[static_cast<size_t>(i)] = 0;
    }
  }
  return rows;
}

// Sets row[j] = v where the mask says so: mask[j * col] != 0 equals `when`. With col = 0 the
// whole row shares one mask element.
void MaskRow(float* row, int64_t n, const uint8_t* mask, int64_t col, bool when, float v) {
  if (col == 0) {
    if ((mask[0] != 0) == when) std::fill(row, row + n, v);
    return;
  }
  // `when` outside the loops: compared inside, GCC vectorised two floats at a time.
  if (when) {
    for (int64_t j = 0; j < n; ++j) row[j] = mask[j] ? v : row[j];
  } else {
    for (int64_t j = 0; j < n; ++j) row[j] = mask[j] ? row[j] : v;
  }
}

// The optional bool mask of input `i`, broadcast to a tensor of shape `s` row by row (MaskRows).
struct RowMask {
  const uint8_t* cond = nullptr;
  std::vector<int64_t> rows;
  int64_t col = 0;
  RowMask(const KernelCtx& c, size_t i, const fr::Shape& s) {
    if (c.in.size() <= i || !c.in[i].defined()) return;
    cond = static_cast<const uint8_t*>(c.in[i].raw());
    rows = MaskRows(s, c.in[i].shape(), col);
  }
  // Sets row r's masked elements (mask == when) to v.
  void Apply(int64_t r, float* row, int64_t n, bool when, float v) const {
    if (cond) MaskRow(row, n, cond + rows[static_cast<size_t>(r)], col, when, v);
  }
};

}  // namespace

namespace {

// Row loops of Gelu and GeluGrad, with and without a bias (a branch-free inner loop vectorises;
// b ? b[j] : ... in one loop, a masked load, ran the tanh form at a fifth of the speed).
template <bool kBias>
void GeluRows(const GeluConsts k, const float* x, const float* b, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r) {
    const float* xr = x + r * n;
    float* yr = y + r * n;
    for (int64_t j = 0; j < n; ++j) {
      const float h = kBias ? b[j] + xr[j] : xr[j];
      yr[j] = (h * (Erf(h / k.div) + k.one)) * k.half;
    }
  }
}

// The chain's backward: dm = dY * half; dH = dm * (erf(d) + one) + (dm * H) * 2/sqrt(pi) e^(-d^2) / div
// with d = H / div, as Mul's, Erf's and Div's gradient ops compute it.
template <bool kBias>
void GeluGradRows(const GeluConsts k, const float* dy, const float* x, const float* b, float* dx, int64_t rows,
                  int64_t n) {
  constexpr float k2OverSqrtPi = 1.1283791670955126f;
  for (int64_t r = 0; r < rows; ++r) {
    const float *dyr = dy + r * n, *xr = x + r * n;
    float* dxr = dx + r * n;
    // Two passes: one loop with both erf and exp is too much for GCC's if-conversion (scalar).
    // e^(-d^2) once, for erf and for erf's derivative.
    for (int64_t j = 0; j < n; ++j) {
      const float d = (kBias ? b[j] + xr[j] : xr[j]) / k.div;
      dxr[j] = Exp(-(d * d));
    }
    for (int64_t j = 0; j < n; ++j) {
      const float h = kBias ? b[j] + xr[j] : xr[j];
      const float d = h / k.div;
      const float e = dxr[j];
      const float dm = dyr[j] * k.half;
      const float through_mul = dm * (ErfGivenExp(d, e) + k.one);
      const float through_erf = (dm * h) * k2OverSqrtPi * e / k.div;
      dxr[j] = through_mul + through_erf;
    }
  }
}

template <bool kBias>
void GeluTanhRows(const float* x, const float* b, float* y, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const float h = kBias ? b[j] + x[r * n + j] : x[r * n + j];
      const float inner = kTanhBeta * (h + kTanhKappa * (h * h * h));
      y[r * n + j] = 0.5f * h * (1.f + Tanh(inner));
    }
}

// d/dh: 0.5 (1 + t) + 0.5 h (1 - t^2) b (1 + 3 k h^2), t = tanh(b (h + k h^3)).
template <bool kBias>
void GeluTanhGradRows(const float* dy, const float* x, const float* b, float* dx, int64_t rows, int64_t n) {
  for (int64_t r = 0; r < rows; ++r)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t i = r * n + j;
      const float h = kBias ? b[j] + x[i] : x[i];
      const float h2 = h * h;
      const float t = Tanh(kTanhBeta * (h + kTanhKappa * (h2 * h)));
      const float left = 0.5f * h, right = 1.f + t;
      const float d_right = left * (1.f - t * t) * kTanhBeta * (1.f + 3.f * kTanhKappa * h2);
      dx[i] = dy[i] * (0.5f * right + d_right);
    }
}

}  // namespace

Status Gelu(const KernelCtx& c) {
  const fr::Shape& s = c.in[0].shape();
  const int64_t n = s.rank() ? s[s.rank() - 1] : 1, rows = n ? c.in[0].numel() / n : 0;
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  const float* bias = c.in.size() > 1 && c.in[1].defined() ? c.in[1].data<float>() : nullptr;
  const bool tanh = c.node.attrs.Int("tanh") != 0;
  const GeluConsts k = GeluOf(c.node);
  ParallelFor(rows, n, [&](int64_t begin, int64_t end) {
    const float* xs = x + begin * n;
    float* ys = y + begin * n;
    if (tanh && bias) {
      GeluTanhRows<true>(xs, bias, ys, end - begin, n);
    } else if (tanh) {
      GeluTanhRows<false>(xs, nullptr, ys, end - begin, n);
    } else if (bias) {
      GeluRows<true>(k, xs, bias, ys, end - begin, n);
    } else {
      GeluRows<false>(k, xs, nullptr, ys, end - begin, n);
    }
  });
  return Status::Ok();
}

Status GeluGrad(const KernelCtx& c) {
  const fr::Shape& s = c.in[1].shape();
  const int64_t n = s.rank() ? s[s.rank() - 1] : 1, rows = n ? c.in[1].numel() / n : 0;
  const float* dy = c.in[0].data<float>();
  const float* x = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  const float* bias = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  const bool tanh = c.node.attrs.Int("tanh") != 0;
  const GeluConsts k = GeluOf(c.node);
  ParallelFor(rows, n, [&](int64_t begin, int64_t end) {
    const int64_t at = begin * n;
    if (tanh && bias) {
      GeluTanhGradRows<true>(dy + at, x + at, bias, dx + at, end - begin, n);
    } else if (tanh) {
      GeluTanhGradRows<false>(dy + at, x + at, nullptr, dx + at, end - begin, n);
    } else if (bias) {
      GeluGradRows<true>(k, dy + at, x + at, bias, dx + at, end - begin, n);
    } else {
      GeluGradRows<false>(k, dy + at, x + at, nullptr, dx + at, end - begin, n);
    }
  });
  return Status::Ok();
}

Status MaskedSoftmax(const KernelCtx& c) {
  const SoftmaxConsts k = SoftmaxOf(c.node);
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  const fr::Shape& s = c.in[0].shape();
  const int64_t n = s[s.rank() - 1], rows = c.in[0].numel() / n;
  const RowMask mask(c, 1, s);
  ParallelFor(rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* xr = x + r * n;
      float* yr = y + r * n;
      if (k.scale == 1.f) {  // an additive mask's (rewrite.cpp): x / 1 and x * 1 are x
        std::copy(xr, xr + n, yr);
      } else if (k.divide) {
        for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] / k.scale;
      } else {
        for (int64_t j = 0; j < n; ++j) yr[j] = xr[j] * k.scale;
      }
      mask.Apply(r, yr, n, k.fill_if, k.fill);
      const float m = MaxOf(yr, n);
      for (int64_t j = 0; j < n; ++j) yr[j] = Exp(yr[j] - m);
      const float inv = 1.f / SumOf(n, [&](int64_t j) { return yr[j]; });
      for (int64_t j = 0; j < n; ++j) yr[j] *= inv;
    }
  });
  return Status::Ok();
}

Status MaskedSoftmaxGrad(const KernelCtx& c) {
  const SoftmaxConsts k = SoftmaxOf(c.node);
  const float* dy = c.in[0].data<float>();
  const float* y = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  const fr::Shape& s = c.in[1].shape();
  const int64_t n = s[s.rank() - 1], rows = c.in[1].numel() / n;
  const RowMask mask(c, 2, s);
  ParallelFor(rows, n, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float *dyr = dy + r * n, *yr = y + r * n;
      float* dxr = dx + r * n;
      const float dot = SumOf(n, [&](int64_t j) { return dyr[j] * yr[j]; });
      for (int64_t j = 0; j < n; ++j) dxr[j] = yr[j] * (dyr[j] - dot);
      mask.Apply(r, dxr, n, k.fill_if, 0.f);
      if (k.scale == 1.f) continue;
      if (k.divide) {
        for (int64_t j = 0; j < n; ++j) dxr[j] /= k.scale;
      } else {
        for (int64_t j = 0; j < n; ++j) dxr[j] *= k.scale;
      }
    }
  });
  return Status::Ok();
}

}  // namespace fr::cpu
