// Shape inference and gradient rules of every op, defined in the family files of src/ops/
// (elementwise, matmul, nn, shape, loss, optim) and put into the table in ops/registry.cpp.
#pragma once

#include "ops/op.h"

namespace fr::defs {

using Types = std::span<const ir::TensorType>;
using Out = Result<std::vector<ir::TensorType>>;

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

// matmul.cpp
Out InferGemm(const ir::Node& n, Types in);
Out InferMatMul(const ir::Node& n, Types in);
void GradGemm(GradCtx& c);
void GradMatMul(GradCtx& c);

// nn.cpp
Out InferSoftmax(const ir::Node& n, Types in);
Out InferLayerNorm(const ir::Node& n, Types in);
Out InferLayerNormGrad(const ir::Node& n, Types in);
void GradSoftmax(GradCtx& c);
void GradLogSoftmax(GradCtx& c);
void GradLayerNorm(GradCtx& c);

// shape.cpp
Out InferReshape(const ir::Node& n, Types in);
Out InferTranspose(const ir::Node& n, Types in);
void GradReshape(GradCtx& c);
void GradTranspose(GradCtx& c);

// loss.cpp
Out InferCrossEntropy(const ir::Node& n, Types in);
Out InferMse(const ir::Node& n, Types in);
Out InferLossGrad(const ir::Node& n, Types in);
void GradCrossEntropy(GradCtx& c);
void GradMse(GradCtx& c);

// optim.cpp
Out InferAccumulate(const ir::Node& n, Types in);
Out InferScalar(const ir::Node& n, Types in);
Out InferSgdUpdate(const ir::Node& n, Types in);
Out InferAdamWUpdate(const ir::Node& n, Types in);

}  // namespace fr::defs
