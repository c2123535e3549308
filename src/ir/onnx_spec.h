// What each ONNX op type flowrun imports may look like, from the ONNX operator specs (opsets
// 13-21): how many inputs and outputs a node has, which attributes of which type it may carry, and
// from which opset the op or an attribute exists (Split's num_outputs from 18, Gelu from 20).
// The importer checks every node against its row before reading anything of it, so that no later
// step (lowering, folding, shape inference, kernels) meets a node of the wrong arity or an
// attribute of the wrong type.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>
#include <vector>

#include "onnx/onnx_pb.h"

namespace fr::ir {

// Empty if the node fits its op type's spec (or the op type is not one flowrun imports: the
// importer reports that itself); else what is wrong, for a message that names the node.
std::string CheckOnnxNode(const onnx::NodeProto& n, int64_t opset);

// The op types flowrun imports, sorted by name, each with the first opset that has it (at least
// the first flowrun imports).
struct OnnxOpType {
  std::string name;
  int64_t since = 0;
};
std::vector<OnnxOpType> ImportedOnnxOps(int64_t min_opset);

}  // namespace fr::ir
