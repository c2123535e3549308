// Shape inference and gradient rules of every op, defined in the family files of src/ops/
// (elementwise, matmul, nn, shape, loss, optim) and put into the table in ops/registry.cpp.
#pragma once

#include <algorithm>

#include "ops/op.h"

namespace fr::defs {

using Types = std::span<const ir::TensorType>;
using Out = Result<std::vector<ir::TensorType>>;
using Sigs = std::vector<sbp::Signature>;
using Starts = std::span<const int64_t>;  // OpDef::physical: where output 0's piece starts
using sbp::Sbp;

// ---- Helpers for the SBP rules (OpDef::sbp). ----

// Whether optional input i is there.
inline bool Present(const ir::Node& n, size_t i) { return i < n.in.size() && n.in[i] != ir::kNoValue; }
// A `parts`-way split of `dim` gives every device at least one element (as sbp::Check requires).
inline bool Splits(int64_t dim, int64_t parts) { return dim >= parts; }
// The signature with `s` on every input and output.
inline sbp::Signature Uniform(const ir::Node& n, size_t outs, Sbp s) {
  return sbp::Signature{std::vector<Sbp>(n.in.size(), s), std::vector<Sbp>(outs, s)};
}
// Appends g unless it is already there.
inline void AddSig(Sigs& s, sbp::Signature g) {
  if (std::find(s.begin(), s.end(), g) == s.end()) s.push_back(std::move(g));
}
// Sbp of an input of shape `in` when the output of rank `out_rank` is split on axis i, with numpy
// alignment from the right: S on the aligned axis, B where the input is broadcast along i.
inline Sbp AlignedSplit(const Shape& in, int out_rank, int i) {
  int a = i - (out_rank - in.rank());
  return a >= 0 && in[a] != 1 ? Sbp::S(a) : Sbp::B();
}

// elementwise.cpp
Out InferBinary(const ir::Node& n, Types in);
Out InferFloatUnary(const ir::Node& n, Types in);
Out InferFloatBinarySameShape(const ir::Node& n, Types in);
Out InferSumTo(const ir::Node& n, Types in);
void GradAdd(GradCtx& c);
void GradSub(GradCtx& c);
void GradMul(GradCtx& c);
void GradDiv(GradCtx& c);
void GradRelu(GradCtx& c);
void GradTanh(GradCtx& c);
void GradSigmoid(GradCtx& c);
void GradErf(GradCtx& c);
void GradScale(GradCtx& c);
Sigs SbpBinary(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpActivation(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpScale(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpActivationGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSumTo(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalSumTo(ir::Node& n, Types logical_in, Types physical_out, Starts);
Out InferWhere(const ir::Node& n, Types in);
Out InferEqual(const ir::Node& n, Types in);
Out InferLogical(const ir::Node& n, Types in);
Out InferCast(const ir::Node& n, Types in);
Out InferTrilu(const ir::Node& n, Types in);
void GradWhere(GradCtx& c);
void GradCast(GradCtx& c);
void GradTrilu(GradCtx& c);
Sigs SbpWhere(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpEqual(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpCast(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpTrilu(const ir::Node& n, Types in, Types out, int64_t parts);
// The splits every broadcasting elementwise op has: for each output axis, every input on its
// aligned axis, or B where it is broadcast along it (absent inputs stay B); and all-B.
Sigs BroadcastSplits(const ir::Node& n, Types in, Types out, int64_t parts);

// math.cpp
Out InferNeg(const ir::Node& n, Types in);
Out InferPow(const ir::Node& n, Types in);
Out InferIsNaN(const ir::Node& n, Types in);
Out InferClip(const ir::Node& n, Types in);
Out InferReduce(const ir::Node& n, Types in);
Out InferReduceMaxGrad(const ir::Node& n, Types in);
void GradSqrt(GradCtx& c);
void GradReciprocal(GradCtx& c);
void GradNeg(GradCtx& c);
void GradExp(GradCtx& c);
void GradLog(GradCtx& c);
void GradAbs(GradCtx& c);
void GradSign(GradCtx& c);
void GradSin(GradCtx& c);
void GradCos(GradCtx& c);
void GradPow(GradCtx& c);
void GradClip(GradCtx& c);
void GradReduceSumMean(GradCtx& c);
void GradReduceMax(GradCtx& c);
Sigs SbpNeg(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpPow(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpClipGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpReduce(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpReduceMaxGrad(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalReduceMean(ir::Node& n, Types logical_in, Types physical_out, Starts);
Out InferDropout(const ir::Node& n, Types in);
void GradDropout(GradCtx& c);
void PhysicalDropout(ir::Node& n, Types logical_in, Types physical_out, Starts start);

// conv.cpp
Out InferConv(const ir::Node& n, Types in);
Out InferConvGradData(const ir::Node& n, Types in);
Out InferConvGradWeight(const ir::Node& n, Types in);
Out InferPool(const ir::Node& n, Types in);
Out InferPoolGrad(const ir::Node& n, Types in);
void GradConv(GradCtx& c);
void GradMaxPool(GradCtx& c);
void GradAveragePool(GradCtx& c);
Sigs SbpConv(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpConvGradData(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpConvGradWeight(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpPool(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpMaxPoolGrad(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalConvGradData(ir::Node& n, Types logical_in, Types physical_out, Starts);
void PhysicalConvGradWeight(ir::Node& n, Types logical_in, Types physical_out, Starts);

// index.cpp
Out InferTile(const ir::Node& n, Types in);
// Pad's modes (attribute "mode").
inline constexpr int64_t kPadConstant = 0, kPadReflect = 1, kPadEdge = 2, kPadWrap = 3;
Out InferPad(const ir::Node& n, Types in);
Out InferPadGrad(const ir::Node& n, Types in);
Out InferGatherElements(const ir::Node& n, Types in);
Out InferGatherElementsGrad(const ir::Node& n, Types in);
void GradTile(GradCtx& c);
void GradPad(GradCtx& c);
void GradGatherElements(GradCtx& c);
Sigs SbpTile(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpPad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpGatherElements(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpGatherElementsGrad(const ir::Node& n, Types in, Types out, int64_t parts);

// fused.cpp
Out InferGelu(const ir::Node& n, Types in);
Out InferGeluGrad(const ir::Node& n, Types in);
Out InferMaskedSoftmax(const ir::Node& n, Types in);
Out InferMaskedSoftmaxGrad(const ir::Node& n, Types in);
void GradGelu(GradCtx& c);
void GradSilu(GradCtx& c);
void GradMaskedSoftmax(GradCtx& c);
Sigs SbpGelu(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpGeluGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpMaskedSoftmax(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpMaskedSoftmaxGrad(const ir::Node& n, Types in, Types out, int64_t parts);

// matmul.cpp
Out InferGemm(const ir::Node& n, Types in);
Out InferMatMul(const ir::Node& n, Types in);
void GradGemm(GradCtx& c);
void GradMatMul(GradCtx& c);
Sigs SbpGemm(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpMatMul(const ir::Node& n, Types in, Types out, int64_t parts);

// nn.cpp
Out InferSoftmax(const ir::Node& n, Types in);
Out InferLayerNorm(const ir::Node& n, Types in);
Out InferLayerNormGrad(const ir::Node& n, Types in);
void GradSoftmax(GradCtx& c);
void GradLogSoftmax(GradCtx& c);
void GradLayerNorm(GradCtx& c);
Sigs SbpSoftmax(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSoftmaxGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpLayerNorm(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpLayerNormGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Out InferRMSNorm(const ir::Node& n, Types in);
Out InferRMSNormGrad(const ir::Node& n, Types in);
void GradRMSNorm(GradCtx& c);
Sigs SbpRMSNorm(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpRMSNormGrad(const ir::Node& n, Types in, Types out, int64_t parts);

// shape.cpp
Out InferReshape(const ir::Node& n, Types in);
Out InferTranspose(const ir::Node& n, Types in);
void GradReshape(GradCtx& c);
void GradTranspose(GradCtx& c);
Sigs SbpReshape(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpTranspose(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalReshape(ir::Node& n, Types logical_in, Types physical_out, Starts);
Out InferGather(const ir::Node& n, Types in);
Out InferGatherGrad(const ir::Node& n, Types in);
Out InferConcat(const ir::Node& n, Types in);
Out InferScatterND(const ir::Node& n, Types in);
void GradScatterND(GradCtx& c);
Sigs SbpScatterND(const ir::Node& n, Types in, Types out, int64_t parts);
Out InferGatherND(const ir::Node& n, Types in);
Out InferGatherNDGrad(const ir::Node& n, Types in);
void GradGatherND(GradCtx& c);
Sigs SbpGatherND(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpGatherNDGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Out InferSplit(const ir::Node& n, Types in);
Out InferSlice(const ir::Node& n, Types in);
Out InferSliceGrad(const ir::Node& n, Types in);
Out InferExpand(const ir::Node& n, Types in);
Out InferShape(const ir::Node& n, Types in);
Out InferConstantOfShape(const ir::Node& n, Types in);
Out InferRange(const ir::Node& n, Types in);
void GradGather(GradCtx& c);
void GradConcat(GradCtx& c);
void GradSplit(GradCtx& c);
void GradSlice(GradCtx& c);
void GradExpand(GradCtx& c);
Sigs SbpGather(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpGatherGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpConcat(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSplit(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSlice(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSliceGrad(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpExpand(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpFoldOnly(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalGatherGrad(ir::Node& n, Types logical_in, Types physical_out, Starts);
void PhysicalSlice(ir::Node& n, Types logical_in, Types physical_out, Starts);
void PhysicalSliceGrad(ir::Node& n, Types logical_in, Types physical_out, Starts);
void PhysicalExpand(ir::Node& n, Types logical_in, Types physical_out, Starts);

// loss.cpp
Out InferCrossEntropy(const ir::Node& n, Types in);
Out InferMse(const ir::Node& n, Types in);
Out InferLossGrad(const ir::Node& n, Types in);
void GradCrossEntropy(GradCtx& c);
void GradMse(GradCtx& c);
Sigs SbpCrossEntropy(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpMse(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpLossGrad(const ir::Node& n, Types in, Types out, int64_t parts);
void PhysicalCrossEntropy(ir::Node& n, Types logical_in, Types physical_out, Starts);
void PhysicalMse(ir::Node& n, Types logical_in, Types physical_out, Starts);

// optim.cpp
Out InferAccumulate(const ir::Node& n, Types in);
Out InferScalar(const ir::Node& n, Types in);
Out InferSgdUpdate(const ir::Node& n, Types in);
Out InferAdamWUpdate(const ir::Node& n, Types in);
Sigs SbpAccumulate(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpSquareSum(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpAddN(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpClipCoef(const ir::Node& n, Types in, Types out, int64_t parts);
Sigs SbpUpdate(const ir::Node& n, Types in, Types out, int64_t parts);

}  // namespace fr::defs
