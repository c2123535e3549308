// CUDA kernels of the ops that move elements: Reshape, Transpose, Concat and Split (2-D copies),
// Slice, Expand, Tile, Pad, the gathers, and the scatter-adds of their gradients. Moves are
// type-blind: they copy elements of the tensor's size.
//
// Scatter-adds are deterministic and match the CPU bit for bit: the targets are sorted stably
// (CUB's radix sort), so each target's contributions are added in the order the CPU adds them,
// by one thread per target element, with no atomics.
#include <cub/device/device_radix_sort.cuh>

#include <cstring>
#include <optional>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

int64_t Prod(const fr::Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= s[i];
  return p;
}

// Output dims and, per output dim, the input stride it reads with, plus a base offset.
struct Walk {
  int rank = 0;
  int64_t dims[kMaxRank] = {}, stride[kMaxRank] = {};
  int64_t base = 0;
  __device__ int64_t Offset(int64_t i) const {
    int64_t off = base;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(i, dims[d]);
      off += (i - q * dims[d]) * stride[d];
      i = q;
    }
    return off;
  }
};

template <typename T>
__global__ void Gathered(const T* x, T* y, int64_t n, Walk w) {
  FR_GRID_LOOP(i, n) y[i] = x[w.Offset(i)];
}

template <typename T>
__global__ void Scattered(T* x, const T* y, int64_t n, Walk w) {
  FR_GRID_LOOP(i, n) x[w.Offset(i)] = y[i];
}

// y[i] = x[w.Offset(i)] for every element of Y, any element type.
Status GatherBy(const KernelCtx& c, const Tensor& X, const Tensor& Y, const Walk& w) {
  const int64_t n = Y.numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    Gathered<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(X.raw()), static_cast<T*>(Y.raw()), n, w);
  });
  return Launched(c);
}

// The walk of a strided view of x (start and step per axis) with the output's shape.
bool SliceWalk(const fr::Shape& x, const fr::Shape& out, const std::vector<int64_t>& start, const std::vector<int64_t>& step,
               Walk* w) {
  if (out.rank() > kMaxRank) return false;
  const std::vector<int64_t> st = Strides(x);
  w->rank = out.rank();
  for (int d = 0; d < out.rank(); ++d) {
    const auto du = static_cast<size_t>(d);
    w->dims[d] = out[d];
    w->stride[d] = step[du] * st[du];
    w->base += start[du] * st[du];
  }
  return true;
}

// --- deterministic scatter-add -------------------------------------------------------------

// Item j (of n) adds its `inner` elements, for each of `outer` blocks, into target row key[j] of
// dx: dx[(o * rows + key[j]) * inner + k] += src[(o * n + j) * inner + k]. A key < 0 adds nothing.
// Sorted stably by key, the items of one key are a run in item order.
__global__ void SegmentAdd(const int64_t* key, const int64_t* item, int64_t n, const float* src, float* dx, int64_t outer,
                           int64_t rows, int64_t inner) {
  FR_GRID_LOOP(e, n * outer * inner) {
    const int64_t i = IDiv(e, outer * inner), ok = IMod(e, outer * inner), o = IDiv(ok, inner), k = IMod(ok, inner);
    const int64_t row = key[i];
    if (row < 0 || (i > 0 && key[i - 1] == row)) continue;  // not the first item of its run
    float* dst = dx + (o * rows + row) * inner + k;
    float acc = *dst;
    for (int64_t r = i; r < n && key[r] == row; ++r) acc += src[(o * n + item[r]) * inner + k];
    *dst = acc;
  }
}

__global__ void Iota(int64_t* v, int64_t n) { FR_GRID_LOOP(i, n) v[i] = i; }

__global__ void ShiftKeys(const int64_t* in, int64_t* out, int64_t n, int64_t by) { FR_GRID_LOOP(i, n) out[i] = in[i] + by; }

int Bits(int64_t rows) {
  int b = 1;
  while (b < 63 && (int64_t{1} << b) <= rows) ++b;
  return b;
}

// Keys in [-1, rows) sorted stably, with the item number each came from; the memory is freed on
// the stream at destruction.
class SortedKeys {
 public:
  explicit SortedKeys(cudaStream_t s) : s_(s) {}
  Status Sort(const KernelCtx& c, const int64_t* keys, int64_t n, int64_t rows) {
    // Keys shifted by one, so that -1 sorts first as 0 and the bit range stays small.
    const int bits = Bits(rows + 1);
    size_t temp = 0;
    if (const cudaError_t e = cub::DeviceRadixSort::SortPairs(nullptr, temp, static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr),
                                                              static_cast<int64_t*>(nullptr), static_cast<int64_t*>(nullptr), n, 0, bits, s_);
        e != cudaSuccess)
      return Launched(c, e);
    // CUB's scratch after the four arrays, on a 256-byte boundary as CUB allocates.
    const size_t words = (static_cast<size_t>(n) * 4 * sizeof(int64_t) + 255) / 256 * 256;
    mem_.emplace(words + temp, s_);
    if (!mem_->ok()) return NoScratch(c, "sorting " + std::to_string(n) + " indices");
    int64_t* k_in = mem_->as<int64_t>();
    keys_ = k_in + n;
    int64_t* v_in = keys_ + n;
    items_ = v_in + n;
    ShiftKeys<<<Blocks(n), kThreads, 0, s_>>>(keys, k_in, n, 1);
    Iota<<<Blocks(n), kThreads, 0, s_>>>(v_in, n);
    if (const cudaError_t e = cub::DeviceRadixSort::SortPairs(mem_->as<char>() + words, temp, k_in, keys_, v_in, items_, n, 0, bits, s_);
        e != cudaSuccess)
      return Launched(c, e);
    ShiftKeys<<<Blocks(n), kThreads, 0, s_>>>(keys_, keys_, n, -1);
    return Launched(c);
  }
  const int64_t* keys() const { return keys_; }
  const int64_t* items() const { return items_; }

 private:
  cudaStream_t s_;
  std::optional<Scratch> mem_;
  int64_t *keys_ = nullptr, *items_ = nullptr;
};

// The scatter-add of n items with keys `keys` (device, in [-1, rows)) into dx as SegmentAdd
// describes; dx is zeroed first unless `adds`.
Status ScatterAdd(const KernelCtx& c, const int64_t* keys, int64_t n, const float* src, const Tensor& dx, int64_t outer,
                  int64_t rows, int64_t inner, bool adds) {
  cudaStream_t s = StreamOf(c);
  if (!adds && dx.bytes()) cudaMemsetAsync(dx.raw(), 0, dx.bytes(), s);
  if (n == 0 || outer * inner == 0) return Launched(c);
  SortedKeys sorted(s);
  RETURN_IF_ERROR(sorted.Sort(c, keys, n, rows));
  SegmentAdd<<<Blocks(n * outer * inner), kThreads, 0, s>>>(sorted.keys(), sorted.items(), n, src, dx.data<float>(), outer,
                                                            rows, inner);
  return Launched(c);
}

Status NoMemory(const KernelCtx& c) { return NoScratch(c, "its indices"); }

// key[i] = idx[i] normalised into [0, dim) (negative counts from the end), -1 and a data error
// when out of range.
template <typename I>
__global__ void NormalizeK(const I* idx, int64_t n, int64_t dim, int64_t* key, DataError* err) {
  FR_GRID_LOOP(i, n) {
    const int64_t v = idx[i];
    if (v < -dim || v >= dim) {
      ReportDataError(err, 1, v, dim);
      key[i] = -1;
    } else {
      key[i] = v < 0 ? v + dim : v;
    }
  }
}

void Normalize(const Tensor& indices, int64_t dim, int64_t* key, cudaStream_t s) {
  const int64_t n = indices.numel();
  if (n == 0) return;
  if (indices.dtype() == DType::kI64) {
    NormalizeK<<<Blocks(n), kThreads, 0, s>>>(indices.data<int64_t>(), n, dim, key, DataErrorWord());
  } else {
    NormalizeK<<<Blocks(n), kThreads, 0, s>>>(indices.data<int32_t>(), n, dim, key, DataErrorWord());
  }
}

// y[(o * n + j) * inner + k] = x[(o * dim + key[j]) * inner + k], zero for a bad key.
template <typename T>
__global__ void GatherRowsK(const T* x, const int64_t* key, T* y, int64_t outer, int64_t dim, int64_t n, int64_t inner) {
  FR_GRID_LOOP(e, outer * n * inner) {
    const int64_t k = IMod(e, inner), j = IMod(IDiv(e, inner), n), o = IDiv(e, inner * n);
    const int64_t row = key[j];
    y[e] = row < 0 ? T(0) : x[(o * dim + row) * inner + k];
  }
}

// GatherElements' targets: element i of the indices, at its own multi-index with the axis entry
// replaced by its (normalised) value, flattened into the data's shape; -1 when out of range.
struct ElementWalk {
  int rank = 0, axis = 0;
  int64_t dims[kMaxRank] = {}, stride[kMaxRank] = {};
  int64_t dim = 0;
};

__global__ void ElementTargetsK(const int64_t* key, int64_t n, ElementWalk w, int64_t* target) {
  FR_GRID_LOOP(i, n) {
    if (key[i] < 0) {
      target[i] = -1;
      continue;
    }
    int64_t off = 0, rest = i;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(rest, w.dims[d]);
      const int64_t at = d == w.axis ? key[i] : rest - q * w.dims[d];
      off += at * w.stride[d];
      rest = q;
    }
    target[i] = off;
  }
}

template <typename T>
__global__ void GatherFlatK(const T* x, const int64_t* target, T* y, int64_t n) {
  FR_GRID_LOOP(i, n) y[i] = target[i] < 0 ? T(0) : x[target[i]];
}

// GatherND's tuples: key[t] = the tuple's flat index over the data's first k dims, -1 when out
// of range.
template <typename I>
__global__ void TupleKeysK(const I* idx, int64_t tuples, int k, Walk dims, int64_t* key, DataError* err) {
  FR_GRID_LOOP(t, tuples) {
    int64_t off = 0;
    bool bad = false;
    for (int j = 0; j < k; ++j) {
      const int64_t dim = dims.dims[j];
      const int64_t v = idx[t * k + j];
      if (v < -dim || v >= dim) {
        ReportDataError(err, 1, v, dim);
        bad = true;
      }
      off = off * dim + (v < 0 ? v + dim : v);
    }
    key[t] = bad ? -1 : off;
  }
}

template <typename T>
__global__ void ScatterRowsK(T* y, const int64_t* key, const T* u, int64_t tuples, int64_t slice) {
  FR_GRID_LOOP(e, tuples * slice) {
    const int64_t t = IDiv(e, slice), k = IMod(e, slice);
    if (key[t] >= 0) y[key[t] * slice + k] = u[e];
  }
}

__global__ void AnyRepeatK(const int64_t* key, int64_t n, DataError* err) {
  FR_GRID_LOOP(i, n) if (i > 0 && key[i] >= 0 && key[i] == key[i - 1]) ReportDataError(err, 5, key[i], 0);
}

// Pad's source of each output element: per axis, the coordinate it reads (modes as on the CPU:
// 0 constant, 1 reflect, 2 edge, 3 wrap), flattened; -1 in the constant padding.
struct PadWalk {
  int rank = 0;
  int mode = 0;
  int64_t out[kMaxRank] = {}, in[kMaxRank] = {}, begin[kMaxRank] = {};
};

__device__ int64_t PadSource(int mode, int64_t o, int64_t begin, int64_t n) {
  int64_t s = o - begin;
  if (s >= 0 && s < n) return s;
  switch (mode) {
    case 1: {
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      s %= period;
      if (s < 0) s += period;
      return s < n ? s : period - s;
    }
    case 2: return s < 0 ? 0 : n - 1;
    case 3: return ((s % n) + n) % n;
    default: return -1;
  }
}

__global__ void PadSourcesK(PadWalk w, int64_t n, int64_t* src) {
  FR_GRID_LOOP(i, n) {
    int64_t rest = i, off = 0, scale = 1;
    bool inside = true;
    for (int d = w.rank - 1; d >= 0; --d) {
      const int64_t q = rest / w.out[d];
      const int64_t s = PadSource(w.mode, rest - q * w.out[d], w.begin[d], w.in[d]);
      inside = inside && s >= 0;
      off += s * scale;
      scale *= w.in[d];
      rest = q;
    }
    src[i] = inside ? off : -1;
  }
}

template <typename T>
__global__ void PadFillK(const T* x, const int64_t* src, T* y, int64_t n, T fill) {
  FR_GRID_LOOP(i, n) y[i] = src[i] >= 0 ? x[src[i]] : fill;
}

}  // namespace

Status Reshape(const KernelCtx& c) {
  if (c.out[0].raw() != c.in[0].raw() && c.in[0].bytes())
    cudaMemcpyAsync(c.out[0].raw(), c.in[0].raw(), c.in[0].bytes(), cudaMemcpyDeviceToDevice, StreamOf(c));
  return Launched(c);
}

Status Transpose(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  std::vector<int64_t> perm = c.node.attrs.Ints("perm");
  if (perm.empty())
    for (int i = X.shape().rank() - 1; i >= 0; --i) perm.push_back(i);
  if (Y.shape().rank() > kMaxRank) return TooManyDims(c, Y.shape().rank());
  const std::vector<int64_t> xs = Strides(X.shape());
  Walk w;
  w.rank = Y.shape().rank();
  for (int i = 0; i < w.rank; ++i) {
    w.dims[i] = Y.shape()[i];
    w.stride[i] = xs[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  }
  return GatherBy(c, X, Y, w);
}

// Concat and Split see every tensor as [outer, dim_along_axis * inner]: one 2-D copy per piece.
Status Concat(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  const int a = *Y.shape().Axis(c.node.attrs.Int("axis"));
  const int64_t outer = Prod(Y.shape(), 0, a), inner = Prod(Y.shape(), a + 1, Y.shape().rank());
  const size_t es = SizeOf(Y.dtype()), row = static_cast<size_t>(Y.shape()[a] * inner) * es;
  cudaStream_t s = StreamOf(c);
  size_t at = 0;
  for (const Tensor& x : c.in) {
    const size_t block = static_cast<size_t>(x.shape()[a] * inner) * es;
    if (block && outer == 1)  // one run: a 2-D copy's pitch may not exceed 2 GiB
      cudaMemcpyAsync(static_cast<char*>(Y.raw()) + at, x.raw(), block, cudaMemcpyDeviceToDevice, s);
    else if (block && outer)
      cudaMemcpy2DAsync(static_cast<char*>(Y.raw()) + at, row, x.raw(), block, block, static_cast<size_t>(outer),
                        cudaMemcpyDeviceToDevice, s);
    at += block;
  }
  return Launched(c);
}

Status Split(const KernelCtx& c) {
  const Tensor& X = c.in[0];
  const int a = *X.shape().Axis(c.node.attrs.Int("axis", 0));
  const int64_t outer = Prod(X.shape(), 0, a), inner = Prod(X.shape(), a + 1, X.shape().rank());
  const size_t es = SizeOf(X.dtype()), row = static_cast<size_t>(X.shape()[a] * inner) * es;
  cudaStream_t s = StreamOf(c);
  size_t at = 0;
  for (const Tensor& y : c.out) {
    const size_t block = static_cast<size_t>(y.shape()[a] * inner) * es;
    if (block && outer == 1)
      cudaMemcpyAsync(y.raw(), static_cast<const char*>(X.raw()) + at, block, cudaMemcpyDeviceToDevice, s);
    else if (block && outer)
      cudaMemcpy2DAsync(y.raw(), block, static_cast<const char*>(X.raw()) + at, row, block, static_cast<size_t>(outer),
                        cudaMemcpyDeviceToDevice, s);
    at += block;
  }
  return Launched(c);
}

Status Slice(const KernelCtx& c) {
  Walk w;
  if (!SliceWalk(c.in[0].shape(), c.out[0].shape(), c.node.attrs.Ints("starts"), c.node.attrs.Ints("steps"), &w))
    return TooManyDims(c, c.out[0].shape().rank());
  return GatherBy(c, c.in[0], c.out[0], w);
}

Status SliceGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  Walk w;
  if (!SliceWalk(dX.shape(), dY.shape(), c.node.attrs.Ints("starts"), c.node.attrs.Ints("steps"), &w))
    return TooManyDims(c, dY.shape().rank());
  cudaStream_t s = StreamOf(c);
  if (dX.bytes()) cudaMemsetAsync(dX.raw(), 0, dX.bytes(), s);
  const int64_t n = dY.numel();
  if (n) Scattered<<<Blocks(n), kThreads, 0, s>>>(dX.data<float>(), dY.data<float>(), n, w);
  return Launched(c);
}

Status Expand(const KernelCtx& c) {
  Bcast<1> b;
  const fr::Shape* ins[1] = {&c.in[0].shape()};
  if (!MakeBcast<1>(c.out[0].shape(), ins, &b)) return TooManyDims(c, c.out[0].shape().rank());
  Walk w;
  w.rank = b.rank;
  for (int d = 0; d < b.rank; ++d) {
    w.dims[d] = b.dims[d];
    w.stride[d] = b.stride[0][d];
  }
  return GatherBy(c, c.in[0], c.out[0], w);
}

// Tile reads x at (i_d mod x_d): a walk per output element through x's strides.
template <typename T>
__global__ void TileK(const T* x, T* y, int64_t n, Walk out, Walk in) {
  FR_GRID_LOOP(i, n) {
    int64_t rest = i, off = 0;
    for (int d = out.rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(rest, out.dims[d]);
      off += IMod(rest - q * out.dims[d], in.dims[d]) * in.stride[d];
      rest = q;
    }
    y[i] = x[off];
  }
}

Status Tile(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  if (Y.shape().rank() > kMaxRank) return TooManyDims(c, Y.shape().rank());
  const std::vector<int64_t> xs = Strides(X.shape());
  Walk out, in;
  out.rank = in.rank = Y.shape().rank();
  for (int d = 0; d < out.rank; ++d) {
    out.dims[d] = Y.shape()[d];
    in.dims[d] = X.shape()[d];
    in.stride[d] = xs[static_cast<size_t>(d)];
  }
  const int64_t n = Y.numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    TileK<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(X.raw()), static_cast<T*>(Y.raw()), n, out, in);
  });
  return Launched(c);
}

namespace {

Status PadSources(const KernelCtx& c, const fr::Shape& xs, const fr::Shape& ys, int64_t* src) {
  if (ys.rank() > kMaxRank) return TooManyDims(c, ys.rank());
  const std::vector<int64_t> p = c.node.attrs.Ints("pads");
  PadWalk w;
  w.rank = ys.rank();
  w.mode = static_cast<int>(c.node.attrs.Int("mode", 0));
  for (int d = 0; d < w.rank; ++d) {
    w.out[d] = ys[d];
    w.in[d] = xs[d];
    w.begin[d] = p[static_cast<size_t>(d)];
  }
  const int64_t n = ys.numel();
  if (n) PadSourcesK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(w, n, src);
  return Launched(c);
}

}  // namespace

Status Pad(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const int64_t n = Y.numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  Scratch src(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!src.ok()) return NoMemory(c);
  RETURN_IF_ERROR(PadSources(c, X.shape(), Y.shape(), src.as<int64_t>()));
  const double value = c.node.attrs.Float("value", 0.0);
  switch (Y.dtype()) {
    case DType::kF32:
      PadFillK<<<Blocks(n), kThreads, 0, s>>>(X.data<float>(), src.as<int64_t>(), Y.data<float>(), n, static_cast<float>(value));
      break;
    case DType::kI64:
      PadFillK<<<Blocks(n), kThreads, 0, s>>>(X.data<int64_t>(), src.as<int64_t>(), Y.data<int64_t>(), n, static_cast<int64_t>(value));
      break;
    case DType::kI32:
      PadFillK<<<Blocks(n), kThreads, 0, s>>>(X.data<int32_t>(), src.as<int64_t>(), Y.data<int32_t>(), n, static_cast<int32_t>(value));
      break;
    default:  // one byte: u8 takes the value, bool whether it is non-zero
      PadFillK<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(X.raw()), src.as<int64_t>(), static_cast<uint8_t*>(Y.raw()), n,
                                              Y.dtype() == DType::kU8 ? static_cast<uint8_t>(value) : static_cast<uint8_t>(value != 0));
      break;
  }
  return Launched(c);
}

Status PadGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  const int64_t n = dY.numel();
  cudaStream_t s = StreamOf(c);
  Scratch src(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!src.ok()) return NoMemory(c);
  RETURN_IF_ERROR(PadSources(c, dX.shape(), dY.shape(), src.as<int64_t>()));
  return ScatterAdd(c, src.as<int64_t>(), n, dY.data<float>(), dX, 1, dX.numel(), 1, false);
}

Status Gather(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const int a = *X.shape().Axis(c.node.attrs.Int("axis", 0));
  const int64_t outer = Prod(X.shape(), 0, a), dim = X.shape()[a], inner = Prod(X.shape(), a + 1, X.shape().rank());
  const int64_t n = c.in[1].numel();
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  Normalize(c.in[1], dim, key.as<int64_t>(), s);
  const int64_t total = outer * n * inner;
  if (total == 0) return Launched(c);
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    GatherRowsK<<<Blocks(total), kThreads, 0, s>>>(static_cast<const T*>(X.raw()), key.as<int64_t>(), static_cast<T*>(Y.raw()), outer, dim,
                                                   n, inner);
  });
  return Launched(c);
}

// dX = 0 (unless accumulating); dX[o, idx[j], :] += dY[o, j, :] in the order of j.
Status GatherGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  const int a = static_cast<int>(c.node.attrs.Int("axis"));
  const fr::Shape& xs = dX.shape();
  const int64_t outer = Prod(xs, 0, a), dim = xs[a], inner = Prod(xs, a + 1, xs.rank());
  const int64_t n = c.in[1].numel();
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  Normalize(c.in[1], dim, key.as<int64_t>(), s);
  const bool adds = AddsInto(c);
  return ScatterAdd(c, key.as<int64_t>(), n, dY.data<float>(), dX, outer, dim, inner, adds);
}

namespace {

// The targets of GatherElements (or its gradient) into data of shape xs, in `target`.
Status ElementTargets(const KernelCtx& c, const Tensor& indices, const fr::Shape& xs, int64_t* target) {
  const int a = *xs.Axis(c.node.attrs.Int("axis", 0));
  const fr::Shape& is = indices.shape();
  if (is.rank() > kMaxRank) return TooManyDims(c, is.rank());
  const int64_t n = indices.numel();
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  Normalize(indices, xs[a], key.as<int64_t>(), s);
  const std::vector<int64_t> st = Strides(xs);
  ElementWalk w;
  w.rank = is.rank();
  w.axis = a;
  for (int d = 0; d < w.rank; ++d) {
    w.dims[d] = is[d];
    w.stride[d] = st[static_cast<size_t>(d)];
  }
  if (n) ElementTargetsK<<<Blocks(n), kThreads, 0, s>>>(key.as<int64_t>(), n, w, target);
  return Launched(c);
}

}  // namespace

Status GatherElements(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const int64_t n = Y.numel();
  cudaStream_t s = StreamOf(c);
  Scratch target(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!target.ok()) return NoMemory(c);
  RETURN_IF_ERROR(ElementTargets(c, c.in[1], X.shape(), target.as<int64_t>()));
  if (n == 0) return Status::Ok();
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    GatherFlatK<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(X.raw()), target.as<int64_t>(), static_cast<T*>(Y.raw()), n);
  });
  return Launched(c);
}

Status GatherElementsGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  const int64_t n = c.in[1].numel();
  cudaStream_t s = StreamOf(c);
  Scratch target(static_cast<size_t>(n) * sizeof(int64_t), s);
  if (!target.ok()) return NoMemory(c);
  RETURN_IF_ERROR(ElementTargets(c, c.in[1], dX.shape(), target.as<int64_t>()));
  return ScatterAdd(c, target.as<int64_t>(), n, dY.data<float>(), dX, 1, dX.numel(), 1, false);
}

namespace {

// GatherND's tuple keys into `key` (tuples of them); *slice and *rows as the CPU's SliceOffsets.
Status TupleKeys(const KernelCtx& c, const fr::Shape& x, const Tensor& indices, int64_t* key, int64_t* tuples, int64_t* slice,
                 int64_t* rows) {
  const int64_t k = indices.shape()[indices.shape().rank() - 1];
  *tuples = k ? indices.numel() / k : 0;
  *slice = Prod(x, static_cast<int>(k), x.rank());
  *rows = Prod(x, 0, static_cast<int>(k));
  if (k > kMaxRank) return TooManyDims(c, static_cast<int>(k));
  Walk dims;
  for (int j = 0; j < k; ++j) dims.dims[j] = x[j];
  if (*tuples == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  if (indices.dtype() == DType::kI64) {
    TupleKeysK<<<Blocks(*tuples), kThreads, 0, s>>>(indices.data<int64_t>(), *tuples, static_cast<int>(k), dims, key, DataErrorWord());
  } else {
    TupleKeysK<<<Blocks(*tuples), kThreads, 0, s>>>(indices.data<int32_t>(), *tuples, static_cast<int>(k), dims, key, DataErrorWord());
  }
  return Launched(c);
}

int64_t TupleCount(const Tensor& indices) {
  const int64_t k = indices.shape()[indices.shape().rank() - 1];
  return k ? indices.numel() / k : 0;
}

}  // namespace

Status GatherND(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(TupleCount(c.in[1])) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  int64_t tuples = 0, slice = 0, rows = 0;
  RETURN_IF_ERROR(TupleKeys(c, X.shape(), c.in[1], key.as<int64_t>(), &tuples, &slice, &rows));
  if (tuples * slice == 0) return Status::Ok();
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    GatherRowsK<<<Blocks(tuples * slice), kThreads, 0, s>>>(static_cast<const T*>(X.raw()), key.as<int64_t>(), static_cast<T*>(Y.raw()), 1,
                                                            rows, tuples, slice);
  });
  return Launched(c);
}

Status GatherNDGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(TupleCount(c.in[1])) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  int64_t tuples = 0, slice = 0, rows = 0;
  RETURN_IF_ERROR(TupleKeys(c, dX.shape(), c.in[1], key.as<int64_t>(), &tuples, &slice, &rows));
  return ScatterAdd(c, key.as<int64_t>(), tuples, dY.data<float>(), dX, 1, rows, slice, false);
}

// Y = data, then slice t of Y replaced by (with add: increased by) updates' slice t, in the order
// of t. A repeated tuple without add is a data error, as on the CPU.
Status ScatterND(const KernelCtx& c) {
  const Tensor &X = c.in[0], &U = c.in[2], &Y = c.out[0];
  cudaStream_t s = StreamOf(c);
  Scratch key(static_cast<size_t>(TupleCount(c.in[1])) * sizeof(int64_t), s);
  if (!key.ok()) return NoMemory(c);
  int64_t tuples = 0, slice = 0, rows = 0;
  RETURN_IF_ERROR(TupleKeys(c, X.shape(), c.in[1], key.as<int64_t>(), &tuples, &slice, &rows));
  if (Y.raw() != X.raw() && X.bytes()) cudaMemcpyAsync(Y.raw(), X.raw(), X.bytes(), cudaMemcpyDeviceToDevice, s);
  const bool add = c.node.attrs.Int("add") != 0;
  if (add) {
    if (Y.dtype() != DType::kF32)
      return Status::Invalid("[cuda] " + c.node.name + ": ScatterND with add takes float32 on CUDA");
    return ScatterAdd(c, key.as<int64_t>(), tuples, U.data<float>(), Y, 1, rows, slice, true);
  }
  if (tuples == 0) return Launched(c);
  SortedKeys sorted(s);
  RETURN_IF_ERROR(sorted.Sort(c, key.as<int64_t>(), tuples, rows));
  AnyRepeatK<<<Blocks(tuples), kThreads, 0, s>>>(sorted.keys(), tuples, DataErrorWord());
  if (tuples * slice == 0) return Launched(c);
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    ScatterRowsK<<<Blocks(tuples * slice), kThreads, 0, s>>>(static_cast<T*>(Y.raw()), key.as<int64_t>(), static_cast<const T*>(U.raw()),
                                                             tuples, slice);
  });
  return Launched(c);
}

}  // namespace fr::cuda
