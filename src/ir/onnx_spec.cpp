#include "ir/onnx_spec.h"

#include <algorithm>
#include <initializer_list>
#include <limits>
#include <unordered_map>
#include <vector>

namespace fr::ir {
namespace {

using A = onnx::AttributeProto;
constexpr int kAny = std::numeric_limits<int>::max();

struct AttrSpec {
  const char* name;
  A::AttributeType type;
  bool required = false;
  int64_t since = 0;  // the first opset that has it
};

struct OpSpec {
  int min_in, max_in, min_out, max_out;
  std::vector<AttrSpec> attrs;
  int64_t since = 0;  // the first opset that has the op
};

const char* TypeName(A::AttributeType t) {
  switch (t) {
    case A::FLOAT: return "a float";
    case A::INT: return "an int";
    case A::STRING: return "a string";
    case A::TENSOR: return "a tensor";
    case A::FLOATS: return "floats";
    case A::INTS: return "ints";
    default: return "a type flowrun does not read";
  }
}

const std::unordered_map<std::string_view, OpSpec>& Specs() {
  static const auto* specs = new std::unordered_map<std::string_view, OpSpec>{
      {"Gemm", {2, 3, 1, 1, {{"alpha", A::FLOAT}, {"beta", A::FLOAT}, {"transA", A::INT}, {"transB", A::INT}}}},
      {"MatMul", {2, 2, 1, 1, {}}},
      {"Add", {2, 2, 1, 1, {}}},
      {"Sub", {2, 2, 1, 1, {}}},
      {"Mul", {2, 2, 1, 1, {}}},
      {"Div", {2, 2, 1, 1, {}}},
      {"Relu", {1, 1, 1, 1, {}}},
      {"Tanh", {1, 1, 1, 1, {}}},
      {"Sigmoid", {1, 1, 1, 1, {}}},
      {"Erf", {1, 1, 1, 1, {}}},
      {"Gelu", {1, 1, 1, 1, {{"approximate", A::STRING}}, 20}},
      {"Sqrt", {1, 1, 1, 1, {}}},
      {"Reciprocal", {1, 1, 1, 1, {}}},
      {"Neg", {1, 1, 1, 1, {}}},
      {"Exp", {1, 1, 1, 1, {}}},
      {"Log", {1, 1, 1, 1, {}}},
      {"Abs", {1, 1, 1, 1, {}}},
      {"Sign", {1, 1, 1, 1, {}}},
      {"Sin", {1, 1, 1, 1, {}}},
      {"Cos", {1, 1, 1, 1, {}}},
      {"Pow", {2, 2, 1, 1, {}}},
      {"Clip", {1, 3, 1, 1, {}}},
      {"IsNaN", {1, 1, 1, 1, {}}},
      // axes: an input from opset 13 for ReduceSum, from 18 for the others (onnx_lower.cpp).
      {"ReduceSum", {1, 2, 1, 1, {{"keepdims", A::INT}, {"noop_with_empty_axes", A::INT}}}},
      {"ReduceMean", {1, 2, 1, 1, {{"axes", A::INTS}, {"keepdims", A::INT}, {"noop_with_empty_axes", A::INT, false, 18}}}},
      {"ReduceMax", {1, 2, 1, 1, {{"axes", A::INTS}, {"keepdims", A::INT}, {"noop_with_empty_axes", A::INT, false, 18}}}},
      {"Conv", {2, 3, 1, 1, {{"auto_pad", A::STRING}, {"dilations", A::INTS}, {"group", A::INT}, {"kernel_shape", A::INTS},
                             {"pads", A::INTS}, {"strides", A::INTS}}}},
      {"MaxPool", {1, 1, 1, 2, {{"auto_pad", A::STRING}, {"ceil_mode", A::INT}, {"dilations", A::INTS},
                                {"kernel_shape", A::INTS, true}, {"pads", A::INTS}, {"storage_order", A::INT}, {"strides", A::INTS}}}},
      {"AveragePool", {1, 1, 1, 1, {{"auto_pad", A::STRING}, {"ceil_mode", A::INT}, {"count_include_pad", A::INT},
                                    {"dilations", A::INTS, false, 19}, {"kernel_shape", A::INTS, true}, {"pads", A::INTS},
                                    {"strides", A::INTS}}}},
      {"GlobalAveragePool", {1, 1, 1, 1, {}}},
      {"BatchNormalization", {5, 5, 1, 3, {{"epsilon", A::FLOAT}, {"momentum", A::FLOAT}, {"training_mode", A::INT, false, 14}}}},
      {"Softmax", {1, 1, 1, 1, {{"axis", A::INT}}}},
      {"LogSoftmax", {1, 1, 1, 1, {{"axis", A::INT}}}},
      {"LayerNormalization", {2, 3, 1, 3, {{"axis", A::INT}, {"epsilon", A::FLOAT}, {"stash_type", A::INT}}}},
      {"Reshape", {2, 2, 1, 1, {{"allowzero", A::INT}}}},
      {"Flatten", {1, 1, 1, 1, {{"axis", A::INT}}}},
      {"Squeeze", {1, 2, 1, 1, {}}},
      {"Unsqueeze", {2, 2, 1, 1, {}}},
      {"Transpose", {1, 1, 1, 1, {{"perm", A::INTS}}}},
      {"Gather", {2, 2, 1, 1, {{"axis", A::INT}}}},
      {"GatherND", {2, 2, 1, 1, {{"batch_dims", A::INT}}}},
      {"ScatterND", {3, 3, 1, 1, {{"reduction", A::STRING, false, 16}}}},
      {"GatherElements", {2, 2, 1, 1, {{"axis", A::INT}}}},
      {"Tile", {2, 2, 1, 1, {}}},
      {"Pad", {2, 4, 1, 1, {{"mode", A::STRING}}}},
      {"Concat", {1, kAny, 1, 1, {{"axis", A::INT, true}}}},
      {"Split", {1, 2, 1, kAny, {{"axis", A::INT}, {"num_outputs", A::INT, false, 18}}}},
      {"Slice", {3, 5, 1, 1, {}}},
      {"Expand", {2, 2, 1, 1, {}}},
      {"Where", {3, 3, 1, 1, {}}},
      // saturate (19) only changes casts to float8, which flowrun has not.
      {"Cast", {1, 1, 1, 1, {{"to", A::INT, true}, {"saturate", A::INT, false, 19}}}},
      {"Trilu", {1, 2, 1, 1, {{"upper", A::INT}}}},
      {"Shape", {1, 1, 1, 1, {{"start", A::INT}, {"end", A::INT}}}},
      {"Equal", {2, 2, 1, 1, {}}},
      {"Less", {2, 2, 1, 1, {}}},
      {"LessOrEqual", {2, 2, 1, 1, {}}},
      {"Greater", {2, 2, 1, 1, {}}},
      {"GreaterOrEqual", {2, 2, 1, 1, {}}},
      {"And", {2, 2, 1, 1, {}}},
      {"Or", {2, 2, 1, 1, {}}},
      {"Not", {1, 1, 1, 1, {}}},
      {"ConstantOfShape", {1, 1, 1, 1, {{"value", A::TENSOR}}}},
      {"Range", {3, 3, 1, 1, {}}},
      {"Identity", {1, 1, 1, 1, {}}},
      {"Dropout", {1, 3, 1, 2, {{"seed", A::INT}}}},
      // Exactly one of these; the importer reads which.
      {"Constant", {0, 0, 1, 1, {{"value", A::TENSOR}, {"value_float", A::FLOAT}, {"value_floats", A::FLOATS},
                                 {"value_int", A::INT}, {"value_ints", A::INTS}}}},
  };
  return *specs;
}

std::string Count(int min, int max, const char* what) {
  if (max == kAny) return "at least " + std::to_string(min) + " " + what;
  if (min == max) return std::to_string(min) + " " + what;
  return std::to_string(min) + " to " + std::to_string(max) + " " + what;
}

}  // namespace

std::string CheckOnnxNode(const onnx::NodeProto& n, int64_t opset) {
  auto it = Specs().find(n.op_type());
  if (it == Specs().end()) return "";
  const OpSpec& s = it->second;
  if (opset < s.since) return n.op_type() + " is an op of opset " + std::to_string(s.since) + " and later";
  if (n.input_size() < s.min_in || n.input_size() > s.max_in) {
    return "has " + std::to_string(n.input_size()) + " inputs; " + n.op_type() + " takes " + Count(s.min_in, s.max_in, "inputs");
  }
  if (n.output_size() < s.min_out || n.output_size() > s.max_out) {
    return "has " + std::to_string(n.output_size()) + " outputs; " + n.op_type() + " gives " + Count(s.min_out, s.max_out, "outputs");
  }
  if (n.output(0).empty()) return "its first output has no name";
  for (int i = 0; i < n.input_size(); ++i) {
    // Only optional inputs may be left out (""): those past the op's required ones.
    if (n.input(i).empty() && i < s.min_in) return "input " + std::to_string(i) + " has no name but is required";
  }
  std::vector<bool> seen(s.attrs.size(), false);
  for (const A& a : n.attribute()) {
    size_t k = 0;
    while (k < s.attrs.size() && a.name() != s.attrs[k].name) ++k;
    if (k == s.attrs.size()) return "attribute '" + a.name() + "' is not supported for " + n.op_type();
    if (opset < s.attrs[k].since) {
      return "attribute '" + a.name() + "' of " + n.op_type() + " exists from opset " + std::to_string(s.attrs[k].since);
    }
    if (seen[k]) return "attribute '" + a.name() + "' is given twice";
    seen[k] = true;
    if (a.type() != s.attrs[k].type) {
      return "attribute '" + a.name() + "' is " + TypeName(a.type()) + " but must be " + TypeName(s.attrs[k].type);
    }
  }
  for (size_t k = 0; k < s.attrs.size(); ++k) {
    if (s.attrs[k].required && !seen[k]) return "attribute '" + std::string(s.attrs[k].name) + "' is required";
  }
  if (n.op_type() == "Constant" && n.attribute_size() != 1) return "a Constant must have exactly one value attribute";
  return "";
}

std::vector<OnnxOpType> ImportedOnnxOps(int64_t min_opset) {
  std::vector<OnnxOpType> out;
  for (const auto& [name, spec] : Specs()) out.push_back({std::string(name), std::max(min_opset, spec.since)});
  std::sort(out.begin(), out.end(), [](const OnnxOpType& a, const OnnxOpType& b) { return a.name < b.name; });
  return out;
}

}  // namespace fr::ir
