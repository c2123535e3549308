#include "graph/graph.h"

#include <algorithm>

#include "base/glob.h"

namespace fr::ir {

int64_t Attrs::Int(const std::string& k, int64_t def) const {
  auto it = m_.find(k);
  if (it == m_.end()) return def;
  if (auto* d = std::get_if<double>(&it->second)) return static_cast<int64_t>(*d);
  return std::get<int64_t>(it->second);
}

double Attrs::Float(const std::string& k, double def) const {
  auto it = m_.find(k);
  if (it == m_.end()) return def;
  if (auto* i = std::get_if<int64_t>(&it->second)) return static_cast<double>(*i);
  return std::get<double>(it->second);
}

const std::vector<int64_t>& Attrs::Ints(const std::string& k) const {
  static const std::vector<int64_t> kEmpty;
  auto it = m_.find(k);
  return it == m_.end() ? kEmpty : std::get<std::vector<int64_t>>(it->second);
}

std::vector<int64_t> Attrs::IntsOr(const std::string& k, std::vector<int64_t> def) const {
  return Has(k) ? Ints(k) : def;
}

const std::vector<double>& Attrs::Floats(const std::string& k) const {
  static const std::vector<double> kEmpty;
  auto it = m_.find(k);
  return it == m_.end() ? kEmpty : std::get<std::vector<double>>(it->second);
}

std::string Attrs::Str(const std::string& k, const std::string& def) const {
  auto it = m_.find(k);
  return it == m_.end() ? def : std::get<std::string>(it->second);
}

bool Node::AnswersTo(std::string_view glob) const {
  if (GlobMatch(glob, name) || (!split_from.empty() && GlobMatch(glob, split_from))) return true;
  return std::any_of(fused_from.begin(), fused_from.end(), [&](const std::string& f) { return GlobMatch(glob, f); });
}

ValueId Graph::AddValue(std::string name, TensorType t, ValueKind kind, Tensor data) {
  Value v;
  v.name = std::move(name);
  v.type = std::move(t);
  v.kind = kind;
  v.data = std::move(data);
  values.push_back(std::move(v));
  auto id = static_cast<ValueId>(values.size() - 1);
  if (kind == ValueKind::kInput) inputs.push_back(id);
  if (kind == ValueKind::kParam) params.push_back(id);
  return id;
}

NodeId Graph::AddNode(Node n) {
  auto id = static_cast<NodeId>(nodes.size());
  for (size_t i = 0; i < n.out.size(); ++i) {
    Value& v = value(n.out[i]);
    v.producer = id;
    v.producer_slot = static_cast<int>(i);
  }
  nodes.push_back(std::move(n));
  return id;
}

ValueId Graph::Find(const std::string& name) const {
  for (size_t i = 0; i < values.size(); ++i)
    if (values[i].name == name) return static_cast<ValueId>(i);
  return kNoValue;
}

void Graph::KeepNodes(const std::vector<bool>& keep) {
  std::vector<NodeId> renumber(nodes.size(), -1);
  for (size_t n = 0, k = 0; n < nodes.size(); ++n)
    if (keep[n]) renumber[n] = static_cast<NodeId>(k++);
  std::vector<Node> kept;
  for (size_t n = 0; n < nodes.size(); ++n) {
    if (nodes[n].origin >= 0) nodes[n].origin = renumber[static_cast<size_t>(nodes[n].origin)];
    if (keep[n]) {
      kept.push_back(std::move(nodes[n]));
    } else {
      for (ValueId v : nodes[n].out) value(v).producer = -1;
    }
  }
  nodes = std::move(kept);
  for (size_t n = 0; n < nodes.size(); ++n)
    for (ValueId v : nodes[n].out) value(v).producer = static_cast<NodeId>(n);
}

std::vector<std::vector<NodeId>> Graph::Consumers() const {
  std::vector<std::vector<NodeId>> c(values.size());
  for (size_t n = 0; n < nodes.size(); ++n)
    for (ValueId v : nodes[n].in)
      if (v != kNoValue) c[static_cast<size_t>(v)].push_back(static_cast<NodeId>(n));
  return c;
}

}  // namespace fr::ir
