#include "plan/plan.h"

#include <algorithm>
#include <set>

namespace fr::ir {

const char* Name(StreamKind k) {
  switch (k) {
    case StreamKind::kCompute: return "compute";
    case StreamKind::kData: return "data";
    case StreamKind::kComm: return "comm";
    case StreamKind::kCopy: return "copy";
  }
  return "?";
}

const char* Name(TaskKind k) {
  switch (k) {
    case TaskKind::kData: return "data";
    case TaskKind::kCompute: return "compute";
    case TaskKind::kVariable: return "variable";
    case TaskKind::kBoxing: return "boxing";
    case TaskKind::kLossSink: return "loss-sink";
    case TaskKind::kNormSink: return "norm-sink";
    case TaskKind::kStatSink: return "stat-sink";
    case TaskKind::kCopy: return "copy";
  }
  return "?";
}

int64_t Plan::Acts(const TaskDesc& t, int64_t steps) const {
  if (t.kind == TaskKind::kVariable) return steps + 1;
  return t.per_step ? steps : steps * micro_batches;
}

bool Plan::CopiedIn(int regst) const {
  const RegstDesc& r = regsts[static_cast<size_t>(regst)];
  return r.device.type != DeviceType::kCpu && tasks[static_cast<size_t>(r.producer)].kind == TaskKind::kCopy;
}

bool Plan::CopiedOut(int regst) const {
  const RegstDesc& r = regsts[static_cast<size_t>(regst)];
  if (r.device.type != DeviceType::kCpu) return false;
  for (int c : r.consumers) {
    const TaskDesc& t = tasks[static_cast<size_t>(c)];
    if (t.kind == TaskKind::kCopy && t.device.type != DeviceType::kCpu) return true;
  }
  return false;
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
      case boxing::Op::kAllReduce:  // several inputs: a gradient bucket
        for (int r : m.in) per += 2 * (p - 1) * bytes(r) / p;
        break;
      case boxing::Op::kAllGather:  // several inputs: a parameter bucket
        for (int r : m.in) per += (p - 1) * bytes(r);
        break;
      case boxing::Op::kReduceScatter:  // in a gradient bucket: one output regst per gradient
        for (int r : m.out >= 0 ? std::vector<int>{m.out} : t.out) per += (p - 1) * bytes(r);
        break;
      case boxing::Op::kAllToAll: per = (p - 1) * bytes(m.in[0]) / p; break;
      default: break;
    }
    total += per * (t.per_step ? 1 : micro_batches);
  }
  return total;
}

Plan::Memory Plan::MemoryOf(int rank) const {
  Memory m;
  std::vector<int> mine;  // task ids on this rank, in task order
  std::vector<int> pos(tasks.size(), -1);
  for (const TaskDesc& t : tasks) {
    if (t.rank != rank) continue;
    pos[static_cast<size_t>(t.id)] = static_cast<int>(mine.size());
    mine.push_back(t.id);
    for (int r : t.out) {
      const RegstDesc& rd = regsts[static_cast<size_t>(r)];
      (t.kind == TaskKind::kVariable ? m.params : m.regsts_every_slot) += rd.bytes() * rd.regst_num;
    }
    if (t.kind == TaskKind::kVariable && t.node >= 0) {
      m.state += regsts[static_cast<size_t>(t.out[0])].bytes() *
                 static_cast<int64_t>(nodes[static_cast<size_t>(t.node)].out.size());
    }
  }
  // A topological order of this rank's tasks (Kahn's, smallest task id first among the ready).
  // Variables are left out: their parameter is there all step, and their update closes the cycle
  // parameter -> forward -> backward -> gradient -> update.
  auto variable = [&](int id) { return tasks[static_cast<size_t>(id)].kind == TaskKind::kVariable; };
  std::vector<int> indeg(mine.size(), 0);
  std::vector<std::vector<int>> next(mine.size());
  for (int id : mine) {
    if (variable(id)) continue;
    for (int r : tasks[static_cast<size_t>(id)].out) {
      for (int c : regsts[static_cast<size_t>(r)].consumers) {
        if (pos[static_cast<size_t>(c)] < 0 || c == id || variable(c)) continue;
        next[static_cast<size_t>(pos[static_cast<size_t>(id)])].push_back(pos[static_cast<size_t>(c)]);
        ++indeg[static_cast<size_t>(pos[static_cast<size_t>(c)])];
      }
    }
  }
  std::set<int> ready;
  for (size_t i = 0; i < mine.size(); ++i)
    if (indeg[i] == 0) ready.insert(static_cast<int>(i));
  std::vector<int> when(mine.size(), static_cast<int>(mine.size()) - 1);  // position in the order
  for (int at = 0; !ready.empty(); ++at) {
    const int i = *ready.begin();
    ready.erase(ready.begin());
    when[static_cast<size_t>(i)] = at;
    for (int j : next[static_cast<size_t>(i)])
      if (--indeg[static_cast<size_t>(j)] == 0) ready.insert(j);
  }
  // Sweep: +bytes at the producer's turn, -bytes after the last consumer's.
  std::vector<int64_t> delta(mine.size() + 1, 0);
  int64_t always = 0;
  for (int id : mine) {
    const TaskDesc& t = tasks[static_cast<size_t>(id)];
    if (t.kind == TaskKind::kVariable) continue;
    for (int r : t.out) {
      const RegstDesc& rd = regsts[static_cast<size_t>(r)];
      if (rd.per_step || rd.regst_num > 1 || CopiedIn(r) || CopiedOut(r)) {
        always += rd.bytes() * rd.regst_num;
        continue;
      }
      const int born = when[static_cast<size_t>(pos[static_cast<size_t>(id)])];
      int dies = born;
      for (int c : rd.consumers)
        if (pos[static_cast<size_t>(c)] >= 0 && !variable(c)) dies = std::max(dies, when[static_cast<size_t>(pos[static_cast<size_t>(c)])]);
      delta[static_cast<size_t>(born)] += rd.bytes();
      delta[static_cast<size_t>(dies) + 1] -= rd.bytes();
    }
  }
  int64_t live = 0, peak = 0;
  for (int64_t d : delta) peak = std::max(peak, live += d);
  m.regsts = always + peak;
  return m;
}

}  // namespace fr::ir
