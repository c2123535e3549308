// The module's entry: the CUDA op table (FR_CUDA_OPS's kernels by OpKind) and the device
// functions, as the one table flowrun's loader reads (ops/cuda/backend.h).
#include <array>

#include "ops/cuda/backend.h"
#include "ops/cuda/device.h"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

const std::array<KernelFn, kNumOps>& Table() {
  static const std::array<KernelFn, kNumOps> table = [] {
    std::array<KernelFn, kNumOps> t{};
#define FR_CUDA_ROW(name) t[static_cast<size_t>(OpKind::k##name)] = name;
    FR_CUDA_OPS(FR_CUDA_ROW)
#undef FR_CUDA_ROW
    return t;
  }();
  return table;
}

KernelFn KernelOf(OpKind k) { return Table()[static_cast<size_t>(k)]; }

GroupKernelFn GroupKernelOf(OpKind k) {
  switch (k) {
    case OpKind::kSgdUpdate: return SgdUpdateGroup;
    case OpKind::kAdamWUpdate: return AdamWUpdateGroup;
    default: return nullptr;
  }
}

}  // namespace
}  // namespace fr::cuda

extern "C" __attribute__((visibility("default"))) const fr::cuda::Api* flowrun_cuda_api() {
  static const fr::cuda::Api api{fr::cuda::kApiVersion, fr::cuda::CountDevices,  fr::cuda::SelectDevice,
                                 fr::cuda::AllowTf32Math,  fr::cuda::KernelOf,      fr::cuda::GroupKernelOf, fr::cuda::MakeNcclId,
                                 fr::cuda::MakeNcclGroup,  fr::cuda::NcclVersionString, fr::cuda::PciBusId,
                                 fr::cuda::DescribeGpu,    fr::cuda::TimeSgemm,
                                 fr::cuda::CuptiStart,     fr::cuda::CuptiTake};
  return &api;
}
