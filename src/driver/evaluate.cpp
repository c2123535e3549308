#include "driver/evaluate.h"

#include <algorithm>
#include <set>

namespace fr {

Result<std::unique_ptr<Evaluator>> Evaluator::Make(const Config& cfg, const Compiled& train, int rank, actor::Communicator* comm,
                                                   int first_collective) {
  std::unique_ptr<Evaluator> e(new Evaluator());
  ASSIGN_OR_RETURN(e->plan_, CompileEval(cfg, train, first_collective, &e->graph_));
  DataConfig in_order = cfg.data;
  in_order.order = DataConfig::Order::kSequential;
  e->loader_ = std::make_unique<data::Loader>(*train.eval_dataset, train.input_field, in_order, cfg.train);
  e->comm_ = comm;
  e->steps_ = cfg.eval.steps;
  e->rank_ = rank;
  std::set<std::string> stats;
  for (const ir::Graph::Running& r : train.training.graph.running) stats.insert(r.initializer);
  for (ir::ValueId p : e->graph_.graph.params)
    if (stats.count(e->graph_.graph.value(p).name)) e->running_.push_back(p);
  return e;
}

Result<double> Evaluator::Evaluate(actor::Runtime& train, const RunningStats& running, actor::RunOptions ro) {
  if (!rt_) rt_ = std::make_unique<actor::Runtime>(plan_, graph_.graph, rank_, comm_, &train);
  if (!running_.empty()) {
    const std::map<std::string, Tensor> now = running.Values();
    for (ir::ValueId v : running_) {
      const Tensor mine = rt_->Param(v);
      if (!mine.defined()) continue;  // another stage's
      const std::string& name = graph_.graph.value(v).name;
      auto whole = now.find(name);
      if (whole == now.end()) return Status::Runtime("[eval] rank " + std::to_string(rank_) + " has no running statistic '" + name + "'");
      mine.CopyFrom(whole->second);  // whole: CompileEval lays what training has not got out as B
    }
  }
  double sum = 0;
  ro.feeder = loader_.get();
  ro.first_step = 0;
  ro.steps = steps_;
  ro.on_step = [&sum](const actor::StepRecord& r) {
    sum += r.loss;
    return Status::Ok();
  };
  ro.on_stat = nullptr;
  ro.on_act = nullptr;
  ro.on_device_act = nullptr;
  ro.wind_down = nullptr;  // an evaluation is short: a preemption waits for the training's next run
  RETURN_IF_ERROR(rt_->Run(ro));
  return sum / static_cast<double>(steps_);
}

actor::CollectiveSetup EvalCollectives(const ir::Plan& train, const ir::Plan* eval) {
  actor::CollectiveSetup all = actor::SetUpCollectives(train);
  if (!eval) return all;
  const actor::CollectiveSetup e = actor::SetUpCollectives(*eval);
  for (size_t id = all.groups.size(); id < e.groups.size(); ++id) {
    all.groups.push_back(e.groups[id]);
    all.input_bytes.push_back(0);
  }
  // The two plans' sends share a link where they share a tag: their runs never overlap.
  for (const actor::Link& l : e.links)
    if (std::find(all.links.begin(), all.links.end(), l) == all.links.end()) all.links.push_back(l);
  return all;
}

}  // namespace fr
