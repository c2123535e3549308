// The closed list of op kinds. Adding an op: add it here, write its definition (shape inference,
// gradient rule, CPU kernel) in src/ops/, and add the row to the table in ops/registry.cpp, whose
// size is checked against this list at compile time.
#pragma once

#include <cstdint>

namespace fr {

// X(Name, imported-from-ONNX-by-this-name)
#define FR_OPS(X)                                                                                  \
  /* ONNX ops that run as kernels */                                                               \
  X(Gemm, true) X(MatMul, true) X(Add, true) X(Sub, true) X(Mul, true) X(Div, true)                 \
  X(Relu, true) X(Tanh, true) X(Sigmoid, true) X(Erf, true) X(Softmax, true) X(LogSoftmax, true)    \
  X(LayerNormalization, true) X(Reshape, true) X(Transpose, true)                                   \
  X(Gather, true) X(GatherND, true) X(ScatterND, true) X(GatherElements, true) X(Tile, true) X(Pad, true) X(Concat, true) X(Split, true) X(Slice, true) X(Expand, true) X(Where, true)       \
  X(Cast, true) X(Trilu, true)                                                                     \
  /* math and reductions (ops/math.cpp) */                                                         \
  X(Sqrt, true) X(Reciprocal, true) X(Neg, true) X(Exp, true) X(Log, true) X(Abs, true)             \
  X(Sign, true) X(Sin, true) X(Cos, true) X(Pow, true) X(Clip, true) X(IsNaN, true)                 \
  X(ReduceSum, true) X(ReduceMean, true) X(ReduceMax, true)                                         \
  X(Dropout, false) /* import reads ONNX's ratio input into an attribute */                        \
  /* convolutional nets (ops/conv.cpp) */                                                          \
  X(Conv, true) X(MaxPool, true) X(AveragePool, true)                                              \
  /* ONNX ops for shape arithmetic and masks, folded at import: no gradient (see registry.cpp) */  \
  X(Shape, true) X(Equal, true) X(ConstantOfShape, true) X(Range, true)                            \
  X(Less, true) X(LessOrEqual, true) X(Greater, true) X(GreaterOrEqual, true)                       \
  X(And, true) X(Or, true) X(Not, true)                                                            \
  /* gradients */                                                                                  \
  X(ReluGrad, false) X(TanhGrad, false) X(SigmoidGrad, false) X(ErfGrad, false)                    \
  X(SoftmaxGrad, false) X(LogSoftmaxGrad, false) X(LayerNormGrad, false) X(SumTo, false)           \
  X(Scale, false) X(GatherGrad, false) X(SliceGrad, false) X(ClipGrad, false) X(ReduceMaxGrad, false) \
  X(ConvGradData, false) X(ConvGradWeight, false) X(MaxPoolGrad, false) X(AveragePoolGrad, false)   \
  X(GatherNDGrad, false) X(GatherElementsGrad, false) X(PadGrad, false)                                              \
  /* fused by ir/rewrite.cpp from exported chains */                                              \
  X(Gelu, false) X(GeluGrad, false) X(MaskedSoftmax, false) X(MaskedSoftmaxGrad, false)            \
  X(RMSNorm, false) X(RMSNormGrad, false) X(Silu, false) X(SiluGrad, false)                                                          \
  /* losses */                                                                                     \
  X(CrossEntropy, false) X(CrossEntropyGrad, false) X(Mse, false) X(MseGrad, false)                \
  /* step: accumulation, clipping, optimizers */                                                   \
  X(Accumulate, false) X(SquareSum, false) X(AddN, false) X(ClipCoef, false)                       \
  X(SgdUpdate, false) X(AdamWUpdate, false)

enum class OpKind : uint16_t {
#define FR_OP_ENUM(name, onnx) k##name,
  FR_OPS(FR_OP_ENUM)
#undef FR_OP_ENUM
};

inline constexpr int kNumOps = 0
#define FR_OP_COUNT(name, onnx) +1
    FR_OPS(FR_OP_COUNT)
#undef FR_OP_COUNT
    ;

}  // namespace fr
