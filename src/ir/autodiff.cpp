#include "ir/autodiff.h"

namespace fr::ir {

Result<std::vector<ValueId>> Backward(Builder& b, ValueId loss, ValueId seed, const std::vector<ValueId>& wrt) {
  Graph& g = b.graph();
  const size_t n_fwd = g.nodes.size();
  // Values that depend on some w in wrt (forward), and that the loss depends on (backward).
  std::vector<bool> depends(g.values.size(), false), reaches(g.values.size(), false);
  for (ValueId w : wrt) depends[static_cast<size_t>(w)] = true;
  for (size_t n = 0; n < n_fwd; ++n) {
    const Node& node = g.nodes[n];
    bool any = false;
    for (ValueId v : node.in) any = any || (v != kNoValue && depends[static_cast<size_t>(v)]);
    for (ValueId v : node.out) depends[static_cast<size_t>(v)] = any && g.type(v).dtype == DType::kF32;
  }
  reaches[static_cast<size_t>(loss)] = true;
  for (size_t n = n_fwd; n-- > 0;) {
    const Node& node = g.nodes[n];
    bool any = false;
    for (ValueId v : node.out) any = any || reaches[static_cast<size_t>(v)];
    if (any)
      for (ValueId v : node.in)
        if (v != kNoValue) reaches[static_cast<size_t>(v)] = true;
  }

  std::vector<ValueId> grad(g.values.size(), kNoValue);
  auto add_grad = [&](ValueId v, ValueId d) {
    ValueId& slot = grad[static_cast<size_t>(v)];
    if (slot == kNoValue) {
      slot = d;
      return;
    }
    slot = b.Op(OpKind::kAdd, {slot, d}, {}, b.UniqueName(g.value(v).name + "/grad_sum"), Phase::kBackward);
    g.nodes.back().origin = g.value(v).producer;  // -1 for parameters: placed with their consumers
    g.value(slot).grad_of = v;
  };
  grad[static_cast<size_t>(loss)] = seed;
  for (size_t n = n_fwd; n-- > 0;) {
    Node node = g.nodes[n];  // a copy: rules append to g.nodes
    std::vector<ValueId> dout;
    bool any_out = false;
    for (ValueId v : node.out) {
      dout.push_back(grad[static_cast<size_t>(v)]);
      any_out = any_out || dout.back() != kNoValue;
    }
    std::vector<bool> need;
    bool any_in = false;
    for (ValueId v : node.in) {
      need.push_back(v != kNoValue && depends[static_cast<size_t>(v)] && reaches[static_cast<size_t>(v)]);
      any_in = any_in || need.back();
    }
    if (!any_out || !any_in) continue;
    const OpDef& d = Def(node.op);
    if (!d.grad) {
      return Status::Invalid("[ir] node '" + node.name + "' (" + d.name + ") has no gradient rule");
    }
    GradCtx ctx(b, node, dout, need);
    const size_t before = g.nodes.size();
    try {
      d.grad(ctx);
    } catch (const GradFailure& f) {
      return Status::Invalid("[ir] node '" + node.name + "' (" + d.name + "): its gradient cannot be built: " + f.status.message());
    }
    for (size_t k = before; k < g.nodes.size(); ++k) g.nodes[k].origin = static_cast<NodeId>(n);
    for (size_t i = 0; i < node.in.size(); ++i) {
      if (!need[i]) continue;
      ValueId di = ctx.din()[i];
      if (di == kNoValue || g.type(di).shape != g.type(node.in[i]).shape) {
        return Status::Invalid("[ir] node '" + node.name + "' (" + d.name + "): its gradient for input " + std::to_string(i) + " " +
                               g.type(node.in[i]).shape.ToString() + " cannot be built" +
                               (di == kNoValue ? "" : " (the rule gives " + g.type(di).shape.ToString() + ")"));
      }
      if (g.value(di).grad_of == kNoValue) g.value(di).grad_of = node.in[i];
      add_grad(node.in[i], di);
    }
  }
  std::vector<ValueId> out;
  for (ValueId w : wrt) out.push_back(grad[static_cast<size_t>(w)]);
  return out;
}

}  // namespace fr::ir
