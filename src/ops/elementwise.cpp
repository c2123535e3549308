// Elementwise ops: binary arithmetic with numpy broadcasting, activations, and the helpers their
// gradients need (SumTo undoes broadcasting, Scale multiplies by a constant `alpha`).
//
// SBP: all inputs share one split; Add/Sub are linear in both inputs, so P + P -> P; Mul/Div are
// linear in one input when the other is B, so P * B -> P. Activations are nonlinear and never take
// P; their gradients are linear in dY. The rules and their worked examples sit above each rule.
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

// ---- SBP rules ----

// Add, Sub, Mul, Div. For each output axis i, every input splits on its aligned axis, or stays B
// where it is broadcast along i (dim 1 or missing). Worked example, Add(X [4, 5, 7], bias [7]):
//   (S(0), B)    -> S(0)    each device adds the bias to its rows
//   (S(2), S(0)) -> S(2)    columns 0..3 of X meet elements 0..3 of the bias
//   (P, P)       -> P       sum_k (X_k + b_k) = X + b
// Mul(X, Y) is linear in each input when the other is whole: (P, B) -> P and (B, P) -> P. Div is
// linear only in the numerator, and only for floats: integer division truncates, so
// 7 / 2 != 3 / 2 + 4 / 2.
Sigs SbpBinary(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  const Shape& y = out[0].shape;
  for (int i = 0; i < y.rank(); ++i) {
    if (!Splits(y[i], parts)) continue;
    AddSig(s, {{AlignedSplit(in[0].shape, y.rank(), i), AlignedSplit(in[1].shape, y.rank(), i)}, {Sbp::S(i)}});
  }
  switch (n.op) {
    case OpKind::kAdd:
    case OpKind::kSub: AddSig(s, {{Sbp::P(), Sbp::P()}, {Sbp::P()}}); break;
    case OpKind::kMul:
      AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
      AddSig(s, {{Sbp::B(), Sbp::P()}, {Sbp::P()}});
      break;
    case OpKind::kDiv:
      if (out[0].dtype == DType::kF32) AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
      break;
    default: break;
  }
  return s;
}

// Relu, Tanh, Sigmoid, Erf: any split passes through; no P (relu(a) + relu(b) != relu(a + b)).
//   Relu(X [5, 7]): (S(0)) -> S(0), (S(1)) -> S(1), (B) -> B
Sigs SbpActivation(const ir::Node& n, Types in, Types, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i < in[0].shape.rank(); ++i)
    if (Splits(in[0].shape[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  return s;
}

// Scale(X) = alpha * X is linear: as an activation, plus (P) -> P. Not P(max)/P(min): a negative
// alpha turns a max into a min.
Sigs SbpScale(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpActivation(n, in, out, parts);
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// ReluGrad(dY, Y), TanhGrad(dY, Y), SigmoidGrad(dY, Y), ErfGrad(dY, X): elementwise, same shapes,
// and linear in dY. ReluGrad(dY [5, 7], Y [5, 7]):
//   (S(0), S(0)) -> S(0), (S(1), S(1)) -> S(1), (P, B) -> P: (y > 0 ? dy_1 : 0) + (y > 0 ? dy_2 : 0)
Sigs SbpActivationGrad(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpActivation(n, in, out, parts);
  AddSig(s, {{Sbp::P(), Sbp::B()}, {Sbp::P()}});
  return s;
}

// SumTo(X) to attr shape T, aligned from the right. A split axis of X that T keeps stays split; one
// that T sums away leaves each device a partial sum. SumTo(X [4, 5, 7]) to T [5, 1]:
//   (S(0)) -> P       axis 0 is summed away
//   (S(1)) -> S(0)    axis 1 of X is axis 0 of T, kept
//   (S(2)) -> P       axis 2 of X is summed to 1
//   (P)    -> P       summing is linear
Sigs SbpSumTo(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  const Shape &x = in[0].shape, &t = out[0].shape;
  for (int i = 0; i < x.rank(); ++i) {
    if (!Splits(x[i], parts)) continue;
    int j = i - (x.rank() - t.rank());
    AddSig(s, {{Sbp::S(i)}, {j >= 0 && t[j] == x[i] ? Sbp::S(j) : Sbp::P()}});
  }
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

// A piece sums to its own piece of the target.
void PhysicalSumTo(ir::Node& n, Types, Types physical_out) { n.attrs.Set("shape", physical_out[0].shape.dims()); }

}  // namespace fr::defs
