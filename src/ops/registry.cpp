// The op table: one row per OpKind, in the order of FR_OPS (checked at compile time).
#include <algorithm>
#include <array>

#include "ops/cpu/kernels.h"
#include "ops/cuda/backend.h"
#include "ops/defs.h"

namespace fr {
namespace {

using namespace defs;  // NOLINT: the table reads best unqualified
constexpr int kMany = 1 << 20;

constexpr std::array<OpDef, kNumOps> kTable = {{
    {"Gemm", true, 2, 3, InferGemm, GradGemm, cpu::Gemm, SbpGemm, nullptr},
    {"MatMul", true, 2, 2, InferMatMul, GradMatMul, cpu::MatMul, SbpMatMul, nullptr},
    {"Add", true, 2, 2, InferBinary, GradAdd, cpu::Add, SbpBinary, nullptr},
    {"Sub", true, 2, 2, InferBinary, GradSub, cpu::Sub, SbpBinary, nullptr},
    {"Mul", true, 2, 2, InferBinary, GradMul, cpu::Mul, SbpBinary, nullptr},
    {"Div", true, 2, 2, InferBinary, GradDiv, cpu::Div, SbpBinary, nullptr},
    {"Relu", true, 1, 1, InferFloatUnary, GradRelu, cpu::Relu, SbpActivation, nullptr},
    {"Tanh", true, 1, 1, InferFloatUnary, GradTanh, cpu::Tanh, SbpActivation, nullptr},
    {"Sigmoid", true, 1, 1, InferFloatUnary, GradSigmoid, cpu::Sigmoid, SbpActivation, nullptr},
    {"Erf", true, 1, 1, InferFloatUnary, GradErf, cpu::Erf, SbpActivation, nullptr},
    {"Softmax", true, 1, 1, InferSoftmax, GradSoftmax, cpu::Softmax, SbpSoftmax, nullptr},
    {"LogSoftmax", true, 1, 1, InferSoftmax, GradLogSoftmax, cpu::LogSoftmax, SbpSoftmax, nullptr},
    {"LayerNormalization", true, 2, 3, InferLayerNorm, GradLayerNorm, cpu::LayerNormalization, SbpLayerNorm, nullptr},
    {"Reshape", true, 1, 1, InferReshape, GradReshape, cpu::Reshape, SbpReshape, PhysicalReshape},
    {"Transpose", true, 1, 1, InferTranspose, GradTranspose, cpu::Transpose, SbpTranspose, nullptr},
    {"Gather", true, 2, 2, InferGather, GradGather, cpu::Gather, SbpGather, nullptr},
    {"GatherND", true, 2, 2, InferGatherND, GradGatherND, cpu::GatherND, SbpGatherND, nullptr},
    {"ScatterND", true, 3, 3, InferScatterND, GradScatterND, cpu::ScatterND, SbpScatterND, nullptr},
    {"GatherElements", true, 2, 2, InferGatherElements, GradGatherElements, cpu::GatherElements, SbpGatherElements, nullptr},
    {"Tile", true, 1, 1, InferTile, GradTile, cpu::Tile, SbpTile, nullptr},
    {"Pad", true, 1, 1, InferPad, GradPad, cpu::Pad, SbpPad, nullptr},
    {"Concat", true, 1, kMany, InferConcat, GradConcat, cpu::Concat, SbpConcat, nullptr},
    {"Split", true, 1, 2, InferSplit, GradSplit, cpu::Split, SbpSplit, nullptr},
    {"Slice", true, 1, 5, InferSlice, GradSlice, cpu::Slice, SbpSlice, PhysicalSlice},
    {"Expand", true, 1, 2, InferExpand, GradExpand, cpu::Expand, SbpExpand, PhysicalExpand},
    {"Where", true, 3, 3, InferWhere, GradWhere, cpu::Where, SbpWhere, nullptr},
    {"Cast", true, 1, 1, InferCast, GradCast, cpu::Cast, SbpCast, nullptr},
    {"Trilu", true, 1, 2, InferTrilu, GradTrilu, cpu::Trilu, SbpTrilu, nullptr},
    {"Sqrt", true, 1, 1, InferFloatUnary, GradSqrt, cpu::Sqrt, SbpActivation, nullptr},
    {"Reciprocal", true, 1, 1, InferFloatUnary, GradReciprocal, cpu::Reciprocal, SbpActivation, nullptr},
    {"Neg", true, 1, 1, InferNeg, GradNeg, cpu::Neg, SbpNeg, nullptr},
    {"Exp", true, 1, 1, InferFloatUnary, GradExp, cpu::Exp, SbpActivation, nullptr},
    {"Log", true, 1, 1, InferFloatUnary, GradLog, cpu::Log, SbpActivation, nullptr},
    {"Abs", true, 1, 1, InferFloatUnary, GradAbs, cpu::Abs, SbpActivation, nullptr},
    {"Sign", true, 1, 1, InferFloatUnary, GradSign, cpu::Sign, SbpActivation, nullptr},
    {"Sin", true, 1, 1, InferFloatUnary, GradSin, cpu::Sin, SbpActivation, nullptr},
    {"Cos", true, 1, 1, InferFloatUnary, GradCos, cpu::Cos, SbpActivation, nullptr},
    {"Pow", true, 2, 2, InferPow, GradPow, cpu::Pow, SbpPow, nullptr},
    {"Clip", true, 1, 1, InferClip, GradClip, cpu::Clip, SbpActivation, nullptr},
    // IsNaN's output is bool: never differentiated, as Equal's below.
    {"IsNaN", true, 1, 1, InferIsNaN, nullptr, cpu::IsNaN, SbpActivation, nullptr},
    {"ReduceSum", true, 1, 1, InferReduce, GradReduceSumMean, cpu::ReduceSum, SbpReduce, nullptr},
    {"ReduceMean", true, 1, 1, InferReduce, GradReduceSumMean, cpu::ReduceMean, SbpReduce, PhysicalReduceMean},
    {"ReduceMax", true, 1, 1, InferReduce, GradReduceMax, cpu::ReduceMax, SbpReduce, nullptr},
    {"Dropout", false, 1, 1, InferDropout, GradDropout, cpu::Dropout, SbpNeg, PhysicalDropout},
    {"Conv", true, 2, 3, InferConv, GradConv, cpu::Conv, SbpConv, nullptr},
    {"MaxPool", true, 1, 1, InferPool, GradMaxPool, cpu::MaxPool, SbpPool, nullptr},
    {"AveragePool", true, 1, 1, InferPool, GradAveragePool, cpu::AveragePool, SbpPool, nullptr},
    // Fold-only: their outputs never carry a gradient (Shape's and Equal's are not float; the
    // others depend on no float input), so they have no gradient rule, and import folds them, so
    // B is their only placement. Equal keeps a real rule: a mask computed from data runs.
    {"Shape", true, 1, 1, InferShape, nullptr, cpu::Shape, SbpFoldOnly, nullptr},
    {"Equal", true, 2, 2, InferEqual, nullptr, cpu::Equal, SbpEqual, nullptr},
    {"ConstantOfShape", true, 1, 1, InferConstantOfShape, nullptr, cpu::ConstantOfShape, SbpFoldOnly, nullptr},
    {"Range", true, 3, 3, InferRange, nullptr, cpu::Range, SbpFoldOnly, nullptr},
    // Comparisons and logic give bool: never differentiated, folded where their inputs are
    // constants (masks), run as kernels where they are not.
    {"Less", true, 2, 2, InferEqual, nullptr, cpu::Less, SbpEqual, nullptr},
    {"LessOrEqual", true, 2, 2, InferEqual, nullptr, cpu::LessOrEqual, SbpEqual, nullptr},
    {"Greater", true, 2, 2, InferEqual, nullptr, cpu::Greater, SbpEqual, nullptr},
    {"GreaterOrEqual", true, 2, 2, InferEqual, nullptr, cpu::GreaterOrEqual, SbpEqual, nullptr},
    {"And", true, 2, 2, InferLogical, nullptr, cpu::And, SbpEqual, nullptr},
    {"Or", true, 2, 2, InferLogical, nullptr, cpu::Or, SbpEqual, nullptr},
    {"Not", true, 1, 1, InferLogical, nullptr, cpu::Not, SbpActivation, nullptr},
    {"ReluGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::ReluGrad, SbpActivationGrad, nullptr},
    {"TanhGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::TanhGrad, SbpActivationGrad, nullptr},
    {"SigmoidGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::SigmoidGrad, SbpActivationGrad, nullptr},
    {"ErfGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::ErfGrad, SbpActivationGrad, nullptr},
    {"SoftmaxGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::SoftmaxGrad, SbpSoftmaxGrad, nullptr},
    {"LogSoftmaxGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::LogSoftmaxGrad, SbpSoftmaxGrad, nullptr},
    {"LayerNormGrad", false, 5, 5, InferLayerNormGrad, nullptr, cpu::LayerNormGrad, SbpLayerNormGrad, nullptr},
    {"SumTo", false, 1, 1, InferSumTo, nullptr, cpu::SumTo, SbpSumTo, PhysicalSumTo},
    {"Scale", false, 1, 1, InferFloatUnary, GradScale, cpu::Scale, SbpScale, nullptr},
    {"GatherGrad", false, 2, 2, InferGatherGrad, nullptr, cpu::GatherGrad, SbpGatherGrad, PhysicalGatherGrad},
    {"SliceGrad", false, 1, 1, InferSliceGrad, nullptr, cpu::SliceGrad, SbpSliceGrad, PhysicalSliceGrad},
    {"ClipGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::ClipGrad, SbpClipGrad, nullptr},
    {"ReduceMaxGrad", false, 3, 3, InferReduceMaxGrad, nullptr, cpu::ReduceMaxGrad, SbpReduceMaxGrad, nullptr},
    {"ConvGradData", false, 2, 2, InferConvGradData, nullptr, cpu::ConvGradData, SbpConvGradData, PhysicalConvGradData},
    {"ConvGradWeight", false, 2, 2, InferConvGradWeight, nullptr, cpu::ConvGradWeight, SbpConvGradWeight, PhysicalConvGradWeight},
    {"MaxPoolGrad", false, 2, 2, InferPoolGrad, nullptr, cpu::MaxPoolGrad, SbpMaxPoolGrad, nullptr},
    {"AveragePoolGrad", false, 1, 1, InferPoolGrad, nullptr, cpu::AveragePoolGrad, SbpPool, PhysicalConvGradData},
    {"GatherNDGrad", false, 2, 2, InferGatherNDGrad, nullptr, cpu::GatherNDGrad, SbpGatherNDGrad, PhysicalGatherGrad},
    {"GatherElementsGrad", false, 2, 2, InferGatherElementsGrad, nullptr, cpu::GatherElementsGrad, SbpGatherElementsGrad, PhysicalGatherGrad},
    {"PadGrad", false, 1, 1, InferPadGrad, nullptr, cpu::PadGrad, SbpPad, nullptr},
    {"Gelu", false, 1, 2, InferGelu, GradGelu, cpu::Gelu, SbpGelu, nullptr},
    {"GeluGrad", false, 2, 3, InferGeluGrad, nullptr, cpu::GeluGrad, SbpGeluGrad, nullptr},
    {"MaskedSoftmax", false, 1, 2, InferMaskedSoftmax, GradMaskedSoftmax, cpu::MaskedSoftmax, SbpMaskedSoftmax, nullptr},
    {"MaskedSoftmaxGrad", false, 2, 3, InferMaskedSoftmaxGrad, nullptr, cpu::MaskedSoftmaxGrad, SbpMaskedSoftmaxGrad, nullptr},
    {"RMSNorm", false, 2, 2, InferRMSNorm, GradRMSNorm, cpu::RMSNorm, SbpRMSNorm, nullptr},
    {"RMSNormGrad", false, 4, 4, InferRMSNormGrad, nullptr, cpu::RMSNormGrad, SbpRMSNormGrad, nullptr},
    {"Silu", false, 1, 1, InferFloatUnary, GradSilu, cpu::Silu, SbpActivation, nullptr},
    {"SiluGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::SiluGrad, SbpActivationGrad, nullptr},
    {"CrossEntropy", false, 2, 2, InferCrossEntropy, GradCrossEntropy, cpu::CrossEntropy, SbpCrossEntropy, PhysicalCrossEntropy},
    {"CrossEntropyGrad", false, 3, 3, InferLossGrad, nullptr, cpu::CrossEntropyGrad, SbpLossGrad, PhysicalCrossEntropy},
    {"Mse", false, 2, 2, InferMse, GradMse, cpu::Mse, SbpMse, PhysicalMse},
    {"MseGrad", false, 3, 3, InferLossGrad, nullptr, cpu::MseGrad, SbpLossGrad, PhysicalMse},
    {"Accumulate", false, 1, 1, InferAccumulate, nullptr, cpu::Accumulate, SbpAccumulate, nullptr},
    {"SquareSum", false, 1, 1, InferScalar, nullptr, cpu::SquareSum, SbpSquareSum, nullptr},
    {"AddN", false, 1, kMany, InferScalar, nullptr, cpu::AddN, SbpAddN, nullptr},
    {"ClipCoef", false, 1, 1, InferScalar, nullptr, cpu::ClipCoef, SbpClipCoef, nullptr},
    {"SgdUpdate", false, 2, 3, InferSgdUpdate, nullptr, cpu::SgdUpdate, SbpUpdate, nullptr},
    {"AdamWUpdate", false, 2, 3, InferAdamWUpdate, nullptr, cpu::AdamWUpdate, SbpUpdate, nullptr},
}};

// The rows must follow FR_OPS, one for one.
constexpr bool NamesMatch() {
  constexpr std::array<std::string_view, kNumOps> names = {
#define FR_OP_NAME(name, onnx) #name,
      FR_OPS(FR_OP_NAME)
#undef FR_OP_NAME
  };
  for (int i = 0; i < kNumOps; ++i)
    if (names[static_cast<size_t>(i)] != std::string_view(kTable[static_cast<size_t>(i)].name)) return false;
  return true;
}
static_assert(NamesMatch(), "ops/registry.cpp: the table's rows must follow FR_OPS in graph/op_kind.h");

// Every op has an SBP rule: checked by tests/ops (Ops.EveryOpHasAnSbpRule), not by a static_assert,
// which GCC's UBSan (-fsanitize=null) cannot evaluate on function pointers.

}  // namespace

const OpDef& Def(OpKind k) { return kTable[static_cast<size_t>(k)]; }

std::optional<OpKind> OnnxOp(std::string_view op_type) {
  for (int i = 0; i < kNumOps; ++i)
    if (kTable[static_cast<size_t>(i)].onnx && op_type == kTable[static_cast<size_t>(i)].name) return OpKind(i);
  return std::nullopt;
}

std::string SupportedOnnxOps() {
  std::vector<std::string> names;
  for (const OpDef& d : kTable)
    if (d.onnx) names.push_back(d.name);
  std::sort(names.begin(), names.end());
  std::string s;
  for (const auto& n : names) s += (s.empty() ? "" : ", ") + n;
  return s;
}

KernelFn Kernel(OpKind k, DeviceType d) {
  const Backend* b = BackendOf(d);
  const DeviceType kernels = b ? b->kernels() : d;  // a device on host memory (sim) runs the CPU's
  return kernels == DeviceType::kCpu ? Def(k).cpu : cuda::KernelFor(k);
}

namespace {

// A CPU group kernel: the member kernels one after another.
template <KernelFn f>
Status EachMember(std::span<const KernelCtx> members) {
  for (const KernelCtx& c : members) RETURN_IF_ERROR(f(c));
  return Status::Ok();
}

}  // namespace

GroupKernelFn GroupKernel(OpKind k, DeviceType d) {
  if (k != OpKind::kSgdUpdate && k != OpKind::kAdamWUpdate) return nullptr;
  const Backend* b = BackendOf(d);
  if ((b ? b->kernels() : d) != DeviceType::kCpu) return cuda::GroupKernelFor(k);
  return k == OpKind::kSgdUpdate ? EachMember<cpu::SgdUpdate> : EachMember<cpu::AdamWUpdate>;
}

}  // namespace fr
