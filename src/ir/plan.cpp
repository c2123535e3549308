#include "ir/plan.h"

#include <map>
#include <sstream>

#include "ops/op.h"

namespace fr::ir {

const char* Name(TaskKind k) {
  switch (k) {
    case TaskKind::kData: return "data";
    case TaskKind::kCompute: return "compute";
    case TaskKind::kVariable: return "variable";
    case TaskKind::kLossSink: return "loss-sink";
    case TaskKind::kNormSink: return "norm-sink";
  }
  return "?";
}

int64_t Plan::Acts(const TaskDesc& t) const {
  if (t.kind == TaskKind::kVariable) return steps + 1;
  return t.per_step ? steps : steps * micro_batches;
}

namespace {

const char* PhaseName(Phase p) {
  switch (p) {
    case Phase::kForward: return "fwd";
    case Phase::kLoss: return "loss";
    case Phase::kBackward: return "bwd";
    case Phase::kAccumulate: return "acc";
    case Phase::kOptimizer: return "opt";
  }
  return "?";
}

std::string Bytes(int64_t b) {
  std::ostringstream os;
  os.precision(3);
  if (b >= (1 << 20)) os << static_cast<double>(b) / (1 << 20) << " MiB";
  else if (b >= 1024) os << static_cast<double>(b) / 1024 << " KiB";
  else os << b << " B";
  return os.str();
}

std::string TypeStr(const TensorType& t) { return std::string(fr::Name(t.dtype)) + t.shape.ToString(); }

}  // namespace

std::string Plan::Dump(const Graph& g) const {
  std::ostringstream os;
  os << "== training graph: " << g.nodes.size() << " ops, " << g.params.size() << " parameters\n";
  for (const Node& n : g.nodes) {
    os << "  [" << PhaseName(n.phase) << "] " << n.name << " = " << Def(n.op).name << "(";
    for (size_t i = 0; i < n.in.size(); ++i) {
      if (i) os << ", ";
      if (n.in[i] == kNoValue) { os << "-"; continue; }
      os << g.value(n.in[i]).name << ": " << TypeStr(g.type(n.in[i]));
    }
    os << ") -> ";
    for (size_t i = 0; i < n.out.size(); ++i) os << (i ? ", " : "") << TypeStr(g.type(n.out[i]));
    os << "\n";
  }
  os << "\n== plan: " << ranks << " rank(s), " << steps << " steps x " << micro_batches << " micro-batches\n";
  std::map<int, std::vector<const TaskDesc*>> by_rank;
  for (const TaskDesc& t : tasks) by_rank[t.rank].push_back(&t);
  for (const auto& [rank, ts] : by_rank) {
    int64_t act_bytes = 0, param_bytes = 0, state_bytes = 0;
    os << "rank " << rank << ": " << ts.size() << " tasks\n";
    for (const TaskDesc* t : ts) {
      os << "  task " << t->id << " [" << streams[static_cast<size_t>(t->stream)] << "] " << Name(t->kind) << " "
         << t->name << (t->per_step ? " (per step)" : " (per micro-batch)") << "\n";
      for (int r : t->out) {
        const RegstDesc& rd = regsts[static_cast<size_t>(r)];
        os << "      out regst " << r << " " << g.value(rd.value).name << " " << TypeStr(rd.type)
           << " x" << rd.regst_num << (rd.per_step ? " per step" : "") << " -> tasks";
        for (int c : rd.consumers) os << " " << c;
        os << "\n";
        (t->kind == TaskKind::kVariable ? param_bytes : act_bytes) += rd.bytes() * rd.regst_num;
      }
      if (t->kind == TaskKind::kVariable && t->node >= 0)
        for (ValueId s : g.node(t->node).out) state_bytes += g.type(s).shape.numel() * 4;
    }
    os << "  memory: parameters " << Bytes(param_bytes) << ", optimizer state " << Bytes(state_bytes)
       << ", registers " << Bytes(act_bytes) << "\n";
  }
  return os.str();
}

}  // namespace fr::ir
