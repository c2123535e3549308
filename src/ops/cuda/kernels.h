// CUDA kernels, one per op kind that has one (FR_CUDA_OPS; ops/cuda/registry.cu builds the table
// from it). Each reads ctx.in and writes ctx.out as the op's definition in src/ops/ describes, the
// same as its CPU kernel, and queues its work on ctx.stream.
//
// Not here, and refused before training with a clear message: the ops import folds (Shape,
// ConstantOfShape, Range).
#pragma once

#include "ops/op.h"

#define FR_CUDA_OPS(X)                                                                              \
  X(Gemm) X(MatMul) X(Add) X(Sub) X(Mul) X(Div) X(Relu) X(Tanh) X(Sigmoid) X(Erf) X(Softmax)         \
  X(LogSoftmax) X(LayerNormalization) X(Reshape) X(Transpose) X(Gather) X(GatherND) X(ScatterND)     \
  X(GatherElements) X(Tile) X(Pad) X(Concat) X(Split) X(Slice) X(Expand) X(Where) X(Cast) X(Trilu)   \
  X(Sqrt) X(Reciprocal) X(Neg) X(Exp) X(Log) X(Abs) X(Sign) X(Sin) X(Cos) X(Pow) X(Clip) X(IsNaN)    \
  X(ReduceSum) X(ReduceMean) X(ReduceMax) X(Dropout) X(Equal) X(Less) X(LessOrEqual) X(Greater)      \
  X(GreaterOrEqual) X(And) X(Or) X(Not) X(ReluGrad) X(TanhGrad) X(SigmoidGrad) X(ErfGrad)            \
  X(SoftmaxGrad) X(LogSoftmaxGrad) X(LayerNormGrad) X(SumTo) X(Scale) X(GatherGrad) X(SliceGrad)     \
  X(ClipGrad) X(ReduceMaxGrad) X(GatherNDGrad) X(GatherElementsGrad) X(PadGrad) X(Gelu) X(GeluGrad)  \
  X(MaskedSoftmax) X(MaskedSoftmaxGrad) X(RMSNorm) X(RMSNormGrad) X(Silu) X(SiluGrad) X(CrossEntropy)  \
  X(CrossEntropyGrad) X(Mse) X(MseGrad) X(Accumulate) X(SquareSum) X(AddN) X(ClipCoef) X(SgdUpdate)  \
  X(AdamWUpdate) X(Conv) X(ConvGradData) X(ConvGradWeight) X(MaxPool) X(MaxPoolGrad) X(AveragePool)  \
  X(AveragePoolGrad)

namespace fr::cuda {

#define FR_CUDA_KERNEL_DECL(name) Status name(const KernelCtx& ctx);
FR_CUDA_OPS(FR_CUDA_KERNEL_DECL)
#undef FR_CUDA_KERNEL_DECL

// The optimizer updates' group kernels (ops/op.h): a few multi-tensor launches for a whole
// update group. SgdUpdate and AdamWUpdate are these with one member.
Status SgdUpdateGroup(std::span<const KernelCtx> members);
Status AdamWUpdateGroup(std::span<const KernelCtx> members);

// TF32 tensor cores for the float32 GEMMs and convolutions (matmul.cu), and whether allowed.
void AllowTf32Math(bool allow);
bool Tf32Math();

}  // namespace fr::cuda
