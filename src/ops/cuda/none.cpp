// Linked when flowrun is built without CUDA: every CUDA kernel reports that the backend is absent.
#include "ops/cuda/backend.h"

namespace fr::cuda {
namespace {

Status Unavailable(const KernelCtx& ctx) {
  return Status::Runtime("[ops] " + ctx.node.name +
                         ": this flowrun was built without CUDA (meson setup -Dcuda=enabled needs nvcc); "
                         "use parallel.device: cpu");
}

}  // namespace

KernelFn KernelFor(OpKind) { return Unavailable; }

bool HasKernel(OpKind) { return false; }

}  // namespace fr::cuda
