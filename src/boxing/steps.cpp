#include "boxing/steps.h"

namespace fr::boxing {

using sbp::Reduce;
using sbp::Sbp;

std::string_view Name(Step s) {
  switch (s) {
    case Step::kKeep: return "keep";
    case Step::kCopy: return "copy";
    case Step::kSlice: return "slice";
    case Step::kZeroFill: return "zero-fill";
    case Step::kAssemble: return "assemble";
    case Step::kAllReduce: return "all-reduce";
    case Step::kReduceScatter: return "reduce-scatter";
    case Step::kAllGather: return "all-gather";
    case Step::kAllToAll: return "all-to-all";
  }
  return "?";
}

std::optional<Step> Classify(Sbp from, Sbp to) {
  if (from == to) return Step::kKeep;
  if (from.is_partial()) {
    if (to.is_broadcast()) return Step::kAllReduce;
    if (to.is_split()) return Step::kReduceScatter;
    return std::nullopt;  // another reduce kind: the fallback
  }
  if (from.is_split()) {
    if (to.is_broadcast()) return Step::kAllGather;
    if (to.is_split()) return Step::kAllToAll;
    if (to.reduce() == Reduce::kSum) return Step::kAssemble;
    return std::nullopt;  // S→P(max): the other devices would need a -inf fill; the fallback does it
  }
  if (to.is_split()) return Step::kSlice;
  return to.reduce() == Reduce::kSum ? Step::kZeroFill : Step::kCopy;
}

std::optional<Op> CollectiveOf(Step s) {
  switch (s) {
    case Step::kAllReduce: return Op::kAllReduce;
    case Step::kReduceScatter: return Op::kReduceScatter;
    case Step::kAllGather: return Op::kAllGather;
    case Step::kAllToAll: return Op::kAllToAll;
    default: return std::nullopt;
  }
}

std::vector<int> Apply(Builder& b, Step step, const Group& g, Sbp from, Sbp to) {
  const int p = static_cast<int>(g.ranks.size());
  const Shape whole = ShapeOf(g.region);
  auto part_shapes = [&](int axis) {
    std::vector<Shape> s;
    for (int k = 0; k < p; ++k) s.push_back(ShapeOf(PartOf(whole, axis, p, k)));
    return s;
  };
  std::vector<int> out;
  switch (step) {
    case Step::kKeep:
    case Step::kCopy: return g.in;
    case Step::kSlice:
      for (int k = 0; k < p; ++k) out.push_back(b.Slice(g.in[static_cast<size_t>(k)], PartOf(whole, to.axis(), p, k)));
      return out;
    case Step::kZeroFill:
      out.push_back(g.in[0]);
      for (int k = 1; k < p; ++k) out.push_back(b.Zero(g.ranks[static_cast<size_t>(k)], whole));
      return out;
    case Step::kAssemble:
      for (int k = 0; k < p; ++k) {
        out.push_back(b.Assemble(g.ranks[static_cast<size_t>(k)], whole, {g.in[static_cast<size_t>(k)]},
                                 {PartOf(whole, from.axis(), p, k)}));
      }
      return out;
    case Step::kAllReduce:
      return b.Collective({.op = Op::kAllReduce, .reduce = from.reduce()}, g.ranks, g.in,
                          std::vector<Shape>(static_cast<size_t>(p), whole));
    case Step::kReduceScatter:
      return b.Collective({.op = Op::kReduceScatter, .reduce = from.reduce(), .split_axis = to.axis()}, g.ranks, g.in,
                          part_shapes(to.axis()));
    case Step::kAllGather:
      return b.Collective({.op = Op::kAllGather, .concat_axis = from.axis()}, g.ranks, g.in,
                          std::vector<Shape>(static_cast<size_t>(p), whole));
    case Step::kAllToAll:
      return b.Collective({.op = Op::kAllToAll, .concat_axis = from.axis(), .split_axis = to.axis()}, g.ranks, g.in,
                          part_shapes(to.axis()));
  }
  return out;
}

}  // namespace fr::boxing
