#include "ir/plan.h"

namespace fr::ir {

const char* Name(TaskKind k) {
  switch (k) {
    case TaskKind::kData: return "data";
    case TaskKind::kCompute: return "compute";
    case TaskKind::kVariable: return "variable";
    case TaskKind::kBoxing: return "boxing";
    case TaskKind::kLossSink: return "loss-sink";
    case TaskKind::kNormSink: return "norm-sink";
  }
  return "?";
}

int64_t Plan::Acts(const TaskDesc& t) const {
  if (t.kind == TaskKind::kVariable) return steps + 1;
  return t.per_step ? steps : steps * micro_batches;
}

int64_t Plan::BytesMoved(int rank) const {
  int64_t total = 0;
  for (const TaskDesc& t : tasks) {
    if (t.kind != TaskKind::kBoxing || t.rank != rank) continue;
    const boxing::Task& m = t.move;
    int64_t per = 0;
    auto bytes = [&](int r) { return regsts[static_cast<size_t>(r)].bytes(); };
    int64_t p = static_cast<int64_t>(m.group.size());
    switch (m.op) {
      case boxing::Op::kSend: per = bytes(m.in[0]); break;
      case boxing::Op::kAllReduce: per = 2 * (p - 1) * bytes(m.in[0]) / p; break;
      case boxing::Op::kAllGather: per = (p - 1) * bytes(m.in[0]); break;
      case boxing::Op::kReduceScatter: per = (p - 1) * bytes(m.out); break;
      case boxing::Op::kAllToAll: per = (p - 1) * bytes(m.in[0]) / p; break;
      default: break;
    }
    total += per * (t.per_step ? 1 : micro_batches);
  }
  return total;
}

Plan::Memory Plan::MemoryOf(int rank, const Graph&) const {
  Memory m;
  for (const TaskDesc& t : tasks) {
    if (t.rank != rank) continue;
    for (int r : t.out) {
      const RegstDesc& rd = regsts[static_cast<size_t>(r)];
      (t.kind == TaskKind::kVariable ? m.params : m.regsts) += rd.bytes() * rd.regst_num;
    }
    if (t.kind == TaskKind::kVariable && t.node >= 0) {
      m.state += regsts[static_cast<size_t>(t.out[0])].bytes() *
                 static_cast<int64_t>(nodes[static_cast<size_t>(t.node)].out.size());
    }
  }
  return m;
}

}  // namespace fr::ir
