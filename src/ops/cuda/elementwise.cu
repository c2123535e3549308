// CUDA kernels of the elementwise ops: broadcasting binary ops, the unary math and activations
// with their gradients, comparisons and logic, Where, Cast, Trilu, Accumulate and Scale. One
// thread per output element over a grid stride; a same-shape binary op skips the index arithmetic.
#include <cmath>
#include <cstring>
#include <limits>
#include <type_traits>

#include "base/hash.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

template <typename T, typename F>
__global__ void BinarySame(const T* a, const T* b, T* y, int64_t n, F f) {
  FR_GRID_LOOP(i, n) y[i] = f(a[i], b[i]);
}

template <typename T, typename Out, typename F>
__global__ void BinaryBcast(const T* a, const T* b, Out* y, int64_t n, Bcast<2> s, F f) {
  FR_GRID_LOOP(i, n) y[i] = f(a[s.Offset(0, i)], b[s.Offset(1, i)]);
}

template <typename T, typename Out, typename F>
Status BinaryT(const KernelCtx& c, F f) {
  const Tensor &A = c.in[0], &B = c.in[1], &Y = c.out[0];
  const int64_t n = Y.numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  if constexpr (std::is_same_v<T, Out>) {
    if (A.shape() == Y.shape() && B.shape() == Y.shape()) {
      BinarySame<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(A.raw()), static_cast<const T*>(B.raw()),
                                                static_cast<T*>(Y.raw()), n, f);
      return Launched(c);
    }
  }
  Bcast<2> b;
  const fr::Shape* ins[2] = {&A.shape(), &B.shape()};
  if (!MakeBcast<2>(Y.shape(), ins, &b)) return TooManyDims(c, Y.shape().rank());
  BinaryBcast<<<Blocks(n), kThreads, 0, s>>>(static_cast<const T*>(A.raw()), static_cast<const T*>(B.raw()),
                                             static_cast<Out*>(Y.raw()), n, b, f);
  return Launched(c);
}

// Integer arithmetic wraps around (two's complement), as on the CPU (ops/cpu/elementwise.cpp).
template <typename F>
Status Arith(const KernelCtx& c, F f) {
  switch (c.out[0].dtype()) {
    case DType::kF32: return BinaryT<float, float>(c, f);
    case DType::kI64:
      return BinaryT<int64_t, int64_t>(c, [f] __device__(int64_t a, int64_t b) {
        return static_cast<int64_t>(f(static_cast<uint64_t>(a), static_cast<uint64_t>(b)));
      });
    default: return Status::Runtime("[cuda] " + c.node.name + ": unsupported dtype");
  }
}

template <typename F>
__global__ void Map(const float* x, float* y, int64_t n, F f) {
  FR_GRID_LOOP(i, n) y[i] = f(x[i]);
}

template <typename F>
Status Unary(const KernelCtx& c, F f) {
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  Map<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.out[0].data<float>(), n, f);
  return Launched(c);
}

template <typename F>
__global__ void Map2(const float* a, const float* b, float* y, int64_t n, F f) {
  FR_GRID_LOOP(i, n) y[i] = f(a[i], b[i]);
}

// out = f(dy, z), z the forward input or output (the activations' gradients).
template <typename F>
Status UnaryGrad(const KernelCtx& c, F f) {
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  Map2<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.in[1].data<float>(), c.out[0].data<float>(), n, f);
  return Launched(c);
}

__global__ void IntDivChecked(const int64_t* b, int64_t n, DataError* err) {
  FR_GRID_LOOP(i, n) if (b[i] == 0) ReportDataError(err, 3, 0, 0);
}

template <typename T>
__global__ void WhereK(const uint8_t* cond, const T* x, const T* y, T* out, int64_t n, Bcast<3> s) {
  FR_GRID_LOOP(i, n) out[i] = cond[s.Offset(0, i)] ? x[s.Offset(1, i)] : y[s.Offset(2, i)];
}

// f(T{}) with T the C++ type of dtype t; returns what f returns.
template <typename F>
auto ByType(DType t, F f) {
  switch (t) {
    case DType::kF32: return f(float{});
    case DType::kI64: return f(int64_t{});
    case DType::kI32: return f(int32_t{});
    case DType::kBool: return f(bool{});
    case DType::kU8: break;
  }
  return f(uint8_t{});
}

template <typename F>
Status Compare(const KernelCtx& c, F f) {
  return ByType(c.in[0].dtype(), [&](auto t) { return BinaryT<decltype(t), bool>(c, f); });
}

template <typename From, typename To>
__global__ void CastK(const From* x, To* y, int64_t n, DataError* err) {
  FR_GRID_LOOP(i, n) {
    if constexpr (std::is_same_v<To, bool>) {
      y[i] = x[i] != From(0);
    } else if constexpr (std::is_floating_point_v<From> && !std::is_floating_point_v<To>) {
      const double v = x[i];
      const double lo = static_cast<double>(std::numeric_limits<To>::min());
      const double hi = static_cast<double>(std::numeric_limits<To>::max()) + 1.0;
      if (!(v > lo - 1.0 && v < hi)) {
        ReportDataError(err, 4, 0, 0);
        y[i] = To(0);
      } else {
        y[i] = static_cast<To>(x[i]);
      }
    } else {
      y[i] = static_cast<To>(x[i]);
    }
  }
}

template <typename T>
__global__ void TriluK(const T* x, T* y, int64_t n, int64_t rows, int64_t cols, bool upper, int64_t k) {
  FR_GRID_LOOP(i, n) {
    const int64_t col = IMod(i, cols), row = IMod(IDiv(i, cols), rows);
    const bool keep = upper ? col >= row + k : col <= row + k;
    y[i] = keep ? x[i] : T(0);
  }
}

__device__ inline uint64_t SplitMix64(uint64_t z) {  // base/hash.h's
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

// Where a piece lies in the logical tensor: its dims, its start and the logical strides.
struct Piece {
  int rank = 0;
  int64_t dims[kMaxRank] = {}, start[kMaxRank] = {}, stride[kMaxRank] = {};
};

// Element i of the piece is dropped when the draw for its logical index falls below `below`, as
// ops/cpu/math.cpp's Dropout draws it.
__global__ void DropoutK(const float* x, float* y, int64_t n, Piece p, uint64_t base, uint64_t below, float scale) {
  FR_GRID_LOOP(i, n) {
    uint64_t logical = 0;
    int64_t rest = i;
    for (int d = p.rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(rest, p.dims[d]);
      logical += static_cast<uint64_t>((p.start[d] + rest - q * p.dims[d]) * p.stride[d]);
      rest = q;
    }
    const uint64_t draw = SplitMix64(base + logical * 0x9e3779b97f4a7c15ull) >> 32;
    y[i] = draw < below ? 0.f : x[i] * scale;
  }
}

__global__ void AccumulateK(const float* g, float* acc, int64_t n) {
  FR_GRID_LOOP(i, n) acc[i] += g[i];
}

}  // namespace

Status Add(const KernelCtx& c) { return Arith(c, [] __device__(auto a, auto b) { return a + b; }); }
Status Sub(const KernelCtx& c) { return Arith(c, [] __device__(auto a, auto b) { return a - b; }); }
Status Mul(const KernelCtx& c) { return Arith(c, [] __device__(auto a, auto b) { return a * b; }); }

Status Div(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    const int64_t n = c.in[1].numel();
    if (n) IntDivChecked<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.in[1].data<int64_t>(), n, DataErrorWord());
    return BinaryT<int64_t, int64_t>(c, [] __device__(int64_t a, int64_t b) {
      if (b == 0) return int64_t{0};  // reported above
      if (b == -1) return static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(a));  // min / -1 wraps
      return a / b;
    });
  }
  return BinaryT<float, float>(c, [] __device__(float a, float b) { return a / b; });
}

Status Relu(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return x > 0.f ? x : 0.f; }); }
Status Tanh(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return VTanh(x); }); }
Status Sigmoid(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return __fdiv_rn(1.f, __fadd_rn(1.f, VExp(-x))); }); }
Status Erf(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return VErf(x); }); }
// Rounded as the CPU's (no contraction into FMAs): the same bits.
Status Silu(const KernelCtx& c) {
  return Unary(c, [] __device__(float x) { return __fmul_rn(x, __fdiv_rn(1.f, __fadd_rn(1.f, VExp(-x)))); });
}
Status Scale(const KernelCtx& c) {
  const float a = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  return Unary(c, [a] __device__(float x) { return a * x; });
}
Status Sqrt(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return sqrtf(x); }); }
Status Reciprocal(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return 1.f / x; }); }
Status Exp(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return VExp(x); }); }
Status Log(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return logf(x); }); }
Status Abs(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return fabsf(x); }); }
Status Sign(const KernelCtx& c) {
  return Unary(c, [] __device__(float x) { return x > 0.f ? 1.f : x < 0.f ? -1.f : x; });
}
Status Sin(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return sinf(x); }); }
Status Cos(const KernelCtx& c) { return Unary(c, [] __device__(float x) { return cosf(x); }); }

Status Neg(const KernelCtx& c) {
  if (c.out[0].dtype() == DType::kI64) {
    const int64_t n = c.out[0].numel();
    if (n == 0) return Status::Ok();
    const int64_t* x = c.in[0].data<int64_t>();
    int64_t* y = c.out[0].data<int64_t>();
    auto f = [] __device__(int64_t a, int64_t) { return static_cast<int64_t>(uint64_t{0} - static_cast<uint64_t>(a)); };
    BinarySame<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(x, x, y, n, f);
    return Launched(c);
  }
  return Unary(c, [] __device__(float x) { return -x; });
}

Status Clip(const KernelCtx& c) {
  const auto& a = c.node.attrs;
  const float lo = a.Has("min") ? static_cast<float>(a.Float("min")) : -std::numeric_limits<float>::infinity();
  const float hi = a.Has("max") ? static_cast<float>(a.Float("max")) : std::numeric_limits<float>::infinity();
  return Unary(c, [lo, hi] __device__(float x) { return x < lo ? lo : x > hi ? hi : x; });
}

Status ClipGrad(const KernelCtx& c) {
  const auto& a = c.node.attrs;
  const float lo = a.Has("min") ? static_cast<float>(a.Float("min")) : -std::numeric_limits<float>::infinity();
  const float hi = a.Has("max") ? static_cast<float>(a.Float("max")) : std::numeric_limits<float>::infinity();
  return UnaryGrad(c, [lo, hi] __device__(float dy, float x) { return x >= lo && x <= hi ? dy : 0.f; });
}

Status IsNaN(const KernelCtx& c) {
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  const float* x = c.in[0].data<float>();
  auto f = [] __device__(float a, float) { return static_cast<bool>(isnan(a)); };
  Bcast<2> b;
  const fr::Shape* ins[2] = {&c.in[0].shape(), &c.in[0].shape()};
  if (!MakeBcast<2>(c.out[0].shape(), ins, &b)) return TooManyDims(c, c.out[0].shape().rank());
  BinaryBcast<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(x, x, c.out[0].data<bool>(), n, b, f);
  return Launched(c);
}

// The CPU's exact forms for the common exponents (ops/cpu/math.cpp), std::pow otherwise.
Status Pow(const KernelCtx& c) {
  return BinaryT<float, float>(c, [] __device__(float x, float e) {
    if (e == 2.f) return x * x;
    if (e == 3.f) return x * x * x;
    if (e == 1.f) return x;
    if (e == 0.5f) return sqrtf(x);
    if (e == -1.f) return 1.f / x;
    if (e == -0.5f) return 1.f / sqrtf(x);
    if (e == -2.f) return 1.f / (x * x);
    return powf(x, e);
  });
}

Status ReluGrad(const KernelCtx& c) {
  return UnaryGrad(c, [] __device__(float dy, float y) { return y > 0.f ? dy : 0.f; });
}
Status TanhGrad(const KernelCtx& c) {
  return UnaryGrad(c, [] __device__(float dy, float y) { return dy * (1.f - y * y); });
}
Status SigmoidGrad(const KernelCtx& c) {
  return UnaryGrad(c, [] __device__(float dy, float y) { return dy * y * (1.f - y); });
}
Status SiluGrad(const KernelCtx& c) {
  return UnaryGrad(c, [] __device__(float dy, float x) {
    const float s = __fdiv_rn(1.f, __fadd_rn(1.f, VExp(-x)));
    return __fadd_rn(__fmul_rn(dy, s), __fmul_rn(__fmul_rn(__fmul_rn(dy, x), s), __fsub_rn(1.f, s)));
  });
}
Status ErfGrad(const KernelCtx& c) {
  return UnaryGrad(c, [] __device__(float dy, float x) { return dy * 1.1283791670955126f * VExp(-x * x); });
}

Status Where(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  const int64_t n = Y.numel();
  if (n == 0) return Status::Ok();
  Bcast<3> b;
  const fr::Shape* ins[3] = {&c.in[0].shape(), &c.in[1].shape(), &c.in[2].shape()};
  if (!MakeBcast<3>(Y.shape(), ins, &b)) return TooManyDims(c, Y.shape().rank());
  cudaStream_t s = StreamOf(c);
  BySize(Y.dtype(), [&](auto t) {
    using T = decltype(t);
    WhereK<<<Blocks(n), kThreads, 0, s>>>(static_cast<const uint8_t*>(c.in[0].raw()), static_cast<const T*>(c.in[1].raw()),
                                          static_cast<const T*>(c.in[2].raw()), static_cast<T*>(Y.raw()), n, b);
  });
  return Launched(c);
}

Status Equal(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a == b; }); }
Status Less(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a < b; }); }
Status LessOrEqual(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a <= b; }); }
Status Greater(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a > b; }); }
Status GreaterOrEqual(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a >= b; }); }
Status And(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a && b; }); }
Status Or(const KernelCtx& c) { return Compare(c, [] __device__(auto a, auto b) { return a || b; }); }
// One input: Compare would read a second.
Status Not(const KernelCtx& c) {
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  const bool* x = c.in[0].data<bool>();
  BinarySame<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(x, x, c.out[0].data<bool>(), n,
                                                      [] __device__(bool a, bool) { return !a; });
  return Launched(c);
}

Status Cast(const KernelCtx& c) {
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  ByType(c.in[0].dtype(), [&](auto from) {
    ByType(c.out[0].dtype(), [&](auto to) {
      using From = decltype(from);
      using To = decltype(to);
      CastK<<<Blocks(n), kThreads, 0, s>>>(static_cast<const From*>(c.in[0].raw()), static_cast<To*>(c.out[0].raw()), n,
                                           DataErrorWord());
    });
  });
  return Launched(c);
}

Status Trilu(const KernelCtx& c) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  const fr::Shape& s = X.shape();
  const int64_t n = X.numel();
  if (n == 0) return Status::Ok();
  const int64_t rows = s[s.rank() - 2], cols = s[s.rank() - 1];
  const bool upper = c.node.attrs.Int("upper", 1) != 0;
  const int64_t k = c.node.attrs.Int("k", 0);
  cudaStream_t st = StreamOf(c);
  BySize(X.dtype(), [&](auto t) {
    using T = decltype(t);
    TriluK<<<Blocks(n), kThreads, 0, st>>>(static_cast<const T*>(X.raw()), static_cast<T*>(Y.raw()), n, rows, cols, upper, k);
  });
  return Launched(c);
}

Status Dropout(const KernelCtx& c) {
  const auto SplitMix64Host = [](uint64_t z) { return fr::SplitMix64(z); };
  const auto& a = c.node.attrs;
  const fr::Shape& piece = c.out[0].shape();
  const int rank = piece.rank();
  if (rank > kMaxRank) return TooManyDims(c, rank);
  std::vector<int64_t> start = a.Ints("start"), logical = a.Ints("logical");
  if (start.empty()) start.assign(static_cast<size_t>(rank), 0);
  if (logical.empty()) logical = piece.dims();
  FR_CHECK(static_cast<int>(start.size()) == rank && static_cast<int>(logical.size()) == rank,
           c.node.name + ": Dropout's piece attributes do not fit its rank");
  Piece p;
  p.rank = rank;
  int64_t stride = 1;
  for (int d = rank - 1; d >= 0; --d) {
    const auto du = static_cast<size_t>(d);
    FR_CHECK(start[du] + piece[d] <= logical[du], c.node.name + ": piece outside the tensor");
    p.dims[d] = piece[d];
    p.start[d] = start[du];
    p.stride[d] = stride;
    stride *= logical[du];
  }
  const double ratio = a.Float("ratio");
  const auto below = static_cast<uint64_t>(ratio * 4294967296.0);
  const float scale = static_cast<float>(1.0 / (1.0 - ratio));
  const uint64_t base = SplitMix64Host(SplitMix64Host(SplitMix64Host(static_cast<uint64_t>(a.Int("key"))) ^ static_cast<uint64_t>(c.step)) ^
                                       static_cast<uint64_t>(c.micro));
  const int64_t n = piece.numel();
  if (n == 0) return Status::Ok();
  DropoutK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.out[0].data<float>(), n, p, base, below, scale);
  return Launched(c);
}

Status Accumulate(const KernelCtx& c) {
  const int64_t n = c.in[0].numel();
  if (n == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  if (c.micro == 0) {
    cudaMemcpyAsync(c.out[0].raw(), c.in[0].raw(), c.in[0].bytes(), cudaMemcpyDeviceToDevice, s);
  } else {
    AccumulateK<<<Blocks(n), kThreads, 0, s>>>(c.in[0].data<float>(), c.out[0].data<float>(), n);
  }
  return Launched(c);
}

}  // namespace fr::cuda
