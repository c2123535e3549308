// What the CUDA kernels share: the stream a kernel queues on, launch sizes, broadcasting strides,
// deterministic block reductions, the data-error word, and the CPU's exp and erf polynomials
// (ops/cpu/vmath.h) as device functions, so that the two devices agree to rounding.
//
// Every kernel entry (a KernelFn) queues its work on ctx.stream and returns; Launched() turns a
// launch failure into a Status naming the node. Reductions are deterministic: each output has one
// thread block (or one thread), whose partial sums combine in a fixed tree, never with atomics.
#pragma once

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <mutex>
#include <string>
#include <vector>

#include "ops/cuda/device.h"
#include "ops/kernel_args.h"
#include "ops/op.h"

namespace fr::cuda {

constexpr int kThreads = 256;
constexpr int kMaxRank = 8;

// The stream of a kernel's task; makes this rank's GPU current on the calling thread.
inline cudaStream_t StreamOf(const KernelCtx& c) {
  MakeCurrent();
  return static_cast<CudaStream*>(c.stream)->handle();
}

// Blocks of kThreads for n elements, capped: kernels loop with a grid stride past the cap.
inline unsigned Blocks(int64_t n, int threads = kThreads) {
  return static_cast<unsigned>(std::clamp<int64_t>((n + threads - 1) / threads, 1, int64_t{1} << 16));
}

// Threads per row block: a power of two, at least a warp, at most 1024.
inline int RowThreads(int64_t n) {
  int t = 32;
  while (t < 1024 && t < n) t *= 2;
  return t;
}

inline Status Launched(const KernelCtx& c) {
  const cudaError_t e = cudaGetLastError();
  if (e == cudaSuccess) return Status::Ok();
  return Status::Runtime("[cuda] " + c.node.name + ": " + ErrorString(e));
}

// A failed CUDA call queued for the node (a memset, a copy), as Launched.
inline Status Launched(const KernelCtx& c, cudaError_t e) {
  if (e == cudaSuccess) return Launched(c);
  cudaGetLastError();
  return Status::Runtime("[cuda] " + c.node.name + ": " + ErrorString(e));
}

inline Status TooManyDims(const KernelCtx& c, int rank) {
  return Status::Invalid("[cuda] " + c.node.name + ": a rank-" + std::to_string(rank) + " tensor; CUDA kernels take rank <= " +
                         std::to_string(kMaxRank));
}

// Stream-ordered scratch memory (cudaMallocAsync from the device's pool, which keeps what it
// was given: SelectDevice sets its release threshold), freed on the stream at destruction.
class Scratch {
 public:
  Scratch(size_t bytes, cudaStream_t s) : s_(s) {
    if (cudaMallocAsync(&p_, bytes ? bytes : 1, s) != cudaSuccess) {
      cudaGetLastError();
      p_ = nullptr;
    }
  }
  ~Scratch() {
    if (p_) cudaFreeAsync(p_, s_);
  }
  Scratch(const Scratch&) = delete;
  Scratch& operator=(const Scratch&) = delete;
  template <typename T>
  T* as() const { return static_cast<T*>(p_); }
  bool ok() const { return p_ != nullptr; }

 private:
  void* p_ = nullptr;
  cudaStream_t s_;
};

// A library's handles (cuBLAS, cuDNN), one per thread at a time (they are not for concurrent use):
// a thread takes a spare one or makes one, and gives it back when it ends instead of destroying it.
// The runtime's stream threads end with every run; making a handle costs milliseconds, and
// destroying one synchronises the device, which after a failure can wait for a collective that a
// lost peer never joins.
template <typename H>
class ThreadHandles {
 public:
  // This thread's handle; `make(&h)` makes one (true on success) when there is no spare.
  template <typename Make>
  static H Get(Make make) {
    thread_local Held mine;
    if (mine.h) return mine.h;
    {
      std::lock_guard<std::mutex> lock(Spares().mu);
      if (!Spares().free.empty()) {
        mine.h = Spares().free.back();
        Spares().free.pop_back();
        return mine.h;
      }
    }
    MakeCurrent();
    H h{};
    if (make(&h)) mine.h = h;
    return mine.h;
  }

 private:
  struct Pool {
    std::mutex mu;
    std::vector<H> free;
  };
  static Pool& Spares() {
    static Pool* pool = new Pool;  // never destroyed: threads may end after static destruction
    return *pool;
  }
  struct Held {
    H h{};
    ~Held() {
      if (!h) return;
      std::lock_guard<std::mutex> lock(Spares().mu);
      Spares().free.push_back(h);
    }
  };
};

inline Status NoScratch(const KernelCtx& c, const std::string& what) {
  return Status::Runtime("[cuda] " + c.node.name + ": out of device memory for " + what);
}

// Column reductions (32 outputs a block, kLanes lanes of terms each) cut each output's terms into
// chunks, one block row each, so that a few outputs over many terms (a bias gradient: 768 columns
// of 8192 rows) still fill the GPU; a second pass adds the chunks' partial results in order. The
// count depends on the shape alone, and with it the order of the sum.
constexpr int kLanes = 8;
inline unsigned ChunksOf(int64_t outputs, int64_t terms) {
  constexpr int64_t kMinTerms = 256, kBlocks = 2048;
  const int64_t columns = std::max<int64_t>(1, (outputs + 31) / 32);
  const int64_t by_terms = (terms + kMinTerms - 1) / kMinTerms, by_blocks = (kBlocks + columns - 1) / columns;
  return static_cast<unsigned>(std::clamp<int64_t>(std::min(by_terms, by_blocks), 1, 65535));
}
// Chunk blockIdx.y's terms, [*begin, *end), of `terms` cut into gridDim.y chunks.
__device__ inline void ChunkRange(int64_t terms, int64_t* begin, int64_t* end) {
  const int64_t span = (terms + gridDim.y - 1) / gridDim.y;
  *begin = blockIdx.y * span;
  *end = min(terms, *begin + span);
}

// i / d and i % d for indices (0 <= i, 0 < d): in 32 bits where both fit. A 64-bit division is a
// long software routine on the GPU, and index math does one per axis per element.
__device__ __forceinline__ int64_t IDiv(int64_t i, int64_t d) {
  return ((i | d) >> 32) == 0 ? static_cast<int64_t>(static_cast<uint32_t>(i) / static_cast<uint32_t>(d)) : i / d;
}
__device__ __forceinline__ int64_t IMod(int64_t i, int64_t d) { return i - IDiv(i, d) * d; }

#define FR_GRID_LOOP(i, n) \
  for (int64_t i = blockIdx.x * static_cast<int64_t>(blockDim.x) + threadIdx.x; i < (n); i += static_cast<int64_t>(gridDim.x) * blockDim.x)

// An output shape and, per input, its strides broadcast onto it (0 along broadcast dims), passed
// by value to kernels.
template <int kInputs>
struct Bcast {
  int rank = 0;
  int64_t dims[kMaxRank] = {};
  int64_t stride[kInputs][kMaxRank] = {};
  // The flat offset into input k of output element i.
  __device__ int64_t Offset(int k, int64_t i) const {
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(i, dims[d]);
      off += (i - q * dims[d]) * stride[k][d];
      i = q;
    }
    return off;
  }
};

// Strides of `in` broadcast onto `out` (numpy rules), as ops/cpu/broadcast.h's BroadcastStrides.
template <int kInputs>
bool MakeBcast(const fr::Shape& out, const fr::Shape* const ins[kInputs], Bcast<kInputs>* b) {
  if (out.rank() > kMaxRank) return false;
  b->rank = out.rank();
  for (int d = 0; d < out.rank(); ++d) b->dims[d] = out[d];
  for (int k = 0; k < kInputs; ++k) {
    const fr::Shape& in = *ins[k];
    int64_t s = 1;
    for (int i = in.rank() - 1; i >= 0; --i) {
      const int o = out.rank() - in.rank() + i;
      b->stride[k][o] = in[i] == 1 ? 0 : s;
      s *= in[i];
    }
  }
  return true;
}

// The sum of every thread's v over the block, in a fixed order (warp shuffles, then the warps'
// sums by warp 0): the same bits from run to run. All threads must call it; all get the sum.
template <typename T>
__device__ T BlockSum(T v) {
  __shared__ T warp_sums[32];
  for (int o = 16; o > 0; o >>= 1) v += __shfl_down_sync(0xffffffffu, v, o);
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();  // warp_sums may still be read by a previous call
  if (lane == 0) warp_sums[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  T s = lane < warps ? warp_sums[lane] : T(0);
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) s += __shfl_down_sync(0xffffffffu, s, o);
  __shared__ T total;
  if (threadIdx.x == 0) total = s;
  __syncthreads();
  return total;
}

__device__ inline float BlockMax(float v) {
  __shared__ float warp_max[32];
  for (int o = 16; o > 0; o >>= 1) v = fmaxf(v, __shfl_down_sync(0xffffffffu, v, o));
  const int lane = threadIdx.x & 31, warp = threadIdx.x >> 5;
  __syncthreads();
  if (lane == 0) warp_max[warp] = v;
  __syncthreads();
  const int warps = (blockDim.x + 31) >> 5;
  float m = lane < warps ? warp_max[lane] : -INFINITY;
  if (warp == 0)
    for (int o = 16; o > 0; o >>= 1) m = fmaxf(m, __shfl_down_sync(0xffffffffu, m, o));
  __shared__ float total;
  if (threadIdx.x == 0) total = m;
  __syncthreads();
  return total;
}

// The data-error word of the device (device.cu): the first bad index or label a kernel met.
struct DataError {
  int kind;       // 0: none; 1: an index out of range; 2: a label outside the classes
  int64_t value;  // the bad index or label
  int64_t bound;  // the dimension or the class count
};
DataError* DataErrorWord();  // device memory, valid on this rank's GPU

__device__ inline void ReportDataError(DataError* e, int kind, int64_t value, int64_t bound) {
  if (atomicCAS(&e->kind, 0, -1) == 0) {  // -1: being written
    e->value = value;
    e->bound = bound;
    __threadfence();
    atomicExch(&e->kind, kind);
  }
}

// ops/cpu/vmath.h's Exp, ErfGivenExp and Tanh, the same operations in the same order.
__device__ inline float VExp(float x) {
  constexpr float kLo = -87.33654f, kHi = 88.f;
  // std::max then std::min, as the CPU's: a NaN stays NaN (fmaxf and fminf would drop it).
  const float lo = x < kLo ? kLo : x;
  const float xc = kHi < lo ? kHi : lo;
  const float t = __fadd_rn(__fmul_rn(xc, 1.44269504088896341f), 12582912.f);
  const float n = __fsub_rn(t, 12582912.f);
  const float r = __fadd_rn(__fsub_rn(xc, __fmul_rn(n, 0.693359375f)), __fmul_rn(n, 2.12194440e-4f));
  float p = 1.f / 5040;
  p = __fadd_rn(__fmul_rn(p, r), 1.f / 720);
  p = __fadd_rn(__fmul_rn(p, r), 1.f / 120);
  p = __fadd_rn(__fmul_rn(p, r), 1.f / 24);
  p = __fadd_rn(__fmul_rn(p, r), 1.f / 6);
  p = __fadd_rn(__fmul_rn(p, r), 0.5f);
  const float e = __fadd_rn(__fadd_rn(__fmul_rn(__fmul_rn(p, r), r), r), 1.f);
  const int ni = __float_as_int(t) - __float_as_int(12582912.f);
  const float scale = __int_as_float((ni + 127) << 23);
  const float y = __fmul_rn(e, scale);
  return x < kLo ? 0.f : x > kHi ? INFINITY : y;
}

__device__ inline float VErfGivenExp(float x, float e) {
  const float z = __fmul_rn(x, x);
  float s = 1.f / 9360;
  s = __fsub_rn(__fmul_rn(s, z), 1.f / 1320);
  s = __fadd_rn(__fmul_rn(s, z), 1.f / 216);
  s = __fsub_rn(__fmul_rn(s, z), 1.f / 42);
  s = __fadd_rn(__fmul_rn(s, z), 1.f / 10);
  s = __fsub_rn(__fmul_rn(s, z), 1.f / 3);
  s = __fadd_rn(__fmul_rn(s, z), 1.f);
  const float small = __fmul_rn(__fmul_rn(1.1283791670955126f, x), s);
  const float a = fabsf(x);
  const float t = __fdiv_rn(1.f, __fadd_rn(1.f, __fmul_rn(0.3275911f, a)));
  float q = 1.061405429f;
  q = __fsub_rn(__fmul_rn(q, t), 1.453152027f);
  q = __fadd_rn(__fmul_rn(q, t), 1.421413741f);
  q = __fsub_rn(__fmul_rn(q, t), 0.284496736f);
  q = __fadd_rn(__fmul_rn(q, t), 0.254829592f);
  const float big = __fsub_rn(1.f, __fmul_rn(__fmul_rn(q, t), e));
  return a < 0.5f ? small : (x < 0.f ? -big : big);
}

__device__ inline float VErf(float x) { return VErfGivenExp(x, VExp(-(x * x))); }
__device__ inline float VTanh(float x) {
  const float z = __fmul_rn(x, x);
  float p = static_cast<float>(-929569.0 / 638512875);
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(21844.0 / 6081075));
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(-1382.0 / 155925));
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(62.0 / 2835));
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(-17.0 / 315));
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(2.0 / 15));
  p = __fadd_rn(__fmul_rn(p, z), static_cast<float>(-1.0 / 3));
  const float a = fabsf(x);
  const float small = __fadd_rn(a, __fmul_rn(a, __fmul_rn(z, p)));
  const float big = __fsub_rn(1.f, __fdiv_rn(2.f, __fadd_rn(VExp(__fmul_rn(2.f, a)), 1.f)));
  return copysignf(a < 0.5f ? small : big, x);
}

}  // namespace fr::cuda
