// Reverse-mode automatic differentiation on the logical Graph.
//
// Backward appends, after the existing nodes, the nodes that compute d(loss)/d(w) for every w in
// `wrt`, seeded with d(loss) = `seed` (a scalar value). It walks the forward nodes in reverse,
// calling each op's gradient rule (ops/*.cpp) for the nodes on a path from `wrt` to `loss`, and
// sums gradients that reach a value along several paths. Only float32 values carry gradients.
// Returns the gradient of each element of `wrt`, kNoValue where the loss does not depend on it.
#pragma once

#include <vector>

#include "graph/graph.h"
#include "ops/op.h"

namespace fr::ir {

Result<std::vector<ValueId>> Backward(Builder& b, ValueId loss, ValueId seed, const std::vector<ValueId>& wrt);

}  // namespace fr::ir
