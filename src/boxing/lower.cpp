#include "boxing/lower.h"

#include <algorithm>
#include <map>

#include "ops/op.h"

namespace fr::boxing {

using ir::Plan;
using ir::RegstDesc;
using ir::TaskDesc;
using ir::TaskKind;
using ir::ValueId;

namespace {

class Lowering {
 public:
  Lowering(const ir::TrainingGraph& tg, Plan& p) : tg_(tg), g_(tg.graph), p_(p) {}

  void Run() {
    p_.streams = {"compute", "data"};
    TaskDesc& data = NewTask(TaskKind::kData, "data", kDataStream, false);
    for (ValueId v : g_.inputs) data.out.push_back(NewRegst(v, data.id, /*per_step=*/false, /*num=*/2));
    for (const ir::ParamGrad& pg : tg_.params) {
      TaskDesc& t = NewTask(TaskKind::kVariable, g_.value(pg.param).name, kComputeStream, true);
      t.node = pg.update;
      t.param = pg.param;
      t.out.push_back(NewRegst(pg.param, t.id, true, 1));
    }
    std::vector<bool> is_update(g_.nodes.size(), false);
    for (const ir::ParamGrad& pg : tg_.params) is_update[static_cast<size_t>(pg.update)] = true;
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (is_update[n]) continue;
      const ir::Node& node = g_.nodes[n];
      bool per_step = node.phase == ir::Phase::kOptimizer;
      TaskDesc& t = NewTask(TaskKind::kCompute, node.name, kComputeStream, per_step);
      t.node = static_cast<ir::NodeId>(n);
      bool out_per_step = per_step || node.op == OpKind::kAccumulate;
      for (ValueId v : node.out) t.out.push_back(NewRegst(v, t.id, out_per_step, 1));
    }
    for (TaskDesc& t : p_.tasks) {
      if (t.kind != TaskKind::kCompute && t.kind != TaskKind::kVariable) continue;
      if (t.node < 0) continue;
      const ir::Node& node = g_.node(t.node);
      for (size_t i = 0; i < node.in.size(); ++i) {
        ValueId v = node.in[i];
        bool own_param = t.kind == TaskKind::kVariable && i == 0;
        t.in.push_back(v == ir::kNoValue || own_param ? -1 : RegstOf(v));
      }
    }
    TaskDesc& loss = NewTask(TaskKind::kLossSink, "loss", kComputeStream, false);
    loss.in.push_back(RegstOf(tg_.loss));
    TaskDesc& norm = NewTask(TaskKind::kNormSink, "grad_norm", kComputeStream, true);
    norm.in.push_back(RegstOf(tg_.grad_norm_sq));
    for (const TaskDesc& t : p_.tasks) {
      for (int r : t.in) {
        if (r < 0) continue;
        auto& cons = p_.regsts[static_cast<size_t>(r)].consumers;
        if (std::find(cons.begin(), cons.end(), t.id) == cons.end()) cons.push_back(t.id);
      }
    }
  }

 private:
  static constexpr int kComputeStream = 0, kDataStream = 1;

  TaskDesc& NewTask(TaskKind kind, std::string name, int stream, bool per_step) {
    TaskDesc t;
    t.id = static_cast<int>(p_.tasks.size());
    t.kind = kind;
    t.name = std::move(name);
    t.stream = stream;
    t.per_step = per_step;
    p_.tasks.push_back(std::move(t));
    return p_.tasks.back();
  }

  int NewRegst(ValueId v, int producer, bool per_step, int num) {
    RegstDesc r;
    r.id = static_cast<int>(p_.regsts.size());
    r.value = v;
    r.type = g_.type(v);
    r.producer = producer;
    r.per_step = per_step;
    r.regst_num = num;
    p_.regsts.push_back(r);
    regst_of_[v] = r.id;
    return r.id;
  }

  // The regst holding a value, or -1 for constants.
  int RegstOf(ValueId v) const {
    auto it = regst_of_.find(v);
    if (it != regst_of_.end()) return it->second;
    FR_CHECK(g_.value(v).kind == ir::ValueKind::kConst, "value '" + g_.value(v).name + "' has no producer task");
    return -1;
  }

  const ir::TrainingGraph& tg_;
  const ir::Graph& g_;
  Plan& p_;
  std::map<ValueId, int> regst_of_;
};

}  // namespace

Result<Plan> Lower(const ir::TrainingGraph& tg, const LowerOptions& opt) {
  Plan p;
  p.steps = opt.steps;
  p.micro_batches = opt.micro_batches;
  Lowering(tg, p).Run();
  return p;
}

}  // namespace fr::boxing
