// CPU kernels of the math ops and reductions (ops/math.cpp). A reduction walks its input's rows
// with the output viewed at the input's rank (1 on every reduced axis): ForEachRow gives each row's
// offset into both, and a stride of 0 along a reduced innermost axis.
#include <algorithm>
#include <cmath>
#include <limits>
#include <type_traits>
#include <vector>

#include "base/hash.h"
#include "ops/cpu/broadcast.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

template <typename F>
Status Map(const KernelCtx& c, F f) {
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = f(x[i]);
  return Status::Ok();
}

// The input's shape with 1 on every reduced axis: the output's memory layout at the input's rank.
fr::Shape Kept(const KernelCtx& c, const fr::Shape& x) {
  std::vector<int64_t> d = x.dims();
  for (int64_t a : c.node.attrs.Ints("axes")) d[static_cast<size_t>(a)] = 1;
  return fr::Shape(d);
}

// out[kept position] = fold(out, x) over every element of x, starting from `init`.
template <typename T, typename Fold>
void ReduceInto(const Tensor& x, const fr::Shape& kept, T* out, int64_t out_n, T init, Fold fold) {
  for (int64_t i = 0; i < out_n; ++i) out[i] = init;
  const T* px = x.data<T>();
  ForEachRow(x.shape(), kept, x.shape(), [&](int64_t ox, int64_t ok, int64_t, int64_t n, int64_t, int64_t sk) {
    const T* r = px + ox;
    T* o = out + ok;
    if (sk == 1) {
      for (int64_t i = 0; i < n; ++i) o[i] = fold(o[i], r[i]);
    } else {
      T acc = o[0];
      for (int64_t i = 0; i < n; ++i) acc = fold(acc, r[i]);
      o[0] = acc;
    }
  });
}

template <typename T>
void SumInto(const KernelCtx& c) {
  const Tensor& x = c.in[0];
  T* o = c.out[0].data<T>();
  const int64_t n = c.out[0].numel();
  if constexpr (std::is_integral_v<T>) {
    // Wrapping, as the elementwise Add (a corrupt model's folded shapes can overflow).
    ReduceInto<T>(x, Kept(c, x.shape()), o, n, T{0}, [](T a, T b) {
      return static_cast<T>(static_cast<uint64_t>(a) + static_cast<uint64_t>(b));
    });
  } else {
    // In double, as SumTo: a batch norm's statistics sum thousands of terms.
    std::vector<double> acc(static_cast<size_t>(n));
    const float* px = x.data<float>();
    std::fill(acc.begin(), acc.end(), 0.0);
    ForEachRow(x.shape(), Kept(c, x.shape()), x.shape(), [&](int64_t ox, int64_t ok, int64_t, int64_t len, int64_t, int64_t sk) {
      if (sk == 1) {
        for (int64_t i = 0; i < len; ++i) acc[static_cast<size_t>(ok + i)] += px[ox + i];
      } else {
        acc[static_cast<size_t>(ok)] += SumOf<double>(len, [r = px + ox](int64_t i) { return static_cast<double>(r[i]); });
      }
    });
    for (int64_t i = 0; i < n; ++i) o[i] = static_cast<T>(acc[static_cast<size_t>(i)]);
  }
}

}  // namespace

Status Sqrt(const KernelCtx& c) { return Map(c, [](float x) { return std::sqrt(x); }); }
Status Reciprocal(const KernelCtx& c) { return Map(c, [](float x) { return 1.f / x; }); }
Status Exp(const KernelCtx& c) { return Map(c, [](float x) { return cpu::Exp(x); }); }
Status Log(const KernelCtx& c) { return Map(c, [](float x) { return std::log(x); }); }
Status Abs(const KernelCtx& c) { return Map(c, [](float x) { return std::fabs(x); }); }
Status Sign(const KernelCtx& c) {
  return Map(c, [](float x) { return x > 0.f ? 1.f : x < 0.f ? -1.f : x; });  // keeps 0, -0 and NaN
}
Status Sin(const KernelCtx& c) { return Map(c, [](float x) { return std::sin(x); }); }
Status Cos(const KernelCtx& c) { return Map(c, [](float x) { return std::cos(x); }); }

Status Neg(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    const int64_t* x = c.in[0].data<int64_t>();
    int64_t* y = c.out[0].data<int64_t>();
    for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = static_cast<int64_t>(0 - static_cast<uint64_t>(x[i]));
    return Status::Ok();
  }
  return Map(c, [](float x) { return -x; });
}

// Element i of the LOGICAL tensor is dropped when the draw for (key, step, micro-batch, i) falls
// below ratio. A piece (attributes start and logical, ops/math.cpp PhysicalDropout) numbers its
// elements by their logical place, so every layout drops the same elements.
Status Dropout(const KernelCtx& c) {
  const auto& a = c.node.attrs;
  const fr::Shape& piece = c.out[0].shape();
  const int rank = piece.rank();
  std::vector<int64_t> start = a.Ints("start"), logical = a.Ints("logical");
  if (start.empty()) start.assign(static_cast<size_t>(rank), 0);
  if (logical.empty()) logical = piece.dims();
  FR_CHECK(static_cast<int>(start.size()) == rank && static_cast<int>(logical.size()) == rank,
           c.node.name + ": Dropout's piece attributes do not fit its rank");
  for (int d = 0; d < rank; ++d)
    FR_CHECK(start[static_cast<size_t>(d)] + piece[d] <= logical[static_cast<size_t>(d)], c.node.name + ": piece outside the tensor");
  const double ratio = a.Float("ratio");
  const auto below = static_cast<uint64_t>(ratio * 4294967296.0);  // drop when the draw's top 32 bits are under it
  const float scale = static_cast<float>(1.0 / (1.0 - ratio));
  const uint64_t base = SplitMix64(SplitMix64(SplitMix64(static_cast<uint64_t>(a.Int("key"))) ^ static_cast<uint64_t>(c.step)) ^
                            static_cast<uint64_t>(c.micro));
  // Strides of the logical tensor; rows along the last axis are contiguous in both.
  std::vector<int64_t> stride(static_cast<size_t>(rank), 1);
  for (int d = rank - 2; d >= 0; --d) stride[static_cast<size_t>(d)] = stride[static_cast<size_t>(d) + 1] * logical[static_cast<size_t>(d) + 1];
  const int64_t row = rank == 0 ? 1 : piece[rank - 1];
  const int64_t rows = row == 0 ? 0 : piece.numel() / row;
  const float* x = c.in[0].data<float>();
  float* y = c.out[0].data<float>();
  std::vector<int64_t> at(static_cast<size_t>(std::max(rank - 1, 0)), 0);  // the row's index in the piece
  for (int64_t r = 0; r < rows; ++r) {
    uint64_t first = rank == 0 ? 0 : static_cast<uint64_t>(start[static_cast<size_t>(rank) - 1]);
    for (int d = 0; d + 1 < rank; ++d)
      first += static_cast<uint64_t>((start[static_cast<size_t>(d)] + at[static_cast<size_t>(d)]) * stride[static_cast<size_t>(d)]);
    const float* xr = x + r * row;
    float* yr = y + r * row;
    for (int64_t j = 0; j < row; ++j) {
      const uint64_t draw = SplitMix64(base + (first + static_cast<uint64_t>(j)) * 0x9e3779b97f4a7c15ull) >> 32;
      yr[j] = draw < below ? 0.f : xr[j] * scale;
    }
    for (int d = rank - 2; d >= 0; --d) {  // next row
      if (++at[static_cast<size_t>(d)] < piece[d]) break;
      at[static_cast<size_t>(d)] = 0;
    }
  }
  return Status::Ok();
}

Status IsNaN(const KernelCtx& c) {
  const float* x = c.in[0].data<float>();
  bool* y = c.out[0].data<bool>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = std::isnan(x[i]);
  return Status::Ok();
}

// NaN passes through, as in PyTorch's clamp.
Status Clip(const KernelCtx& c) {
  const auto& a = c.node.attrs;
  const float lo = a.Has("min") ? static_cast<float>(a.Float("min")) : -std::numeric_limits<float>::infinity();
  const float hi = a.Has("max") ? static_cast<float>(a.Float("max")) : std::numeric_limits<float>::infinity();
  return Map(c, [lo, hi](float x) { return x < lo ? lo : x > hi ? hi : x; });
}

Status ClipGrad(const KernelCtx& c) {
  const auto& a = c.node.attrs;
  const float lo = a.Has("min") ? static_cast<float>(a.Float("min")) : -std::numeric_limits<float>::infinity();
  const float hi = a.Has("max") ? static_cast<float>(a.Float("max")) : std::numeric_limits<float>::infinity();
  const float* dy = c.in[0].data<float>();
  const float* x = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) dx[i] = x[i] >= lo && x[i] <= hi ? dy[i] : 0.f;
  return Status::Ok();
}

// A scalar exponent runs the exact forms PyTorch uses for the common powers (x * x for 2, a square
// root for 0.5), so that an exported RMSNorm's x^2 matches it bit for bit.
Status Pow(const KernelCtx& c) {
  const Tensor &a = c.in[0], &b = c.in[1], &y = c.out[0];
  const float* pa = a.data<float>();
  const float* pb = b.data<float>();
  float* py = y.data<float>();
  if (b.numel() == 1 && a.shape() == y.shape()) {
    const float e = pb[0];
    const int64_t n = y.numel();
    if (e == 2.f) {
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pa[i];
    } else if (e == 3.f) {
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i] * pa[i] * pa[i];
    } else if (e == 1.f) {
      for (int64_t i = 0; i < n; ++i) py[i] = pa[i];
    } else if (e == 0.5f) {
      for (int64_t i = 0; i < n; ++i) py[i] = std::sqrt(pa[i]);
    } else if (e == -1.f) {
      for (int64_t i = 0; i < n; ++i) py[i] = 1.f / pa[i];
    } else if (e == -0.5f) {
      for (int64_t i = 0; i < n; ++i) py[i] = 1.f / std::sqrt(pa[i]);
    } else if (e == -2.f) {
      for (int64_t i = 0; i < n; ++i) py[i] = 1.f / (pa[i] * pa[i]);
    } else {
      for (int64_t i = 0; i < n; ++i) py[i] = std::pow(pa[i], e);
    }
    return Status::Ok();
  }
  ForEachRow(a.shape(), b.shape(), y.shape(), [&](int64_t oa, int64_t ob, int64_t oy, int64_t n, int64_t sa, int64_t sb) {
    for (int64_t i = 0; i < n; ++i) py[oy + i] = std::pow(pa[oa + i * sa], pb[ob + i * sb]);
  });
  return Status::Ok();
}

Status ReduceSum(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    SumInto<int64_t>(c);
  } else {
    SumInto<float>(c);
  }
  return Status::Ok();
}

Status ReduceMean(const KernelCtx& c) {
  SumInto<float>(c);
  int64_t count = 1;
  for (int64_t a : c.node.attrs.Ints("axes")) count *= c.in[0].shape()[static_cast<int>(a)];
  count = c.node.attrs.Int("count", count);  // a piece of a split axis divides by the logical count
  float* o = c.out[0].data<float>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) o[i] = static_cast<float>(o[i] / static_cast<double>(count));
  return Status::Ok();
}

Status ReduceMax(const KernelCtx& c) {
  const Tensor& x = c.in[0];
  const fr::Shape kept = Kept(c, x.shape());
  if (c.out[0].dtype() == DType::kI64) {
    ReduceInto<int64_t>(x, kept, c.out[0].data<int64_t>(), c.out[0].numel(), std::numeric_limits<int64_t>::min(),
                        [](int64_t a, int64_t b) { return b > a ? b : a; });
  } else {
    // NaN wins, as in PyTorch's amax.
    ReduceInto<float>(x, kept, c.out[0].data<float>(), c.out[0].numel(), -std::numeric_limits<float>::infinity(),
                      [](float a, float b) { return b > a || std::isnan(b) ? b : a; });
  }
  return Status::Ok();
}

// dX = dY / ties where X equals Y (its row's maximum), else 0; ties counted first.
Status ReduceMaxGrad(const KernelCtx& c) {
  const Tensor &x = c.in[1], &dx = c.out[0];
  const fr::Shape kept = Kept(c, x.shape());
  const float* dy = c.in[0].data<float>();
  const float* px = x.data<float>();
  const float* py = c.in[2].data<float>();
  float* pdx = dx.data<float>();
  std::vector<float> ties(static_cast<size_t>(kept.numel()), 0.f);
  ForEachRow(x.shape(), kept, x.shape(), [&](int64_t ox, int64_t ok, int64_t, int64_t n, int64_t, int64_t sk) {
    for (int64_t i = 0; i < n; ++i) ties[static_cast<size_t>(ok + i * sk)] += px[ox + i] == py[ok + i * sk] ? 1.f : 0.f;
  });
  ForEachRow(x.shape(), kept, x.shape(), [&](int64_t ox, int64_t ok, int64_t, int64_t n, int64_t, int64_t sk) {
    for (int64_t i = 0; i < n; ++i) {
      const int64_t k = ok + i * sk;
      pdx[ox + i] = px[ox + i] == py[k] ? dy[k] / ties[static_cast<size_t>(k)] : 0.f;
    }
  });
  return Status::Ok();
}

}  // namespace fr::cpu
