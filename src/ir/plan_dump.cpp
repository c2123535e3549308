#include "ir/plan_dump.h"

#include <map>
#include <sstream>

#include "ops/op.h"

namespace fr::ir {
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

std::string Bytes(double b) {
  char buf[32];
  if (b >= (1 << 30)) std::snprintf(buf, sizeof buf, "%.2f GiB", b / (1 << 30));
  else if (b >= (1 << 20)) std::snprintf(buf, sizeof buf, "%.2f MiB", b / (1 << 20));
  else if (b >= 1024) std::snprintf(buf, sizeof buf, "%.1f KiB", b / 1024);
  else std::snprintf(buf, sizeof buf, "%.0f B", b);
  return buf;
}

std::string TypeStr(const TensorType& t) { return std::string(fr::Name(t.dtype)) + t.shape.ToString(); }

std::string JsonStr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// Human name of an input: the tensor's name, or NODE:i for anonymous initializers (exported
// weights are often named like onnx::MatMul_266), which is how hints address them.
std::string InputName(const Graph& g, const Node& n, size_t i) {
  const Value& v = g.value(n.in[i]);
  bool anonymous = v.name.rfind("onnx::", 0) == 0;
  return anonymous ? n.name + ":" + std::to_string(i) + " (" + v.name + ")" : v.name;
}

std::string EdgeLine(const Plan& p, const Graph& g, const BoxingEdge& e) {
  std::ostringstream os;
  os << g.value(e.value).name << ": " << e.src.ToString();
  if (e.src_stage != e.dst_stage) os << " on " << p.stages[static_cast<size_t>(e.src_stage)].ToString();
  os << " -> " << e.dst.ToString() << " on " << p.stages[static_cast<size_t>(e.dst_stage)].ToString() << ": " << e.strategy
     << ", " << Bytes(static_cast<double>(e.bytes_per_rank)) << " per rank" << (e.per_step ? " per step" : " per micro-batch");
  return os.str();
}

}  // namespace

std::string DumpText(const Plan& p, const Graph& g) {
  std::ostringstream os;
  os << "== ops: " << g.nodes.size() << " (placement, signature (inputs) -> (outputs))\n";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << "  [" << PhaseName(n.phase) << "] " << n.name << " = " << Def(n.op).name << "(";
    for (size_t k = 0; k < n.in.size(); ++k) {
      if (k) os << ", ";
      if (n.in[k] == kNoValue) { os << "-"; continue; }
      os << InputName(g, n, k) << ": " << TypeStr(g.type(n.in[k]));
    }
    os << ") -> ";
    for (size_t k = 0; k < n.out.size(); ++k) os << (k ? ", " : "") << TypeStr(g.type(n.out[k]));
    os << "\n      on " << p.stages[static_cast<size_t>(p.node_stage[i])].ToString() << ": " << p.node_sig[i] << "\n";
  }
  os << "\n== boxing: " << p.edges.size() << " edges\n";
  for (const BoxingEdge& e : p.edges) {
    os << "  " << EdgeLine(p, g, e) << "\n      for";
    for (const std::string& c : e.consumers) os << " " << c;
    os << "\n";
  }
  os << "\n== tasks: " << p.tasks.size() << " on " << p.ranks << " rank(s), " << p.steps << " steps x "
     << p.micro_batches << " micro-batches\n";
  std::map<int, std::vector<const TaskDesc*>> by_rank;
  for (const TaskDesc& t : p.tasks) by_rank[t.rank].push_back(&t);
  for (const auto& [rank, ts] : by_rank) {
    os << "rank " << rank << ": " << ts.size() << " tasks\n";
    for (const TaskDesc* t : ts) {
      os << "  task " << t->id << " [" << p.streams[static_cast<size_t>(t->stream)] << "] " << Name(t->kind) << " "
         << t->name;
      if (t->kind == TaskKind::kBoxing && !t->move.group.empty()) os << " (collective " << t->move.collective << ")";
      if (t->kind == TaskKind::kBoxing && t->move.peer >= 0) os << " (peer " << t->move.peer << ", tag " << t->move.tag << ")";
      os << (t->per_step ? ", per step" : "") << "\n";
      for (int r : t->out) {
        const RegstDesc& rd = p.regsts[static_cast<size_t>(r)];
        os << "      -> regst " << r << " " << TypeStr(rd.type) << " x" << rd.regst_num << " to tasks";
        for (int c : rd.consumers) os << " " << c;
        os << "\n";
      }
    }
  }
  os << "\n== totals per rank, per step\n";
  for (const auto& [rank, ts] : by_rank) {
    Plan::Memory m = p.MemoryOf(rank, g);
    os << "  rank " << rank << ": moves " << Bytes(static_cast<double>(p.BytesMoved(rank))) << "; memory "
       << Bytes(static_cast<double>(m.params + m.state + m.regsts)) << " (parameters " << Bytes(static_cast<double>(m.params))
       << ", optimizer state " << Bytes(static_cast<double>(m.state)) << ", registers " << Bytes(static_cast<double>(m.regsts))
       << ")\n";
  }
  char t[160];
  std::snprintf(t, sizeof t, "  predicted step time: %.3f ms (compute %.3f ms, boxing %.3f ms)\n",
                (p.predicted_compute_s + p.predicted_boxing_s) * 1e3, p.predicted_compute_s * 1e3, p.predicted_boxing_s * 1e3);
  if (p.ranks > 1) os << t;
  return os.str();
}

std::string DumpJson(const Plan& p, const Graph& g) {
  std::ostringstream os;
  os << "{\"ranks\": " << p.ranks << ", \"steps\": " << p.steps << ", \"micro_batches\": " << p.micro_batches << ",\n \"ops\": [";
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << (i ? ",\n  " : "\n  ") << "{\"name\": " << JsonStr(n.name) << ", \"op\": " << JsonStr(Def(n.op).name)
       << ", \"phase\": " << JsonStr(PhaseName(n.phase)) << ", \"placement\": "
       << JsonStr(p.stages[static_cast<size_t>(p.node_stage[i])].ToString()) << ", \"signature\": " << JsonStr(p.node_sig[i]) << "}";
  }
  os << "],\n \"boxing\": [";
  for (size_t i = 0; i < p.edges.size(); ++i) {
    const BoxingEdge& e = p.edges[i];
    os << (i ? ",\n  " : "\n  ") << "{\"tensor\": " << JsonStr(g.value(e.value).name) << ", \"from\": " << JsonStr(e.src.ToString())
       << ", \"to\": " << JsonStr(e.dst.ToString()) << ", \"from_placement\": " << JsonStr(p.stages[static_cast<size_t>(e.src_stage)].ToString())
       << ", \"to_placement\": " << JsonStr(p.stages[static_cast<size_t>(e.dst_stage)].ToString()) << ", \"strategy\": " << JsonStr(e.strategy)
       << ", \"bytes_per_rank\": " << e.bytes_per_rank << ", \"per_step\": " << (e.per_step ? "true" : "false") << "}";
  }
  os << "],\n \"ranks_detail\": [";
  for (int r = 0; r < p.ranks; ++r) {
    Plan::Memory m = p.MemoryOf(r, g);
    int tasks = 0;
    for (const TaskDesc& t : p.tasks) tasks += t.rank == r;
    os << (r ? ",\n  " : "\n  ") << "{\"rank\": " << r << ", \"tasks\": " << tasks << ", \"bytes_moved_per_step\": " << p.BytesMoved(r)
       << ", \"memory\": {\"parameters\": " << m.params << ", \"optimizer_state\": " << m.state << ", \"registers\": " << m.regsts << "}}";
  }
  os << "],\n \"predicted_step_seconds\": " << p.predicted_compute_s + p.predicted_boxing_s << "}\n";
  return os.str();
}

std::string DumpDot(const Plan& p, const Graph& g) {
  std::ostringstream os;
  os << "digraph plan {\n  rankdir=TB; node [shape=box, fontsize=10]; edge [fontsize=9];\n";
  std::map<ValueId, std::vector<const BoxingEdge*>> boxed;
  for (const BoxingEdge& e : p.edges) boxed[e.value].push_back(&e);
  for (size_t i = 0; i < g.nodes.size(); ++i) {
    const Node& n = g.nodes[i];
    os << "  n" << i << " [label=" << JsonStr(n.name + "\\n" + Def(n.op).name + " " + p.node_sig[i]) << "];\n";
  }
  auto consumers = g.Consumers();
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    if (val.producer < 0) continue;
    for (NodeId c : consumers[v]) {
      std::string label;
      for (const BoxingEdge* e : boxed[static_cast<ValueId>(v)]) {
        for (const std::string& name : e->consumers)
          if (name == g.node(c).name) label = e->src.ToString() + "->" + e->dst.ToString() + "\\n" + e->strategy + " " + Bytes(static_cast<double>(e->bytes_per_rank));
      }
      os << "  n" << val.producer << " -> n" << c;
      if (!label.empty()) os << " [label=" << JsonStr(label) << ", color=red, fontcolor=red]";
      os << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace fr::ir
