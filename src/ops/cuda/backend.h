// The CUDA backend's entry point into the op table. A build with CUDA links ops/cuda/*.cu; a build
// without it links ops/cuda/none.cpp, whose kernels fail with a clear message.
#pragma once

#include "ops/op.h"

namespace fr::cuda {

KernelFn KernelFor(OpKind k);
// Whether op k has a CUDA kernel in this build (flowrun ops lists it).
bool HasKernel(OpKind k);

}  // namespace fr::cuda
