#include "plan/plan_dump.h"

#include <algorithm>
#include <map>
#include <sstream>

#include "base/report.h"
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
  os << " -> " << e.dst.ToString() << " on " << p.stages[static_cast<size_t>(e.dst_stage)].ToString() << ": " << e.strategy;
  if (e.bucket >= 0) os << (g.value(e.value).kind == ValueKind::kParam ? " in parameter bucket " : " in gradient bucket ") << e.bucket;
  os << ", " << HumanBytes(static_cast<double>(e.bytes_per_rank)) << " per rank" << (e.per_step ? " per step" : " per micro-batch");
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
  // Devices are named where the plan has more than the CPU.
  const bool devices = std::any_of(p.tasks.begin(), p.tasks.end(), [](const TaskDesc& t) { return t.device.type != DeviceType::kCpu; });
  for (const auto& [rank, ts] : by_rank) {
    os << "rank " << rank << ": " << ts.size() << " tasks\n";
    for (const TaskDesc* t : ts) {
      os << "  task " << t->id << " [" << Name(p.streams[static_cast<size_t>(t->stream)]) << "] " << Name(t->kind) << " "
         << t->name;
      if (devices) os << " on " << ToString(t->device);
      if (t->kind == TaskKind::kBoxing && !t->move.group.empty()) os << " (collective " << t->move.collective << ")";
      if (t->kind == TaskKind::kBoxing && t->move.peer >= 0) os << " (peer " << t->move.peer << ", tag " << t->move.tag << ")";
      if (t->update_group >= 0) os << " (update group " << t->update_group << ")";
      if (t->kind == TaskKind::kCompute && p.nodes[static_cast<size_t>(t->node)].attrs.Int("accumulate")) {
        os << " (runs " << Def(p.nodes[static_cast<size_t>(t->node)].op).name << ", adding into the step's sum)";
      }
      os << (t->per_step ? ", per step" : "") << "\n";
      for (int r : t->out) {
        const RegstDesc& rd = p.regsts[static_cast<size_t>(r)];
        os << "      -> regst " << r << " " << TypeStr(rd.type) << " x" << rd.regst_num;
        if (devices) os << " on " << ToString(rd.device);
        os << " to tasks";
        for (int c : rd.consumers) os << " " << c;
        os << "\n";
      }
    }
  }
  os << "\n== totals per rank, per step\n";
  for (const auto& [rank, ts] : by_rank) {
    Plan::Memory m = p.MemoryOf(rank);
    os << "  rank " << rank << ": moves " << HumanBytes(static_cast<double>(p.BytesMoved(rank))) << "; memory "
       << HumanBytes(static_cast<double>(m.params + m.state + m.regsts)) << " (parameters " << HumanBytes(static_cast<double>(m.params))
       << ", optimizer state " << HumanBytes(static_cast<double>(m.state)) << ", registers " << HumanBytes(static_cast<double>(m.regsts))
       << " at the peak, " << HumanBytes(static_cast<double>(m.regsts_every_slot)) << " for every slot)\n";
  }
  const Plan::Prediction& f = p.predicted;
  char t[200], idle[48] = "";
  if (f.bubble_s > 0) std::snprintf(idle, sizeof idle, ", idle %.3f ms", f.bubble_s * 1e3);
  std::snprintf(t, sizeof t, "  predicted step time: %.3f ms (busiest stage: compute %.3f ms, data movement %.3f ms%s)\n",
                f.step_s * 1e3, f.compute_s * 1e3, f.comm_s * 1e3, idle);
  if (f.step_s > 0) os << t;
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
       << ", \"to_placement\": " << JsonStr(p.stages[static_cast<size_t>(e.dst_stage)].ToString()) << ", \"strategy\": " << JsonStr(e.strategy) << ", \"bucket\": " << e.bucket
       << ", \"bytes_per_rank\": " << e.bytes_per_rank << ", \"per_step\": " << (e.per_step ? "true" : "false") << "}";
  }
  os << "],\n \"ranks_detail\": [";
  for (int r = 0; r < p.ranks; ++r) {
    Plan::Memory m = p.MemoryOf(r);
    int tasks = 0;
    for (const TaskDesc& t : p.tasks) tasks += t.rank == r;
    os << (r ? ",\n  " : "\n  ") << "{\"rank\": " << r << ", \"tasks\": " << tasks << ", \"bytes_moved_per_step\": " << p.BytesMoved(r)
       << ", \"memory\": {\"parameters\": " << m.params << ", \"optimizer_state\": " << m.state << ", \"registers\": " << m.regsts
       << ", \"registers_every_slot\": " << m.regsts_every_slot << "}}";
  }
  os << "],\n \"predicted_step_seconds\": " << p.predicted.step_s << "}\n";
  return os.str();
}

namespace {

// A dot string: quotes and backslashes escaped, newlines as dot's centred line break.
std::string DotStr(const std::string& s) {
  std::string o = "\"";
  for (char c : s) {
    if (c == '\n') { o += "\\n"; continue; }
    if (c == '"' || c == '\\') o += '\\';
    o += c;
  }
  return o + "\"";
}

// "[S(0), B]" for one output, "([S(0), B], [B, B])" for several.
std::string Outputs(const Plan& p, size_t node, size_t n_out) {
  const std::string& sig = p.node_sig[node];
  std::string out = sig.substr(sig.rfind("-> ") + 3);
  return n_out == 1 && out.size() > 2 ? out.substr(1, out.size() - 2) : out;
}

}  // namespace

// Logical ops in one cluster per part of the step, sources (data inputs, parameters) as ellipses
// with their nd-SBP. Boxed edges are red, labelled once per boxing (on its first consumer) with
// the transition, strategy and bytes per rank; boxing that moves nothing (slice, zero-fill) is
// orange. Labels stay short: the op's name, type and output nd-SBP; the text dump has the rest.
std::string DumpDot(const Plan& p, const Graph& g) {
  std::ostringstream os;
  std::map<ValueId, std::vector<const BoxingEdge*>> boxed;
  for (const BoxingEdge& e : p.edges) boxed[e.value].push_back(&e);
  std::map<int, bool> stages_used;
  for (int s : p.node_stage) stages_used[s] = true;
  const bool staged = stages_used.size() > 1;
  int64_t moved = 0;
  for (int r = 0; r < p.ranks; ++r) moved = std::max(moved, p.BytesMoved(r));

  os << "digraph plan {\n  rankdir=TB; newrank=true; nodesep=0.25; ranksep=0.35;\n"
     << "  node [shape=box, style=\"rounded,filled\", fillcolor=white, fontname=Helvetica, fontsize=10];\n"
     << "  edge [fontname=Helvetica, fontsize=9, color=gray40];\n"
     << "  labelloc=t; fontname=Helvetica; label=" << DotStr(p.stages[0].ToString() + (staged ? " and more stages" : "") + ", " +
                                                       std::to_string(p.micro_batches) + " micro-batches per step; up to " +
                                                       HumanBytes(static_cast<double>(moved)) + " moved per rank per step; red: boxing, orange: boxing without traffic")
     << ";\n";
  struct Cluster { const char* id; const char* label; std::vector<Phase> phases; };
  const Cluster clusters[] = {
      {"fwd", "forward and loss, per micro-batch", {Phase::kForward, Phase::kLoss}},
      {"bwd", "backward and accumulation, per micro-batch", {Phase::kBackward, Phase::kAccumulate}},
      {"opt", "optimizer, per step", {Phase::kOptimizer}},
  };
  auto consumers = g.Consumers();
  for (const Cluster& c : clusters) {
    os << "  subgraph cluster_" << c.id << " {\n    label=" << DotStr(c.label) << "; style=dashed; color=gray60;\n";
    if (std::string(c.id) == "fwd") {
      for (size_t v = 0; v < g.values.size(); ++v) {
        auto kind = g.values[v].kind;
        if ((kind != ValueKind::kInput && kind != ValueKind::kParam) || consumers[v].empty()) continue;
        std::string sbp;
        for (const ValuePlacement& vp : p.values)
          if (vp.value == static_cast<ValueId>(v)) sbp = vp.sbp.ToString();
        os << "    v" << v << " [shape=ellipse, style=filled, fillcolor=gray95, label="
           << DotStr(g.values[v].name + (sbp.empty() ? "" : "\n" + sbp)) << "];\n";
      }
    }
    for (size_t i = 0; i < g.nodes.size(); ++i) {
      const Node& n = g.nodes[i];
      if (std::find(c.phases.begin(), c.phases.end(), n.phase) == c.phases.end()) continue;
      std::string label = n.name + "\n" + Def(n.op).name + " -> " + Outputs(p, i, n.out.size());
      if (staged) label += "\non " + p.stages[static_cast<size_t>(p.node_stage[i])].ToString();
      os << "    n" << i << " [label=" << DotStr(label) << "];\n";
    }
    os << "  }\n";
  }
  for (size_t v = 0; v < g.values.size(); ++v) {
    const Value& val = g.values[v];
    bool source = val.kind == ValueKind::kInput || val.kind == ValueKind::kParam;
    if (val.producer < 0 && !source) continue;
    for (NodeId c : consumers[v]) {
      const Node& cn = g.node(c);
      const BoxingEdge* box = nullptr;
      bool first = false;
      for (const BoxingEdge* e : boxed[static_cast<ValueId>(v)]) {
        auto at = std::find(e->consumers.begin(), e->consumers.end(), cn.name);
        if (at != e->consumers.end()) box = e, first = at == e->consumers.begin();
      }
      // A source's edges to backward and optimizer readers repeat its forward ones: drawn only when boxed.
      if (source && !box && cn.phase != Phase::kForward && cn.phase != Phase::kLoss) continue;
      os << "  " << (source ? "v" + std::to_string(v) : "n" + std::to_string(val.producer)) << " -> n" << c;
      if (box) {
        const char* color = box->bytes_per_rank > 0 ? "red" : "darkorange";
        std::string label = box->strategy;
        if (box->bytes_per_rank > 0) {
          label = box->src.ToString() + " -> " + box->dst.ToString() + "\n" + label + ", " +
                  HumanBytes(static_cast<double>(box->bytes_per_rank)) + (box->per_step ? "/step" : "/micro-batch");
        }
        os << " [color=" << color << ", fontcolor=" << color << ", penwidth=1.5";
        if (first) os << ", label=" << DotStr(label);
        os << "]";
      }
      os << ";\n";
    }
  }
  os << "}\n";
  return os.str();
}

}  // namespace fr::ir
