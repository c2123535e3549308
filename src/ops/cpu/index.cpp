// CPU kernels of Tile, Pad and GatherElements (ops/index.cpp): each walks its output's
// multi-index and reads the element it maps to, for any element type by size.
#include <cstring>
#include <vector>

#include "base/shape.h"
#include "ops/cpu/kernels.h"

namespace fr::cpu {
namespace {

// Calls f(flat output index, multi-index) over a shape, in row-major order.
template <typename F>
void ForEachIndex(const fr::Shape& s, F f) {
  const int64_t n = s.numel();
  std::vector<int64_t> at(static_cast<size_t>(s.rank()), 0);
  for (int64_t o = 0; o < n; ++o) {
    f(o, at);
    for (int d = s.rank() - 1; d >= 0; --d) {
      if (++at[static_cast<size_t>(d)] < s[d]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
}

int64_t Flat(const fr::Shape& s, const std::vector<int64_t>& at) {
  int64_t f = 0;
  for (int d = 0; d < s.rank(); ++d) f = f * s[d] + at[static_cast<size_t>(d)];
  return f;
}

void CopyElement(const Tensor& from, int64_t i, const Tensor& to, int64_t o) {
  const size_t es = SizeOf(from.dtype());
  std::memcpy(static_cast<char*>(to.raw()) + static_cast<size_t>(o) * es, static_cast<const char*>(from.raw()) + static_cast<size_t>(i) * es, es);
}

// The index along `axis` that element `e` of `indices` holds, checked against `dim`.
Result<int64_t> IndexAt(const KernelCtx& c, const Tensor& indices, int64_t e, int64_t dim) {
  int64_t v = indices.dtype() == DType::kI64 ? indices.data<int64_t>()[e] : indices.data<int32_t>()[e];
  if (v < -dim || v >= dim) {
    return Status::Invalid("[ops] " + c.node.name + ": index " + std::to_string(v) + " is out of range [" + std::to_string(-dim) +
                           ", " + std::to_string(dim) + ")");
  }
  return v < 0 ? v + dim : v;
}

// Calls f(o, target) for each element o of `indices`: its own multi-index with the axis entry
// replaced by its value, flattened into data of shape xs (GatherElements and its gradient).
template <typename F>
Status ForEachTarget(const KernelCtx& c, const Tensor& indices, const fr::Shape& xs, F f) {
  const int a = *xs.Axis(c.node.attrs.Int("axis", 0));
  Status bad;
  std::vector<int64_t> target;
  ForEachIndex(indices.shape(), [&](int64_t o, const std::vector<int64_t>& at) {
    if (!bad.ok()) return;
    auto v = IndexAt(c, indices, o, xs[a]);
    if (!v.ok()) {
      bad = v.status();
      return;
    }
    target = at;
    target[static_cast<size_t>(a)] = *v;
    f(o, Flat(xs, target));
  });
  return bad;
}

}  // namespace

Status Tile(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const fr::Shape& xs = X.shape();
  std::vector<int64_t> src(static_cast<size_t>(xs.rank()));
  ForEachIndex(Y.shape(), [&](int64_t o, const std::vector<int64_t>& at) {
    for (int d = 0; d < xs.rank(); ++d) src[static_cast<size_t>(d)] = at[static_cast<size_t>(d)] % xs[d];
    CopyElement(X, Flat(xs, src), Y, o);
  });
  return Status::Ok();
}

Status Pad(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const fr::Shape& xs = X.shape();
  const std::vector<int64_t> p = c.node.attrs.Ints("pads");
  const double value = c.node.attrs.Float("value", 0.0);
  std::vector<int64_t> src(static_cast<size_t>(xs.rank()));
  ForEachIndex(Y.shape(), [&](int64_t o, const std::vector<int64_t>& at) {
    bool inside = true;
    for (int d = 0; d < xs.rank(); ++d) {
      src[static_cast<size_t>(d)] = at[static_cast<size_t>(d)] - p[static_cast<size_t>(d)];
      inside = inside && src[static_cast<size_t>(d)] >= 0 && src[static_cast<size_t>(d)] < xs[d];
    }
    if (inside) {
      CopyElement(X, Flat(xs, src), Y, o);
    } else if (Y.dtype() == DType::kF32) {
      Y.data<float>()[o] = static_cast<float>(value);
    } else if (Y.dtype() == DType::kI64) {
      Y.data<int64_t>()[o] = static_cast<int64_t>(value);
    } else {
      std::memset(static_cast<char*>(Y.raw()) + static_cast<size_t>(o) * SizeOf(Y.dtype()), value != 0, SizeOf(Y.dtype()));
    }
  });
  return Status::Ok();
}

Status GatherElements(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  return ForEachTarget(c, c.in[1], X.shape(), [&](int64_t o, int64_t from) { CopyElement(X, from, Y, o); });
}

// dData = 0; dData[target of each index] += dY, in index order (deterministic).
Status GatherElementsGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  dX.Zero();
  return ForEachTarget(c, c.in[1], dX.shape(), [&](int64_t o, int64_t to) { dX.data<float>()[to] += dY.data<float>()[o]; });
}

}  // namespace fr::cpu
