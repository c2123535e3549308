// Every op's kernel on a device against its CPU kernel, forward and gradient: each case builds a
// small graph (with its backward, from ir::Backward, where the op has one), runs it on the CPU and
// on the device, and compares every value the graph computes.
//
// The devices: "sim" always (the CPU's kernels in host memory behind the device interface: it
// checks this harness and the device plumbing, and must agree exactly), and "cuda" where a GPU is
// visible (skipped with the reason otherwise): rtol 1e-5 against the CPU, FP32 with TF32 off, an
// absolute slack of 1e-5 of the tensor's largest magnitude for sums whose terms cancel.
#include <gtest/gtest.h>

#include <cmath>
#include <functional>
#include <limits>
#include <set>

#include "base/device.h"
#include "ir/autodiff.h"
#include "ops/cuda/backend.h"
#include "ops/cuda/kernels.h"
#include <cstdio>

#include "harness.h"

namespace fr::test {
namespace {

using ir::ValueId;

ir::Attrs A(std::initializer_list<std::pair<const char*, ir::AttrValue>> kv) {
  ir::Attrs a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}

Tensor Bools(Shape s, const std::vector<int>& v) {
  Tensor t(DType::kBool, std::move(s));
  for (size_t i = 0; i < v.size(); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

// Random bools, reproducible from `seed`.
Tensor RandBools(Shape s, uint32_t seed) {
  std::mt19937 gen(seed);
  Tensor t(DType::kBool, std::move(s));
  for (int64_t i = 0; i < t.numel(); ++i) t.data<bool>()[i] = (gen() & 1) != 0;
  return t;
}

// Integers in [lo, hi), reproducible from `seed`.
Tensor RandInts(Shape s, uint32_t seed, int64_t lo, int64_t hi) {
  std::mt19937 gen(seed);
  std::uniform_int_distribution<int64_t> u(lo, hi - 1);
  Tensor t(DType::kI64, std::move(s));
  for (int64_t& x : t.span<int64_t>()) x = u(gen);
  return t;
}

// A case adds its op's nodes to the net and names the float inputs to differentiate; the harness
// adds the backward through a random projection of `out` to a scalar, as the gradient tests do.
struct Built {
  ValueId out = ir::kNoValue;
  std::vector<ValueId> wrt;
  int steps = 1;        // runs, as steps 0, 1, ... (optimizer state carries over)
  int micros = 1;       // micro-batches a step (Accumulate)
  bool exact = false;   // the device must give the CPU's bits
};

struct Case {
  const char* name;
  std::function<Built(Net&)> build;
};

Built Unary(Net& n, OpKind op, Tensor x, ir::Attrs a = {}) {
  ValueId in = n.Input("x", std::move(x));
  return {n.Op(op, {in}, std::move(a)), {in}};
}

Built Binary(Net& n, OpKind op, const Shape& as, const Shape& bs) {
  ValueId a = n.Input("a", Rand(as, 11));
  ValueId b = n.Input("b", op == OpKind::kDiv ? RandAwayFromZero(bs, 12, 0.5, 1.5) : Rand(bs, 12));
  return {n.Op(op, {a, b}), {a, b}};
}

// A convolution's or pool's window: kernel, strides, pads [top, left, bottom, right], dilations.
ir::Attrs Window(std::vector<int64_t> k, std::vector<int64_t> s, std::vector<int64_t> p, std::vector<int64_t> d) {
  return A({{"kernel", std::move(k)}, {"strides", std::move(s)}, {"pads", std::move(p)}, {"dilations", std::move(d)}});
}

ir::Attrs With(ir::Attrs a, const char* key, int64_t v) {
  a.Set(key, v);
  return a;
}

// A convolution with or without a bias; X and W from seeds `seed` on.
Built ConvCase(Net& n, const Shape& xs, const Shape& ws, ir::Attrs a, bool bias, uint32_t seed) {
  ValueId x = n.Input("x", Rand(xs, seed)), w = n.Input("w", Rand(ws, seed + 1));
  std::vector<ValueId> in = {x, w};
  if (bias) in.push_back(n.Input("b", Rand({ws[0]}, seed + 2)));
  return Built{n.Op(OpKind::kConv, in, std::move(a)), in};
}

// A pool, forward and gradient, which must give the CPU's bits: each output and each input's
// gradient is one thread that reads its windows in the CPU's order.
Built PoolCase(Net& n, OpKind op, Tensor x, ir::Attrs a) {
  Built b = Unary(n, op, std::move(x), std::move(a));
  b.exact = true;
  return b;
}

ir::Attrs GeluAttrs(bool tanh) { return A({{"div", 1.4142135381698608}, {"one", 1.0}, {"half", 0.5}, {"tanh", int64_t{tanh}}}); }

const std::vector<Case>& Cases() {
  static const std::vector<Case> cases = {
      {"Gemm_bias", [](Net& n) {
         ValueId a = n.Input("a", Rand({7, 5}, 1)), b = n.Input("b", Rand({6, 5}, 2)), c = n.Input("c", Rand({6}, 3));
         return Built{n.Op(OpKind::kGemm, {a, b, c}, A({{"transB", int64_t{1}}, {"alpha", 0.5}, {"beta", 2.0}})), {a, b, c}};
       }},
      {"Gemm_transA", [](Net& n) {
         ValueId a = n.Input("a", Rand({5, 7}, 4)), b = n.Input("b", Rand({5, 3}, 5));
         return Built{n.Op(OpKind::kGemm, {a, b}, A({{"transA", int64_t{1}}})), {a, b}};
       }},
      {"MatMul_large", [](Net& n) {
         ValueId a = n.Input("a", Rand({2, 64, 96}, 6)), b = n.Input("b", Rand({96, 80}, 7));
         return Built{n.Op(OpKind::kMatMul, {a, b}), {a, b}};
       }},
      {"MatMul_broadcast_batch", [](Net& n) {
         ValueId a = n.Input("a", Rand({2, 1, 3, 4}, 8)), b = n.Input("b", Rand({3, 4, 5}, 9));
         return Built{n.Op(OpKind::kMatMul, {a, b}), {a, b}};
       }},
      {"MatMul_trans_alpha", [](Net& n) {
         ValueId a = n.Input("a", Rand({3, 6, 4}, 10)), b = n.Input("b", Rand({3, 5, 6}, 11));
         return Built{n.Op(OpKind::kMatMul, {a, b}, A({{"transA", int64_t{1}}, {"transB", int64_t{1}}, {"alpha", 0.25}})), {a, b}};
       }},
      {"Add", [](Net& n) { return Binary(n, OpKind::kAdd, {2, 3, 4}, {3, 1}); }},
      {"Sub", [](Net& n) { return Binary(n, OpKind::kSub, {4, 1}, {2, 1, 5}); }},
      {"Mul", [](Net& n) { return Binary(n, OpKind::kMul, {3, 4}, {3, 4}); }},
      {"Div", [](Net& n) { return Binary(n, OpKind::kDiv, {2, 3, 4}, {4}); }},
      {"Add_int64", [](Net& n) {
         return Built{n.Op(OpKind::kAdd, {n.Input("a", RandInts({3, 4}, 13, -50, 50)), n.Input("b", RandInts({4}, 14, -9, 9))}), {}};
       }},
      {"Div_int64", [](Net& n) {
         return Built{n.Op(OpKind::kDiv, {n.Input("a", RandInts({3, 4}, 15, -50, 50)), n.Input("b", Ints({4}, {3, -1, 7, -4}))}), {}};
       }},
      {"Relu", [](Net& n) { return Unary(n, OpKind::kRelu, RandAwayFromZero({5, 7}, 20, 0.1, 2)); }},
      {"Tanh", [](Net& n) { return Unary(n, OpKind::kTanh, Rand({5, 7}, 21, -3, 3)); }},
      {"Sigmoid", [](Net& n) { return Unary(n, OpKind::kSigmoid, Rand({5, 7}, 22, -4, 4)); }},
      {"Erf", [](Net& n) { return Unary(n, OpKind::kErf, Rand({5, 7}, 23, -3, 3)); }},
      {"Sqrt", [](Net& n) { return Unary(n, OpKind::kSqrt, Rand({5, 7}, 24, 0.1, 4)); }},
      {"Reciprocal", [](Net& n) { return Unary(n, OpKind::kReciprocal, RandAwayFromZero({5, 7}, 25, 0.5, 2)); }},
      {"Neg", [](Net& n) { return Unary(n, OpKind::kNeg, Rand({5, 7}, 26)); }},
      {"Neg_int64", [](Net& n) { return Built{n.Op(OpKind::kNeg, {n.Input("x", RandInts({9}, 27, -99, 99))}), {}}; }},
      {"Exp", [](Net& n) { return Unary(n, OpKind::kExp, Rand({5, 7}, 28, -5, 5)); }},
      {"Log", [](Net& n) { return Unary(n, OpKind::kLog, Rand({5, 7}, 29, 0.1, 5)); }},
      {"Abs", [](Net& n) { return Unary(n, OpKind::kAbs, RandAwayFromZero({5, 7}, 30, 0.1, 2)); }},
      {"Sign", [](Net& n) { return Unary(n, OpKind::kSign, RandAwayFromZero({5, 7}, 31, 0.1, 2)); }},
      {"Sin", [](Net& n) { return Unary(n, OpKind::kSin, Rand({5, 7}, 32, -3, 3)); }},
      {"Cos", [](Net& n) { return Unary(n, OpKind::kCos, Rand({5, 7}, 33, -3, 3)); }},
      {"Clip", [](Net& n) { return Unary(n, OpKind::kClip, Rand({5, 7}, 34, -2, 2), A({{"min", -0.5}, {"max", 0.7}})); }},
      {"IsNaN", [](Net& n) {
         Tensor x = Rand({4, 5}, 35);
         x.data<float>()[3] = std::numeric_limits<float>::quiet_NaN();
         return Built{n.Op(OpKind::kIsNaN, {n.Input("x", x)}), {}};
       }},
      {"Pow_scalar_exponents", [](Net& n) {
         ValueId x = n.Input("x", Rand({4, 6}, 36, 0.2, 2));
         ValueId y = x;
         for (float e : {2.f, 0.5f, 3.f, -1.f, -0.5f, -2.f, 1.f, 1.7f})
           y = n.Op(OpKind::kAdd, {y, n.Op(OpKind::kPow, {x, n.Const(n.builder().UniqueName("e"), Tensor::Full({}, e))})});
         return Built{y, {x}};
       }},
      {"Pow_broadcast", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 4}, 37, 0.5, 2)), e = n.Input("e", Rand({4}, 38, -1, 2));
         return Built{n.Op(OpKind::kPow, {x, e}), {x, e}};
       }},
      {"Softmax_rows", [](Net& n) { return Unary(n, OpKind::kSoftmax, Rand({5, 300}, 40, -4, 4)); }},
      {"Softmax_axis1", [](Net& n) { return Unary(n, OpKind::kSoftmax, Rand({2, 5, 3}, 41, -4, 4), A({{"axis", int64_t{1}}})); }},
      {"LogSoftmax_rows", [](Net& n) { return Unary(n, OpKind::kLogSoftmax, Rand({3, 1500}, 42, -4, 4)); }},
      {"LogSoftmax_axis0", [](Net& n) { return Unary(n, OpKind::kLogSoftmax, Rand({4, 6}, 43, -4, 4), A({{"axis", int64_t{0}}})); }},
      {"LayerNormalization", [](Net& n) {
         ValueId x = n.Input("x", Rand({6, 2, 40}, 44, -2, 2)), g = n.Input("g", Rand({40}, 45)), b = n.Input("b", Rand({40}, 46));
         return Built{n.OpN(OpKind::kLayerNormalization, {x, g, b}, A({{"axis", int64_t{-1}}, {"epsilon", 1e-5}}))[0], {x, g, b}};
       }},
      {"LayerNormalization_many_rows", [](Net& n) {  // the column sums in chunks (ChunksOf)
         ValueId x = n.Input("x", Rand({700, 6}, 57, -2, 2)), g = n.Input("g", Rand({6}, 58)), b = n.Input("b", Rand({6}, 59));
         return Built{n.OpN(OpKind::kLayerNormalization, {x, g, b}, A({{"axis", int64_t{-1}}, {"epsilon", 1e-5}}))[0], {x, g, b}};
       }},
      {"RMSNorm_many_rows", [](Net& n) {
         ValueId x = n.Input("x", Rand({600, 35}, 93, -2, 2)), g = n.Input("g", Rand({35}, 94));
         return Built{n.OpN(OpKind::kRMSNorm, {x, g}, A({{"axis", int64_t{-1}}, {"epsilon", 1e-6}}))[0], {x, g}};
       }},
      {"RMSNorm", [](Net& n) {
         ValueId x = n.Input("x", Rand({5, 33}, 47, -2, 2)), g = n.Input("g", Rand({33}, 48));
         return Built{n.OpN(OpKind::kRMSNorm, {x, g}, A({{"axis", int64_t{-1}}, {"epsilon", 1e-6}}))[0], {x, g}};
       }},
      {"Gelu_erf_bias", [](Net& n) {
         ValueId x = n.Input("x", Rand({6, 10}, 50, -3, 3)), b = n.Input("b", Rand({10}, 51));
         return Built{n.Op(OpKind::kGelu, {x, b}, GeluAttrs(false)), {x, b}};
       }},
      {"Gelu_tanh", [](Net& n) { return Unary(n, OpKind::kGelu, Rand({6, 10}, 52, -3, 3), GeluAttrs(true)); }},
      {"Silu", [](Net& n) { return Unary(n, OpKind::kSilu, Rand({6, 37}, 53, -8, 8)); }},
      {"MaskedSoftmax", [](Net& n) {
         std::vector<int> upper;
         for (int i = 0; i < 6; ++i)
           for (int j = 0; j < 6; ++j) upper.push_back(j > i);
         ValueId s = n.Input("s", Rand({2, 3, 6, 6}, 53, -3, 3));
         ValueId y = n.Op(OpKind::kMaskedSoftmax, {s, n.Const("mask", Bools({6, 6}, upper))},
                          A({{"scale", 8.0}, {"divide", int64_t{1}}, {"fill", -1e9}, {"fill_if", int64_t{1}}}));
         return Built{y, {s}};
       }},
      {"NonFinite", [](Net& n) {  // NaN and infinities pass through exp and softmax as on the CPU
         Tensor x = Rand({4, 9}, 55, -3, 3);
         float* p = x.data<float>();
         p[2] = std::numeric_limits<float>::quiet_NaN();
         p[9 + 4] = std::numeric_limits<float>::infinity();
         p[18 + 1] = -std::numeric_limits<float>::infinity();
         for (int j = 0; j < 9; ++j) p[27 + j] = -std::numeric_limits<float>::infinity();
         ValueId v = n.Input("x", x);
         return Built{n.Op(OpKind::kAdd, {n.Op(OpKind::kExp, {v}), n.Op(OpKind::kSoftmax, {v})}), {}};
       }},
      {"MaskedSoftmax_row_masked_to_minus_inf", [](Net& n) {
         std::vector<int> mask(4 * 5, 0);
         for (int j = 0; j < 5; ++j) mask[j] = 1;  // row 0 entirely masked: exp(-inf - -inf) is NaN
         mask[5 + 2] = 1;
         ValueId s = n.Input("s", Rand({2, 4, 5}, 56, -3, 3));
         return Built{n.Op(OpKind::kMaskedSoftmax, {s, n.Const("mask", Bools({4, 5}, mask))},
                           A({{"scale", 1.0}, {"fill", -static_cast<double>(std::numeric_limits<float>::infinity())},
                              {"fill_if", int64_t{1}}})),
                      {}};
       }},
      {"MaskedSoftmax_nomask", [](Net& n) { return Unary(n, OpKind::kMaskedSoftmax, Rand({4, 70}, 54, -3, 3), A({{"scale", 0.5}})); }},
      {"Reshape_Transpose", [](Net& n) {
         ValueId x = n.Input("x", Rand({2, 3, 4, 5}, 55));
         ValueId t = n.Op(OpKind::kTranspose, {x}, A({{"perm", std::vector<int64_t>{0, 2, 3, 1}}}));
         return Built{n.Op(OpKind::kReshape, {t}, A({{"shape", std::vector<int64_t>{8, 15}}})), {x}};
       }},
      {"Concat_Split", [](Net& n) {
         ValueId a = n.Input("a", Rand({2, 3, 4}, 56)), b = n.Input("b", Rand({2, 5, 4}, 57));
         ValueId c = n.Op(OpKind::kConcat, {a, b}, A({{"axis", int64_t{1}}}));
         auto parts = n.OpN(OpKind::kSplit, {c}, A({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{6, 2}}}));
         return Built{n.Op(OpKind::kMul, {parts[1], n.Op(OpKind::kSlice, {parts[0]}, A({{"starts", std::vector<int64_t>{0, 0, 0}}, {"ends", std::vector<int64_t>{2, 2, 4}}, {"steps", std::vector<int64_t>{1, 1, 1}}}))}), {a, b}};
       }},
      {"Slice_steps", [](Net& n) {
         return Unary(n, OpKind::kSlice, Rand({4, 6}, 58),
                      A({{"starts", std::vector<int64_t>{3, 5}}, {"ends", std::vector<int64_t>{-1, -1}}, {"steps", std::vector<int64_t>{-1, -2}}}));
       }},
      {"Expand", [](Net& n) { return Unary(n, OpKind::kExpand, Rand({3, 1}, 59), A({{"shape", std::vector<int64_t>{2, 3, 4}}})); }},
      {"Tile", [](Net& n) { return Unary(n, OpKind::kTile, Rand({2, 3}, 60), A({{"repeats", std::vector<int64_t>{2, 3}}})); }},
      {"Pad_constant", [](Net& n) {
         return Unary(n, OpKind::kPad, Rand({2, 3}, 61), A({{"pads", std::vector<int64_t>{1, 0, 2, 1}}, {"value", 0.5}}));
       }},
      {"Pad_integer_values", [](Net& n) {  // the value cast to the element type, as ONNX pads
         ValueId i64 = n.Input("x", RandInts({2, 3}, 65, -9, 9));
         ValueId i32 = n.Op(OpKind::kCast, {i64}, A({{"dtype", static_cast<int64_t>(DType::kI32)}}));
         const ir::Attrs pad = A({{"pads", std::vector<int64_t>{1, 0, 0, 2}}, {"value", 7.0}});
         ValueId a = n.Op(OpKind::kCast, {n.Op(OpKind::kPad, {i32}, pad)}, A({{"dtype", static_cast<int64_t>(DType::kI64)}}));
         return Built{n.Op(OpKind::kAdd, {a, n.Op(OpKind::kPad, {i64}, pad)}), {}};
       }},
      {"Pad_reflect", [](Net& n) {
         return Unary(n, OpKind::kPad, Rand({3, 4}, 62), A({{"pads", std::vector<int64_t>{2, 1, 1, 3}}, {"mode", int64_t{1}}}));
       }},
      {"Pad_edge", [](Net& n) {
         return Unary(n, OpKind::kPad, Rand({3, 4}, 63), A({{"pads", std::vector<int64_t>{2, 0, 1, 5}}, {"mode", int64_t{2}}}));
       }},
      {"Pad_wrap", [](Net& n) {
         return Unary(n, OpKind::kPad, Rand({3, 4}, 64), A({{"pads", std::vector<int64_t>{4, 1, 0, 6}}, {"mode", int64_t{3}}}));
       }},
      {"Gather_embedding", [](Net& n) {
         // Many repeats of few rows: the scatter-add's order is the CPU's, so the bits are too.
         ValueId w = n.Input("w", Rand({50, 64}, 65));
         ValueId y = n.Op(OpKind::kGather, {w, n.Input("i", RandInts({8, 64}, 66, -50, 50))});
         Built b{y, {w}};
         b.exact = true;
         return b;
       }},
      {"Gather_axis1", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 5, 4}, 67));
         return Built{n.Op(OpKind::kGather, {x, n.Input("i", Ints({2, 2}, {4, -1, 0, 4}))}, A({{"axis", int64_t{1}}})), {x}};
       }},
      {"GatherElements", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 5}, 68));
         return Built{n.Op(OpKind::kGatherElements, {x, n.Input("i", RandInts({3, 7}, 69, -5, 5))}, A({{"axis", int64_t{1}}})), {x}};
       }},
      {"GatherND", [](Net& n) {
         ValueId x = n.Input("x", Rand({4, 3, 5}, 70));
         return Built{n.Op(OpKind::kGatherND, {x, n.Input("i", Ints({3, 2}, {1, 2, -1, 0, 1, 2}))}), {x}};
       }},
      {"ScatterND_add", [](Net& n) {
         ValueId x = n.Input("x", Rand({5, 3}, 71)), u = n.Input("u", Rand({3, 3}, 72));
         return Built{n.Op(OpKind::kScatterND, {x, n.Input("i", Ints({3, 1}, {3, 1, 3})), u}, A({{"add", int64_t{1}}})), {x, u}};
       }},
      {"ScatterND", [](Net& n) {
         ValueId x = n.Input("x", Rand({5, 3}, 73)), u = n.Input("u", Rand({2, 3}, 74));
         return Built{n.Op(OpKind::kScatterND, {x, n.Input("i", Ints({2, 1}, {4, -5})), u}), {x, u}};
       }},
      {"Where", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 4}, 75)), y = n.Input("y", Rand({1}, 76));
         return Built{n.Op(OpKind::kWhere, {n.Input("c", RandBools({4}, 77)), x, y}), {x, y}};
       }},
      {"Compare_logic", [](Net& n) {
         ValueId a = n.Input("a", Rand({3, 4}, 78)), b = n.Input("b", Rand({4}, 79));
         ValueId ia = n.Input("ia", RandInts({3, 4}, 80, 0, 3)), ib = n.Input("ib", RandInts({3, 4}, 81, 0, 3));
         ValueId lt = n.Op(OpKind::kLess, {a, b}), le = n.Op(OpKind::kLessOrEqual, {ia, ib});
         ValueId gt = n.Op(OpKind::kGreater, {a, b}), ge = n.Op(OpKind::kGreaterOrEqual, {ia, ib});
         ValueId eq = n.Op(OpKind::kEqual, {ia, ib});
         ValueId any = n.Op(OpKind::kOr, {n.Op(OpKind::kAnd, {lt, le}), n.Op(OpKind::kNot, {n.Op(OpKind::kOr, {gt, ge})})});
         return Built{n.Op(OpKind::kAnd, {any, eq}), {}};
       }},
      {"Cast", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 4}, 82, -40, 40));
         ValueId i = n.Op(OpKind::kCast, {x}, A({{"dtype", static_cast<int64_t>(DType::kI64)}}));
         ValueId f = n.Op(OpKind::kCast, {i}, A({{"dtype", static_cast<int64_t>(DType::kF32)}}));
         ValueId b = n.Op(OpKind::kCast, {x}, A({{"dtype", static_cast<int64_t>(DType::kBool)}}));
         ValueId bf = n.Op(OpKind::kCast, {b}, A({{"dtype", static_cast<int64_t>(DType::kF32)}}));
         return Built{n.Op(OpKind::kAdd, {f, bf}), {}};
       }},
      {"Trilu", [](Net& n) {
         ValueId x = n.Input("x", Rand({2, 4, 5}, 83));
         ValueId lo = n.Op(OpKind::kTrilu, {x}, A({{"upper", int64_t{0}}, {"k", int64_t{1}}}));
         return Built{n.Op(OpKind::kAdd, {lo, n.Op(OpKind::kTrilu, {x}, A({{"k", int64_t{-1}}}))}), {x}};
       }},
      {"ReduceSum", [](Net& n) { return Unary(n, OpKind::kReduceSum, Rand({3, 40, 5}, 84), A({{"axes", std::vector<int64_t>{0, 2}}})); }},
      {"ReduceMean", [](Net& n) {
         return Unary(n, OpKind::kReduceMean, Rand({3, 40, 5}, 85), A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
       }},
      {"ReduceMax", [](Net& n) { return Unary(n, OpKind::kReduceMax, Rand({6, 9}, 86), A({{"axes", std::vector<int64_t>{1}}})); }},
      {"ReduceSum_int64", [](Net& n) {
         return Built{n.Op(OpKind::kReduceSum, {n.Input("x", RandInts({4, 6}, 87, -9, 9))}, A({{"axes", std::vector<int64_t>{0}}})), {}};
       }},
      {"ReduceMax_int64", [](Net& n) {
         return Built{n.Op(OpKind::kReduceMax, {n.Input("x", RandInts({4, 6}, 88, -9, 9))}, A({{"axes", std::vector<int64_t>{1}}})), {}};
       }},
      {"Reductions_in_chunks", [](Net& n) {  // many terms to few outputs: partial results per chunk
         Tensor x = Rand({3, 900}, 95, -2, 2);
         x.data<float>()[900 + 444] = std::numeric_limits<float>::quiet_NaN();
         ValueId v = n.Input("x", x), w = n.Input("w", Rand({2, 700, 3}, 96));
         ValueId mx = n.Op(OpKind::kReduceMax, {v}, A({{"axes", std::vector<int64_t>{1}}}));
         ValueId sum = n.Op(OpKind::kReduceSum, {w}, A({{"axes", std::vector<int64_t>{0, 1}}, {"keepdims", int64_t{0}}}));
         ValueId mean = n.Op(OpKind::kReduceMean, {w}, A({{"axes", std::vector<int64_t>{1}}}));
         ValueId to = n.Op(OpKind::kSumTo, {w}, A({{"shape", std::vector<int64_t>{1}}}));
         ValueId ints = n.Op(OpKind::kReduceSum, {n.Input("i", RandInts({800, 2}, 97, -9, 9))}, A({{"axes", std::vector<int64_t>{0}}}));
         ValueId f = n.Op(OpKind::kCast, {ints}, A({{"dtype", static_cast<int64_t>(DType::kF32)}}));
         ValueId all = n.Op(OpKind::kAdd, {n.Op(OpKind::kAdd, {n.Op(OpKind::kReduceSum, {mx}, A({{"axes", std::vector<int64_t>{0}}})), sum}),
                                           n.Op(OpKind::kAdd, {to, n.Op(OpKind::kReduceSum, {f}, A({{"axes", std::vector<int64_t>{0, 1}}}))})});
         return Built{n.Op(OpKind::kAdd, {all, n.Op(OpKind::kReduceSum, {mean}, A({{"axes", std::vector<int64_t>{0, 1, 2}}}))}), {}};
       }},
      {"SumTo", [](Net& n) {  // a gradient op itself: no backward
         return Built{n.Op(OpKind::kSumTo, {n.Input("x", Rand({4, 3, 50}, 89))}, A({{"shape", std::vector<int64_t>{3, 1}}})), {}};
       }},
      {"Scale", [](Net& n) { return Unary(n, OpKind::kScale, Rand({4, 5}, 90), A({{"alpha", -1.5}})); }},
      {"Dropout", [](Net& n) { return Unary(n, OpKind::kDropout, Rand({4, 50}, 91), A({{"ratio", 0.3}, {"key", int64_t{7}}})); }},
      {"CrossEntropy", [](Net& n) {
         ValueId x = n.Input("x", Rand({6, 37}, 92, -3, 3));
         Tensor labels = RandInts({6}, 93, 0, 37);
         labels.data<int64_t>()[2] = -100;
         return Built{n.Op(OpKind::kCrossEntropy, {x, n.Input("y", labels)}, A({{"ignore_index", int64_t{-100}}})), {x}};
       }},
      {"CrossEntropy_wide", [](Net& n) {
         ValueId x = n.Input("x", Rand({3, 2500}, 94, -3, 3));
         return Built{n.Op(OpKind::kCrossEntropy, {x, n.Input("y", RandInts({3}, 95, 0, 2500))}, A({{"sum", int64_t{1}}})), {x}};
       }},
      {"Mse", [](Net& n) {
         ValueId p = n.Input("p", Rand({7, 3}, 96));
         return Built{n.Op(OpKind::kMse, {p, n.Input("t", Rand({7, 3}, 97))}), {p}};
       }},
      {"Accumulate", [](Net& n) {
         Built b{n.Op(OpKind::kAccumulate, {n.Input("g", Rand({5, 6}, 98))}), {}};
         b.micros = 3;
         return b;
       }},
      {"GradNorm_clip", [](Net& n) {
         ValueId s1 = n.Op(OpKind::kSquareSum, {n.Input("g1", Rand({300, 70}, 99))});
         ValueId s2 = n.Op(OpKind::kSquareSum, {n.Input("g2", Rand({5}, 100))});
         std::vector<ValueId> parts = {s1, s2};
         for (int i = 0; i < 40; ++i) parts.push_back(s2);  // AddN past one launch's 32 inputs
         ValueId total = n.Op(OpKind::kAddN, parts);
         return Built{n.Op(OpKind::kClipCoef, {total}, A({{"max_norm", 3.0}})), {}};
       }},
      {"Conv_bias_pad", [](Net& n) {
         return ConvCase(n, {2, 3, 7, 6}, {4, 3, 3, 3}, Window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), true, 120);
       }},
      {"Conv_uneven_pads_strided_dilated", [](Net& n) {
         return ConvCase(n, {2, 3, 7, 6}, {4, 3, 3, 2}, Window({3, 2}, {2, 1}, {0, 1, 2, 0}, {1, 2}), false, 123);
       }},
      {"Conv_groups", [](Net& n) {
         return ConvCase(n, {1, 4, 5, 5}, {6, 2, 3, 3}, With(Window({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}), "group", 2), true, 126);
       }},
      {"Conv_depthwise_dilated", [](Net& n) {
         return ConvCase(n, {2, 4, 6, 6}, {4, 1, 3, 3}, With(Window({3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}), "group", 4), false, 129);
       }},
      {"Conv_large", [](Net& n) {  // channels and a batch enough for cuDNN's tiled algorithms
         return ConvCase(n, {4, 32, 16, 16}, {64, 32, 3, 3}, Window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}), true, 132);
       }},
      {"MaxPool_pads_dilated_ceil", [](Net& n) {
         return PoolCase(n, OpKind::kMaxPool, Rand({2, 3, 7, 6}, 135),
                         With(Window({3, 2}, {2, 2}, {1, 0, 1, 1}, {1, 2}), "ceil_mode", 1));
       }},
      {"MaxPool_overlapping_ties", [](Net& n) {  // every window ties: the first maximum takes the gradient
         return PoolCase(n, OpKind::kMaxPool, Tensor::Full({1, 2, 5, 5}, 2.f), Window({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}));
       }},
      {"AveragePool_exclude_pad", [](Net& n) {
         return PoolCase(n, OpKind::kAveragePool, Rand({2, 2, 5, 4}, 136),
                         With(Window({2, 3}, {2, 1}, {1, 1, 0, 1}, {1, 1}), "count_include_pad", 0));
       }},
      {"AveragePool_include_pad_ceil", [](Net& n) {
         return PoolCase(n, OpKind::kAveragePool, Rand({2, 3, 7, 6}, 137),
                         With(With(Window({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}), "count_include_pad", 1), "ceil_mode", 1));
       }},
      {"SgdUpdate", [](Net& n) {
         ValueId w = n.Input("w", Rand({40, 30}, 101)), g = n.Input("g", Rand({40, 30}, 102));
         ValueId coef = n.Input("coef", Tensor::Full({}, 0.75f));
         n.OpN(OpKind::kSgdUpdate, {w, g, coef},
               A({{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", int64_t{1}}, {"steps", int64_t{3}}}));
         Built b{w, {}};
         b.steps = 3;
         return b;
       }},
      {"AdamWUpdate", [](Net& n) {
         ValueId w = n.Input("w", Rand({40, 30}, 103)), g = n.Input("g", Rand({40, 30}, 104));
         ValueId coef = n.Input("coef", Tensor::Full({}, 0.5f));
         n.OpN(OpKind::kAdamWUpdate, {w, g, coef},
               A({{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1}, {"schedule", int64_t{2}},
                  {"warmup", int64_t{1}}, {"min_lr", 1e-3}, {"steps", int64_t{3}}}));
         Built b{w, {}};
         b.steps = 3;
         return b;
       }},
  };
  return cases;
}

// Adds the backward of `b.out` with respect to b.wrt through a random projection to a scalar.
// Puts the projection's dot product and the loss in `inexact`: a GEMM's order of additions is
// its library's, so these two are never bit-exact, while the gradients they seed are (each
// element of d(flat) is one product).
// False (and a failure recorded) when the backward cannot be built.
bool AddBackward(Net& n, const Built& b, std::set<ValueId>* inexact = nullptr) {
  if (b.wrt.empty()) return true;
  const int64_t count = n.graph().type(b.out).shape.numel();
  ValueId flat = n.Op(OpKind::kReshape, {b.out}, A({{"shape", std::vector<int64_t>{1, count}}}));
  ValueId dot = n.Op(OpKind::kMatMul, {flat, n.Const("proj", Rand({count, 1}, 999))});
  ValueId loss = n.Op(OpKind::kReshape, {dot}, A({{"shape", std::vector<int64_t>{}}}));
  auto grads = ir::Backward(n.builder(), loss, n.Const("seed", Tensor::Full({}, 1.f)), b.wrt);
  if (inexact) *inexact = {dot, loss};
  EXPECT_TRUE(grads.ok()) << grads.status().message();
  return grads.ok();
}

// Runs the graph's nodes in order on device `dev`; its values' tensors persist in `env` from one
// run to the next, as the harness's on the CPU.
class DeviceRun {
 public:
  DeviceRun(const ir::Graph& g, Device dev) : g_(g), dev_(dev), stream_(BackendOf(dev.type)->NewStream(dev.index)) {
    for (const ir::Value& v : g.values) {
      env_.emplace_back(v.type.dtype, v.type.shape, dev);
      if (v.data.defined()) env_.back().CopyFrom(v.data);
    }
  }
  Status Run(int64_t step, int64_t micro) {
    for (const ir::Node& node : g_.nodes) {
      std::vector<Tensor> in, out;
      for (ValueId v : node.in) in.push_back(v == ir::kNoValue ? Tensor{} : env_[static_cast<size_t>(v)]);
      for (ValueId v : node.out) out.push_back(env_[static_cast<size_t>(v)]);
      KernelCtx ctx{node, in, out, step, micro, 1, stream_.get()};
      if (Status s = Kernel(node.op, dev_.type)(ctx); !s.ok()) {
        stream_->Synchronize();  // an earlier node's data error is this run's, not the next one's
        (void)BackendOf(dev_.type)->TakeDataError(*stream_);
        return s;
      }
    }
    stream_->Synchronize();
    return BackendOf(dev_.type)->TakeDataError(*stream_);
  }
  // The graph's nodes, all updates of one op, as one update group: one call of the group kernel.
  Status RunGroup(int64_t step) {
    std::vector<std::vector<Tensor>> in(g_.nodes.size()), out(g_.nodes.size());
    std::vector<KernelCtx> members;
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      for (ValueId v : g_.nodes[i].in) in[i].push_back(v == ir::kNoValue ? Tensor{} : env_[static_cast<size_t>(v)]);
      for (ValueId v : g_.nodes[i].out) out[i].push_back(env_[static_cast<size_t>(v)]);
      members.push_back(KernelCtx{g_.nodes[i], in[i], out[i], step, 0, 1, stream_.get()});
    }
    RETURN_IF_ERROR(GroupKernel(g_.nodes[0].op, dev_.type)(members));
    stream_->Synchronize();
    return BackendOf(dev_.type)->TakeDataError(*stream_);
  }
  Tensor Host(ValueId v) const { return env_[static_cast<size_t>(v)].ToHost(); }

 private:
  const ir::Graph& g_;
  Device dev_;
  std::unique_ptr<DeviceStream> stream_;
  std::vector<Tensor> env_;
};

// Every element within rtol of the CPU's, with a slack of rtol times the tensor's largest
// magnitude; exactly where `exact`, and always for integers and bools.
::testing::AssertionResult Agree(const std::string& what, const Tensor& cpu, const Tensor& dev, bool exact) {
  if (cpu.dtype() != dev.dtype() || !(cpu.shape() == dev.shape()))
    return ::testing::AssertionFailure() << what << ": " << dev.shape().ToString() << " vs " << cpu.shape().ToString();
  const size_t bytes = cpu.bytes();
  if (cpu.dtype() != DType::kF32 || exact) {
    if (bytes == 0 || std::memcmp(cpu.raw(), dev.raw(), bytes) == 0) return ::testing::AssertionSuccess();
    return ::testing::AssertionFailure() << what << ": the bits differ (" << dev.ToString() << " vs " << cpu.ToString() << ")";
  }
  constexpr double kRtol = 1e-5;
  double biggest = 0;  // of the finite values: an infinity would excuse any difference
  for (float x : cpu.span<float>())
    if (std::isfinite(x)) biggest = std::max(biggest, static_cast<double>(std::fabs(x)));
  int bad = 0;
  std::ostringstream msg;
  msg.precision(9);
  for (int64_t i = 0; i < cpu.numel(); ++i) {
    const double want = cpu.data<float>()[i], got = dev.data<float>()[i];
    if (std::isnan(want) && std::isnan(got)) continue;
    if (!std::isfinite(want) || !std::isfinite(got)) {
      if (want == got) continue;  // the same infinity
    } else if (std::fabs(got - want) <= kRtol * (std::fabs(want) + biggest)) {
      continue;
    }
    if (++bad <= 4) msg << "\n  [" << i << "] device " << got << ", cpu " << want;
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << what << ": " << bad << " of " << cpu.numel() << " elements differ" << msg.str();
}

class DeviceParity : public ::testing::TestWithParam<DeviceType> {
 protected:
  void SetUp() override {
    if (GetParam() != DeviceType::kCuda) return;
    Result<int> gpu = cuda::InitDevice(0);
    if (!gpu.ok()) GTEST_SKIP() << "no CUDA device to test: " << gpu.status().message();
    cuda::AllowTf32(false);
  }
};

// Each case on its own: a failed ASSERT ends that case, not the rest. Its name goes to stderr
// first, so that a fault which aborts the process (an illegal address) still names it.
TEST_P(DeviceParity, EveryCase) {
  for (const Case& c : Cases()) {
    std::fprintf(stderr, "[ case     ] %s\n", c.name);
    [&] {
      SCOPED_TRACE(c.name);
      Net net;
      const Built b = c.build(net);
      std::set<ValueId> inexact;
      if (!AddBackward(net, b, &inexact)) return;  // HasFatalFailure would count earlier cases
      DeviceRun dev(net.graph(), Device{GetParam(), 0});  // copies the inputs before the CPU's updates
      for (int step = 0; step < b.steps; ++step) {
        for (int micro = 0; micro < b.micros; ++micro) {
          const Status on_dev = dev.Run(step, micro);
          ASSERT_TRUE(on_dev.ok()) << on_dev.message();
          const Status on_cpu = net.Run(step, micro);
          ASSERT_TRUE(on_cpu.ok()) << on_cpu.message();
          for (size_t v = 0; v < net.graph().values.size(); ++v) {
            const auto id = static_cast<ValueId>(v);
            const bool exact = (b.exact && !inexact.count(id)) || GetParam() == DeviceType::kSim;
            EXPECT_TRUE(Agree(net.graph().values[v].name + " at step " + std::to_string(step) + ", micro-batch " +
                                  std::to_string(micro),
                              net[id], dev.Host(id), exact));
          }
        }
      }
    }();
  }
}

// An update group's kernel (ops/op.h) on the device gives what the CPU's kernel gives one
// parameter at a time: 40 members, more than one launch takes, of sizes around a block's chunk
// and empty, some without the clip coefficient, over 3 steps.
TEST_P(DeviceParity, UpdateGroupsMatchOneByOne) {
  const ir::Attrs adamw = A({{"lr", 1e-2}, {"beta1", 0.9}, {"beta2", 0.95}, {"eps", 1e-8}, {"weight_decay", 0.1},
                             {"schedule", int64_t{2}}, {"warmup", int64_t{1}}, {"min_lr", 1e-3}, {"steps", int64_t{3}}});
  const ir::Attrs nesterov = A({{"lr", 0.1}, {"momentum", 0.9}, {"weight_decay", 0.01}, {"nesterov", int64_t{1}}, {"steps", int64_t{3}}});
  const ir::Attrs plain = A({{"lr", 0.1}, {"weight_decay", 0.01}, {"steps", int64_t{3}}});
  const std::vector<Shape> sizes = {{1}, {8191}, {8192}, {8193}, {3, 7000}, {0}, {17}};
  for (const auto& [op, attrs, what] : {std::tuple{OpKind::kAdamWUpdate, adamw, "AdamW"},
                                        std::tuple{OpKind::kSgdUpdate, nesterov, "SGD with Nesterov momentum"},
                                        std::tuple{OpKind::kSgdUpdate, plain, "SGD"}}) {
    SCOPED_TRACE(what);
    Net net;
    const ValueId coef = net.Input("coef", Tensor::Full({}, 0.5f));
    for (uint32_t i = 0; i < 40; ++i) {
      const Shape& s = sizes[i % sizes.size()];
      const ValueId w = net.Input("w" + std::to_string(i), Rand(s, 200 + 2 * i));
      const ValueId g = net.Input("g" + std::to_string(i), Rand(s, 201 + 2 * i));
      std::vector<ValueId> in{w, g};
      if (i % 3 != 0) in.push_back(coef);
      net.OpN(op, in, attrs);
    }
    DeviceRun dev(net.graph(), Device{GetParam(), 0});
    for (int step = 0; step < 3; ++step) {
      const Status on_dev = dev.RunGroup(step);
      ASSERT_TRUE(on_dev.ok()) << on_dev.message();
      const Status on_cpu = net.Run(step, 0);
      ASSERT_TRUE(on_cpu.ok()) << on_cpu.message();
      for (size_t v = 0; v < net.graph().values.size(); ++v) {
        const auto id = static_cast<ValueId>(v);
        EXPECT_TRUE(Agree(net.graph().values[v].name + " at step " + std::to_string(step), net[id], dev.Host(id),
                          GetParam() == DeviceType::kSim));
      }
    }
  }
}

// A data error (an index out of range) fails the kernel's run with the CPU's message.
TEST_P(DeviceParity, BadIndexIsAnError) {
  Net net;
  net.Op(OpKind::kGather, {net.Input("w", Rand({5, 3}, 1)), net.Input("i", Ints({3}, {1, 5, 0}))});
  DeviceRun dev(net.graph(), Device{GetParam(), 0});
  const Status s = dev.Run(0, 0);
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("index 5 is out of range [-5, 5)"), std::string::npos) << s.message();
}

INSTANTIATE_TEST_SUITE_P(Devices, DeviceParity, ::testing::Values(DeviceType::kSim, DeviceType::kCuda),
                         [](const ::testing::TestParamInfo<DeviceType>& p) { return std::string(Name(p.param)); });

// The cases cover every op that has a CUDA kernel (FR_CUDA_OPS), forward and backward graphs
// together.
TEST(DeviceParityCases, CoverEveryCudaOp) {
  std::set<OpKind> seen;
  for (const Case& c : Cases()) {
    Net net;
    const Built b = c.build(net);
    AddBackward(net, b);
    for (const ir::Node& node : net.graph().nodes) seen.insert(node.op);
  }
  std::string missing;
#define FR_CUDA_SEEN(name) \
  if (!seen.count(OpKind::k##name)) missing += std::string(missing.empty() ? "" : ", ") + #name;
  FR_CUDA_OPS(FR_CUDA_SEEN)
#undef FR_CUDA_SEEN
  EXPECT_EQ(missing, "") << "ops with a CUDA kernel and no parity case";
}

}  // namespace
}  // namespace fr::test
