#include "ir/onnx_import.h"

#include <algorithm>
#include <cerrno>
#include <cmath>
#include <cstring>
#include <fstream>
#include <sstream>
#include <unordered_map>

#include "onnx/onnx_pb.h"
#include "ops/op.h"

namespace fr::ir {
namespace {

// Ops that import handles itself rather than as kernels.
constexpr const char* kImportOps[] = {"Constant", "Dropout", "Flatten", "Identity", "Squeeze", "Unsqueeze"};
constexpr int64_t kMinOpset = 13, kMaxOpset = 17;

Result<std::string> ReadFile(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  if (!f) return Status::Invalid("[onnx] cannot read '" + path + "': " + std::strerror(errno));
  std::stringstream ss;
  ss << f.rdbuf();
  return ss.str();
}

Result<DType> DTypeFromOnnx(int32_t t, const std::string& what) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::BOOL: return DType::kBool;
    case onnx::TensorProto::UINT8: return DType::kU8;
    default:
      return Status::Invalid(what + " has ONNX element type " + std::to_string(t) +
                             " (" + onnx::TensorProto_DataType_Name(t) +
                             "); flowrun supports float32, int64, int32, bool and uint8");
  }
}

// Copies a TensorProto's data, checking the byte count against its shape.
Result<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& what) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    return Status::Invalid(what + " uses external data, which flowrun does not read; re-export with it embedded");
  }
  ASSIGN_OR_RETURN(DType dt, DTypeFromOnnx(p.data_type(), what));
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  Status s = CheckDims(dims);
  if (!s.ok()) return s.With(what + ": ");
  // Sizes are checked before allocating: a corrupt file may declare far more than it holds.
  const Shape shape(dims);
  const size_t want = static_cast<size_t>(shape.numel()) * SizeOf(dt);
  auto bad = [&](size_t got) {
    return Status::Invalid(what + " holds " + std::to_string(got) + " bytes of data, but its shape " +
                           shape.ToString() + " needs " + std::to_string(want) + " (truncated file?)");
  };
  if (p.has_raw_data() && p.raw_data().size() != want) return bad(p.raw_data().size());
  if (!p.has_raw_data()) {
    int n = dt == DType::kF32 ? p.float_data_size() : dt == DType::kI64 ? p.int64_data_size() : p.int32_data_size();
    if (static_cast<size_t>(n) * SizeOf(dt) != want) return bad(static_cast<size_t>(n) * SizeOf(dt));
  }
  Tensor t(dt, shape);
  if (p.has_raw_data()) {
    if (want) std::memcpy(t.raw(), p.raw_data().data(), want);
    return t;
  }
  auto copy = [&](const auto& field, auto convert) {
    for (int i = 0; i < field.size(); ++i) convert(i, field.Get(i));
  };
  switch (dt) {
    case DType::kF32: copy(p.float_data(), [&](int i, float v) { t.data<float>()[i] = v; }); break;
    case DType::kI64: copy(p.int64_data(), [&](int i, int64_t v) { t.data<int64_t>()[i] = v; }); break;
    case DType::kI32: copy(p.int32_data(), [&](int i, int32_t v) { t.data<int32_t>()[i] = v; }); break;
    case DType::kBool: copy(p.int32_data(), [&](int i, int32_t v) { t.data<bool>()[i] = v != 0; }); break;
    case DType::kU8: copy(p.int32_data(), [&](int i, int32_t v) { t.data<uint8_t>()[i] = static_cast<uint8_t>(v); }); break;
  }
  return t;
}

std::vector<int64_t> ConstInts(const Tensor& t) {
  std::vector<int64_t> v;
  if (t.dtype() == DType::kI64) v.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  if (t.dtype() == DType::kI32) v.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  return v;
}

class Importer {
 public:
  Importer(const std::string& path, const std::map<std::string, TensorType>& inputs)
      : path_(path), bound_(inputs), b_(g_) {}

  Result<Graph> Run(const std::string& bytes) {
    onnx::ModelProto m;
    if (bytes.empty() || !m.ParseFromString(bytes) || !m.has_graph()) {
      return Status::Invalid("[onnx] " + path_ + ": not a valid ONNX model (empty, truncated or not an ONNX protobuf)");
    }
    RETURN_IF_ERROR(ReadOpset(m));
    const onnx::GraphProto& gp = m.graph();
    for (const auto& init : gp.initializer()) RETURN_IF_ERROR(AddInitializer(init));
    // Bindings first: a misspelt binding explains the graph input it leaves unbound.
    std::string inputs;
    for (const auto& in : gp.input())
      if (!names_.count(in.name())) inputs += (inputs.empty() ? "" : ", ") + in.name();
    for (const auto& [name, t] : bound_) {
      bool is_input = false;
      for (const auto& in : gp.input()) is_input |= in.name() == name && !names_.count(name);
      if (!is_input) {
        return Err("the config binds input '" + name + "', which is not a graph input of the model (graph inputs: " +
                   inputs + ")");
      }
    }
    for (const auto& in : gp.input()) RETURN_IF_ERROR(AddInput(in));
    for (const auto& n : gp.node()) RETURN_IF_ERROR(AddNode(n));
    for (const auto& out : gp.output()) {
      auto it = names_.find(out.name());
      if (it == names_.end()) return Err("graph output '" + out.name() + "' is not produced by any node");
      g_.outputs.push_back(it->second);
    }
    RETURN_IF_ERROR(FreezeBuffers());
    return std::move(g_);
  }

 private:
  Status Err(const std::string& msg) const { return Status::Invalid("[onnx] " + path_ + ": " + msg); }
  Status NodeErr(const onnx::NodeProto& n, const std::string& msg) const {
    return Err("node '" + n.name() + "' (" + n.op_type() + ", opset " + std::to_string(opset_) + "): " + msg);
  }

  Status ReadOpset(const onnx::ModelProto& m) {
    for (const auto& o : m.opset_import())
      if (o.domain().empty() || o.domain() == "ai.onnx") opset_ = o.version();
    if (opset_ < kMinOpset || opset_ > kMaxOpset) {
      return Err("opset " + std::to_string(opset_) + " is not supported; flowrun imports opsets " +
                 std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + " (export with opset_version=17)");
    }
    g_.opset = static_cast<int>(opset_);
    return Status::Ok();
  }

  Status AddInitializer(const onnx::TensorProto& p) {
    auto t = TensorFromProto(p, "[onnx] " + path_ + ": initializer '" + p.name() + "'");
    if (!t.ok()) return t.status();
    bool param = t->dtype() == DType::kF32 && t->shape().rank() >= 1;
    TensorType type{t->dtype(), t->shape()};
    names_[p.name()] = g_.AddValue(p.name(), type, param ? ValueKind::kParam : ValueKind::kConst, std::move(*t));
    return Status::Ok();
  }

  Status AddInput(const onnx::ValueInfoProto& in) {
    if (names_.count(in.name())) return Status::Ok();  // an initializer listed as input (old exporters)
    auto it = bound_.find(in.name());
    if (it == bound_.end()) {
      return Err("graph input '" + in.name() + "' is not bound: map it to a data field in model.inputs");
    }
    const auto& tt = in.type().tensor_type();
    ASSIGN_OR_RETURN(DType dt, DTypeFromOnnx(tt.elem_type(), "[onnx] " + path_ + ": graph input '" + in.name() + "'"));
    const TensorType& want = it->second;
    if (dt != want.dtype) {
      return Err("graph input '" + in.name() + "' is " + std::string(Name(dt)) + " but its data field gives " +
                 std::string(Name(want.dtype)));
    }
    const auto& dims = tt.shape().dim();
    bool rank_ok = dims.size() == want.shape.rank();
    for (int i = 0; rank_ok && i < dims.size(); ++i) {
      if (dims[i].has_dim_value() && dims[i].dim_value() != want.shape[i]) rank_ok = false;
    }
    if (!rank_ok) {
      std::string decl = "[";
      for (int i = 0; i < dims.size(); ++i)
        decl += (i ? ", " : "") + (dims[i].has_dim_value() ? std::to_string(dims[i].dim_value()) : dims[i].dim_param());
      return Err("graph input '" + in.name() + "' is declared " + decl + "] but the data gives " +
                 want.shape.ToString() + " (batch = train.micro_batch)");
    }
    names_[in.name()] = g_.AddValue(in.name(), want, ValueKind::kInput);
    return Status::Ok();
  }

  Result<ValueId> Input(const onnx::NodeProto& n, int i) const {
    const std::string& name = n.input(i);
    auto it = names_.find(name);
    if (it == names_.end()) {
      return NodeErr(n, "input '" + name + "' is not produced by an earlier node, an initializer or a graph input");
    }
    return it->second;
  }

  bool IsConst(ValueId v) const { return v != kNoValue && g_.value(v).kind == ValueKind::kConst; }

  Result<std::vector<int64_t>> ConstIntsInput(const onnx::NodeProto& n, int i) {
    ASSIGN_OR_RETURN(ValueId v, Input(n, i));
    if (!IsConst(v)) return NodeErr(n, "input " + std::to_string(i) + " ('" + n.input(i) + "') must be a constant");
    return ConstInts(g_.value(v).data);
  }

  Status ReadAttrs(const onnx::NodeProto& n, Attrs& a) {
    for (const auto& at : n.attribute()) {
      switch (at.type()) {
        case onnx::AttributeProto::INT: a.Set(at.name(), static_cast<int64_t>(at.i())); break;
        case onnx::AttributeProto::FLOAT: a.Set(at.name(), static_cast<double>(at.f())); break;
        case onnx::AttributeProto::STRING: a.Set(at.name(), at.s()); break;
        case onnx::AttributeProto::INTS: a.Set(at.name(), std::vector<int64_t>(at.ints().begin(), at.ints().end())); break;
        case onnx::AttributeProto::FLOATS: {
          std::vector<double> f(at.floats().begin(), at.floats().end());
          a.Set(at.name(), f);
          break;
        }
        case onnx::AttributeProto::TENSOR:
          if (n.op_type() == "ConstantOfShape") break;  // read by LowerConstantOfShape
          return NodeErr(n, "attribute '" + at.name() + "' has a type flowrun does not read");
        default: return NodeErr(n, "attribute '" + at.name() + "' has a type flowrun does not read");
      }
    }
    return Status::Ok();
  }

  Status Alias(const onnx::NodeProto& n, ValueId v) {
    names_[n.output(0)] = v;
    for (int i = 1; i < n.output_size(); ++i) {
      if (!n.output(i).empty()) used_aux_[n.output(i)] = n.name();
    }
    return Status::Ok();
  }

  Status AddConstant(const onnx::NodeProto& n) {
    for (const auto& at : n.attribute()) {
      Tensor t;
      if (at.name() == "value") {
        auto r = TensorFromProto(at.t(), "[onnx] " + path_ + ": node '" + n.name() + "' value");
        if (!r.ok()) return r.status();
        t = std::move(*r);
      } else if (at.name() == "value_float") {
        t = Tensor::Full(Shape{}, at.f());
      } else if (at.name() == "value_int" || at.name() == "value_ints") {
        std::vector<int64_t> v = at.name() == "value_int" ? std::vector<int64_t>{at.i()}
                                                          : std::vector<int64_t>(at.ints().begin(), at.ints().end());
        t = Tensor(DType::kI64, at.name() == "value_int" ? Shape{} : Shape{static_cast<int64_t>(v.size())});
        std::copy(v.begin(), v.end(), t.data<int64_t>());
      } else if (at.name() == "value_floats") {
        t = Tensor(DType::kF32, Shape{at.floats_size()});
        std::copy(at.floats().begin(), at.floats().end(), t.data<float>());
      } else {
        return NodeErr(n, "Constant attribute '" + at.name() + "' is not supported");
      }
      names_[n.output(0)] = b_.Const(n.output(0), std::move(t));
      return Status::Ok();
    }
    return NodeErr(n, "Constant has no value");
  }

  // Reshape-like ops become one Reshape with the target shape resolved.
  Result<std::vector<int64_t>> TargetShape(const onnx::NodeProto& n, const Shape& x, const Attrs& a) {
    const std::string& op = n.op_type();
    std::vector<int64_t> out;
    if (op == "Reshape") {
      ASSIGN_OR_RETURN(std::vector<int64_t> spec, ConstIntsInput(n, 1));
      bool allowzero = a.Int("allowzero") != 0;
      int64_t known = 1, infer_at = -1;
      for (size_t i = 0; i < spec.size(); ++i) {
        int64_t d = spec[i];
        if (d == 0 && !allowzero) {
          if (static_cast<int>(i) >= x.rank()) return NodeErr(n, "shape copies dim " + std::to_string(i) + " of a rank-" + std::to_string(x.rank()) + " input");
          d = x[static_cast<int>(i)];
        }
        if (d == -1) {
          if (infer_at >= 0) return NodeErr(n, "shape has more than one -1");
          infer_at = static_cast<int64_t>(i);
        } else if (d < 0) {
          return NodeErr(n, "shape has a negative dimension " + std::to_string(d));
        } else {
          known *= d;
        }
        out.push_back(d);
      }
      if (infer_at >= 0) {
        if (known == 0 || x.numel() % known) return NodeErr(n, "cannot reshape " + x.ToString() + " with a -1 in the shape");
        out[static_cast<size_t>(infer_at)] = x.numel() / known;
      }
    } else if (op == "Flatten") {
      int64_t axis = a.Int("axis", 1);
      if (axis < 0) axis += x.rank();
      if (axis < 0 || axis > x.rank()) return NodeErr(n, "axis out of range");
      int64_t lead = 1;
      for (int i = 0; i < axis; ++i) lead *= x[i];
      out = {lead, x.numel() / (lead ? lead : 1)};
    } else {  // Squeeze / Unsqueeze: axes from input 1 (opset 13+)
      std::vector<int64_t> axes;
      if (n.input_size() > 1 && !n.input(1).empty()) {
        ASSIGN_OR_RETURN(axes, ConstIntsInput(n, 1));
      }
      if (op == "Unsqueeze") {
        int r = x.rank() + static_cast<int>(axes.size());
        std::vector<bool> ins(static_cast<size_t>(r), false);
        for (int64_t ax : axes) {
          int64_t k = ax < 0 ? ax + r : ax;
          if (k < 0 || k >= r || ins[static_cast<size_t>(k)]) return NodeErr(n, "bad axes");
          ins[static_cast<size_t>(k)] = true;
        }
        for (int i = 0, j = 0; i < r; ++i) out.push_back(ins[static_cast<size_t>(i)] ? 1 : x[j++]);
      } else {
        std::vector<bool> drop(static_cast<size_t>(x.rank()), axes.empty());
        for (int64_t ax : axes) {
          int64_t k = ax < 0 ? ax + x.rank() : ax;
          if (k < 0 || k >= x.rank() || x[static_cast<int>(k)] != 1) return NodeErr(n, "cannot squeeze axis " + std::to_string(ax) + " of " + x.ToString());
          drop[static_cast<size_t>(k)] = true;
        }
        for (int i = 0; i < x.rank(); ++i)
          if (!(drop[static_cast<size_t>(i)] && x[i] == 1)) out.push_back(x[i]);
      }
    }
    return out;
  }

  Status AddNode(const onnx::NodeProto& n) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      return NodeErr(n, "domain '" + n.domain() + "' is not supported (only the default ONNX domain)");
    }
    for (const auto& in : n.input())
      if (used_aux_.count(in)) return NodeErr(n, "uses '" + in + "', the mask output of " + used_aux_[in] + ", which flowrun does not produce");
    const std::string& op = n.op_type();
    if (op == "Constant") return AddConstant(n);
    if (n.input_size() < 1) return NodeErr(n, "has no inputs");
    ASSIGN_OR_RETURN(ValueId x, Input(n, 0));
    if (op == "Identity" && g_.value(x).kind == ValueKind::kParam) return Untie(n, x);
    if (op == "Identity" || op == "Dropout") return Alias(n, x);
    Attrs attrs;
    RETURN_IF_ERROR(ReadAttrs(n, attrs));
    if (op == "Shape") return AddShape(n, x, attrs);
    std::vector<ValueId> ins;
    OpKind kind;
    if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") {
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, TargetShape(n, g_.type(x).shape, attrs));
      RETURN_IF_ERROR(CheckDims(shape).With("[onnx] " + path_ + ": node '" + n.name() + "': "));
      attrs = Attrs();
      attrs.Set("shape", shape);
      ins = {x};
      kind = OpKind::kReshape;
    } else {
      auto k = OnnxOp(op);
      if (!k) return Unsupported(n);
      kind = *k;
      const OpDef& d = Def(kind);
      if (n.input_size() < d.min_in || n.input_size() > d.max_in) {
        return NodeErr(n, "has " + std::to_string(n.input_size()) + " inputs; flowrun expects " +
                          std::to_string(d.min_in) + (d.max_in > d.min_in ? " to " + std::to_string(d.max_in) : ""));
      }
      for (int i = 0; i < n.input_size(); ++i) {
        if (n.input(i).empty()) { ins.push_back(kNoValue); continue; }
        ASSIGN_OR_RETURN(ValueId v, Input(n, i));
        ins.push_back(v);
      }
      RETURN_IF_ERROR(CheckAttrs(n, kind, attrs));
      RETURN_IF_ERROR(Lower(n, kind, ins, attrs));
    }
    std::string name = n.name().empty() ? n.output(0) : n.name();
    auto outs = b_.Add(kind, ins, attrs, b_.UniqueName(name), Phase::kForward);
    if (!outs.ok()) return NodeErr(n, outs.status().message());
    for (int i = 0; i < n.output_size() && i < static_cast<int>(outs->size()); ++i) {
      if (n.output(i).empty()) continue;
      g_.value((*outs)[static_cast<size_t>(i)]).name = n.output(i);
      names_[n.output(i)] = (*outs)[static_cast<size_t>(i)];
    }
    return FoldIfConstant(n, ins);
  }

  // Attribute values that change semantics flowrun does not implement are errors, never ignored.
  Status CheckAttrs(const onnx::NodeProto& n, OpKind k, const Attrs& a) {
    if (k == OpKind::kLayerNormalization && a.Int("stash_type", 1) != 1) {
      return NodeErr(n, "stash_type other than float32 is not supported");
    }
    for (const auto& [key, v] : a.all()) {
      static const std::map<OpKind, std::vector<std::string>> kKnown = {
          {OpKind::kGemm, {"alpha", "beta", "transA", "transB"}},
          {OpKind::kSoftmax, {"axis"}},
          {OpKind::kLogSoftmax, {"axis"}},
          {OpKind::kLayerNormalization, {"axis", "epsilon", "stash_type"}},
          {OpKind::kTranspose, {"perm"}},
          {OpKind::kGather, {"axis"}},
          {OpKind::kConcat, {"axis"}},
          {OpKind::kSplit, {"axis"}},
          {OpKind::kCast, {"to"}},
          {OpKind::kTrilu, {"upper"}},
          {OpKind::kShape, {"start", "end"}},
          {OpKind::kConstantOfShape, {"value"}},
      };
      auto it = kKnown.find(k);
      bool ok = it != kKnown.end() && std::find(it->second.begin(), it->second.end(), key) != it->second.end();
      if (!ok) return NodeErr(n, "attribute '" + key + "' is not supported for " + n.op_type());
    }
    return Status::Ok();
  }

  bool AllConst(const std::vector<ValueId>& ins) const {
    for (ValueId v : ins)
      if (v != kNoValue && !IsConst(v)) return false;
    return true;
  }

  // Runs a node on constant inputs with its CPU kernel; its outputs become constants.
  Status Evaluate(const Node& node) {
    std::vector<Tensor> in, out;
    for (ValueId v : node.in) in.push_back(v == kNoValue ? Tensor() : g_.value(v).data);
    for (ValueId v : node.out) out.emplace_back(g_.type(v).dtype, g_.type(v).shape);
    KernelCtx ctx{node, in, out};
    RETURN_IF_ERROR(Def(node.op).cpu(ctx));
    for (size_t i = 0; i < node.out.size(); ++i) {
      Value& v = g_.value(node.out[i]);
      v.kind = ValueKind::kConst;
      v.data = out[i];
      v.producer = -1;
    }
    return Status::Ok();
  }

  // A node whose inputs are all constants is evaluated now and becomes a constant.
  Status FoldIfConstant(const onnx::NodeProto& n, const std::vector<ValueId>& ins) {
    if (!AllConst(ins)) return Status::Ok();
    Status s = Evaluate(g_.nodes.back());
    if (!s.ok()) return NodeErr(n, "constant folding failed: " + s.message());
    g_.nodes.pop_back();
    return Status::Ok();
  }

  // PyTorch's eval-mode export shares initializers of equal value (every LayerNorm weight is ones
  // at initialisation) through Identity nodes; they are separate parameters, so each name gets its
  // own copy. (Weights tied through Linear are already untied by the export's constant folding.)
  Status Untie(const onnx::NodeProto& n, ValueId x) {
    const TensorType type = g_.type(x);
    Tensor data = g_.value(x).data.Clone();
    names_[n.output(0)] = g_.AddValue(n.output(0), type, ValueKind::kParam, std::move(data));
    return Status::Ok();
  }

  // Shape depends only on its input's static type: it is a constant whatever the input is.
  Status AddShape(const onnx::NodeProto& n, ValueId x, const Attrs& attrs) {
    RETURN_IF_ERROR(CheckAttrs(n, OpKind::kShape, attrs));
    const Shape& s = g_.type(x).shape;
    const int64_t r = s.rank();
    auto clamp = [r](int64_t v) { return std::clamp(v < 0 ? v + r : v, int64_t{0}, r); };
    const int64_t b = clamp(attrs.Int("start", 0)), e = std::max(b, clamp(attrs.Int("end", r)));
    Tensor t(DType::kI64, Shape{e - b});
    for (int64_t i = b; i < e; ++i) t.data<int64_t>()[i - b] = s[static_cast<int>(i)];
    names_[n.output(0)] = b_.Const(n.output(0), std::move(t));
    return Status::Ok();
  }

  // Buffers PyTorch exports as initializers (a causal mask's tril) look like parameters. One that
  // no float path connects to a graph output gets no gradient: it becomes a constant here, and the
  // nodes it alone feeds (Slice -> Equal -> Where's condition) fold. Unused initializers stay
  // parameters, for training's note that they are not trained.
  Status FreezeBuffers() {
    std::vector<bool> live(g_.values.size(), false), used(g_.values.size(), false);
    for (ValueId v : g_.outputs) live[static_cast<size_t>(v)] = g_.type(v).dtype == DType::kF32;
    for (size_t i = g_.nodes.size(); i-- > 0;) {
      const Node& node = g_.nodes[i];
      bool any = false;
      for (ValueId v : node.out) any = any || live[static_cast<size_t>(v)];
      for (ValueId v : node.in) {
        if (v == kNoValue) continue;
        used[static_cast<size_t>(v)] = true;
        if (any && g_.type(v).dtype == DType::kF32) live[static_cast<size_t>(v)] = true;
      }
    }
    std::vector<ValueId> params;
    for (ValueId p : g_.params) {
      if (live[static_cast<size_t>(p)] || !used[static_cast<size_t>(p)]) {
        params.push_back(p);
      } else {
        g_.value(p).kind = ValueKind::kConst;
      }
    }
    if (params.size() == g_.params.size()) return Status::Ok();
    g_.params = params;
    std::vector<bool> keep(g_.nodes.size(), true);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!AllConst(g_.nodes[i].in)) continue;
      Status s = Evaluate(g_.nodes[i]);
      if (!s.ok()) return Err("node '" + g_.nodes[i].name + "': constant folding failed: " + s.message());
      keep[i] = false;
    }
    g_.KeepNodes(keep);
    return Status::Ok();
  }

  // ---- Inputs that decide an output's shape must be constants: they move into attributes. ----

  Result<double> ConstScalar(const onnx::NodeProto& n, int i) {
    ASSIGN_OR_RETURN(ValueId v, Input(n, i));
    const Tensor& t = g_.value(v).data;
    if (!IsConst(v) || t.numel() != 1) {
      return NodeErr(n, "input " + std::to_string(i) + " ('" + n.input(i) + "') must be a constant scalar");
    }
    switch (t.dtype()) {
      case DType::kF32: return static_cast<double>(t.data<float>()[0]);
      case DType::kI64: return static_cast<double>(t.data<int64_t>()[0]);
      case DType::kI32: return static_cast<double>(t.data<int32_t>()[0]);
      default: return NodeErr(n, "input " + std::to_string(i) + " must be a number");
    }
  }

  Status Lower(const onnx::NodeProto& n, OpKind k, std::vector<ValueId>& ins, Attrs& a) {
    const Shape x = ins[0] != kNoValue ? g_.type(ins[0]).shape : Shape{};
    const bool has1 = ins.size() > 1 && ins[1] != kNoValue;
    switch (k) {
      case OpKind::kSplit: {
        auto axis = x.Axis(a.Int("axis", 0));
        if (!axis.ok()) return NodeErr(n, axis.status().message());
        std::vector<int64_t> sizes;
        if (has1) {
          ASSIGN_OR_RETURN(sizes, ConstIntsInput(n, 1));
        } else {
          const int64_t parts = n.output_size(), dim = x[*axis];
          if (dim % parts) {
            return NodeErr(n, "cannot split dim " + std::to_string(dim) + " into " + std::to_string(parts) +
                                  " equal parts");
          }
          sizes.assign(static_cast<size_t>(parts), dim / parts);
        }
        if (static_cast<int>(sizes.size()) != n.output_size()) {
          return NodeErr(n, std::to_string(sizes.size()) + " split sizes for " + std::to_string(n.output_size()) +
                                " outputs");
        }
        a.Set("axis", int64_t{*axis});
        a.Set("split", sizes);
        ins.resize(1);
        return Status::Ok();
      }
      case OpKind::kSlice: return LowerSlice(n, x, ins, a);
      case OpKind::kExpand: {
        ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstIntsInput(n, 1));
        RETURN_IF_ERROR(CheckDims(shape).With("[onnx] " + path_ + ": node '" + n.name() + "': "));
        a.Set("shape", shape);
        ins.resize(1);
        return Status::Ok();
      }
      case OpKind::kTrilu:
        if (has1) {
          ASSIGN_OR_RETURN(double kv, ConstScalar(n, 1));
          a.Set("k", static_cast<int64_t>(kv));
        }
        ins.resize(1);
        return Status::Ok();
      case OpKind::kCast: {
        ASSIGN_OR_RETURN(DType to, DTypeFromOnnx(static_cast<int32_t>(a.Int("to", 0)),
                                                 "[onnx] " + path_ + ": node '" + n.name() + "' (Cast) target"));
        a = Attrs();
        a.Set("dtype", static_cast<int64_t>(to));
        return Status::Ok();
      }
      case OpKind::kConstantOfShape: return LowerConstantOfShape(n, a);
      case OpKind::kRange: {
        ASSIGN_OR_RETURN(double start, ConstScalar(n, 0));
        ASSIGN_OR_RETURN(double limit, ConstScalar(n, 1));
        ASSIGN_OR_RETURN(double delta, ConstScalar(n, 2));
        if (delta == 0) return NodeErr(n, "Range with delta 0");
        const auto size = static_cast<int64_t>(std::max(std::ceil((limit - start) / delta), 0.0));
        RETURN_IF_ERROR(CheckDims({size}).With("[onnx] " + path_ + ": node '" + n.name() + "': "));
        a.Set("size", size);
        return Status::Ok();
      }
      default: return Status::Ok();
    }
  }

  // ONNX Slice(data, starts, ends, axes?, steps?) -> per-axis starts/ends/steps with negative
  // positions resolved and clamped as the ONNX spec says; axes not named are taken whole.
  Status LowerSlice(const onnx::NodeProto& n, const Shape& x, std::vector<ValueId>& ins, Attrs& a) {
    ASSIGN_OR_RETURN(std::vector<int64_t> starts, ConstIntsInput(n, 1));
    ASSIGN_OR_RETURN(std::vector<int64_t> ends, ConstIntsInput(n, 2));
    std::vector<int64_t> axes, steps;
    if (ins.size() > 3 && ins[3] != kNoValue) {
      ASSIGN_OR_RETURN(axes, ConstIntsInput(n, 3));
    }
    if (ins.size() > 4 && ins[4] != kNoValue) {
      ASSIGN_OR_RETURN(steps, ConstIntsInput(n, 4));
    }
    if (axes.empty())
      for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
    if (steps.empty()) steps.assign(starts.size(), 1);
    if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
      return NodeErr(n, "starts, ends, axes and steps differ in length");
    }
    const int64_t r = x.rank();
    std::vector<int64_t> st(static_cast<size_t>(r), 0), en = x.dims(), sp(static_cast<size_t>(r), 1);
    std::vector<bool> seen(static_cast<size_t>(r), false);
    for (size_t i = 0; i < starts.size(); ++i) {
      const int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
      if (ax < 0 || ax >= r || seen[static_cast<size_t>(ax)]) {
        return NodeErr(n, "bad or repeated axis " + std::to_string(axes[i]) + " for " + x.ToString());
      }
      seen[static_cast<size_t>(ax)] = true;
      if (steps[i] == 0) return NodeErr(n, "slice step 0");
      const int64_t dim = x[static_cast<int>(ax)];
      int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i], e = ends[i] < 0 ? ends[i] + dim : ends[i];
      if (steps[i] > 0) {
        b = std::clamp(b, int64_t{0}, dim);
        e = std::clamp(e, int64_t{0}, dim);
      } else {
        b = std::clamp(b, int64_t{0}, dim - 1);
        e = std::clamp(e, int64_t{-1}, dim - 1);
      }
      st[static_cast<size_t>(ax)] = b;
      en[static_cast<size_t>(ax)] = e;
      sp[static_cast<size_t>(ax)] = steps[i];
    }
    a.Set("starts", st);
    a.Set("ends", en);
    a.Set("steps", sp);
    ins.resize(1);
    return Status::Ok();
  }

  // ConstantOfShape(shape) with its one-element tensor attribute `value` (float32 0 if absent).
  Status LowerConstantOfShape(const onnx::NodeProto& n, Attrs& a) {
    ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstIntsInput(n, 0));
    RETURN_IF_ERROR(CheckDims(shape).With("[onnx] " + path_ + ": node '" + n.name() + "': "));
    a = Attrs();
    a.Set("shape", shape);
    a.Set("dtype", static_cast<int64_t>(DType::kF32));
    for (const auto& at : n.attribute()) {
      if (at.name() != "value") continue;
      ASSIGN_OR_RETURN(Tensor t, TensorFromProto(at.t(), "[onnx] " + path_ + ": node '" + n.name() + "' value"));
      if (t.numel() != 1) return NodeErr(n, "value must have one element");
      double v = 0;
      switch (t.dtype()) {
        case DType::kF32: v = t.data<float>()[0]; break;
        case DType::kI64: v = static_cast<double>(t.data<int64_t>()[0]); break;
        case DType::kI32: v = t.data<int32_t>()[0]; break;
        case DType::kBool: v = t.data<bool>()[0] ? 1 : 0; break;
        case DType::kU8: v = t.data<uint8_t>()[0]; break;
      }
      a.Set("value", v);
      a.Set("dtype", static_cast<int64_t>(t.dtype()));
    }
    return Status::Ok();
  }

  Status Unsupported(const onnx::NodeProto& n) {
    std::string list = SupportedOnnxOps();
    for (const char* s : kImportOps) list += std::string(", ") + s;
    return NodeErr(n, "op type '" + n.op_type() + "' is not supported. Supported ops: " + list);
  }

  std::string path_;
  const std::map<std::string, TensorType>& bound_;
  Graph g_;
  Builder b_;
  int64_t opset_ = 0;
  std::unordered_map<std::string, ValueId> names_;
  std::unordered_map<std::string, std::string> used_aux_;
};

}  // namespace

Result<std::vector<OnnxInput>> OnnxInputs(const std::string& path) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  onnx::ModelProto m;
  if (bytes.empty() || !m.ParseFromString(bytes) || !m.has_graph()) {
    return Status::Invalid("[onnx] " + path + ": not a valid ONNX model (empty, truncated or not an ONNX protobuf)");
  }
  std::vector<OnnxInput> out;
  std::unordered_map<std::string, bool> inits;
  for (const auto& i : m.graph().initializer()) inits[i.name()] = true;
  for (const auto& in : m.graph().input()) {
    if (inits.count(in.name())) continue;
    OnnxInput oi;
    oi.name = in.name();
    auto dt = DTypeFromOnnx(in.type().tensor_type().elem_type(), "[onnx] " + path + ": graph input '" + in.name() + "'");
    if (!dt.ok()) return dt.status();
    oi.dtype = *dt;
    for (const auto& d : in.type().tensor_type().shape().dim()) oi.dims.push_back(d.has_dim_value() ? d.dim_value() : -1);
    out.push_back(std::move(oi));
  }
  return out;
}

Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& path,
                              const std::map<std::string, TensorType>& inputs) {
  return Importer(path, inputs).Run(bytes);
}

Result<Graph> ImportOnnx(const std::string& path, const std::map<std::string, TensorType>& inputs) {
  ASSIGN_OR_RETURN(std::string bytes, ReadFile(path));
  return ImportOnnxBytes(bytes, path, inputs);
}

}  // namespace fr::ir
