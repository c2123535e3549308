// CPU kernels for elementwise ops. Binary ops broadcast through ForEachRow, Where through
// ForEachRow3, with contiguous inner loops the compiler vectorises.
#include <algorithm>
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "ops/cpu/broadcast.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

template <typename T, typename F>
void BinaryT(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  T* po = out.data<T>();
  if (a.shape() == out.shape() && b.shape() == out.shape()) {
    ParallelFor(out.numel(), 1, [&](int64_t begin, int64_t end) {
      for (int64_t i = begin; i < end; ++i) po[i] = f(pa[i], pb[i]);
    });
    return;
  }
  if (out.numel() == 0) return;
  const Coalesced m = Coalesce(a.shape(), b.shape(), out.shape());
  ParallelFor(m.rows(), m.inner(), [&](int64_t first, int64_t last) {
    ForEachRowIn(m.a, m.b, m.out, first, last,
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
  ParallelFor(c.out[0].numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) y[i] = f(x[i]);
  });
  return Status::Ok();
}

// out = f(dy, z) for the activations' gradients, where z is the forward input or output.
template <typename F>
Status UnaryGrad(const KernelCtx& c, F f) {
  const float* dy = c.in[0].data<float>();
  const float* z = c.in[1].data<float>();
  float* dx = c.out[0].data<float>();
  ParallelFor(c.out[0].numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) dx[i] = f(dy[i], z[i]);
  });
  return Status::Ok();
}

// Integer arithmetic wraps around (two's complement), as ONNX runtimes' does; in C++ a signed
// overflow is undefined, and folded shape arithmetic of a corrupt model can overflow.
template <typename T, typename F>
T Wrapping(T a, T b, F f) {
  if constexpr (std::is_integral_v<T>) {
    using U = std::make_unsigned_t<T>;
    return static_cast<T>(f(static_cast<U>(a), static_cast<U>(b)));
  } else {
    return f(a, b);
  }
}

}  // namespace

Status Add(const KernelCtx& c) {
  return Binary(c, [](auto a, auto b) { return Wrapping(a, b, [](auto x, auto y) { return x + y; }); });
}
Status Sub(const KernelCtx& c) {
  return Binary(c, [](auto a, auto b) { return Wrapping(a, b, [](auto x, auto y) { return x - y; }); });
}
Status Mul(const KernelCtx& c) {
  return Binary(c, [](auto a, auto b) { return Wrapping(a, b, [](auto x, auto y) { return x * y; }); });
}
Status Div(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    for (int64_t v : c.in[1].span<int64_t>())
      if (v == 0) return Status::Invalid("[ops] " + c.node.name + ": integer division by zero");
  }
  return Binary(c, [](auto a, auto b) {
    if constexpr (std::is_integral_v<decltype(a)>) {
      if (b == -1) return Wrapping(decltype(a){0}, a, [](auto x, auto y) { return x - y; });  // min / -1 wraps too
    }
    return a / b;
  });
}

Status Relu(const KernelCtx& c) { return Unary(c, [](float x) { return x > 0.f ? x : 0.f; }); }
Status Tanh(const KernelCtx& c) { return Unary(c, [](float x) { return cpu::Tanh(x); }); }
Status Sigmoid(const KernelCtx& c) { return Unary(c, [](float x) { return 1.f / (1.f + Exp(-x)); }); }
Status Erf(const KernelCtx& c) { return Unary(c, [](float x) { return cpu::Erf(x); }); }
Status Silu(const KernelCtx& c) { return Unary(c, [](float x) { return x * (1.f / (1.f + Exp(-x))); }); }
Status Scale(const KernelCtx& c) {
  const float a = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  return Unary(c, [a](float x) { return a * x; });
}

Status ReluGrad(const KernelCtx& c) { return UnaryGrad(c, [](float dy, float y) { return y > 0.f ? dy : 0.f; }); }
Status TanhGrad(const KernelCtx& c) { return UnaryGrad(c, [](float dy, float y) { return dy * (1.f - y * y); }); }
Status SigmoidGrad(const KernelCtx& c) {
  return UnaryGrad(c, [](float dy, float y) { return dy * y * (1.f - y); });
}
Status SiluGrad(const KernelCtx& c) {
  return UnaryGrad(c, [](float dy, float x) {
    const float s = 1.f / (1.f + Exp(-x));
    return dy * s + dy * x * s * (1.f - s);
  });
}
Status ErfGrad(const KernelCtx& c) {
  constexpr float k2OverSqrtPi = 1.1283791670955126f;
  return UnaryGrad(c, [](float dy, float x) { return dy * k2OverSqrtPi * Exp(-x * x); });
}

// Sums in double: a bias's or a batch norm's gradient sums thousands of terms of both signs, where
// float accumulation loses digits PyTorch's (pairwise) sums keep.
Status SumTo(const KernelCtx& c) {
  const Tensor& x = c.in[0];
  const Tensor& y = c.out[0];
  const float* px = x.data<float>();
  std::vector<double> acc(static_cast<size_t>(y.numel()), 0.0);
  // Iterate x's rows; y is "broadcast" onto x's shape with stride 0 along the summed dims.
  ForEachRow(x.shape(), y.shape(), x.shape(),
             [&](int64_t ox, int64_t oy, int64_t, int64_t n, int64_t, int64_t sy) {
               const float* r = px + ox;
               double* o = acc.data() + oy;
               if (sy == 1) {
                 for (int64_t i = 0; i < n; ++i) o[i] += r[i];
               } else {
                 o[0] += SumOf<double>(n, [r](int64_t i) { return static_cast<double>(r[i]); });
               }
             });
  float* py = y.data<float>();
  const bool adds = AddsInto(c);
  for (size_t i = 0; i < acc.size(); ++i) py[i] = (adds ? py[i] : 0.f) + static_cast<float>(acc[i]);
  return Status::Ok();
}

namespace {

// Calls f(T{}) with T the C++ type of dtype t.
template <typename F>
void ByType(DType t, F f) {
  switch (t) {
    case DType::kF32: f(float{}); break;
    case DType::kI64: f(int64_t{}); break;
    case DType::kI32: f(int32_t{}); break;
    case DType::kBool: f(bool{}); break;
    case DType::kU8: f(uint8_t{}); break;
  }
}

// The condition is read as bytes and both branches loaded before the select: that vectorises
// (a bool load feeding a conditional load does not).
template <typename T>
void WhereT(const Tensor& cond, const Tensor& x, const Tensor& y, const Tensor& out) {
  const auto* pc = reinterpret_cast<const uint8_t*>(cond.data<bool>());
  const T* px = x.data<T>();
  const T* py = y.data<T>();
  T* po = out.data<T>();
  ForEachRow3(cond.shape(), x.shape(), y.shape(), out.shape(),
              [&](std::array<int64_t, 3> off, int64_t oo, int64_t n, std::array<int64_t, 3> st) {
                const uint8_t* __restrict c = pc + off[0];
                const T* __restrict a = px + off[1];
                const T* __restrict b = py + off[2];
                T* __restrict z = po + oo;
                if (st[0] == 1 && st[1] == 1 && st[2] == 1) {
                  for (int64_t i = 0; i < n; ++i) {
                    const T ai = a[i], bi = b[i];
                    z[i] = c[i] ? ai : bi;
                  }
                } else if (st[0] == 1 && st[1] == 0 && st[2] == 1) {  // masked fill
                  const T av = a[0];
                  for (int64_t i = 0; i < n; ++i) {
                    const T bi = b[i];
                    z[i] = c[i] ? av : bi;
                  }
                } else if (st[0] == 1 && st[1] == 1 && st[2] == 0) {
                  const T bv = b[0];
                  for (int64_t i = 0; i < n; ++i) {
                    const T ai = a[i];
                    z[i] = c[i] ? ai : bv;
                  }
                } else {
                  for (int64_t i = 0; i < n; ++i) z[i] = c[i * st[0]] ? a[i * st[1]] : b[i * st[2]];
                }
              });
}

template <typename T, typename F>
void CompareT(const Tensor& a, const Tensor& b, const Tensor& out, F f) {
  const T* pa = a.data<T>();
  const T* pb = b.data<T>();
  bool* po = out.data<bool>();
  ForEachRow(a.shape(), b.shape(), out.shape(),
             [&](int64_t oa, int64_t ob, int64_t oo, int64_t n, int64_t sa, int64_t sb) {
               for (int64_t i = 0; i < n; ++i) po[oo + i] = f(pa[oa + i * sa], pb[ob + i * sb]);
             });
}

template <typename F>
Status Compare(const KernelCtx& c, F f) {
  ByType(c.in[0].dtype(), [&](auto t) { CompareT<decltype(t)>(c.in[0], c.in[1], c.out[0], f); });
  return Status::Ok();
}

template <typename From, typename To>
Status CastT(const KernelCtx& c) {
  const From* x = c.in[0].data<From>();
  To* y = c.out[0].data<To>();
  const int64_t n = c.out[0].numel();
  if constexpr (std::is_same_v<To, bool>) {
    for (int64_t i = 0; i < n; ++i) y[i] = x[i] != From(0);
  } else if constexpr (std::is_floating_point_v<From> && !std::is_floating_point_v<To>) {
    // Out of the integer type's range (NaN and infinities included) the conversion is undefined.
    const double lo = static_cast<double>(std::numeric_limits<To>::min());
    const double hi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
    for (int64_t i = 0; i < n; ++i) {
      const double v = x[i];
      if (!(v > lo - 1.0 && v < hi)) {
        return Status::Invalid("[ops] " + c.node.name + ": cannot cast " + std::to_string(x[i]) + " to " +
                               std::string(Name(DTypeOf<To>())));
      }
      y[i] = static_cast<To>(x[i]);
    }
  } else {
    for (int64_t i = 0; i < n; ++i) y[i] = static_cast<To>(x[i]);
  }
  return Status::Ok();
}

}  // namespace

Status Where(const KernelCtx& c) {
  switch (c.out[0].dtype()) {
    case DType::kF32: WhereT<float>(c.in[0], c.in[1], c.in[2], c.out[0]); return Status::Ok();
    case DType::kI64: WhereT<int64_t>(c.in[0], c.in[1], c.in[2], c.out[0]); return Status::Ok();
    case DType::kI32: WhereT<int32_t>(c.in[0], c.in[1], c.in[2], c.out[0]); return Status::Ok();
    case DType::kBool: WhereT<bool>(c.in[0], c.in[1], c.in[2], c.out[0]); return Status::Ok();
    case DType::kU8: WhereT<uint8_t>(c.in[0], c.in[1], c.in[2], c.out[0]); return Status::Ok();
  }
  return Status::Ok();
}

Status Equal(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a == b; }); }
Status Less(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a < b; }); }
Status LessOrEqual(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a <= b; }); }
Status Greater(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a > b; }); }
Status GreaterOrEqual(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a >= b; }); }
Status And(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a && b; }); }
Status Or(const KernelCtx& c) { return Compare(c, [](auto a, auto b) { return a || b; }); }
Status Not(const KernelCtx& c) {
  const bool* x = c.in[0].data<bool>();
  bool* y = c.out[0].data<bool>();
  for (int64_t i = 0, n = c.out[0].numel(); i < n; ++i) y[i] = !x[i];
  return Status::Ok();
}

Status Cast(const KernelCtx& c) {
  Status s;
  ByType(c.in[0].dtype(), [&](auto from) {
    ByType(c.out[0].dtype(), [&](auto to) { s = CastT<decltype(from), decltype(to)>(c); });
  });
  return s;
}

// Each row keeps one run of columns: [max(0, i + k), M) for the upper triangle, [0, i + k + 1)
// for the lower; the rest is zero.
Status Trilu(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const fr::Shape& s = X.shape();
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1], mats = X.numel() / std::max<int64_t>(rows * cols, 1);
  const bool upper = c.node.attrs.Int("upper", 1) != 0;
  const int64_t k = c.node.attrs.Int("k", 0);
  const size_t es = SizeOf(X.dtype());
  const auto* px = static_cast<const char*>(X.raw());
  auto* py = static_cast<char*>(Y.raw());
  Y.Zero();
  for (int64_t m = 0; m < mats; ++m)
    for (int64_t i = 0; i < rows; ++i) {
      const int64_t b = upper ? std::clamp(i + k, int64_t{0}, cols) : 0;
      const int64_t e = upper ? cols : std::clamp(i + k + 1, int64_t{0}, cols);
      if (e <= b) continue;
      const size_t at = static_cast<size_t>((m * rows + i) * cols + b) * es;
      std::memcpy(py + at, px + at, static_cast<size_t>(e - b) * es);
    }
  return Status::Ok();
}

}  // namespace fr::cpu
