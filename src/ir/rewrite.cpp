#include "ir/rewrite.h"

#include <algorithm>
#include <optional>
#include <string_view>
#include <utility>

#include "boxing/simulate.h"
#include "ops/kernel_args.h"

namespace fr::ir {
namespace {

// One pass: matches on the graph as it is, records replacements, then rebuilds the node list with
// each replacement at the position of the chain's last node (its inputs come earlier, its outputs
// are the chain's, so the order stays topological).
class Pass {
 public:
  explicit Pass(Graph& g) : g_(g), consumers_(g.Consumers()), dead_(g.nodes.size(), false), at_(g.nodes.size()) {
    for (ValueId v : g.outputs) output_.push_back(v);
  }

  const Node* Producer(ValueId v) const {
    if (v == kNoValue || g_.value(v).producer < 0) return nullptr;
    return &g_.node(g_.value(v).producer);
  }
  NodeId Id(const Node* n) const { return static_cast<NodeId>(n - g_.nodes.data()); }
  // v is read by exactly these nodes and is not a graph output.
  bool OnlyFeeds(ValueId v, std::initializer_list<const Node*> readers) const {
    return OnlyFeeds(v, std::vector<const Node*>(readers));
  }
  bool OnlyFeeds(ValueId v, const std::vector<const Node*>& readers) const {
    if (std::find(output_.begin(), output_.end(), v) != output_.end()) return false;
    std::vector<NodeId> want;
    for (const Node* r : readers) want.push_back(Id(r));
    std::vector<NodeId> have = consumers_[static_cast<size_t>(v)];
    std::sort(want.begin(), want.end());
    std::sort(have.begin(), have.end());
    have.erase(std::unique(have.begin(), have.end()), have.end());
    return have == want;
  }
  // The one node that reads v (perhaps twice), v not a graph output; null otherwise.
  const Node* OnlyReader(ValueId v) const {
    if (std::find(output_.begin(), output_.end(), v) != output_.end()) return nullptr;
    const std::vector<NodeId>& r = consumers_[static_cast<size_t>(v)];
    if (r.empty() || std::any_of(r.begin(), r.end(), [&](NodeId n) { return n != r[0]; })) return nullptr;
    return &g_.node(r[0]);
  }
  bool Taken(const Node* n) const { return dead_[static_cast<size_t>(Id(n))]; }
  // The value of a float scalar constant.
  std::optional<float> Scalar(ValueId v) const {
    if (v == kNoValue) return std::nullopt;
    const Value& val = g_.value(v);
    if (val.kind != ValueKind::kConst || val.type.dtype != DType::kF32 || val.type.shape.numel() != 1) return std::nullopt;
    return val.data.data<float>()[0];
  }
  bool IsParam(ValueId v) const { return v != kNoValue && g_.value(v).kind == ValueKind::kParam; }
  const Value& value(ValueId v) const { return g_.value(v); }
  Graph& graph() { return g_; }

  // Replaces the nodes `chain` (the last one is where the new nodes go) with `nodes`.
  void Replace(std::vector<const Node*> chain, std::vector<Node> nodes) {
    NodeId last = 0;
    for (const Node* n : chain) {
      dead_[static_cast<size_t>(Id(n))] = true;
      last = std::max(last, Id(n));
    }
    std::vector<std::string> names;
    for (const Node* n : chain) {
      names.push_back(n->name);
      names.insert(names.end(), n->fused_from.begin(), n->fused_from.end());
    }
    for (Node& n : nodes) {
      for (const std::string& name : names)
        if (name != n.name) n.fused_from.push_back(name);
      at_[static_cast<size_t>(last)].push_back(std::move(n));
    }
  }

  void Rebuild() {
    std::vector<Node> out;
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (!dead_[n]) out.push_back(std::move(g_.nodes[n]));
      for (Node& r : at_[n]) out.push_back(std::move(r));
    }
    for (size_t n = 0; n < g_.nodes.size(); ++n)
      if (dead_[n])
        for (ValueId v : g_.nodes[n].out) g_.value(v).producer = -1;
    g_.nodes = std::move(out);
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      for (size_t i = 0; i < g_.nodes[n].out.size(); ++i) {
        g_.value(g_.nodes[n].out[i]).producer = static_cast<NodeId>(n);
        g_.value(g_.nodes[n].out[i]).producer_slot = static_cast<int>(i);
      }
    }
  }

 private:
  Graph& g_;
  std::vector<std::vector<NodeId>> consumers_;
  std::vector<ValueId> output_;
  std::vector<bool> dead_;
  std::vector<std::vector<Node>> at_;
};

Node MakeNode(std::string name, OpKind op, std::vector<ValueId> in, std::vector<ValueId> out, Attrs attrs = {}) {
  Node n;
  n.name = std::move(name);
  n.op = op;
  n.in = std::move(in);
  n.out = std::move(out);
  n.attrs = std::move(attrs);
  return n;
}

// The fused node's name from the chain node that names it best: "/mlp/act/Tanh" -> "/mlp/act/Gelu",
// else NAME/op ("node_Sigmoid_244" -> "node_Sigmoid_244/Silu").
std::string FusedName(const std::string& name, std::string_view from, std::string_view op) {
  if (name.ends_with(from)) return name.substr(0, name.size() - from.size()) + std::string(op);
  return name + "/" + std::string(op);
}

// The other input of a binary node, given one of them; kNoValue if `v` is not an input.
ValueId Other(const Node& n, ValueId v) {
  if (n.in.size() != 2) return kNoValue;
  return n.in[0] == v ? n.in[1] : n.in[1] == v ? n.in[0] : kNoValue;
}

// A parameter cut to columns [begin, end) of its last axis, as a new parameter "NAME[part]".
ValueId CutParam(Graph& g, ValueId p, int part, int64_t begin, int64_t end) {
  const Value& v = g.value(p);
  std::vector<sbp::Range> region;
  for (int i = 0; i < v.type.shape.rank(); ++i) region.push_back({0, v.type.shape[i]});
  region.back() = {begin, end};
  Tensor data = boxing::SliceOf(v.data, region).Clone();
  Shape shape = data.shape();
  const std::string from = v.name;
  ValueId id = g.AddValue(from + "[" + std::to_string(part) + "]", {v.type.dtype, shape}, ValueKind::kParam, std::move(data));
  g.value(id).split_from = from;
  return id;
}

int SplitProjections(Graph& g, const RewriteOptions& o) {
  Pass pass(g);
  int count = 0;
  std::vector<std::pair<ValueId, std::vector<ValueId>>> cut;  // parameter -> its parts
  for (const Node& split : g.nodes) {
    if (split.op != OpKind::kSplit || split.out.size() < 2) continue;
    const ValueId x = split.in[0];
    const Shape& xs = g.type(x).shape;
    if (xs.rank() < 2 || split.attrs.Int("axis") != xs.rank() - 1) continue;
    const Node* add = pass.Producer(x);
    const Node* mm = add;
    ValueId bias = kNoValue;
    if (add && add->op == OpKind::kAdd) {
      for (ValueId in : add->in) {
        const Node* p = pass.Producer(in);
        if (p && p->op == OpKind::kMatMul) mm = p;
        else bias = in;
      }
      if (mm == add || !pass.IsParam(bias) || g.type(bias).shape != Shape{xs[xs.rank() - 1]}) continue;
      if (!pass.OnlyFeeds(mm->out[0], {add}) || !pass.OnlyFeeds(bias, {add})) continue;
    } else {
      add = nullptr;
    }
    if (!mm || mm->op != OpKind::kMatMul || !pass.OnlyFeeds(x, {&split})) continue;
    const ValueId w = mm->in[1];
    if (!pass.IsParam(w) || g.type(w).shape.rank() != 2 || !pass.OnlyFeeds(w, {mm})) continue;
    if (!o.split || !o.split(*mm, w, bias)) continue;
    const ValueId a = mm->in[0];
    const Node mm_copy = *mm, split_copy = split;
    const std::optional<Node> add_copy = add ? std::optional<Node>(*add) : std::nullopt;
    std::vector<const Node*> chain = {mm, &split};
    if (add) chain.push_back(add);
    // From here on the graph's value list grows: no references into it.
    std::vector<Node> parts;
    std::vector<ValueId> w_parts, b_parts;
    const std::vector<int64_t>& sizes = split_copy.attrs.Ints("split");
    int64_t at = 0;
    for (size_t j = 0; j < split_copy.out.size(); ++j) {
      const int part = static_cast<int>(j);
      const std::string tag = "[" + std::to_string(j) + "]";
      const ValueId wj = CutParam(g, w, part, at, at + sizes[j]);
      w_parts.push_back(wj);
      ValueId mm_out = split_copy.out[j];
      if (add_copy) {
        Shape s = g.type(split_copy.out[j]).shape;
        mm_out = g.AddValue(g.value(mm_copy.out[0]).name + tag, {DType::kF32, s}, ValueKind::kActivation);
      }
      Node m = MakeNode(mm_copy.name + tag, OpKind::kMatMul, {a, wj}, {mm_out}, mm_copy.attrs);
      m.split_from = mm_copy.name;
      parts.push_back(std::move(m));
      if (add_copy) {
        const ValueId bj = CutParam(g, bias, part, at, at + sizes[j]);
        b_parts.push_back(bj);
        std::vector<ValueId> in = add_copy->in[0] == bias ? std::vector<ValueId>{bj, mm_out} : std::vector<ValueId>{mm_out, bj};
        Node ad = MakeNode(add_copy->name + tag, OpKind::kAdd, in, {split_copy.out[j]}, add_copy->attrs);
        ad.split_from = add_copy->name;
        parts.push_back(std::move(ad));
      }
      at += sizes[j];
    }
    pass.Replace(chain, std::move(parts));
    cut.emplace_back(w, w_parts);
    if (add_copy) cut.emplace_back(bias, b_parts);
    ++count;
  }
  pass.Rebuild();
  for (const auto& [p, parts] : cut) {  // the parts (AddValue appended them) take p's place
    for (ValueId q : parts) g.params.erase(std::find(g.params.begin(), g.params.end(), q));
    auto it = g.params.erase(std::find(g.params.begin(), g.params.end(), p));
    g.params.insert(it, parts.begin(), parts.end());
    g.value(p).kind = ValueKind::kConst;  // no longer read by anything
  }
  return count;
}

// The GELU's inputs given its H: (X, bias) when H = Add(X, bias) with a parameter bias [D] and
// H is read by the GELU alone (`only_gelu`), the add then joining `chain`; else (H).
std::vector<ValueId> TakeBiasAdd(Pass& pass, ValueId h, bool only_gelu, std::vector<const Node*>& chain) {
  const Graph& g = pass.graph();
  const Node* bias_add = pass.Producer(h);
  if (!only_gelu || !bias_add || bias_add->op != OpKind::kAdd || pass.Taken(bias_add)) return {h};
  const Shape& hs = g.type(h).shape;
  for (ValueId b : bias_add->in) {
    if (!pass.IsParam(b) || g.type(b).shape != Shape{hs[hs.rank() - 1]}) continue;
    const ValueId x = Other(*bias_add, b);
    if (g.type(x).shape != hs) continue;
    chain.push_back(bias_add);
    return {x, b};
  }
  return {h};
}

int FuseGelu(Graph& g) {
  Pass pass(g);
  int count = 0;
  for (const Node& half_mul : g.nodes) {
    // Mul(m, 0.5) <- m = Mul(h, a) <- a = Add(e, 1) <- e = Erf(d) <- d = Div(h, c)
    if (half_mul.op != OpKind::kMul || pass.Taken(&half_mul)) continue;
    const Node* mul = nullptr;
    std::optional<float> half;
    for (ValueId in : half_mul.in) {
      if (pass.Scalar(in)) half = pass.Scalar(in);
      else mul = pass.Producer(in);
    }
    if (!half || !mul || mul->op != OpKind::kMul || !pass.OnlyFeeds(mul->out[0], {&half_mul})) continue;
    // Either input of the Mul may be H; the other is Add(Erf(Div(H, c)), 1).
    const Node *add_one = nullptr, *erf = nullptr, *div = nullptr;
    ValueId h = kNoValue;
    std::optional<float> one;
    for (size_t i = 0; i < 2 && !div; ++i) {
      add_one = pass.Producer(mul->in[i]);
      h = mul->in[1 - i];
      if (!add_one || add_one->op != OpKind::kAdd || !pass.OnlyFeeds(add_one->out[0], {mul})) continue;
      one.reset();
      erf = nullptr;
      for (ValueId in : add_one->in) {
        if (pass.Scalar(in)) one = pass.Scalar(in);
        else erf = pass.Producer(in);
      }
      if (!one || !erf || erf->op != OpKind::kErf || !pass.OnlyFeeds(erf->out[0], {add_one})) continue;
      const Node* d = pass.Producer(erf->in[0]);
      if (d && d->op == OpKind::kDiv && d->in[0] == h && pass.Scalar(d->in[1]) && pass.OnlyFeeds(d->out[0], {erf}))
        div = d;
    }
    if (!div || g.type(half_mul.out[0]) != g.type(h)) continue;  // constants of a higher rank broadcast H up
    std::vector<const Node*> chain = {div, erf, add_one, mul, &half_mul};
    std::vector<ValueId> in = TakeBiasAdd(pass, h, pass.OnlyFeeds(h, {div, mul}), chain);
    if (std::any_of(chain.begin(), chain.end(), [&](const Node* n) { return pass.Taken(n); })) continue;
    Attrs at;
    at.Set("div", static_cast<double>(*pass.Scalar(div->in[1])));
    at.Set("one", static_cast<double>(*one));
    at.Set("half", static_cast<double>(*half));
    const std::string name = FusedName(erf->name, "Erf", "Gelu");
    pass.Replace(chain, {MakeNode(name, OpKind::kGelu, in, {half_mul.out[0]}, at)});
    ++count;
  }
  pass.Rebuild();
  return count;
}

// The scalar constant input of a binary node `n` and its other input; nullopt if it has none.
std::optional<std::pair<float, ValueId>> ScalarAndOther(const Pass& pass, const Node* n) {
  if (!n || n->in.size() != 2) return std::nullopt;
  for (size_t i = 0; i < 2; ++i)
    if (auto c = pass.Scalar(n->in[i]); c && !pass.Scalar(n->in[1 - i])) return std::make_pair(*c, n->in[1 - i]);
  return std::nullopt;
}

// The tanh GELU, 0.5 H (1 + tanh(sqrt(2/pi) (H + 0.044715 H^3))), as PyTorch exports it: the cube
// as Pow(H, 3) or H * (H * H), and the product in any of the three orders exporters write,
//   Mul(Mul(H, 0.5), Add(T, 1))   GPT-2's NewGELU (transformers), both exporters
//   Mul(H, Mul(Add(T, 1), 0.5))   F.gelu(approximate="tanh"), dynamo below opset 20
//   Mul(Mul(H, Add(T, 1)), 0.5)   F.gelu(approximate="tanh"), TorchScript
// becomes the tanh form of Gelu. Its kernels compute (0.5 H)(1 + T) with H * H * H for the cube:
// a product by 0.5 is exact and H * (H * H) is (H * H) * H, so each order gives their values,
// and every constant must be the one they use. (From opset 20 the export is ONNX's own Gelu.)
int FuseGeluTanh(Graph& g) {
  Pass pass(g);
  int count = 0;
  auto is = [&](const Node* n, OpKind op) { return n && n->op == op && !pass.Taken(n); };
  auto is_half = [&](const Node* n) {
    const auto c = is(n, OpKind::kMul) ? ScalarAndOther(pass, n) : std::nullopt;
    return c && c->first == 0.5f ? c->second : kNoValue;
  };
  for (const Node& tanh : g.nodes) {
    if (!is(&tanh, OpKind::kTanh)) continue;
    // Down from T: beta * (H + kappa * cube(H)).
    const Node* beta_mul = pass.Producer(tanh.in[0]);
    const auto beta = ScalarAndOther(pass, beta_mul);
    if (!is(beta_mul, OpKind::kMul) || !beta || beta->first != kGeluTanhBeta) continue;
    const Node* inner_add = pass.Producer(beta->second);
    if (!is(inner_add, OpKind::kAdd) || inner_add->in.size() != 2) continue;
    std::vector<const Node*> chain;  // every node of the GELU, but the bias add
    ValueId h = kNoValue;
    for (size_t i = 0; i < 2 && h == kNoValue; ++i) {
      const Node* kappa_mul = pass.Producer(inner_add->in[1 - i]);
      const auto kappa = ScalarAndOther(pass, kappa_mul);
      if (!is(kappa_mul, OpKind::kMul) || !kappa || kappa->first != kGeluTanhKappa) continue;
      const ValueId x = inner_add->in[i];
      const Node* cube = pass.Producer(kappa->second);
      if (is(cube, OpKind::kPow) && cube->in[0] == x && pass.Scalar(cube->in[1]) == 3.f) {
        chain = {cube, kappa_mul};
      } else if (is(cube, OpKind::kMul) && Other(*cube, x) != kNoValue) {
        const Node* square = pass.Producer(Other(*cube, x));
        if (!is(square, OpKind::kMul) || square->in[0] != x || square->in[1] != x ||
            !pass.OnlyFeeds(square->out[0], {cube}))
          continue;
        chain = {square, cube, kappa_mul};
      } else {
        continue;
      }
      if (!pass.OnlyFeeds(cube->out[0], {kappa_mul}) || !pass.OnlyFeeds(kappa_mul->out[0], {inner_add})) continue;
      h = x;
    }
    if (h == kNoValue || !pass.OnlyFeeds(inner_add->out[0], {beta_mul}) || !pass.OnlyFeeds(beta_mul->out[0], {&tanh}))
      continue;
    // Up from T: 1 + T, then the product with H and 0.5 in one of the three orders.
    const Node* add_one = pass.OnlyReader(tanh.out[0]);
    const auto one = is(add_one, OpKind::kAdd) ? ScalarAndOther(pass, add_one) : std::nullopt;
    if (!one || one->first != 1.f) continue;
    const Node* next = pass.OnlyReader(add_one->out[0]);
    if (!is(next, OpKind::kMul) || next->in.size() != 2) continue;
    const Node* out = nullptr;
    const Node* h_reader = nullptr;  // the node of the product that reads H
    if (is_half(next) == add_one->out[0]) {                         // H * ((1 + T) * 0.5)
      out = pass.OnlyReader(next->out[0]);
      if (is(out, OpKind::kMul) && Other(*out, next->out[0]) == h) h_reader = out;
      chain.insert(chain.end(), {inner_add, beta_mul, &tanh, add_one, next});
    } else if (const ValueId other = Other(*next, add_one->out[0]); other == h) {  // (H * (1 + T)) * 0.5
      out = pass.OnlyReader(next->out[0]);
      if (is_half(out) == next->out[0]) h_reader = next;
      chain.insert(chain.end(), {inner_add, beta_mul, &tanh, add_one, next});
    } else if (other != kNoValue && is_half(pass.Producer(other)) == h) {  // (H * 0.5) * (1 + T)
      const Node* half_mul = pass.Producer(other);
      if (pass.OnlyFeeds(half_mul->out[0], {next})) {
        out = next;
        h_reader = half_mul;
        chain.insert(chain.end(), {half_mul, inner_add, beta_mul, &tanh, add_one});
      }
    }
    if (!h_reader || !is(out, OpKind::kMul)) continue;
    chain.push_back(out);
    if (g.type(out->out[0]) != g.type(h)) continue;  // constants of a higher rank broadcast H up
    std::vector<const Node*> h_readers = {chain.front(), inner_add, h_reader};
    if (chain.front()->op == OpKind::kMul) h_readers.push_back(chain[1]);  // H * (H * H) reads H twice over
    std::vector<ValueId> in = TakeBiasAdd(pass, h, pass.OnlyFeeds(h, h_readers), chain);
    if (std::any_of(chain.begin(), chain.end(), [&](const Node* n) { return pass.Taken(n); })) continue;
    const std::string name = FusedName(tanh.name, "Tanh", "Gelu");
    pass.Replace(chain, {MakeNode(name, OpKind::kGelu, in, {out->out[0]}, GeluAttrs(true))});
    ++count;
  }
  pass.Rebuild();
  return count;
}

// An additive attention mask as a condition: a float constant M that broadcasts to [..., T] and
// holds only 0 and one value v <= -1e30 (-inf, or the float minimum transformers uses), with a 0
// in every row. Then S + M is S where M is 0 and, where it is v, a value whose exponential
// against its row's finite maximum is 0, as MaskedSoftmax's fill v gives: the same softmax,
// forward and backward (masked entries get no gradient either way). A row wholly masked would
// differ (the sum's softmax is uniform there, or NaN), so such a mask stays an Add.
// Returns the condition (M == v), a new constant, and v; nullopt where M is not such a mask.
std::optional<std::pair<ValueId, float>> AdditiveMask(Graph& g, ValueId m, const Shape& scores) {
  if (g.value(m).kind != ValueKind::kConst || g.type(m).dtype != DType::kF32) return std::nullopt;
  const Shape ms = g.type(m).shape;
  if (ms.rank() == 0 || ms.rank() > scores.rank() || ms[ms.rank() - 1] != scores[scores.rank() - 1]) return std::nullopt;
  if (auto b = Broadcast(ms, scores); !b.ok() || *b != scores) return std::nullopt;
  const Tensor& data = g.value(m).data;
  const float* v = data.data<float>();
  const int64_t n = ms.numel(), row = ms[ms.rank() - 1];
  std::optional<float> fill;
  for (int64_t i = 0; i < n; ++i) {
    if (v[i] == 0.f) continue;
    if (!(v[i] <= -1e30f) || (fill && v[i] != *fill)) return std::nullopt;  // NaN fails too
    fill = v[i];
  }
  if (!fill) return std::nullopt;  // no mask at all: nothing to gain
  Tensor cond(DType::kBool, ms);
  bool* c = cond.data<bool>();
  for (int64_t r = 0; r < n / row; ++r) {
    bool open = false;
    for (int64_t j = 0; j < row; ++j) {
      c[r * row + j] = v[r * row + j] != 0.f;
      open = open || !c[r * row + j];
    }
    if (!open) return std::nullopt;
  }
  const std::string name = g.value(m).name + "/as_condition";
  return std::make_pair(g.AddValue(name, {DType::kBool, ms}, ValueKind::kConst, std::move(cond)), *fill);
}

int FuseSoftmax(Graph& g) {
  Pass pass(g);
  int count = 0;
  for (const Node& sm : g.nodes) {
    if (sm.op != OpKind::kSoftmax) continue;
    const Shape s = g.type(sm.in[0]).shape;
    auto axis = s.Axis(sm.attrs.Int("axis", -1));
    if (!axis.ok() || *axis != s.rank() - 1) continue;
    std::vector<const Node*> chain = {&sm};
    Attrs at;
    ValueId x = sm.in[0], cond = kNoValue;
    const Node* where = pass.Producer(x);
    const Node* add = where && where->op == OpKind::kAdd && where->in.size() == 2 && pass.OnlyFeeds(x, {&sm}) ? where : nullptr;
    for (size_t i = 0; add && i < 2 && cond == kNoValue; ++i) {  // Add(S, M), an additive mask M
      if (g.type(add->in[1 - i]).shape != s) continue;
      if (auto mask = AdditiveMask(g, add->in[i], s)) {
        cond = mask->first;
        at.Set("fill", static_cast<double>(mask->second));
        at.Set("fill_if", int64_t{1});
        x = add->in[1 - i];
        chain.push_back(add);
      }
    }
    if (cond == kNoValue && where && where->op == OpKind::kWhere && pass.OnlyFeeds(x, {&sm}) &&
        pass.value(where->in[0]).kind == ValueKind::kConst && pass.value(where->in[0]).type.dtype == DType::kBool) {
      const int fill_branch = pass.Scalar(where->in[1]) ? 1 : pass.Scalar(where->in[2]) ? 2 : 0;
      if (fill_branch && g.type(where->in[3 - fill_branch]).shape == s) {
        cond = where->in[0];
        at.Set("fill", static_cast<double>(*pass.Scalar(where->in[static_cast<size_t>(fill_branch)])));
        at.Set("fill_if", int64_t{fill_branch == 1});
        x = where->in[static_cast<size_t>(3 - fill_branch)];
        chain.push_back(where);
      }
    }
    const Node* scale = pass.Producer(x);
    if (scale && (scale->op == OpKind::kMul || scale->op == OpKind::kDiv) && pass.OnlyFeeds(x, {chain.back()})) {
      const bool divide = scale->op == OpKind::kDiv;
      const int k = pass.Scalar(scale->in[1]) ? 1 : (!divide && pass.Scalar(scale->in[0])) ? 0 : -1;
      if (k >= 0 && g.type(scale->in[static_cast<size_t>(1 - k)]).shape == s) {
        at.Set("scale", static_cast<double>(*pass.Scalar(scale->in[static_cast<size_t>(k)])));
        at.Set("divide", int64_t{divide});
        x = scale->in[static_cast<size_t>(1 - k)];
        chain.push_back(scale);
      }
    }
    if (chain.size() == 1) continue;  // a plain softmax stays one
    std::vector<ValueId> in = {x};
    if (cond != kNoValue) in.push_back(cond);
    pass.Replace(chain, {MakeNode(sm.name, OpKind::kMaskedSoftmax, in, {sm.out[0]}, at)});
    ++count;
  }
  pass.Rebuild();
  return count;
}

// Mul(scale, n) <- [Cast to float] <- n = Mul(X, r) <- r = Reciprocal(s) or Div(1, s) <- s = Sqrt(a)
// <- a = Add(m, eps) <- m = ReduceMean(p, last axis, keepdims) <- p = Pow(X, 2): RMSNorm(X, scale).
int FuseRMSNorm(Graph& g) {
  Pass pass(g);
  int count = 0;
  // The producer of v if it has op `op` and v feeds `reader` alone.
  auto feeding = [&](ValueId v, OpKind op, const Node* reader) -> const Node* {
    const Node* p = pass.Producer(v);
    return p && p->op == op && !pass.Taken(p) && pass.OnlyFeeds(v, {reader}) ? p : nullptr;
  };
  for (const Node& scale_mul : g.nodes) {
    if (scale_mul.op != OpKind::kMul || pass.Taken(&scale_mul)) continue;
    for (size_t k = 0; k < 2; ++k) {
      const ValueId scale = scale_mul.in[k];
      const Value& sv = pass.value(scale);
      if (sv.kind == ValueKind::kActivation || sv.kind == ValueKind::kInput || sv.type.shape.rank() != 1) continue;
      std::vector<const Node*> chain = {&scale_mul};
      ValueId n = scale_mul.in[1 - k];
      if (const Node* cast = feeding(n, OpKind::kCast, &scale_mul); cast && g.type(cast->in[0]).dtype == DType::kF32) {
        chain.push_back(cast);
        n = cast->in[0];
      }
      const Node* xmul = feeding(n, OpKind::kMul, chain.back());
      if (!xmul) continue;
      const Node *inv = nullptr, *pow = nullptr;
      ValueId x = kNoValue;
      for (size_t i = 0; i < 2 && !pow; ++i) {
        x = xmul->in[1 - i];
        const Shape& xs = g.type(x).shape;
        if (xs.rank() < 1 || xs[xs.rank() - 1] != sv.type.shape[0] || g.type(x).dtype != DType::kF32) continue;
        inv = feeding(xmul->in[i], OpKind::kReciprocal, xmul);
        const Node* div = inv ? nullptr : feeding(xmul->in[i], OpKind::kDiv, xmul);
        if (div && pass.Scalar(div->in[0]) == 1.f) inv = div;
        if (!inv) continue;
        const Node* sqrt = feeding(inv->op == OpKind::kDiv ? inv->in[1] : inv->in[0], OpKind::kSqrt, inv);
        const Node* add = sqrt ? feeding(sqrt->in[0], OpKind::kAdd, sqrt) : nullptr;
        if (!add) continue;
        const int e = pass.Scalar(add->in[0]) ? 0 : pass.Scalar(add->in[1]) ? 1 : -1;
        const Node* mean = e >= 0 ? feeding(add->in[static_cast<size_t>(1 - e)], OpKind::kReduceMean, add) : nullptr;
        if (!mean || mean->attrs.Ints("axes") != std::vector<int64_t>{xs.rank() - 1} || mean->attrs.Int("keepdims", 1) != 1) continue;
        const Node* p = feeding(mean->in[0], OpKind::kPow, mean);
        if (!p || p->in[0] != x || pass.Scalar(p->in[1]) != 2.f) continue;
        if (g.type(scale_mul.out[0]).shape != xs) continue;  // constants of a higher rank broadcast X up
        chain.insert(chain.end(), {xmul, inv, sqrt, add, mean, p});
        pow = p;
        Attrs at;
        at.Set("axis", int64_t{xs.rank() - 1});
        at.Set("epsilon", static_cast<double>(*pass.Scalar(add->in[static_cast<size_t>(e)])));
        const std::string name = FusedName(mean->name, "ReduceMean", "RMSNorm");
        const std::vector<int64_t> stat_dims = [&] {
          std::vector<int64_t> d = xs.dims();
          d.back() = 1;
          return d;
        }();
        const ValueId y = scale_mul.out[0];
        const std::vector<const Node*> fused = chain;
        // From here on the graph's value list grows: no references into it.
        const ValueId stat = g.AddValue(name + ":1", {DType::kF32, Shape(stat_dims)}, ValueKind::kActivation);
        pass.Replace(fused, {MakeNode(name, OpKind::kRMSNorm, {x, scale}, {y, stat}, at)});
        ++count;
      }
      if (pow) break;
    }
  }
  pass.Rebuild();
  return count;
}

// Mul(X, Sigmoid(X)), either order, the sigmoid read by the Mul alone: Silu(X).
int FuseSilu(Graph& g) {
  Pass pass(g);
  int count = 0;
  for (const Node& mul : g.nodes) {
    if (mul.op != OpKind::kMul || pass.Taken(&mul) || mul.in.size() != 2) continue;
    for (size_t i = 0; i < 2; ++i) {
      const Node* sigmoid = pass.Producer(mul.in[i]);
      if (!sigmoid || sigmoid->op != OpKind::kSigmoid || pass.Taken(sigmoid) || sigmoid->in[0] != mul.in[1 - i]) continue;
      if (!pass.OnlyFeeds(sigmoid->out[0], {&mul})) continue;
      const std::string name = FusedName(sigmoid->name, "Sigmoid", "Silu");
      pass.Replace({sigmoid, &mul}, {MakeNode(name, OpKind::kSilu, {sigmoid->in[0]}, {mul.out[0]})});
      ++count;
      break;
    }
  }
  pass.Rebuild();
  return count;
}

}  // namespace

RewriteCounts Rewrite(Graph& g, const RewriteOptions& o) {
  RewriteCounts c;
  c.split_projections = SplitProjections(g, o);
  c.gelus = FuseGelu(g);
  c.gelus += FuseGeluTanh(g);
  c.softmaxes = FuseSoftmax(g);
  c.rms_norms = FuseRMSNorm(g);
  c.silus = FuseSilu(g);
  return c;
}

}  // namespace fr::ir
