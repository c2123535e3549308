// The SBP rule of every op (OpDef::sbp, DESIGN.md §1), checked by evaluation. For each case below
// (an op, its attributes and representative logical inputs, uneven dims such as 5 and 7 included)
// and each mesh size n in {2, 3}, every signature the rule returns is run:
//   1. the logical inputs are cut into one piece per device by the input SBPs: S slices
//      (sbp::PieceRanges), B copies, P(sum) splits each value into random integer summands,
//      P(max)/P(min) into values below/above it with one exact;
//   2. each device runs the CPU kernel on its pieces with the node adjusted by OpDef::physical,
//      its outputs allocated at their pieces' shapes (which infer on the physical inputs must give);
//   3. the output pieces are combined by the output SBPs (S concatenates, B requires equal copies,
//      P reduces) and compared with the kernel's result on the logical inputs. An optimizer update
//      mutates in[0]: its pieces are combined by in[0]'s SBP and compared too.
// Values are small integers, so arithmetic ops are checked exactly; ops with exp, log, sqrt or
// division within 1e-5 relative to the largest magnitude of the result.
//
// Tests: SbpRule.<Op>_<case>_<n>d, one per case and mesh size, and SbpRule.* checks of the table.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <functional>
#include <random>
#include <set>
#include <sstream>
#include <string>
#include <utility>
#include <vector>

#include "ops/op.h"
#include "sbp/sbp.h"
#include "sbp/signature.h"

namespace fr {
namespace {

using sbp::Sbp;
using sbp::Signature;

// ---- Cases ----

enum class Fill { kInt, kNonZero, kPositive, kLabels, kBool, kValue, kAbsent, kRange };

struct In {
  Shape shape;
  Fill fill = Fill::kInt;
  DType dtype = DType::kF32;
  int64_t classes = 0;  // kLabels: values in [0, classes)
  double value = 0;     // kValue: every element
};
In F(Shape s, Fill f = Fill::kInt) { return In{std::move(s), f, DType::kF32, 0, 0}; }
In I64(Shape s, Fill f = Fill::kInt) { return In{std::move(s), f, DType::kI64, 0, 0}; }
In Labels(Shape s, int64_t classes) { return In{std::move(s), Fill::kLabels, DType::kI64, classes, 0}; }
In I64Range(Shape s) { return In{std::move(s), Fill::kRange, DType::kI64, 0, 0}; }  // 0, 1, 2...: distinct
In Bools(Shape s) { return In{std::move(s), Fill::kBool, DType::kBool, 0, 0}; }
In I64Value(double v) { return In{Shape{}, Fill::kValue, DType::kI64, 0, v}; }
In Absent() { return In{Shape{}, Fill::kAbsent, DType::kF32, 0, 0}; }

struct Case {
  OpKind op;
  std::string name;
  std::vector<In> in;
  ir::Attrs attrs;
  bool exact = true;  // false: 1e-5 relative
  int runs = 1;       // 2: step/micro-batch 0 then 1, for state carried between runs
};

ir::Attrs A(std::initializer_list<std::pair<const char*, ir::AttrValue>> kv) {
  ir::Attrs a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}
ir::Attrs ShapeAttr(std::vector<int64_t> d) { return A({{"shape", std::move(d)}}); }
ir::Attrs Axis(int64_t a) { return A({{"axis", a}}); }
ir::Attrs Ints(const char* k, std::vector<int64_t> v) { return A({{k, std::move(v)}}); }
ir::Attrs SliceAttrs(std::vector<int64_t> st, std::vector<int64_t> en, std::vector<int64_t> sp) {
  return A({{"starts", std::move(st)}, {"ends", std::move(en)}, {"steps", std::move(sp)}});
}
ir::Attrs With(ir::Attrs a, const char* k, ir::AttrValue v) {
  a.Set(k, std::move(v));
  return a;
}
ir::Attrs CastTo(DType t) { return A({{"dtype", static_cast<int64_t>(t)}}); }

const std::vector<Case>& Cases() {
  using K = OpKind;
  constexpr bool kTol = false;
  const ir::Attrs sgd = A({{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", int64_t{1}}});
  const ir::Attrs adamw = A({{"lr", 0.01}, {"beta1", 0.9}, {"beta2", 0.999}, {"eps", 1e-8}, {"weight_decay", 0.01}});
  static const std::vector<Case> cases = {
      {K::kAdd, "same", {F({5, 7}), F({5, 7})}, {}},
      {K::kAdd, "bias", {F({4, 5, 7}), F({7})}, {}},
      {K::kAdd, "outer", {F({5, 1}), F({1, 7})}, {}},
      {K::kAdd, "bcast", {F({3, 1, 7}), F({5, 1})}, {}},
      {K::kAdd, "i64", {I64({5, 6}), I64({6})}, {}},
      {K::kSub, "row", {F({5, 7}), F({1, 7})}, {}},
      {K::kSub, "lead", {F({6}), F({5, 6})}, {}},
      {K::kMul, "same", {F({5, 7}), F({5, 7})}, {}},
      {K::kMul, "bcast", {F({2, 5, 7}), F({5, 1})}, {}},
      {K::kDiv, "bias", {F({5, 7}), F({7}, Fill::kNonZero)}, {}, kTol},
      {K::kDiv, "bcast", {F({5, 1}), F({3, 1, 7}, Fill::kNonZero)}, {}, kTol},
      {K::kDiv, "i64", {I64({6, 5}), I64({6, 5}, Fill::kNonZero)}, {}},
      {K::kRelu, "2d", {F({5, 7})}, {}},
      {K::kRelu, "3d", {F({3, 4, 5})}, {}},
      {K::kTanh, "2d", {F({5, 7})}, {}, kTol},
      {K::kTanh, "3d", {F({3, 4, 5})}, {}, kTol},
      {K::kSigmoid, "2d", {F({5, 7})}, {}, kTol},
      {K::kErf, "3d", {F({3, 4, 5})}, {}, kTol},
      {K::kScale, "half", {F({5, 7})}, A({{"alpha", 0.5}})},
      {K::kScale, "neg", {F({3, 5, 2})}, A({{"alpha", -2.0}})},
      {K::kSoftmax, "last", {F({5, 7})}, Axis(-1), kTol},
      {K::kSoftmax, "mid", {F({4, 5, 7})}, Axis(1), kTol},
      {K::kLogSoftmax, "last", {F({5, 7})}, Axis(-1), kTol},
      {K::kLogSoftmax, "first", {F({5, 7})}, Axis(0), kTol},
      {K::kSoftmaxGrad, "last", {F({5, 7}), F({5, 7})}, Axis(-1), kTol},
      {K::kSoftmaxGrad, "mid", {F({4, 5, 3}), F({4, 5, 3})}, Axis(1), kTol},
      {K::kLogSoftmaxGrad, "last", {F({5, 7}), F({5, 7})}, Axis(-1), kTol},
      {K::kLogSoftmaxGrad, "mid", {F({4, 5, 3}), F({4, 5, 3})}, Axis(1), kTol},
      {K::kReluGrad, "2d", {F({5, 7}), F({5, 7})}, {}},
      {K::kReluGrad, "3d", {F({2, 3, 5}), F({2, 3, 5})}, {}},
      {K::kTanhGrad, "2d", {F({5, 7}), F({5, 7})}, {}},
      {K::kSigmoidGrad, "3d", {F({2, 3, 5}), F({2, 3, 5})}, {}},
      {K::kSilu, "3d", {F({2, 3, 5})}, {}, kTol},
      {K::kSiluGrad, "3d", {F({2, 3, 5}), F({2, 3, 5})}, {}, kTol},  // linear in dY up to rounding
      {K::kErfGrad, "2d", {F({5, 7}), F({5, 7})}, {}, kTol},
      {K::kGelu, "bias", {F({4, 5, 7}), F({7})}, A({{"div", 1.4142135}, {"one", 1.0}, {"half", 0.5}}), kTol},
      {K::kGelu, "plain", {F({5, 7})}, A({{"div", 1.4142135}, {"one", 1.0}, {"half", 0.5}}), kTol},
      {K::kGeluGrad, "bias", {F({4, 5, 7}), F({4, 5, 7}), F({7})}, A({{"div", 1.4142135}, {"one", 1.0}, {"half", 0.5}}), kTol},
      {K::kMaskedSoftmax, "causal", {F({2, 3, 5, 5}), Bools({1, 1, 5, 5})},
       A({{"scale", 0.5}, {"fill", -1e30}, {"fill_if", int64_t{1}}}), kTol},
      {K::kMaskedSoftmax, "plain", {F({4, 5, 7})}, A({{"scale", 3.0}, {"divide", int64_t{1}}}), kTol},
      {K::kMaskedSoftmaxGrad, "causal", {F({2, 3, 5, 5}), F({2, 3, 5, 5}), Bools({1, 1, 5, 5})},
       A({{"scale", 0.5}, {"fill", -1e30}, {"fill_if", int64_t{1}}}), kTol},
      {K::kLayerNormalization, "last", {F({4, 5, 7}), F({7}), F({7})}, Axis(-1), kTol},
      {K::kLayerNormalization, "two", {F({5, 3, 4}), F({3, 4}), Absent()}, Axis(1), kTol},
      {K::kLayerNormGrad, "last",
       {F({4, 5, 7}), F({4, 5, 7}), F({7}), F({4, 5, 1}), F({4, 5, 1}, Fill::kPositive)}, Axis(-1), kTol},
      {K::kLayerNormGrad, "two",
       {F({5, 3, 4}), F({5, 3, 4}), F({3, 4}), F({5, 1, 1}), F({5, 1, 1}, Fill::kPositive)}, Axis(1), kTol},
      {K::kRMSNorm, "last", {F({4, 5, 7}), F({7})}, A({{"axis", int64_t{2}}, {"epsilon", 1e-6}}), kTol},
      {K::kRMSNorm, "two", {F({5, 3, 4}), F({3, 4})}, A({{"axis", int64_t{1}}, {"epsilon", 1e-6}}), kTol},
      {K::kRMSNormGrad, "last", {F({4, 5, 7}), F({4, 5, 7}), F({7}), F({4, 5, 1}, Fill::kPositive)}, Axis(2), kTol},
      {K::kRMSNormGrad, "two", {F({5, 3, 4}), F({5, 3, 4}), F({3, 4}), F({5, 1, 1}, Fill::kPositive)}, Axis(1), kTol},
      {K::kReshape, "merge", {F({2, 3, 4})}, ShapeAttr({6, 4})},
      {K::kReshape, "split", {F({6, 4})}, ShapeAttr({2, 3, 4})},
      {K::kReshape, "flat", {F({4, 5, 6})}, ShapeAttr({20, 6})},
      {K::kReshape, "uneven", {F({5, 6})}, ShapeAttr({30})},
      {K::kReshape, "seven", {F({4, 7})}, ShapeAttr({28})},
      {K::kReshape, "unsqueeze", {F({6, 5})}, ShapeAttr({6, 1, 5})},
      {K::kReshape, "regroup", {F({6, 6})}, ShapeAttr({4, 9})},
      {K::kReshape, "i64", {I64({6, 4})}, ShapeAttr({24})},
      {K::kTranspose, "reverse", {F({5, 7})}, {}},
      {K::kTranspose, "rotate", {F({2, 5, 7})}, A({{"perm", std::vector<int64_t>{1, 2, 0}}})},
      {K::kTranspose, "heads", {F({3, 5, 7, 2})}, A({{"perm", std::vector<int64_t>{0, 2, 1, 3}}})},
      {K::kSumTo, "bias", {F({4, 5, 7})}, ShapeAttr({7})},
      {K::kSumTo, "keep", {F({4, 5, 7})}, ShapeAttr({5, 1})},
      {K::kSumTo, "lead", {F({4, 5, 7})}, ShapeAttr({1, 5, 7})},
      {K::kSumTo, "scalar", {F({5, 7})}, ShapeAttr({})},
      {K::kGemm, "bias", {F({5, 7}), F({7, 6}), F({6})}, {}},
      {K::kGemm, "trans", {F({7, 5}), F({6, 7}), F({5, 1})},
       A({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 2.0}, {"beta", 0.5}})},
      {K::kGemm, "full", {F({5, 7}), F({6, 7}), F({5, 6})}, A({{"transB", int64_t{1}}})},
      {K::kGemm, "scalarc", {F({7, 5}), F({7, 6}), F({})}, A({{"transA", int64_t{1}}})},
      {K::kGemm, "noc", {F({5, 7}), F({7, 6}), Absent()}, {}},
      {K::kMatMul, "2d", {F({5, 7}), F({7, 6})}, {}},
      {K::kMatMul, "fold", {F({3, 5, 7}), F({7, 6})}, {}},
      {K::kMatMul, "batch", {F({3, 5, 7}), F({3, 7, 6})}, {}},
      {K::kMatMul, "contract", {F({4, 5, 7}), F({4, 5, 6})}, A({{"transA", int64_t{1}}, {"contract_batch", int64_t{1}}})},
      {K::kMatMul, "bcast", {F({3, 1, 5, 7}), F({4, 7, 6})}, {}},
      {K::kMatMul, "trans", {F({2, 7, 5}), F({2, 6, 7})}, A({{"transA", int64_t{1}}, {"transB", int64_t{1}}})},
      {K::kMatMul, "left", {F({5, 7}), F({3, 7, 6})}, A({{"alpha", 2.0}})},
      {K::kCrossEntropy, "2d", {F({5, 7}), Labels({5}, 7)}, {}, kTol},
      {K::kCrossEntropy, "3d", {F({3, 5, 7}), Labels({3, 5}, 7)}, {}, kTol},
      {K::kCrossEntropyGrad, "2d", {F({}), F({5, 7}), Labels({5}, 7)}, {}, kTol},
      {K::kCrossEntropyGrad, "3d", {F({}), F({3, 5, 4}), Labels({3, 5}, 4)}, {}, kTol},
      {K::kMse, "2d", {F({5, 7}), F({5, 7})}, {}, kTol},
      {K::kMse, "3d", {F({3, 5, 2}), F({3, 5, 2})}, {}, kTol},
      {K::kMseGrad, "2d", {F({}), F({5, 7}), F({5, 7})}, {}, kTol},
      {K::kMseGrad, "3d", {F({}), F({3, 5, 2}), F({3, 5, 2})}, {}, kTol},
      {K::kAccumulate, "2d", {F({5, 7})}, {}, true, 2},
      {K::kSquareSum, "2d", {F({5, 7})}, {}},
      {K::kSquareSum, "3d", {F({3, 5, 7})}, {}},
      {K::kSquareSum, "scalar", {F({})}, {}},
      {K::kAddN, "three", {F({}), F({}), F({})}, {}},
      {K::kAddN, "one", {F({})}, {}},
      {K::kClipCoef, "scalar", {F({}, Fill::kPositive)}, A({{"max_norm", 1.0}}), kTol},
      {K::kSgdUpdate, "momentum", {F({5, 7}), F({5, 7}), F({}, Fill::kPositive)}, sgd, kTol, 2},
      {K::kSgdUpdate, "plain", {F({5, 7}), F({5, 7})}, A({{"lr", 0.1}}), kTol, 2},
      {K::kAdamWUpdate, "clip", {F({5, 7}), F({5, 7}), F({}, Fill::kPositive)}, adamw, kTol, 2},
      {K::kAdamWUpdate, "noclip", {F({7}), F({7})}, adamw, kTol, 2},
      {K::kGather, "embed", {F({7, 5}), Labels({3, 4}, 7)}, Axis(0)},
      {K::kGatherND, "rows", {F({5, 7}), Labels({4, 2, 1}, 5)}, {}},
      {K::kScatterND, "rows", {F({5, 7}), I64Range({3, 1}), F({3, 7})}, A({{"add", int64_t{0}}})},
      {K::kScatterND, "add", {F({5, 7}), Labels({4, 1}, 5), F({4, 7})}, A({{"add", int64_t{1}}})},
      {K::kGatherElements, "axis1", {F({5, 7}), Labels({5, 3}, 7)}, Axis(1)},
      {K::kGatherElementsGrad, "axis1", {F({5, 3}), Labels({5, 3}, 7)}, With(ShapeAttr({5, 7}), "axis", int64_t{1})},
      {K::kTile, "x", {F({5, 7})}, Ints("repeats", {1, 3})},
      {K::kPad, "zero", {F({5, 7})}, A({{"pads", std::vector<int64_t>{0, 1, 0, 2}}, {"value", 0.0}})},
      {K::kPad, "value", {F({5, 7})}, A({{"pads", std::vector<int64_t>{1, 0, 0, 0}}, {"value", 2.0}})},
      {K::kPad, "reflect", {F({5, 7})}, A({{"pads", std::vector<int64_t>{0, 2, 0, 3}}, {"mode", int64_t{1}}})},
      {K::kPad, "edge", {F({5, 7})}, A({{"pads", std::vector<int64_t>{2, 0, 1, 0}}, {"mode", int64_t{2}}})},
      {K::kPadGrad, "wrap", {F({5, 12})}, A({{"pads", std::vector<int64_t>{0, 2, 0, 3}}, {"mode", int64_t{3}}})},
      {K::kGatherNDGrad, "rows", {F({4, 2, 7}), Labels({4, 2, 1}, 5)}, ShapeAttr({5, 7})},
      {K::kGather, "axis1", {F({3, 7, 5}), Labels({2, 3}, 7)}, Axis(1)},
      {K::kGather, "shape", {I64({4}), Labels({}, 4)}, {}},
      {K::kGatherGrad, "embed", {F({3, 4, 5}), Labels({3, 4}, 7)}, With(Axis(0), "shape", std::vector<int64_t>{7, 5})},
      {K::kGatherGrad, "axis1", {F({3, 2, 3, 5}), Labels({2, 3}, 7)},
       With(Axis(1), "shape", std::vector<int64_t>{3, 7, 5})},
      {K::kConcat, "cols", {F({4, 5}), F({4, 3}), F({4, 2})}, Axis(1)},
      {K::kConcat, "rows", {F({2, 5}), F({3, 5})}, Axis(0)},
      {K::kConcat, "i64", {I64({3}), I64({2})}, Axis(0)},
      {K::kSplit, "qkv", {F({3, 5, 9})}, With(Axis(2), "split", std::vector<int64_t>{3, 3, 3})},
      {K::kSplit, "rows", {F({6, 5})}, Ints("split", {2, 4})},
      {K::kSlice, "step", {F({4, 6, 5})}, SliceAttrs({0, 1, 0}, {4, 5, 5}, {1, 2, 1})},
      {K::kSlice, "reverse", {F({5, 6})}, SliceAttrs({0, 5}, {5, 0}, {1, -2})},
      {K::kSlice, "mask", {F({1, 1, 7, 7})}, SliceAttrs({0, 0, 0, 0}, {1, 1, 5, 5}, {1, 1, 1, 1})},
      {K::kSliceGrad, "step", {F({4, 2, 5})},
       With(SliceAttrs({0, 1, 0}, {4, 5, 5}, {1, 2, 1}), "shape", std::vector<int64_t>{4, 6, 5})},
      {K::kSliceGrad, "reverse", {F({5, 3})},
       With(SliceAttrs({0, 5}, {5, 0}, {1, -2}), "shape", std::vector<int64_t>{5, 6})},
      {K::kExpand, "bcast", {F({5, 1})}, ShapeAttr({3, 5, 7})},
      {K::kExpand, "scalar", {F({})}, ShapeAttr({5, 7})},
      {K::kWhere, "causal", {Bools({1, 1, 5, 5}), F({}), F({2, 3, 5, 5})}, {}},
      {K::kWhere, "bcast", {Bools({5, 1}), F({5, 7}), F({7})}, {}},
      {K::kWhere, "i64", {Bools({6}), I64({5, 6}), I64({6})}, {}},
      {K::kEqual, "bcast", {I64({5, 7}), I64({7})}, {}},
      {K::kEqual, "f32", {F({3, 5}), F({3, 5})}, {}},
      {K::kCast, "to_i64", {F({5, 7})}, CastTo(DType::kI64)},
      {K::kCast, "to_f32", {I64({5, 7})}, CastTo(DType::kF32)},
      {K::kCast, "same", {F({3, 5})}, CastTo(DType::kF32)},
      {K::kCast, "to_bool", {F({3, 5})}, CastTo(DType::kBool)},
      {K::kTrilu, "lower", {F({3, 5, 7})}, A({{"upper", int64_t{0}}})},
      {K::kTrilu, "upper_k", {F({2, 3, 5, 7})}, A({{"k", int64_t{1}}})},
      {K::kLess, "bcast", {F({5, 7}), F({7})}, {}},
      {K::kLessOrEqual, "i64", {I64({5, 6}), I64({6})}, {}},
      {K::kGreater, "outer", {F({5, 1}), F({1, 7})}, {}},
      {K::kGreaterOrEqual, "same", {F({5, 7}), F({5, 7})}, {}},
      {K::kAnd, "bcast", {Bools({5, 7}), Bools({7})}, {}},
      {K::kOr, "same", {Bools({3, 5}), Bools({3, 5})}, {}},
      {K::kNot, "x", {Bools({5, 7})}, {}},
      {K::kConv, "bias", {F({4, 6, 5, 5}), F({8, 6, 3, 3}), F({8})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}})},
      {K::kConv, "nobias", {F({4, 6, 5, 5}), F({8, 6, 3, 3})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"strides", std::vector<int64_t>{2, 2}}})},
      {K::kConv, "groups", {F({4, 6, 5, 5}), F({6, 3, 3, 3})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"group", int64_t{2}}})},
      {K::kConvGradData, "x", {F({4, 8, 3, 3}), F({8, 6, 3, 3})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"x_shape", std::vector<int64_t>{4, 6, 5, 5}}})},
      {K::kConvGradWeight, "w", {F({4, 8, 3, 3}), F({4, 6, 5, 5})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"w_shape", std::vector<int64_t>{8, 6, 3, 3}}})},
      {K::kMaxPool, "x", {F({4, 6, 5, 5})}, A({{"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {K::kMaxPoolGrad, "x", {F({4, 6, 3, 3}), F({4, 6, 5, 5})}, A({{"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}}})},
      {K::kAveragePool, "x", {F({4, 6, 5, 5})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}}), kTol},
      {K::kAveragePoolGrad, "x", {F({4, 6, 5, 5})}, A({{"kernel", std::vector<int64_t>{3, 3}}, {"pads", std::vector<int64_t>{1, 1, 1, 1}}, {"x_shape", std::vector<int64_t>{4, 6, 5, 5}}}), kTol},
      {K::kSqrt, "x", {F({5, 7}, Fill::kPositive)}, {}, kTol},
      {K::kReciprocal, "x", {F({5, 7}, Fill::kNonZero)}, {}, kTol},
      {K::kNeg, "f32", {F({5, 7})}, {}},
      {K::kNeg, "i64", {I64({3, 5})}, {}},
      {K::kDropout, "2d", {F({5, 7})}, A({{"ratio", 0.5}, {"key", int64_t{7}}}), true, 2},
      {K::kDropout, "3d", {F({4, 3, 5})}, A({{"ratio", 0.3}, {"key", int64_t{-2}}}), kTol, 2},  // 1 / 0.7 rounds P's pieces
      {K::kExp, "x", {F({5, 7})}, {}, kTol},
      {K::kLog, "x", {F({5, 7}, Fill::kPositive)}, {}, kTol},
      {K::kAbs, "x", {F({5, 7})}, {}},
      {K::kSign, "x", {F({5, 7})}, {}},
      {K::kSin, "x", {F({5, 7})}, {}, kTol},
      {K::kCos, "x", {F({3, 5, 2})}, {}, kTol},
      {K::kPow, "square", {F({5, 7}), F({})}, {}, kTol},
      {K::kPow, "bcast", {F({4, 5, 7}, Fill::kPositive), F({7})}, {}, kTol},
      {K::kClip, "both", {F({5, 7})}, A({{"min", -1.5}, {"max", 2.0}})},
      {K::kClip, "min", {F({5, 7})}, A({{"min", 0.0}})},
      {K::kClipGrad, "both", {F({5, 7}), F({5, 7})}, A({{"min", -1.5}, {"max", 2.0}})},
      {K::kIsNaN, "x", {F({5, 7})}, {}},
      {K::kReduceSum, "mid", {F({4, 5, 7})}, A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}})},
      {K::kReduceSum, "keep", {F({4, 5, 7})}, A({{"axes", std::vector<int64_t>{0, 2}}, {"keepdims", int64_t{1}}})},
      {K::kReduceSum, "i64", {I64({5, 6})}, A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}})},
      {K::kReduceMean, "last", {F({4, 5, 7})}, A({{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{1}}}), kTol},
      {K::kReduceMean, "all", {F({5, 7})}, A({{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", int64_t{0}}}), kTol},
      {K::kReduceMax, "last", {F({4, 5, 7})}, A({{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{0}}})},
      {K::kReduceMax, "lead", {F({5, 7})}, A({{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{1}}})},
      {K::kReduceMaxGrad, "last", {F({4, 5}), F({4, 5, 7}), F({4, 5})}, A({{"axes", std::vector<int64_t>{2}}, {"keepdims", int64_t{0}}})},
      {K::kReduceMaxGrad, "keep", {F({5, 1}), F({5, 7}), F({5, 1})}, A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{1}}})},
      {K::kShape, "4d", {F({2, 3, 5, 7})}, {}},
      {K::kConstantOfShape, "ones", {I64({2})}, With(With(ShapeAttr({5, 7}), "value", 1.5), "dtype", int64_t{0})},
      {K::kRange, "i64", {I64Value(0), I64Value(10), I64Value(3)}, A({{"size", int64_t{4}}})},
  };
  return cases;
}

std::string TestName(const Case& c, int n) {
  return std::string(Def(c.op).name) + "_" + c.name + "_" + std::to_string(n) + "d";
}

// ---- Tensors as values (float or int64 read as double) and their pieces ----

double Get(const Tensor& t, int64_t i) {
  switch (t.dtype()) {
    case DType::kF32: return static_cast<double>(t.data<float>()[i]);
    case DType::kBool: return t.data<bool>()[i] ? 1.0 : 0.0;
    default: return static_cast<double>(t.data<int64_t>()[i]);
  }
}
void Set(const Tensor& t, int64_t i, double v) {
  switch (t.dtype()) {
    case DType::kF32: t.data<float>()[i] = static_cast<float>(v); break;
    case DType::kBool: t.data<bool>()[i] = v != 0; break;
    default: t.data<int64_t>()[i] = static_cast<int64_t>(v); break;
  }
}

// Calls f(flat index in the piece, flat index in the whole) over the region `r` of `whole`.
void ForRegion(const Shape& whole, const std::vector<sbp::Range>& r, const std::function<void(int64_t, int64_t)>& f) {
  std::vector<int64_t> dims;
  for (const sbp::Range& x : r) dims.push_back(x.size());
  const Shape piece(dims);
  const std::vector<int64_t> st = Strides(whole);
  for (int64_t i = 0; i < piece.numel(); ++i) {
    int64_t rest = i, off = 0;
    for (int d = piece.rank() - 1; d >= 0; --d) {
      off += (r[static_cast<size_t>(d)].begin + rest % piece[d]) * st[static_cast<size_t>(d)];
      rest /= piece[d];
    }
    f(i, off);
  }
}

std::vector<sbp::Range> Ranges(const Shape& s, Sbp sbp, int n, int k) {
  return sbp::PieceRanges(s, sbp::NdSbp{sbp}, sbp::Placement::Range(DeviceType::kCpu, 0, n), k);
}
Shape PieceShape(const Shape& s, Sbp sbp, int n, int k) {
  return sbp::PieceShape(s, sbp::NdSbp{sbp}, sbp::Placement::Range(DeviceType::kCpu, 0, n), k);
}

std::vector<Tensor> Pieces(const Tensor& t, Sbp s, int n, std::mt19937& rng) {
  std::vector<Tensor> out;
  for (int k = 0; k < n; ++k) {
    Tensor p(t.dtype(), PieceShape(t.shape(), s, n, k));
    ForRegion(t.shape(), Ranges(t.shape(), s, n, k), [&](int64_t i, int64_t o) { Set(p, i, Get(t, o)); });
    out.push_back(p);
  }
  if (!s.is_partial()) return out;
  std::uniform_int_distribution<int> summand(-3, 3), off(0, 3), who(0, n - 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    const double v = Get(t, i);
    if (s.reduce() == sbp::Reduce::kSum) {
      double rest = v;
      for (int k = 0; k + 1 < n; ++k) {
        const double x = summand(rng);
        Set(out[static_cast<size_t>(k)], i, x);
        rest -= x;
      }
      Set(out.back(), i, rest);
    } else {
      const int exact = who(rng);
      const double sign = s.reduce() == sbp::Reduce::kMax ? -1 : 1;
      for (int k = 0; k < n; ++k) Set(out[static_cast<size_t>(k)], i, k == exact ? v : v + sign * off(rng));
    }
  }
  return out;
}

// The logical tensor the pieces describe under `s`; an undefined tensor and `why` if they do not.
Tensor Combine(const std::vector<Tensor>& pieces, Sbp s, const Shape& logical, std::string* why) {
  const int n = static_cast<int>(pieces.size());
  Tensor out(pieces[0].dtype(), logical);
  for (int k = 0; k < n; ++k) {
    const Tensor& p = pieces[static_cast<size_t>(k)];
    if (!(p.shape() == PieceShape(logical, s, n, k))) {
      *why = "device " + std::to_string(k) + " holds " + p.shape().ToString() + ", not its piece " +
             PieceShape(logical, s, n, k).ToString();
      return Tensor();
    }
    if (s.is_split()) {
      ForRegion(logical, Ranges(logical, s, n, k), [&](int64_t i, int64_t o) { Set(out, o, Get(p, i)); });
    } else if (s.is_broadcast()) {
      for (int64_t i = 0; i < p.numel(); ++i) {
        if (k > 0 && Get(p, i) != Get(out, i)) {
          *why = "broadcast copies differ at " + std::to_string(i) + " on device " + std::to_string(k);
          return Tensor();
        }
        Set(out, i, Get(p, i));
      }
    } else {
      for (int64_t i = 0; i < p.numel(); ++i) {
        const double a = Get(out, i), b = Get(p, i);
        const double r = k == 0 ? b
                         : s.reduce() == sbp::Reduce::kSum ? a + b
                         : s.reduce() == sbp::Reduce::kMax ? std::max(a, b)
                                                           : std::min(a, b);
        Set(out, i, r);
      }
    }
  }
  return out;
}

::testing::AssertionResult Same(const Tensor& got, const Tensor& want, bool exact) {
  if (!(got.shape() == want.shape())) {
    return ::testing::AssertionFailure() << "shape " << got.shape().ToString() << ", want " << want.shape().ToString();
  }
  double scale = 1;
  for (int64_t i = 0; i < want.numel(); ++i) scale = std::max(scale, std::abs(Get(want, i)));
  const double tol = exact ? 0 : 1e-5 * scale;
  std::ostringstream msg;
  msg.precision(9);
  int bad = 0;
  for (int64_t i = 0; i < want.numel(); ++i) {
    if (std::abs(Get(got, i) - Get(want, i)) <= tol) continue;
    if (++bad <= 5) msg << "\n  [" << i << "] got " << Get(got, i) << ", want " << Get(want, i);
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.numel() << " elements differ (tol " << tol << "):"
                                       << msg.str();
}

// ---- One case: its node, logical types and values ----

struct Built {
  ir::Node node;
  std::vector<ir::TensorType> in, out;  // logical
  std::vector<Tensor> values;           // logical inputs; undefined where absent
};

Built Build(const Case& c, std::mt19937& rng) {
  Built b;
  b.node.name = TestName(c, 0);
  b.node.op = c.op;
  b.node.attrs = c.attrs;
  std::uniform_int_distribution<int> val(-4, 4), pos(1, 4), sign(0, 1);
  for (size_t i = 0; i < c.in.size(); ++i) {
    const In& spec = c.in[i];
    if (spec.fill == Fill::kAbsent) {
      b.node.in.push_back(ir::kNoValue);
      b.in.push_back(ir::TensorType{});
      b.values.emplace_back();
      continue;
    }
    b.node.in.push_back(static_cast<ir::ValueId>(i));
    b.in.push_back(ir::TensorType{spec.dtype, spec.shape});
    Tensor t(spec.dtype, spec.shape);
    std::uniform_int_distribution<int64_t> label(0, std::max<int64_t>(0, spec.classes - 1));
    for (int64_t e = 0; e < t.numel(); ++e) {
      switch (spec.fill) {
        case Fill::kInt: Set(t, e, val(rng)); break;
        case Fill::kNonZero: Set(t, e, pos(rng) * (sign(rng) ? 1 : -1)); break;
        case Fill::kPositive: Set(t, e, pos(rng)); break;
        case Fill::kLabels: Set(t, e, static_cast<double>(label(rng))); break;
        case Fill::kBool: Set(t, e, sign(rng)); break;
        case Fill::kValue: Set(t, e, spec.value); break;
        case Fill::kRange: Set(t, e, static_cast<double>(e)); break;
        case Fill::kAbsent: break;
      }
    }
    b.values.push_back(t);
  }
  auto out = Def(c.op).infer(b.node, b.in);
  FR_CHECK(out.ok(), b.node.name + ": " + out.status().message());
  b.out = *out;
  for (size_t j = 0; j < b.out.size(); ++j) b.node.out.push_back(static_cast<ir::ValueId>(c.in.size() + j));
  return b;
}

std::vector<Signature> Rule(const Built& b, int n) { return Def(b.node.op).sbp(b.node, b.in, b.out, n); }

bool Mutates(OpKind op) { return op == OpKind::kSgdUpdate || op == OpKind::kAdamWUpdate; }

// Runs the kernel `runs` times on the inputs (in[0] is mutated by optimizer updates) into `out`.
Status RunKernel(const ir::Node& node, const std::vector<Tensor>& in, const std::vector<Tensor>& out, int runs) {
  for (int r = 0; r < runs; ++r) {
    KernelCtx ctx{node, in, out, r, r, 2};
    RETURN_IF_ERROR(Kernel(node.op, DeviceType::kCpu)(ctx));
  }
  return Status::Ok();
}

// Checks one signature of one case on n devices.
void CheckSignature(const Case& c, const Built& b, const Signature& sig, int n, std::mt19937& rng) {
  SCOPED_TRACE(sig.ToString());
  const OpDef& def = Def(c.op);
  const sbp::Placement pl = sbp::Placement::Range(DeviceType::kCpu, 0, n);
  ASSERT_EQ(sig.in.size(), b.node.in.size());
  ASSERT_EQ(sig.out.size(), b.out.size());
  for (size_t i = 0; i < sig.in.size(); ++i) {
    if (b.node.in[i] == ir::kNoValue) {
      ASSERT_TRUE(sig.in[i].is_broadcast()) << "absent input " << i << " must be B";
      continue;
    }
    Status s = sbp::Check(b.in[i].shape, sbp::NdSbp{sig.in[i]}, pl);
    ASSERT_TRUE(s.ok()) << "input " << i << ": " << s.message();
  }
  for (size_t j = 0; j < sig.out.size(); ++j) {
    Status s = sbp::Check(b.out[j].shape, sbp::NdSbp{sig.out[j]}, pl);
    ASSERT_TRUE(s.ok()) << "output " << j << ": " << s.message();
  }

  // Pieces, by input then device; absent inputs stay undefined on every device.
  std::vector<std::vector<Tensor>> in_pieces;
  for (size_t i = 0; i < b.values.size(); ++i) {
    in_pieces.push_back(b.values[i].defined() ? Pieces(b.values[i], sig.in[i], n, rng)
                                              : std::vector<Tensor>(static_cast<size_t>(n)));
  }

  // Logical reference, on copies (in[0] may be mutated).
  std::vector<Tensor> lin, lout;
  for (const Tensor& t : b.values) lin.push_back(t.defined() ? t.Clone() : Tensor());
  for (const ir::TensorType& t : b.out) lout.emplace_back(t.dtype, t.shape);
  Status ls = RunKernel(b.node, lin, lout, c.runs);
  ASSERT_TRUE(ls.ok()) << ls.message();

  std::vector<std::vector<Tensor>> out_pieces(b.out.size());
  for (int k = 0; k < n; ++k) {
    SCOPED_TRACE("device " + std::to_string(k));
    std::vector<ir::TensorType> pin, pout;
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < b.values.size(); ++i) {
      const Tensor& t = in_pieces[i][static_cast<size_t>(k)];
      in.push_back(t);
      pin.push_back(t.defined() ? ir::TensorType{t.dtype(), t.shape()} : ir::TensorType{});
    }
    for (size_t j = 0; j < b.out.size(); ++j) {
      pout.push_back(ir::TensorType{b.out[j].dtype, PieceShape(b.out[j].shape, sig.out[j], n, k)});
      out.emplace_back(pout.back().dtype, pout.back().shape);
    }
    ir::Node node = b.node;
    if (def.physical) {
      std::vector<int64_t> start;
      for (const sbp::Range& r : sbp::PieceRanges(b.out[0].shape, sbp::NdSbp{sig.out[0]}, pl, k)) start.push_back(r.begin);
      def.physical(node, b.in, pout, start);
    }
    auto inferred = def.infer(node, pin);
    ASSERT_TRUE(inferred.ok()) << inferred.status().message();
    ASSERT_EQ(*inferred, pout) << "infer on the physical inputs disagrees with the output pieces";
    Status s = RunKernel(node, in, out, c.runs);
    ASSERT_TRUE(s.ok()) << s.message();
    for (size_t j = 0; j < out.size(); ++j) out_pieces[j].push_back(out[j]);
  }

  for (size_t j = 0; j < b.out.size(); ++j) {
    std::string why;
    Tensor got = Combine(out_pieces[j], sig.out[j], b.out[j].shape, &why);
    ASSERT_TRUE(got.defined()) << "output " << j << ": " << why;
    EXPECT_TRUE(Same(got, lout[j], c.exact)) << "output " << j;
  }
  if (Mutates(c.op)) {
    std::string why;
    Tensor w = Combine(in_pieces[0], sig.in[0], b.in[0].shape, &why);
    ASSERT_TRUE(w.defined()) << "updated in[0]: " << why;
    EXPECT_TRUE(Same(w, lin[0], c.exact)) << "updated in[0]";
  }
}

class EvalTest : public ::testing::Test {
 public:
  EvalTest(const Case* c, int n) : c_(c), n_(n) {}
  void TestBody() override {
    std::mt19937 rng(static_cast<uint32_t>(std::hash<std::string>{}(TestName(*c_, n_))));
    const Built b = Build(*c_, rng);
    const std::vector<Signature> sigs = Rule(b, n_);
    ASSERT_FALSE(sigs.empty());
    for (const Signature& sig : sigs) CheckSignature(*c_, b, sig, n_, rng);
  }

 private:
  const Case* c_;
  int n_;
};

[[maybe_unused]] const bool kRegistered = [] {
  for (const Case& c : Cases()) {
    for (int n : {2, 3}) {
      ::testing::RegisterTest("SbpRule", TestName(c, n).c_str(), nullptr, nullptr, __FILE__, __LINE__,
                              [&c, n]() -> ::testing::Test* { return new EvalTest(&c, n); });
    }
  }
  return true;
}();

// ---- The table ----

TEST(SbpRule, EveryOpHasARuleAndACase) {
  std::set<OpKind> covered;
  for (const Case& c : Cases()) covered.insert(c.op);
  for (int k = 0; k < kNumOps; ++k) {
    const OpDef& d = Def(OpKind(k));
    EXPECT_NE(d.sbp, nullptr) << d.name;
    EXPECT_TRUE(covered.count(OpKind(k))) << d.name << " has no case in tests/sbp/rules_test.cpp";
  }
}

TEST(SbpRule, AllBroadcastComesFirstAndNothingRepeats) {
  for (const Case& c : Cases()) {
    for (int n : {2, 3}) {
      std::mt19937 rng(1);
      const Built b = Build(c, rng);
      const std::vector<Signature> sigs = Rule(b, n);
      const Signature all_b{std::vector<Sbp>(b.node.in.size()), std::vector<Sbp>(b.out.size())};
      ASSERT_FALSE(sigs.empty()) << TestName(c, n);
      EXPECT_EQ(sigs[0], all_b) << TestName(c, n) << ": " << sigs[0].ToString();
      for (size_t i = 0; i < sigs.size(); ++i)
        for (size_t j = i + 1; j < sigs.size(); ++j)
          EXPECT_FALSE(sigs[i] == sigs[j]) << TestName(c, n) << ": " << sigs[i].ToString() << " twice";
    }
  }
}

TEST(SbpRule, NonlinearOpsTakeNoPartialInput) {
  const std::set<OpKind> nonlinear = {OpKind::kRelu,         OpKind::kTanh,      OpKind::kSigmoid,
                                      OpKind::kErf,          OpKind::kSoftmax,   OpKind::kLogSoftmax,
                                      OpKind::kLayerNormalization, OpKind::kRMSNorm, OpKind::kSquareSum, OpKind::kClipCoef,
                                      OpKind::kCrossEntropy, OpKind::kMse, OpKind::kEqual,
                                      OpKind::kSqrt, OpKind::kReciprocal, OpKind::kExp, OpKind::kLog,
                                      OpKind::kAbs, OpKind::kSign, OpKind::kSin, OpKind::kCos,
                                      OpKind::kPow, OpKind::kClip, OpKind::kIsNaN, OpKind::kMaxPool};
  int checked = 0;
  for (const Case& c : Cases()) {
    if (!nonlinear.count(c.op)) continue;
    for (int n : {2, 3}) {
      std::mt19937 rng(1);
      const Built b = Build(c, rng);
      for (const Signature& sig : Rule(b, n)) {
        ++checked;
        for (const Sbp& s : sig.in) EXPECT_FALSE(s.is_partial()) << TestName(c, n) << ": " << sig.ToString();
      }
    }
  }
  EXPECT_GT(checked, 0);
}

TEST(SbpRule, SignatureToString) {
  EXPECT_EQ((Signature{{Sbp::S(0), Sbp::B()}, {Sbp::S(0)}}).ToString(), "(S(0), B) -> S(0)");
  EXPECT_EQ((Signature{{Sbp::P(), Sbp::B()}, {Sbp::P(), Sbp::P()}}).ToString(), "(P, B) -> (P, P)");
  EXPECT_EQ((Signature{{Sbp::P(sbp::Reduce::kMax)}, {Sbp::P(sbp::Reduce::kMax)}}).ToString(), "(P(max)) -> P(max)");
  EXPECT_EQ((Signature{{Sbp::S(1), Sbp::S(1)}, {}}).ToString(), "(S(1), S(1)) -> ()");
}

}  // namespace
}  // namespace fr
