// Elementwise ops: binary arithmetic with numpy broadcasting, activations, the helpers their
// gradients need (SumTo undoes broadcasting, Scale multiplies by a constant `alpha`), and the ops of
// masks: Where (select, with broadcasting), Equal, Cast, Trilu.
//
// SBP: all inputs share one split; Add/Sub are linear in both inputs, so P + P -> P; Mul/Div are
// linear in one input when the other is B, so P * B -> P. Activations are nonlinear and never take
// P; their gradients are linear in dY. Where is linear in its two branches together. The rules and
// their worked examples sit above each rule.
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

// Where(cond, X, Y) -> cond ? X : Y, the three broadcast together; cond is bool.
Out InferWhere(const ir::Node& n, Types in) {
  if (in[0].dtype != DType::kBool) {
    return Status::Invalid(n.name + ": Where's condition must be bool, got " + std::string(Name(in[0].dtype)));
  }
  if (in[1].dtype != in[2].dtype) {
    return Status::Invalid(n.name + ": Where's branches differ in dtype (" + std::string(Name(in[1].dtype)) + " vs " +
                           std::string(Name(in[2].dtype)) + ")");
  }
  auto s = Broadcast(in[0].shape, in[1].shape);
  if (s.ok()) s = Broadcast(*s, in[2].shape);
  if (!s.ok()) return s.status().With(n.name + ": ");
  return std::vector<ir::TensorType>{{in[1].dtype, *s}};
}

// dX = dY where cond, dY' = dY where not cond, each summed over the dims its branch was broadcast
// along. A masked fill Where(mask, -inf, S) gives S's gradient zeros at the masked places: no NaN.
void GradWhere(GradCtx& c) {
  const ir::ValueId zero = c.Zeros(Shape{});
  if (c.need(1)) {
    c.set_din(1, c.SumTo(c.Op(OpKind::kWhere, {c.in(0), c.dout(0), zero}, {}, "dX"), c.type(c.in(1)).shape));
  }
  if (c.need(2)) {
    c.set_din(2, c.SumTo(c.Op(OpKind::kWhere, {c.in(0), zero, c.dout(0)}, {}, "dY"), c.type(c.in(2)).shape));
  }
}

// Equal(A, B) -> bool, broadcast. Its output is never differentiated: no gradient rule.
Out InferEqual(const ir::Node& n, Types in) {
  auto y = InferBinary(n, in);
  if (!y.ok()) return y;
  (*y)[0].dtype = DType::kBool;
  return y;
}

// And(A, B), Or(A, B) -> bool, broadcast; Not(A) -> bool. Inputs are bool.
Out InferLogical(const ir::Node& n, Types in) {
  for (size_t i = 0; i < in.size(); ++i) {
    if (in[i].dtype != DType::kBool) {
      return Status::Invalid(n.name + ": input " + std::to_string(i) + " must be bool, got " + std::string(Name(in[i].dtype)));
    }
  }
  if (in.size() == 1) return std::vector<ir::TensorType>{in[0]};
  return InferBinary(n, in);
}

// Cast(X) to attribute `dtype` (a flowrun DType; import translates ONNX's `to`). Float to int
// truncates toward zero; to bool is x != 0.
Out InferCast(const ir::Node& n, Types in) {
  const int64_t t = n.attrs.Int("dtype", -1);
  if (t < 0 || t >= kNumDTypes) return Status::Invalid(n.name + ": Cast to an unknown dtype " + std::to_string(t));
  return std::vector<ir::TensorType>{{static_cast<DType>(t), in[0].shape}};
}

// Autodiff follows float values only, so a gradient reaches Cast only from float to float, where
// it is the identity.
void GradCast(GradCtx& c) {
  FR_CHECK(c.type(c.in(0)).dtype == DType::kF32 && c.type(c.out(0)).dtype == DType::kF32,
           c.node().name + ": gradient through a Cast between types");
  c.set_din(0, c.dout(0));
}

// Trilu(X [..., N, M]) keeps each matrix's upper (attribute `upper`, default 1) or lower triangle
// from diagonal `k` (import resolves ONNX's k input into the attribute) and zeroes the rest:
// upper keeps j - i >= k, lower keeps j - i <= k.
Out InferTrilu(const ir::Node& n, Types in) {
  if (in[0].shape.rank() < 2) return Status::Invalid(n.name + ": Trilu needs rank >= 2, got " + in[0].shape.ToString());
  return std::vector<ir::TensorType>{in[0]};
}

void GradTrilu(GradCtx& c) { c.set_din(0, c.Op(OpKind::kTrilu, {c.dout(0)}, c.node().attrs)); }

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
void PhysicalSumTo(ir::Node& n, Types, Types physical_out, Starts) { n.attrs.Set("shape", physical_out[0].shape.dims()); }

Sigs BroadcastSplits(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s{Uniform(n, 1, Sbp::B())};
  const Shape& y = out[0].shape;
  for (int i = 0; i < y.rank(); ++i) {
    if (!Splits(y[i], parts)) continue;
    sbp::Signature g{{}, {Sbp::S(i)}};
    for (size_t k = 0; k < in.size(); ++k)
      g.in.push_back(Present(n, k) ? AlignedSplit(in[k].shape, y.rank(), i) : Sbp::B());
    AddSig(s, g);
  }
  return s;
}

// Where(cond [1, 1, 5, 5], X [], Y [2, 3, 5, 5]) -> [2, 3, 5, 5], the causal masked fill:
//   (B, B, S(0))       -> S(0)      the mask and the fill value are whole on every device
//   (S(2), B, S(2))    -> S(2)      rows of the mask meet rows of Y
//   (B, P, P)          -> P         where(c, x1, y1) + where(c, x2, y2) = where(c, x1 + x2, y1 + y2);
//                                   any reduction: a select moves elements
// The condition never takes P (it is bool), nor one branch alone.
Sigs SbpWhere(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = BroadcastSplits(n, in, out, parts);
  for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin})
    AddSig(s, {{Sbp::B(), Sbp::P(r), Sbp::P(r)}, {Sbp::P(r)}});
  return s;
}

// Equal(A [5, 7], B [7]) -> bool [5, 7]: (S(0), B) -> S(0), (S(1), S(0)) -> S(1); no P (nonlinear).
// The same for Less, LessOrEqual, Greater, GreaterOrEqual, And and Or.
Sigs SbpEqual(const ir::Node& n, Types in, Types out, int64_t parts) { return BroadcastSplits(n, in, out, parts); }

// Cast(X [5, 7]): (S(0)) -> S(0), (S(1)) -> S(1); P only when the type stays (the identity):
// float to int truncates each summand.
Sigs SbpCast(const ir::Node& n, Types in, Types out, int64_t parts) {
  Sigs s = SbpActivation(n, in, out, parts);
  if (in[0].dtype == out[0].dtype)
    for (sbp::Reduce r : {sbp::Reduce::kSum, sbp::Reduce::kMax, sbp::Reduce::kMin}) AddSig(s, Uniform(n, 1, Sbp::P(r)));
  return s;
}

// Trilu(X [3, 5, 7]): the batch axes split; the matrix axes do not (a piece's row and column
// numbers would shift). Linear: zeroing commutes with sums.
//   (S(0)) -> S(0), (P) -> P, (B) -> B
Sigs SbpTrilu(const ir::Node& n, Types in, Types, int64_t parts) {
  const Shape& x = in[0].shape;
  Sigs s{Uniform(n, 1, Sbp::B())};
  for (int i = 0; i + 2 < x.rank(); ++i)
    if (Splits(x[i], parts)) AddSig(s, Uniform(n, 1, Sbp::S(i)));
  AddSig(s, Uniform(n, 1, Sbp::P()));
  return s;
}

}  // namespace fr::defs
