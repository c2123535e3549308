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

// Where output coordinate `o` of a padded axis reads from, in [0, n); -1 for constant padding.
// Modes as ops/index.cpp's kPad*: edge clamps, reflect mirrors about the end elements (period
// 2(n - 1)), wrap repeats.
int64_t PadSource(int64_t mode, int64_t o, int64_t begin, int64_t n) {
  int64_t s = o - begin;
  if (s >= 0 && s < n) return s;
  switch (mode) {
    case 1: {  // reflect
      if (n == 1) return 0;
      const int64_t period = 2 * (n - 1);
      s %= period;
      if (s < 0) s += period;
      return s < n ? s : period - s;
    }
    case 2: return s < 0 ? 0 : n - 1;  // edge
    case 3: return ((s % n) + n) % n;  // wrap
    default: return -1;                // constant
  }
}

// Calls f(output flat index, source flat index or -1) over Pad's output.
template <typename F>
void ForEachPadded(const KernelCtx& c, const fr::Shape& xs, const fr::Shape& ys, F f) {
  const std::vector<int64_t> p = c.node.attrs.Ints("pads");
  const int64_t mode = c.node.attrs.Int("mode", 0);
  std::vector<int64_t> src(static_cast<size_t>(xs.rank()));
  ForEachIndex(ys, [&](int64_t o, const std::vector<int64_t>& at) {
    bool inside = true;
    for (int d = 0; d < xs.rank(); ++d) {
      src[static_cast<size_t>(d)] = PadSource(mode, at[static_cast<size_t>(d)], p[static_cast<size_t>(d)], xs[d]);
      inside = inside && src[static_cast<size_t>(d)] >= 0;
    }
    f(o, inside ? Flat(xs, src) : -1);
  });
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
  const double value = c.node.attrs.Float("value", 0.0);
  ForEachPadded(c, X.shape(), Y.shape(), [&](int64_t o, int64_t from) {
    if (from >= 0) {
      CopyElement(X, from, Y, o);
    } else if (Y.dtype() == DType::kF32) {
      Y.data<float>()[o] = static_cast<float>(value);
    } else if (Y.dtype() == DType::kI64) {
      Y.data<int64_t>()[o] = static_cast<int64_t>(value);
    } else if (Y.dtype() == DType::kI32) {
      Y.data<int32_t>()[o] = static_cast<int32_t>(value);
    } else if (Y.dtype() == DType::kU8) {
      static_cast<uint8_t*>(Y.raw())[o] = static_cast<uint8_t>(value);
    } else {
      Y.data<bool>()[o] = value != 0;
    }
  });
  return Status::Ok();
}

// dX[source of each output element] += dY, in output order (deterministic).
Status PadGrad(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &dX = c.out[0];
  dX.Zero();
  ForEachPadded(c, dX.shape(), dY.shape(), [&](int64_t o, int64_t to) {
    if (to >= 0) dX.data<float>()[to] += dY.data<float>()[o];
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
