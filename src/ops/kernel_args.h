// What every device's kernels (ops/cpu/, ops/cuda/) read from a node the same way: the meaning of
// the attributes lowering and the rewrites set, and views of shapes. One place, so that a CPU
// kernel and its CUDA twin cannot read an attribute differently.
#pragma once

#include <cmath>
#include <cstdint>

#include "base/schedule.h"
#include "ops/op.h"

namespace fr {

// MatMul, SumTo and GatherGrad run as a gradient's accumulator where the lowering folds one into
// its Accumulate (plan/lower.cpp): the node carries "accumulate" = 1 and its output is the
// step's sum, which from the second micro-batch on the kernel adds into instead of overwriting.
inline bool AddsInto(const KernelCtx& c) { return c.micro > 0 && c.node.attrs.Int("accumulate") != 0; }

// A loss's mean divides by attr "count" when the node has it (a piece of a split loss divides by
// the logical count, ops/loss.cpp), else by the local count.
inline int64_t CountOf(const KernelCtx& c, int64_t local) { return c.node.attrs.Int("count", local); }

// An optimizer node's learning-rate schedule (base/schedule.h).
inline Schedule ScheduleOf(const ir::Attrs& a) {
  return Schedule{a.Float("lr"), a.Float("min_lr"), static_cast<int>(a.Int("schedule")), a.Int("warmup"), a.Int("steps", 1)};
}

// The fused GELU's constants: the chain's divisor, the one added to erf and the half (ops/fused.cpp).
struct GeluConsts {
  float div, one, half;
};
inline GeluConsts GeluOf(const ir::Node& n) {
  return {static_cast<float>(n.attrs.Float("div")), static_cast<float>(n.attrs.Float("one")),
          static_cast<float>(n.attrs.Float("half"))};
}
// Its tanh form (attr "tanh" = 1): 0.5 h (1 + tanh(kGeluTanhBeta (h + kGeluTanhKappa h^3))). The
// rewrite fuses an exported chain only with exactly these (ir/rewrite.cpp).
inline constexpr float kGeluTanhBeta = 0.7978845608028654f, kGeluTanhKappa = 0.044715f;
// The attributes of ONNX's Gelu as flowrun's fused op: the erf form's constants, and tanh = 1 for
// the tanh form (set by the importer and by the rewrite of the exported tanh chain).
inline ir::Attrs GeluAttrs(bool tanh) {
  ir::Attrs a;
  a.Set("div", static_cast<double>(static_cast<float>(M_SQRT2)));
  a.Set("one", 1.0);
  a.Set("half", 0.5);
  if (tanh) a.Set("tanh", int64_t{1});
  return a;
}

// The fused masked softmax's: x scaled (or divided) by `scale`, then set to `fill` where the mask
// equals `fill_if`.
struct SoftmaxConsts {
  float scale, fill;
  bool divide, fill_if;
};
inline SoftmaxConsts SoftmaxOf(const ir::Node& n) {
  return {static_cast<float>(n.attrs.Float("scale", 1.0)), static_cast<float>(n.attrs.Float("fill", 0.0)),
          n.attrs.Int("divide", 0) != 0, n.attrs.Int("fill_if", 1) != 0};
}

// A shape seen around one axis: outer x dim x inner elements.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
};
inline AxisView ViewAround(const Shape& s, int axis) {
  AxisView v;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < axis) v.outer *= s[i];
    else if (i == axis) v.dim = s[i];
    else v.inner *= s[i];
  }
  return v;
}
// The node's "axis" (default -1, the last) in s.
inline int AxisOf(const KernelCtx& c, const Shape& s) { return *s.Axis(c.node.attrs.Int("axis", -1)); }

// Calls f(T{}) with T the unsigned integer type of the element size (1, 4 or 8 bytes): moves are
// type-blind.
template <typename F>
void BySize(DType t, F f) {
  switch (SizeOf(t)) {
    case 1: f(uint8_t{}); break;
    case 4: f(uint32_t{}); break;
    default: f(uint64_t{}); break;
  }
}

}  // namespace fr
