// A small evaluator for op tests. Net builds an ir::Graph through fr::Builder, so every node goes
// through its op's shape inference, and Run() executes the nodes in order with their CPU kernels.
//
// Each value gets one Tensor on the first Run and keeps it: inputs and constants share storage with
// their `data` (so changing an input's data between Runs is seen, and optimizer kernels' in-place
// updates are visible there), outputs are zero-filled once and then reused, so optimizer state and
// Accumulate's running sum persist from one Run (step, micro-batch) to the next.
#pragma once

#include <gtest/gtest.h>

#include <cmath>
#include <cstdint>
#include <random>
#include <sstream>
#include <string>
#include <vector>

#include "graph/graph.h"
#include "ops/op.h"

namespace fr::test {

class Net {
 public:
  Net() : b_(g_) {}
  Net(const Net&) = delete;
  Net& operator=(const Net&) = delete;

  ir::Graph& graph() { return g_; }
  Builder& builder() { return b_; }

  ir::ValueId Input(const std::string& name, Tensor t) {
    ir::TensorType type{t.dtype(), t.shape()};
    return g_.AddValue(name, std::move(type), ir::ValueKind::kInput, std::move(t));
  }
  ir::ValueId Const(const std::string& name, Tensor t) { return b_.Const(name, std::move(t)); }

  // Adds a forward node named `name` (or after its op); returns the inference result.
  Result<std::vector<ir::ValueId>> TryOp(OpKind op, std::vector<ir::ValueId> in, ir::Attrs a = {},
                                         std::string name = "") {
    if (name.empty()) name = b_.UniqueName(Def(op).name);
    return b_.Add(op, std::move(in), std::move(a), std::move(name), ir::Phase::kForward);
  }
  // The same, for nodes that must build; returns all outputs.
  std::vector<ir::ValueId> OpN(OpKind op, std::vector<ir::ValueId> in, ir::Attrs a = {}) {
    auto r = TryOp(op, std::move(in), std::move(a));
    EXPECT_TRUE(r.ok()) << r.status().message();
    return r.ok() ? *r : std::vector<ir::ValueId>{};
  }
  ir::ValueId Op(OpKind op, std::vector<ir::ValueId> in, ir::Attrs a = {}) {
    auto outs = OpN(op, std::move(in), std::move(a));
    return outs.empty() ? ir::kNoValue : outs[0];
  }

  // Runs nodes [0, limit) with the CPU kernels.
  Status Run(int64_t step = 0, int64_t micro = 0, size_t limit = SIZE_MAX) {
    env_.resize(g_.values.size());
    for (size_t i = 0; i < env_.size(); ++i) {
      if (env_[i].defined()) continue;
      const ir::Value& v = g_.values[i];
      env_[i] = v.data.defined() ? v.data : Tensor(v.type.dtype, v.type.shape);
    }
    for (size_t n = 0; n < g_.nodes.size() && n < limit; ++n) {
      const ir::Node& node = g_.nodes[n];
      std::vector<Tensor> in, out;
      for (ir::ValueId v : node.in) in.push_back(v == ir::kNoValue ? Tensor{} : env_[static_cast<size_t>(v)]);
      for (ir::ValueId v : node.out) out.push_back(env_[static_cast<size_t>(v)]);
      KernelCtx ctx{node, in, out, step, micro, 1};
      Status s = Kernel(node.op, DeviceType::kCpu)(ctx);
      if (!s.ok()) return s;
    }
    return Status::Ok();
  }

  // The tensor of a value after Run; the data of an input or constant before it.
  const Tensor& operator[](ir::ValueId v) const {
    size_t i = static_cast<size_t>(v);
    return i < env_.size() && env_[i].defined() ? env_[i] : g_.values[i].data;
  }

 private:
  ir::Graph g_;
  Builder b_;
  std::vector<Tensor> env_;  // by ValueId
};

// Uniform floats in [lo, hi), reproducible from `seed`.
inline Tensor Rand(Shape s, uint32_t seed, double lo = -1.0, double hi = 1.0) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  Tensor t(DType::kF32, std::move(s));
  for (float& x : t.span<float>()) x = static_cast<float>(u(gen));
  return t;
}

// Uniform magnitudes in [lo, hi) with random signs: keeps values away from 0 (divisors, ReLU kinks).
inline Tensor RandAwayFromZero(Shape s, uint32_t seed, double lo, double hi) {
  std::mt19937 gen(seed);
  std::uniform_real_distribution<double> u(lo, hi);
  std::bernoulli_distribution neg(0.5);
  Tensor t(DType::kF32, std::move(s));
  for (float& x : t.span<float>()) x = static_cast<float>(neg(gen) ? -u(gen) : u(gen));
  return t;
}

inline Tensor Ints(Shape s, const std::vector<int64_t>& v) {
  Tensor t(DType::kI64, std::move(s));
  EXPECT_EQ(static_cast<size_t>(t.numel()), v.size());
  for (size_t i = 0; i < v.size() && i < static_cast<size_t>(t.numel()); ++i) t.data<int64_t>()[i] = v[i];
  return t;
}

inline std::vector<double> ToDouble(const Tensor& t) {
  std::vector<double> d;
  for (float x : t.span<float>()) d.push_back(x);
  return d;
}

// Elementwise |got - want| <= atol + rtol * |want|; names the first few elements that differ.
inline ::testing::AssertionResult AllNear(const Tensor& got, const std::vector<double>& want, double rtol,
                                          double atol) {
  if (static_cast<size_t>(got.numel()) != want.size()) {
    return ::testing::AssertionFailure() << "got " << got.numel() << " elements, want " << want.size();
  }
  int bad = 0;
  std::ostringstream msg;
  msg.precision(9);
  for (size_t i = 0; i < want.size(); ++i) {
    double g = got.data<float>()[i];
    if (std::abs(g - want[i]) <= atol + rtol * std::abs(want[i])) continue;
    if (++bad <= 5) msg << "\n  [" << i << "] got " << g << ", want " << want[i];
  }
  if (bad == 0) return ::testing::AssertionSuccess();
  return ::testing::AssertionFailure() << bad << " of " << want.size() << " elements differ:" << msg.str();
}

}  // namespace fr::test
