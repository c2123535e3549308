// CPU kernels, one per op kind (see ops/registry.cpp). Each reads ctx.in and writes ctx.out as the
// op's definition in src/ops/ describes. The kernel named Shape hides the type in this namespace:
// write fr::Shape here.
#pragma once

#include "ops/kernel_args.h"
#include "ops/op.h"

namespace fr::cpu {

#define FR_CPU_KERNEL_DECL(name, onnx) Status name(const KernelCtx& ctx);
FR_OPS(FR_CPU_KERNEL_DECL)
#undef FR_CPU_KERNEL_DECL


}  // namespace fr::cpu
