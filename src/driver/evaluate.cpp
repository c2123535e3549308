#include "driver/evaluate.h"

#include <algorithm>

namespace fr {

Result<std::unique_ptr<Evaluator>> Evaluator::Make(const Config& cfg, const Compiled& train, int rank, actor::Communicator* comm,
                                                   int first_collective) {
  std::unique_ptr<Evaluator> e(new Evaluator());
  ASSIGN_OR_RETURN(e->plan_, CompileEval(cfg, train, first_collective, &e->graph_));
  DataConfig in_order = cfg.data;
  in_order.order = DataConfig::Order::kSequential;
  e->loader_ = std::make_unique<data::Loader>(*train.eval_dataset, train.input_field, in_order, cfg.train);
  e->rt_ = std::make_unique<actor::Runtime>(e->plan_, e->graph_.graph, rank, comm);
  e->steps_ = cfg.eval.steps;
  return e;
}

Result<double> Evaluator::Evaluate(const actor::Runtime& train, const ir::Graph& train_graph, actor::RunOptions ro) {
  RETURN_IF_ERROR(rt_->ShareParams(train, train_graph));
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
