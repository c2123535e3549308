#include "ops/op.h"

#include "base/process.h"

namespace fr {

Builder::Builder(ir::Graph& g) : g_(g) {
  for (const ir::Node& n : g.nodes) names_.insert(n.name);
}

std::string Builder::UniqueName(const std::string& base) {
  std::string name = base;
  // Starts where the last search for this base ended: 10k nodes of one name cost linear time.
  for (int& i = next_suffix_[base]; names_.count(name);) name = base + "_" + std::to_string(++i);
  return name;
}

Result<std::vector<ir::ValueId>> Builder::Add(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs,
                                              std::string name, ir::Phase phase) {
  names_.insert(name);
  ir::Node n{std::move(name), op, std::move(in), {}, std::move(attrs), phase, -1, {}, {}};
  std::vector<ir::TensorType> types;
  for (ir::ValueId v : n.in) types.push_back(v == ir::kNoValue ? ir::TensorType{} : g_.type(v));
  const OpDef& d = Def(op);
  auto outs = d.infer(n, types);
  if (!outs.ok()) return outs.status();
  for (const ir::TensorType& t : *outs) {
    // Shapes are logical (a sharded tensor may exceed one machine), but they must stay countable:
    // what is materialised is budgeted where it is (folding, Zeros, the plan's memory check).
    RETURN_IF_ERROR(CheckDims(t.shape.dims()).With(n.name + ": output "));
  }
  std::vector<ir::ValueId> ids;
  for (size_t i = 0; i < outs->size(); ++i) {
    ids.push_back(g_.AddValue(n.name + ":" + std::to_string(i), (*outs)[i], ir::ValueKind::kActivation));
  }
  n.out = ids;
  g_.AddNode(std::move(n));
  return ids;
}

ir::ValueId Builder::Op(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs, std::string name,
                        ir::Phase phase) {
  auto r = Add(op, std::move(in), std::move(attrs), name, phase);
  FR_CHECK(r.ok(), name + ": " + r.status().message());
  return r->at(0);
}

ir::ValueId Builder::Const(std::string name, Tensor t) {
  ir::TensorType type{t.dtype(), t.shape()};
  return g_.AddValue(std::move(name), std::move(type), ir::ValueKind::kConst, std::move(t));
}

ir::ValueId GradCtx::Op(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs, const std::string& tag) {
  return OpN(op, std::move(in), std::move(attrs), tag).at(0);
}

std::vector<ir::ValueId> GradCtx::OpN(OpKind op, std::vector<ir::ValueId> in, ir::Attrs attrs,
                                      const std::string& tag) {
  std::string name = b_.UniqueName(node_.name + "/" + tag);
  auto r = b_.Add(op, std::move(in), std::move(attrs), name, ir::Phase::kBackward);
  if (!r.ok()) throw GradFailure{r.status()};
  return *r;
}

ir::ValueId GradCtx::SumTo(ir::ValueId g, Shape target) {
  if (type(g).shape == target) return g;
  ir::Attrs a;
  a.Set("shape", target.dims());
  return Op(OpKind::kSumTo, {g}, std::move(a), "sum_to");
}

ir::ValueId GradCtx::Zeros(const Shape& s) {
  const double bytes = 4.0 * static_cast<double>(s.numel());
  if (bytes > MemoryBudgetBytes()) {
    throw GradFailure{Status::Invalid("a gradient of zeros " + s.ToString() + " would take " +
                                      std::to_string(static_cast<int64_t>(bytes / (1 << 20))) + " MiB, more than this machine has")};
  }
  return b_.Const(b_.UniqueName(node_.name + "/zeros"), Tensor(DType::kF32, s));
}

ir::ValueId GradCtx::Scalar(float v) { return b_.Const(b_.UniqueName(node_.name + "/scalar"), Tensor::Full(Shape{}, v)); }

Result<std::vector<ir::TensorType>> SameAsInput0(const ir::Node&, std::span<const ir::TensorType> in) {
  return std::vector<ir::TensorType>{in[0]};
}

Status ExpectFloat(const ir::Node& n, std::span<const ir::TensorType> in, int i) {
  if (in[static_cast<size_t>(i)].dtype != DType::kF32) {
    return Status::Invalid("input " + std::to_string(i) + " of " + n.name + " must be float32, got " +
                           std::string(Name(in[static_cast<size_t>(i)].dtype)));
  }
  return Status::Ok();
}

}  // namespace fr
