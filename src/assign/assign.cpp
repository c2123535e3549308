#include "assign/assign.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <limits>
#include <map>
#include <memory>
#include <optional>
#include <unordered_map>

#include "assign/step.h"
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

}  // namespace

double OpFlops(const ir::Graph& g, const ir::Node& n) {
  if (n.op == OpKind::kConv || n.op == OpKind::kConvGradData || n.op == OpKind::kConvGradWeight) {
    // 2 * (outputs of the forward convolution) * (one output's window: C/group * kH * kW)
    const Shape& w = n.op == OpKind::kConvGradWeight ? g.type(n.out[0]).shape : g.type(n.in[1]).shape;
    const Shape& y = n.op == OpKind::kConv ? g.type(n.out[0]).shape : g.type(n.in[0]).shape;
    return 2.0 * static_cast<double>(y.numel()) * static_cast<double>(w[1] * w[2] * w[3]);
  }
  if (n.op != OpKind::kMatMul && n.op != OpKind::kGemm) return 0;
  const Shape& a = g.type(n.in[0]).shape;
  int64_t k = n.attrs.Int("transA") ? a[a.rank() - 2] : a[a.rank() - 1];
  if (n.attrs.Int("contract_batch")) k = a.numel() / a[a.rank() - 1];
  return 2.0 * static_cast<double>(g.type(n.out[0]).shape.numel()) * static_cast<double>(k);
}

double OpSeconds(const ir::Graph& g, const ir::Node& n, const Cluster& c) {
  if (const double f = OpFlops(g, n); f > 0) return f / c.flops;
  double elements = 0;
  for (ValueId v : n.out) elements += static_cast<double>(g.type(v).shape.numel());
  for (ValueId v : n.in)
    if (v != ir::kNoValue) elements += static_cast<double>(g.type(v).shape.numel());
  bool special = false;
  switch (n.op) {
    case OpKind::kTanh: case OpKind::kSigmoid: case OpKind::kErf: case OpKind::kSoftmax: case OpKind::kLogSoftmax:
    case OpKind::kLayerNormalization: case OpKind::kErfGrad: case OpKind::kGelu: case OpKind::kGeluGrad:
    case OpKind::kMaskedSoftmax: case OpKind::kCrossEntropy: case OpKind::kCrossEntropyGrad: case OpKind::kSilu: case OpKind::kSiluGrad:
    case OpKind::kExp: case OpKind::kLog: case OpKind::kSin: case OpKind::kCos: case OpKind::kPow:
      special = true;
      break;
    default:
      break;
  }
  const double per = special ? c.special_element : c.stream_element;
  return elements * (per > 0 ? per : (special ? 80.0 : 16.0) / c.flops);
}

namespace {

class Assigner {
 public:
  Assigner(const ir::TrainingGraph& tg, const AssignOptions& o) : tg_(tg), g_(tg.graph), o_(o) {}

  Result<Assignment> Run() {
    IndexValues();
    IndexStages();
    RETURN_IF_ERROR(ResolveHints());
    for (size_t n = 0; n < g_.nodes.size(); ++n) RETURN_IF_ERROR(Candidates(static_cast<NodeId>(n)));
    IndexSlots();
    IndexNeighbours();
    RETURN_IF_ERROR(SolveFromStarts());
    for (size_t n = 0; n < g_.nodes.size(); ++n) a_.node_sig[n] = Sig(static_cast<NodeId>(n));
    Total();
    Breakdown();
    return a_;
  }

 private:
  // Each value's stage, whether it moves once a step, and its price class.
  void IndexValues() {
    a_.value_stage = o_.value_stage;
    a_.value_stage.resize(g_.values.size(), 0);
    a_.value_sbp.assign(g_.values.size(), NdSbp());
    a_.node_sig.resize(g_.nodes.size());
    consumers_ = g_.Consumers();
    backward_of_.assign(g_.nodes.size(), {});
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
    std::map<std::pair<std::vector<int64_t>, int>, int> classes;
    for (size_t id = 0; id < g_.values.size(); ++id) {
      const ir::Value& v = g_.values[id];
      // Gradients and parameters price apart from other tensors of their type, and parameters
      // under ZeRO apart from others (Priced: buckets); other tensors moved once a step apart from
      // those moved every micro-batch (Priced: shared memory). Without that, the scalar loss's
      // all-reduce per micro-batch, priced while the assigner weighed its accumulator's
      // signatures, set the price of the gradient norm's once a step.
      const int role = g_.ProducedBy(static_cast<ValueId>(id), OpKind::kAccumulate) ? 1
                       : v.kind != ir::ValueKind::kParam                             ? (per_step_[id] ? 4 : 0)
                       : o_.zero                                                     ? 3
                                                                                     : 2;
      const int kind = 8 * static_cast<int>(v.type.dtype) + role;
      auto [it, fresh] = classes.emplace(std::make_pair(v.type.shape.dims(), kind), static_cast<int>(classes.size()));
      type_class_.push_back(it->second);
      if (fresh && o_.prices) shared_type_.push_back(o_.prices->TypeId(v.type.shape, v.type.dtype, role));
    }
    price_memo_.resize(classes.size() * o_.stages.size() * o_.stages.size());
  }

  // Each node's work, the nodes' map, and per stage pair and stage what pricing needs.
  void IndexStages() {
    for (const ir::Node& node : g_.nodes) work_.push_back(OpSeconds(g_, node, o_.cluster));
    MapNodes();
    for (const Placement& a : o_.stages)
      for (const Placement& b : o_.stages) same_place_.push_back(a == b);
    has_grad_.assign(g_.values.size(), false);
    for (const ir::Value& v : g_.values)
      if (v.grad_of != ir::kNoValue) has_grad_[static_cast<size_t>(v.grad_of)] = true;
    // Each stage's gradients and parameters, whole: what its buckets carry.
    grad_bytes_.assign(o_.stages.size(), 0);
    param_bytes_.assign(o_.stages.size(), 0);
    for (size_t v = 0; v < g_.values.size(); ++v) {
      const ir::Value& val = g_.values[v];
      const auto bytes = static_cast<double>(val.type.shape.numel() * static_cast<int64_t>(SizeOf(val.type.dtype)));
      if (g_.ProducedBy(static_cast<ValueId>(v), OpKind::kAccumulate)) grad_bytes_[static_cast<size_t>(a_.value_stage[v])] += bytes;
      if (val.kind == ir::ValueKind::kParam) param_bytes_[static_cast<size_t>(a_.value_stage[v])] += bytes;
    }
    if (o_.prices)
      for (size_t s = 0; s < o_.stages.size(); ++s)
        shared_place_.push_back(o_.prices->PlaceId(o_.stages[s], grad_bytes_[s], param_bytes_[s]));
  }

  // Each forward node's backward nodes, each parameter's update, and the nodes that lead a layer.
  void IndexNeighbours() {
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const ir::Node& node = g_.nodes[n];
      if (node.phase == ir::Phase::kBackward && node.origin >= 0) backward_of_[static_cast<size_t>(node.origin)].push_back(static_cast<NodeId>(n));
    }
    for (const ir::ParamGrad& pg : tg_.params) update_of_[pg.param] = pg.update;
    for (const ir::Node& node : g_.nodes) {
      bool reads_param = false;
      for (ValueId v : node.in) reads_param = reads_param || (v != ir::kNoValue && g_.value(v).kind == ir::ValueKind::kParam);
      const bool matmul = node.op == OpKind::kMatMul || node.op == OpKind::kGemm;
      leads_.push_back(node.phase == ir::Phase::kForward && (reads_param || matmul));
    }
  }

  // Solves from each start, polishes, and keeps the cheapest in a_ and sig_.
  Status SolveFromStarts() {
    // Two starts, each polished by refinement and group moves; the cheaper wins (ties: the first).
    Assignment best;
    std::vector<int> best_sig;
    double best_cost = kInf;
    // Under ZeRO, a third start: the second, solved with the parameters whole on the
    // data-parallel axes (as without ZeRO), then sharded, each with its update, and polished
    // again. From sharded parameters the greedy pass can settle where no move of one layer
    // leads out, into a mixed layout that all-reduces activations every micro-batch and costs
    // more by the cost model's own objective than data parallelism with sharded parameters.
    const int starts = o_.zero && !dp_axes_.empty() ? 3 : 2;
    int world = 1;
    for (const Placement& p : o_.stages)
      for (int r : p.ranks()) world = std::max(world, r + 1);
    for (int start = 0; start < starts; ++start) {
      mirror_ = start > 0;
      whole_params_ = start == 2;
      a_.value_sbp.assign(g_.values.size(), NdSbp());
      sig_.assign(g_.nodes.size(), -1);
      RETURN_IF_ERROR(Solve());
      if (o_.group_moves) Polish();
      if (whole_params_) {
        whole_params_ = false;
        for (const ir::ParamGrad& pg : tg_.params) RefineParam(pg);
        for (int sweep = 0; sweep < 8; ++sweep)
          if (!Refine(sweep == 0)) break;
        if (o_.group_moves) Polish();
        if (!ParamsAllowed()) continue;  // some parameter found no sharded layout it can update in
      }
      // Under ZeRO the starts compete on the step model's time (what `flowrun plan` predicts and
      // `flowrun search` ranks by), elsewhere on the objective the moves descend. That objective
      // counts each movement's latency whole, where the step model has a stage's parameter
      // gathers, all started as the step starts, pay one: with ZeRO every parameter is gathered,
      // and the objective preferred layouts that measured slower (docs/performance-history.md).
      double c = Objective();
      if (o_.zero) {
        for (size_t n = 0; n < g_.nodes.size(); ++n) a_.node_sig[n] = Sig(static_cast<NodeId>(n));
        Breakdown();
        c = ModelStep(g_, o_, a_, world).step_s;
      }
      if (c < best_cost - 1e-12) {
        best_cost = c;
        best = a_;
        best_sig = sig_;
      }
    }
    a_ = std::move(best);
    sig_ = std::move(best_sig);
    return Status::Ok();
  }

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
        size_t idx = SIZE_MAX;  // stays so when the digits overflow: no node has that input
        std::from_chars(pattern.data() + colon + 1, pattern.data() + pattern.size(), idx);
        for (const ir::Node& n : g_.nodes) {
          if (n.phase != ir::Phase::kForward) continue;
          // Not the names a fused node replaced: NODE:i counts this node's own inputs.
          if (!GlobMatch(node_glob, n.name) && (n.split_from.empty() || !GlobMatch(node_glob, n.split_from))) continue;
          if (idx >= n.in.size() || n.in[idx] == ir::kNoValue) {
            return Status::Invalid("[sbp] hint '" + pattern + "': node '" + n.name + "' has no input " + pattern.substr(colon + 1));
          }
          matched = true;
          RETURN_IF_ERROR(SetHint(n.in[idx], pattern, nd));
        }
      }
      for (size_t v = 0; v < g_.values.size() && !node_input; ++v) {
        const ir::Value& val = g_.values[v];
        if (!GlobMatch(pattern, val.name) && (val.split_from.empty() || !GlobMatch(pattern, val.split_from))) continue;
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
    // As for an op's tensors (Fits): a source nested unevenly would leave its readers, the
    // update of a ZeRO-sharded parameter among them, no signature to take it.
    if (!Check(g_.type(v).shape, nd, PlaceOf(v)).ok() || !EvenNesting(g_.type(v).shape, nd, PlaceOf(v))) return false;
    if (g_.value(v).kind == ir::ValueKind::kParam) {
      const bool zero = o_.zero && !whole_params_ && ZeroShardable(v);
      for (int a : dp_axes_) {
        if (a >= nd.size()) continue;
        if (zero != nd[a].is_split()) return false;
      }
    }
    return true;
  }

  // Whether ZeRO can shard parameter v over every data-parallel axis with pieces the ops take (a
  // tensor axis per mesh axis, nested evenly). One that cannot (fc3.bias [10] split by 2 x 2) stays
  // whole on those axes, as without ZeRO, instead of leaving its update no signature.
  bool ZeroShardable(ValueId v) const {
    if (zero_shardable_.empty()) zero_shardable_.assign(g_.values.size(), -1);
    int8_t& known = zero_shardable_[static_cast<size_t>(v)];
    if (known >= 0) return known != 0;
    const Shape& shape = g_.type(v).shape;
    const Placement& p = PlaceOf(v);
    std::vector<int> dp;
    for (int a : dp_axes_)
      if (a < p.hierarchy().rank()) dp.push_back(a);
    // Every choice of a tensor axis per data-parallel mesh axis, the other mesh axes B.
    std::vector<int> axis(dp.size(), 0);
    known = 0;
    for (bool more = shape.rank() > 0; more && !known;) {
      NdSbp nd = NdSbp::Broadcast(p.hierarchy().rank());
      for (size_t i = 0; i < dp.size(); ++i) nd[dp[i]] = Sbp::S(axis[i]);
      known = Check(shape, nd, p).ok() && EvenNesting(shape, nd, p);
      more = false;
      for (size_t i = 0; i < axis.size() && !more; ++i) {
        if (++axis[i] < shape.rank()) more = true;
        else axis[i] = 0;
      }
    }
    return known != 0;
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
      for (int x = 0; x < p.ndim(); ++x) {
        bool splits = false;
        for (const NdSbp& y : s.in) splits = splits || (y.size() && !y[x].is_broadcast());
        for (const NdSbp& y : s.out) splits = splits || !y[x].is_broadcast();
        if (splits) s.work_axes |= static_cast<uint8_t>(1u << x);
      }
      if (Fits(id, s)) cands.push_back(std::move(s));
      return;
    }
    const int64_t parts = p.hierarchy()[a];
    for (const Signature& sig : Def(n.op).sbp(n, in, out, parts)) {
      if (PartialBool(sig, in, out)) continue;
      std::vector<ir::TensorType> in2 = in, out2 = out;
      for (size_t i = 0; i < in2.size(); ++i) in2[i] = Split(in2[i], sig.in[i], parts);
      for (size_t i = 0; i < out2.size(); ++i) out2[i] = Split(out2[i], sig.out[i], parts);
      chosen.push_back(sig);
      Expand(id, in2, out2, chosen, cands);
      chosen.pop_back();
    }
  }

  // A partial bool (a mask passed through a Cast or a Reshape, whose rules offer P for any type):
  // booleans have no sum to reduce pieces with, and the communicators none for them.
  static bool PartialBool(const Signature& sig, const std::vector<ir::TensorType>& in, const std::vector<ir::TensorType>& out) {
    for (size_t i = 0; i < in.size(); ++i)
      if (sig.in[i].is_partial() && in[i].dtype == DType::kBool) return true;
    for (size_t i = 0; i < out.size(); ++i)
      if (sig.out[i].is_partial() && out[i].dtype == DType::kBool) return true;
    return false;
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
      return Status::Invalid("[sbp] tensor '" + g_.value(n.out[i]).name + "' is hinted " + h.ToString() + ", but op '" +
                             n.name + "' (" + Def(n.op).name + ") cannot produce it; per mesh axis it accepts:" + Accepts(id));
    }
    return Status::Invalid("[sbp] op '" + n.name + "' (" + Def(n.op).name + ") has no signature that fits its tensors on " +
                           PlaceOfNode(id).ToString());
  }

  // Why Greedy found no signature for node `id`: its inputs are held as hinted (or as a parameter's
  // fixed pieces), and none of the op's signatures takes them so.
  Status NoneTakes(NodeId id) const {
    const ir::Node& n = g_.node(id);
    std::string held;
    for (ValueId v : n.in) {
      if (v == ir::kNoValue || !hint_[static_cast<size_t>(v)].size()) continue;
      held += std::string(held.empty() ? "" : ", ") + "'" + g_.value(v).name + "' is hinted " + hint_[static_cast<size_t>(v)].ToString();
    }
    const std::string accepts = Accepts(id);
    return Status::Invalid("[sbp] op '" + n.name + "' (" + Def(n.op).name + ") has no signature that takes its inputs as they are" +
                           (held.empty() ? std::string() : " (" + held + ")") +
                           (accepts.empty() ? "; it has none for these shapes on " + PlaceOfNode(id).ToString()
                                            : "; per mesh axis it accepts:" + accepts));
  }

  // The signatures node `id`'s op offers on one mesh axis of its placement, a line each.
  std::string Accepts(NodeId id) const {
    const ir::Node& n = g_.node(id);
    std::vector<ir::TensorType> in, out;
    for (ValueId v : n.in) in.push_back(v == ir::kNoValue ? ir::TensorType{} : g_.type(v));
    for (ValueId v : n.out) out.push_back(g_.type(v));
    std::string lines;
    for (const Signature& s : Def(n.op).sbp(n, in, out, PlaceOfNode(id).hierarchy()[0])) lines += "\n  " + s.ToString();
    return lines;
  }

  int NodeOf(int rank) const { return o_.cluster.devices_per_node > 0 ? rank / o_.cluster.devices_per_node : 0; }

  // Which movements involve ranks on more than one node, per stage pair and per (stage, mesh
  // axis): computed once, as CrossesNodes asks on every price the memo misses.
  void MapNodes() {
    const size_t S = o_.stages.size();
    spans_pair_.assign(S * S, false);
    spans_axis_.assign(S, {});
    if (o_.cluster.devices_per_node <= 0) return;
    for (size_t s = 0; s < S; ++s) {
      const Placement& a = o_.stages[s];
      const int node = NodeOf(a.ranks()[0]);
      for (size_t t = 0; t < S; ++t) {
        bool spans = false;
        for (int r : a.ranks()) spans = spans || NodeOf(r) != node;
        for (int r : o_.stages[t].ranks()) spans = spans || NodeOf(r) != node;
        spans_pair_[s * S + t] = spans;
      }
      // Mesh axis x spans nodes when two devices that differ only in their coordinate on x do.
      for (int x = 0; x < a.ndim(); ++x) {
        bool spans = false;
        for (int i = 0; i < a.size() && !spans; ++i) {
          std::vector<int64_t> c = a.Coords(i);
          c[static_cast<size_t>(x)] = 0;
          for (int j = 0; j < a.size() && !spans; ++j) {
            std::vector<int64_t> d = a.Coords(j);
            d[static_cast<size_t>(x)] = 0;
            spans = d == c && NodeOf(a.ranks()[static_cast<size_t>(j)]) != NodeOf(a.ranks()[static_cast<size_t>(i)]);
          }
        }
        spans_axis_[s].push_back(spans);
      }
    }
  }

  // Whether a movement from stage `src` to stage `dst` by `strategy` ("all-gather@1 > ..." on a
  // mesh, one step name on 1-D) involves ranks on different nodes.
  bool CrossesNodes(int src, int dst, const std::string& strategy) const {
    const size_t S = o_.stages.size();
    if (!spans_pair_[static_cast<size_t>(src) * S + static_cast<size_t>(dst)]) return false;
    const Placement& a = o_.stages[static_cast<size_t>(src)];
    if (src != dst || a.ndim() == 1 || strategy.find('@') == std::string::npos) return true;
    // On a mesh, only the axes the steps run along matter.
    for (size_t at = strategy.find('@'); at != std::string::npos; at = strategy.find('@', at + 1)) {
      int axis = std::atoi(strategy.c_str() + at + 1);
      if (axis < 0 || axis >= a.ndim() || spans_axis_[static_cast<size_t>(src)][static_cast<size_t>(axis)]) return true;
    }
    return false;
  }

  // The price of moving value v from `have` to `want` on stage `dst`'s placement, memoised on
  // small integer keys (this is the assigner's innermost call).
  double Boxing(ValueId v, const NdSbp& have, int dst, const NdSbp& want) const {
    const size_t src = static_cast<size_t>(a_.value_stage[static_cast<size_t>(v)]);
    if (have == want && same_place_[src * o_.stages.size() + static_cast<size_t>(dst)]) return 0;
    const double rate = Rate(per_step_[static_cast<size_t>(v)]);
    // Values of one type on one stage price alike: the key is the type's class, not the value.
    // One small table per (type class, stage pair) keeps a search's lookups for one value close.
    const int type = type_class_[static_cast<size_t>(v)];
    const size_t S = o_.stages.size();
    auto& memo = price_memo_[(static_cast<size_t>(type) * S + src) * S + static_cast<size_t>(dst)];
    if (!memo) memo = std::make_unique<FlatMap<double, 2>>(64);
    const uint64_t h = Code(have), w = Code(want);
    const FlatMap<double, 2>::Key key{h, w};
    if (const double* c = memo->Find(key)) return rate * *c;
    PriceCache::Key shared{};
    if (o_.prices) {
      shared = {static_cast<uint64_t>(shared_type_[static_cast<size_t>(type)]) << 32 |
                    static_cast<uint64_t>(shared_place_[src]) << 16 | static_cast<uint64_t>(shared_place_[static_cast<size_t>(dst)]),
                h, w};
      if (std::optional<double> c = o_.prices->Find(shared)) {
        memo->Put(key, *c);
        return rate * *c;
      }
    }
    const double c = Priced(v, have, dst, want).seconds;
    memo->Put(key, c);
    if (o_.prices) o_.prices->Put(shared, c);
    return rate * c;
  }

  // One movement's seconds (rate 1), and the part of them that is latency and per-task overhead:
  // collectives pay a latency per round (ceil(log2 p) for p ranks, boxing::Estimate::rounds),
  // point-to-point messages (send-recv, the fallback) a message's (within a node), each also the
  // runtime's overhead per task; local plans (slice, zero-fill, assemble) pay nothing.
  struct Price {
    double seconds = 0, latency = 0;
    double p2p_messages = 0;  // of the latency: messages at p2p_latency each
    bool bucketed = false;
  };
  Price Priced(ValueId v, const NdSbp& have, int dst, const NdSbp& want) const {
    boxing::Request r{g_.type(v).shape, g_.type(v).dtype, PlaceOf(v), have, o_.stages[static_cast<size_t>(dst)], want};
    boxing::Estimate e = boxing::Price(r);
    const bool inter = CrossesNodes(a_.value_stage[static_cast<size_t>(v)], dst, e.strategy);
    const double latency = inter ? o_.cluster.latency_inter : o_.cluster.latency;
    const bool p2p = !inter && o_.cluster.p2p_latency > 0;
    const double message = p2p ? o_.cluster.p2p_latency : latency;
    // A once-a-step float32 sum all-reduce within a node (a gradient's, the norm's) runs through
    // shared memory (actor::SetUpCollectives, Cluster::shared_latency): one latency, no rounds, and
    // what it reads at its bandwidth. As the runtime does, only while the stage's gradients fit
    // the ranks' shared windows (boxing::kSharedReduceBytesPerRank: the runtime sends a larger
    // model's partly through MPI; this prices them all so). Per micro-batch all-reduces (tensor
    // parallelism's activations) stay with MPI: priced through shared memory, they made partial
    // activations cheap enough that the assignment left data parallelism for mixed layouts.
    const size_t from = static_cast<size_t>(a_.value_stage[static_cast<size_t>(v)]);
    bool shared = per_step_[static_cast<size_t>(v)] && !inter && o_.cluster.shared_latency > 0 && e.allreduces.count > 0 &&
                  g_.type(v).dtype == DType::kF32 && grad_bytes_[from] <= static_cast<double>(boxing::kSharedReduceBytesPerRank);
    for (int a = 0; a < have.size(); ++a) shared = shared && !(have[a].is_partial() && have[a].reduce() != Reduce::kSum);
    const boxing::Estimate::AllReduces moved_here = shared ? e.allreduces : boxing::Estimate::AllReduces{};
    const double waits = (e.rounds - moved_here.rounds) * latency + moved_here.count * o_.cluster.shared_latency +
                         e.messages * message;
    const double through_shared = shared ? moved_here.read / o_.cluster.shared_bandwidth : 0.0;
    const double overhead = (e.collectives + e.messages) * o_.cluster.op_overhead;
    double wait = waits + overhead;
    // A gradient accumulator reduced by one all-reduce or reduce-scatter rides in a bucket
    // (plan/lower.h): the stage's gradients fill ceil(their bytes / bucket_bytes)
    // buckets of one collective each. Each bucket starts as its last accumulator finishes, so all
    // but the last reduce while backward still computes: the stage pays the runtime's overhead per
    // bucket but the latency of one, and each gradient its bytes' share of those. A parameter
    // gathered once a step by ZeRO rides in a parameter bucket: the same over the stage's
    // parameters, whose buckets start together as the step does (under ZeRO: lowering buckets
    // no other parameter gathers).
    const ir::Value& val = g_.value(v);
    const size_t stage = static_cast<size_t>(a_.value_stage[static_cast<size_t>(v)]);
    const bool one_step = e.strategy.find('>') == std::string::npos && stage == static_cast<size_t>(dst);
    const bool gradient = g_.ProducedBy(v, OpKind::kAccumulate) &&
                          (e.strategy.starts_with("all-reduce") || e.strategy.starts_with("reduce-scatter"));
    const bool param = o_.zero && val.kind == ir::ValueKind::kParam && e.strategy.starts_with("all-gather");
    const bool bucketed = one_step && (gradient || param);
    if (bucketed) {
      const double bytes = static_cast<double>(val.type.shape.numel() * static_cast<int64_t>(SizeOf(val.type.dtype)));
      const double all = gradient ? grad_bytes_[stage] : param_bytes_[stage];
      const int64_t bucket = o_.bucket_bytes > 0 ? o_.bucket_bytes : boxing::kDefaultBucketBytes;
      const double buckets = std::ceil(all / static_cast<double>(bucket));
      wait = bytes / all * (waits + overhead * std::max(1.0, buckets));
    }
    return {(e.bytes_per_rank - moved_here.bytes) / (inter ? o_.cluster.bandwidth_inter : o_.cluster.bandwidth) + through_shared + wait, wait,
            p2p && !bucketed ? static_cast<double>(e.messages) : 0.0, bucketed};
  }

  double Compute(NodeId id, const NdSignature& s) const {
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    double share = 1;
    for (int a = 0; a < p.ndim(); ++a)
      if (s.work_axes >> a & 1) share *= static_cast<double>(p.hierarchy()[a]);
    bool micro = n.phase != ir::Phase::kOptimizer;
    return Rate(!micro) * (work_[static_cast<size_t>(id)] / share + o_.cluster.op_overhead);
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
    double c = Compute(id, s);
    for (size_t i = 0; i < n.in.size(); ++i) c += InCost(id, i, s.in[i]);
    if (outputs) {
      for (size_t i = 0; i < n.out.size(); ++i) c += OutEdges(n.out[i], s.out[i]);
    }
    return c;
  }

  // What node id pays to read its input i as `want`: nothing for constants; for a source not yet
  // placed, nothing when it may take `want`, else its cheapest layout's boxing; otherwise the
  // boxing from the value's nd-SBP, unless another consumer on the stage wants the same (shared).
  double InCost(NodeId id, size_t i, const NdSbp& want) const {
    const ValueId v = g_.node(id).in[i];
    if (v == ir::kNoValue || IsConst(v)) return 0;
    const int stage = o_.node_stage[static_cast<size_t>(id)];
    const NdSbp& have = a_.value_sbp[static_cast<size_t>(v)];
    if (!have.size()) return SourceAllows(v, want) && PlaceOf(v) == PlaceOfNode(id) ? 0 : CheapestSource(v, stage, want);
    return WantedByOther(v, stage, want, id) ? 0 : Boxing(v, have, stage, want);
  }

  // Slots and per-candidate compute, for CostsOf: each slot's distinct nd-SBPs and, per
  // candidate, which one it takes.
  void IndexSlots() {
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const auto& cands = cands_[n];
      Slots sl;
      const size_t nin = g_.nodes[n].in.size(), nslots = nin + g_.nodes[n].out.size();
      sl.distinct.resize(nslots);
      sl.index.resize(cands.size() * nslots);
      for (size_t k = 0; k < cands.size(); ++k) {
        for (size_t j = 0; j < nslots; ++j) {
          const NdSbp& nd = j < nin ? cands[k].in[j] : cands[k].out[j - nin];
          auto& d = sl.distinct[j];
          size_t at = static_cast<size_t>(std::find(d.begin(), d.end(), nd) - d.begin());
          if (at == d.size()) d.push_back(nd);
          sl.index[k * nslots + j] = static_cast<uint16_t>(at);
        }
      }
      size_t offset = 0;
      for (const auto& d : sl.distinct) {
        sl.offset.push_back(offset);
        offset += d.size();
      }
      slots_.push_back(std::move(sl));
      cand_compute_.emplace_back();
      for (const NdSignature& s : cands) cand_compute_.back().push_back(Compute(static_cast<NodeId>(n), s));
    }
  }

  // Cost(id, c, outputs) of every candidate c of node id, into costs_ (same sums, same order):
  // the boxing of each distinct nd-SBP an input or output slot takes is priced once, not once per
  // candidate (a 2-D mesh gives an op tens of candidates but a slot a handful of nd-SBPs).
  const std::vector<double>& CostsOf(NodeId id, bool outputs) const {
    const ir::Node& n = g_.node(id);
    const Slots& sl = slots_[static_cast<size_t>(id)];
    const auto& cands = cands_[static_cast<size_t>(id)];
    const size_t nin = n.in.size(), nslots = sl.distinct.size();
    slot_costs_.clear();
    for (size_t j = 0; j < nslots; ++j)
      for (const NdSbp& nd : sl.distinct[j])
        slot_costs_.push_back(j < nin ? InCost(id, j, nd) : outputs ? OutEdges(n.out[j - nin], nd) : 0);
    costs_.resize(cands.size());
    for (size_t k = 0; k < cands.size(); ++k) {
      if (!Allowed(id, cands[k])) {
        costs_[k] = kInf;
        continue;
      }
      double c = cand_compute_[static_cast<size_t>(id)][k];
      for (size_t j = 0; j < nslots; ++j) c += slot_costs_[sl.offset[j] + sl.index[k * nslots + j]];
      costs_[k] = c;
    }
    return costs_;
  }

  bool WantedByOther(ValueId v, int stage, const NdSbp& want, NodeId self) const {
    for (NodeId u : consumers_[static_cast<size_t>(v)]) {
      if (u == self || o_.node_stage[static_cast<size_t>(u)] != stage) continue;
      const NdSignature& us = Sig(u);
      for (size_t i = 0; i < us.in.size(); ++i)
        if (g_.node(u).in[i] == v && us.in[i] == want) return true;
    }
    return false;
  }

  // The boxing from `have` to every distinct (stage, nd-SBP) v's placed consumers want; each moves
  // once however many read it.
  double OutEdges(ValueId v, const NdSbp& have) const {
    const std::vector<NodeId>& cons = consumers_[static_cast<size_t>(v)];
    // Whether a consumer input before (j, i) in this order wants the same.
    auto earlier = [&](size_t j, size_t i, int stage, const NdSbp& want) {
      for (size_t jj = 0; jj <= j; ++jj) {
        const NodeId u = cons[jj];
        const NdSignature& us = Sig(u);
        if (us.in.empty() || o_.node_stage[static_cast<size_t>(u)] != stage) continue;
        const size_t end = jj == j ? i : us.in.size();
        for (size_t ii = 0; ii < end; ++ii)
          if (g_.node(u).in[ii] == v && us.in[ii] == want) return true;
      }
      return false;
    };
    double c = 0;
    for (size_t j = 0; j < cons.size(); ++j) {
      const NodeId u = cons[j];
      const NdSignature& us = Sig(u);
      if (us.in.empty()) continue;  // not placed yet
      const int stage = o_.node_stage[static_cast<size_t>(u)];
      for (size_t i = 0; i < us.in.size(); ++i) {
        if (g_.node(u).in[i] != v || earlier(j, i, stage, us.in[i])) continue;
        c += Boxing(v, have, stage, us.in[i]);
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

  double CheapestSource(ValueId v, int stage, const NdSbp& want) const {
    double best = kInf;
    for (const NdSbp& nd : SourceCandidates(v)) best = std::min(best, Boxing(v, nd, stage, want));
    return best;
  }

  // The greedy pass sees only the ops already placed, and the backward ops come after every
  // forward one. So a forward op also pays, up front, for the backward movement its choice implies:
  // the gradient of each input it reads moves back from the dual of what it wants to the dual of
  // what the producer made, and a parameter's gradient moves once a step to the parameter's layout.
  double MirrorCost(NodeId id, const NdSignature& s) const {
    const ir::Node& n = g_.node(id);
    double c = 0;
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      if (v == ir::kNoValue || IsConst(v) || !has_grad_[static_cast<size_t>(v)]) continue;
      NdSbp back = Dual(s, s.in[i]);
      if (!back.size()) continue;
      const ir::Value& val = g_.value(v);
      if (val.kind == ir::ValueKind::kParam) {
        c += Boxing(v, back, a_.value_stage[static_cast<size_t>(v)], s.in[i]);
      } else if (val.producer >= 0 && a_.value_sbp[static_cast<size_t>(v)].size()) {
        const NdSignature& ps = Sig(val.producer);
        NdSbp there = Dual(ps, a_.value_sbp[static_cast<size_t>(v)]);
        if (there.size()) c += Boxing(v, back, o_.node_stage[static_cast<size_t>(val.producer)], there);
      }
    }
    return c;
  }

  // Whether candidate c of backward op b mirrors its forward op's current signature.
  bool Mirrors(NodeId b, const NdSignature& c) const {
    const ir::Node& bn = g_.node(b);
    if (bn.origin < 0) return true;
    const ir::Node& n = g_.node(bn.origin);
    const NdSignature& s = Sig(bn.origin);
    if (s.in.empty()) return true;
    for (size_t i = 0; i < bn.in.size(); ++i) {
      NdSbp m = Mirror(n, s, bn.in[i]);
      if (m.size() && !(c.in[i] == m)) return false;
    }
    for (size_t i = 0; i < bn.out.size(); ++i) {
      NdSbp m = Mirror(n, s, bn.out[i]);
      if (m.size() && !(c.out[i] == m)) return false;
    }
    return true;
  }

  Status Greedy(NodeId id) {
    const auto& cands = cands_[static_cast<size_t>(id)];
    const ir::Node& n = g_.node(id);
    const bool forward = n.phase == ir::Phase::kForward || n.phase == ir::Phase::kLoss;
    const bool backward = n.phase == ir::Phase::kBackward && n.origin >= 0;
    size_t best = cands.size();
    double best_cost = kInf;
    for (int pass = 0; pass < 2 && best == cands.size(); ++pass) {
      for (size_t c = 0; c < cands.size(); ++c) {
        if (mirror_ && backward && pass == 0 && !Mirrors(id, cands[c])) continue;
        double cost = Cost(id, cands[c], false);
        if (mirror_ && forward && cost < kInf) cost += MirrorCost(id, cands[c]);
        if (cost < best_cost) {
          best_cost = cost;
          best = c;
        }
      }
    }
    if (best == cands.size()) return NoneTakes(id);
    Place(id, best);
    return Status::Ok();
  }

  // The signature node n holds now (empty while it is not placed).
  const NdSignature& Sig(NodeId n) const {
    static const NdSignature kNone;
    const int k = sig_[static_cast<size_t>(n)];
    return k < 0 ? kNone : cands_[static_cast<size_t>(n)][static_cast<size_t>(k)];
  }

  void SetValue(ValueId v, const NdSbp& nd) {
    NdSbp& cur = a_.value_sbp[static_cast<size_t>(v)];
    if (logging_) value_log_.emplace_back(v, cur);
    cur = nd;
  }

  // Gives node `id` its candidate `k`; sources it reads that are not placed yet take what it wants
  // where they may, else their cheapest layout.
  void Place(NodeId id, size_t k) {
    if (logging_) node_log_.emplace_back(id, sig_[static_cast<size_t>(id)]);
    const NdSignature& s = cands_[static_cast<size_t>(id)][k];
    const ir::Node& n = g_.node(id);
    const Placement& p = PlaceOfNode(id);
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      if (v == ir::kNoValue || IsConst(v) || a_.value_sbp[static_cast<size_t>(v)].size()) continue;
      if (SourceAllows(v, s.in[i]) && PlaceOf(v) == p) {
        SetValue(v, s.in[i]);
        continue;
      }
      double best = kInf;
      NdSbp pick;
      for (const NdSbp& nd : SourceCandidates(v)) {
        double c = Boxing(v, nd, o_.node_stage[static_cast<size_t>(id)], s.in[i]);
        if (c < best) {
          best = c;
          pick = nd;
        }
      }
      SetValue(v, pick);
    }
    for (size_t i = 0; i < n.out.size(); ++i) SetValue(n.out[i], s.out[i]);
    sig_[static_cast<size_t>(id)] = static_cast<int>(k);
  }

  void Undo() {
    for (auto it = value_log_.rbegin(); it != value_log_.rend(); ++it) a_.value_sbp[static_cast<size_t>(it->first)] = it->second;
    for (auto it = node_log_.rbegin(); it != node_log_.rend(); ++it) sig_[static_cast<size_t>(it->first)] = it->second;
  }

  // --- Group moves -----------------------------------------------------------------------------
  // Per-op refinement cannot move a layer from one strategy to another (data to tensor parallel):
  // its forward op, the backward ops derived from it and its parameters' updates must change
  // together, and each alone only gets worse. A group move tries every candidate signature of a
  // forward op with its backward ops mirroring it (below), its parameters taking what it wants and
  // their updates following, lets the ops around the group re-pick, and keeps the move when the
  // whole-graph cost falls.
  //
  // Mirroring: a backward op reads the forward tensors as the forward op read them; the gradient
  // of a forward tensor takes the dual of its SBP (S stays S, B becomes P, P becomes B) on every
  // mesh axis where the forward op splits its work, and stays B where the forward op is
  // replicated (every device computes the same whole gradient).

  NdSbp Dual(const NdSignature& s, const NdSbp& x) const {
    NdSbp d = x;
    for (int a = 0; a < x.size(); ++a) {
      if (!(s.work_axes >> a & 1)) {
        d[a] = Sbp::B();
      } else {
        if (x[a].is_partial() && x[a].reduce() != Reduce::kSum) return {};
        d[a] = x[a].Dual();
      }
    }
    return d;
  }

  // What a backward op of forward op n (signature s) should see for value x; empty when free.
  NdSbp Mirror(const ir::Node& n, const NdSignature& s, ValueId x) const {
    if (x == ir::kNoValue || IsConst(x)) return {};
    for (size_t i = 0; i < n.in.size(); ++i)
      if (n.in[i] == x) return s.in[i];
    for (size_t k = 0; k < n.out.size(); ++k)
      if (n.out[k] == x) return s.out[k];
    ValueId f = g_.value(x).grad_of;
    if (f == ir::kNoValue) return {};
    for (size_t i = 0; i < n.in.size(); ++i)
      if (n.in[i] == f && s.in[i].size()) return Dual(s, s.in[i]);
    for (size_t k = 0; k < n.out.size(); ++k)
      if (n.out[k] == f) return Dual(s, s.out[k]);
    return {};
  }

  // The cheapest candidate of op id (counting both its edges) among those `keep` accepts, or
  // among all when none does; false when none is allowed at all.
  template <typename Keep>
  bool Repick(NodeId id, Keep keep) {
    const auto& cands = cands_[static_cast<size_t>(id)];
    const std::vector<double>& costs = CostsOf(id, true);
    size_t best = cands.size();
    double best_cost = kInf;
    for (int pass = 0; pass < 2 && best == cands.size(); ++pass) {
      for (size_t c = 0; c < cands.size(); ++c) {
        if (pass == 0 && !keep(cands[c])) continue;
        double cost = costs[c];
        if (cost < best_cost) {
          best_cost = cost;
          best = c;
        }
      }
    }
    if (best == cands.size()) return false;
    if (static_cast<int>(best) != sig_[static_cast<size_t>(id)]) Place(id, best);
    return true;
  }

  bool ApplyGroup(NodeId id, size_t k) {
    const NdSignature& s = cands_[static_cast<size_t>(id)][k];
    const ir::Node& n = g_.node(id);
    std::vector<NodeId> group = {id};
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      if (v == ir::kNoValue || g_.value(v).kind != ir::ValueKind::kParam || a_.value_sbp[static_cast<size_t>(v)] == s.in[i]) continue;
      if (!SourceAllows(v, s.in[i]) || !(PlaceOf(v) == PlaceOfNode(id))) continue;
      SetValue(v, s.in[i]);
      auto u = update_of_.find(v);
      if (u != update_of_.end()) group.push_back(u->second);
    }
    Place(id, k);
    if (n.phase == ir::Phase::kOptimizer && !Allowed(id, s)) return false;
    for (NodeId b : backward_of_[static_cast<size_t>(id)]) {
      Repick(b, [&](const NdSignature& c) { return Mirrors(b, c); });
      group.push_back(b);
    }
    for (size_t k = 1; k < group.size(); ++k) {
      const ir::Node& u = g_.node(group[k]);
      if (u.op == OpKind::kSgdUpdate || u.op == OpKind::kAdamWUpdate)
        if (!Repick(group[k], [](const NdSignature&) { return true; }) || Cost(group[k], Sig(group[k]), false) == kInf) return false;
    }
    // Let the ops around the group re-pick, outward while they change (two rings).
    std::vector<bool> in_group(g_.nodes.size(), false);
    for (NodeId u : group) in_group[static_cast<size_t>(u)] = true;
    std::vector<NodeId> ring = group;
    for (int depth = 0; depth < 2 && !ring.empty(); ++depth) {
      std::vector<NodeId> next;
      auto visit = [&](NodeId u) {
        if (u < 0 || in_group[static_cast<size_t>(u)]) return;
        in_group[static_cast<size_t>(u)] = true;
        next.push_back(u);
      };
      for (NodeId u : ring) {
        for (ValueId v : g_.node(u).in)
          if (v != ir::kNoValue) visit(g_.value(v).producer), [&] { for (NodeId c : consumers_[static_cast<size_t>(v)]) visit(c); }();
        for (ValueId v : g_.node(u).out)
          for (NodeId c : consumers_[static_cast<size_t>(v)]) visit(c);
      }
      std::sort(next.begin(), next.end());
      ring.clear();
      for (NodeId u : next) {
        const int before = sig_[static_cast<size_t>(u)];
        const ir::Node& un = g_.node(u);
        if (un.op == OpKind::kSgdUpdate || un.op == OpKind::kAdamWUpdate) {
          if (!Repick(u, [](const NdSignature&) { return true; })) return false;
        } else {
          Repick(u, [](const NdSignature&) { return true; });
        }
        if (before != sig_[static_cast<size_t>(u)]) ring.push_back(u);
      }
    }
    return true;
  }

  // The part of the objective a move can change: the compute of the nodes it re-signed and the
  // boxing out of every value they read or write.
  double Local(const std::vector<NodeId>& nodes, const std::vector<ValueId>& values) const {
    double c = 0;
    for (NodeId n : nodes) c += Compute(n, Sig(n));
    for (ValueId v : values)
      if (a_.value_sbp[static_cast<size_t>(v)].size()) c += OutEdges(v, a_.value_sbp[static_cast<size_t>(v)]);
    return c;
  }

  // The nodes and values a group move led by `id` can read: the group (the op, its backward ops,
  // its parameters' updates), the two rings around it that may re-pick, and what their costs read
  // (one more hop). A rejected move is decided by these alone, so it needs no second look until
  // one of them changes.
  void Neighbourhood(NodeId id, std::vector<NodeId>* nodes, std::vector<ValueId>* values, std::vector<int>& mark_n,
                     std::vector<int>& mark_v, int stamp) const {
    nodes->clear();
    values->clear();
    auto add_n = [&](NodeId u) {
      if (u < 0 || mark_n[static_cast<size_t>(u)] == stamp) return;
      mark_n[static_cast<size_t>(u)] = stamp;
      nodes->push_back(u);
    };
    add_n(id);
    for (NodeId b : backward_of_[static_cast<size_t>(id)]) add_n(b);
    for (ValueId v : g_.node(id).in) {
      auto u = v == ir::kNoValue ? update_of_.end() : update_of_.find(v);
      if (u != update_of_.end()) add_n(u->second);
    }
    size_t begin = 0;
    for (int hop = 0; hop < 3; ++hop) {
      const size_t end = nodes->size();
      for (size_t i = begin; i < end; ++i) {
        const ir::Node& un = g_.node((*nodes)[i]);
        for (const auto* list : {&un.in, &un.out}) {
          for (ValueId v : *list) {
            if (v == ir::kNoValue) continue;
            add_n(g_.value(v).producer);
            for (NodeId c : consumers_[static_cast<size_t>(v)]) add_n(c);
          }
        }
      }
      begin = end;
    }
    for (NodeId u : *nodes) {
      for (const auto* list : {&g_.node(u).in, &g_.node(u).out}) {
        for (ValueId v : *list) {
          if (v == ir::kNoValue || mark_v[static_cast<size_t>(v)] == stamp) continue;
          mark_v[static_cast<size_t>(v)] = stamp;
          values->push_back(v);
        }
      }
    }
  }

  void SearchGroups() {
    std::vector<int> mark_n(g_.nodes.size(), -1), mark_v(g_.values.size(), -1);
    int stamp = 0;
    // Clocks: when each node or value last changed, and when each move was last rejected.
    long clock = 0;
    std::vector<long> node_changed(g_.nodes.size(), 0), value_changed(g_.values.size(), 0);
    std::vector<std::vector<long>> rejected(g_.nodes.size());
    std::vector<std::vector<NodeId>> hood_n(g_.nodes.size());
    std::vector<std::vector<ValueId>> hood_v(g_.nodes.size());
    for (int round = 0; round < 4; ++round) {
      bool improved = false;
      for (size_t n = 0; n < g_.nodes.size(); ++n) {
        auto id = static_cast<NodeId>(n);
        // Forward ops that read parameters or multiply matrices lead strategies; any other op is
        // worth moving only when it pays boxing.
        if (!leads_[n] && Cost(id, Sig(id), true) <= Compute(id, Sig(id))) continue;
        if (rejected[n].empty()) {
          rejected[n].assign(cands_[n].size(), -1);
          Neighbourhood(id, &hood_n[n], &hood_v[n], mark_n, mark_v, ++stamp);
        }
        long last_change = 0;
        for (NodeId u : hood_n[n]) last_change = std::max(last_change, node_changed[static_cast<size_t>(u)]);
        for (ValueId v : hood_v[n]) last_change = std::max(last_change, value_changed[static_cast<size_t>(v)]);
        for (size_t k = 0; k < cands_[n].size(); ++k) {
          if (static_cast<int>(k) == sig_[n]) continue;
          if (rejected[n][k] >= last_change) continue;  // nothing it reads changed since
          node_log_.clear();
          value_log_.clear();
          logging_ = true;
          bool ok = ApplyGroup(id, k);
          logging_ = false;
          // What the move touched, then its cost after and (undone) before.
          ++stamp;
          std::vector<NodeId> nodes;
          std::vector<ValueId> values;
          auto add_v = [&](ValueId v) {
            if (v == ir::kNoValue || mark_v[static_cast<size_t>(v)] == stamp) return;
            mark_v[static_cast<size_t>(v)] = stamp;
            values.push_back(v);
          };
          for (const auto& [u, old] : node_log_) {
            if (mark_n[static_cast<size_t>(u)] == stamp) continue;
            mark_n[static_cast<size_t>(u)] = stamp;
            nodes.push_back(u);
            for (ValueId v : g_.node(u).in) add_v(v);
            for (ValueId v : g_.node(u).out) add_v(v);
          }
          for (const auto& [v, old] : value_log_) add_v(v);
          double after = ok ? Local(nodes, values) : kInf;
          std::vector<int> new_sigs;
          std::vector<NdSbp> new_sbps;
          for (NodeId u : nodes) new_sigs.push_back(sig_[static_cast<size_t>(u)]);
          for (ValueId v : values) new_sbps.push_back(a_.value_sbp[static_cast<size_t>(v)]);
          Undo();
          double before = Local(nodes, values);
          ++clock;
          if (after < before - 1e-12) {
            for (size_t j = 0; j < nodes.size(); ++j) {
              int& cur = sig_[static_cast<size_t>(nodes[j])];
              if (cur != new_sigs[j]) node_changed[static_cast<size_t>(nodes[j])] = clock;
              cur = new_sigs[j];
            }
            for (size_t j = 0; j < values.size(); ++j) {
              NdSbp& cur = a_.value_sbp[static_cast<size_t>(values[j])];
              if (!(cur == new_sbps[j])) value_changed[static_cast<size_t>(values[j])] = clock;
              cur = new_sbps[j];
            }
            improved = true;
            // Its own neighbourhood changed: what is left of this op's candidates reads the new state.
            last_change = clock;
          } else {
            rejected[n][k] = clock;
          }
        }
      }
      if (!improved) break;
    }
  }

  // Group moves, then refinement sweeps again.
  void Polish() {
    SearchGroups();
    for (int sweep = 0; sweep < 8; ++sweep)
      if (!Refine(sweep == 0)) break;
  }

  bool ParamsAllowed() const {
    for (const ir::ParamGrad& pg : tg_.params)
      if (!SourceAllows(pg.param, a_.value_sbp[static_cast<size_t>(pg.param)])) return false;
    return true;
  }

  // Greedy pass, then refinement sweeps, from the current preset sources.
  Status Solve() {
    for (size_t n = 0; n < g_.nodes.size(); ++n) RETURN_IF_ERROR(Greedy(static_cast<NodeId>(n)));
    for (int sweep = 0; sweep < 8; ++sweep)
      if (!Refine(sweep == 0)) break;
    return Status::Ok();
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
    const int cur_update = sig_[static_cast<size_t>(pg.update)];
    auto cost_with = [&](const NdSbp& nd, int* best_update) {
      a_.value_sbp[static_cast<size_t>(v)] = nd;
      double c = 0;
      for (NodeId u : consumers_[static_cast<size_t>(v)]) {
        if (u == pg.update) continue;
        const NdSignature& us = Sig(u);
        for (size_t i = 0; i < us.in.size(); ++i)
          if (g_.node(u).in[i] == v) c += Boxing(v, nd, o_.node_stage[static_cast<size_t>(u)], us.in[i]);
      }
      double best = kInf;
      const std::vector<double>& costs = CostsOf(pg.update, true);
      for (size_t k = 0; k < costs.size(); ++k) {
        double cu = costs[k];
        if (cu < best) {
          best = cu;
          *best_update = static_cast<int>(k);
        }
      }
      return c + best;
    };
    int upd = cur_update, tmp = -1;
    double best = SourceAllows(v, cur) ? cost_with(cur, &upd) : kInf;  // a layout it may not hold must go
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
    if (best < kInf) Place(pg.update, static_cast<size_t>(upd));
    return !(best_nd == cur);
  }

  // A refinement sweep: each parameter re-picks its layout with its update, then each op its
  // signature. `first`: every one is looked at; later sweeps skip those around which nothing
  // changed since they were last looked at (their answer would be the same).
  bool Refine(bool first) {
    if (first) {
      refine_clock_ = 0;
      touched_.assign(g_.nodes.size(), 0);
      seen_.assign(g_.nodes.size(), -1);
      param_seen_.assign(tg_.params.size(), -1);
    }
    bool changed = false;
    for (size_t i = 0; i < tg_.params.size(); ++i) {
      const ir::ParamGrad& pg = tg_.params[i];
      const auto update = static_cast<size_t>(pg.update);
      if (touched_[update] <= param_seen_[i]) continue;
      param_seen_[i] = refine_clock_;
      const int before = sig_[update];
      if (RefineParam(pg)) {
        changed = true;
        TouchValue(pg.param);
      }
      if (sig_[update] != before) Touch(pg.update);
    }
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (touched_[n] <= seen_[n]) continue;
      seen_[n] = refine_clock_;
      auto id = static_cast<NodeId>(n);
      const auto& cands = cands_[n];
      const std::vector<double>& costs = CostsOf(id, true);
      double best_cost = costs[static_cast<size_t>(sig_[n])];  // the greedy pass placed every op
      size_t best = cands.size();
      for (size_t c = 0; c < cands.size(); ++c) {
        double cost = costs[c];
        if (cost < best_cost - 1e-12) {
          best_cost = cost;
          best = c;
        }
      }
      if (best < cands.size()) {
        Place(id, best);
        Touch(id);
        changed = true;
      }
    }
    return changed;
  }

  // Refine's bookkeeping: every op that shares a value with what changed must look again.
  void TouchValue(ValueId v) {
    ++refine_clock_;
    const NodeId p = g_.value(v).producer;
    if (p >= 0) touched_[static_cast<size_t>(p)] = refine_clock_;
    for (NodeId c : consumers_[static_cast<size_t>(v)]) touched_[static_cast<size_t>(c)] = refine_clock_;
  }
  void Touch(NodeId id) {
    for (const auto* list : {&g_.node(id).in, &g_.node(id).out})
      for (ValueId v : *list)
        if (v != ir::kNoValue) TouchValue(v);
  }

  // Per node compute and per edge boxing, for the plan's readers and `flowrun search`.
  void Breakdown() {
    a_.node_seconds.assign(g_.nodes.size(), 0);
    for (size_t n = 0; n < g_.nodes.size(); ++n) a_.node_seconds[n] = Compute(static_cast<NodeId>(n), Sig(static_cast<NodeId>(n)));
    a_.edges.clear();
    for (size_t v = 0; v < g_.values.size(); ++v) {
      const NdSbp& have = a_.value_sbp[v];
      if (!have.size()) continue;
      std::vector<std::pair<int, NdSbp>> seen;
      for (NodeId u : consumers_[v]) {
        const NdSignature& us = Sig(u);
        for (size_t i = 0; i < g_.node(u).in.size() && !us.in.empty(); ++i) {
          if (g_.node(u).in[i] != static_cast<ValueId>(v)) continue;
          std::pair<int, NdSbp> key{o_.node_stage[static_cast<size_t>(u)], us.in[i]};
          if (std::find(seen.begin(), seen.end(), key) != seen.end()) continue;
          seen.push_back(key);
          if (key.first == a_.value_stage[v] && key.second == have) continue;
          const double seconds = Boxing(static_cast<ValueId>(v), have, key.first, key.second);
          const Price p = seconds > 0 ? Priced(static_cast<ValueId>(v), have, key.first, key.second) : Price{};
          a_.edges.push_back({static_cast<ValueId>(v), key.first, have, key.second, seconds, Rate(per_step_[v]) * p.latency,
                              Rate(per_step_[v]) * p.p2p_messages, per_step_[v], p.bucketed});
        }
      }
    }
  }

  void Total() {
    a_.compute_seconds = 0;
    a_.boxing_seconds = 0;
    for (size_t n = 0; n < g_.nodes.size(); ++n) a_.compute_seconds += Compute(static_cast<NodeId>(n), Sig(static_cast<NodeId>(n)));
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
  std::vector<double> grad_bytes_;   // per stage: its gradient accumulators' bytes
  std::vector<double> param_bytes_;  // per stage: its parameters' bytes
  std::vector<NdSbp> hint_;
  std::vector<int> dp_axes_;
  std::vector<std::vector<NdSignature>> cands_;
  // Per node: its candidates' nd-SBPs per slot (inputs, then outputs), each slot's distinct ones
  // listed once (for CostsOf).
  struct Slots {
    std::vector<std::vector<NdSbp>> distinct;  // per slot
    std::vector<size_t> offset;                // per slot: where its prices start in slot_costs_
    std::vector<uint16_t> index;               // per candidate x slot: into distinct[slot]
  };
  std::vector<Slots> slots_;
  std::vector<std::vector<double>> cand_compute_;  // per node, per candidate: Compute
  mutable std::vector<double> slot_costs_, costs_;  // CostsOf's scratch and result
  std::vector<int> sig_;  // per node: the index of its signature in cands_, -1 while not placed
  long refine_clock_ = 0;                        // Refine: changes so far
  std::vector<long> touched_, seen_, param_seen_;  // per node (param): when last touched / looked at
  std::vector<bool> leads_;  // per node: a forward op that reads a parameter or is a matmul (leads group moves)
  // One byte per mesh axis (kind, split axis, reduction): meshes have at most 8 axes.
  static uint64_t Code(const NdSbp& nd) {
    uint64_t c = static_cast<uint64_t>(nd.size());
    for (int a = 0; a < nd.size(); ++a)
      c = c << 8 | (static_cast<uint64_t>(nd[a].kind()) << 6 | static_cast<uint64_t>(nd[a].reduce()) << 4 | static_cast<uint64_t>(nd[a].axis() & 15));
    return c;
  }
  mutable std::vector<std::unique_ptr<FlatMap<double, 2>>> price_memo_;  // per (type class, stage, stage)
  std::vector<int> shared_type_;                    // per type class: its id in o_.prices
  std::vector<int> shared_place_;                   // per stage: its placement's id in o_.prices
  std::vector<std::vector<NodeId>> backward_of_;    // per forward node: the backward nodes derived from it
  std::unordered_map<ValueId, NodeId> update_of_;   // parameter -> its update node
  std::vector<int> type_class_;                     // per value: one id per (shape, dtype)
  std::vector<double> work_;                        // per node: OpSeconds
  std::vector<bool> same_place_;                    // per (stage, stage): the same placement
  std::vector<bool> spans_pair_;                    // per (stage, stage): their ranks sit on several nodes
  std::vector<std::vector<bool>> spans_axis_;       // per stage, per mesh axis: its groups span nodes
  std::vector<bool> has_grad_;                      // per value: something computes its gradient
  bool mirror_ = false;                             // greedy start: forward ops pay for their backward
  mutable std::vector<int8_t> zero_shardable_;       // per value, ZeroShardable: -1 not yet known
  bool whole_params_ = false;                       // third start: parameters not yet sharded by ZeRO
  bool logging_ = false;                            // Place/SetValue record what they overwrite
  std::vector<std::pair<NodeId, int>> node_log_;  // what Place overwrote: the node's candidate index
  std::vector<std::pair<ValueId, NdSbp>> value_log_;
};

}  // namespace

Result<Assignment> Assign(const ir::TrainingGraph& tg, const AssignOptions& opt) { return Assigner(tg, opt).Run(); }

int PriceCache::TypeId(const Shape& shape, DType dtype, int role) {
  std::lock_guard<std::mutex> lock(mu_);
  const int kind = 8 * static_cast<int>(dtype) + role;
  return types_.emplace(std::make_pair(shape.dims(), kind), static_cast<int>(types_.size())).first->second;
}

int PriceCache::PlaceId(const Placement& p, double grad_bytes, double param_bytes) {
  std::lock_guard<std::mutex> lock(mu_);
  for (size_t i = 0; i < places_.size(); ++i)
    if (places_[i].place == p && places_[i].grad_bytes == grad_bytes && places_[i].param_bytes == param_bytes)
      return static_cast<int>(i);
  places_.push_back({p, grad_bytes, param_bytes});
  return static_cast<int>(places_.size() - 1);
}

std::optional<double> PriceCache::Find(const Key& k) {
  std::lock_guard<std::mutex> lock(mu_);
  const double* c = prices_.Find(k);
  return c ? std::optional<double>(*c) : std::nullopt;
}

void PriceCache::Put(const Key& k, double seconds) {
  std::lock_guard<std::mutex> lock(mu_);
  prices_.Put(k, seconds);
}

}  // namespace fr::sbp
