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
    {"Gemm", true, 2, 3, InferGemm, GradGemm, cpu::Gemm},
    {"MatMul", true, 2, 2, InferMatMul, GradMatMul, cpu::MatMul},
    {"Add", true, 2, 2, InferBinary, GradAdd, cpu::Add},
    {"Sub", true, 2, 2, InferBinary, GradSub, cpu::Sub},
    {"Mul", true, 2, 2, InferBinary, GradMul, cpu::Mul},
    {"Div", true, 2, 2, InferBinary, GradDiv, cpu::Div},
    {"Relu", true, 1, 1, InferFloatUnary, GradRelu, cpu::Relu},
    {"Tanh", true, 1, 1, InferFloatUnary, GradTanh, cpu::Tanh},
    {"Sigmoid", true, 1, 1, InferFloatUnary, GradSigmoid, cpu::Sigmoid},
    {"Erf", true, 1, 1, InferFloatUnary, GradErf, cpu::Erf},
    {"Softmax", true, 1, 1, InferSoftmax, GradSoftmax, cpu::Softmax},
    {"LogSoftmax", true, 1, 1, InferSoftmax, GradLogSoftmax, cpu::LogSoftmax},
    {"LayerNormalization", true, 2, 3, InferLayerNorm, GradLayerNorm, cpu::LayerNormalization},
    {"Reshape", true, 1, 1, InferReshape, GradReshape, cpu::Reshape},
    {"Transpose", true, 1, 1, InferTranspose, GradTranspose, cpu::Transpose},
    {"ReluGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::ReluGrad},
    {"TanhGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::TanhGrad},
    {"SigmoidGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::SigmoidGrad},
    {"ErfGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::ErfGrad},
    {"SoftmaxGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::SoftmaxGrad},
    {"LogSoftmaxGrad", false, 2, 2, InferFloatBinarySameShape, nullptr, cpu::LogSoftmaxGrad},
    {"LayerNormGrad", false, 5, 5, InferLayerNormGrad, nullptr, cpu::LayerNormGrad},
    {"SumTo", false, 1, 1, InferSumTo, nullptr, cpu::SumTo},
    {"Scale", false, 1, 1, InferFloatUnary, GradScale, cpu::Scale},
    {"CrossEntropy", false, 2, 2, InferCrossEntropy, GradCrossEntropy, cpu::CrossEntropy},
    {"CrossEntropyGrad", false, 3, 3, InferLossGrad, nullptr, cpu::CrossEntropyGrad},
    {"Mse", false, 2, 2, InferMse, GradMse, cpu::Mse},
    {"MseGrad", false, 3, 3, InferLossGrad, nullptr, cpu::MseGrad},
    {"Accumulate", false, 1, 1, InferAccumulate, nullptr, cpu::Accumulate},
    {"SquareSum", false, 1, 1, InferScalar, nullptr, cpu::SquareSum},
    {"AddN", false, 1, kMany, InferScalar, nullptr, cpu::AddN},
    {"ClipCoef", false, 1, 1, InferScalar, nullptr, cpu::ClipCoef},
    {"SgdUpdate", false, 2, 3, InferSgdUpdate, nullptr, cpu::SgdUpdate},
    {"AdamWUpdate", false, 2, 3, InferAdamWUpdate, nullptr, cpu::AdamWUpdate},
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
static_assert(NamesMatch(), "ops/registry.cpp: the table's rows must follow FR_OPS in ops/op_kind.h");

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
  return d == DeviceType::kCpu ? Def(k).cpu : cuda::KernelFor(k);
}

}  // namespace fr
