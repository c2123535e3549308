// CUDA kernels of the row-wise ops: softmax and log-softmax with their gradients, LayerNorm and
// RMSNorm with saved statistics and their gradients, GELU (erf and tanh forms, with an optional
// bias), and the fused masked softmax. A row along the last axis is one thread block, whose sums
// are BlockSum's fixed tree; a softmax over another axis is one thread per (outer, inner) pair.
// Column sums (a norm's scale and bias gradients) run one thread per column, lane and chunk of
// rows, combined in a fixed order: the same bits every run.
#include <cmath>
#include <optional>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

// kind: 0 softmax, 1 log-softmax.
template <int kKind>
__global__ void SoftmaxRows(const float* x, float* y, int64_t n) {
  const float* xr = x + blockIdx.x * n;
  float* yr = y + blockIdx.x * n;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) m = fmaxf(m, xr[j]);
  m = BlockMax(m);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = VExp(xr[j] - m);
    if (kKind == 0) yr[j] = e;
    s += e;
  }
  s = BlockSum(s);
  if (kKind == 0) {
    const float inv = 1.f / s;
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] *= inv;
  } else {
    const float lse = m + logf(s);
    for (int64_t j = threadIdx.x; j < n; j += blockDim.x) yr[j] = xr[j] - lse;
  }
}

template <int kKind>
__global__ void SoftmaxStrided(const float* x, float* y, AxisView v) {
  FR_GRID_LOOP(p, v.outer * v.inner) {
    const int64_t base = IDiv(p, v.inner) * v.dim * v.inner + IMod(p, v.inner), st = v.inner;
    float m = -INFINITY;
    for (int64_t j = 0; j < v.dim; ++j) m = fmaxf(m, x[base + j * st]);
    float s = 0.f;
    for (int64_t j = 0; j < v.dim; ++j) {
      const float e = VExp(x[base + j * st] - m);
      if (kKind == 0) y[base + j * st] = e;
      s += e;
    }
    if (kKind == 0) {
      const float inv = 1.f / s;
      for (int64_t j = 0; j < v.dim; ++j) y[base + j * st] *= inv;
    } else {
      const float lse = m + logf(s);
      for (int64_t j = 0; j < v.dim; ++j) y[base + j * st] = x[base + j * st] - lse;
    }
  }
}

// kind 0: dx = y (dy - sum(dy y)); kind 1: dx = dy - exp(y) sum(dy).
template <int kKind>
__global__ void SoftmaxGradRows(const float* dy, const float* y, float* dx, int64_t n) {
  const int64_t off = blockIdx.x * n;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += kKind == 0 ? dy[off + j] * y[off + j] : dy[off + j];
  s = BlockSum(s);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x)
    dx[off + j] = kKind == 0 ? y[off + j] * (dy[off + j] - s) : dy[off + j] - VExp(y[off + j]) * s;
}

template <int kKind>
__global__ void SoftmaxGradStrided(const float* dy, const float* y, float* dx, AxisView v) {
  FR_GRID_LOOP(p, v.outer * v.inner) {
    const int64_t base = IDiv(p, v.inner) * v.dim * v.inner + IMod(p, v.inner), st = v.inner;
    float s = 0.f;
    for (int64_t j = 0; j < v.dim; ++j) s += kKind == 0 ? dy[base + j * st] * y[base + j * st] : dy[base + j * st];
    for (int64_t j = 0; j < v.dim; ++j) {
      const int64_t i = base + j * st;
      dx[i] = kKind == 0 ? y[i] * (dy[i] - s) : dy[i] - VExp(y[i]) * s;
    }
  }
}

template <int kKind>
Status SoftmaxLike(const KernelCtx& c) {
  const fr::Shape& s = c.in[0].shape();
  const AxisView v = ViewAround(s, AxisOf(c, s));
  if (c.in[0].numel() == 0) return Status::Ok();
  cudaStream_t st = StreamOf(c);
  if (v.inner == 1) {
    SoftmaxRows<kKind><<<static_cast<unsigned>(v.outer), RowThreads(v.dim), 0, st>>>(c.in[0].data<float>(),
                                                                                   c.out[0].data<float>(), v.dim);
  } else {
    SoftmaxStrided<kKind><<<Blocks(v.outer * v.inner), kThreads, 0, st>>>(c.in[0].data<float>(), c.out[0].data<float>(), v);
  }
  return Launched(c);
}

template <int kKind>
Status SoftmaxLikeGrad(const KernelCtx& c) {
  const fr::Shape& s = c.in[1].shape();
  const AxisView v = ViewAround(s, AxisOf(c, s));
  if (c.in[1].numel() == 0) return Status::Ok();
  cudaStream_t st = StreamOf(c);
  const float *dy = c.in[0].data<float>(), *y = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  if (v.inner == 1) {
    SoftmaxGradRows<kKind><<<static_cast<unsigned>(v.outer), RowThreads(v.dim), 0, st>>>(dy, y, dx, v.dim);
  } else {
    SoftmaxGradStrided<kKind><<<Blocks(v.outer * v.inner), kThreads, 0, st>>>(dy, y, dx, v);
  }
  return Launched(c);
}

// Rows and their length for a norm over the axes from `axis` on.
void NormRows(const KernelCtx& c, const fr::Shape& s, int64_t* outer, int64_t* inner) {
  const int axis = AxisOf(c, s);
  *inner = 1;
  for (int i = axis; i < s.rank(); ++i) *inner *= s[i];
  *outer = s.numel() / (*inner ? *inner : 1);
}

__global__ void LayerNormRows(const float* x, const float* g, const float* b, float* y, float* mean, float* rstd, int64_t n,
                              float eps) {
  const int64_t off = blockIdx.x * n;
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += x[off + j];
  const float mu = BlockSum(s) / static_cast<float>(n);
  float v = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) v += (x[off + j] - mu) * (x[off + j] - mu);
  const float r = 1.f / sqrtf(BlockSum(v) / static_cast<float>(n) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[off + j] = (x[off + j] - mu) * r * g[j] + (b ? b[j] : 0.f);
  if (threadIdx.x == 0) {
    mean[blockIdx.x] = mu;
    rstd[blockIdx.x] = r;
  }
}

__global__ void RMSNormRows(const float* x, const float* g, float* y, float* inv, int64_t n, float eps) {
  const int64_t off = blockIdx.x * n;
  double s = 0;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) s += static_cast<double>(x[off + j] * x[off + j]);
  const float r = 1.f / sqrtf(static_cast<float>(BlockSum(s) / static_cast<double>(n)) + eps);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[off + j] = (x[off + j] * r) * g[j];
  if (threadIdx.x == 0) inv[blockIdx.x] = r;
}

// dx for LayerNorm (kRms false: mean and rstd) or RMSNorm (kRms true: inv only).
template <bool kRms>
__global__ void NormGradRows(const float* dy, const float* x, const float* scale, const float* mean, const float* rstd,
                             float* dx, int64_t n) {
  const int64_t off = blockIdx.x * n;
  const float mu = kRms ? 0.f : mean[blockIdx.x], r = rstd[blockIdx.x];
  float sg = 0.f, sgx = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float xh = (x[off + j] - mu) * r;
    const float g = dy[off + j] * scale[j];
    sg += g;
    sgx += g * xh;
  }
  if (!kRms) sg = BlockSum(sg);
  sgx = BlockSum(sgx);
  const float inv_n = 1.f / static_cast<float>(n);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    if (kRms) {
      dx[off + j] = r * (dy[off + j] * scale[j] - x[off + j] * r * sgx * inv_n);
    } else {
      const float xh = (x[off + j] - mu) * r;
      dx[off + j] = r * (dy[off + j] * scale[j] - sg * inv_n - xh * sgx * inv_n);
    }
  }
}

// dscale[j] = sum over rows of dy * xh, dbias[j] = sum of dy (null for RMSNorm): a block is 32
// columns by kLanes lanes of one chunk of the rows (ChunksOf); each lane sums its rows in order,
// then lane 0 adds the lanes'. With several chunks, each writes its sums to `part`
// ([chunk][column], dbias's after dscale's) and NormGradFinish adds them in order.
template <bool kRms>
__global__ void NormGradColumns(const float* dy, const float* x, const float* mean, const float* rstd, float* dscale,
                                float* dbias, float* part, int64_t rows, int64_t n) {
  __shared__ float ps[kLanes][32], pb[kLanes][32];
  const int64_t j = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  float s = 0.f, b = 0.f;
  if (j < n) {
    int64_t begin, end;
    ChunkRange(rows, &begin, &end);
    for (int64_t o = begin + threadIdx.y; o < end; o += kLanes) {
      const float xh = (x[o * n + j] - (kRms ? 0.f : mean[o])) * rstd[o];
      s += dy[o * n + j] * xh;
      b += dy[o * n + j];
    }
  }
  ps[threadIdx.y][threadIdx.x] = s;
  pb[threadIdx.y][threadIdx.x] = b;
  __syncthreads();
  if (threadIdx.y == 0 && j < n) {
    float ts = 0.f, tb = 0.f;
    for (int l = 0; l < kLanes; ++l) {
      ts += ps[l][threadIdx.x];
      tb += pb[l][threadIdx.x];
    }
    if (gridDim.y == 1) {
      dscale[j] = ts;
      if (dbias) dbias[j] = tb;
    } else {
      part[blockIdx.y * n + j] = ts;
      part[(gridDim.y + blockIdx.y) * n + j] = tb;
    }
  }
}

__global__ void NormGradFinish(const float* part, int chunks, int64_t n, float* dscale, float* dbias) {
  FR_GRID_LOOP(j, n) {
    float ts = 0.f, tb = 0.f;
    for (int k = 0; k < chunks; ++k) {
      ts += part[k * n + j];
      tb += part[(chunks + k) * n + j];
    }
    dscale[j] = ts;
    if (dbias) dbias[j] = tb;
  }
}

// Both column sums of a norm's gradient over `rows` rows of n.
template <bool kRms>
Status NormGradSums(const KernelCtx& c, const float* dy, const float* x, const float* mean, const float* rstd, float* dscale,
                    float* dbias, int64_t rows, int64_t n) {
  cudaStream_t s = StreamOf(c);
  const unsigned chunks = ChunksOf(n, rows);
  std::optional<Scratch> part;
  if (chunks > 1) {
    part.emplace(2 * chunks * static_cast<size_t>(n) * sizeof(float), s);
    if (!part->ok()) return NoScratch(c, "the norm gradient's partial sums");
  }
  float* parts = part ? part->as<float>() : nullptr;
  NormGradColumns<kRms><<<dim3(static_cast<unsigned>((n + 31) / 32), chunks), dim3(32, kLanes), 0, s>>>(
      dy, x, mean, rstd, dscale, dbias, parts, rows, n);
  if (chunks > 1) NormGradFinish<<<Blocks(n), kThreads, 0, s>>>(parts, static_cast<int>(chunks), n, dscale, dbias);
  return Launched(c);
}

constexpr float kTanhBeta = kGeluTanhBeta, kTanhKappa = kGeluTanhKappa;

__global__ void GeluK(const float* x, const float* b, float* y, int64_t total, int64_t n, GeluConsts k, bool tanh_form) {
  FR_GRID_LOOP(i, total) {
    const float h = b ? b[IMod(i, n)] + x[i] : x[i];
    if (tanh_form) {  // ops/cpu/fused.cpp's operations, each rounded (no contraction into FMAs)
      const float inner = __fmul_rn(kTanhBeta, __fadd_rn(h, __fmul_rn(kTanhKappa, __fmul_rn(__fmul_rn(h, h), h))));
      y[i] = __fmul_rn(__fmul_rn(0.5f, h), __fadd_rn(1.f, VTanh(inner)));
    } else {
      y[i] = (h * (VErf(h / k.div) + k.one)) * k.half;
    }
  }
}

__global__ void GeluGradK(const float* dy, const float* x, const float* b, float* dx, int64_t total, int64_t n, GeluConsts k,
                          bool tanh_form) {
  FR_GRID_LOOP(i, total) {
    const float h = b ? b[IMod(i, n)] + x[i] : x[i];
    if (tanh_form) {  // as the forward: the CPU's operations, each rounded
      const float h2 = __fmul_rn(h, h);
      const float t = VTanh(__fmul_rn(kTanhBeta, __fadd_rn(h, __fmul_rn(kTanhKappa, __fmul_rn(h2, h)))));
      const float left = __fmul_rn(0.5f, h), right = __fadd_rn(1.f, t);
      const float d_right = __fmul_rn(__fmul_rn(__fmul_rn(left, __fsub_rn(1.f, __fmul_rn(t, t))), kTanhBeta),
                                      __fadd_rn(1.f, __fmul_rn(3.f * kTanhKappa, h2)));
      dx[i] = __fmul_rn(dy[i], __fadd_rn(__fmul_rn(0.5f, right), d_right));
    } else {
      const float d = h / k.div;
      const float e = VExp(-(d * d));
      const float dm = dy[i] * k.half;
      const float through_mul = dm * (VErfGivenExp(d, e) + k.one);
      const float through_erf = (dm * h) * 1.1283791670955126f * e / k.div;
      dx[i] = through_mul + through_erf;
    }
  }
}

// The scaled, masked softmax of each row; mask (bool, broadcast onto x by m) may be null.
__global__ void MaskedSoftmaxRows(const float* x, const uint8_t* mask, Bcast<1> m, float* y, int64_t n, SoftmaxConsts k) {
  const int64_t off = blockIdx.x * n;
  float mx = -INFINITY;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float v = k.divide ? x[off + j] / k.scale : x[off + j] * k.scale;
    if (mask && (mask[m.Offset(0, off + j)] != 0) == k.fill_if) v = k.fill;
    y[off + j] = v;
    mx = fmaxf(mx, v);
  }
  mx = BlockMax(mx);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    const float e = VExp(y[off + j] - mx);
    y[off + j] = e;
    s += e;
  }
  const float inv = 1.f / BlockSum(s);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) y[off + j] *= inv;
}

__global__ void MaskedSoftmaxGradRows(const float* dy, const float* y, const uint8_t* mask, Bcast<1> m, float* dx, int64_t n,
                                      SoftmaxConsts k) {
  const int64_t off = blockIdx.x * n;
  float dot = 0.f;
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) dot += dy[off + j] * y[off + j];
  dot = BlockSum(dot);
  for (int64_t j = threadIdx.x; j < n; j += blockDim.x) {
    float d = y[off + j] * (dy[off + j] - dot);
    if (mask && (mask[m.Offset(0, off + j)] != 0) == k.fill_if) d = 0.f;
    dx[off + j] = k.divide ? d / k.scale : d * k.scale;
  }
}

// The mask input `i` broadcast onto shape s, or a null mask.
Status MaskOf(const KernelCtx& c, size_t i, const fr::Shape& s, const uint8_t** mask, Bcast<1>* m) {
  *mask = nullptr;
  if (c.in.size() <= i || !c.in[i].defined()) return Status::Ok();
  const fr::Shape* ins[1] = {&c.in[i].shape()};
  if (!MakeBcast<1>(s, ins, m)) return TooManyDims(c, s.rank());
  *mask = static_cast<const uint8_t*>(c.in[i].raw());
  return Status::Ok();
}

}  // namespace

Status Softmax(const KernelCtx& c) { return SoftmaxLike<0>(c); }
Status LogSoftmax(const KernelCtx& c) { return SoftmaxLike<1>(c); }
Status SoftmaxGrad(const KernelCtx& c) { return SoftmaxLikeGrad<0>(c); }
Status LogSoftmaxGrad(const KernelCtx& c) { return SoftmaxLikeGrad<1>(c); }

Status LayerNormalization(const KernelCtx& c) {
  int64_t outer = 0, inner = 0;
  NormRows(c, c.in[0].shape(), &outer, &inner);
  if (outer == 0 || inner == 0) return Status::Ok();
  const float* b = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  LayerNormRows<<<static_cast<unsigned>(outer), RowThreads(inner), 0, StreamOf(c)>>>(
      c.in[0].data<float>(), c.in[1].data<float>(), b, c.out[0].data<float>(), c.out[1].data<float>(), c.out[2].data<float>(),
      inner, static_cast<float>(c.node.attrs.Float("epsilon", 1e-5)));
  return Launched(c);
}

Status LayerNormGrad(const KernelCtx& c) {
  int64_t outer = 0, inner = 0;
  NormRows(c, c.in[1].shape(), &outer, &inner);
  if (inner == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  const float *dy = c.in[0].data<float>(), *x = c.in[1].data<float>(), *mean = c.in[3].data<float>(),
              *rstd = c.in[4].data<float>();
  if (outer > 0) {
    NormGradRows<false><<<static_cast<unsigned>(outer), RowThreads(inner), 0, s>>>(dy, x, c.in[2].data<float>(), mean, rstd,
                                                                                   c.out[0].data<float>(), inner);
  }
  RETURN_IF_ERROR(Launched(c));
  return NormGradSums<false>(c, dy, x, mean, rstd, c.out[1].data<float>(), c.out[2].data<float>(), outer, inner);
}

Status RMSNorm(const KernelCtx& c) {
  int64_t outer = 0, inner = 0;
  NormRows(c, c.in[0].shape(), &outer, &inner);
  if (outer == 0 || inner == 0) return Status::Ok();
  RMSNormRows<<<static_cast<unsigned>(outer), RowThreads(inner), 0, StreamOf(c)>>>(
      c.in[0].data<float>(), c.in[1].data<float>(), c.out[0].data<float>(), c.out[1].data<float>(), inner,
      static_cast<float>(c.node.attrs.Float("epsilon", 1e-6)));
  return Launched(c);
}

Status RMSNormGrad(const KernelCtx& c) {
  int64_t outer = 0, inner = 0;
  NormRows(c, c.in[1].shape(), &outer, &inner);
  if (inner == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  const float *dy = c.in[0].data<float>(), *x = c.in[1].data<float>(), *inv = c.in[3].data<float>();
  if (outer > 0) {
    NormGradRows<true><<<static_cast<unsigned>(outer), RowThreads(inner), 0, s>>>(dy, x, c.in[2].data<float>(), nullptr, inv,
                                                                                  c.out[0].data<float>(), inner);
  }
  RETURN_IF_ERROR(Launched(c));
  return NormGradSums<true>(c, dy, x, nullptr, inv, c.out[1].data<float>(), nullptr, outer, inner);
}

Status Gelu(const KernelCtx& c) {
  const fr::Shape& s = c.in[0].shape();
  const int64_t n = s.rank() ? s[s.rank() - 1] : 1, total = c.in[0].numel();
  if (total == 0) return Status::Ok();
  const float* bias = c.in.size() > 1 && c.in[1].defined() ? c.in[1].data<float>() : nullptr;
  const GeluConsts k = GeluOf(c.node);
  GeluK<<<Blocks(total), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), bias, c.out[0].data<float>(), total, n, k,
                                                     c.node.attrs.Int("tanh") != 0);
  return Launched(c);
}

Status GeluGrad(const KernelCtx& c) {
  const fr::Shape& s = c.in[1].shape();
  const int64_t n = s.rank() ? s[s.rank() - 1] : 1, total = c.in[1].numel();
  if (total == 0) return Status::Ok();
  const float* bias = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  const GeluConsts k = GeluOf(c.node);
  GeluGradK<<<Blocks(total), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.in[1].data<float>(), bias,
                                                         c.out[0].data<float>(), total, n, k, c.node.attrs.Int("tanh") != 0);
  return Launched(c);
}

Status MaskedSoftmax(const KernelCtx& c) {
  const fr::Shape& s = c.in[0].shape();
  const int64_t n = s[s.rank() - 1], rows = n ? c.in[0].numel() / n : 0;
  if (rows == 0) return Status::Ok();
  const uint8_t* mask = nullptr;
  Bcast<1> m;
  RETURN_IF_ERROR(MaskOf(c, 1, s, &mask, &m));
  MaskedSoftmaxRows<<<static_cast<unsigned>(rows), RowThreads(n), 0, StreamOf(c)>>>(c.in[0].data<float>(), mask, m,
                                                                                   c.out[0].data<float>(), n, SoftmaxOf(c.node));
  return Launched(c);
}

Status MaskedSoftmaxGrad(const KernelCtx& c) {
  const fr::Shape& s = c.in[1].shape();
  const int64_t n = s[s.rank() - 1], rows = n ? c.in[1].numel() / n : 0;
  if (rows == 0) return Status::Ok();
  const uint8_t* mask = nullptr;
  Bcast<1> m;
  RETURN_IF_ERROR(MaskOf(c, 2, s, &mask, &m));
  MaskedSoftmaxGradRows<<<static_cast<unsigned>(rows), RowThreads(n), 0, StreamOf(c)>>>(
      c.in[0].data<float>(), c.in[1].data<float>(), mask, m, c.out[0].data<float>(), n, SoftmaxOf(c.node));
  return Launched(c);
}

}  // namespace fr::cuda
