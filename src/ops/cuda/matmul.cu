// GEMM on CUDA through cuBLAS, FP32 unless TF32 is allowed (parallel.tf32). cuBLAS is
// column-major: a row-major Y = op(A) op(B) is the column-major Y^T = op(B)^T op(A)^T, so every
// call passes B before A with the same lda/ldb as the CPU's row-major sgemm.
//
// A handle per thread (ThreadHandles, common.cuh), bound to the kernel's stream per call: one
// handle per stream is what cuBLAS needs to give the same bits from run to run.
#include <cublas_v2.h>

#include <algorithm>
#include <atomic>
#include <vector>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

std::atomic<bool> g_tf32{false};

const char* CublasName(cublasStatus_t s) { return cublasGetStatusName(s); }

Result<cublasHandle_t> Handle() {
  cublasStatus_t made = CUBLAS_STATUS_SUCCESS;
  cublasHandle_t h = ThreadHandles<cublasHandle_t>::Get([&](cublasHandle_t* out) {
    made = cublasCreate(out);
    return made == CUBLAS_STATUS_SUCCESS;
  });
  if (!h) return Status::Runtime(std::string("[cuda] cublasCreate: ") + CublasName(made));
  return h;
}

Status Cublas(const KernelCtx& c, cublasStatus_t s) {
  if (s == CUBLAS_STATUS_SUCCESS) return Launched(c);
  return Status::Runtime("[cuda] " + c.node.name + ": cuBLAS " + CublasName(s));
}

// Row-major Y[m, n] (+)= alpha op(A)[m, k] op(B)[k, n], `count` times with the given strides in
// elements (0 broadcasts a matrix over the batch).
Status Sgemm(const KernelCtx& c, bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, int64_t stride_a,
             const float* b, int64_t stride_b, float beta, float* y, int64_t count) {
  if (m == 0 || n == 0 || count == 0) return Status::Ok();
  ASSIGN_OR_RETURN(cublasHandle_t h, Handle());
  cublasSetStream(h, StreamOf(c));
  cublasSetMathMode(h, g_tf32.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  const cublasOperation_t op_a = ta ? CUBLAS_OP_T : CUBLAS_OP_N, op_b = tb ? CUBLAS_OP_T : CUBLAS_OP_N;
  const int64_t lda = ta ? m : k, ldb = tb ? k : n;
  if (k == 0) {  // cuBLAS wants k >= 1: Y = beta Y, where beta is 0 (a product) or 1 (accumulating)
    if (beta != 0.f) return Status::Ok();
    return Launched(c, cudaMemsetAsync(y, 0, static_cast<size_t>(m * n * count) * sizeof(float), StreamOf(c)));
  }
  if (count == 1) {
    return Cublas(c, cublasSgemm_64(h, op_b, op_a, n, m, k, &alpha, b, ldb, a, lda, &beta, y, n));
  }
  return Cublas(c, cublasSgemmStridedBatched_64(h, op_b, op_a, n, m, k, &alpha, b, ldb, stride_b, a, lda, stride_a, &beta, y, n,
                                                m * n, count));
}

fr::Shape BatchOf(const fr::Shape& s) { return fr::Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2)); }

__global__ void FillScaled(const float* src, float* y, int64_t n, Bcast<1> b, float beta) {
  FR_GRID_LOOP(i, n) y[i] = beta * src[b.Offset(0, i)];
}

}  // namespace

void AllowTf32Math(bool allow) { g_tf32.store(allow, std::memory_order_relaxed); }
bool Tf32Math() { return g_tf32.load(std::memory_order_relaxed); }

Status MatMul(const KernelCtx& c) {
  const Tensor &A = c.in[0], &B = c.in[1], &Y = c.out[0];
  const bool ta = c.node.attrs.Int("transA"), tb = c.node.attrs.Int("transB");
  const float alpha = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  const float beta = AddsInto(c) ? 1.f : 0.f;
  const fr::Shape &as = A.shape(), &bs = B.shape(), &ys = Y.shape();
  const int64_t m = ys[ys.rank() - 2], n = ys[ys.rank() - 1];
  const int64_t k = ta ? as[as.rank() - 2] : as[as.rank() - 1];
  if (c.node.attrs.Int("contract_batch")) {  // Y = A^T B over the flattened rows
    const int64_t rows = as[as.rank() - 1] ? A.numel() / as[as.rank() - 1] : 0;
    return Sgemm(c, true, false, m, n, rows, alpha, A.data<float>(), 0, B.data<float>(), 0, beta, Y.data<float>(), 1);
  }
  if (bs.rank() == 2 && !ta) {  // fold A's batch into M
    const int64_t rows = A.numel() / (k ? k : 1);
    return Sgemm(c, false, tb, rows, n, k, alpha, A.data<float>(), 0, B.data<float>(), 0, beta, Y.data<float>(), 1);
  }
  // Batch dims broadcast: a strided batch per run of Y's last batch dim, as the CPU's rows.
  const fr::Shape yb = BatchOf(ys), ab = BatchOf(as), bb = BatchOf(bs);
  const int64_t a_mat = as[as.rank() - 2] * as[as.rank() - 1], b_mat = bs[bs.rank() - 2] * bs[bs.rank() - 1];
  if (yb.rank() == 0) return Sgemm(c, ta, tb, m, n, k, alpha, A.data<float>(), 0, B.data<float>(), 0, beta, Y.data<float>(), 1);
  // Strides (in matrices) of A's and B's batches broadcast onto Y's.
  auto strides = [&](const fr::Shape& in) {
    std::vector<int64_t> st(static_cast<size_t>(yb.rank()), 0);
    int64_t s = 1;
    for (int i = in.rank() - 1; i >= 0; --i) {
      st[static_cast<size_t>(yb.rank() - in.rank() + i)] = in[i] == 1 ? 0 : s;
      s *= in[i];
    }
    return st;
  };
  const std::vector<int64_t> sa = strides(ab), sb = strides(bb);
  const int r = yb.rank();
  const int64_t inner = yb[r - 1], outer = yb.numel() / (inner ? inner : 1);
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t oa = 0, ob = 0;
  for (int64_t o = 0; o < outer; ++o) {
    RETURN_IF_ERROR(Sgemm(c, ta, tb, m, n, k, alpha, A.data<float>() + oa * a_mat, sa[static_cast<size_t>(r - 1)] * a_mat,
                          B.data<float>() + ob * b_mat, sb[static_cast<size_t>(r - 1)] * b_mat, beta,
                          Y.data<float>() + o * inner * m * n, inner));
    for (int d = r - 2; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      oa += sa[du];
      ob += sb[du];
      if (++idx[du] < yb[d]) break;
      oa -= sa[du] * yb[d];
      ob -= sb[du] * yb[d];
      idx[du] = 0;
    }
  }
  return Status::Ok();
}

Status Gemm(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  const bool ta = c.node.attrs.Int("transA"), tb = c.node.attrs.Int("transB");
  const float alpha = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  const float beta = static_cast<float>(c.node.attrs.Float("beta", 1.0));
  const int64_t m = Y.shape()[0], n = Y.shape()[1], k = ta ? c.in[0].shape()[0] : c.in[0].shape()[1];
  const bool has_c = c.in.size() > 2 && c.in[2].defined();
  if (has_c && Y.numel()) {  // Y = beta * broadcast(C), then the product added into it
    Bcast<1> b;
    const fr::Shape* ins[1] = {&c.in[2].shape()};
    if (!MakeBcast<1>(Y.shape(), ins, &b)) return TooManyDims(c, Y.shape().rank());
    FillScaled<<<Blocks(Y.numel()), kThreads, 0, StreamOf(c)>>>(c.in[2].data<float>(), Y.data<float>(), Y.numel(), b, beta);
    RETURN_IF_ERROR(Launched(c));
  }
  return Sgemm(c, ta, tb, m, n, k, alpha, c.in[0].data<float>(), 0, c.in[1].data<float>(), 0, has_c ? 1.f : 0.f,
               Y.data<float>(), 1);
}

// Values in [-1, 1) from a hash of the index: tensor cores draw less power on zeros or regular
// data and run faster than on a model's, so a GEMM timed on them would flatter the GPU.
__global__ void FillHashed(float* p, int64_t n, uint32_t seed) {
  FR_GRID_LOOP(i, n) {
    uint32_t h = static_cast<uint32_t>(i) * 2654435761u + seed;
    h ^= h >> 15;
    h *= 2246822519u;
    h ^= h >> 13;
    p[i] = static_cast<float>(h & 0xffffu) / 32768.f - 1.f;
  }
}

// flowrun env: seconds per n x n x n SGEMM on this GPU (TF32 as asked), the median of `reps`
// after a warm-up, each timed by events on a stream of its own, on hashed operands.
Result<double> TimeSgemm(int n, bool tf32, int reps) {
  MakeCurrent();
  ASSIGN_OR_RETURN(cublasHandle_t h, Handle());
  const size_t bytes = static_cast<size_t>(n) * static_cast<size_t>(n) * sizeof(float);
  float* m[3] = {nullptr, nullptr, nullptr};
  cudaStream_t s = nullptr;
  cudaEvent_t b = nullptr, e = nullptr;
  auto cleanup = [&] {
    for (float* p : m) cudaFree(p);
    if (b) cudaEventDestroy(b);
    if (e) cudaEventDestroy(e);
    cublasSetStream(h, nullptr);  // not left bound to the stream destroyed next
    if (s) cudaStreamDestroy(s);
  };
  for (float*& p : m) {
    if (cudaMalloc(&p, bytes) != cudaSuccess || cudaMemset(p, 0, bytes) != cudaSuccess) {
      cudaGetLastError();
      cleanup();
      return Status::Runtime("[cuda] no memory for three " + std::to_string(n) + "^2 matrices");
    }
  }
  const int64_t count = static_cast<int64_t>(n) * n;
  FillHashed<<<Blocks(count), kThreads>>>(m[0], count, 1u);
  FillHashed<<<Blocks(count), kThreads>>>(m[1], count, 2u);
  if (const cudaError_t fill = cudaDeviceSynchronize(); fill != cudaSuccess) {
    cleanup();
    return Status::Runtime(std::string("[cuda] filling the matrices: ") + cudaGetErrorString(fill));
  }
  if (cudaStreamCreateWithFlags(&s, cudaStreamNonBlocking) != cudaSuccess || cudaEventCreate(&b) != cudaSuccess ||
      cudaEventCreate(&e) != cudaSuccess) {
    const std::string what = cudaGetErrorString(cudaGetLastError());
    cleanup();
    return Status::Runtime("[cuda] timing a GEMM: " + what);
  }
  cublasSetStream(h, s);
  cublasSetMathMode(h, tf32 ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  const float one = 1, zero = 0;
  std::vector<float> ms;
  cublasStatus_t st = CUBLAS_STATUS_SUCCESS;
  for (int r = -1; r < reps && st == CUBLAS_STATUS_SUCCESS; ++r) {  // r = -1: the warm-up
    cudaEventRecord(b, s);
    st = cublasSgemm(h, CUBLAS_OP_N, CUBLAS_OP_N, n, n, n, &one, m[0], n, m[1], n, &zero, m[2], n);
    cudaEventRecord(e, s);
    cudaEventSynchronize(e);
    float t = 0;
    cudaEventElapsedTime(&t, b, e);
    if (r >= 0) ms.push_back(t);
  }
  cublasSetMathMode(h, g_tf32.load(std::memory_order_relaxed) ? CUBLAS_TF32_TENSOR_OP_MATH : CUBLAS_DEFAULT_MATH);
  cleanup();
  if (st != CUBLAS_STATUS_SUCCESS) return Status::Runtime(std::string("[cuda] cublasSgemm: ") + CublasName(st));
  if (ms.empty()) return Status::Runtime("[cuda] no GEMM timed");
  std::sort(ms.begin(), ms.end());
  return ms[ms.size() / 2] / 1e3;
}

}  // namespace fr::cuda
