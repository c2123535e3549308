// Rung 1 of the ladder (DESIGN.md §6): every op in the table against a reference.
//  - Forward.*   each op's CPU kernel against a naive reference written here (plain loops, double
//                accumulation), tolerance 1e-5 relative / 1e-6 absolute.
//  - Grad.*      each differentiable op's gradient rule, run through ir::Backward and the kernels,
//                against central finite differences of L = sum(out * R), R fixed and random.
//  - Registry.*  the table itself; Infer.* shape-inference errors.
#include <gtest/gtest.h>
#include <omp.h>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <initializer_list>
#include <limits>
#include <optional>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "harness.h"
#include "ir/autodiff.h"
#include "ops/cpu/vmath.h"

namespace fr::test {
namespace {

using ir::ValueId;
constexpr double kRtol = 1e-5, kAtol = 1e-6;

ir::Attrs A(std::initializer_list<std::pair<const char*, ir::AttrValue>> kv) {
  ir::Attrs a;
  for (const auto& [k, v] : kv) a.Set(k, v);
  return a;
}
ir::Attrs ShapeAttr(std::vector<int64_t> d) { return A({{"shape", std::move(d)}}); }
int64_t I(bool b) { return b ? 1 : 0; }

// ---- Reference computations: index arithmetic on multi-indices, double accumulation. ----

std::vector<int64_t> Unravel(int64_t i, const Shape& s) {
  std::vector<int64_t> idx(static_cast<size_t>(s.rank()));
  for (int d = s.rank() - 1; d >= 0; --d) {
    idx[static_cast<size_t>(d)] = i % s[d];
    i /= s[d];
  }
  return idx;
}

int64_t Ravel(const std::vector<int64_t>& idx, const Shape& s) {
  int64_t off = 0;
  for (int d = 0; d < s.rank(); ++d) off = off * s[d] + idx[static_cast<size_t>(d)];
  return off;
}

// The flat index in `in` that numpy broadcasting pairs with the (higher-rank) index `idx`.
int64_t BroadcastFlat(const std::vector<int64_t>& idx, const Shape& in) {
  size_t lead = idx.size() - static_cast<size_t>(in.rank());
  int64_t off = 0;
  for (int d = 0; d < in.rank(); ++d) off = off * in[d] + (in[d] == 1 ? 0 : idx[lead + static_cast<size_t>(d)]);
  return off;
}

Shape Dims(const Shape& s, int from, int to) {
  return Shape(std::vector<int64_t>(s.dims().begin() + from, s.dims().begin() + to));
}

std::vector<double> RefBinary(OpKind op, const std::vector<double>& a, const Shape& as, const std::vector<double>& b,
                              const Shape& bs, const Shape& out) {
  std::vector<double> y(static_cast<size_t>(out.numel()));
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto idx = Unravel(i, out);
    double x = a[static_cast<size_t>(BroadcastFlat(idx, as))], z = b[static_cast<size_t>(BroadcastFlat(idx, bs))];
    double r = op == OpKind::kAdd ? x + z : op == OpKind::kSub ? x - z : op == OpKind::kMul ? x * z : x / z;
    y[static_cast<size_t>(i)] = r;
  }
  return y;
}

// Y[..., m, n] = alpha * sum_k op(A)[..., m, k] op(B)[..., k, n], batch dims broadcast onto out's.
std::vector<double> RefMatMul(const std::vector<double>& a, const Shape& as, const std::vector<double>& b,
                              const Shape& bs, bool ta, bool tb, double alpha, const Shape& out) {
  const int r = out.rank();
  const int64_t M = out[r - 2], N = out[r - 1], K = ta ? as[as.rank() - 2] : as[as.rank() - 1];
  const Shape batch = Dims(out, 0, r - 2), ab = Dims(as, 0, as.rank() - 2), bb = Dims(bs, 0, bs.rank() - 2);
  std::vector<double> y(static_cast<size_t>(out.numel()));
  for (int64_t bi = 0; bi < batch.numel(); ++bi) {
    auto idx = Unravel(bi, batch);
    const int64_t ao = BroadcastFlat(idx, ab) * M * K, bo = BroadcastFlat(idx, bb) * K * N;
    for (int64_t m = 0; m < M; ++m)
      for (int64_t n = 0; n < N; ++n) {
        double s = 0;
        for (int64_t k = 0; k < K; ++k) {
          double av = a[static_cast<size_t>(ao + (ta ? k * M + m : m * K + k))];
          double bv = b[static_cast<size_t>(bo + (tb ? n * K + k : k * N + n))];
          s += av * bv;
        }
        y[static_cast<size_t>((bi * M + m) * N + n)] = alpha * s;
      }
  }
  return y;
}

// Softmax or log-softmax along `axis`: every element walks its own slice of the axis.
std::vector<double> RefSoftmax(const std::vector<double>& x, const Shape& s, int axis, bool log) {
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < s.numel(); ++i) {
    auto idx = Unravel(i, s);
    double m = -INFINITY;
    for (int64_t j = 0; j < s[axis]; ++j) {
      idx[static_cast<size_t>(axis)] = j;
      m = std::max(m, x[static_cast<size_t>(Ravel(idx, s))]);
    }
    double sum = 0;
    for (int64_t j = 0; j < s[axis]; ++j) {
      idx[static_cast<size_t>(axis)] = j;
      sum += std::exp(x[static_cast<size_t>(Ravel(idx, s))] - m);
    }
    double xi = x[static_cast<size_t>(i)];
    y[static_cast<size_t>(i)] = log ? xi - m - std::log(sum) : std::exp(xi - m) / sum;
  }
  return y;
}

struct LayerNormRef {
  std::vector<double> y, mean, rstd;
};

LayerNormRef RefLayerNorm(const std::vector<double>& x, const Shape& s, int axis, const std::vector<double>& scale,
                          const std::vector<double>* bias, double eps) {
  const int64_t inner = Dims(s, axis, s.rank()).numel(), rows = Dims(s, 0, axis).numel();
  LayerNormRef r{std::vector<double>(x.size()), {}, {}};
  for (int64_t o = 0; o < rows; ++o) {
    double mu = 0, var = 0;
    for (int64_t j = 0; j < inner; ++j) mu += x[static_cast<size_t>(o * inner + j)];
    mu /= static_cast<double>(inner);
    for (int64_t j = 0; j < inner; ++j) var += std::pow(x[static_cast<size_t>(o * inner + j)] - mu, 2);
    const double rs = 1.0 / std::sqrt(var / static_cast<double>(inner) + eps);
    for (int64_t j = 0; j < inner; ++j) {
      auto k = static_cast<size_t>(o * inner + j), ju = static_cast<size_t>(j);
      r.y[k] = (x[k] - mu) * rs * scale[ju] + (bias ? (*bias)[ju] : 0.0);
    }
    r.mean.push_back(mu);
    r.rstd.push_back(rs);
  }
  return r;
}

Shape Permuted(const Shape& s, const std::vector<int64_t>& perm) {
  std::vector<int64_t> d;
  for (int64_t p : perm) d.push_back(s[static_cast<int>(p)]);
  return Shape(d);
}

std::vector<double> RefTranspose(const std::vector<double>& x, const Shape& s, const std::vector<int64_t>& perm) {
  const Shape out = Permuted(s, perm);
  std::vector<double> y(x.size());
  for (int64_t i = 0; i < out.numel(); ++i) {
    auto oi = Unravel(i, out);
    std::vector<int64_t> xi(oi.size());
    for (size_t k = 0; k < perm.size(); ++k) xi[static_cast<size_t>(perm[k])] = oi[k];
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(Ravel(xi, s))];
  }
  return y;
}

double RefCrossEntropy(const std::vector<double>& logits, int64_t classes, const std::vector<int64_t>& labels) {
  double total = 0;
  for (size_t r = 0; r < labels.size(); ++r) {
    const double* row = logits.data() + r * static_cast<size_t>(classes);
    double m = *std::max_element(row, row + classes), s = 0;
    for (int64_t j = 0; j < classes; ++j) s += std::exp(row[j] - m);
    total += m + std::log(s) - row[labels[r]];
  }
  return total / static_cast<double>(labels.size());
}

// The learning-rate schedule as base/schedule.h's header states it.
struct RefSchedule {
  double lr = 0, min_lr = 0;
  int kind = 0;
  int64_t warmup = 0, steps = 1;
  double At(int64_t s) const {
    if (s < warmup) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup);
    double p = static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(1, steps - warmup));
    if (kind == 1) return lr + (min_lr - lr) * p;
    if (kind == 2) return min_lr + (lr - min_lr) * (1 + std::cos(M_PI * p)) / 2;
    return lr;
  }
  void AddTo(ir::Attrs& a) const {
    a.Set("lr", lr);
    a.Set("min_lr", min_lr);
    a.Set("schedule", int64_t{kind});
    a.Set("warmup", warmup);
    a.Set("steps", steps);
  }
};

// ---- Forward: ONNX-facing ops. ----

TEST(Ops, EveryOpHasAnSbpRule) {
  for (int k = 0; k < kNumOps; ++k) EXPECT_NE(Def(static_cast<OpKind>(k)).sbp, nullptr) << Def(static_cast<OpKind>(k)).name;
}

TEST(Forward, Gemm) {
  struct Case {
    int64_t m, k, n;
    bool ta, tb;
    double alpha, beta;
    std::optional<Shape> c;
  };
  const Case cases[] = {
      {3, 4, 5, false, false, 1, 1, std::nullopt},  {3, 4, 5, false, false, 1, 1, Shape{3, 5}},
      {3, 4, 5, false, false, 1, 1, Shape{5}},      {3, 4, 5, false, false, 0.5, 2, Shape{3, 1}},
      {3, 4, 5, true, false, 1, 1, Shape{}},        {3, 4, 5, false, true, 2, 0.5, Shape{1, 5}},
      {3, 4, 5, true, true, -1.5, 1, Shape{3, 5}},  {1, 7, 2, true, true, 1, -1, Shape{2}},
  };
  uint32_t seed = 1;
  for (const Case& c : cases) {
    SCOPED_TRACE("ta=" + std::to_string(c.ta) + " tb=" + std::to_string(c.tb) + " alpha=" + std::to_string(c.alpha) +
                 " beta=" + std::to_string(c.beta) + " C=" + (c.c ? c.c->ToString() : "none"));
    Net net;
    Shape as = c.ta ? Shape{c.k, c.m} : Shape{c.m, c.k}, bs = c.tb ? Shape{c.n, c.k} : Shape{c.k, c.n};
    ValueId a = net.Input("a", Rand(as, seed++)), b = net.Input("b", Rand(bs, seed++));
    std::vector<ValueId> in = {a, b};
    if (c.c) in.push_back(net.Input("c", Rand(*c.c, seed++)));
    ValueId y = net.Op(OpKind::kGemm, in,
                       A({{"transA", I(c.ta)}, {"transB", I(c.tb)}, {"alpha", c.alpha}, {"beta", c.beta}}));
    ASSERT_TRUE(net.Run().ok());
    const Shape ys{c.m, c.n};
    ASSERT_EQ(net[y].shape(), ys);
    auto want = RefMatMul(ToDouble(net[a]), as, ToDouble(net[b]), bs, c.ta, c.tb, c.alpha, ys);
    if (c.c) {
      auto cv = ToDouble(net[in[2]]);
      for (int64_t i = 0; i < ys.numel(); ++i)
        want[static_cast<size_t>(i)] += c.beta * cv[static_cast<size_t>(BroadcastFlat(Unravel(i, ys), *c.c))];
    }
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
  }
}

TEST(Forward, GemmAbsentC) {  // an absent optional input (kNoValue) is an undefined tensor
  Net net;
  ValueId a = net.Input("a", Rand({2, 3}, 1)), b = net.Input("b", Rand({3, 4}, 2));
  ValueId y = net.Op(OpKind::kGemm, {a, b, ir::kNoValue}, A({{"beta", 3.0}}));
  ASSERT_TRUE(net.Run().ok());
  EXPECT_TRUE(AllNear(net[y], RefMatMul(ToDouble(net[a]), {2, 3}, ToDouble(net[b]), {3, 4}, false, false, 1, {2, 4}),
                      kRtol, kAtol));
}

TEST(Forward, MatMul) {
  struct Case {
    Shape a, b;
    bool ta, tb;
    double alpha;
    Shape want;
  };
  const Case cases[] = {
      {{3, 4}, {4, 5}, false, false, 1, {3, 5}},
      {{3, 4}, {4, 5}, false, false, 2.5, {3, 5}},
      {{4, 3}, {5, 4}, true, true, 1, {3, 5}},
      {{2, 3, 4}, {4, 5}, false, false, 1, {2, 3, 5}},          // 3-D x 2-D: batch folded into M
      {{2, 3, 4}, {5, 4}, false, true, 1, {2, 3, 5}},
      {{2, 4, 3}, {4, 5}, true, false, 1, {2, 3, 5}},
      {{2, 3, 3, 4}, {2, 3, 4, 5}, false, false, 1, {2, 3, 3, 5}},  // 4-D x 4-D
      {{2, 1, 3, 4}, {1, 3, 4, 5}, false, false, 1, {2, 3, 3, 5}},  // broadcast batch dims
      {{3, 4}, {2, 4, 5}, false, false, 1, {2, 3, 5}},              // 2-D x 3-D
      {{2, 4, 3}, {2, 5, 4}, true, true, -0.5, {2, 3, 5}},
      {{3, 1, 4, 3}, {2, 5, 4}, true, true, 1, {3, 2, 3, 5}},
  };
  uint32_t seed = 10;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.a.ToString() + " x " + c.b.ToString() + " ta=" + std::to_string(c.ta) +
                 " tb=" + std::to_string(c.tb));
    Net net;
    ValueId a = net.Input("a", Rand(c.a, seed++)), b = net.Input("b", Rand(c.b, seed++));
    ValueId y = net.Op(OpKind::kMatMul, {a, b}, A({{"transA", I(c.ta)}, {"transB", I(c.tb)}, {"alpha", c.alpha}}));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.want);
    EXPECT_TRUE(AllNear(net[y], RefMatMul(ToDouble(net[a]), c.a, ToDouble(net[b]), c.b, c.ta, c.tb, c.alpha, c.want),
                        kRtol, kAtol));
  }
}

// contract_batch: Y [M, N] = alpha * sum over the batch and T of A^T B, A [..., T, M], B [..., T, N]
// (a shared weight's gradient), against the batched product summed by hand.
TEST(Forward, MatMulContractBatch) {
  for (const auto& [as, bs] : {std::pair<Shape, Shape>{{2, 3, 4}, {2, 3, 5}}, {{2, 2, 3, 4}, {2, 2, 3, 6}}}) {
    SCOPED_TRACE(as.ToString() + " x " + bs.ToString());
    Net net;
    ValueId a = net.Input("a", Rand(as, 400)), b = net.Input("b", Rand(bs, 401));
    ValueId y = net.Op(OpKind::kMatMul, {a, b}, A({{"transA", I(true)}, {"contract_batch", I(true)}, {"alpha", -0.5}}));
    ASSERT_TRUE(net.Run().ok());
    const int64_t m = as[as.rank() - 1], n = bs[bs.rank() - 1], rows = as.numel() / m;
    ASSERT_EQ(net[y].shape(), (Shape{m, n}));
    const auto av = ToDouble(net[a]), bv = ToDouble(net[b]);
    std::vector<double> want(static_cast<size_t>(m * n), 0.0);
    for (int64_t r = 0; r < rows; ++r)
      for (int64_t i = 0; i < m; ++i)
        for (int64_t j = 0; j < n; ++j) want[static_cast<size_t>(i * n + j)] += -0.5 * av[static_cast<size_t>(r * m + i)] * bv[static_cast<size_t>(r * n + j)];
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
  }
  Net net;  // other batch dims, or no transA: refused
  ValueId a = net.Input("a", Rand({2, 3, 4}, 402)), b = net.Input("b", Rand({3, 3, 5}, 403));
  auto r = net.TryOp(OpKind::kMatMul, {a, b}, A({{"transA", I(true)}, {"contract_batch", I(true)}}), "bad_node");
  ASSERT_FALSE(r.ok());
  EXPECT_NE(r.status().message().find("contract_batch"), std::string::npos) << r.status().message();
}

TEST(Forward, Binary) {
  struct Case {
    Shape a, b, want;
  };
  const Case cases[] = {
      {{2, 3}, {2, 3}, {2, 3}},       {{2, 3}, {}, {2, 3}},          {{}, {2, 3}, {2, 3}},
      {{4, 3}, {3}, {4, 3}},          {{3}, {4, 3}, {4, 3}},         {{2, 1, 3}, {1, 4, 1}, {2, 4, 3}},
      {{3, 1}, {1, 4}, {3, 4}},       {{2, 3, 4}, {3, 1}, {2, 3, 4}}, {{2, 1, 1, 5}, {3, 1, 5}, {2, 3, 1, 5}},
      {{}, {}, {}},
  };
  const OpKind ops[] = {OpKind::kAdd, OpKind::kSub, OpKind::kMul, OpKind::kDiv};
  uint32_t seed = 30;
  for (OpKind op : ops)
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(Def(op).name) + " " + c.a.ToString() + " " + c.b.ToString());
      Net net;
      ValueId a = net.Input("a", Rand(c.a, seed++));
      ValueId b = net.Input("b", op == OpKind::kDiv ? RandAwayFromZero(c.b, seed++, 0.5, 1.5) : Rand(c.b, seed++));
      ValueId y = net.Op(op, {a, b});
      ASSERT_TRUE(net.Run().ok());
      ASSERT_EQ(net[y].shape(), c.want);
      EXPECT_TRUE(AllNear(net[y], RefBinary(op, ToDouble(net[a]), c.a, ToDouble(net[b]), c.b, c.want), kRtol, kAtol));
    }
}

TEST(Forward, BinaryInt64) {
  const std::vector<int64_t> av = {1, -2, 3, 40, 5, -600}, bv = {7, -8, 3};
  struct Case {
    OpKind op;
    std::vector<int64_t> want;
  };
  const Case cases[] = {
      {OpKind::kAdd, {8, -10, 6, 47, -3, -597}},
      {OpKind::kSub, {-6, 6, 0, 33, 13, -603}},
      {OpKind::kMul, {7, 16, 9, 280, -40, -1800}},
      {OpKind::kDiv, {0, 0, 1, 5, 0, -200}},  // C++ truncation toward zero
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Def(c.op).name);
    Net net;
    ValueId y = net.Op(c.op, {net.Input("a", Ints({2, 3}, av)), net.Input("b", Ints({3}, bv))});
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].dtype(), DType::kI64);
    EXPECT_EQ(std::vector<int64_t>(net[y].span<int64_t>().begin(), net[y].span<int64_t>().end()), c.want);
  }
}

TEST(Forward, DivInt64ByZeroIsAnError) {
  Net net;
  auto y = net.TryOp(OpKind::kDiv, {net.Input("a", Ints({2}, {1, 2})), net.Input("b", Ints({2}, {1, 0}))}, {}, "idiv");
  ASSERT_TRUE(y.ok());
  Status s = net.Run();
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("idiv"), std::string::npos) << s.message();
}

TEST(Forward, Unary) {
  struct Case {
    OpKind op;
    double (*f)(double);
  };
  const Case cases[] = {
      {OpKind::kRelu, [](double x) { return x > 0 ? x : 0.0; }},
      {OpKind::kTanh, [](double x) { return std::tanh(x); }},
      {OpKind::kSigmoid, [](double x) { return 1 / (1 + std::exp(-x)); }},
      {OpKind::kErf, [](double x) { return std::erf(x); }},
      {OpKind::kScale, [](double x) { return -2.5 * x; }},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Def(c.op).name);
    Net net;
    ValueId x = net.Input("x", Rand({4, 5}, 40, -3, 3));
    ValueId y = net.Op(c.op, {x}, c.op == OpKind::kScale ? A({{"alpha", -2.5}}) : ir::Attrs{});
    ASSERT_TRUE(net.Run().ok());
    std::vector<double> want;
    for (double v : ToDouble(net[x])) want.push_back(c.f(v));
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
  }
}

TEST(Forward, Softmax) {
  struct Case {
    Shape s;
    int64_t axis;
    double range;
  };
  const Case cases[] = {
      {{3, 5}, -1, 2}, {{2, 3, 4}, -1, 2}, {{2, 4, 3}, 1, 2}, {{2, 3, 4}, 0, 2}, {{5}, 0, 2},
      {{4, 6}, 1, 60},  // large logits: needs the max subtracted
  };
  uint32_t seed = 50;
  for (OpKind op : {OpKind::kSoftmax, OpKind::kLogSoftmax})
    for (const Case& c : cases) {
      SCOPED_TRACE(std::string(Def(op).name) + " " + c.s.ToString() + " axis " + std::to_string(c.axis));
      Net net;
      ValueId x = net.Input("x", Rand(c.s, seed++, -c.range, c.range));
      ValueId y = net.Op(op, {x}, A({{"axis", c.axis}}));
      ASSERT_TRUE(net.Run().ok());
      int axis = static_cast<int>(c.axis < 0 ? c.axis + c.s.rank() : c.axis);
      EXPECT_TRUE(AllNear(net[y], RefSoftmax(ToDouble(net[x]), c.s, axis, op == OpKind::kLogSoftmax), kRtol, kAtol));
    }
}

TEST(Forward, LayerNormalization) {
  struct Case {
    Shape x;
    int64_t axis;
    bool bias;
    std::optional<double> eps;
    Shape stat;
  };
  const Case cases[] = {
      {{2, 3, 4}, -1, true, std::nullopt, {2, 3, 1}}, {{2, 3, 4}, -1, false, std::nullopt, {2, 3, 1}},
      {{2, 3, 4}, 1, true, std::nullopt, {2, 1, 1}},  {{2, 3, 4}, 1, false, 1e-3, {2, 1, 1}},
      {{4, 8}, -1, true, 0.1, {4, 1}},                {{2, 3, 4}, 0, true, std::nullopt, {1, 1, 1}},
  };
  uint32_t seed = 60;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " axis " + std::to_string(c.axis) + (c.bias ? " bias" : " no bias"));
    Net net;
    int axis = static_cast<int>(c.axis < 0 ? c.axis + c.x.rank() : c.axis);
    Shape norm = Dims(c.x, axis, c.x.rank());
    ValueId x = net.Input("x", Rand(c.x, seed++, -2, 3));
    std::vector<ValueId> in = {x, net.Input("scale", Rand(norm, seed++, 0.5, 1.5))};
    if (c.bias) in.push_back(net.Input("bias", Rand(norm, seed++)));
    ir::Attrs at = A({{"axis", c.axis}});
    if (c.eps) at.Set("epsilon", *c.eps);
    auto y = net.OpN(OpKind::kLayerNormalization, in, at);
    ASSERT_EQ(y.size(), 3u);
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y[0]].shape(), c.x);
    ASSERT_EQ(net[y[1]].shape(), c.stat);
    ASSERT_EQ(net[y[2]].shape(), c.stat);
    std::vector<double> bias = c.bias ? ToDouble(net[in[2]]) : std::vector<double>{};
    auto want = RefLayerNorm(ToDouble(net[x]), c.x, axis, ToDouble(net[in[1]]), c.bias ? &bias : nullptr,
                             c.eps.value_or(1e-5));
    EXPECT_TRUE(AllNear(net[y[0]], want.y, kRtol, kAtol));
    EXPECT_TRUE(AllNear(net[y[1]], want.mean, kRtol, kAtol));
    EXPECT_TRUE(AllNear(net[y[2]], want.rstd, kRtol, kAtol));
  }
}

TEST(Forward, Reshape) {
  const Shape targets[] = {{6, 4}, {4, 6}, {24}, {2, 12}, {1, 24, 1}, {2, 3, 4}};
  for (const Shape& t : targets) {
    SCOPED_TRACE(t.ToString());
    Net net;
    ValueId x = net.Input("x", Rand({2, 3, 4}, 70));
    ValueId y = net.Op(OpKind::kReshape, {x}, ShapeAttr(t.dims()));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), t);
    EXPECT_TRUE(AllNear(net[y], ToDouble(net[x]), 0, 0));
  }
  Net net;  // int64 and to a scalar
  ValueId y = net.Op(OpKind::kReshape, {net.Input("x", Ints({1, 1}, {42}))}, ShapeAttr({}));
  ASSERT_TRUE(net.Run().ok());
  ASSERT_EQ(net[y].shape(), Shape{});
  EXPECT_EQ(net[y].data<int64_t>()[0], 42);
}

TEST(Forward, Transpose) {
  struct Case {
    Shape x;
    std::vector<int64_t> perm;  // empty: the ONNX default, reversed dims
  };
  const Case cases[] = {
      {{3, 4}, {1, 0}},           {{3, 4}, {}},                {{3, 4}, {0, 1}},
      {{2, 3, 4}, {2, 0, 1}},     {{2, 3, 4}, {0, 2, 1}},      {{2, 3, 4}, {1, 2, 0}},
      {{2, 3, 4}, {}},            {{2, 3, 4, 5}, {0, 2, 1, 3}}, {{2, 3, 4, 5}, {3, 1, 0, 2}},
      {{2, 3, 4, 5}, {0, 1, 3, 2}}, {{1, 3, 1, 2}, {2, 3, 0, 1}},
  };
  uint32_t seed = 80;
  for (const Case& c : cases) {
    std::vector<int64_t> perm = c.perm;
    if (perm.empty())
      for (int i = c.x.rank() - 1; i >= 0; --i) perm.push_back(i);
    SCOPED_TRACE(c.x.ToString() + " perm " + Shape(perm).ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++));
    ValueId y = net.Op(OpKind::kTranspose, {x}, c.perm.empty() ? ir::Attrs{} : A({{"perm", c.perm}}));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), Permuted(c.x, perm));
    EXPECT_TRUE(AllNear(net[y], RefTranspose(ToDouble(net[x]), c.x, perm), 0, 0));
  }
  Net net;  // int64
  ValueId x = net.Input("x", Ints({2, 3}, {1, 2, 3, 4, 5, 6}));
  ValueId y = net.Op(OpKind::kTranspose, {x}, A({{"perm", std::vector<int64_t>{1, 0}}}));
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(std::vector<int64_t>(net[y].span<int64_t>().begin(), net[y].span<int64_t>().end()),
            (std::vector<int64_t>{1, 4, 2, 5, 3, 6}));
}

// ---- Forward: indexing, masks and shape arithmetic. ----

std::vector<int64_t> IntsOf(const Tensor& t) { return {t.span<int64_t>().begin(), t.span<int64_t>().end()}; }

Tensor Bools(Shape s, const std::vector<int>& v) {
  Tensor t(DType::kBool, std::move(s));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size() && i < static_cast<size_t>(t.numel()); ++i) t.data<bool>()[i] = v[i] != 0;
  return t;
}

// Y[a.., j.., b..] = X[a.., idx[j..], b..] along `axis`, indices already in [0, dim).
std::vector<double> RefGather(const std::vector<double>& x, const Shape& xs, const std::vector<int64_t>& idx,
                              const Shape& is, int axis, const Shape& out) {
  std::vector<double> y(static_cast<size_t>(out.numel()));
  const auto a = static_cast<size_t>(axis), q = static_cast<size_t>(is.rank());
  for (int64_t i = 0; i < out.numel(); ++i) {
    const auto oi = Unravel(i, out);
    std::vector<int64_t> xi(oi.begin(), oi.begin() + static_cast<std::ptrdiff_t>(a));
    xi.push_back(idx[static_cast<size_t>(Ravel(std::vector<int64_t>(oi.begin() + static_cast<std::ptrdiff_t>(a),
                                                                     oi.begin() + static_cast<std::ptrdiff_t>(a + q)),
                                               is))]);
    xi.insert(xi.end(), oi.begin() + static_cast<std::ptrdiff_t>(a + q), oi.end());
    y[static_cast<size_t>(i)] = x[static_cast<size_t>(Ravel(xi, xs))];
  }
  return y;
}

TEST(Forward, Gather) {
  struct Case {
    Shape x;
    int64_t axis;
    Shape idx;
    std::vector<int64_t> iv;
    Shape want;
  };
  const Case cases[] = {
      {{7, 5}, 0, {2, 3}, {0, 6, 3, 3, -1, 2}, {2, 3, 5}},  // an embedding: a repeat and a negative index
      {{3, 4, 5}, 1, {2}, {3, 0}, {3, 2, 5}},
      {{3, 4, 5}, -1, {2, 2}, {4, 0, 1, -5}, {3, 4, 2, 2}},
      {{4, 6}, 0, {}, {2}, {6}},  // a scalar index drops the axis
  };
  uint32_t seed = 200;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " axis " + std::to_string(c.axis) + " by " + c.idx.ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++));
    ValueId y = net.Op(OpKind::kGather, {x, net.Input("idx", Ints(c.idx, c.iv))}, A({{"axis", c.axis}}));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.want);
    const int axis = static_cast<int>(c.axis < 0 ? c.axis + c.x.rank() : c.axis);
    std::vector<int64_t> iv;
    for (int64_t v : c.iv) iv.push_back(v < 0 ? v + c.x[axis] : v);
    EXPECT_TRUE(AllNear(net[y], RefGather(ToDouble(net[x]), c.x, iv, c.idx, axis, c.want), 0, 0));
  }
  Net net;  // int64 data: one dim of a shape, as exports compute it
  ValueId y = net.Op(OpKind::kGather, {net.Input("shape", Ints({4}, {2, 8, 64, 16})), net.Input("i", Ints({}, {-2}))});
  ASSERT_TRUE(net.Run().ok());
  ASSERT_EQ(net[y].shape(), Shape{});
  EXPECT_EQ(IntsOf(net[y]), (std::vector<int64_t>{64}));
}

TEST(Forward, GatherIndexOutOfRange) {
  for (int64_t bad : {int64_t{7}, int64_t{-8}}) {
    Net net;
    auto y = net.TryOp(OpKind::kGather, {net.Input("x", Rand({7, 2}, 1)), net.Input("i", Ints({2}, {0, bad}))}, {},
                       "embed");
    ASSERT_TRUE(y.ok());
    Status s = net.Run();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("embed"), std::string::npos) << s.message();
    EXPECT_NE(s.message().find(std::to_string(bad)), std::string::npos) << s.message();
  }
}

TEST(Forward, GatherGradSumsRepeatedRows) {
  Net net;
  ValueId dy = net.Input("dy", Rand({3, 2}, 210));
  ValueId dx = net.Op(OpKind::kGatherGrad, {dy, net.Input("i", Ints({3}, {1, 4, 1}))},
                      A({{"axis", int64_t{0}}, {"shape", std::vector<int64_t>{5, 2}}}));
  ASSERT_TRUE(net.Run().ok());
  auto g = ToDouble(net[dy]);
  EXPECT_TRUE(AllNear(net[dx], {0, 0, g[0] + g[4], g[1] + g[5], 0, 0, 0, 0, g[2], g[3]}, kRtol, kAtol));
}

TEST(Forward, ConcatSplit) {
  {
    Net net;
    ValueId a = net.Input("a", Ints({2, 3}, {1, 2, 3, 4, 5, 6})), b = net.Input("b", Ints({2, 1}, {7, 8}));
    ValueId c = net.Input("c", Ints({2, 2}, {9, 10, 11, 12}));
    ValueId y1 = net.Op(OpKind::kConcat, {a, b, c}, A({{"axis", int64_t{-1}}}));
    ValueId y0 = net.Op(OpKind::kConcat, {a, net.Input("d", Ints({1, 3}, {0, 0, 7}))}, A({{"axis", int64_t{0}}}));
    auto parts = net.OpN(OpKind::kSplit, {y1}, A({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{1, 2, 3}}}));
    ASSERT_EQ(parts.size(), 3u);
    ASSERT_TRUE(net.Run().ok());
    EXPECT_EQ(net[y1].shape(), (Shape{2, 6}));
    EXPECT_EQ(IntsOf(net[y1]), (std::vector<int64_t>{1, 2, 3, 7, 9, 10, 4, 5, 6, 8, 11, 12}));
    EXPECT_EQ(IntsOf(net[y0]), (std::vector<int64_t>{1, 2, 3, 4, 5, 6, 0, 0, 7}));
    EXPECT_EQ(IntsOf(net[parts[0]]), (std::vector<int64_t>{1, 4}));
    EXPECT_EQ(IntsOf(net[parts[1]]), (std::vector<int64_t>{2, 3, 5, 6}));
    EXPECT_EQ(IntsOf(net[parts[2]]), (std::vector<int64_t>{7, 9, 10, 8, 11, 12}));
  }
  Net net;  // float, split along the leading axis of a 3-D tensor
  ValueId x = net.Input("x", Rand({5, 2, 3}, 220));
  auto parts = net.OpN(OpKind::kSplit, {x}, A({{"split", std::vector<int64_t>{2, 0, 3}}}));
  ASSERT_EQ(parts.size(), 3u);
  ASSERT_TRUE(net.Run().ok());
  auto xv = ToDouble(net[x]);
  EXPECT_EQ(net[parts[1]].shape(), (Shape{0, 2, 3}));
  EXPECT_TRUE(AllNear(net[parts[0]], std::vector<double>(xv.begin(), xv.begin() + 12), 0, 0));
  EXPECT_TRUE(AllNear(net[parts[2]], std::vector<double>(xv.begin() + 12, xv.end()), 0, 0));
}

ir::Attrs SliceAttrs(std::vector<int64_t> st, std::vector<int64_t> en, std::vector<int64_t> sp) {
  return A({{"starts", std::move(st)}, {"ends", std::move(en)}, {"steps", std::move(sp)}});
}

TEST(Forward, Slice) {
  struct Case {
    Shape x;
    std::vector<int64_t> st, en, sp;
    Shape want;
  };
  const Case cases[] = {
      {{4, 6}, {0, 1}, {4, 5}, {1, 2}, {4, 2}},
      {{4, 6}, {3, 5}, {-1, -1}, {-1, -2}, {4, 3}},  // rows reversed, every other column backwards
      {{2, 3, 4}, {1, 0, 1}, {2, 3, 3}, {1, 1, 1}, {1, 3, 2}},
      {{5}, {4}, {-1}, {-3}, {2}},
      {{3, 4}, {2, 0}, {2, 4}, {1, 1}, {0, 4}},  // empty
  };
  uint32_t seed = 230;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " from " + Shape(c.st).ToString() + " to " + Shape(c.en).ToString() + " by " +
                 Shape(c.sp).ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++));
    ValueId y = net.Op(OpKind::kSlice, {x}, SliceAttrs(c.st, c.en, c.sp));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.want);
    auto xv = ToDouble(net[x]);
    std::vector<double> want;
    for (int64_t i = 0; i < c.want.numel(); ++i) {
      auto oi = Unravel(i, c.want);
      for (size_t d = 0; d < oi.size(); ++d) oi[d] = c.st[d] + oi[d] * c.sp[d];
      want.push_back(xv[static_cast<size_t>(Ravel(oi, c.x))]);
    }
    EXPECT_TRUE(AllNear(net[y], want, 0, 0));
  }
}

TEST(Forward, Expand) {
  struct Case {
    Shape x, shape, want;
  };
  const Case cases[] = {
      {{3, 1}, {2, 3, 4}, {2, 3, 4}}, {{}, {2, 3}, {2, 3}}, {{2, 1, 4}, {3, 1}, {2, 3, 4}}, {{3}, {1}, {3}},
  };
  uint32_t seed = 240;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " to " + c.shape.ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++));
    ValueId y = net.Op(OpKind::kExpand, {x}, ShapeAttr(c.shape.dims()));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.want);
    auto xv = ToDouble(net[x]);
    std::vector<double> want;
    for (int64_t i = 0; i < c.want.numel(); ++i)
      want.push_back(xv[static_cast<size_t>(BroadcastFlat(Unravel(i, c.want), c.x))]);
    EXPECT_TRUE(AllNear(net[y], want, 0, 0));
  }
}

TEST(Forward, Where) {
  {
    Net net;
    const Shape cs{2, 1, 3}, xs{4, 1}, ys{3}, out{2, 4, 3};
    ValueId c = net.Input("c", Bools(cs, {1, 0, 0, 0, 1, 1}));
    ValueId x = net.Input("x", Rand(xs, 250)), y = net.Input("y", Rand(ys, 251));
    ValueId z = net.Op(OpKind::kWhere, {c, x, y});
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[z].shape(), out);
    auto xv = ToDouble(net[x]), yv = ToDouble(net[y]);
    std::vector<double> want;
    for (int64_t i = 0; i < out.numel(); ++i) {
      auto idx = Unravel(i, out);
      bool keep = net[c].data<bool>()[BroadcastFlat(idx, cs)];
      want.push_back(keep ? xv[static_cast<size_t>(BroadcastFlat(idx, xs))]
                          : yv[static_cast<size_t>(BroadcastFlat(idx, ys))]);
    }
    EXPECT_TRUE(AllNear(net[z], want, 0, 0));
  }
  {
    Net net;  // the causal masked fill: -inf above the diagonal, the scores elsewhere
    std::vector<int> upper;
    for (int i = 0; i < 3; ++i)
      for (int j = 0; j < 3; ++j) upper.push_back(j > i);
    ValueId s = net.Input("s", Rand({2, 2, 3, 3}, 252));
    ValueId z = net.Op(OpKind::kWhere, {net.Const("mask", Bools({1, 1, 3, 3}, upper)),
                                        net.Const("fill", Tensor::Full({}, -INFINITY)), s});
    ASSERT_TRUE(net.Run().ok());
    for (int64_t i = 0; i < 36; ++i) {
      const float got = net[z].data<float>()[i];
      if (upper[static_cast<size_t>(i % 9)]) {
        EXPECT_TRUE(std::isinf(got) && got < 0) << i;
      } else {
        EXPECT_EQ(got, net[s].data<float>()[i]) << i;
      }
    }
  }
  Net net;  // int64
  ValueId z = net.Op(OpKind::kWhere, {net.Input("c", Bools({3}, {0, 1, 0})), net.Input("x", Ints({3}, {1, 2, 3})),
                                      net.Input("y", Ints({2, 1}, {-1, -2}))});
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(IntsOf(net[z]), (std::vector<int64_t>{-1, 2, -1, -2, 2, -2}));
}

TEST(Forward, EqualCast) {
  Net net;
  ValueId a = net.Input("a", Ints({2, 3}, {0, 1, 2, 2, 1, 0})), b = net.Input("b", Ints({3}, {0, 1, 0}));
  ValueId eq = net.Op(OpKind::kEqual, {a, b});
  ValueId f = net.Input("f", Tensor(DType::kF32, Shape{5}));
  const float fv[] = {-2.7f, -0.5f, 0.f, 0.5f, 3.9f};
  std::copy(std::begin(fv), std::end(fv), net[f].data<float>());
  auto cast = [&](ValueId v, DType t) { return net.Op(OpKind::kCast, {v}, A({{"dtype", static_cast<int64_t>(t)}})); };
  ValueId f_i64 = cast(f, DType::kI64), f_bool = cast(f, DType::kBool), eq_f = cast(eq, DType::kF32);
  ValueId i_f = cast(a, DType::kF32), f_f = cast(f, DType::kF32);
  ValueId feq = net.Op(OpKind::kEqual, {f, net.Input("z", Tensor::Full({}, 0.5f))});
  ASSERT_TRUE(net.Run().ok());
  ASSERT_EQ(net[eq].dtype(), DType::kBool);
  EXPECT_TRUE(AllNear(net[eq_f], {1, 1, 0, 0, 1, 1}, 0, 0));
  EXPECT_EQ(IntsOf(net[f_i64]), (std::vector<int64_t>{-2, 0, 0, 0, 3}));  // truncation toward zero
  std::vector<bool> fb(net[f_bool].data<bool>(), net[f_bool].data<bool>() + 5);
  EXPECT_EQ(fb, (std::vector<bool>{true, true, false, true, true}));
  EXPECT_TRUE(AllNear(net[i_f], {0, 1, 2, 2, 1, 0}, 0, 0));
  EXPECT_TRUE(AllNear(net[f_f], ToDouble(net[f]), 0, 0));
  std::vector<bool> fe(net[feq].data<bool>(), net[feq].data<bool>() + 5);
  EXPECT_EQ(fe, (std::vector<bool>{false, false, false, true, false}));

  for (auto [v, t] : {std::pair{INFINITY, DType::kI64}, {NAN, DType::kI32}, {-1.f, DType::kU8}, {3e9f, DType::kI32}}) {
    Net bad;  // a float outside the integer type has no value there
    auto y = bad.TryOp(OpKind::kCast, {bad.Input("x", Tensor::Full({2}, v))}, A({{"dtype", static_cast<int64_t>(t)}}),
                       "to_int");
    ASSERT_TRUE(y.ok());
    Status s = bad.Run();
    EXPECT_FALSE(s.ok()) << v;
    EXPECT_NE(s.message().find("to_int"), std::string::npos) << s.message();
  }
}

TEST(Forward, Trilu) {
  const Shape xs{2, 3, 4};
  uint32_t seed = 260;
  for (int64_t upper : {0, 1})
    for (int64_t k : {-1, 0, 2}) {
      SCOPED_TRACE("upper " + std::to_string(upper) + " k " + std::to_string(k));
      Net net;
      ValueId x = net.Input("x", Rand(xs, seed++));
      ValueId y = net.Op(OpKind::kTrilu, {x}, A({{"upper", upper}, {"k", k}}));
      ASSERT_TRUE(net.Run().ok());
      auto xv = ToDouble(net[x]);
      std::vector<double> want;
      for (int64_t e = 0; e < xs.numel(); ++e) {
        auto idx = Unravel(e, xs);
        const int64_t d = idx[2] - idx[1];
        want.push_back((upper ? d >= k : d <= k) ? xv[static_cast<size_t>(e)] : 0.0);
      }
      EXPECT_TRUE(AllNear(net[y], want, 0, 0));
    }
}

TEST(Forward, ShapeConstantOfShapeRange) {
  Net net;
  ValueId x = net.Input("x", Rand({2, 3, 4, 5}, 270));
  ValueId all = net.Op(OpKind::kShape, {x});
  ValueId mid = net.Op(OpKind::kShape, {x}, A({{"start", int64_t{1}}, {"end", int64_t{-1}}}));
  ValueId shape = net.Input("shape", Ints({2}, {2, 3}));
  ValueId ones = net.Op(OpKind::kConstantOfShape, {shape},
                        A({{"shape", std::vector<int64_t>{2, 3}}, {"value", 1.5},
                           {"dtype", static_cast<int64_t>(DType::kF32)}}));
  ValueId r1 = net.Op(OpKind::kRange, {net.Input("s", Ints({}, {10})), net.Input("l", Ints({}, {1})),
                                       net.Input("d", Ints({}, {-4}))}, A({{"size", int64_t{3}}}));
  ValueId r2 = net.Op(OpKind::kRange, {net.Input("fs", Tensor::Full({}, 0.5f)), net.Input("fl", Tensor::Full({}, 2.f)),
                                       net.Input("fd", Tensor::Full({}, 0.5f))}, A({{"size", int64_t{3}}}));
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(IntsOf(net[all]), (std::vector<int64_t>{2, 3, 4, 5}));
  EXPECT_EQ(IntsOf(net[mid]), (std::vector<int64_t>{3, 4}));
  EXPECT_TRUE(AllNear(net[ones], std::vector<double>(6, 1.5), 0, 0));
  EXPECT_EQ(IntsOf(net[r1]), (std::vector<int64_t>{10, 6, 2}));
  EXPECT_TRUE(AllNear(net[r2], {0.5, 1.0, 1.5}, 0, 0));

  Net bad;  // a length that disagrees with the values is bad data
  auto r = bad.TryOp(OpKind::kRange, {bad.Input("s", Ints({}, {0})), bad.Input("l", Ints({}, {5})),
                                      bad.Input("d", Ints({}, {1}))}, A({{"size", int64_t{4}}}), "range");
  ASSERT_TRUE(r.ok());
  EXPECT_FALSE(bad.Run().ok());
}

// ---- Forward: fused ops (ir/rewrite.h) against the chains they replace and a reference. ----

// The exported erf GELU after a bias add, op for op: (H * (erf(H / div) + one)) * half.
ValueId GeluChain(Net& net, ValueId x, ValueId bias, float div, float one, float half) {
  ValueId h = bias == ir::kNoValue ? x : net.Op(OpKind::kAdd, {bias, x});
  ValueId e = net.Op(OpKind::kErf, {net.Op(OpKind::kDiv, {h, net.Const("div", Tensor::Full({}, div))})});
  ValueId a = net.Op(OpKind::kAdd, {e, net.Const("one", Tensor::Full({}, one))});
  return net.Op(OpKind::kMul, {net.Op(OpKind::kMul, {h, a}), net.Const("half", Tensor::Full({}, half))});
}

ir::Attrs GeluAttrs(float div, float one, float half) { return A({{"div", double{div}}, {"one", double{one}}, {"half", double{half}}}); }

TEST(Forward, Gelu) {
  const float div = 1.4142135381698608f;
  for (bool bias : {true, false}) {
    SCOPED_TRACE(bias ? "with bias" : "no bias");
    Net net;
    ValueId x = net.Input("x", Rand({3, 4, 37}, 300, -4, 4));
    ValueId b = bias ? net.Input("b", Rand({37}, 301)) : ir::kNoValue;
    std::vector<ValueId> in = {x};
    if (bias) in.push_back(b);
    ValueId fused = net.Op(OpKind::kGelu, in, GeluAttrs(div, 1, 0.5));
    ValueId chain = GeluChain(net, x, b, div, 1, 0.5);
    ASSERT_TRUE(net.Run().ok());
    std::vector<double> want;
    const auto xv = ToDouble(net[x]);
    const auto bv = bias ? ToDouble(net[b]) : std::vector<double>(37, 0.0);
    for (size_t i = 0; i < xv.size(); ++i) {
      const double h = xv[i] + bv[i % 37];
      want.push_back(0.5 * h * (1 + std::erf(h / std::sqrt(2.0))));
    }
    EXPECT_TRUE(AllNear(net[fused], want, kRtol, kAtol));
    EXPECT_TRUE(AllNear(net[fused], ToDouble(net[chain]), 1e-6, 1e-7)) << "the chain it replaces";
  }
}

// ONNX Gelu with approximate='tanh', against its formula in double.
TEST(Forward, GeluTanh) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 37}, 302, -5, 5)), b = net.Input("b", Rand({37}, 303));
  ir::Attrs at = GeluAttrs(1.4142135f, 1, 0.5);
  at.Set("tanh", int64_t{1});
  ValueId y = net.Op(OpKind::kGelu, {x, b}, at);
  ASSERT_TRUE(net.Run().ok());
  std::vector<double> want;
  const auto xv = ToDouble(net[x]), bv = ToDouble(net[b]);
  for (size_t i = 0; i < xv.size(); ++i) {
    const double h = xv[i] + bv[i % 37];
    want.push_back(0.5 * h * (1 + std::tanh(std::sqrt(2 / M_PI) * (h + 0.044715 * h * h * h))));
  }
  EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
}

// SiLU against Mul(X, Sigmoid(X)), forward and backward (the chain's Mul and Sigmoid gradients and
// their sum, in its order), and against x / (1 + e^-x) in double. Wide enough for the kernels'
// vector loops and their tails, with large |x| where the sigmoid saturates.
TEST(Forward, SiluAgainstItsChain) {
  Tensor x0 = Rand({3, 37}, 304, -6, 6);
  x0.data<float>()[0] = 30.f;
  x0.data<float>()[1] = -30.f;
  x0.data<float>()[2] = 0.f;
  const Tensor w0 = Rand({3, 37}, 305, -2, 2);  // dY: each output element its own
  struct Run {
    Net net;
    ValueId x, y, dx;
  };
  auto run = [&](Run& r, bool fused) {
    r.x = r.net.Input("x", x0);
    r.y = fused ? r.net.Op(OpKind::kSilu, {r.x}) : r.net.Op(OpKind::kMul, {r.x, r.net.Op(OpKind::kSigmoid, {r.x})});
    auto g = ir::Backward(r.net.builder(), r.y, r.net.Const("dy", w0), {r.x});
    ASSERT_TRUE(g.ok()) << g.status().message();
    r.dx = (*g)[0];
    ASSERT_TRUE(r.net.Run().ok());
  };
  Run f, c;
  run(f, true);
  run(c, false);
  std::vector<double> want;
  for (double v : ToDouble(x0)) want.push_back(v / (1 + std::exp(-v)));
  EXPECT_TRUE(AllNear(f.net[f.y], want, kRtol, kAtol));
  EXPECT_TRUE(AllNear(f.net[f.y], ToDouble(c.net[c.y]), 1e-6, 1e-7)) << "the chain it replaces";
  EXPECT_TRUE(AllNear(f.net[f.dx], ToDouble(c.net[c.dx]), 1e-6, 1e-7)) << "the chain's gradient";
  std::vector<double> want_dx;
  const auto xv = ToDouble(x0), wv = ToDouble(w0);
  for (size_t i = 0; i < xv.size(); ++i) {
    const double s = 1 / (1 + std::exp(-xv[i]));
    want_dx.push_back(wv[i] * s * (1 + xv[i] * (1 - s)));
  }
  EXPECT_TRUE(AllNear(f.net[f.dx], want_dx, kRtol, kAtol));
  const auto dx = ToDouble(f.net[f.dx]);
  EXPECT_EQ(dx[0], wv[0]) << "silu'(30) is 1 to float";
  EXPECT_EQ(dx[2], 0.5 * wv[2]) << "silu'(0) is 1/2";
}

// Attention's scores scaled, masked above the diagonal and softmaxed, against Mul, Where, Softmax.
TEST(Forward, MaskedSoftmax) {
  const int64_t t = 5;
  std::vector<int> upper;
  for (int64_t i = 0; i < t; ++i)
    for (int64_t j = 0; j < t; ++j) upper.push_back(j > i);
  for (bool divide : {false, true}) {
    SCOPED_TRACE(divide ? "divide" : "multiply");
    Net net;
    ValueId s = net.Input("s", Rand({2, 3, t, t}, 310, -3, 3));
    ValueId mask = net.Const("mask", Bools({1, 1, t, t}, upper));
    ValueId c = net.Const("c", Tensor::Full({}, divide ? 4.f : 0.25f));
    ValueId fill = net.Const("fill", Tensor::Full({}, -INFINITY));
    ValueId fused = net.Op(OpKind::kMaskedSoftmax, {s, mask},
                           A({{"scale", double{divide ? 4.0 : 0.25}}, {"divide", I(divide)}, {"fill", -INFINITY}, {"fill_if", I(true)}}));
    ValueId scaled = net.Op(divide ? OpKind::kDiv : OpKind::kMul, {s, c});
    ValueId chain = net.Op(OpKind::kSoftmax, {net.Op(OpKind::kWhere, {mask, fill, scaled})}, A({{"axis", int64_t{-1}}}));
    ASSERT_TRUE(net.Run().ok());
    std::vector<double> masked = ToDouble(net[s]);
    for (size_t i = 0; i < masked.size(); ++i) masked[i] = upper[i % (t * t)] ? -INFINITY : masked[i] * 0.25;
    EXPECT_TRUE(AllNear(net[fused], RefSoftmax(masked, {2, 3, t, t}, 3, false), kRtol, kAtol));
    EXPECT_TRUE(AllNear(net[fused], ToDouble(net[chain]), 1e-6, 1e-7)) << "the chain it replaces";
  }
  Net net;  // a mask broadcast along the rows ([t] on [2, t]) and kept where it is false
  ValueId s = net.Input("s", Rand({2, t}, 311, -3, 3));
  ValueId y = net.Op(OpKind::kMaskedSoftmax, {s, net.Const("keep", Bools({t}, {1, 1, 0, 1, 0}))},
                     A({{"fill", -1e9}, {"fill_if", I(false)}}));
  ASSERT_TRUE(net.Run().ok());
  std::vector<double> masked = ToDouble(net[s]);
  for (size_t i = 0; i < masked.size(); ++i) masked[i] = (i % t == 2 || i % t == 4) ? -1e9 : masked[i];
  EXPECT_TRUE(AllNear(net[y], RefSoftmax(masked, {2, t}, 1, false), kRtol, kAtol));
}

// ---- Forward: internal ops (gradients' helpers, losses, the optimizer step). ----

TEST(Forward, SumTo) {
  struct Case {
    Shape x, target;
  };
  const Case cases[] = {
      {{2, 3, 4}, {3, 4}}, {{2, 3, 4}, {2, 1, 4}}, {{2, 3, 4}, {4}},    {{2, 3, 4}, {}},
      {{2, 3, 4}, {1, 3, 1}}, {{4, 3}, {3}},       {{4, 3}, {4, 1}},    {{2, 3}, {2, 3}},
  };
  uint32_t seed = 90;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " -> " + c.target.ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++));
    ValueId y = net.Op(OpKind::kSumTo, {x}, ShapeAttr(c.target.dims()));
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.target);
    std::vector<double> want(static_cast<size_t>(c.target.numel()), 0.0), xv = ToDouble(net[x]);
    for (int64_t i = 0; i < c.x.numel(); ++i)
      want[static_cast<size_t>(BroadcastFlat(Unravel(i, c.x), c.target))] += xv[static_cast<size_t>(i)];
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
  }
}

TEST(Forward, CrossEntropy) {
  struct Case {
    Shape logits;
    std::vector<int64_t> labels;
  };
  const Case cases[] = {
      {{4, 5}, {0, 4, 2, 1}},
      {{2, 3, 5}, {4, 0, 3, 3, 1, 2}},
      {{1, 7}, {6}},
  };
  uint32_t seed = 100;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.logits.ToString());
    Net net;
    Shape ls = Dims(c.logits, 0, c.logits.rank() - 1);
    ValueId x = net.Input("logits", Rand(c.logits, seed++, -3, 3));
    ValueId y = net.Op(OpKind::kCrossEntropy, {x, net.Input("labels", Ints(ls, c.labels))});
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), Shape{});
    EXPECT_TRUE(AllNear(net[y], {RefCrossEntropy(ToDouble(net[x]), c.logits[c.logits.rank() - 1], c.labels)}, kRtol,
                        kAtol));
  }
}

TEST(Forward, CrossEntropyIgnoreIndex) {  // with sum = 1, the sum over the labels not ignored
  Net net;
  ValueId x = net.Input("logits", Rand({4, 5}, 130, -3, 3));
  ValueId labels = net.Input("labels", Ints({4}, {2, -100, 4, -100}));
  ir::Attrs a = A({{"sum", int64_t{1}}, {"ignore_index", int64_t{-100}}});
  ValueId y = net.Op(OpKind::kCrossEntropy, {x, labels}, a);
  ValueId dx = net.Op(OpKind::kCrossEntropyGrad, {net.Const("dL", Tensor::Full({}, 1.f)), x, labels}, a);
  ASSERT_TRUE(net.Run().ok());
  const std::vector<double> xv = ToDouble(net[x]);
  const std::vector<double> kept = {xv[0], xv[1], xv[2], xv[3], xv[4], xv[10], xv[11], xv[12], xv[13], xv[14]};
  EXPECT_TRUE(AllNear(net[y], {2 * RefCrossEntropy(kept, 5, {2, 4})}, kRtol, kAtol));
  for (int64_t j = 5; j < 10; ++j) EXPECT_EQ(net[dx].data<float>()[j], 0.f) << "an ignored row has no gradient";
  double row0 = 0;
  for (int64_t j = 0; j < 5; ++j) row0 += net[dx].data<float>()[j];
  EXPECT_NEAR(row0, 0.0, 1e-6);  // softmax - onehot sums to 0 over a kept row
}

TEST(Forward, CrossEntropyLabelOutOfRange) {
  for (int64_t bad : {int64_t{5}, int64_t{-1}}) {
    Net net;
    auto y = net.TryOp(OpKind::kCrossEntropy, {net.Input("x", Rand({2, 5}, 1)), net.Input("y", Ints({2}, {0, bad}))},
                       {}, "ce_loss");
    ASSERT_TRUE(y.ok());
    Status s = net.Run();
    EXPECT_FALSE(s.ok());
    EXPECT_NE(s.message().find("ce_loss"), std::string::npos) << s.message();
  }
}

TEST(Forward, Mse) {
  Net net;
  ValueId p = net.Input("p", Rand({3, 4}, 110)), t = net.Input("t", Rand({3, 4}, 111));
  ValueId y = net.Op(OpKind::kMse, {p, t});
  ASSERT_TRUE(net.Run().ok());
  auto pv = ToDouble(net[p]), tv = ToDouble(net[t]);
  double s = 0;
  for (size_t i = 0; i < pv.size(); ++i) s += (pv[i] - tv[i]) * (pv[i] - tv[i]);
  EXPECT_TRUE(AllNear(net[y], {s / 12}, kRtol, kAtol));
}

TEST(Forward, Accumulate) {
  Net net;
  ValueId g = net.Input("g", Tensor(DType::kF32, Shape{2, 3}));
  ValueId acc = net.Op(OpKind::kAccumulate, {g});
  std::vector<double> sum(6, 0.0);
  for (int64_t micro = 0; micro < 3; ++micro) {
    SCOPED_TRACE("micro " + std::to_string(micro));
    Tensor gi = Rand({2, 3}, 120 + static_cast<uint32_t>(micro));
    net[g].CopyFrom(gi);
    ASSERT_TRUE(net.Run(0, micro).ok());
    for (size_t i = 0; i < sum.size(); ++i) sum[i] += gi.data<float>()[i];
    EXPECT_TRUE(AllNear(net[acc], sum, kRtol, kAtol));
  }
  Tensor next = Rand({2, 3}, 130);  // the next step's micro 0 starts over
  net[g].CopyFrom(next);
  ASSERT_TRUE(net.Run(1, 0).ok());
  EXPECT_TRUE(AllNear(net[acc], ToDouble(next), 0, 0));
}

TEST(Forward, SquareSumAddNClipCoef) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 4}, 140, -2, 2));
  ValueId sq = net.Op(OpKind::kSquareSum, {x});
  ValueId s0 = net.Input("s0", Tensor::Full({}, 1.5f)), s2 = net.Input("s2", Tensor::Full({}, -0.25f));
  ValueId sum = net.Op(OpKind::kAddN, {s0, sq, s2});
  ASSERT_TRUE(net.Run().ok());
  double want = 0;
  for (double v : ToDouble(net[x])) want += v * v;
  EXPECT_TRUE(AllNear(net[sq], {want}, kRtol, kAtol));
  EXPECT_TRUE(AllNear(net[sum], {1.5 + want - 0.25}, kRtol, kAtol));

  struct Case {
    float total;
    double max_norm, want;
  };
  const Case cases[] = {
      {9, 1, 1 / (3 + 1e-6)}, {0.25, 1, 1}, {4, 2, 2 / (2 + 1e-6)}, {0, 1, 1}, {100, 0.5, 0.5 / (10 + 1e-6)},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE("total " + std::to_string(c.total) + " max_norm " + std::to_string(c.max_norm));
    Net n2;
    ValueId coef = n2.Op(OpKind::kClipCoef, {n2.Input("t", Tensor::Full({}, c.total))}, A({{"max_norm", c.max_norm}}));
    ASSERT_TRUE(n2.Run().ok());
    EXPECT_TRUE(AllNear(n2[coef], {c.want}, kRtol, kAtol));
  }
}

TEST(Forward, SgdUpdate) {
  struct Case {
    double momentum, wd;
    bool nesterov;
    std::optional<float> coef;
    RefSchedule sched;
  };
  const Case cases[] = {
      {0, 0, false, std::nullopt, {0.1, 0, 0, 0, 1}},
      {0, 0.01, false, std::nullopt, {0.1, 0, 0, 0, 1}},
      {0.9, 0, false, std::nullopt, {0.1, 0, 0, 0, 1}},
      {0.9, 0.01, true, std::nullopt, {0.1, 0, 0, 0, 1}},
      {0.9, 0.05, false, 0.5f, {0.2, 0.02, 1, 1, 3}},  // clip coefficient; linear decay after warm-up
  };
  uint32_t seed = 150;
  for (const Case& c : cases) {
    SCOPED_TRACE("momentum " + std::to_string(c.momentum) + " wd " + std::to_string(c.wd) +
                 (c.nesterov ? " nesterov" : "") + (c.coef ? " coef" : ""));
    Net net;
    ValueId w = net.Input("w", Rand({3, 4}, seed++));
    ValueId g = net.Input("g", Tensor(DType::kF32, Shape{3, 4}));
    std::vector<ValueId> in = {w, g};
    if (c.coef) in.push_back(net.Input("coef", Tensor::Full({}, *c.coef)));
    ir::Attrs at = A({{"momentum", c.momentum}, {"weight_decay", c.wd}, {"nesterov", I(c.nesterov)}});
    c.sched.AddTo(at);
    auto state = net.OpN(OpKind::kSgdUpdate, in, at);
    ASSERT_EQ(state.size(), c.momentum > 0 ? 1u : 0u);
    // PyTorch's SGD (dampening 0), one scalar at a time.
    std::vector<double> ww = ToDouble(net[w]), buf(ww.size(), 0.0);
    for (int64_t step = 0; step < 3; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor gi = Rand({3, 4}, seed++);
      net[g].CopyFrom(gi);
      ASSERT_TRUE(net.Run(step).ok());
      const double lr = c.sched.At(step);
      for (size_t i = 0; i < ww.size(); ++i) {
        double d = gi.data<float>()[i] * static_cast<double>(c.coef.value_or(1.f)) + c.wd * ww[i];
        if (c.momentum > 0) {
          buf[i] = step == 0 ? d : c.momentum * buf[i] + d;
          d = c.nesterov ? d + c.momentum * buf[i] : buf[i];
        }
        ww[i] -= lr * d;
      }
      EXPECT_TRUE(AllNear(net[w], ww, kRtol, kAtol));
      if (c.momentum > 0) {
        EXPECT_TRUE(AllNear(net[state[0]], buf, kRtol, kAtol));
      }
    }
  }
}

TEST(Forward, AdamWUpdate) {
  struct Case {
    double b1, b2, eps, wd;
    std::optional<float> coef;
    RefSchedule sched;
    int64_t steps;
  };
  const Case cases[] = {
      {0.9, 0.999, 1e-8, 0.0, std::nullopt, {1e-2, 0, 0, 0, 1}, 2},
      {0.9, 0.999, 1e-8, 0.1, std::nullopt, {1e-2, 0, 0, 0, 1}, 2},
      {0.8, 0.95, 1e-6, 0.01, 0.5f, {1e-2, 0, 0, 0, 1}, 2},
      {0.9, 0.95, 1e-8, 0.1, std::nullopt, {1e-2, 1e-3, 2, 2, 5}, 5},  // cosine with 2 warm-up steps
      {0.9, 0.999, 1e-8, 0.05, std::nullopt, {3e-3, 0, 1, 1, 4}, 4},    // linear with 1 warm-up step
  };
  uint32_t seed = 170;
  for (const Case& c : cases) {
    SCOPED_TRACE("b1 " + std::to_string(c.b1) + " b2 " + std::to_string(c.b2) + " wd " + std::to_string(c.wd) +
                 " schedule " + std::to_string(c.sched.kind) + " warmup " + std::to_string(c.sched.warmup));
    Net net;
    ValueId w = net.Input("w", Rand({2, 5}, seed++));
    ValueId g = net.Input("g", Tensor(DType::kF32, Shape{2, 5}));
    std::vector<ValueId> in = {w, g};
    if (c.coef) in.push_back(net.Input("coef", Tensor::Full({}, *c.coef)));
    ir::Attrs at = A({{"beta1", c.b1}, {"beta2", c.b2}, {"eps", c.eps}, {"weight_decay", c.wd}});
    c.sched.AddTo(at);
    auto state = net.OpN(OpKind::kAdamWUpdate, in, at);
    ASSERT_EQ(state.size(), 2u);
    // PyTorch's AdamW: decoupled decay, then Adam with bias-corrected moments.
    std::vector<double> ww = ToDouble(net[w]), m(ww.size(), 0.0), v(ww.size(), 0.0);
    for (int64_t step = 0; step < c.steps; ++step) {
      SCOPED_TRACE("step " + std::to_string(step));
      Tensor gi = Rand({2, 5}, seed++);
      net[g].CopyFrom(gi);
      ASSERT_TRUE(net.Run(step).ok());
      const double lr = c.sched.At(step), t = static_cast<double>(step + 1);
      for (size_t i = 0; i < ww.size(); ++i) {
        double gr = gi.data<float>()[i] * static_cast<double>(c.coef.value_or(1.f));
        ww[i] *= 1 - lr * c.wd;
        m[i] = c.b1 * m[i] + (1 - c.b1) * gr;
        v[i] = c.b2 * v[i] + (1 - c.b2) * gr * gr;
        double mhat = m[i] / (1 - std::pow(c.b1, t)), vhat = v[i] / (1 - std::pow(c.b2, t));
        ww[i] -= lr * mhat / (std::sqrt(vhat) + c.eps);
      }
      EXPECT_TRUE(AllNear(net[w], ww, kRtol, kAtol));
      EXPECT_TRUE(AllNear(net[state[0]], m, kRtol, kAtol));
      EXPECT_TRUE(AllNear(net[state[1]], v, kRtol, kAtol));
    }
  }
}

// ---- Gradients against central finite differences. ----
//
// Kernels are float32, so the step is large: eps = 1e-2 keeps float rounding in L (summed in double
// from the float output) near 1e-5 after dividing by 2 eps, while the truncation error eps^2 f'''/6
// stays below 1e-4 for these smooth ops on inputs of order 1.
constexpr double kFdEps = 1e-2, kGradRtol = 2e-2, kGradAtol = 2e-3;

// Checks d(sum(out * R))/d(w) for every w in `wrt`. The loss is built from ops with gradient rules
// (SumTo has none: it only ever appears inside gradients): L = Reshape(MatMul(Reshape(out, [1, n]),
// R [n, 1]), []), seeded with 1.
void CheckGrads(Net& net, ValueId out, const std::vector<ValueId>& wrt, uint32_t seed = 999) {
  const size_t n_fwd = net.graph().nodes.size();
  const int64_t n = net.graph().type(out).shape.numel();
  Tensor r = Rand({n, 1}, seed);
  ValueId flat = net.Op(OpKind::kReshape, {out}, ShapeAttr({1, n}));
  ValueId loss = net.Op(OpKind::kReshape, {net.Op(OpKind::kMatMul, {flat, net.Const("fd_R", r)})}, ShapeAttr({}));
  auto grads = ir::Backward(net.builder(), loss, net.Const("fd_seed", Tensor::Full({}, 1.f)), wrt);
  ASSERT_TRUE(grads.ok()) << grads.status().message();
  ASSERT_TRUE(net.Run().ok());
  std::vector<Tensor> analytic;
  for (size_t k = 0; k < wrt.size(); ++k) {
    ValueId d = (*grads)[k];
    ASSERT_NE(d, ir::kNoValue) << "no gradient for " << net.graph().value(wrt[k]).name;
    ASSERT_EQ(net[d].shape(), net[wrt[k]].shape());
    analytic.push_back(net[d].Clone());
  }
  auto loss_at = [&]() {
    Status s = net.Run(0, 0, n_fwd);  // the op under test only
    EXPECT_TRUE(s.ok()) << s.message();
    double l = 0;
    for (int64_t i = 0; i < n; ++i) l += static_cast<double>(net[out].data<float>()[i]) * r.data<float>()[i];
    return l;
  };
  for (size_t k = 0; k < wrt.size(); ++k) {
    float* x = net[wrt[k]].data<float>();  // the input's own data
    std::vector<double> fd;
    for (int64_t i = 0; i < net[wrt[k]].numel(); ++i) {
      const float x0 = x[i];
      const float xp = static_cast<float>(x0 + kFdEps), xm = static_cast<float>(x0 - kFdEps);
      x[i] = xp;
      const double lp = loss_at();
      x[i] = xm;
      const double lm = loss_at();
      x[i] = x0;
      fd.push_back((lp - lm) / (static_cast<double>(xp) - static_cast<double>(xm)));
    }
    EXPECT_TRUE(AllNear(analytic[k], fd, kGradRtol, kGradAtol)) << "d/d " << net.graph().value(wrt[k]).name;
    double biggest = 0;
    for (double v : fd) biggest = std::max(biggest, std::abs(v));
    EXPECT_GT(biggest, 10 * kGradAtol) << "the check is vacuous: d/d " << net.graph().value(wrt[k]).name << " ~ 0";
  }
}

// One binary op with broadcasting; b is kept away from 0 for Div.
void CheckBinary(OpKind op, const Shape& as, const Shape& bs) {
  Net net;
  ValueId a = net.Input("a", Rand(as, 1));
  ValueId b = net.Input("b", op == OpKind::kDiv ? RandAwayFromZero(bs, 2, 0.5, 1.5) : Rand(bs, 2));
  CheckGrads(net, net.Op(op, {a, b}), {a, b});
}

void CheckMatMul(const Shape& as, const Shape& bs, bool ta, bool tb, double alpha = 1) {
  Net net;
  ValueId a = net.Input("a", Rand(as, 3)), b = net.Input("b", Rand(bs, 4));
  CheckGrads(net, net.Op(OpKind::kMatMul, {a, b}, A({{"transA", I(ta)}, {"transB", I(tb)}, {"alpha", alpha}})), {a, b});
}

void CheckGemm(bool ta, bool tb, double alpha, double beta, std::optional<Shape> c) {
  Net net;
  ValueId a = net.Input("a", Rand(ta ? Shape{4, 3} : Shape{3, 4}, 5));
  ValueId b = net.Input("b", Rand(tb ? Shape{5, 4} : Shape{4, 5}, 6));
  std::vector<ValueId> in = {a, b};
  if (c) in.push_back(net.Input("c", Rand(*c, 7)));
  ValueId y = net.Op(OpKind::kGemm, in, A({{"transA", I(ta)}, {"transB", I(tb)}, {"alpha", alpha}, {"beta", beta}}));
  CheckGrads(net, y, in);
}

void CheckUnary(OpKind op, Tensor x0, ir::Attrs at = {}) {
  Net net;
  ValueId x = net.Input("x", std::move(x0));
  CheckGrads(net, net.Op(op, {x}, std::move(at)), {x});
}

void CheckLayerNorm(const Shape& xs, int64_t axis, bool bias) {
  Net net;
  int ax = static_cast<int>(axis < 0 ? axis + xs.rank() : axis);
  Shape norm = Dims(xs, ax, xs.rank());
  ValueId x = net.Input("x", Rand(xs, 8, -2, 2));
  std::vector<ValueId> in = {x, net.Input("scale", Rand(norm, 9, 0.5, 1.5))};
  if (bias) in.push_back(net.Input("bias", Rand(norm, 10)));
  CheckGrads(net, net.OpN(OpKind::kLayerNormalization, in, A({{"axis", axis}}))[0], in);
}

void CheckTranspose(const Shape& xs, std::vector<int64_t> perm) {
  CheckUnary(OpKind::kTranspose, Rand(xs, 11), perm.empty() ? ir::Attrs{} : A({{"perm", std::move(perm)}}));
}

TEST(Grad, Gemm_noC) { CheckGemm(false, false, 1, 1, std::nullopt); }
TEST(Grad, Gemm_fullC) { CheckGemm(false, false, 1, 1, Shape{3, 5}); }
TEST(Grad, Gemm_rowC_alpha_beta) { CheckGemm(false, false, 0.5, 2, Shape{5}); }
TEST(Grad, Gemm_transA_colC) { CheckGemm(true, false, 1, -1, Shape{3, 1}); }
TEST(Grad, Gemm_transB_scalarC) { CheckGemm(false, true, 2, 0.5, Shape{}); }
TEST(Grad, Gemm_transA_transB) { CheckGemm(true, true, -1.5, 1, Shape{1, 5}); }

TEST(Grad, MatMul_2x2) { CheckMatMul({3, 4}, {4, 5}, false, false); }
TEST(Grad, MatMul_2x2_transA) { CheckMatMul({4, 3}, {4, 5}, true, false); }
TEST(Grad, MatMul_2x2_transB) { CheckMatMul({3, 4}, {5, 4}, false, true); }
TEST(Grad, MatMul_2x2_transA_transB_alpha) { CheckMatMul({4, 3}, {5, 4}, true, true, 0.5); }
TEST(Grad, MatMul_3x2) { CheckMatMul({2, 3, 4}, {4, 5}, false, false); }
TEST(Grad, MatMul_3x2_transA) { CheckMatMul({2, 4, 3}, {4, 5}, true, false); }
TEST(Grad, MatMul_3x2_transB) { CheckMatMul({2, 3, 4}, {5, 4}, false, true); }
TEST(Grad, MatMul_3x2_transA_transB) { CheckMatMul({2, 4, 3}, {5, 4}, true, true); }
TEST(Grad, MatMul_2x3) { CheckMatMul({3, 4}, {2, 4, 5}, false, false); }
TEST(Grad, MatMul_2x3_transA_transB) { CheckMatMul({4, 3}, {2, 5, 4}, true, true); }
TEST(Grad, MatMul_3x3_alpha) { CheckMatMul({2, 3, 4}, {2, 4, 5}, false, false, -2); }
TEST(Grad, MatMul_4x4) { CheckMatMul({2, 3, 2, 4}, {2, 3, 4, 3}, false, false); }
TEST(Grad, MatMul_4x4_broadcast) { CheckMatMul({2, 1, 3, 4}, {1, 3, 4, 2}, false, false); }
TEST(Grad, MatMul_4x3_broadcast_transB) { CheckMatMul({2, 1, 3, 4}, {3, 2, 4}, false, true); }

TEST(Grad, Add_same) { CheckBinary(OpKind::kAdd, {2, 3}, {2, 3}); }
TEST(Grad, Add_NC_C) { CheckBinary(OpKind::kAdd, {4, 3}, {3}); }
TEST(Grad, Add_B1C_1T1) { CheckBinary(OpKind::kAdd, {2, 1, 3}, {1, 4, 1}); }
TEST(Grad, Add_scalar) { CheckBinary(OpKind::kAdd, {}, {2, 3}); }
TEST(Grad, Sub_same) { CheckBinary(OpKind::kSub, {2, 3}, {2, 3}); }
TEST(Grad, Sub_NC_C) { CheckBinary(OpKind::kSub, {4, 3}, {3}); }
TEST(Grad, Sub_B1C_1T1) { CheckBinary(OpKind::kSub, {2, 1, 3}, {1, 4, 1}); }
TEST(Grad, Mul_same) { CheckBinary(OpKind::kMul, {2, 3}, {2, 3}); }
TEST(Grad, Mul_NC_C) { CheckBinary(OpKind::kMul, {4, 3}, {3}); }
TEST(Grad, Mul_B1C_1T1) { CheckBinary(OpKind::kMul, {2, 1, 3}, {1, 4, 1}); }
TEST(Grad, Mul_scalar) { CheckBinary(OpKind::kMul, {2, 3}, {}); }
TEST(Grad, Div_same) { CheckBinary(OpKind::kDiv, {2, 3}, {2, 3}); }
TEST(Grad, Div_NC_C) { CheckBinary(OpKind::kDiv, {4, 3}, {3}); }
TEST(Grad, Div_C_NC) { CheckBinary(OpKind::kDiv, {3}, {4, 3}); }
TEST(Grad, Div_B1C_1T1) { CheckBinary(OpKind::kDiv, {2, 1, 3}, {1, 4, 1}); }

TEST(Grad, Mul_same_input) {  // x * x: Backward sums the two paths
  Net net;
  ValueId x = net.Input("x", Rand({2, 3}, 12));
  CheckGrads(net, net.Op(OpKind::kMul, {x, x}), {x});
}

TEST(Grad, Relu) { CheckUnary(OpKind::kRelu, RandAwayFromZero({3, 4}, 13, 0.1, 2)); }  // no kink within eps
TEST(Grad, Tanh) { CheckUnary(OpKind::kTanh, Rand({3, 4}, 14, -2, 2)); }
TEST(Grad, Sigmoid) { CheckUnary(OpKind::kSigmoid, Rand({3, 4}, 15, -3, 3)); }
TEST(Grad, Erf) { CheckUnary(OpKind::kErf, Rand({3, 4}, 16, -2, 2)); }
TEST(Grad, Scale) { CheckUnary(OpKind::kScale, Rand({3, 4}, 17), A({{"alpha", -1.5}})); }

TEST(Grad, Gelu_bias) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 5}, 320, -3, 3)), b = net.Input("b", Rand({5}, 321));
  CheckGrads(net, net.Op(OpKind::kGelu, {x, b}, GeluAttrs(1.4142135f, 1, 0.5)), {x, b});
}
TEST(Grad, Gelu_tanh_bias) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 4}, 323, -3, 3)), b = net.Input("b", Rand({4}, 324));
  ir::Attrs at = GeluAttrs(1.4142135f, 1, 0.5);
  at.Set("tanh", int64_t{1});
  CheckGrads(net, net.Op(OpKind::kGelu, {x, b}, at), {x, b});
}
TEST(Grad, Silu) { CheckUnary(OpKind::kSilu, Rand({3, 4}, 325, -4, 4)); }
TEST(Grad, Gelu_nobias) { CheckUnary(OpKind::kGelu, Rand({3, 4}, 322, -3, 3), GeluAttrs(1.4142135f, 1, 0.5)); }
TEST(Grad, MaskedSoftmax) {
  Net net;
  ValueId s = net.Input("s", Rand({2, 4, 4}, 323, -2, 2));
  std::vector<int> upper;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) upper.push_back(j > i);
  ValueId y = net.Op(OpKind::kMaskedSoftmax, {s, net.Const("mask", Bools({4, 4}, upper))},
                     A({{"scale", 2.0}, {"divide", I(true)}, {"fill", -INFINITY}, {"fill_if", I(true)}}));
  CheckGrads(net, y, {s});
  for (const ir::Node& node : net.graph().nodes) {  // the fused op's gradient: finite, 0 where masked
    if (node.op != OpKind::kMaskedSoftmaxGrad) continue;
    const Tensor& g = net[node.out[0]];
    for (int64_t i = 0; i < g.numel(); ++i) {
      EXPECT_TRUE(std::isfinite(g.data<float>()[i])) << i;
      if (upper[static_cast<size_t>(i % 16)]) {
        EXPECT_EQ(g.data<float>()[i], 0.f) << i;
      }
    }
  }
}
TEST(Grad, MaskedSoftmax_unmasked) {
  CheckUnary(OpKind::kMaskedSoftmax, Rand({3, 5}, 324, -2, 2), A({{"scale", 0.5}}));
}
TEST(Grad, Softmax_last) { CheckUnary(OpKind::kSoftmax, Rand({3, 5}, 18, -2, 2), A({{"axis", int64_t{-1}}})); }
TEST(Grad, Softmax_mid) { CheckUnary(OpKind::kSoftmax, Rand({2, 4, 3}, 19, -2, 2), A({{"axis", int64_t{1}}})); }
TEST(Grad, LogSoftmax_last) { CheckUnary(OpKind::kLogSoftmax, Rand({3, 5}, 20, -2, 2), A({{"axis", int64_t{-1}}})); }
TEST(Grad, LogSoftmax_mid) { CheckUnary(OpKind::kLogSoftmax, Rand({2, 4, 3}, 21, -2, 2), A({{"axis", int64_t{1}}})); }

TEST(Grad, LayerNorm_last_bias) { CheckLayerNorm({2, 3, 4}, -1, true); }
TEST(Grad, LayerNorm_last_nobias) { CheckLayerNorm({2, 3, 4}, -1, false); }
TEST(Grad, LayerNorm_axis1_bias) { CheckLayerNorm({2, 3, 4}, 1, true); }
TEST(Grad, LayerNorm_axis1_nobias) { CheckLayerNorm({2, 3, 4}, 1, false); }

void CheckRMSNorm(const Shape& xs, int64_t axis) {
  Net net;
  std::vector<ValueId> in = {net.Input("x", Rand(xs, 12, -2, 2)), net.Input("scale", Rand(Dims(xs, static_cast<int>(axis), xs.rank()), 13, 0.5, 1.5))};
  CheckGrads(net, net.OpN(OpKind::kRMSNorm, in, A({{"axis", axis}, {"epsilon", 1e-6}}))[0], in);
}
TEST(Grad, RMSNorm_last) { CheckRMSNorm({2, 3, 4}, 2); }
TEST(Grad, RMSNorm_axis1) { CheckRMSNorm({2, 3, 4}, 1); }

// y = x / sqrt(mean(x^2) + eps) * scale over the last axis, and the statistic it keeps.
TEST(Forward, RMSNorm) {
  Net net;
  Tensor xv = Rand({3, 5}, 14, -2, 2), sv = Rand({5}, 15, 0.5, 1.5);
  auto out = net.OpN(OpKind::kRMSNorm, {net.Input("x", xv), net.Input("scale", sv)}, A({{"axis", int64_t{1}}, {"epsilon", 1e-6}}));
  ASSERT_TRUE(net.Run().ok());
  std::vector<double> want, inv;
  for (int r = 0; r < 3; ++r) {
    double ss = 0;
    for (int j = 0; j < 5; ++j) ss += double{xv.data<float>()[r * 5 + j]} * xv.data<float>()[r * 5 + j];
    inv.push_back(1 / std::sqrt(ss / 5 + 1e-6));
    for (int j = 0; j < 5; ++j) want.push_back(xv.data<float>()[r * 5 + j] * inv.back() * sv.data<float>()[j]);
  }
  EXPECT_TRUE(AllNear(net[out[0]], want, 1e-6, 1e-7));
  EXPECT_TRUE(AllNear(net[out[1]], inv, 1e-6, 0));
  EXPECT_EQ(net[out[1]].shape(), (Shape{3, 1}));
}

TEST(Grad, Reshape) { CheckUnary(OpKind::kReshape, Rand({2, 3, 4}, 22), ShapeAttr({4, 6})); }
TEST(Grad, Transpose_2d) { CheckTranspose({3, 4}, {1, 0}); }
TEST(Grad, Transpose_2d_default) { CheckTranspose({3, 4}, {}); }
TEST(Grad, Transpose_3d_201) { CheckTranspose({2, 3, 4}, {2, 0, 1}); }
TEST(Grad, Transpose_3d_120) { CheckTranspose({2, 3, 4}, {1, 2, 0}); }
TEST(Grad, Transpose_4d_3102) { CheckTranspose({2, 3, 4, 2}, {3, 1, 0, 2}); }

TEST(Grad, Gather_embedding) {  // repeated rows sum, rows never read get zero
  Net net;
  ValueId x = net.Input("table", Rand({7, 5}, 30));
  ValueId y = net.Op(OpKind::kGather, {x, net.Input("idx", Ints({2, 3}, {0, 6, 3, 3, -1, 2}))});
  CheckGrads(net, y, {x});
}

TEST(Grad, Gather_axis1) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 4, 5}, 31));
  CheckGrads(net, net.Op(OpKind::kGather, {x, net.Input("idx", Ints({2}, {3, 3}))}, A({{"axis", int64_t{1}}})), {x});
}

TEST(Grad, Concat) {
  Net net;
  ValueId a = net.Input("a", Rand({2, 3}, 32)), b = net.Input("b", Rand({2, 1}, 33));
  ValueId c = net.Input("c", Rand({2, 2}, 34));
  CheckGrads(net, net.Op(OpKind::kConcat, {a, b, c}, A({{"axis", int64_t{1}}})), {a, b, c});
}

TEST(Grad, Concat_same_input) {
  Net net;
  ValueId a = net.Input("a", Rand({2, 3}, 35));
  CheckGrads(net, net.Op(OpKind::kConcat, {a, a}, A({{"axis", int64_t{0}}})), {a});
}

TEST(Grad, Split_one_output_used) {  // the others' gradients are zeros
  Net net;
  ValueId x = net.Input("x", Rand({2, 6}, 36));
  auto parts = net.OpN(OpKind::kSplit, {x}, A({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{1, 2, 3}}}));
  ASSERT_EQ(parts.size(), 3u);
  CheckGrads(net, parts[1], {x});
}

TEST(Grad, Split_all_outputs) {
  Net net;
  ValueId x = net.Input("x", Rand({2, 6}, 37));
  auto parts = net.OpN(OpKind::kSplit, {x}, A({{"axis", int64_t{-1}}, {"split", std::vector<int64_t>{1, 2, 3}}}));
  ASSERT_EQ(parts.size(), 3u);
  CheckGrads(net, net.Op(OpKind::kConcat, {parts[2], parts[0], parts[1]}, A({{"axis", int64_t{1}}})), {x});
}

TEST(Grad, Slice_steps) { CheckUnary(OpKind::kSlice, Rand({4, 6}, 38), SliceAttrs({0, 1}, {4, 5}, {1, 2})); }
TEST(Grad, Slice_reverse) { CheckUnary(OpKind::kSlice, Rand({4, 6}, 39), SliceAttrs({3, 5}, {-1, -1}, {-1, -2})); }
TEST(Grad, Expand) { CheckUnary(OpKind::kExpand, Rand({3, 1}, 40), ShapeAttr({2, 3, 4})); }
TEST(Grad, Cast_float) {
  CheckUnary(OpKind::kCast, Rand({3, 4}, 41), A({{"dtype", static_cast<int64_t>(DType::kF32)}}));
}
TEST(Grad, Trilu_lower) { CheckUnary(OpKind::kTrilu, Rand({2, 3, 4}, 42), A({{"upper", int64_t{0}}})); }
TEST(Grad, Trilu_upper_k1) { CheckUnary(OpKind::kTrilu, Rand({3, 4}, 43), A({{"k", int64_t{1}}})); }

TEST(Grad, Where_broadcast) {
  Net net;
  ValueId c = net.Const("cond", Bools({2, 1, 3}, {1, 0, 0, 0, 1, 1}));
  ValueId x = net.Input("x", Rand({4, 1}, 44)), y = net.Input("y", Rand({3}, 45));
  CheckGrads(net, net.Op(OpKind::kWhere, {c, x, y}), {x, y});
}

// The causal masked fill before softmax: the masked scores get exactly zero gradient, and -inf in
// the forward pass puts no NaN into the backward one.
TEST(Grad, MaskedFillThenSoftmax) {
  Net net;
  std::vector<int> upper;
  for (int i = 0; i < 4; ++i)
    for (int j = 0; j < 4; ++j) upper.push_back(j > i);
  ValueId s = net.Input("scores", Rand({2, 4, 4}, 46, -2, 2));
  ValueId w = net.Op(OpKind::kWhere,
                     {net.Const("mask", Bools({4, 4}, upper)), net.Const("fill", Tensor::Full({}, -INFINITY)), s});
  ValueId p = net.Op(OpKind::kSoftmax, {w}, A({{"axis", int64_t{-1}}}));
  CheckGrads(net, p, {s});
  for (const ir::Node& node : net.graph().nodes) {  // every value of the backward pass too
    if (node.op == OpKind::kWhere && node.phase == ir::Phase::kForward) continue;  // holds -inf
    for (ValueId v : node.out)
      for (float g : net[v].span<float>()) EXPECT_TRUE(std::isfinite(g)) << node.name;
  }
}

TEST(Grad, CrossEntropy_2d) {
  Net net;
  ValueId x = net.Input("logits", Rand({4, 5}, 23, -2, 2));
  CheckGrads(net, net.Op(OpKind::kCrossEntropy, {x, net.Input("labels", Ints({4}, {0, 4, 2, 2}))}), {x});
}

TEST(Grad, CrossEntropy_3d) {
  Net net;
  ValueId x = net.Input("logits", Rand({2, 3, 4}, 24, -2, 2));
  CheckGrads(net, net.Op(OpKind::kCrossEntropy, {x, net.Input("labels", Ints({2, 3}, {3, 0, 1, 1, 2, 3}))}), {x});
}

TEST(Grad, Mse) {  // the target is data: only the prediction gets a gradient
  Net net;
  ValueId p = net.Input("pred", Rand({3, 4}, 25));
  CheckGrads(net, net.Op(OpKind::kMse, {p, net.Input("target", Rand({3, 4}, 26))}), {p});
}

// ---- The vectorisable math the kernels use (ops/cpu/vmath.h), swept against double. ----

TEST(VMath, ExpErfAndTanhAccuracy) {
  double worst_exp = 0, worst_erf = 0;
  for (double x = -87.3; x <= 88.0; x += 1.0 / 1024) {
    const auto xf = static_cast<float>(x);
    const double want = std::exp(static_cast<double>(xf));
    worst_exp = std::max(worst_exp, std::abs(cpu::Exp(xf) - want) / want);
  }
  for (double x = -6; x <= 6; x += 1.0 / 4096) {
    const auto xf = static_cast<float>(x);
    worst_erf = std::max(worst_erf, std::abs(cpu::Erf(xf) - std::erf(static_cast<double>(xf))));
  }
  double worst_tanh = 0;
  for (double x = -20; x <= 20; x += 1.0 / 8192) {
    const auto xf = static_cast<float>(x);
    const double want = std::tanh(static_cast<double>(xf));
    if (want != 0) worst_tanh = std::max(worst_tanh, std::abs(cpu::Tanh(xf) - want) / std::abs(want));
  }
  for (float xf = 1e-30f; xf < 1; xf *= 1.01f) {  // tiny arguments keep their relative accuracy
    const double want = std::tanh(static_cast<double>(xf));
    worst_tanh = std::max(worst_tanh, std::abs(cpu::Tanh(xf) - want) / want);
  }
  EXPECT_LT(worst_exp, 3e-7);  // about 2 ulp
  EXPECT_LT(worst_erf, 3e-7);
  EXPECT_LT(worst_tanh, 2e-7);
  EXPECT_EQ(cpu::Tanh(0.f), 0.f);
  EXPECT_TRUE(std::signbit(cpu::Tanh(-0.f)));
  EXPECT_EQ(cpu::Tanh(-0.3f), -cpu::Tanh(0.3f));
  EXPECT_EQ(cpu::Tanh(-2.f), -cpu::Tanh(2.f));
  EXPECT_EQ(cpu::Tanh(50.f), 1.f);
  EXPECT_EQ(cpu::Tanh(-INFINITY), -1.f);
  EXPECT_TRUE(std::isnan(cpu::Tanh(NAN)));
  EXPECT_EQ(cpu::Exp(0.f), 1.f);
  EXPECT_EQ(cpu::Exp(-INFINITY), 0.f);  // a masked score contributes exactly nothing
  EXPECT_EQ(cpu::Exp(-100.f), 0.f);
  EXPECT_EQ(cpu::Exp(INFINITY), INFINITY);
  EXPECT_EQ(cpu::Erf(0.f), 0.f);
  EXPECT_EQ(cpu::Erf(-0.7f), -cpu::Erf(0.7f));
  EXPECT_EQ(cpu::Erf(10.f), 1.f);
  std::vector<float> x(19);
  for (size_t i = 0; i < x.size(); ++i) x[i] = static_cast<float>(i % 7) - 3.f;
  EXPECT_EQ(cpu::MaxOf(x.data(), 19), 3.f);
  EXPECT_EQ(cpu::SumOf(19, [&](int64_t j) { return x[static_cast<size_t>(j)]; }), -5.f);
}

// ---- The table. ----

// Kernels spread rows and elements over the kernel threads (ops/cpu/parallel.h) only where each
// output is computed as the serial loop computes it: a forward and backward through the kernels
// that do, on tensors large enough to split, gives the same bits on 1 thread and on 4.
std::vector<std::vector<float>> ThreadedNetValues(int threads) {
  omp_set_num_threads(threads);
  const int64_t rows = 128, cols = 512;  // 64K elements: two threads' worth at least
  Net net;
  ValueId x = net.Input("x", Rand({rows, cols}, 900, -3, 3));
  ValueId b = net.Input("b", Rand({cols}, 901));
  ValueId scale = net.Input("scale", Rand({cols}, 902, 0.5, 1.5));
  ValueId shift = net.Input("shift", Rand({cols}, 903));
  std::vector<int> mask(static_cast<size_t>(cols));
  for (size_t j = 0; j < mask.size(); ++j) mask[j] = j % 3 == 0;
  ValueId biased = net.Op(OpKind::kAdd, {x, b});                               // broadcast rows
  ValueId act = net.Op(OpKind::kGelu, {biased}, GeluAttrs(1.4142135f, 1, 0.5));
  ValueId sq = net.Op(OpKind::kMul, {act, act});                               // same shapes
  ValueId ln = net.OpN(OpKind::kLayerNormalization, {sq, scale, shift}, A({{"axis", int64_t{-1}}}))[0];
  ValueId soft = net.Op(OpKind::kSoftmax, {ln}, A({{"axis", int64_t{-1}}}));
  ValueId masked = net.Op(OpKind::kMaskedSoftmax, {net.Op(OpKind::kAdd, {soft, ln}), net.Const("mask", Bools({1, cols}, mask))},
                          A({{"scale", 0.5}, {"divide", I(false)}, {"fill", -1e4}, {"fill_if", I(true)}}));
  ValueId logits = net.Op(OpKind::kAdd, {masked, ln});
  std::vector<int64_t> labels(static_cast<size_t>(rows));
  for (size_t r = 0; r < labels.size(); ++r) labels[r] = static_cast<int64_t>((r * 37) % cols);
  ValueId loss = net.Op(OpKind::kCrossEntropy, {logits, net.Input("labels", Ints({rows}, labels))});
  net.Op(OpKind::kAccumulate, {logits});
  auto grads = ir::Backward(net.builder(), loss, net.Const("seed", Tensor::Full({}, 1.f)), {x, b, scale, shift});
  EXPECT_TRUE(grads.ok()) << grads.status().message();
  EXPECT_TRUE(net.Run(0, 1).ok());
  std::vector<std::vector<float>> out;
  for (size_t v = 0; v < net.graph().values.size(); ++v) {
    const Tensor& t = net[static_cast<ValueId>(v)];
    if (t.defined() && t.dtype() == DType::kF32) out.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  }
  return out;
}
TEST(Threads, KernelsGiveTheSameBitsOnAnyNumberOfThreads) {
  const int before = omp_get_max_threads();
  const auto one = ThreadedNetValues(1), four = ThreadedNetValues(4);
  omp_set_num_threads(before);
  ASSERT_EQ(one.size(), four.size());
  ASSERT_GT(one.size(), 20u);
  for (size_t v = 0; v < one.size(); ++v) {
    ASSERT_EQ(one[v].size(), four[v].size());
    EXPECT_EQ(std::memcmp(one[v].data(), four[v].data(), one[v].size() * sizeof(float)), 0) << "value " << v;
  }
}

TEST(Registry, EveryOpIsComplete) {
  struct Row {
    OpKind kind;
    const char* name;
    bool onnx;
  };
  constexpr Row rows[] = {
#define FR_OP_ROW(name, onnx) {OpKind::k##name, #name, onnx},
      FR_OPS(FR_OP_ROW)
#undef FR_OP_ROW
  };
  static_assert(std::size(rows) == static_cast<size_t>(kNumOps));
  const std::string supported = SupportedOnnxOps();
  // Their outputs never carry a gradient: not float (Shape, the comparisons, logic, IsNaN), or
  // depending on no float input (ConstantOfShape, Range). Import folds them where it can.
  const std::set<OpKind> fold_only = {OpKind::kShape, OpKind::kEqual, OpKind::kLess, OpKind::kLessOrEqual, OpKind::kGreater,
                                      OpKind::kGreaterOrEqual, OpKind::kAnd, OpKind::kOr, OpKind::kNot, OpKind::kIsNaN,
                                      OpKind::kConstantOfShape, OpKind::kRange};
  for (const Row& r : rows) {
    SCOPED_TRACE(r.name);
    const OpDef& d = Def(r.kind);
    EXPECT_STREQ(d.name, r.name);
    EXPECT_EQ(d.onnx, r.onnx);
    EXPECT_NE(d.infer, nullptr);
    EXPECT_NE(d.cpu, nullptr);
    EXPECT_EQ(Kernel(r.kind, DeviceType::kCpu), d.cpu);
    EXPECT_NE(Kernel(r.kind, DeviceType::kCuda), nullptr);
    EXPECT_GE(d.min_in, 1);
    EXPECT_LE(d.min_in, d.max_in);
    if (r.onnx && fold_only.count(r.kind)) {
      EXPECT_EQ(d.grad, nullptr) << "a fold-only op has no gradient rule";
      EXPECT_EQ(OnnxOp(r.name), r.kind);
    } else if (r.onnx) {
      EXPECT_NE(d.grad, nullptr) << "ONNX ops must be differentiable";
      EXPECT_EQ(OnnxOp(r.name), r.kind);
      EXPECT_NE(supported.find(r.name), std::string::npos);
    } else {
      EXPECT_EQ(OnnxOp(r.name), std::nullopt);
    }
  }
  EXPECT_EQ(OnnxOp("LSTM"), std::nullopt);
  EXPECT_EQ(OnnxOp("matmul"), std::nullopt);  // ONNX op types are case-sensitive
  EXPECT_EQ(OnnxOp(""), std::nullopt);
}

// ---- Shape inference errors: a Status that names the node. ----

TEST(Infer, ErrorsNameTheNode) {
  auto f32 = [](Shape s) { return ir::TensorType{DType::kF32, std::move(s)}; };
  auto i64 = [](Shape s) { return ir::TensorType{DType::kI64, std::move(s)}; };
  auto perm = [](std::vector<int64_t> p) { return A({{"perm", std::move(p)}}); };
  struct Case {
    const char* what;
    OpKind op;
    std::vector<ir::TensorType> in;
    ir::Attrs attrs;
  };
  const Case cases[] = {
      {"MatMul inner dims", OpKind::kMatMul, {f32({3, 4}), f32({5, 6})}, {}},
      {"MatMul transB inner dims", OpKind::kMatMul, {f32({3, 4}), f32({4, 5})}, A({{"transB", int64_t{1}}})},
      {"MatMul 1-D", OpKind::kMatMul, {f32({4}), f32({4, 5})}, {}},
      {"MatMul batch dims", OpKind::kMatMul, {f32({2, 3, 4}), f32({3, 4, 5})}, {}},
      {"Gemm C", OpKind::kGemm, {f32({3, 4}), f32({4, 5}), f32({4})}, {}},
      {"Gemm 3-D", OpKind::kGemm, {f32({2, 3, 4}), f32({4, 5})}, {}},
      {"Add shapes", OpKind::kAdd, {f32({2, 3}), f32({4})}, {}},
      {"Add dtypes", OpKind::kAdd, {f32({2, 3}), i64({3})}, {}},
      {"Relu int64", OpKind::kRelu, {i64({3})}, {}},
      {"Transpose repeated perm", OpKind::kTranspose, {f32({2, 3, 4})}, perm({0, 0, 1})},
      {"Transpose short perm", OpKind::kTranspose, {f32({2, 3, 4})}, perm({1, 0})},
      {"Transpose perm out of range", OpKind::kTranspose, {f32({2, 3})}, perm({0, 2})},
      {"LayerNorm scale", OpKind::kLayerNormalization, {f32({2, 3, 4}), f32({3})}, {}},
      {"LayerNorm axis-1 scale", OpKind::kLayerNormalization, {f32({2, 3, 4}), f32({4})}, A({{"axis", int64_t{1}}})},
      {"LayerNorm bias", OpKind::kLayerNormalization, {f32({2, 3, 4}), f32({4}), f32({3})}, {}},
      {"LayerNorm axis", OpKind::kLayerNormalization, {f32({2, 3}), f32({3})}, A({{"axis", int64_t{2}}})},
      {"Softmax axis", OpKind::kSoftmax, {f32({2, 3})}, A({{"axis", int64_t{-3}}})},
      {"Reshape numel", OpKind::kReshape, {f32({2, 3})}, ShapeAttr({4, 2})},
      {"CrossEntropy label shape", OpKind::kCrossEntropy, {f32({2, 5}), i64({5})}, {}},
      {"CrossEntropy float labels", OpKind::kCrossEntropy, {f32({2, 5}), f32({2})}, {}},
      {"Mse shapes", OpKind::kMse, {f32({2, 5}), f32({5, 2})}, {}},
      {"Gather float indices", OpKind::kGather, {f32({7, 5}), f32({3})}, {}},
      {"Gather axis", OpKind::kGather, {f32({7, 5}), i64({3})}, A({{"axis", int64_t{2}}})},
      {"Concat shapes", OpKind::kConcat, {f32({2, 3}), f32({3, 3})}, A({{"axis", int64_t{1}}})},
      {"Concat no axis", OpKind::kConcat, {f32({2, 3}), f32({2, 3})}, {}},
      {"Split sizes", OpKind::kSplit, {f32({2, 6})}, A({{"axis", int64_t{1}}, {"split", std::vector<int64_t>{2, 3}}})},
      {"Slice out of range", OpKind::kSlice, {f32({4, 6})}, SliceAttrs({0, 2}, {4, 9}, {1, 1})},
      {"Slice step 0", OpKind::kSlice, {f32({4, 6})}, SliceAttrs({0, 0}, {4, 6}, {1, 0})},
      {"Slice short", OpKind::kSlice, {f32({4, 6})}, SliceAttrs({0}, {4}, {1})},
      {"Expand shapes", OpKind::kExpand, {f32({3, 2})}, ShapeAttr({3, 4})},
      {"Where float condition", OpKind::kWhere, {f32({3}), f32({3}), f32({3})}, {}},
      {"Trilu rank 1", OpKind::kTrilu, {f32({3})}, {}},
      {"Cast dtype", OpKind::kCast, {f32({3})}, A({{"dtype", int64_t{9}}})},
      {"Range vector", OpKind::kRange, {i64({2}), i64({}), i64({})}, A({{"size", int64_t{2}}})},
      {"ConstantOfShape length", OpKind::kConstantOfShape, {i64({3})}, ShapeAttr({2, 2})},
      {"Equal dtypes", OpKind::kEqual, {f32({3}), i64({3})}, {}},
      {"Gelu bias", OpKind::kGelu, {f32({2, 3}), f32({2})}, {}},
      {"MaskedSoftmax float mask", OpKind::kMaskedSoftmax, {f32({2, 3}), f32({3})}, {}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.what);
    Net net;
    std::vector<ValueId> in;
    for (const ir::TensorType& t : c.in)
      in.push_back(net.Input("x" + std::to_string(in.size()), Tensor(t.dtype, t.shape)));
    auto r = net.TryOp(c.op, in, c.attrs, "bad_node");
    ASSERT_FALSE(r.ok());
    EXPECT_EQ(r.status().code(), Code::kInvalidInput);
    EXPECT_NE(r.status().message().find("bad_node"), std::string::npos) << r.status().message();
    EXPECT_TRUE(net.graph().nodes.empty());  // a failed Add appends nothing
  }
}


// ---- Math ops and reductions (ops/math.cpp). ----

TEST(Forward, Math) {
  struct Case {
    OpKind op;
    double (*f)(double);
    double lo, hi;
  };
  const Case cases[] = {
      {OpKind::kSqrt, [](double x) { return std::sqrt(x); }, 0.01, 4},
      {OpKind::kReciprocal, [](double x) { return 1 / x; }, 0.5, 3},
      {OpKind::kNeg, [](double x) { return -x; }, -3, 3},
      {OpKind::kExp, [](double x) { return std::exp(x); }, -5, 5},
      {OpKind::kLog, [](double x) { return std::log(x); }, 0.01, 9},
      {OpKind::kAbs, [](double x) { return std::abs(x); }, -3, 3},
      {OpKind::kSign, [](double x) { return x > 0 ? 1.0 : x < 0 ? -1.0 : 0.0; }, -3, 3},
      {OpKind::kSin, [](double x) { return std::sin(x); }, -7, 7},
      {OpKind::kCos, [](double x) { return std::cos(x); }, -7, 7},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(Def(c.op).name);
    Net net;
    ValueId x = net.Input("x", Rand({4, 5}, 41, c.lo, c.hi));
    ValueId y = net.Op(c.op, {x});
    ASSERT_TRUE(net.Run().ok());
    std::vector<double> want;
    for (double v : ToDouble(net[x])) want.push_back(c.f(v));
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
  }
}

TEST(Forward, MathEdgeValues) {
  const float inf = std::numeric_limits<float>::infinity(), nan = std::numeric_limits<float>::quiet_NaN();
  Tensor x(DType::kF32, {5});
  float* p = x.data<float>();
  p[0] = 0.f, p[1] = -0.f, p[2] = nan, p[3] = inf, p[4] = -2.f;
  Net net;
  ValueId in = net.Input("x", x);
  ValueId sign = net.Op(OpKind::kSign, {in}), isnan = net.Op(OpKind::kIsNaN, {in});
  ValueId clip = net.Op(OpKind::kClip, {in}, A({{"min", -1.0}, {"max", 1.0}}));
  ASSERT_TRUE(net.Run().ok());
  const float* s = net[sign].data<float>();
  EXPECT_EQ(s[0], 0.f);
  EXPECT_TRUE(std::signbit(s[1]));  // -0 keeps its sign
  EXPECT_TRUE(std::isnan(s[2]));
  EXPECT_EQ(s[3], 1.f);
  EXPECT_EQ(s[4], -1.f);
  const bool* b = net[isnan].data<bool>();
  EXPECT_EQ(std::vector<bool>(b, b + 5), (std::vector<bool>{false, false, true, false, false}));
  const float* c = net[clip].data<float>();
  EXPECT_TRUE(std::isnan(c[2]));  // NaN passes through, as PyTorch's clamp
  EXPECT_EQ(c[3], 1.f);
  EXPECT_EQ(c[4], -1.f);
}

TEST(Forward, CompareAndLogic) {
  Net net;
  ValueId a = net.Input("a", Ints({2, 3}, {1, 5, 3, 7, 2, 9})), b = net.Input("b", Ints({3}, {2, 5, 1}));
  struct Case {
    OpKind op;
    std::vector<bool> want;
  };
  const Case cases[] = {
      {OpKind::kEqual, {false, true, false, false, false, false}},
      {OpKind::kLess, {true, false, false, false, true, false}},
      {OpKind::kLessOrEqual, {true, true, false, false, true, false}},
      {OpKind::kGreater, {false, false, true, true, false, true}},
      {OpKind::kGreaterOrEqual, {false, true, true, true, false, true}},
  };
  std::vector<ValueId> outs;
  for (const Case& c : cases) outs.push_back(net.Op(c.op, {a, b}));
  ValueId lt = outs[1], gt = outs[3];
  ValueId both = net.Op(OpKind::kAnd, {lt, gt}), either = net.Op(OpKind::kOr, {lt, gt}), none = net.Op(OpKind::kNot, {either});
  ASSERT_TRUE(net.Run().ok());
  auto bools = [&](ValueId v) { return std::vector<bool>(net[v].data<bool>(), net[v].data<bool>() + 6); };
  for (size_t i = 0; i < std::size(cases); ++i) EXPECT_EQ(bools(outs[i]), cases[i].want) << Def(cases[i].op).name;
  EXPECT_EQ(bools(both), std::vector<bool>(6, false));
  EXPECT_EQ(bools(either), (std::vector<bool>{true, false, true, true, true, true}));
  EXPECT_EQ(bools(none), (std::vector<bool>{false, true, false, false, false, false}));
  EXPECT_FALSE(net.TryOp(OpKind::kAnd, {a, b}, {}, "and_ints").ok());  // logic takes bool
}

TEST(Forward, NegInt64Wraps) {
  Net net;
  ValueId y = net.Op(OpKind::kNeg, {net.Input("a", Ints({3}, {5, -7, std::numeric_limits<int64_t>::min()}))});
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(std::vector<int64_t>(net[y].span<int64_t>().begin(), net[y].span<int64_t>().end()),
            (std::vector<int64_t>{-5, 7, std::numeric_limits<int64_t>::min()}));
}

TEST(Forward, Pow) {
  for (double e : {2.0, 3.0, 0.5, -1.0, -0.5, -2.0, 1.0, 1.7}) {
    SCOPED_TRACE("exponent " + std::to_string(e));
    Net net;
    ValueId a = net.Input("a", Rand({3, 4}, 42, 0.2, 3));
    ValueId y = net.Op(OpKind::kPow, {a, net.Const("e", Tensor::Full({}, static_cast<float>(e)))});
    ASSERT_TRUE(net.Run().ok());
    std::vector<double> want;
    for (double v : ToDouble(net[a])) want.push_back(std::pow(v, e));
    EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
    if (e == 2.0) {  // exactly x * x, as PyTorch computes it
      for (int64_t i = 0; i < 12; ++i) {
        const float v = net[a].data<float>()[i];
        EXPECT_EQ(net[y].data<float>()[i], v * v);
      }
    }
  }
  Net net;  // a broadcast exponent
  ValueId a = net.Input("a", Rand({2, 3}, 43, 0.2, 3)), b = net.Input("b", Rand({3}, 44, -2, 2));
  ValueId y = net.Op(OpKind::kPow, {a, b});
  ASSERT_TRUE(net.Run().ok());
  std::vector<double> want;
  for (int i = 0; i < 6; ++i) want.push_back(std::pow(ToDouble(net[a])[static_cast<size_t>(i)], ToDouble(net[b])[static_cast<size_t>(i % 3)]));
  EXPECT_TRUE(AllNear(net[y], want, kRtol, kAtol));
}

// Reference reductions in double over a [2, 3, 4] input.
std::vector<double> RefReduce(OpKind op, const std::vector<double>& x, const std::vector<int64_t>& axes) {
  const int64_t d[3] = {2, 3, 4};
  int64_t kd[3] = {2, 3, 4};
  for (int64_t a : axes) kd[a] = 1;
  std::vector<double> out(static_cast<size_t>(kd[0] * kd[1] * kd[2]), op == OpKind::kReduceMax ? -1e300 : 0.0);
  std::vector<double> count(out.size(), 0.0);
  for (int64_t i = 0; i < d[0]; ++i)
    for (int64_t j = 0; j < d[1]; ++j)
      for (int64_t k = 0; k < d[2]; ++k) {
        const int64_t o[3] = {kd[0] == 1 ? 0 : i, kd[1] == 1 ? 0 : j, kd[2] == 1 ? 0 : k};
        const auto at = static_cast<size_t>((o[0] * kd[1] + o[1]) * kd[2] + o[2]);
        const double v = x[static_cast<size_t>((i * 3 + j) * 4 + k)];
        out[at] = op == OpKind::kReduceMax ? std::max(out[at], v) : out[at] + v;
        count[at] += 1;
      }
  if (op == OpKind::kReduceMean)
    for (size_t i = 0; i < out.size(); ++i) out[i] /= count[i];
  return out;
}

TEST(Forward, Reduce) {
  const std::vector<std::vector<int64_t>> axes_cases = {{0}, {1}, {2}, {0, 2}, {1, 2}, {0, 1, 2}, {}};
  for (OpKind op : {OpKind::kReduceSum, OpKind::kReduceMean, OpKind::kReduceMax})
    for (const auto& axes : axes_cases)
      for (int64_t keep : {0, 1}) {
        SCOPED_TRACE(std::string(Def(op).name) + " axes " + Shape(axes).ToString() + " keepdims " + std::to_string(keep));
        Net net;
        ValueId x = net.Input("x", Rand({2, 3, 4}, 45, -3, 3));
        ValueId y = net.Op(op, {x}, A({{"axes", axes}, {"keepdims", keep}}));
        ASSERT_TRUE(net.Run().ok());
        std::vector<int64_t> want_shape;
        for (int i = 0; i < 3; ++i) {
          const bool reduced = std::find(axes.begin(), axes.end(), i) != axes.end();
          if (!reduced) want_shape.push_back(std::vector<int64_t>{2, 3, 4}[static_cast<size_t>(i)]);
          else if (keep) want_shape.push_back(1);
        }
        EXPECT_EQ(net[y].shape(), Shape(want_shape));
        EXPECT_TRUE(AllNear(net[y], RefReduce(op, ToDouble(net[x]), axes), kRtol, kAtol));
      }
}

TEST(Forward, ReduceInt64) {
  Net net;
  ValueId x = net.Input("x", Ints({2, 3}, {1, -2, 3, 40, 5, -600}));
  ValueId sum = net.Op(OpKind::kReduceSum, {x}, A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}}));
  ValueId max = net.Op(OpKind::kReduceMax, {x}, A({{"axes", std::vector<int64_t>{0}}, {"keepdims", int64_t{0}}}));
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(std::vector<int64_t>(net[sum].span<int64_t>().begin(), net[sum].span<int64_t>().end()), (std::vector<int64_t>{2, -555}));
  EXPECT_EQ(std::vector<int64_t>(net[max].span<int64_t>().begin(), net[max].span<int64_t>().end()), (std::vector<int64_t>{40, 5, 3}));
}

TEST(Forward, ReduceMaxGradSharesTies) {  // as PyTorch's amax: ties share the gradient evenly
  Net net;
  Tensor xv(DType::kF32, {2, 3});
  const float xs[] = {1, 5, 5, 2, 7, 3};
  std::copy(xs, xs + 6, xv.data<float>());
  ValueId x = net.Input("x", xv);
  const ir::Attrs at = A({{"axes", std::vector<int64_t>{1}}, {"keepdims", int64_t{0}}});
  ValueId y = net.Op(OpKind::kReduceMax, {x}, at);
  ValueId dy = net.Input("dy", Tensor::Full({2}, 6.f));
  ValueId dx = net.Op(OpKind::kReduceMaxGrad, {dy, x, y}, at);
  ASSERT_TRUE(net.Run().ok());
  EXPECT_TRUE(AllNear(net[dx], {0, 3, 3, 0, 6, 0}, 0, 0));
}

TEST(Grad, Sqrt) { CheckUnary(OpKind::kSqrt, Rand({3, 4}, 501, 0.5, 3)); }
TEST(Grad, Reciprocal) { CheckUnary(OpKind::kReciprocal, RandAwayFromZero({3, 4}, 502, 0.5, 2)); }
TEST(Grad, Neg) { CheckUnary(OpKind::kNeg, Rand({3, 4}, 503)); }
TEST(Grad, Dropout) { CheckUnary(OpKind::kDropout, Rand({3, 4}, 512), A({{"ratio", 0.4}, {"key", int64_t{3}}})); }

// Dropout drops about `ratio` of the elements, scales the rest by 1 / (1 - ratio), draws the same
// mask for the same (key, step, micro-batch) and another for any other.
TEST(Forward, DropoutDropsTheRatioAndIsSeeded) {
  const int64_t n = 200000;
  auto run = [&](int64_t key, int64_t step, int64_t micro, double ratio) {
    Net net;
    ValueId x = net.Input("x", Tensor::Full({n / 100, 100}, 2.f));
    ValueId y = net.Op(OpKind::kDropout, {x}, A({{"ratio", ratio}, {"key", key}}));
    EXPECT_TRUE(net.Run(step, micro).ok());
    return net[y].Clone();
  };
  const Tensor a = run(1, 0, 0, 0.25);
  int64_t dropped = 0;
  for (float v : a.span<float>()) {
    if (v == 0.f) ++dropped;
    else EXPECT_FLOAT_EQ(v, 2.f / 0.75f);
  }
  EXPECT_NEAR(static_cast<double>(dropped) / n, 0.25, 0.005);
  EXPECT_TRUE(AllNear(run(1, 0, 0, 0.25), ToDouble(a), 0, 0)) << "the same draw twice differs";
  for (const Tensor& other : {run(2, 0, 0, 0.25), run(1, 1, 0, 0.25), run(1, 0, 1, 0.25)}) {
    int64_t same = 0;
    for (int64_t i = 0; i < n; ++i) same += (other.data<float>()[i] == 0.f) == (a.data<float>()[i] == 0.f);
    EXPECT_LT(same, n * 0.7) << "another key, step or micro-batch drew the same mask";
  }
  const Tensor none = run(1, 0, 0, 0.0);
  for (float v : none.span<float>()) ASSERT_EQ(v, 2.f);
}

// A piece of the logical tensor (PhysicalDropout's start and logical) draws the logical mask's part.
TEST(Forward, DropoutPieceDrawsItsPartOfTheLogicalMask) {
  Net whole;
  Tensor xv = Rand({6, 10}, 513, 1, 2);
  ValueId x = whole.Input("x", xv);
  const ir::Attrs at = A({{"ratio", 0.5}, {"key", int64_t{9}}});
  ValueId y = whole.Op(OpKind::kDropout, {x}, at);
  ASSERT_TRUE(whole.Run(3, 1).ok());
  Net part;
  Tensor pv(DType::kF32, {3, 4});  // rows 2-4, columns 5-8
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) pv.data<float>()[r * 4 + c] = xv.data<float>()[(r + 2) * 10 + c + 5];
  ir::Attrs pat = at;
  pat.Set("start", std::vector<int64_t>{2, 5});
  pat.Set("logical", std::vector<int64_t>{6, 10});
  ValueId py = part.Op(OpKind::kDropout, {part.Input("x", pv)}, pat);
  ASSERT_TRUE(part.Run(3, 1).ok());
  for (int r = 0; r < 3; ++r)
    for (int c = 0; c < 4; ++c) EXPECT_EQ(part[py].data<float>()[r * 4 + c], whole[y].data<float>()[(r + 2) * 10 + c + 5]);
}
TEST(Grad, Exp) { CheckUnary(OpKind::kExp, Rand({3, 4}, 504, -2, 2)); }
TEST(Grad, Log) { CheckUnary(OpKind::kLog, Rand({3, 4}, 505, 0.5, 3)); }
TEST(Grad, Abs) { CheckUnary(OpKind::kAbs, RandAwayFromZero({3, 4}, 506, 0.1, 2)); }
TEST(Grad, Sin) { CheckUnary(OpKind::kSin, Rand({3, 4}, 507, -3, 3)); }
TEST(Grad, Cos) { CheckUnary(OpKind::kCos, Rand({3, 4}, 508, -3, 3)); }
TEST(Grad, Clip) {  // inputs away from the bounds, where the gradient jumps
  Tensor x = RandAwayFromZero({3, 4}, 509, 0.1, 2);
  CheckUnary(OpKind::kClip, x, A({{"min", -1.0}, {"max", 1.0}}));
}
TEST(Grad, Pow_scalar) {
  Net net;
  ValueId a = net.Input("a", Rand({3, 4}, 510, 0.5, 2)), b = net.Input("b", Tensor::Full({}, 2.5f));
  CheckGrads(net, net.Op(OpKind::kPow, {a, b}), {a, b});
}
TEST(Grad, Pow_square_at_zero) {  // dA = 2 A, finite at A = 0 (no division by A)
  Net net;
  Tensor av = Rand({2, 3}, 511);
  av.data<float>()[0] = 0.f;
  ValueId a = net.Input("a", av);
  CheckGrads(net, net.Op(OpKind::kPow, {a, net.Const("two", Tensor::Full({}, 2.f))}), {a});
}
TEST(Grad, Pow_bcast) {
  Net net;
  ValueId a = net.Input("a", Rand({2, 3}, 512, 0.5, 2)), b = net.Input("b", Rand({3}, 513, -1, 2));
  CheckGrads(net, net.Op(OpKind::kPow, {a, b}), {a, b});
}
void CheckReduce(OpKind op, std::vector<int64_t> axes, int64_t keep) {
  CheckUnary(op, Rand({2, 3, 4}, 514, -2, 2), A({{"axes", std::move(axes)}, {"keepdims", keep}}));
}
TEST(Grad, ReduceSum_mid) { CheckReduce(OpKind::kReduceSum, {1}, 0); }
TEST(Grad, ReduceSum_all_keep) { CheckReduce(OpKind::kReduceSum, {0, 1, 2}, 1); }
TEST(Grad, ReduceMean_last_keep) { CheckReduce(OpKind::kReduceMean, {2}, 1); }
TEST(Grad, ReduceMean_outer) { CheckReduce(OpKind::kReduceMean, {0, 2}, 0); }
TEST(Grad, ReduceMax_last) { CheckReduce(OpKind::kReduceMax, {2}, 0); }  // random data: no ties
TEST(Grad, ReduceMax_lead_keep) { CheckReduce(OpKind::kReduceMax, {0}, 1); }


// ---- Convolutional ops (ops/conv.cpp). ----

ir::Attrs ConvAttrs(std::vector<int64_t> kernel, std::vector<int64_t> strides, std::vector<int64_t> pads,
                    std::vector<int64_t> dilations, int64_t group) {
  return A({{"kernel", std::move(kernel)}, {"strides", std::move(strides)}, {"pads", std::move(pads)},
            {"dilations", std::move(dilations)}, {"group", group}});
}

// Direct convolution in double: y[n][m][oy][ox] = b[m] + sum over the window and the group's channels.
std::vector<double> RefConv(const Tensor& x, const Tensor& w, const Tensor* b, const Shape& ys, const ir::Attrs& a) {
  const Shape &xs = x.shape(), &ws = w.shape();
  const auto s = a.Ints("strides"), p = a.Ints("pads"), d = a.Ints("dilations");
  const int64_t g = a.Int("group"), cg = xs[1] / g, mg = ys[1] / g;
  std::vector<double> y;
  for (int64_t n = 0; n < ys[0]; ++n)
    for (int64_t m = 0; m < ys[1]; ++m)
      for (int64_t oy = 0; oy < ys[2]; ++oy)
        for (int64_t ox = 0; ox < ys[3]; ++ox) {
          double acc = b ? b->data<float>()[m] : 0.0;
          for (int64_t ci = 0; ci < cg; ++ci)
            for (int64_t i = 0; i < ws[2]; ++i)
              for (int64_t j = 0; j < ws[3]; ++j) {
                const int64_t iy = oy * s[0] - p[0] + i * d[0], ix = ox * s[1] - p[1] + j * d[1];
                if (iy < 0 || iy >= xs[2] || ix < 0 || ix >= xs[3]) continue;
                const int64_t c = (m / mg) * cg + ci;
                acc += static_cast<double>(x.data<float>()[((n * xs[1] + c) * xs[2] + iy) * xs[3] + ix]) *
                       w.data<float>()[((m * ws[1] + ci) * ws[2] + i) * ws[3] + j];
              }
          y.push_back(acc);
        }
  return y;
}

TEST(Forward, Conv) {
  struct Case {
    Shape x, w;
    ir::Attrs a;
    bool bias;
    Shape want;
  };
  const Case cases[] = {
      {{2, 3, 7, 6}, {4, 3, 3, 3}, ConvAttrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1), true, {2, 4, 7, 6}},
      {{2, 3, 7, 6}, {4, 3, 3, 2}, ConvAttrs({3, 2}, {2, 1}, {0, 1, 2, 0}, {1, 2}, 1), false, {2, 4, 4, 5}},
      {{1, 4, 5, 5}, {6, 2, 3, 3}, ConvAttrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 2), true, {1, 6, 3, 3}},
      {{2, 4, 6, 6}, {4, 1, 3, 3}, ConvAttrs({3, 3}, {1, 1}, {2, 2, 2, 2}, {2, 2}, 4), false, {2, 4, 6, 6}},  // depthwise
      // Unit strides with the output as wide as the input take ops/cpu/conv.cpp's shifted-plane
      // path: uneven pads (SAME_UPPER), a left pad only, and window rows wholly in the padding.
      {{1, 2, 5, 4}, {3, 2, 2, 2}, ConvAttrs({2, 2}, {1, 1}, {0, 0, 1, 1}, {1, 1}, 1), true, {1, 3, 5, 4}},
      {{2, 1, 4, 6}, {2, 1, 1, 3}, ConvAttrs({1, 3}, {1, 1}, {0, 2, 0, 0}, {1, 1}, 1), false, {2, 2, 4, 6}},
      {{1, 2, 3, 3}, {2, 2, 3, 3}, ConvAttrs({3, 3}, {1, 1}, {4, 2, 0, 2}, {2, 2}, 1), false, {1, 2, 3, 3}},
      // The others take the general path, each window column's inside output columns found once:
      // a valid convolution (output narrower than the input), ResNet's strided 1x1 downsample, and
      // window columns 0-3 wholly in the left padding.
      {{1, 2, 5, 6}, {2, 2, 3, 3}, ConvAttrs({3, 3}, {1, 1}, {0, 0, 0, 0}, {1, 1}, 1), true, {1, 2, 3, 4}},
      {{2, 3, 6, 6}, {4, 3, 1, 1}, ConvAttrs({1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1), false, {2, 4, 3, 3}},
      {{1, 1, 2, 2}, {1, 1, 1, 5}, ConvAttrs({1, 5}, {1, 2}, {0, 4, 0, 0}, {1, 1}, 1), false, {1, 1, 2, 1}},
  };
  uint32_t seed = 600;
  for (const Case& c : cases) {
    SCOPED_TRACE(c.x.ToString() + " * " + c.w.ToString());
    Net net;
    ValueId x = net.Input("x", Rand(c.x, seed++)), w = net.Input("w", Rand(c.w, seed++));
    std::vector<ValueId> in = {x, w};
    if (c.bias) in.push_back(net.Input("b", Rand({c.w[0]}, seed++)));
    ValueId y = net.Op(OpKind::kConv, in, c.a);
    ASSERT_TRUE(net.Run().ok());
    ASSERT_EQ(net[y].shape(), c.want);
    const Tensor* b = c.bias ? &net[in[2]] : nullptr;
    EXPECT_TRUE(AllNear(net[y], RefConv(net[x], net[w], b, c.want, c.a), kRtol, kAtol));
  }
}

TEST(Forward, Pools) {
  Tensor xv(DType::kF32, {1, 1, 3, 4});
  const float xs[] = {1, 5, 2, 0, 4, 3, 8, 7, -1, 6, 6, 2};
  std::copy(xs, xs + 12, xv.data<float>());
  ir::Attrs a = A({{"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{1, 2}},
                   {"pads", std::vector<int64_t>{0, 0, 1, 0}}, {"dilations", std::vector<int64_t>{1, 1}},
                   {"ceil_mode", int64_t{0}}, {"count_include_pad", int64_t{0}}});
  Net net;
  ValueId x = net.Input("x", xv);
  ValueId mx = net.Op(OpKind::kMaxPool, {x}, a), av = net.Op(OpKind::kAveragePool, {x}, a);
  a.Set("count_include_pad", int64_t{1});
  ValueId avp = net.Op(OpKind::kAveragePool, {x}, a);
  ASSERT_TRUE(net.Run().ok());
  ASSERT_EQ(net[mx].shape(), (Shape{1, 1, 3, 2}));
  EXPECT_TRUE(AllNear(net[mx], {5, 8, 6, 8, 6, 6}, 0, 0));
  EXPECT_TRUE(AllNear(net[av], {13 / 4.0, 17 / 4.0, 12 / 4.0, 23 / 4.0, 5 / 2.0, 8 / 2.0}, kRtol, kAtol));
  EXPECT_TRUE(AllNear(net[avp], {13 / 4.0, 17 / 4.0, 12 / 4.0, 23 / 4.0, 5 / 4.0, 8 / 4.0}, kRtol, kAtol));
}

TEST(Forward, MaxPoolCeilModeAndTies) {
  Net net;  // ceil_mode adds a last, partial window; a tie goes to the first maximum
  ValueId x = net.Input("x", Tensor::Full({1, 1, 3, 3}, 2.f));
  ir::Attrs a = A({{"kernel", std::vector<int64_t>{2, 2}}, {"strides", std::vector<int64_t>{2, 2}}, {"ceil_mode", int64_t{1}}});
  ValueId y = net.Op(OpKind::kMaxPool, {x}, a);
  ValueId dx = net.Op(OpKind::kMaxPoolGrad, {net.Input("dy", Tensor::Full({1, 1, 2, 2}, 1.f)), x}, a);
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(net[y].shape(), (Shape{1, 1, 2, 2}));
  EXPECT_TRUE(AllNear(net[dx], {1, 0, 1, 0, 0, 0, 1, 0, 1}, 0, 0));
}

TEST(Grad, Conv_bias_pad) {
  Net net;
  ValueId x = net.Input("x", Rand({2, 3, 5, 4}, 610)), w = net.Input("w", Rand({4, 3, 3, 3}, 611)), b = net.Input("b", Rand({4}, 612));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w, b}, ConvAttrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1)), {x, w, b});
}
TEST(Grad, Conv_strided_dilated) {
  Net net;
  ValueId x = net.Input("x", Rand({1, 2, 7, 6}, 613)), w = net.Input("w", Rand({3, 2, 2, 3}, 614));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({2, 3}, {2, 1}, {0, 1, 1, 0}, {2, 1}, 1)), {x, w});
}
TEST(Grad, Conv_groups) {
  Net net;
  ValueId x = net.Input("x", Rand({2, 4, 5, 5}, 615)), w = net.Input("w", Rand({6, 2, 3, 3}, 616));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({3, 3}, {2, 2}, {1, 1, 1, 1}, {1, 1}, 2)), {x, w});
}
TEST(Grad, Conv_same_uneven_pads) {  // the shifted-plane path (ops/cpu/conv.cpp)
  Net net;
  ValueId x = net.Input("x", Rand({2, 2, 5, 4}, 630)), w = net.Input("w", Rand({3, 2, 2, 2}, 631));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({2, 2}, {1, 1}, {0, 0, 1, 1}, {1, 1}, 1)), {x, w});
}
TEST(Grad, Conv_window_rows_in_padding) {  // window row 0 reads only padding; row 1 one output row
  Net net;
  ValueId x = net.Input("x", Rand({1, 2, 3, 3}, 632)), w = net.Input("w", Rand({2, 2, 3, 3}, 633));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({3, 3}, {1, 1}, {4, 2, 0, 2}, {2, 2}, 1)), {x, w});
}
TEST(Grad, Conv_strided_1x1) {  // ResNet's downsample: the general path's strided columns
  Net net;
  ValueId x = net.Input("x", Rand({2, 3, 6, 5}, 634)), w = net.Input("w", Rand({4, 3, 1, 1}, 635));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({1, 1}, {2, 2}, {0, 0, 0, 0}, {1, 1}, 1)), {x, w});
}
TEST(Grad, Conv_window_columns_in_padding) {  // window columns 0-3 read only padding
  Net net;
  ValueId x = net.Input("x", Rand({1, 2, 3, 2}, 636)), w = net.Input("w", Rand({2, 2, 2, 5}, 637));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({2, 5}, {1, 2}, {1, 4, 0, 1}, {1, 1}, 1)), {x, w});
}
TEST(Grad, Conv_many_samples) {  // the weight gradient over partial sums of 4 samples (ops/cpu/conv.cpp)
  Net net;
  ValueId x = net.Input("x", Rand({9, 2, 5, 5}, 617)), w = net.Input("w", Rand({3, 2, 3, 3}, 618));
  CheckGrads(net, net.Op(OpKind::kConv, {x, w}, ConvAttrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1)), {x, w});
}
// A convolution and its data gradient spread whole samples over the threads; its weight gradient
// sums fixed groups of samples, the threads taking whole groups (ops/cpu/conv.cpp): the same bits
// on 1 thread and on 4. The loss sum(conv(x, w) * p) makes the output's gradient p exactly, so
// the gradients are the kernels' alone.
std::vector<std::vector<float>> ConvAndGradients(int threads) {
  omp_set_num_threads(threads);
  Net net;
  ValueId x = net.Input("x", Rand({18, 8, 16, 16}, 904)), w = net.Input("w", Rand({16, 8, 3, 3}, 905));
  ValueId y = net.Op(OpKind::kConv, {x, w}, ConvAttrs({3, 3}, {1, 1}, {1, 1, 1, 1}, {1, 1}, 1));
  ValueId weighted = net.Op(OpKind::kMul, {y, net.Input("p", Rand({18, 16, 16, 16}, 906))});
  ValueId loss = net.Op(OpKind::kReduceSum, {weighted}, A({{"axes", std::vector<int64_t>{0, 1, 2, 3}}, {"keepdims", I(false)}}));
  auto grads = ir::Backward(net.builder(), loss, net.Const("seed", Tensor::Full({}, 1.f)), {x, w});
  EXPECT_TRUE(grads.ok()) << grads.status().message();
  if (!grads.ok()) return {};
  EXPECT_TRUE(net.Run().ok());
  std::vector<std::vector<float>> out;
  for (ValueId v : {y, (*grads)[0], (*grads)[1]}) {
    const Tensor& t = net[v];
    out.emplace_back(t.data<float>(), t.data<float>() + t.numel());
  }
  return out;
}
TEST(Threads, ConvAndItsGradientsGiveTheSameBitsOnAnyNumberOfThreads) {
  const int before = omp_get_max_threads();
  const auto one = ConvAndGradients(1), four = ConvAndGradients(4);
  omp_set_num_threads(before);
  ASSERT_EQ(one.size(), size_t{3});
  ASSERT_EQ(four.size(), size_t{3});
  const size_t sizes[] = {18 * 16 * 16 * 16, 18 * 8 * 16 * 16, 16 * 8 * 3 * 3};
  const char* names[] = {"y", "dx", "dw"};
  for (int i = 0; i < 3; ++i) {
    ASSERT_EQ(one[i].size(), sizes[i]) << names[i];
    ASSERT_EQ(four[i].size(), sizes[i]) << names[i];
    EXPECT_EQ(std::memcmp(one[i].data(), four[i].data(), sizes[i] * sizeof(float)), 0) << names[i];
  }
}

TEST(Grad, MaxPool) {  // distinct values, so that no window's maximum moves within eps
  Tensor x(DType::kF32, {1, 2, 4, 5});
  for (int64_t i = 0; i < x.numel(); ++i) x.data<float>()[i] = static_cast<float>((i * 7) % 40) * 0.1f - 2.f;
  CheckUnary(OpKind::kMaxPool, x, A({{"kernel", std::vector<int64_t>{3, 2}}, {"strides", std::vector<int64_t>{1, 2}},
                                     {"pads", std::vector<int64_t>{1, 0, 1, 1}}}));
}
TEST(Grad, AveragePool) {
  CheckUnary(OpKind::kAveragePool, Rand({2, 2, 5, 4}, 617),
             A({{"kernel", std::vector<int64_t>{2, 3}}, {"strides", std::vector<int64_t>{2, 1}},
                {"pads", std::vector<int64_t>{1, 1, 0, 1}}, {"count_include_pad", int64_t{0}}}));
}


TEST(Forward, GatherND) {
  Net net;  // data [2, 3, 2]; tuples of 2 pick rows [d2]; a negative entry counts from the end
  Tensor x(DType::kF32, {2, 3, 2});
  for (int64_t i = 0; i < 12; ++i) x.data<float>()[i] = static_cast<float>(i);
  ValueId data = net.Input("x", x);
  ValueId idx = net.Input("i", Ints({3, 2}, {1, 2, 0, -3, 1, 0}));
  ValueId y = net.Op(OpKind::kGatherND, {data, idx});
  ValueId whole = net.Op(OpKind::kGatherND, {data, net.Input("j", Ints({1, 3}, {1, 1, 1}))});
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(net[y].shape(), (Shape{3, 2}));
  EXPECT_TRUE(AllNear(net[y], {10, 11, 0, 1, 6, 7}, 0, 0));
  EXPECT_TRUE(AllNear(net[whole], {9}, 0, 0));
  Net bad;
  ValueId out = bad.Op(OpKind::kGatherND, {bad.Input("x", x), bad.Input("i", Ints({1, 2}, {2, 0}))});
  EXPECT_NE(out, ir::kNoValue);
  EXPECT_FALSE(bad.Run().ok());  // 2 is out of range for dim 2
}
TEST(Grad, GatherND_repeated) {  // a slice picked twice gets both gradients
  Net net;
  ValueId x = net.Input("x", Rand({3, 4}, 620));
  CheckGrads(net, net.Op(OpKind::kGatherND, {x, net.Input("i", Ints({3, 1}, {2, 0, 2}))}), {x});
}


// ScatterND replaces (or, with add, increases) the slices its index tuples name.
TEST(Forward, ScatterND) {
  Tensor xv(DType::kF32, {3, 2});
  for (int64_t i = 0; i < 6; ++i) xv.data<float>()[i] = static_cast<float>(i + 1);
  for (int64_t add : {0, 1}) {
    Net net;
    ValueId y = net.Op(OpKind::kScatterND, {net.Input("x", xv), net.Input("i", Ints({2, 1}, {2, -3})), net.Input("u", Tensor::Full({2, 2}, 10.f))},
                       A({{"add", add}}));
    ASSERT_TRUE(net.Run().ok());
    EXPECT_TRUE(AllNear(net[y], add ? std::vector<double>{11, 12, 3, 4, 15, 16} : std::vector<double>{10, 10, 3, 4, 10, 10}, 0, 0));
  }
  Net twice;
  twice.Op(OpKind::kScatterND, {twice.Input("x", xv), twice.Input("i", Ints({2, 1}, {1, 1})), twice.Input("u", Tensor::Full({2, 2}, 1.f))},
           A({{"add", int64_t{0}}}));
  Status s = twice.Run();
  ASSERT_FALSE(s.ok());
  EXPECT_NE(s.message().find("repeats"), std::string::npos) << s.message();
}
TEST(Grad, ScatterND) {
  for (int64_t add : {0, 1}) {
    Net net;
    ValueId x = net.Input("x", Rand({4, 3}, 640)), u = net.Input("u", Rand({2, 3}, 641));
    CheckGrads(net, net.Op(OpKind::kScatterND, {x, net.Input("i", Ints({2, 1}, {3, 1})), u}, A({{"add", add}})), {x, u});
  }
}

TEST(Forward, TilePadGatherElements) {
  Net net;
  Tensor xv(DType::kF32, {2, 3});
  for (int64_t i = 0; i < 6; ++i) xv.data<float>()[i] = static_cast<float>(i + 1);
  ValueId x = net.Input("x", xv);
  ValueId tile = net.Op(OpKind::kTile, {x}, A({{"repeats", std::vector<int64_t>{2, 1}}}));
  ValueId pad = net.Op(OpKind::kPad, {x}, A({{"pads", std::vector<int64_t>{1, 0, 0, 2}}, {"value", -1.0}}));
  ValueId ge = net.Op(OpKind::kGatherElements, {x, net.Input("i", Ints({2, 2}, {2, 0, -1, 1}))}, A({{"axis", int64_t{1}}}));
  ASSERT_TRUE(net.Run().ok());
  EXPECT_EQ(net[tile].shape(), (Shape{4, 3}));
  EXPECT_TRUE(AllNear(net[tile], {1, 2, 3, 4, 5, 6, 1, 2, 3, 4, 5, 6}, 0, 0));
  EXPECT_EQ(net[pad].shape(), (Shape{3, 5}));
  EXPECT_TRUE(AllNear(net[pad], {-1, -1, -1, -1, -1, 1, 2, 3, -1, -1, 4, 5, 6, -1, -1}, 0, 0));
  EXPECT_TRUE(AllNear(net[ge], {3, 1, 6, 5}, 0, 0));
}
TEST(Grad, Tile) { CheckUnary(OpKind::kTile, Rand({2, 3}, 630), A({{"repeats", std::vector<int64_t>{3, 2}}})); }
TEST(Grad, Pad) { CheckUnary(OpKind::kPad, Rand({2, 3}, 631), A({{"pads", std::vector<int64_t>{1, 0, 2, 1}}, {"value", 0.5}})); }

// Pad's other modes on [1, 2, 3, 4] padded by 3 before and 2 after (reflect: by 2 and 3, below the
// length, as PyTorch requires), as numpy.pad's reflect, edge and wrap give them.
TEST(Forward, PadModes) {
  struct Mode {
    int64_t mode;
    std::vector<int64_t> pads;
    std::vector<double> want;
  };
  for (const Mode& m : {Mode{1, {2, 3}, {3, 2, 1, 2, 3, 4, 3, 2, 1}}, Mode{2, {3, 2}, {1, 1, 1, 1, 2, 3, 4, 4, 4}},
                        Mode{3, {3, 2}, {2, 3, 4, 1, 2, 3, 4, 1, 2}}}) {
    SCOPED_TRACE("mode " + std::to_string(m.mode));
    Net net;
    Tensor xv(DType::kF32, {4});
    for (int64_t i = 0; i < 4; ++i) xv.data<float>()[i] = static_cast<float>(i + 1);
    ValueId y = net.Op(OpKind::kPad, {net.Input("x", xv)}, A({{"pads", m.pads}, {"mode", m.mode}}));
    ASSERT_TRUE(net.Run().ok());
    EXPECT_TRUE(AllNear(net[y], m.want, 0, 0));
  }
  Net net;
  auto too_far = net.TryOp(OpKind::kPad, {net.Input("x", Rand({2, 3}, 632))}, A({{"pads", std::vector<int64_t>{0, 3, 0, 0}}, {"mode", int64_t{1}}}));
  ASSERT_FALSE(too_far.ok());
  EXPECT_NE(too_far.status().message().find("reflect pads must be smaller"), std::string::npos) << too_far.status().message();
}
TEST(Grad, Pad_reflect) { CheckUnary(OpKind::kPad, Rand({3, 4}, 633), A({{"pads", std::vector<int64_t>{2, 1, 1, 3}}, {"mode", int64_t{1}}})); }
TEST(Grad, Pad_edge) { CheckUnary(OpKind::kPad, Rand({3, 4}, 634), A({{"pads", std::vector<int64_t>{2, 0, 1, 5}}, {"mode", int64_t{2}}})); }
TEST(Grad, Pad_wrap) { CheckUnary(OpKind::kPad, Rand({3, 4}, 635), A({{"pads", std::vector<int64_t>{4, 1, 0, 6}}, {"mode", int64_t{3}}})); }
TEST(Grad, GatherElements_repeated) {
  Net net;
  ValueId x = net.Input("x", Rand({3, 4}, 632));
  CheckGrads(net, net.Op(OpKind::kGatherElements, {x, net.Input("i", Ints({2, 4}, {2, 0, 2, 1, 0, 0, 1, 2})), }, A({{"axis", int64_t{0}}})), {x});
}

}  // namespace
}  // namespace fr::test
