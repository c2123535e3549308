// CPU kernels for Reshape (a copy into the output register) and Transpose (strided gather).
#include <vector>

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

}  // namespace fr::cpu
