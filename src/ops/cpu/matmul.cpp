// GEMM through oneDNN's sgemm (row-major; chosen over OpenBLAS by measurement, see README). Batched MatMul loops over broadcast batch
// dims, and folds A's batch into M when B has none (the common [B, T, C] x [C, N] layer).
#include <dnnl.h>

#include "ops/cpu/broadcast.h"
#include "ops/cpu/kernels.h"

namespace fr::cpu {
namespace {

void Sgemm(bool ta, bool tb, int64_t m, int64_t n, int64_t k, float alpha, const float* a, const float* b,
           float beta, float* c) {
  dnnl_status_t s = dnnl_sgemm(ta ? 'T' : 'N', tb ? 'T' : 'N', m, n, k, alpha, a, ta ? m : k, b, tb ? k : n,
                                beta, c, n);
  FR_CHECK(s == dnnl_success, "dnnl_sgemm failed with status " + std::to_string(static_cast<int>(s)));
}

fr::Shape BatchOf(const fr::Shape& s) { return fr::Shape(std::vector<int64_t>(s.dims().begin(), s.dims().end() - 2)); }

}  // namespace

Status MatMul(const KernelCtx& c) {
  const Tensor &A = c.in[0], &B = c.in[1], &Y = c.out[0];
  bool ta = c.node.attrs.Int("transA"), tb = c.node.attrs.Int("transB");
  float alpha = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  const float beta = AddsInto(c) ? 1.f : 0.f;
  const fr::Shape &as = A.shape(), &bs = B.shape(), &ys = Y.shape();
  int64_t m = ys[ys.rank() - 2], n = ys[ys.rank() - 1];
  int64_t k = ta ? as[as.rank() - 2] : as[as.rank() - 1];
  if (c.node.attrs.Int("contract_batch")) {  // Y = A^T B over the flattened rows
    const int64_t rows = as[as.rank() - 1] ? A.numel() / as[as.rank() - 1] : 0;
    Sgemm(true, false, m, n, rows, alpha, A.data<float>(), B.data<float>(), beta, Y.data<float>());
    return Status::Ok();
  }
  if (bs.rank() == 2 && !ta) {  // fold A's batch into M
    int64_t rows = A.numel() / (k ? k : 1);
    Sgemm(false, tb, rows, n, k, alpha, A.data<float>(), B.data<float>(), beta, Y.data<float>());
    return Status::Ok();
  }
  fr::Shape yb = BatchOf(ys);
  const float* pa = A.data<float>();
  const float* pb = B.data<float>();
  float* py = Y.data<float>();
  int64_t a_mat = as[as.rank() - 2] * as[as.rank() - 1], b_mat = bs[bs.rank() - 2] * bs[bs.rank() - 1];
  // Batch offsets in units of matrices, broadcasting A's and B's batch dims onto Y's.
  ForEachRow(BatchOf(as), BatchOf(bs), yb.rank() ? yb : fr::Shape{1},
             [&](int64_t oa, int64_t ob, int64_t oy, int64_t cnt, int64_t sa, int64_t sb) {
               for (int64_t i = 0; i < cnt; ++i) {
                 Sgemm(ta, tb, m, n, k, alpha, pa + (oa + i * sa) * a_mat, pb + (ob + i * sb) * b_mat, beta,
                       py + (oy + i) * m * n);
               }
             });
  return Status::Ok();
}

Status Gemm(const KernelCtx& c) {
  const Tensor& Y = c.out[0];
  bool ta = c.node.attrs.Int("transA"), tb = c.node.attrs.Int("transB");
  float alpha = static_cast<float>(c.node.attrs.Float("alpha", 1.0));
  float beta = static_cast<float>(c.node.attrs.Float("beta", 1.0));
  int64_t m = Y.shape()[0], n = Y.shape()[1], k = ta ? c.in[0].shape()[0] : c.in[0].shape()[1];
  bool has_c = c.in.size() > 2 && c.in[2].defined();
  if (has_c) {  // Y = beta * broadcast(C), then accumulate the product into it
    const Tensor& C = c.in[2];
    const float* pc = C.data<float>();
    float* py = Y.data<float>();
    ForEachRow(C.shape(), Y.shape(), Y.shape(),
               [&](int64_t oc, int64_t, int64_t oy, int64_t cnt, int64_t sc, int64_t) {
                 for (int64_t i = 0; i < cnt; ++i) py[oy + i] = beta * pc[oc + i * sc];
               });
  }
  Sgemm(ta, tb, m, n, k, alpha, c.in[0].data<float>(), c.in[1].data<float>(), has_c ? 1.f : 0.f,
        Y.data<float>());
  return Status::Ok();
}

}  // namespace fr::cpu
