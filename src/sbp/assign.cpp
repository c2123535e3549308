#include "sbp/assign.h"

#include <algorithm>
#include <limits>
#include <map>
#include <unordered_map>

#include "base/glob.h"
#include "boxing/boxing.h"
#include "ops/op.h"

namespace fr::sbp {

std::string NdSignature::ToString() const {
  auto list = [](const std::vector<NdSbp>& v) {
    std::string s = "(";
    for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + (v[i].size() ? v[i].ToString() : std::string("const"));
    return s + ")";
  };
  return list(in) + " -> " + list(out);
}

namespace {

using ir::NodeId;
using ir::ValueId;
constexpr double kInf = std::numeric_limits<double>::infinity();

double Flops(const ir::Graph& g, const ir::Node& n) {
  if (n.op == OpKind::kMatMul || n.op == OpKind::kGemm) {
    const Shape& a = g.type(n.in[0]).shape;
    int64_t k = n.attrs.Int("transA") ? a[a.rank() - 2] : a[a.rank() - 1];
    return 2.0 * static_cast<double>(g.type(n.out[0]).shape.numel()) * static_cast<double>(k);
  }
  double f = 0;
  for (ValueId v : n.out) f += static_cast<double>(g.type(v).shape.numel());
  for (ValueId v : n.in)
    if (v != ir::kNoValue) f += static_cast<double>(g.type(v).shape.numel());
  return 4.0 * f;  // elementwise-like ops are memory bound: count a few FLOPs per element touched
}

class Assigner {
 public:
  Assigner(const ir::TrainingGraph& tg, const AssignOptions& o) : tg_(tg), g_(tg.graph), o_(o) {}

  Result<Assignment> Run() {
    a_.value_stage = o_.value_stage;
    a_.value_stage.resize(g_.values.size(), 0);
    a_.value_sbp.assign(g_.values.size(), NdSbp());
    a_.node_sig.resize(g_.nodes.size());
    consumers_ = g_.Consumers();
    per_step_.assign(g_.values.size(), false);
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const ir::Node& node = g_.nodes[n];
      a_.value_stage.resize(g_.values.size());
      for (ValueId v : node.out) {
        a_.value_stage[static_cast<size_t>(v)] = o_.node_stage[n];
        per_step_[static_cast<size_t>(v)] = node.phase == ir::Phase::kOptimizer || node.op == OpKind::kAccumulate;
      }
    }
    for (ValueId p : g_.params) per_step_[static_cast<size_t>(p)] = true;
    RETURN_IF_ERROR(ResolveHints());
    for (size_t n = 0; n < g_.nodes.size(); ++n) RETURN_IF_ERROR(Candidates(static_cast<NodeId>(n)));
    RETURN_IF_ERROR(Solve());
    SearchParams();
    Total();
    return a_;
  }

 private:
  const Placement& PlaceOf(ValueId v) const { return o_.stages[static_cast<size_t>(a_.value_stage[static_cast<size_t>(v)])]; }
  const Placement& PlaceOfNode(NodeId n) const { return o_.stages[static_cast<size_t>(o_.node_stage[static_cast<size_t>(n)])]; }
  bool IsConst(ValueId v) const { return g_.value(v).kind == ir::ValueKind::kConst; }
  bool IsSource(ValueId v) const {
    auto k = g_.value(v).kind;
    return k == ir::ValueKind::kInput || k == ir::ValueKind::kParam;
  }
  double Rate(bool per_step) const { return per_step ? 1.0 : static_cast<double>(o_.micro_batches); }

  Status ResolveHints() {
    hint_.assign(g_.values.size(), NdSbp());
    for (const auto& [pattern, nd] : o_.hints) {
      bool matched = false;
      size_t colon = pattern.rfind(':');
      bool node_input = colon != std::string::npos && colon + 1 < pattern.size() &&
                        std::all_of(pattern.begin() + static_cast<long>(colon) + 1, pattern.end(), ::isdigit);
      if (node_input) {
        std::string node_glob = pattern.substr(0, colon);
        size_t idx = std::stoul(pattern.substr(colon + 1));
        for (const ir::Node& n : g_.nodes) {
          if (n.phase != ir::Phase::kForward || !GlobMatch(node_glob, n.name)) continue;
          if (idx >= n.in.size() || n.in[idx] == ir::kNoValue) {
            return Status::Invalid("[sbp] hint '" + pattern + "': node '" + n.name + "' has no input " + std::to_string(idx));
          }
          matched = true;
          RETURN_IF_ERROR(SetHint(n.in[idx], pattern, nd));
        }
      }
      for (size_t v = 0; v < g_.values.size() && !node_input; ++v) {
        if (!GlobMatch(pattern, g_.values[v].name)) continue;
        matched = true;
        RETURN_IF_ERROR(SetHint(static_cast<ValueId>(v), pattern, nd));
      }
      if (!matched) {
        return Status::Invalid("[sbp] hint '" + pattern + "' matches no tensor" +
                               (node_input ? " (no forward node matches '" + pattern.substr(0, colon) + "')" : std::string()));
      }
    }
    for (ValueId v : g_.inputs) {  // data-parallel mesh axes: where a data input is hinted split
      for (int a = 0; a < hint_[static_cast<size_t>(v)].size(); ++a)
        if (hint_[static_cast<size_t>(v)][a].is_split()) dp_axes_.push_back(a);
    }
    return Status::Ok();
  }

  Status SetHint(ValueId v, const std::string& pattern, const NdSbp& nd) {
    NdSbp& h = hint_[static_cast<size_t>(v)];
    if (h.size()) return Status::Ok();  // first match wins
    const ir::Value& val = g_.value(v);
    if (val.kind == ir::ValueKind::kConst) {
      return Status::Invalid("[sbp] hint '" + pattern + "' names '" + val.name + "', a constant; constants follow their consumers");
    }
    if (Status s = Check(val.type.shape, nd, PlaceOf(v)); !s.ok()) {
      return Status::Invalid("[sbp] hint '" + pattern + "' " + nd.ToString() + " does not fit tensor '" + val.name + "' " +
                             val.type.shape.ToString() + " on " + PlaceOf(v).ToString() + ": " + s.message());
    }
    h = nd;
    return Status::Ok();
  }

  // Whether a source may hold `nd` (fits, honours its hint and the data-parallel rule).
  bool SourceAllows(ValueId v, const NdSbp& nd) const {
    if (nd.any_partial()) return false;
    const NdSbp& h = hint_[static_cast<size_t>(v)];
    if (h.size()) return h == nd;
    if (!Check(g_.type(v).shape, nd, PlaceOf(v)).ok()) return false;
    if (g_.value(v).kind == ir::ValueKind::kParam) {
      for (int a : dp_axes_) {
        if (a >= nd.size()) continue;
        if (o_.zero != nd[a].is_split()) return false;
      }
    }
    return true;
  }

  // Expands the op's 1-D rule over the mesh axes. The rule for mesh axis a sees the pieces left by
  // the splits chosen on axes before it (device 0's piece), so that rules whose legality depends
  // on sizes (Reshape) are asked about what they will really split.
  Status Candidates(NodeId id) {
    const ir::Node& n = g_.node(id);
    std::vector<ir::TensorType> in, out;
    for (ValueId v : n.in) in.push_back(v == ir::kNoValue ? ir::TensorType{} : g_.type(v));
    for (ValueId v : n.out) out.push_back(g_.type(v));
    std::vector<NdSignature> cands;
    std::vector<Signature> chosen;
    Expand(id, in, out, chosen, cands);
    if (cands.empty()) return Refused(id);
    cands_.push_back(std::move(cands));
    return Status::Ok();
  }

  static ir::TensorType Split(ir::TensorType t, const Sbp& s, int64_t parts) {
    if (s.is_split() && s.axis() < t.shape.rank()) t.shape[s.axis()] = SplitRange(t.shape[s.axis()], static_cast<int>(parts), 0).size();
    return t;
  }

  void Expand(NodeId id, const std::vector<ir::TensorType>& in, const std::vector<ir::TensorType>& out,
              std::vector<Signature>& chosen, std::vector<NdSignature>& cands) const {
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    const auto a = static_cast<int>(chosen.size());
    if (a == p.ndim()) {
      NdSignature s;
      for (size_t i = 0; i < n.in.size(); ++i) {
        std::vector<Sbp> v;
        for (const Signature& c : chosen) v.push_back(c.in[i]);
        s.in.push_back(NdSbp(v));
      }
      for (size_t i = 0; i < n.out.size(); ++i) {
        std::vector<Sbp> v;
        for (const Signature& c : chosen) v.push_back(c.out[i]);
        s.out.push_back(NdSbp(v));
      }
      if (Fits(id, s)) cands.push_back(std::move(s));
      return;
    }
    const int64_t parts = p.hierarchy()[a];
    for (const Signature& sig : Def(n.op).sbp(n, in, out, parts)) {
      std::vector<ir::TensorType> in2 = in, out2 = out;
      for (size_t i = 0; i < in2.size(); ++i) in2[i] = Split(in2[i], sig.in[i], parts);
      for (size_t i = 0; i < out2.size(); ++i) out2[i] = Split(out2[i], sig.out[i], parts);
      chosen.push_back(sig);
      Expand(id, in2, out2, chosen, cands);
      chosen.pop_back();
    }
  }

  // A tensor axis split by several mesh axes must split evenly, so every device's piece is the
  // one the rules were asked about.
  static bool EvenNesting(const Shape& shape, const NdSbp& nd, const Placement& p) {
    for (int k = 0; k < shape.rank(); ++k) {
      int64_t parts = 1, splits = 0;
      for (int a = 0; a < nd.size(); ++a)
        if (nd[a].is_split() && nd[a].axis() == k) parts *= p.hierarchy()[a], ++splits;
      if (splits > 1 && shape[k] % parts) return false;
    }
    return true;
  }

  bool Fits(NodeId id, const NdSignature& s) const {
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    for (size_t i = 0; i < n.in.size(); ++i) {
      if (n.in[i] == ir::kNoValue) continue;
      const Shape& sh = g_.type(n.in[i]).shape;
      if (!Check(sh, s.in[i], p).ok() || !EvenNesting(sh, s.in[i], p)) return false;
    }
    for (size_t i = 0; i < n.out.size(); ++i) {
      ValueId v = n.out[i];
      const Shape& sh = g_.type(v).shape;
      if (!Check(sh, s.out[i], p).ok() || !EvenNesting(sh, s.out[i], p)) return false;
      const NdSbp& h = hint_[static_cast<size_t>(v)];
      if (h.size() && h != s.out[i]) return false;
    }
    return true;
  }

  Status Refused(NodeId id) const {
    const ir::Node& n = g_.node(id);
    for (size_t i = 0; i < n.out.size(); ++i) {
      const NdSbp& h = hint_[static_cast<size_t>(n.out[i])];
      if (!h.size()) continue;
      std::vector<ir::TensorType> in, out;
      for (ValueId v : n.in) in.push_back(v == ir::kNoValue ? ir::TensorType{} : g_.type(v));
      for (ValueId v : n.out) out.push_back(g_.type(v));
      std::string accepts;
      for (const Signature& s : Def(n.op).sbp(n, in, out, PlaceOfNode(id).hierarchy()[0]))
        accepts += "\n  " + s.ToString();
      return Status::Invalid("[sbp] tensor '" + g_.value(n.out[i]).name + "' is hinted " + h.ToString() + ", but op '" +
                             n.name + "' (" + Def(n.op).name + ") cannot produce it; per mesh axis it accepts:" + accepts);
    }
    return Status::Invalid("[sbp] op '" + n.name + "' (" + Def(n.op).name + ") has no signature that fits its tensors on " +
                           PlaceOfNode(id).ToString());
  }

  double Boxing(ValueId v, const NdSbp& have, const Placement& dst_place, const NdSbp& want) const {
    const Placement& src_place = PlaceOf(v);
    if (src_place == dst_place && have == want) return 0;
    std::string key = std::to_string(v) + have.ToString() + want.ToString() + dst_place.ToString();
    auto it = price_memo_.find(key);
    if (it != price_memo_.end()) return it->second;
    boxing::Request r{g_.type(v).shape, g_.type(v).dtype, src_place, have, dst_place, want};
    boxing::Estimate e = boxing::Price(r);
    // Point-to-point plans (send-recv, fallback) report no collectives but still pay a message's
    // latency; local ones (slice, zero-fill, assemble) pay nothing.
    double messages = e.collectives > 0 ? e.collectives : e.bytes_per_rank > 0 ? 1.0 : 0.0;
    double c = Rate(per_step_[static_cast<size_t>(v)]) *
               (e.bytes_per_rank / o_.cluster.bandwidth + messages * o_.cluster.latency);
    price_memo_.emplace(std::move(key), c);
    return c;
  }

  double Compute(NodeId id, const NdSignature& s) const {
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    double share = 1;
    for (int a = 0; a < p.ndim(); ++a) {
      bool splits = false;
      for (const NdSbp& x : s.in) splits = splits || (x.size() && !x[a].is_broadcast());
      for (const NdSbp& x : s.out) splits = splits || !x[a].is_broadcast();
      if (splits) share *= static_cast<double>(p.hierarchy()[a]);
    }
    bool micro = n.phase != ir::Phase::kOptimizer;
    return Rate(!micro) * Flops(g_, n) / share / o_.cluster.flops;
  }

  // Update ops read their parameter in place: their signature must take it as it is.
  bool Allowed(NodeId id, const NdSignature& s) const {
    const ir::Node& n = g_.node(id);
    if (n.op != OpKind::kSgdUpdate && n.op != OpKind::kAdamWUpdate) return true;
    return s.in[0] == a_.value_sbp[static_cast<size_t>(n.in[0])];
  }

  // Cost of node `id` taking candidate `s`, counting input edges and (when `outputs`) the boxing
  // from its outputs to their consumers' current wants.
  double Cost(NodeId id, const NdSignature& s, bool outputs) const {
    if (!Allowed(id, s)) return kInf;
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    double c = Compute(id, s);
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      if (v == ir::kNoValue || IsConst(v)) continue;
      if (s.in[i].any_partial() && IsConst(v)) continue;
      const NdSbp& have = a_.value_sbp[static_cast<size_t>(v)];
      if (!have.size()) {  // a source not yet placed takes what this op wants, when it may
        c += SourceAllows(v, s.in[i]) && PlaceOf(v) == p ? 0 : CheapestSource(v, p, s.in[i]);
      } else if (!WantedByOther(v, o_.node_stage[static_cast<size_t>(id)], s.in[i], id)) {
        c += Boxing(v, have, p, s.in[i]);  // shared with any other consumer that wants the same
      }
    }
    if (outputs) {
      for (size_t i = 0; i < n.out.size(); ++i) c += OutEdges(n.out[i], s.out[i]);
    }
    return c;
  }

  bool WantedByOther(ValueId v, int stage, const NdSbp& want, NodeId self) const {
    for (NodeId u : consumers_[static_cast<size_t>(v)]) {
      if (u == self || o_.node_stage[static_cast<size_t>(u)] != stage) continue;
      const NdSignature& us = a_.node_sig[static_cast<size_t>(u)];
      for (size_t i = 0; i < us.in.size(); ++i)
        if (g_.node(u).in[i] == v && us.in[i] == want) return true;
    }
    return false;
  }

  double OutEdges(ValueId v, const NdSbp& have) const {
    std::vector<std::pair<int, NdSbp>> seen;
    double c = 0;
    for (NodeId u : consumers_[static_cast<size_t>(v)]) {
      const NdSignature& us = a_.node_sig[static_cast<size_t>(u)];
      if (us.in.empty()) continue;  // not placed yet
      for (size_t i = 0; i < g_.node(u).in.size(); ++i) {
        if (g_.node(u).in[i] != v) continue;
        std::pair<int, NdSbp> key{o_.node_stage[static_cast<size_t>(u)], us.in[i]};
        if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
        seen.push_back(key);
        c += Boxing(v, have, PlaceOfNode(u), us.in[i]);
      }
    }
    return c;
  }

  std::vector<NdSbp> SourceCandidates(ValueId v) const {
    const Placement& p = PlaceOf(v);
    int rank = g_.type(v).shape.rank();
    std::vector<Sbp> opts = {Sbp::B()};
    for (int i = 0; i < rank; ++i) opts.push_back(Sbp::S(i));
    std::vector<NdSbp> out;
    std::vector<size_t> idx(static_cast<size_t>(p.ndim()), 0);
    for (;;) {
      std::vector<Sbp> s;
      for (size_t a = 0; a < idx.size(); ++a) s.push_back(opts[idx[a]]);
      NdSbp nd(s);
      if (SourceAllows(v, nd)) out.push_back(nd);
      size_t a = 0;
      for (; a < idx.size(); ++a) {
        if (++idx[a] < opts.size()) break;
        idx[a] = 0;
      }
      if (a == idx.size()) break;
    }
    return out;
  }

  double CheapestSource(ValueId v, const Placement& p, const NdSbp& want) const {
    double best = kInf;
    for (const NdSbp& nd : SourceCandidates(v)) best = std::min(best, Boxing(v, nd, p, want));
    return best;
  }

  Status Greedy(NodeId id) {
    const auto& cands = cands_[static_cast<size_t>(id)];
    size_t best = 0;
    double best_cost = kInf;
    for (size_t c = 0; c < cands.size(); ++c) {
      double cost = Cost(id, cands[c], false);
      if (cost < best_cost) {
        best_cost = cost;
        best = c;
      }
    }
    if (best_cost == kInf) return Status::Invalid("[sbp] op '" + g_.node(id).name + "' has no signature that takes its parameter as it is");
    Place(id, cands[best]);
    return Status::Ok();
  }

  void Place(NodeId id, const NdSignature& s) {
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      if (v == ir::kNoValue || IsConst(v) || a_.value_sbp[static_cast<size_t>(v)].size()) continue;
      if (SourceAllows(v, s.in[i]) && PlaceOf(v) == p) {
        a_.value_sbp[static_cast<size_t>(v)] = s.in[i];
        continue;
      }
      double best = kInf;
      for (const NdSbp& nd : SourceCandidates(v)) {
        double c = Boxing(v, nd, p, s.in[i]);
        if (c < best) {
          best = c;
          a_.value_sbp[static_cast<size_t>(v)] = nd;
        }
      }
    }
    for (size_t i = 0; i < n.out.size(); ++i) a_.value_sbp[static_cast<size_t>(n.out[i])] = s.out[i];
    a_.node_sig[static_cast<size_t>(id)] = s;
  }

  // Greedy pass, then refinement sweeps, from the current preset sources.
  Status Solve() {
    for (size_t n = 0; n < g_.nodes.size(); ++n) RETURN_IF_ERROR(Greedy(static_cast<NodeId>(n)));
    for (int sweep = 0; sweep < 8; ++sweep)
      if (!Refine()) break;
    return Status::Ok();
  }

  // Coordinate descent over the parameters' layouts, the decisions that shape a strategy (data vs
  // tensor parallel): for each parameter and each nd-SBP it may take, re-solve every op with the
  // other parameters held, and keep the change if the whole-graph cost falls. Escapes the local
  // optima of per-op refinement, where a layer's forward, backward and update must move together.
  void SearchParams() {
    double best = Objective();
    for (int round = 0; round < 3; ++round) {
      bool improved = false;
      for (const ir::ParamGrad& pg : tg_.params) {
        if (hint_[static_cast<size_t>(pg.param)].size()) continue;
        for (const NdSbp& nd : SourceCandidates(pg.param)) {
          if (nd == a_.value_sbp[static_cast<size_t>(pg.param)]) continue;
          Assignment saved = a_;
          std::vector<NdSbp> held;
          for (ValueId q : g_.params) held.push_back(a_.value_sbp[static_cast<size_t>(q)]);
          a_.value_sbp.assign(g_.values.size(), NdSbp());
          a_.node_sig.assign(g_.nodes.size(), NdSignature());
          for (size_t i = 0; i < g_.params.size(); ++i) a_.value_sbp[static_cast<size_t>(g_.params[i])] = held[i];
          a_.value_sbp[static_cast<size_t>(pg.param)] = nd;
          fix_params_ = true;
          Status s = Solve();
          fix_params_ = false;
          double c = s.ok() ? Objective() : kInf;
          if (c < best - 1e-12) {
            best = c;
            improved = true;
          } else {
            a_ = std::move(saved);
          }
        }
      }
      if (!improved) break;
    }
  }

  double Objective() {
    Total();
    return a_.compute_seconds + a_.boxing_seconds;
  }

  // Re-picks a parameter's nd-SBP together with its update op (which must take it as it is):
  // the cost of the boxing to its readers plus the update's cheapest signature.
  bool RefineParam(const ir::ParamGrad& pg) {
    ValueId v = pg.param;
    const NdSbp cur = a_.value_sbp[static_cast<size_t>(v)];
    const NdSignature cur_update = a_.node_sig[static_cast<size_t>(pg.update)];
    auto cost_with = [&](const NdSbp& nd, NdSignature* best_update) {
      a_.value_sbp[static_cast<size_t>(v)] = nd;
      double c = 0;
      for (NodeId u : consumers_[static_cast<size_t>(v)]) {
        if (u == pg.update) continue;
        const NdSignature& us = a_.node_sig[static_cast<size_t>(u)];
        for (size_t i = 0; i < us.in.size(); ++i)
          if (g_.node(u).in[i] == v) c += Boxing(v, nd, PlaceOfNode(u), us.in[i]);
      }
      double best = kInf;
      for (const NdSignature& s : cands_[static_cast<size_t>(pg.update)]) {
        double cu = Cost(pg.update, s, true);
        if (cu < best) {
          best = cu;
          *best_update = s;
        }
      }
      return c + best;
    };
    NdSignature upd = cur_update, tmp;
    double best = cost_with(cur, &upd);
    NdSbp best_nd = cur;
    for (const NdSbp& nd : SourceCandidates(v)) {
      double c = cost_with(nd, &tmp);
      if (c < best - 1e-12) {
        best = c;
        best_nd = nd;
        upd = tmp;
      }
    }
    a_.value_sbp[static_cast<size_t>(v)] = best_nd;
    if (best < kInf) Place(pg.update, upd);
    return !(best_nd == cur);
  }

  bool Refine() {
    bool changed = false;
    if (!fix_params_)
      for (const ir::ParamGrad& pg : tg_.params) changed = RefineParam(pg) || changed;
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      auto id = static_cast<NodeId>(n);
      const auto& cands = cands_[n];
      const NdSignature cur = a_.node_sig[n];
      double best_cost = Cost(id, cur, true);
      size_t best = cands.size();
      for (size_t c = 0; c < cands.size(); ++c) {
        double cost = Cost(id, cands[c], true);
        if (cost < best_cost - 1e-12) {
          best_cost = cost;
          best = c;
        }
      }
      if (best < cands.size()) {
        Place(id, cands[best]);
        changed = true;
      }
    }
    return changed;
  }

  void Total() {
    a_.compute_seconds = 0;
    a_.boxing_seconds = 0;
    for (size_t n = 0; n < g_.nodes.size(); ++n) a_.compute_seconds += Compute(static_cast<NodeId>(n), a_.node_sig[n]);
    for (size_t v = 0; v < g_.values.size(); ++v) {
      if (a_.value_sbp[v].size()) a_.boxing_seconds += OutEdges(static_cast<ValueId>(v), a_.value_sbp[v]);
    }
  }

  const ir::TrainingGraph& tg_;
  const ir::Graph& g_;
  const AssignOptions& o_;
  Assignment a_;
  std::vector<std::vector<ir::NodeId>> consumers_;
  std::vector<bool> per_step_;
  std::vector<NdSbp> hint_;
  std::vector<int> dp_axes_;
  std::vector<std::vector<NdSignature>> cands_;
  mutable std::unordered_map<std::string, double> price_memo_;
  bool fix_params_ = false;
};

}  // namespace

Result<Assignment> Assign(const ir::TrainingGraph& tg, const AssignOptions& opt) { return Assigner(tg, opt).Run(); }

}  // namespace fr::sbp
