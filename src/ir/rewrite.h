// Graph rewrites after ONNX import, before the training graph: an exporter spells some layers as
// chains of small ops, and fuses what parallelism would rather see apart. Each rewrite matches one
// exact pattern whose intermediate tensors have no consumer outside it, and leaves everything else
// alone; the rewritten graph computes the same values (to float rounding).
//
//   1. Split projections, where RewriteOptions::split says so. MatMul(A, W) [+ Add(bias)] whose
//      output feeds only a Split along its last axis (a transformer's fused QKV projection) becomes
//      one MatMul [+ Add] per part, W and the bias cut into parameters of their own (the optimizer
//      math is elementwise: nothing changes). Tensor parallelism can then split each part by its
//      features (q, k and v by heads), where a split of the fused features would cut across them.
//      It only pays then: on one device the smaller matrix products cost time.
//      Parts are named NAME[i] and remember the name they came from (Node::split_from,
//      Value::split_from): a hint naming the fused node or parameter applies to every part.
//   2. Bias and GELU. Add(X, bias) -> Div(., c) -> Erf -> Add(., 1) -> Mul(with the Add's output) ->
//      Mul(., 0.5), as PyTorch exports an erf GELU after a linear layer, becomes Gelu(X, bias)
//      (ops/fused.cpp). Without a parameter bias add before it, or when something else reads the
//      add's output, Gelu(H) of the GELU alone. The tanh form, 0.5 H (1 + Tanh(Mul(Add(H,
//      Mul(H^3, 0.044715)), sqrt(2/pi)))) in the orders GPT-2's NewGELU and F.gelu(approximate=
//      "tanh") export (rewrite.cpp), becomes Gelu with tanh=1 (and its bias the same way), only
//      with exactly those constants, the kernels' own.
//      Either form fuses only where the chain's output has H's shape (RMSNorm's likewise X's).
//   3. Scaled, masked softmax. Mul or Div by a scalar constant -> Where(constant bool mask, scalar
//      constant fill, .) (either branch) -> Softmax on the last axis becomes MaskedSoftmax; one of
//      the first two may be missing. So does Add(S, M) -> Softmax with M an additive mask, a
//      constant of 0 and one value <= -1e30 with a 0 in every row, as scaled_dot_product_attention
//      exports (rewrite.cpp says why that is the same softmax).
//   4. RMSNorm. Pow(X, 2) -> ReduceMean(last axis, keepdims) -> Add(eps) -> Sqrt -> Reciprocal or
//      Div(1, .) -> Mul(X, .) [-> Cast to float] -> Mul(scale [D]), as Llama's RMSNorm exports,
//      becomes RMSNorm(X, scale) (ops/nn.cpp): one pass over X for the forward, one kernel for the
//      backward, and the statistic kept for it.
//   5. SiLU. Mul(X, Sigmoid(X)) (either order), the sigmoid read by nothing else, becomes Silu(X)
//      (ops/fused.cpp): one pass forward, one backward, and only X kept for it.
#pragma once

#include <functional>

#include "base/status.h"
#include "graph/graph.h"

namespace fr::ir {

// What the rewrites did, for tests and dumps.
struct RewriteCounts {
  int split_projections = 0, gelus = 0, softmaxes = 0, rms_norms = 0, silus = 0;
};

struct RewriteOptions {
  // Whether to split the fused projection `matmul` (reading `weight`, adding `bias` or kNoValue).
  std::function<bool(const Node& matmul, ValueId weight, ValueId bias)> split;
};

RewriteCounts Rewrite(Graph& g, const RewriteOptions& o = {});

}  // namespace fr::ir
