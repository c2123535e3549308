// The graph rewrites after import (ir/rewrite.h): each matches its exported chain, gives the same
// values as the chain (run with the CPU kernels before and after), and leaves a chain alone when a
// tensor inside it is read elsewhere.
#include <gtest/gtest.h>

#include <cmath>
#include <limits>
#include <map>

#include "ir/autodiff.h"
#include "ir/onnx_import.h"
#include "ir/rewrite.h"
#include "ops/harness.h"

namespace fr::test {
namespace {

using ir::ValueId;

ValueId Param(Net& net, const std::string& name, Tensor t) {
  ir::TensorType type{t.dtype(), t.shape()};
  return net.graph().AddValue(name, std::move(type), ir::ValueKind::kParam, std::move(t));
}

std::map<OpKind, int> OpCounts(const ir::Graph& g) {
  std::map<OpKind, int> n;
  for (const ir::Node& node : g.nodes) ++n[node.op];
  return n;
}

// Every rewrite, projections split wherever they match.
const ir::RewriteOptions kSplitAll{[](const ir::Node&, ValueId, ValueId) { return true; }};

// Runs `out` before and after the rewrites (on a copy of the net's graph, same inputs); rtol 0:
// the same bits. NaN matches NaN.
void ExpectSameValues(Net& net, ValueId out, double rtol) {
  ASSERT_TRUE(net.Run().ok());
  const Tensor before = net[out].Clone();
  Net after;
  after.graph() = net.graph();
  ir::Rewrite(after.graph(), kSplitAll);
  ASSERT_TRUE(after.Run().ok());
  const Tensor& got = after[out];
  ASSERT_EQ(got.shape(), before.shape());
  for (int64_t i = 0; i < got.numel(); ++i) {
    const float a = got.data<float>()[i], b = before.data<float>()[i];
    if (std::isnan(a) && std::isnan(b)) continue;  // NaN where the chain gives NaN (a row wholly masked by -inf)
    if (rtol == 0)
      EXPECT_EQ(a, b) << i;
    else
      EXPECT_NEAR(a, b, rtol * std::abs(b) + 1e-7) << i;
  }
}

// (H * (erf(H / c) + 1)) * 0.5 with H = b + x, as PyTorch exports nn.GELU() after nn.Linear.
struct GeluNet {
  Net net;
  ValueId x, b, h, erf, y;
  explicit GeluNet(Shape half_shape = {}) {
    x = net.Input("x", Rand({2, 3, 8}, 1, -3, 3));
    b = Param(net, "fc.bias", Rand({8}, 2));
    h = net.Op(OpKind::kAdd, {b, x});
    ValueId d = net.Op(OpKind::kDiv, {h, net.Const("sqrt2", Tensor::Full({}, 1.4142135381698608f))});
    erf = net.Op(OpKind::kErf, {d});
    ValueId a = net.Op(OpKind::kAdd, {erf, net.Const("one", Tensor::Full({}, 1.f))});
    y = net.Op(OpKind::kMul, {net.Op(OpKind::kMul, {h, a}), net.Const("half", Tensor::Full(half_shape, 0.5f))});
    net.graph().outputs.push_back(y);
  }
};

TEST(Rewrite, GeluWithItsBias) {
  GeluNet t;
  ExpectSameValues(t.net, t.y, 1e-6);
  ir::Graph g = t.net.graph();
  const ir::RewriteCounts c = ir::Rewrite(g);
  EXPECT_EQ(c.gelus, 1);
  ASSERT_EQ(g.nodes.size(), 1u);
  EXPECT_EQ(g.nodes[0].op, OpKind::kGelu);
  EXPECT_EQ(g.nodes[0].in, (std::vector<ValueId>{t.x, t.b}));
  EXPECT_EQ(g.nodes[0].out, (std::vector<ValueId>{t.y}));
  EXPECT_EQ(g.value(t.y).producer, 0);
  EXPECT_FLOAT_EQ(static_cast<float>(g.nodes[0].attrs.Float("div")), 1.4142135381698608f);
  // The fused node answers to the names of the six it replaced (stage globs written against the
  // ONNX file's names still find it).
  for (const ir::Node& n : t.net.graph().nodes) EXPECT_TRUE(g.nodes[0].AnswersTo(n.name)) << n.name;
  EXPECT_FALSE(g.nodes[0].AnswersTo("nothing*"));
}

TEST(Rewrite, GeluReadElsewhereStays) {
  GeluNet t;
  t.net.graph().outputs.push_back(t.erf);  // the erf is wanted on its own
  ir::Graph g = t.net.graph();
  EXPECT_EQ(ir::Rewrite(g).gelus, 0);
  EXPECT_EQ(g.nodes.size(), t.net.graph().nodes.size());
  GeluNet u;  // the bias add's output read elsewhere: the GELU fuses, the add stays
  ValueId other = u.net.Op(OpKind::kMul, {u.h, u.h});
  u.net.graph().outputs.push_back(other);
  ir::Graph g2 = u.net.graph();
  EXPECT_EQ(ir::Rewrite(g2).gelus, 1);
  auto n = OpCounts(g2);
  EXPECT_EQ(n[OpKind::kGelu], 1);
  EXPECT_EQ(n[OpKind::kAdd], 1);
  EXPECT_EQ(n[OpKind::kErf], 0);
}

// 0.5 H (1 + tanh(sqrt(2/pi) (H + 0.044715 H^3))) with H = b + x, in the three forms PyTorch
// exports (rewrite.cpp): GPT-2's NewGELU, Mul(Mul(H, 0.5), Add(Tanh(Mul(Add(H, Mul(Pow(H, 3),
// kappa)), beta)), 1)); F.gelu(approximate="tanh") by dynamo, Mul(H, Mul(0.5, Add(T, 1))); by
// TorchScript, Mul(0.5, Mul(H, Add(1, T))) with the cube as Mul(H, Mul(H, H)).
enum class GeluTanhForm { kNewGelu, kDynamo, kTorchScript };
struct GeluTanhNet {
  Net net;
  ValueId x, b, h, tanh, square = ir::kNoValue, y;
  explicit GeluTanhNet(float kappa = 0.044715f, Shape half_shape = {}, GeluTanhForm form = GeluTanhForm::kNewGelu) {
    x = net.Input("x", Rand({2, 3, 8}, 3, -4, 4));
    b = Param(net, "fc.bias", Rand({8}, 4));
    h = net.Op(OpKind::kAdd, {x, b});
    ValueId half_c = net.Const("half", Tensor::Full(half_shape, 0.5f));
    ValueId cube;
    if (form == GeluTanhForm::kTorchScript) {
      square = net.Op(OpKind::kMul, {h, h});
      cube = net.Op(OpKind::kMul, {h, square});
    } else {
      cube = net.Op(OpKind::kPow, {h, net.Const("three", Tensor::Full({}, 3.f))});
    }
    ValueId scaled = net.Op(OpKind::kMul, {cube, net.Const("kappa", Tensor::Full({}, kappa))});
    ValueId inner = net.Op(OpKind::kAdd, {h, scaled});
    ValueId arg = net.Op(OpKind::kMul, {inner, net.Const("beta", Tensor::Full({}, 0.7978845608028654f))});
    tanh = net.Op(OpKind::kTanh, {arg});
    ValueId plus = net.Op(OpKind::kAdd, {tanh, net.Const("one", Tensor::Full({}, 1.f))});
    switch (form) {
      case GeluTanhForm::kNewGelu: y = net.Op(OpKind::kMul, {net.Op(OpKind::kMul, {h, half_c}), plus}); break;
      case GeluTanhForm::kDynamo: y = net.Op(OpKind::kMul, {h, net.Op(OpKind::kMul, {half_c, plus})}); break;
      case GeluTanhForm::kTorchScript: y = net.Op(OpKind::kMul, {half_c, net.Op(OpKind::kMul, {h, plus})}); break;
    }
    net.graph().outputs.push_back(y);
  }
};

TEST(Rewrite, GeluTanhWithItsBias) {
  for (GeluTanhForm form : {GeluTanhForm::kNewGelu, GeluTanhForm::kDynamo, GeluTanhForm::kTorchScript}) {
    SCOPED_TRACE(static_cast<int>(form));
    GeluTanhNet t(0.044715f, {}, form);
    ExpectSameValues(t.net, t.y, 0);  // 0.5 H is exact, and H * (H * H) is (H * H) * H
    ir::Graph g = t.net.graph();
    EXPECT_EQ(ir::Rewrite(g).gelus, 1);
    ASSERT_EQ(g.nodes.size(), 1u);
    EXPECT_EQ(g.nodes[0].op, OpKind::kGelu);
    EXPECT_EQ(g.nodes[0].attrs.Int("tanh", 0), 1);
    EXPECT_EQ(g.nodes[0].in, (std::vector<ValueId>{t.x, t.b}));
    EXPECT_EQ(g.nodes[0].out, (std::vector<ValueId>{t.y}));
    for (const ir::Node& n : t.net.graph().nodes) EXPECT_TRUE(g.nodes[0].AnswersTo(n.name)) << n.name;
  }
}

TEST(Rewrite, GeluTanhWithOtherConstantsOrReadElsewhereStays) {
  GeluTanhNet other(0.0447f);  // the kernels' kappa is 0.044715: not this GELU
  ir::Graph g = other.net.graph();
  EXPECT_EQ(ir::Rewrite(g).gelus, 0);
  EXPECT_EQ(g.nodes.size(), other.net.graph().nodes.size());
  for (GeluTanhForm form : {GeluTanhForm::kNewGelu, GeluTanhForm::kDynamo, GeluTanhForm::kTorchScript}) {
    SCOPED_TRACE(static_cast<int>(form));
    GeluTanhNet read(0.044715f, {}, form);
    read.net.graph().outputs.push_back(read.tanh);
    ir::Graph g2 = read.net.graph();
    EXPECT_EQ(ir::Rewrite(g2).gelus, 0);
    EXPECT_EQ(OpCounts(g2)[OpKind::kTanh], 1);
  }
  GeluTanhNet square(0.044715f, {}, GeluTanhForm::kTorchScript);  // H * H read elsewhere
  square.net.graph().outputs.push_back(square.square);
  ir::Graph g3 = square.net.graph();
  EXPECT_EQ(ir::Rewrite(g3).gelus, 0);
  EXPECT_EQ(g3.nodes.size(), square.net.graph().nodes.size());
  // The H the product reads is not the tanh's: no GELU. (x + b against b + x: another tensor.)
  Net wrong;
  ValueId x = wrong.Input("x", Rand({2, 8}, 5, -3, 3)), b = Param(wrong, "fc.bias", Rand({8}, 6));
  ValueId h = wrong.Op(OpKind::kAdd, {x, b}), h2 = wrong.Op(OpKind::kAdd, {b, x});
  ValueId cube = wrong.Op(OpKind::kPow, {h, wrong.Const("three", Tensor::Full({}, 3.f))});
  ValueId inner = wrong.Op(OpKind::kAdd, {h, wrong.Op(OpKind::kMul, {cube, wrong.Const("kappa", Tensor::Full({}, 0.044715f))})});
  ValueId t = wrong.Op(OpKind::kTanh, {wrong.Op(OpKind::kMul, {inner, wrong.Const("beta", Tensor::Full({}, 0.7978845608028654f))})});
  ValueId plus = wrong.Op(OpKind::kAdd, {t, wrong.Const("one", Tensor::Full({}, 1.f))});
  ValueId y = wrong.Op(OpKind::kMul, {h2, wrong.Op(OpKind::kMul, {wrong.Const("half", Tensor::Full({}, 0.5f)), plus})});
  wrong.graph().outputs.push_back(y);
  ir::Graph g4 = wrong.graph();
  EXPECT_EQ(ir::Rewrite(g4).gelus, 0);
  EXPECT_EQ(OpCounts(g4)[OpKind::kTanh], 1);
}

// A one-element constant of a higher rank than H broadcasts the chain's output up ([1, 2, 3, 8]
// from H [2, 3, 8]): Gelu's output is H's shape, so neither form fuses, and the chain still runs.
TEST(Rewrite, GeluWhoseConstantRaisesTheRankStays) {
  GeluNet erf(Shape{1, 1, 1, 1});
  GeluTanhNet tanh(0.044715f, Shape{1, 1, 1, 1});
  for (Net* net : {&erf.net, &tanh.net}) {
    ir::Graph g = net->graph();
    EXPECT_EQ(ir::Rewrite(g).gelus, 0);
    EXPECT_EQ(g.nodes.size(), net->graph().nodes.size());
  }
  ExpectSameValues(erf.net, erf.y, 0);
  ExpectSameValues(tanh.net, tanh.y, 0);
  EXPECT_EQ(erf.net[erf.y].shape(), (Shape{1, 2, 3, 8}));
}

TEST(Rewrite, ScaledMaskedSoftmax) {
  for (bool scores_read_elsewhere : {false, true}) {
    SCOPED_TRACE(scores_read_elsewhere ? "scaled scores read elsewhere" : "plain chain");
    Net net;
    std::vector<int> upper;
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) upper.push_back(j > i);
    Tensor mask(DType::kBool, Shape{1, 1, 4, 4});
    for (int i = 0; i < 16; ++i) mask.data<bool>()[i] = upper[static_cast<size_t>(i)];
    ValueId s = net.Input("s", Rand({2, 2, 4, 4}, 3, -3, 3));
    ValueId scaled = net.Op(OpKind::kMul, {s, net.Const("scale", Tensor::Full({}, 0.25f))});
    ValueId filled = net.Op(OpKind::kWhere, {net.Const("mask", mask), net.Const("ninf", Tensor::Full({}, -INFINITY)), scaled});
    ir::Attrs last;
    last.Set("axis", int64_t{-1});
    ValueId p = net.Op(OpKind::kSoftmax, {filled}, last);
    net.graph().outputs.push_back(p);
    if (scores_read_elsewhere) net.graph().outputs.push_back(scaled);
    ExpectSameValues(net, p, 1e-6);
    ir::Graph g = net.graph();
    EXPECT_EQ(ir::Rewrite(g).softmaxes, 1);
    auto n = OpCounts(g);
    EXPECT_EQ(n[OpKind::kMaskedSoftmax], 1);
    EXPECT_EQ(n[OpKind::kWhere] + n[OpKind::kSoftmax], 0);
    EXPECT_EQ(n[OpKind::kMul], scores_read_elsewhere ? 1 : 0);
  }
}

// scaled_dot_product_attention as the exporters write it: Add(scores, M) -> Softmax, M a constant
// additive mask of 0 and -inf (or transformers' float minimum) with a 0 in every row, becomes
// MaskedSoftmax: the same values and the same gradient of the scores. It stays a chain where a row
// is wholly masked, where M holds another value (a bias, as ALiBi adds) or two fill values, and
// where M is not a constant.
TEST(Rewrite, SoftmaxWithAnAdditiveMask) {
  enum Variant { kNegInf, kLowest, kRowMasked, kBias, kTwoFills, kNotConst };
  for (Variant v : {kNegInf, kLowest, kRowMasked, kBias, kTwoFills, kNotConst}) {
    SCOPED_TRACE(static_cast<int>(v));
    const float fill = v == kLowest ? std::numeric_limits<float>::lowest() : -INFINITY;
    Tensor mask(DType::kF32, Shape{1, 1, 4, 4});
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 4; ++j) mask.data<float>()[i * 4 + j] = j > i ? fill : 0.f;
    if (v == kRowMasked) mask.data<float>()[0] = fill;       // row 0: all four masked
    if (v == kBias) mask.data<float>()[4] = -2.f;            // a finite bias
    if (v == kTwoFills) mask.data<float>()[1] = -1e38f;      // another large negative value
    Net net;
    ValueId s = net.Input("s", Rand({2, 3, 4, 4}, 8, -3, 3));
    ValueId m = v == kNotConst ? net.Input("m", mask) : net.Const("mask", mask);
    ir::Attrs last;
    last.Set("axis", int64_t{-1});
    ValueId p = net.Op(OpKind::kSoftmax, {net.Op(OpKind::kAdd, {s, m})}, last);
    net.graph().outputs.push_back(p);
    const bool fuses = v == kNegInf || v == kLowest;
    ExpectSameValues(net, p, fuses ? 0 : 1e-6);
    ir::Graph g = net.graph();
    EXPECT_EQ(ir::Rewrite(g).softmaxes, fuses ? 1 : 0);
    auto n = OpCounts(g);
    EXPECT_EQ(n[OpKind::kMaskedSoftmax], fuses ? 1 : 0);
    EXPECT_EQ(n[OpKind::kAdd] + n[OpKind::kSoftmax], fuses ? 0 : 2);
    if (!fuses) continue;
    // dS for dP = W, through the chain and through MaskedSoftmax.
    const Tensor w = Rand({2, 3, 4, 4}, 9, -1, 1);
    auto grad = [&](Net& on) -> Tensor {
      auto d = ir::Backward(on.builder(), p, on.Const("dp", w), {s});
      EXPECT_TRUE(d.ok()) << d.status().message();
      EXPECT_TRUE(on.Run().ok());
      return d.ok() ? on[(*d)[0]].Clone() : Tensor();
    };
    Net after;
    after.graph() = g;
    const Tensor fused = grad(after), chain = grad(net);
    ASSERT_TRUE(fused.defined() && chain.defined());
    for (int64_t i = 0; i < fused.numel(); ++i) EXPECT_NEAR(fused.data<float>()[i], chain.data<float>()[i], 1e-6) << i;
  }
}

// Llama's RMSNorm as both exporters write it: Pow, ReduceMean, Add(eps), Sqrt, then Reciprocal
// (dynamo) or Div(1, .) (TorchScript, with a Cast to float before the scale), Mul(X, .), Mul(scale).
TEST(Rewrite, RMSNorm) {
  // A one-element eps of rank 4 broadcasts the chain up to [1, 2, 3, 8]: RMSNorm's output is X's
  // shape, so it stays a chain too.
  for (bool torchscript : {false, true}) {
    for (int variant = 0; variant < 3; ++variant) {
      const bool stat_read_elsewhere = variant == 1, eps_rank4 = variant == 2;
      SCOPED_TRACE(std::string(torchscript ? "TorchScript" : "dynamo") + (stat_read_elsewhere ? ", mean read elsewhere" : "") +
                   (eps_rank4 ? ", eps of rank 4" : ""));
      Net net;
      ValueId x = net.Input("x", Rand({2, 3, 8}, 4, -2, 2));
      ValueId w = Param(net, "norm.weight", Rand({8}, 5, 0.5, 1.5));
      ir::Attrs mean_at;
      mean_at.Set("axes", std::vector<int64_t>{2});
      mean_at.Set("keepdims", int64_t{1});
      ValueId m = net.Op(OpKind::kReduceMean, {net.Op(OpKind::kPow, {x, net.Const("two", Tensor::Full({}, 2.f))})}, mean_at);
      const Shape eps_shape = eps_rank4 ? Shape{1, 1, 1, 1} : Shape{};
      ValueId s = net.Op(OpKind::kSqrt, {net.Op(OpKind::kAdd, {m, net.Const("eps", Tensor::Full(eps_shape, 1e-6f))})});
      ValueId r = torchscript ? net.Op(OpKind::kDiv, {net.Const("one", Tensor::Full({}, 1.f)), s}) : net.Op(OpKind::kReciprocal, {s});
      ValueId n = net.Op(OpKind::kMul, {x, r});
      if (torchscript) {
        ir::Attrs to;
        to.Set("dtype", static_cast<int64_t>(DType::kF32));
        n = net.Op(OpKind::kCast, {n}, to);
      }
      ValueId y = net.Op(OpKind::kMul, {w, n});
      net.graph().outputs.push_back(y);
      if (stat_read_elsewhere) net.graph().outputs.push_back(m);
      ExpectSameValues(net, y, 1e-6);
      ir::Graph g = net.graph();
      const int fused = stat_read_elsewhere || eps_rank4 ? 0 : 1;
      EXPECT_EQ(ir::Rewrite(g).rms_norms, fused);
      EXPECT_EQ(OpCounts(g)[OpKind::kRMSNorm], fused);
    }
  }
}

// SiLU as both exporters write it, Mul(X, Sigmoid(X)), and with the Mul's inputs the other way
// round; left alone where the sigmoid is read elsewhere, or where the Mul's other input is not X.
TEST(Rewrite, Silu) {
  for (int variant = 0; variant < 4; ++variant) {
    const bool swapped = variant == 1, read_elsewhere = variant == 2, other_input = variant == 3;
    SCOPED_TRACE(swapped ? "Mul(Sigmoid(X), X)" : read_elsewhere ? "sigmoid read elsewhere" : other_input ? "Mul(Y, Sigmoid(X))" : "Mul(X, Sigmoid(X))");
    Net net;
    ValueId x = net.Input("x", Rand({2, 3, 40}, 6, -6, 6));
    ValueId u = net.Input("up", Rand({2, 3, 40}, 7));
    ValueId s = net.Op(OpKind::kSigmoid, {x});
    ValueId a = other_input ? u : x;
    ValueId silu = net.Op(OpKind::kMul, swapped ? std::vector<ValueId>{s, a} : std::vector<ValueId>{a, s});
    ValueId y = net.Op(OpKind::kMul, {silu, u});  // Llama's MLP: silu(gate) * up
    net.graph().outputs.push_back(y);
    if (read_elsewhere) net.graph().outputs.push_back(s);
    ExpectSameValues(net, y, 1e-6);
    ir::Graph g = net.graph();
    const int fused = read_elsewhere || other_input ? 0 : 1;
    EXPECT_EQ(ir::Rewrite(g).silus, fused);
    EXPECT_EQ(OpCounts(g)[OpKind::kSilu], fused);
    EXPECT_EQ(OpCounts(g)[OpKind::kSigmoid], 1 - fused);
  }
}

// A fused projection: MatMul(A, W [8, 12]) + b, split in three along the features.
TEST(Rewrite, SplitsAFusedProjection) {
  Net net;
  ValueId a = net.Input("a", Rand({2, 3, 8}, 4));
  ValueId w = Param(net, "onnx::MatMul_1", Rand({8, 12}, 5));
  ValueId b = Param(net, "qkv.bias", Rand({12}, 6));
  ValueId mm = net.Op(OpKind::kMatMul, {a, w});
  ValueId x = net.Op(OpKind::kAdd, {b, mm});
  ir::Attrs split;
  split.Set("axis", int64_t{2});
  split.Set("split", std::vector<int64_t>{4, 4, 4});
  std::vector<ValueId> qkv = net.OpN(OpKind::kSplit, {x}, split);
  ASSERT_EQ(qkv.size(), 3u);
  ValueId y = net.Op(OpKind::kMul, {net.Op(OpKind::kAdd, {qkv[0], qkv[1]}), qkv[2]});
  net.graph().outputs.push_back(y);
  ExpectSameValues(net, y, 1e-5);
  ir::Graph g = net.graph();
  const Tensor w0 = g.value(w).data;
  ir::Graph unasked = net.graph();
  EXPECT_EQ(ir::Rewrite(unasked).split_projections, 0) << "only where the options ask";
  EXPECT_EQ(ir::Rewrite(g, kSplitAll).split_projections, 1);
  auto n = OpCounts(g);
  EXPECT_EQ(n[OpKind::kSplit], 0);
  EXPECT_EQ(n[OpKind::kMatMul], 3);
  ASSERT_EQ(g.params.size(), 6u);  // W[0..2], then b[0..2], where W and b were
  EXPECT_EQ(g.value(w).kind, ir::ValueKind::kConst);
  for (int j = 0; j < 3; ++j) {
    const ir::Value& wj = g.value(g.params[static_cast<size_t>(j)]);
    EXPECT_EQ(wj.name, "onnx::MatMul_1[" + std::to_string(j) + "]");
    EXPECT_EQ(wj.split_from, "onnx::MatMul_1");
    ASSERT_EQ(wj.type.shape, (Shape{8, 4}));
    for (int64_t r = 0; r < 8; ++r)
      for (int64_t c = 0; c < 4; ++c) EXPECT_EQ(wj.data.data<float>()[r * 4 + c], w0.data<float>()[r * 12 + j * 4 + c]);
    EXPECT_EQ(g.value(g.params[static_cast<size_t>(3 + j)]).split_from, "qkv.bias");
  }
  int parts = 0;
  for (const ir::Node& node : g.nodes) parts += node.op == OpKind::kMatMul && node.split_from == g.nodes[0].split_from;
  EXPECT_EQ(parts, 3);
}

// gpt_mini as exported: per block one fused QKV projection, one GELU, one masked softmax.
TEST(Rewrite, GptMini) {
  std::map<std::string, ir::TensorType> bound = {{"idx", {DType::kI64, Shape{2, 64}}}};
  auto g = ir::ImportOnnx("models/gpt_mini.onnx", bound);
  ASSERT_TRUE(g.ok()) << g.status().message();
  const size_t params = g->params.size();
  const ir::RewriteCounts c = ir::Rewrite(*g, kSplitAll);
  EXPECT_EQ(c.split_projections, 2);
  EXPECT_EQ(c.gelus, 2);
  EXPECT_EQ(c.softmaxes, 2);
  auto n = OpCounts(*g);
  for (OpKind k : {OpKind::kErf, OpKind::kWhere, OpKind::kSoftmax, OpKind::kSplit, OpKind::kDiv})
    EXPECT_EQ(n[k], 0) << Def(k).name;
  EXPECT_EQ(g->params.size(), params + 2 * 4);  // per block: W and its bias, each cut in three
  for (const ir::Node& node : g->nodes) {
    if (node.op == OpKind::kGelu) {
      EXPECT_EQ(node.in.size(), 2u) << node.name << ": with its bias";
    }
    if (node.op != OpKind::kMaskedSoftmax) continue;
    EXPECT_FLOAT_EQ(static_cast<float>(node.attrs.Float("scale")), 0.25f) << "1 / sqrt(head size 16)";
    ASSERT_EQ(node.in.size(), 2u);
    EXPECT_EQ(g->type(node.in[1]), (ir::TensorType{DType::kBool, Shape{1, 1, 64, 64}}));
  }
}

// The committed exports of tools/make_exports.py, as each exporter spells them: per block, GPT-2's
// GELU (NewGELU, and F.gelu(approximate="tanh") below opset 20) fuses (its bias stays in the
// Gemm of GPT-2's Conv1D), Llama's SiLU fuses, and every attention's softmax is masked; no Tanh,
// Pow, Sigmoid or plain Softmax is left.
TEST(Rewrite, ExportedActivations) {
  struct Case {
    const char* model;
    int gelus, silus, softmaxes;
  };
  for (const Case& c : {Case{"gpt2", 2, 0, 2}, Case{"gpt2_tanh", 2, 0, 2}, Case{"llama", 0, 2, 2}, Case{"nanogpt", 0, 0, 2}}) {
    for (const char* exporter : {"dynamo", "torchscript"}) {
      const std::string path = std::string("models/exports/") + c.model + "_" + exporter + ".onnx";
      SCOPED_TRACE(path);
      std::map<std::string, ir::TensorType> bound = {{"input_ids", {DType::kI64, Shape{4, 32}}}};  // as exported
      auto g = ir::ImportOnnx(path, bound);
      ASSERT_TRUE(g.ok()) << g.status().message();
      const ir::RewriteCounts n = ir::Rewrite(*g);
      EXPECT_EQ(n.gelus, c.gelus);
      EXPECT_EQ(n.silus, c.silus);
      EXPECT_EQ(n.softmaxes, c.softmaxes);  // nanoGPT's and Llama's from an additive mask
      auto ops = OpCounts(*g);
      for (OpKind k : {OpKind::kTanh, OpKind::kPow, OpKind::kSigmoid, OpKind::kSoftmax}) EXPECT_EQ(ops[k], 0) << Def(k).name;
      for (const ir::Node& node : g->nodes) {
        if (node.op == OpKind::kGelu) {
          EXPECT_EQ(node.attrs.Int("tanh", 0), 1) << node.name;
        }
      }
    }
  }
}

}  // namespace
}  // namespace fr::test
