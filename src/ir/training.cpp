#include "ir/training.h"

#include "ir/autodiff.h"
#include "ops/op.h"

namespace fr::ir {
namespace {

Attrs OptimizerAttrs(const OptimizerSpec& o) {
  Attrs a;
  a.Set("lr", o.schedule.lr);
  a.Set("min_lr", o.schedule.min_lr);
  a.Set("schedule", int64_t{o.schedule.kind});
  a.Set("warmup", o.schedule.warmup);
  a.Set("steps", o.schedule.steps);
  a.Set("weight_decay", o.weight_decay);
  if (o.type == OptimizerSpec::Type::kSgd) {
    a.Set("momentum", o.momentum);
    a.Set("nesterov", int64_t{o.nesterov});
  } else {
    a.Set("beta1", o.beta1);
    a.Set("beta2", o.beta2);
    a.Set("eps", o.eps);
  }
  return a;
}

// Removes nodes none of whose outputs reach a root.
void RemoveDeadNodes(Graph& g, const std::vector<ValueId>& roots, const std::vector<NodeId>& keep_nodes) {
  std::vector<bool> live_value(g.values.size(), false), keep(g.nodes.size(), false);
  for (ValueId r : roots) live_value[static_cast<size_t>(r)] = true;
  for (NodeId n : keep_nodes) keep[static_cast<size_t>(n)] = true;
  for (size_t n = g.nodes.size(); n-- > 0;) {
    const Node& node = g.nodes[n];
    for (ValueId v : node.out) keep[n] = keep[n] || live_value[static_cast<size_t>(v)];
    if (keep[n])
      for (ValueId v : node.in)
        if (v != kNoValue) live_value[static_cast<size_t>(v)] = true;
  }
  g.KeepNodes(keep);
}

}  // namespace

Result<TrainingGraph> BuildTraining(Graph forward, const TrainingSpec& spec) {
  TrainingGraph tg;
  tg.graph = std::move(forward);
  Graph& g = tg.graph;
  Builder b(g);
  const std::string cfg = "[config] " + (spec.config_path.empty() ? "" : spec.config_path + ": ");
  const std::string key = spec.loss == TrainingSpec::Loss::kCrossEntropy ? "model.loss.logits" : "model.loss.output";
  ValueId pred = g.Find(spec.loss_input);
  if (pred == kNoValue || g.value(pred).kind != ValueKind::kActivation) {
    std::string outs;
    for (ValueId o : g.outputs) outs += (outs.empty() ? "" : ", ") + g.value(o).name;
    return Status::Invalid(cfg + key + ": '" + spec.loss_input +
                           "' is not a value computed by the model (graph outputs: " + outs + ")");
  }
  if (g.Find(spec.labels) != kNoValue) {
    return Status::Invalid(cfg + "model.loss.labels: '" + spec.labels + "' is already a tensor of the model");
  }
  ValueId labels = g.AddValue(spec.labels, spec.labels_type, ValueKind::kInput);
  if (spec.loss == TrainingSpec::Loss::kCrossEntropy && spec.ignore_index) {
    // The mean over the labels not ignored, as PyTorch's: their summed losses over their count,
    // both of the whole micro-batch (partial sums on split layouts, all-reduced before the Div).
    Attrs ce;
    ce.Set("sum", int64_t{1});
    ce.Set("ignore_index", *spec.ignore_index);
    auto sum = b.Add(OpKind::kCrossEntropy, {pred, labels}, ce, "loss/sum_of_losses", Phase::kLoss);
    if (!sum.ok()) return sum.status().With(cfg + "model.loss: ");
    Tensor ignore(DType::kI64, Shape{});
    ignore.data<int64_t>()[0] = *spec.ignore_index;
    const ValueId ig = b.Const("loss/ignore_index", ignore);
    const ValueId kept = b.Op(OpKind::kNot, {b.Op(OpKind::kEqual, {labels, ig}, {}, "loss/ignored", Phase::kLoss)}, {},
                              "loss/counted", Phase::kLoss);
    Attrs to_float, all;
    to_float.Set("dtype", static_cast<int64_t>(DType::kF32));
    std::vector<int64_t> axes;
    for (int i = 0; i < spec.labels_type.shape.rank(); ++i) axes.push_back(i);
    all.Set("axes", axes);
    all.Set("keepdims", int64_t{0});
    const ValueId count = b.Op(OpKind::kReduceSum, {b.Op(OpKind::kCast, {kept}, to_float, "loss/counted_f", Phase::kLoss)}, all,
                               "loss/count", Phase::kLoss);
    tg.loss = b.Op(OpKind::kDiv, {(*sum)[0], count}, {}, "loss", Phase::kLoss);
  } else {
    OpKind loss_op = spec.loss == TrainingSpec::Loss::kCrossEntropy ? OpKind::kCrossEntropy : OpKind::kMse;
    auto loss = b.Add(loss_op, {pred, labels}, {}, "loss", Phase::kLoss);
    if (!loss.ok()) return loss.status().With(cfg + "model.loss: ");
    tg.loss = (*loss)[0];
  }
  tg.loss_sum = b.Op(OpKind::kAccumulate, {tg.loss}, {}, "loss/sum", Phase::kAccumulate);
  if (spec.forward_only) {
    RemoveDeadNodes(g, {tg.loss_sum}, {});
    std::vector<bool> read(g.values.size(), false);
    for (const Node& n : g.nodes)
      for (ValueId v : n.in)
        if (v != kNoValue) read[static_cast<size_t>(v)] = true;
    std::vector<ValueId> params;
    for (ValueId p : g.params) {
      if (!read[static_cast<size_t>(p)]) {
        g.value(p).kind = ValueKind::kConst;
        tg.frozen.push_back(g.value(p).name);
        continue;
      }
      params.push_back(p);
      tg.params.push_back({p, kNoValue, -1});
    }
    g.params = params;
    std::erase_if(g.running, [&](const Graph::Running& r) { return g.value(r.batch).producer < 0; });
    return tg;
  }

  Tensor seed_t = Tensor::Full(Shape{}, static_cast<float>(1.0 / static_cast<double>(spec.micro_batches)));
  ValueId seed = b.Const("loss/seed", seed_t);
  ASSIGN_OR_RETURN(std::vector<ValueId> grads, Backward(b, tg.loss, seed, g.params));

  std::vector<ValueId> params;
  for (size_t i = 0; i < g.params.size(); ++i) {
    ValueId p = g.params[i];
    if (grads[i] == kNoValue) {
      g.value(p).kind = ValueKind::kConst;
      tg.frozen.push_back(g.value(p).name);
      continue;
    }
    params.push_back(p);
    ValueId acc = b.Op(OpKind::kAccumulate, {grads[i]}, {}, b.UniqueName(g.value(p).name + "/grad_acc"),
                       Phase::kAccumulate);
    tg.params.push_back({p, acc, -1});
  }
  g.params = params;
  if (tg.params.empty()) return Status::Invalid(cfg + "model.loss: the loss depends on no trainable parameter");

  std::vector<ValueId> sq;
  for (const ParamGrad& pg : tg.params) {
    sq.push_back(b.Op(OpKind::kSquareSum, {pg.grad}, {}, b.UniqueName(g.value(pg.param).name + "/grad_sq"),
                      Phase::kOptimizer));
  }
  tg.grad_norm_sq = b.Op(OpKind::kAddN, sq, {}, "grad_norm_sq", Phase::kOptimizer);
  ValueId coef = kNoValue;
  if (spec.optimizer.grad_clip > 0) {
    Attrs a;
    a.Set("max_norm", spec.optimizer.grad_clip);
    coef = b.Op(OpKind::kClipCoef, {tg.grad_norm_sq}, a, "clip_coef", Phase::kOptimizer);
  }
  std::vector<NodeId> updates;
  OpKind update = spec.optimizer.type == OptimizerSpec::Type::kSgd ? OpKind::kSgdUpdate : OpKind::kAdamWUpdate;
  for (ParamGrad& pg : tg.params) {
    std::vector<ValueId> in = {pg.param, pg.grad};
    if (coef != kNoValue) in.push_back(coef);
    auto st = b.Add(update, in, OptimizerAttrs(spec.optimizer), b.UniqueName(g.value(pg.param).name + "/update"),
                    Phase::kOptimizer);
    FR_CHECK(st.ok(), st.status().message());
    for (ValueId s : *st) g.value(s).kind = ValueKind::kState;
    updates.push_back(static_cast<NodeId>(g.nodes.size() - 1));
  }
  RemoveDeadNodes(g, {tg.loss_sum, tg.grad_norm_sq}, updates);
  // A BatchNormalization the loss does not read updates nothing (and its statistic is not made).
  std::erase_if(g.running, [&](const Graph::Running& r) { return g.value(r.batch).producer < 0; });
  for (ParamGrad& pg : tg.params) {
    for (size_t n = 0; n < g.nodes.size(); ++n)
      if (g.nodes[n].phase == Phase::kOptimizer && g.nodes[n].in[0] == pg.param) pg.update = static_cast<NodeId>(n);
  }
  return tg;
}

}  // namespace fr::ir
