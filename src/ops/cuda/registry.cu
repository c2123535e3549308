// The CUDA op table, linked when the build has CUDA. The CUDA kernels themselves come with the
// CUDA backend milestone; until then every op reports that it has no CUDA kernel, and configs
// asking for parallel.device: cuda are refused before training starts.
#include "ops/cuda/backend.h"

namespace fr::cuda {
namespace {

Status NoKernel(const KernelCtx& ctx) {
  return Status::Runtime("[ops] " + ctx.node.name + ": op " + Def(ctx.node.op).name + " has no CUDA kernel yet");
}

}  // namespace

KernelFn KernelFor(OpKind) { return NoKernel; }

bool HasKernel(OpKind) { return false; }

}  // namespace fr::cuda
