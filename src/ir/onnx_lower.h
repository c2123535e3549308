// Lowering ONNX nodes to flowrun ops whose shape-deciding values are attributes, so that shape
// inference never reads tensor data. Those values come from ONNX inputs that must be constants
// once the graph inputs' shapes are bound (shape arithmetic folds to constants before):
//   Reshape, Flatten, Squeeze, Unsqueeze  one Reshape, target `shape` resolved (0 and -1 included)
//   Split                                 `split` sizes (the input, or the equal split)
//   Slice                                 per-axis `starts`, `ends`, `steps`, normalised as ONNX says
//   Expand                                `shape`;  Trilu: `k`
//   ConstantOfShape                       `shape`, `value`, `dtype` (its tensor attribute read)
//   Range                                 its length `size` (inputs kept: the kernel fills values)
//   Cast                                  `dtype`, flowrun's, for ONNX's `to`
//   ReduceSum, ReduceMean, ReduceMax      `axes` (input or attribute by opset), `keepdims`
//   Clip                                  `min`, `max` where given
//   Conv, MaxPool, AveragePool            `kernel`, `strides`, `dilations`, `pads` (auto_pad resolved)
//   GlobalAveragePool                     a ReduceMean over the spatial axes, kept
//   Tile                                  `repeats`;  Pad: `pads` over every axis, `value`
// An input that must be constant and is not, or a value out of range, is an error naming the node.
#pragma once

#include <functional>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "onnx/onnx_pb.h"

namespace fr::ir {

// The node being imported, its graph so far, and how to word errors about it.
struct OnnxNodeCtx {
  const onnx::NodeProto& proto;
  const Graph& graph;
  std::string what;                                   // "[onnx] FILE: node 'NAME'", to prefix errors
  std::function<Status(const std::string&)> error;    // the importer's message for this node
};

// The static target shape of a Reshape, Flatten, Squeeze or Unsqueeze of ins[0].
Result<std::vector<int64_t>> ReshapeTarget(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, const Attrs& a);

// Moves the constant inputs of a node of kind k into attributes as the table above says, and drops
// the inputs the op then no longer reads. Nodes of other kinds are left as they are.
Status LowerOnnxNode(const OnnxNodeCtx& c, OpKind k, std::vector<ValueId>& ins, Attrs& a);

}  // namespace fr::ir
