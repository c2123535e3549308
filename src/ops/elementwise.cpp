// Elementwise ops: binary arithmetic with numpy broadcasting, activations, and the helpers their
// gradients need (SumTo undoes broadcasting, Scale multiplies by a constant `alpha`).
//
// SBP (for the SBP issue): all inputs share one split; Add/Sub are linear in both inputs, so
// P + P -> P; Mul/Div are linear in one input when the other is B, so P * B -> P. Activations are
// nonlinear and never take P.
#include "ops/defs.h"

namespace fr::defs {

Out InferBinary(const ir::Node& n, Types in) {
  if (in[0].dtype != in[1].dtype) {
    return Status::Invalid(n.name + ": input dtypes differ (" + std::string(Name(in[0].dtype)) + " vs " +
                           std::string(Name(in[1].dtype)) + ")");
  }
  auto s = Broadcast(in[0].shape, in[1].shape);
  if (!s.ok()) return s.status().With(n.name + ": ");
  return std::vector<ir::TensorType>{{in[0].dtype, *s}};
}

Out InferFloatUnary(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  return std::vector<ir::TensorType>{in[0]};
}

Out InferFloatBinarySameShape(const ir::Node& n, Types in) {
  RETURN_IF_ERROR(ExpectFloat(n, in, 0));
  RETURN_IF_ERROR(ExpectFloat(n, in, 1));
  FR_CHECK(in[0].shape == in[1].shape, n.name + ": gradient operand shapes differ");
  return std::vector<ir::TensorType>{in[0]};
}

Out InferSumTo(const ir::Node& n, Types in) {
  Shape target(n.attrs.Ints("shape"));
  auto b = Broadcast(target, in[0].shape);
  FR_CHECK(b.ok() && *b == in[0].shape, n.name + ": cannot sum " + in[0].shape.ToString() + " to " + target.ToString());
  return std::vector<ir::TensorType>{{in[0].dtype, target}};
}

void GradAdd(GradCtx& c) {
  for (int i = 0; i < 2; ++i)
    if (c.need(i)) c.set_din(i, c.SumTo(c.dout(0), c.type(c.in(i)).shape));
}

static ir::ValueId Negate(GradCtx& c, ir::ValueId v) {
  ir::Attrs neg;
  neg.Set("alpha", -1.0);
  return c.Op(OpKind::kScale, {v}, neg, "neg");
}

void GradSub(GradCtx& c) {
  if (c.need(0)) c.set_din(0, c.SumTo(c.dout(0), c.type(c.in(0)).shape));
  if (c.need(1)) c.set_din(1, Negate(c, c.SumTo(c.dout(0), c.type(c.in(1)).shape)));
}

void GradMul(GradCtx& c) {
  for (int i = 0; i < 2; ++i) {
    if (!c.need(i)) continue;
    ir::ValueId prod = c.Op(OpKind::kMul, {c.dout(0), c.in(1 - i)}, {}, "mul");
    c.set_din(i, c.SumTo(prod, c.type(c.in(i)).shape));
  }
}

void GradDiv(GradCtx& c) {
  // y = a / b: da = dy / b; db = -dy * y / b.
  if (c.need(0)) {
    c.set_din(0, c.SumTo(c.Op(OpKind::kDiv, {c.dout(0), c.in(1)}, {}, "div"), c.type(c.in(0)).shape));
  }
  if (c.need(1)) {
    ir::ValueId y_over_b = c.Op(OpKind::kDiv, {c.out(0), c.in(1)}, {}, "y_over_b");
    ir::ValueId prod = c.Op(OpKind::kMul, {c.dout(0), y_over_b}, {}, "mul");
    c.set_din(1, Negate(c, c.SumTo(prod, c.type(c.in(1)).shape)));
  }
}

void GradRelu(GradCtx& c) { c.set_din(0, c.Op(OpKind::kReluGrad, {c.dout(0), c.out(0)})); }
void GradTanh(GradCtx& c) { c.set_din(0, c.Op(OpKind::kTanhGrad, {c.dout(0), c.out(0)})); }
void GradSigmoid(GradCtx& c) { c.set_din(0, c.Op(OpKind::kSigmoidGrad, {c.dout(0), c.out(0)})); }
void GradErf(GradCtx& c) { c.set_din(0, c.Op(OpKind::kErfGrad, {c.dout(0), c.in(0)})); }
void GradScale(GradCtx& c) { c.set_din(0, c.Op(OpKind::kScale, {c.dout(0)}, c.node().attrs)); }

}  // namespace fr::defs
