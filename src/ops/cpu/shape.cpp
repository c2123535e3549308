// CPU kernels for the ops that move elements: Reshape (a copy into the output register), Transpose
// (strided gather), Gather / GatherGrad (row copies and a scatter-add vectorised along the rows),
// Concat / Split (block copies), Slice / SliceGrad and Expand (strided copies); and the shape
// arithmetic folded at import (Shape, ConstantOfShape, Range). Moves are type-blind: they copy
// elements of the tensor's size.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <type_traits>
#include <vector>

#include "ops/cpu/broadcast.h"
#include "ops/cpu/kernels.h"

namespace fr::cpu {

Status Reshape(const KernelCtx& c) {
  c.out[0].CopyFrom(c.in[0]);
  return Status::Ok();
}

namespace {

template <typename T>
void TransposeT(const Tensor& x, const Tensor& y, const std::vector<int64_t>& perm) {
  int r = y.shape().rank();
  std::vector<int64_t> xs = Strides(x.shape());
  std::vector<int64_t> st(static_cast<size_t>(r));  // input stride along each output dim
  for (int i = 0; i < r; ++i) st[static_cast<size_t>(i)] = xs[static_cast<size_t>(perm[static_cast<size_t>(i)])];
  const T* px = x.data<T>();
  T* py = y.data<T>();
  int64_t n = y.numel();
  if (r == 0) { if (n) py[0] = px[0]; return; }
  int64_t inner = y.shape()[r - 1], sin = st[static_cast<size_t>(r - 1)];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t off = 0;
  for (int64_t o = 0; o < n; o += inner) {
    for (int64_t i = 0; i < inner; ++i) py[o + i] = px[off + i * sin];
    for (int d = r - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      off += st[du];
      if (++idx[du] < y.shape()[d]) break;
      off -= st[du] * y.shape()[d];
      idx[du] = 0;
    }
  }
}

}  // namespace

Status Transpose(const KernelCtx& c) {
  std::vector<int64_t> perm = c.node.attrs.Ints("perm");
  if (perm.empty())
    for (int i = c.in[0].shape().rank() - 1; i >= 0; --i) perm.push_back(i);
  switch (c.in[0].dtype()) {
    case DType::kF32: TransposeT<float>(c.in[0], c.out[0], perm); break;
    case DType::kI64: TransposeT<int64_t>(c.in[0], c.out[0], perm); break;
    default: return Status::Runtime("[ops] " + c.node.name + ": unsupported dtype for Transpose");
  }
  return Status::Ok();
}

namespace {

// prod(s[from:to])
int64_t Prod(const fr::Shape& s, int from, int to) {
  int64_t p = 1;
  for (int i = from; i < to; ++i) p *= s[i];
  return p;
}

// The indices of a Gather as int64 in [0, dim), or an error naming the first one out of range.
Result<std::vector<int64_t>> Indices(const KernelCtx& c, const Tensor& t, int64_t dim) {
  std::vector<int64_t> idx(static_cast<size_t>(t.numel()));
  for (int64_t j = 0; j < t.numel(); ++j) {
    int64_t v = t.dtype() == DType::kI64 ? t.data<int64_t>()[j] : t.data<int32_t>()[j];
    if (v < -dim || v >= dim) {
      return Status::Invalid("[ops] " + c.node.name + ": index " + std::to_string(v) + " is out of range [" +
                             std::to_string(-dim) + ", " + std::to_string(dim) + ")");
    }
    idx[static_cast<size_t>(j)] = v < 0 ? v + dim : v;
  }
  return idx;
}

// Copies between a tensor `big` and its slice `small` (shape `ss`, start st, step sp per axis):
// small = big[slice] when !scatter, big[slice] = small when scatter.
template <typename T>
void SliceCopy(T* big, const fr::Shape& bs, T* small, const fr::Shape& ss, const std::vector<int64_t>& st,
               const std::vector<int64_t>& sp, bool scatter) {
  const int r = ss.rank();
  const int64_t n = ss.numel();
  if (n == 0) return;
  if (r == 0) {
    if (scatter) big[0] = small[0]; else small[0] = big[0];
    return;
  }
  const std::vector<int64_t> bst = Strides(bs);
  std::vector<int64_t> step(static_cast<size_t>(r));  // big's offset per step along each axis
  int64_t off = 0;
  for (int d = 0; d < r; ++d) {
    const auto du = static_cast<size_t>(d);
    step[du] = sp[du] * bst[du];
    off += st[du] * bst[du];
  }
  const int64_t inner = ss[r - 1], si = step[static_cast<size_t>(r - 1)];
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  for (int64_t o = 0; o < n; o += inner) {
    if (si == 1) {
      if (scatter) std::memcpy(big + off, small + o, static_cast<size_t>(inner) * sizeof(T));
      else std::memcpy(small + o, big + off, static_cast<size_t>(inner) * sizeof(T));
    } else if (scatter) {
      for (int64_t i = 0; i < inner; ++i) big[off + i * si] = small[o + i];
    } else {
      for (int64_t i = 0; i < inner; ++i) small[o + i] = big[off + i * si];
    }
    for (int d = r - 2; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      off += step[du];
      if (++idx[du] < ss[d]) break;
      off -= step[du] * ss[d];
      idx[du] = 0;
    }
  }
}

}  // namespace

// Y[o, j, k] = X[o, idx[j], k] for o over data's axes before `axis`, k over those after it.
Status Gather(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const int a = *X.shape().Axis(c.node.attrs.Int("axis", 0));
  const int64_t outer = Prod(X.shape(), 0, a), dim = X.shape()[a], inner = Prod(X.shape(), a + 1, X.shape().rank());
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices(c, c.in[1], dim));
  const size_t es = SizeOf(X.dtype()), row = static_cast<size_t>(inner) * es;
  const auto* px = static_cast<const char*>(X.raw());
  auto* py = static_cast<char*>(Y.raw());
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      const int64_t from = o * dim + idx[static_cast<size_t>(j)];
      std::memcpy(py + static_cast<size_t>(o * n + j) * row, px + static_cast<size_t>(from) * row, row);
    }
  return Status::Ok();
}

// dX = 0; dX[o, idx[j], :] += dY[o, j, :], in the order of j (deterministic).
Status GatherGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  const int a = static_cast<int>(c.node.attrs.Int("axis"));
  const fr::Shape& xs = dX.shape();
  const int64_t outer = Prod(xs, 0, a), dim = xs[a], inner = Prod(xs, a + 1, xs.rank());
  ASSIGN_OR_RETURN(std::vector<int64_t> idx, Indices(c, c.in[1], dim));
  if (!AddsInto(c)) dX.Zero();
  const float* dy = dY.data<float>();
  float* dx = dX.data<float>();
  const auto n = static_cast<int64_t>(idx.size());
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t j = 0; j < n; ++j) {
      float* __restrict dst = dx + (o * dim + idx[static_cast<size_t>(j)]) * inner;
      const float* __restrict src = dy + (o * n + j) * inner;
      for (int64_t k = 0; k < inner; ++k) dst[k] += src[k];
    }
  return Status::Ok();
}

// Concat and Split view every tensor as [outer, dim_along_axis * inner] and copy blocks.
Status Concat(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  const int a = *Y.shape().Axis(c.node.attrs.Int("axis"));
  const int64_t outer = Prod(Y.shape(), 0, a), inner = Prod(Y.shape(), a + 1, Y.shape().rank());
  const size_t es = SizeOf(Y.dtype());
  auto* py = static_cast<char*>(Y.raw());
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor& x : c.in) {
      const size_t block = static_cast<size_t>(x.shape()[a] * inner) * es;
      std::memcpy(py, static_cast<const char*>(x.raw()) + static_cast<size_t>(o) * block, block);
      py += block;
    }
  }
  return Status::Ok();
}

Status Split(const KernelCtx& c) {
  const Tensor& X = c.in[0];
  const int a = *X.shape().Axis(c.node.attrs.Int("axis", 0));
  const int64_t outer = Prod(X.shape(), 0, a), inner = Prod(X.shape(), a + 1, X.shape().rank());
  const size_t es = SizeOf(X.dtype());
  const auto* px = static_cast<const char*>(X.raw());
  for (int64_t o = 0; o < outer; ++o) {
    for (const Tensor& y : c.out) {
      const size_t block = static_cast<size_t>(y.shape()[a] * inner) * es;
      std::memcpy(static_cast<char*>(y.raw()) + static_cast<size_t>(o) * block, px, block);
      px += block;
    }
  }
  return Status::Ok();
}

Status Slice(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    SliceCopy(static_cast<T*>(X.raw()), X.shape(), static_cast<T*>(Y.raw()), Y.shape(), c.node.attrs.Ints("starts"),
              c.node.attrs.Ints("steps"), false);
  });
  return Status::Ok();
}

Status SliceGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  dX.Zero();
  SliceCopy(dX.data<float>(), dX.shape(), dY.data<float>(), dY.shape(), c.node.attrs.Ints("starts"),
            c.node.attrs.Ints("steps"), true);
  return Status::Ok();
}

Status Expand(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    const T* px = static_cast<const T*>(X.raw());
    T* py = static_cast<T*>(Y.raw());
    ForEachRow(X.shape(), Y.shape(), Y.shape(), [&](int64_t ox, int64_t, int64_t oy, int64_t n, int64_t sx, int64_t) {
      if (sx == 1) {
        std::memcpy(py + oy, px + ox, static_cast<size_t>(n) * sizeof(T));
      } else {
        std::fill(py + oy, py + oy + n, px[ox]);
      }
    });
  });
  return Status::Ok();
}

Status Shape(const KernelCtx& c) {
  const fr::Shape& s = c.in[0].shape();
  const int64_t r = s.rank(), start = c.node.attrs.Int("start", 0);
  const int64_t b = std::clamp(start < 0 ? start + r : start, int64_t{0}, r);
  int64_t* y = c.out[0].data<int64_t>();
  for (int64_t k = 0; k < c.out[0].numel(); ++k) y[k] = s[static_cast<int>(b + k)];
  return Status::Ok();
}

Status ConstantOfShape(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  const double v = c.node.attrs.Float("value", 0.0);
  switch (Y.dtype()) {
    case DType::kF32: std::fill_n(Y.data<float>(), Y.numel(), static_cast<float>(v)); break;
    case DType::kI64: std::fill_n(Y.data<int64_t>(), Y.numel(), static_cast<int64_t>(v)); break;
    case DType::kI32: std::fill_n(Y.data<int32_t>(), Y.numel(), static_cast<int32_t>(v)); break;
    case DType::kBool: std::fill_n(Y.data<bool>(), Y.numel(), v != 0.0); break;
    case DType::kU8: std::fill_n(Y.data<uint8_t>(), Y.numel(), static_cast<uint8_t>(v)); break;
  }
  return Status::Ok();
}

namespace {

template <typename T>
Status RangeT(const KernelCtx& c) {
  const T start = c.in[0].data<T>()[0], limit = c.in[1].data<T>()[0], delta = c.in[2].data<T>()[0];
  const double len = delta == T(0) ? -1.0 : std::ceil((static_cast<double>(limit) - static_cast<double>(start)) /
                                                      static_cast<double>(delta));
  if (std::max(len, 0.0) != static_cast<double>(c.out[0].numel())) {
    return Status::Invalid("[ops] " + c.node.name + ": Range(" + std::to_string(start) + ", " + std::to_string(limit) +
                           ", " + std::to_string(delta) + ") does not have " + std::to_string(c.out[0].numel()) +
                           " elements");
  }
  T* y = c.out[0].data<T>();
  for (int64_t i = 0; i < c.out[0].numel(); ++i) {
    if constexpr (std::is_integral_v<T>) {
      // Each value lies between start and limit, but i * delta alone can overflow: wrap, exactly.
      using U = std::make_unsigned_t<T>;
      y[i] = static_cast<T>(static_cast<U>(start) + static_cast<U>(i) * static_cast<U>(delta));
    } else {
      y[i] = static_cast<T>(start + static_cast<T>(i) * delta);
    }
  }
  return Status::Ok();
}

}  // namespace

Status Range(const KernelCtx& c) {
  switch (c.out[0].dtype()) {
    case DType::kF32: return RangeT<float>(c);
    case DType::kI64: return RangeT<int64_t>(c);
    case DType::kI32: return RangeT<int32_t>(c);
    default: return Status::Runtime("[ops] " + c.node.name + ": unsupported dtype for Range");
  }
}

namespace {

// The flat offset of each index tuple's slice in data, and the slice's element count.
Result<std::vector<int64_t>> SliceOffsets(const KernelCtx& c, const fr::Shape& x, const Tensor& indices, int64_t* slice) {
  const int64_t k = indices.shape()[indices.shape().rank() - 1], tuples = k ? indices.numel() / k : 0;
  *slice = Prod(x, static_cast<int>(k), x.rank());
  std::vector<int64_t> out(static_cast<size_t>(tuples));
  for (int64_t t = 0; t < tuples; ++t) {
    int64_t off = 0;
    for (int64_t j = 0; j < k; ++j) {
      const int64_t dim = x[static_cast<int>(j)];
      const int64_t at = t * k + j;
      int64_t v = indices.dtype() == DType::kI64 ? indices.data<int64_t>()[at] : indices.data<int32_t>()[at];
      if (v < -dim || v >= dim) {
        return Status::Invalid("[ops] " + c.node.name + ": index " + std::to_string(v) + " is out of range [" + std::to_string(-dim) +
                               ", " + std::to_string(dim) + ")");
      }
      off = off * dim + (v < 0 ? v + dim : v);
    }
    out[static_cast<size_t>(t)] = off * *slice;
  }
  return out;
}

}  // namespace

Status GatherND(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  int64_t slice = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SliceOffsets(c, X.shape(), c.in[1], &slice));
  const size_t es = SizeOf(X.dtype()), bytes = static_cast<size_t>(slice) * es;
  const auto* px = static_cast<const char*>(X.raw());
  auto* py = static_cast<char*>(Y.raw());
  for (size_t t = 0; t < offsets.size(); ++t) std::memcpy(py + t * bytes, px + static_cast<size_t>(offsets[t]) * es, bytes);
  return Status::Ok();
}

// Y = data, then slice t of Y replaced by (or, with add, increased by) updates' slice t, in the
// order of t. A tuple that repeats without add has no defined result (ONNX): an error.
Status ScatterND(const KernelCtx& c) {
  const Tensor &X = c.in[0], &U = c.in[2], &Y = c.out[0];
  int64_t slice = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SliceOffsets(c, X.shape(), c.in[1], &slice));
  const bool add = c.node.attrs.Int("add") != 0;
  if (!add) {
    std::vector<int64_t> sorted = offsets;
    std::sort(sorted.begin(), sorted.end());
    if (std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
      return Status::Invalid("[ops] " + c.node.name + ": an index tuple repeats, and ScatterND without reduction leaves the result undefined");
    }
  }
  if (Y.raw() != X.raw()) Y.CopyFrom(X);
  const size_t es = SizeOf(X.dtype());
  for (size_t t = 0; t < offsets.size(); ++t) {
    const int64_t to = offsets[t], from = static_cast<int64_t>(t) * slice;
    if (!add) {
      std::memcpy(static_cast<char*>(Y.raw()) + static_cast<size_t>(to) * es, static_cast<const char*>(U.raw()) + static_cast<size_t>(from) * es,
                  static_cast<size_t>(slice) * es);
    } else if (Y.dtype() == DType::kF32) {
      for (int64_t i = 0; i < slice; ++i) Y.data<float>()[to + i] += U.data<float>()[from + i];
    } else if (Y.dtype() == DType::kI64) {
      for (int64_t i = 0; i < slice; ++i) Y.data<int64_t>()[to + i] += U.data<int64_t>()[from + i];
    } else {
      return Status::Invalid("[ops] " + c.node.name + ": ScatterND with add takes float32 or int64");
    }
  }
  return Status::Ok();
}

// dData = 0; dData[slice t] += dY[t], in the order of t (deterministic).
Status GatherNDGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  int64_t slice = 0;
  ASSIGN_OR_RETURN(std::vector<int64_t> offsets, SliceOffsets(c, dX.shape(), c.in[1], &slice));
  dX.Zero();
  const float* dy = dY.data<float>();
  float* dx = dX.data<float>();
  for (size_t t = 0; t < offsets.size(); ++t)
    for (int64_t i = 0; i < slice; ++i) dx[offsets[t] + i] += dy[static_cast<int64_t>(t) * slice + i];
  return Status::Ok();
}

}  // namespace fr::cpu
