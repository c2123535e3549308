// CPU kernels, one per op kind (see ops/registry.cpp). Each reads ctx.in and writes ctx.out as the
// op's definition in src/ops/ describes. The kernel named Shape hides the type in this namespace:
// write fr::Shape here.
#pragma once

#include "ops/op.h"

namespace fr::cpu {

#define FR_CPU_KERNEL_DECL(name, onnx) Status name(const KernelCtx& ctx);
FR_OPS(FR_CPU_KERNEL_DECL)
#undef FR_CPU_KERNEL_DECL

// MatMul, SumTo and GatherGrad run as a gradient's accumulator where the lowering folds one into
// its Accumulate (plan/lower.cpp): the node carries "accumulate" = 1 and its output is the
// step's sum, which from the second micro-batch on the kernel adds into instead of overwriting.
inline bool AddsInto(const KernelCtx& c) { return c.micro > 0 && c.node.attrs.Int("accumulate") != 0; }

}  // namespace fr::cpu
