#include "ir/onnx_import.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <filesystem>
#include <fstream>
#include <limits>
#include <optional>
#include <set>
#include <unordered_map>

#include "base/file.h"
#include "base/glob.h"
#include "base/hash.h"
#include "base/process.h"
#include "ir/onnx_lower.h"
#include "ir/onnx_proto.h"
#include "ir/onnx_spec.h"
#include "onnx/onnx_pb.h"
#include "ops/cuda/backend.h"
#include "ops/kernel_args.h"
#include "ops/op.h"

namespace fr::ir {

namespace {

constexpr int64_t kMinOpset = kMinOnnxOpset, kMaxOpset = kMaxOnnxOpset;

// Constant folding materialises at most this much in all: 1 GiB (a real model folds masks and
// position tables of a few MiB), or an eighth of the memory budget where that is less.
double FoldLimitBytes() { return std::min(double{1 << 30}, MemoryBudgetBytes() / 8); }

Result<std::shared_ptr<OnnxModel>> Parse(std::string_view bytes, const std::string& path) {
  auto m = std::make_shared<OnnxModel>();
  m->path = path;
  // Over 2 GiB is past protobuf's limit on one message (such models keep their weights outside).
  if (bytes.empty() || bytes.size() > static_cast<size_t>(std::numeric_limits<int>::max()) ||
      !m->proto.ParseFromArray(bytes.data(), static_cast<int>(bytes.size())) || !m->proto.has_graph()) {
    return Status::Invalid("[onnx] " + path + ": not a valid ONNX model (empty, truncated or not an ONNX protobuf)");
  }
  return m;
}

class Importer {
 public:
  Importer(std::shared_ptr<const OnnxModel> model, const std::map<std::string, TensorType>& inputs,
           const ImportOptions& rules)
      : model_(std::move(model)), path_(model_->path), bound_(inputs), rules_(rules), b_(g_) {}

  Result<Graph> Run() {
    const onnx::ModelProto& m = model_->proto;
    RETURN_IF_ERROR(ReadOpset(m));
    const onnx::GraphProto& gp = m.graph();
    for (const auto& init : gp.initializer()) RETURN_IF_ERROR(AddInitializer(init));
    RETURN_IF_ERROR(CopyMergedInitializers(gp));
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
    RETURN_IF_ERROR(TieTransposedCopies());
    RETURN_IF_ERROR(ClassifyInitializers());
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
                 std::to_string(kMinOpset) + " to " + std::to_string(kMaxOpset) + " (export with an opset_version in that range)");
    }
    g_.opset = static_cast<int>(opset_);
    return Status::Ok();
  }

  Status AddInitializer(const onnx::TensorProto& p) {
    auto t = TensorFromProto(p, "[onnx] " + path_ + ": initializer '" + p.name() + "'", model_);
    if (!t.ok()) return t.status();
    bool param = t->dtype() == DType::kF32 && t->shape().rank() >= 1;
    TensorType type{t->dtype(), t->shape()};
    names_[p.name()] = g_.AddValue(p.name(), type, param ? ValueKind::kParam : ValueKind::kConst, std::move(*t));
    return Status::Ok();
  }

  // The dynamo exporter merges initializers of equal value of up to 1024 elements (onnx_ir's
  // DeduplicateInitializersPass): a freshly initialised model's zero biases and unit norm weights
  // arrive as one initializer that many nodes read, where PyTorch trains each apart. So every node
  // after the first that reads a float initializer of at most that size gets a copy of its own,
  // INIT@NODE (an Identity reader unties itself: Untie); model.tie keeps one. A larger initializer
  // read twice is a real share: no exporter merges those.
  static constexpr int64_t kMergedMaxElements = 1024;
  Status CopyMergedInitializers(const onnx::GraphProto& gp) {
    std::map<std::string, int> readers;
    std::vector<bool> tie_hit(rules_.tie.size(), false);
    for (const auto& n : gp.node()) {
      if (n.op_type() == "Identity") continue;
      std::set<std::string> seen;
      for (const std::string& in : n.input()) {
        auto it = names_.find(in);
        if (it == names_.end() || !seen.insert(in).second) continue;
        const ValueId v = it->second;
        if (g_.value(v).kind != ValueKind::kParam || g_.type(v).shape.numel() > kMergedMaxElements) continue;
        if (readers[in]++ == 0) continue;
        bool tied = false;
        for (size_t k = 0; k < rules_.tie.size(); ++k)
          if (GlobMatch(rules_.tie[k], in)) tied = tie_hit[k] = true;
        if (tied) continue;
        const std::string copy = in + "@" + (n.name().empty() ? (n.output_size() ? n.output(0) : "") : n.name());
        const TensorType type = g_.type(v);
        Tensor data = g_.value(v).data.Clone();
        private_[{&n, in}] = g_.AddValue(copy, type, ValueKind::kParam, std::move(data));
        g_.copies.push_back({copy, in});
      }
    }
    for (size_t k = 0; k < rules_.tie.size(); ++k) {
      if (!tie_hit[k]) {
        return Status::Invalid(rules_.where + "model.tie: '" + rules_.tie[k] + "' matches no float initializer of at most " +
                               std::to_string(kMergedMaxElements) + " values that several nodes of " + path_ + " read");
      }
    }
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
    auto own = private_.find({&n, name});
    if (own != private_.end()) return own->second;
    auto it = names_.find(name);
    if (it == names_.end()) {
      return NodeErr(n, "input '" + name + "' is not produced by an earlier node, an initializer or a graph input");
    }
    return it->second;
  }

  bool IsConst(ValueId v) const { return v != kNoValue && g_.value(v).kind == ValueKind::kConst; }

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

  Status AddNode(const onnx::NodeProto& n) {
    if (!n.domain().empty() && n.domain() != "ai.onnx") {
      return NodeErr(n, "domain '" + n.domain() + "' is not supported (only the default ONNX domain)");
    }
    if (const std::string why = CheckOnnxNode(n, opset_); !why.empty()) return NodeErr(n, why);
    for (const auto& in : n.input())
      if (used_aux_.count(in)) return NodeErr(n, "uses '" + in + "', an optional output of " + used_aux_[in] + ", which flowrun does not produce");
    const std::string& op = n.op_type();
    if (op == "Constant") return AddConstant(n);
    if (n.input_size() < 1) return NodeErr(n, "has no inputs");
    ASSIGN_OR_RETURN(ValueId x, Input(n, 0));
    if (op == "Identity" && g_.value(x).kind == ValueKind::kParam) return Untie(n, x);
    if (op == "Identity") return Alias(n, x);
    if (op == "Dropout") return AddDropout(n, x);
    Attrs attrs;
    RETURN_IF_ERROR(ReadAttrs(n, attrs));
    if (op == "Shape") return AddShape(n, x, attrs);
    if (op == "Gelu") RETURN_IF_ERROR(LowerGelu(n, attrs));
    if (op == "BatchNormalization") return AddBatchNorm(n, x, attrs);
    const bool reshape = op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze";
    auto k = OnnxKernelKind(op);
    if (!k) return Unsupported(n);
    const OpKind kind = *k;
    std::vector<ValueId> ins;
    for (int i = 0; i < n.input_size(); ++i) {
      if (n.input(i).empty()) {
        ins.push_back(kNoValue);
        continue;
      }
      ASSIGN_OR_RETURN(ValueId v, Input(n, i));
      ins.push_back(v);
    }
    const OnnxNodeCtx ctx{n, g_, "[onnx] " + path_ + ": node '" + n.name() + "'",
                          [&](const std::string& msg) { return NodeErr(n, msg); }};
    if (reshape) {
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, ReshapeTarget(ctx, ins, attrs));
      attrs = Attrs();
      attrs.Set("shape", shape);
      ins = {x};
    } else {
      RETURN_IF_ERROR(CheckAttrs(n, kind, attrs));
      RETURN_IF_ERROR(LowerOnnxNode(ctx, kind, ins, attrs));
    }
    std::string name = n.name().empty() ? n.output(0) : n.name();
    auto outs = b_.Add(kind, ins, attrs, b_.UniqueName(name), Phase::kForward);
    if (!outs.ok()) return NodeErr(n, outs.status().message());
    for (int i = 0; i < n.output_size(); ++i) {
      if (n.output(i).empty()) continue;
      if (i >= static_cast<int>(outs->size())) {  // an optional output flowrun does not compute (MaxPool's Indices)
        used_aux_[n.output(i)] = n.name();
        continue;
      }
      g_.value((*outs)[static_cast<size_t>(i)]).name = n.output(i);
      names_[n.output(i)] = (*outs)[static_cast<size_t>(i)];
    }
    return FoldIfConstant(n, ins);
  }

  // Dropout(data, ratio = 0.5, training_mode = false) trains as flowrun's Dropout: the file's
  // training_mode when it says false (an inference export) or model.dropout: false make it the
  // identity. Its mask derives from train.seed (or the node's seed attribute) and the node's name,
  // so that every rank and every layout draws the same one.
  Status AddDropout(const onnx::NodeProto& n, ValueId x) {
    auto scalar = [&](int i, const char* what) -> Result<std::optional<double>> {
      if (n.input_size() <= i || n.input(i).empty()) return std::optional<double>();
      ASSIGN_OR_RETURN(ValueId v, Input(n, i));
      const Value& val = g_.value(v);
      if (!IsConst(v) || val.type.shape.numel() != 1) {
        return NodeErr(n, std::string("input ") + std::to_string(i) + " (" + what + ") must be a constant scalar");
      }
      switch (val.data.dtype()) {
        case DType::kF32: return std::optional<double>(val.data.data<float>()[0]);
        case DType::kBool: return std::optional<double>(val.data.data<bool>()[0] ? 1 : 0);
        default: return NodeErr(n, std::string("input ") + std::to_string(i) + " (" + what + ") has type " + std::string(Name(val.data.dtype())));
      }
    };
    ASSIGN_OR_RETURN(std::optional<double> ratio, scalar(1, "ratio"));
    ASSIGN_OR_RETURN(std::optional<double> training, scalar(2, "training_mode"));
    const double r = ratio.value_or(0.5);
    if (!(r >= 0 && r < 1)) return NodeErr(n, "ratio " + std::to_string(r) + " is outside [0, 1)");
    if (!rules_.dropout || (training && *training == 0) || r == 0) return Alias(n, x);
    if (n.output_size() > 1 && !n.output(1).empty()) used_aux_[n.output(1)] = n.name();  // the mask stays inside
    Attrs attrs;
    RETURN_IF_ERROR(ReadAttrs(n, attrs));
    const std::string name = n.name().empty() ? n.output(0) : n.name();
    const uint64_t seed = static_cast<uint64_t>(attrs.Has("seed") ? attrs.Int("seed") : rules_.seed);
    Attrs a;
    a.Set("ratio", r);
    a.Set("key", static_cast<int64_t>(Fnv1a64(name) ^ (seed * 0x9e3779b97f4a7c15ull)));
    auto outs = b_.Add(OpKind::kDropout, {x}, a, b_.UniqueName(name), Phase::kForward);
    if (!outs.ok()) return NodeErr(n, outs.status().message());
    g_.value((*outs)[0]).name = n.output(0);
    names_[n.output(0)] = (*outs)[0];
    return Status::Ok();
  }

  // ONNX's Gelu (opset 20) is flowrun's fused Gelu: the erf form's constants, or the tanh form.
  Status LowerGelu(const onnx::NodeProto& n, Attrs& attrs) {
    const std::string approximate = attrs.Str("approximate", "none");
    if (approximate != "none" && approximate != "tanh") {
      return NodeErr(n, "approximate='" + approximate + "' is not an approximation ONNX defines ('none' or 'tanh')");
    }
    attrs = GeluAttrs(approximate == "tanh");
    return Status::Ok();
  }

  // BatchNormalization as the ops of its formula over axes N, H, W (every axis but C): in training
  // mode the batch's mean and biased variance, (X - mean) / sqrt(var + epsilon) * scale + B; in
  // inference mode the running statistics (inputs 3 and 4) in their place. Made of ReduceMean,
  // its statistics follow the SBP rules: data parallel, a split batch's ReduceMean is a partial
  // sum that boxing all-reduces, so the statistics are the global batch's (synchronised batch
  // norm) with no special case. Training updates the running statistics of a training-mode node
  // (Graph::running); an evaluation (ImportOptions::batchnorm_inference) normalizes with them.
  Status AddBatchNorm(const onnx::NodeProto& n, ValueId x, const Attrs& a) {
    const Shape& xs = g_.type(x).shape;
    if (g_.type(x).dtype != DType::kF32 || xs.rank() < 2) {
      return NodeErr(n, "needs a float32 input [N, C, ...], got " + std::string(Name(g_.type(x).dtype)) + xs.ToString());
    }
    std::vector<ValueId> in = {x};
    for (int i = 1; i < 5; ++i) {
      ASSIGN_OR_RETURN(ValueId v, Input(n, i));
      const TensorType& t = g_.type(v);
      if (t.dtype != DType::kF32 || t.shape != Shape{xs[1]}) {
        return NodeErr(n, "input " + std::to_string(i) + " must be float32 [" + std::to_string(xs[1]) + "], got " +
                              std::string(Name(t.dtype)) + t.shape.ToString());
      }
      in.push_back(v);
    }
    // A training-mode node updates its running statistics; an evaluation reads them instead.
    const bool updates = a.Int("training_mode", n.output_size() > 1 ? 1 : 0) != 0;
    const bool training = updates && !rules_.batchnorm_inference;
    for (int i : {3, 4}) {
      if (g_.value(in[static_cast<size_t>(i)]).kind != ValueKind::kParam && !IsConst(in[static_cast<size_t>(i)])) {
        return NodeErr(n, std::string(i == 3 ? "input_mean" : "input_var") + " must be an initializer (a running statistic)");
      }
    }
    const int64_t per_channel_count = xs[1] > 0 ? xs.numel() / xs[1] : 0;
    if (training && per_channel_count < 2) {
      return NodeErr(n, "trains on one value per channel (input " + xs.ToString() + "): its batch variance is undefined");
    }
    const std::string base = n.name().empty() ? n.output(0) : n.name();
    auto op = [&](OpKind k, std::vector<ValueId> ins, Attrs at, const std::string& tag) -> Result<ValueId> {
      auto outs = b_.Add(k, std::move(ins), std::move(at), b_.UniqueName(base + "/" + tag), Phase::kForward);
      if (!outs.ok()) return NodeErr(n, outs.status().message());
      return (*outs)[0];
    };
    std::vector<int64_t> axes = {0}, per_channel = {xs[1]};
    for (int64_t i = 2; i < xs.rank(); ++i) axes.push_back(i), per_channel.push_back(1);
    Attrs reduce, shape;
    reduce.Set("axes", axes);
    reduce.Set("keepdims", int64_t{1});
    shape.Set("shape", per_channel);
    ValueId mean, var;
    if (training) {
      ASSIGN_OR_RETURN(mean, op(OpKind::kReduceMean, {x}, reduce, "mean"));
    } else {
      ASSIGN_OR_RETURN(mean, op(OpKind::kReshape, {in[3]}, shape, "running_mean"));
    }
    ASSIGN_OR_RETURN(ValueId d, op(OpKind::kSub, {x, mean}, {}, "centered"));
    if (training) {
      ASSIGN_OR_RETURN(ValueId sq, op(OpKind::kMul, {d, d}, {}, "square"));
      ASSIGN_OR_RETURN(var, op(OpKind::kReduceMean, {sq}, reduce, "var"));
    } else {
      ASSIGN_OR_RETURN(var, op(OpKind::kReshape, {in[4]}, shape, "running_var"));
    }
    const ValueId eps = b_.Const(b_.UniqueName(base + "/epsilon"), Tensor::Full(Shape{}, static_cast<float>(a.Float("epsilon", 1e-5))));
    ASSIGN_OR_RETURN(ValueId ve, op(OpKind::kAdd, {var, eps}, {}, "var_eps"));
    ASSIGN_OR_RETURN(ValueId sd, op(OpKind::kSqrt, {ve}, {}, "std"));
    ASSIGN_OR_RETURN(ValueId xhat, op(OpKind::kDiv, {d, sd}, {}, "normalized"));
    ASSIGN_OR_RETURN(ValueId scale, op(OpKind::kReshape, {in[1]}, shape, "scale"));
    ASSIGN_OR_RETURN(ValueId bias, op(OpKind::kReshape, {in[2]}, shape, "bias"));
    ASSIGN_OR_RETURN(ValueId scaled, op(OpKind::kMul, {xhat, scale}, {}, "scaled"));
    ASSIGN_OR_RETURN(ValueId y, op(OpKind::kAdd, {scaled, bias}, {}, "y"));
    g_.value(y).name = n.output(0);
    names_[n.output(0)] = y;
    for (int i = 1; i < n.output_size(); ++i)
      if (!n.output(i).empty()) used_aux_[n.output(i)] = n.name();
    running_stats_.insert(in[3]);
    running_stats_.insert(in[4]);
    if (updates) {
      const double momentum = a.Float("momentum", 0.9);
      if (!(momentum >= 0 && momentum <= 1)) return NodeErr(n, "momentum " + std::to_string(momentum) + " is outside [0, 1]");
      const auto count = static_cast<double>(per_channel_count);
      for (int i : {3, 4}) {
        if (!running_updated_.insert(g_.value(in[static_cast<size_t>(i)]).name).second) {
          return NodeErr(n, "updates the running statistic '" + g_.value(in[static_cast<size_t>(i)]).name + "', which another BatchNormalization updates too");
        }
      }
      if (training) {
        g_.running.push_back({g_.value(in[3]).name, mean, momentum, 1.0, g_.value(in[3]).data});
        g_.running.push_back({g_.value(in[4]).name, var, momentum, count / (count - 1), g_.value(in[4]).data});
      }
    }
    return Status::Ok();
  }

  // Attribute values that change semantics flowrun does not implement are errors, never ignored.
  // (Which attributes an op may have, and their types, CheckOnnxNode checked.)
  Status CheckAttrs(const onnx::NodeProto& n, OpKind k, const Attrs& a) {
    if (k == OpKind::kGelu) return Status::Ok();  // lowered by LowerGelu
    if (k == OpKind::kGatherND && a.Int("batch_dims") != 0) return NodeErr(n, "batch_dims other than 0 is not supported");
    if (k == OpKind::kLayerNormalization && a.Int("stash_type", 1) != 1) {
      return NodeErr(n, "stash_type other than float32 is not supported");
    }
    return Status::Ok();
  }

  bool AllConst(const std::vector<ValueId>& ins) const {
    for (ValueId v : ins)
      if (v != kNoValue && !IsConst(v)) return false;
    return true;
  }

  // Runs a node on constant inputs with its CPU kernel; its outputs become constants. What folding
  // materialises is budgeted: a tiny model must not fold a Range or an Expand into gigabytes.
  Status Evaluate(const Node& node) {
    double bytes = 0;
    for (ValueId v : node.out) bytes += static_cast<double>(g_.type(v).shape.numel()) * static_cast<double>(SizeOf(g_.type(v).dtype));
    const double limit = FoldLimitBytes();
    if (folded_bytes_ + bytes > limit) {
      return Status::Invalid("folding it into a constant of " + g_.type(node.out[0]).shape.ToString() + " would take the model's folded constants to " +
                             std::to_string(static_cast<int64_t>((folded_bytes_ + bytes) / (1 << 20))) + " MiB, past the " +
                             std::to_string(static_cast<int64_t>(limit / (1 << 20))) + " MiB that import folds");
    }
    folded_bytes_ += bytes;
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

  // A tied embedding and head: PyTorch trains one matrix, read by the embedding's Gather and by the
  // head's MatMul, but the TorchScript exporter writes the head's operand as a second initializer
  // holding the table's transpose (onnx::MatMul_N = wte^T), which would train apart from it. An
  // initializer [C, V] read only by MatMul or Gemm whose values are exactly the transpose of a
  // Gather's table [V, C] (a table with at least two distinct values: equal constants prove
  // nothing) is that copy: its readers read Transpose(table) instead. model.untie keeps a copy
  // separate. Distinct parameters that merely hold equal values are never the transpose of a table
  // read by a Gather, so they stay apart.
  Status TieTransposedCopies() {
    std::vector<bool> table(g_.values.size(), false), other_reader(g_.values.size(), false);
    std::vector<bool> matmul_reader(g_.values.size(), false);
    for (const Node& node : g_.nodes) {
      for (size_t i = 0; i < node.in.size(); ++i) {
        const ValueId v = node.in[i];
        if (v == kNoValue) continue;
        const auto u = static_cast<size_t>(v);
        if (node.op == OpKind::kGather && i == 0) table[u] = true;
        if (node.op == OpKind::kMatMul || node.op == OpKind::kGemm) {
          matmul_reader[u] = true;
        } else {
          other_reader[u] = true;
        }
      }
    }
    for (ValueId t : g_.params) {
      const Value& tv = g_.value(t);
      if (!table[static_cast<size_t>(t)] || tv.type.shape.rank() != 2) continue;
      const Tensor& td = tv.data;
      const float* a = td.data<float>();
      const int64_t rows = tv.type.shape[0], cols = tv.type.shape[1];
      if (std::all_of(a, a + td.numel(), [&](float x) { return x == a[0]; })) continue;
      for (ValueId c : g_.params) {
        const auto u = static_cast<size_t>(c);
        const Value& cv = g_.value(c);
        if (c == t || !matmul_reader[u] || other_reader[u] || cv.type.shape != Shape{cols, rows}) continue;
        const float* b = cv.data.data<float>();
        bool transposed = true;
        for (int64_t i = 0; i < rows && transposed; ++i)
          for (int64_t j = 0; j < cols && transposed; ++j) transposed = a[i * cols + j] == b[j * rows + i];
        if (!transposed) continue;
        bool keep_apart = false;
        for (const std::string& glob : rules_.untie) keep_apart = keep_apart || GlobMatch(glob, cv.name);
        if (keep_apart) continue;
        RETURN_IF_ERROR(Tie(c, t));
      }
    }
    return Status::Ok();
  }

  // Whether v is an embedding lookup (a Gather) or a sum of them (BERT adds token, type and
  // position embeddings in turn).
  bool FromLookup(ValueId v) const {
    for (int depth = 0; depth < 8 && v != kNoValue && g_.value(v).producer >= 0; ++depth) {
      const Node& p = g_.node(g_.value(v).producer);
      if (p.op == OpKind::kGather) return true;
      if (p.op != OpKind::kAdd) return false;
      if (g_.ProducedBy(p.in[0], OpKind::kGather)) return true;
      v = p.in[1];
    }
    return false;
  }

  // Replaces every read of `copy` by a read of Transpose(table), a node put first in the graph.
  Status Tie(ValueId copy, ValueId table) {
    Attrs perm;
    perm.Set("perm", std::vector<int64_t>{1, 0});
    const std::string name = g_.value(copy).name;
    ASSIGN_OR_RETURN(std::vector<ValueId> outs, b_.Add(OpKind::kTranspose, {table}, perm, b_.UniqueName(name + "/tied"), Phase::kForward));
    const auto n = static_cast<NodeId>(g_.nodes.size());
    std::rotate(g_.nodes.begin(), g_.nodes.end() - 1, g_.nodes.end());
    for (Value& v : g_.values)
      if (v.producer >= 0) v.producer = v.producer == n - 1 ? 0 : v.producer + 1;
    for (size_t k = 1; k < g_.nodes.size(); ++k)
      for (ValueId& v : g_.nodes[k].in)
        if (v == copy) v = outs[0];
    for (ValueId& v : g_.outputs)
      if (v == copy) v = outs[0];
    g_.value(copy).kind = ValueKind::kConst;
    g_.params.erase(std::find(g_.params.begin(), g_.params.end(), copy));
    g_.tied.push_back({name, g_.value(table).name});
    return Status::Ok();
  }

  // Which float initializers train (DESIGN.md, docs/import.md "Parameters and constants").
  // Exports store buffers as initializers too: causal masks, rotary cos/sin tables, attention
  // masks folded for a fixed batch. The rule, by what the graph does with each one:
  //   - held constant: no float path connects it to a graph output (a mask read through Equal);
  //   - trained: it is read as a weight (a MatMul or Gemm operand, a Conv weight or bias, a Gather
  //     table, a LayerNormalization scale or bias, a table added to a Gather's output: positions), directly
  //     or through layout ops (Transpose, Reshape, Expand, Slice, Split, Concat, Cast), or it is a
  //     vector of two or more values (biases, norm scales);
  //   - held constant: the rest, single values and tensors of rank >= 2 read only elementwise
  //     (scales, masks, tables);
  // and the config's model.frozen, then model.trainable globs, override it. Unused initializers
  // stay parameters, for training's note that they are not trained. Nodes that only constants
  // then feed fold.
  Status ClassifyInitializers() {
    const size_t nv = g_.values.size();
    std::vector<bool> live(nv, false), used(nv, false), weight(nv, false);
    for (ValueId v : g_.outputs) live[static_cast<size_t>(v)] = g_.type(v).dtype == DType::kF32;
    auto mark = [&](const Node& node, size_t i) {
      if (i < node.in.size() && node.in[i] != kNoValue) weight[static_cast<size_t>(node.in[i])] = true;
    };
    for (size_t i = g_.nodes.size(); i-- > 0;) {
      const Node& node = g_.nodes[i];
      bool any = false, any_weight = false;
      for (ValueId v : node.out) {
        any = any || live[static_cast<size_t>(v)];
        any_weight = any_weight || weight[static_cast<size_t>(v)];
      }
      for (ValueId v : node.in) {
        if (v == kNoValue) continue;
        used[static_cast<size_t>(v)] = true;
        if (any && g_.type(v).dtype == DType::kF32) live[static_cast<size_t>(v)] = true;
      }
      switch (node.op) {
        case OpKind::kMatMul: case OpKind::kGemm: mark(node, 0), mark(node, 1), mark(node, 2); break;
        case OpKind::kGather: mark(node, 0); break;
        case OpKind::kConv: mark(node, 1), mark(node, 2); break;
        case OpKind::kAdd:  // a table added to an embedding lookup: positions, folded by the exporter
          for (size_t k = 0; k < 2; ++k)
            if (FromLookup(node.in[1 - k])) mark(node, k);
          break;
        case OpKind::kLayerNormalization: mark(node, 1), mark(node, 2); break;
        case OpKind::kTranspose: case OpKind::kReshape: case OpKind::kExpand: case OpKind::kSlice:
        case OpKind::kSplit: case OpKind::kCast:
          if (any_weight) mark(node, 0);
          break;
        case OpKind::kConcat:
          if (any_weight)
            for (size_t k = 0; k < node.in.size(); ++k) mark(node, k);
          break;
        default: break;
      }
    }
    std::vector<bool> frozen_hit(rules_.frozen.size(), false), trainable_hit(rules_.trainable.size(), false);
    auto matches = [](const std::vector<std::string>& globs, std::vector<bool>& hit, const std::string& name) {
      bool any = false;
      for (size_t k = 0; k < globs.size(); ++k)
        if (GlobMatch(globs[k], name)) any = hit[k] = true;
      return any;
    };
    std::vector<ValueId> params;
    for (ValueId p : g_.params) {
      const auto u = static_cast<size_t>(p);
      const Value& val = g_.value(p);
      std::string why;
      if (running_stats_.count(p)) {
        const bool updated = running_updated_.count(val.name) > 0;
        // An evaluation's copy of what training updates: a variable, which the trainer sets.
        if (!updated || !rules_.batchnorm_inference)
          why = updated ? "a BatchNormalization's running statistic: updated from each batch, saved, not trained"
                        : "a BatchNormalization's running statistic, read in inference mode";
      } else if (matches(rules_.frozen, frozen_hit, val.name)) {
        why = "model.frozen";
      } else if (matches(rules_.trainable, trainable_hit, val.name)) {
        why = "";
      } else if (!used[u]) {
        why = "";
      } else if (!live[u]) {
        why = "no float path reaches the outputs";
      } else if (!weight[u] && (val.type.shape.rank() >= 2 || val.type.shape.numel() == 1)) {
        why = val.type.shape.numel() == 1 ? "a single value read only elementwise, as scales are"
                                          : "read only elementwise, as masks and tables are";
      }
      if (why.empty()) {
        params.push_back(p);
      } else {
        g_.value(p).kind = ValueKind::kConst;
        g_.held.push_back({val.name, val.type, why});
      }
    }
    for (size_t k = 0; k < rules_.frozen.size(); ++k)
      if (!frozen_hit[k]) return Unmatched("model.frozen", rules_.frozen[k]);
    for (size_t k = 0; k < rules_.trainable.size(); ++k)
      if (!trainable_hit[k]) return Unmatched("model.trainable", rules_.trainable[k]);
    if (params.size() == g_.params.size()) return Status::Ok();
    g_.params = params;
    std::vector<bool> keep(g_.nodes.size(), true);
    for (size_t i = 0; i < g_.nodes.size(); ++i) {
      if (!AllConst(g_.nodes[i].in) || g_.nodes[i].op == OpKind::kDropout) continue;  // a mask a step
      Status s = Evaluate(g_.nodes[i]);
      if (!s.ok()) return Err("node '" + g_.nodes[i].name + "': constant folding failed: " + s.message());
      keep[i] = false;
    }
    g_.KeepNodes(keep);
    return Status::Ok();
  }

  Status Unmatched(const std::string& key, const std::string& glob) const {
    return Status::Invalid(rules_.where + key + ": '" + glob + "' matches no float initializer of " + path_ +
                           " (`flowrun plan` lists what trains and what is held constant)");
  }

  Status Unsupported(const onnx::NodeProto& n) {
    std::string list;
    for (const OnnxOpType& t : ImportedOnnxOps(kMinOpset)) list += (list.empty() ? "" : ", ") + t.name;
    return NodeErr(n, "op type '" + n.op_type() + "' is not supported. Supported ops (`flowrun ops` lists their opsets "
                      "and devices): " + list);
  }

  std::shared_ptr<const OnnxModel> model_;  // initializers' data is read in place from it
  std::string path_;
  const std::map<std::string, TensorType>& bound_;
  const ImportOptions& rules_;
  Graph g_;
  Builder b_;
  int64_t opset_ = 0;
  double folded_bytes_ = 0;  // what constant folding has materialised so far
  std::unordered_map<std::string, ValueId> names_;
  std::unordered_map<std::string, std::string> used_aux_;
  std::set<ValueId> running_stats_;  // BatchNormalization's running mean and variance
  std::map<std::pair<const onnx::NodeProto*, std::string>, ValueId> private_;  // a node's own copy of an input
  std::set<std::string> running_updated_;  // of those, the ones a training-mode node updates
};

}  // namespace

std::optional<OpKind> OnnxKernelKind(std::string_view op) {
  if (op == "Reshape" || op == "Flatten" || op == "Squeeze" || op == "Unsqueeze") return OpKind::kReshape;
  if (op == "Gelu") return OpKind::kGelu;
  if (op == "GlobalAveragePool") return OpKind::kReduceMean;
  if (op == "Dropout") return OpKind::kDropout;
  return OnnxOp(op);
}

std::string OnnxOpsTable() {
  std::string out = "ONNX op              opsets  kernels\n";
  for (const OnnxOpType& t : ImportedOnnxOps(kMinOpset)) {
    std::string kernels;
    if (auto k = OnnxKernelKind(t.name)) {
      for (int d = 0; d < kNumDeviceTypes; ++d) {
        const auto device = static_cast<DeviceType>(d);
        if (device == DeviceType::kSim) continue;  // the CPU's kernels
        if (device == DeviceType::kCpu || cuda::HasKernel(*k)) kernels += (kernels.empty() ? "" : ", ") + std::string(Name(device));
      }
    } else {
      kernels = "none: import resolves it";
    }
    std::string line = t.name;
    line.resize(std::max<size_t>(line.size() + 1, 21), ' ');
    line += std::to_string(t.since) + "-" + std::to_string(kMaxOpset);
    line.resize(std::max<size_t>(line.size() + 1, 29), ' ');
    out += line + kernels + "\n";
  }
  return out;
}

namespace {

// An initializer's external data (ONNX external data: keys location, offset, length) read into its
// raw_data, so that the rest of import sees an ordinary tensor. The location must be a relative
// path that stays inside the model's folder, symbolic links resolved: a model cannot make flowrun
// read /etc/shadow or ../../secrets. Offset and length are checked against the file's size and the
// tensor's shape before anything is allocated.
class ExternalData {
 public:
  explicit ExternalData(const std::string& model_path)
      : model_(model_path), dir_(std::filesystem::path(model_path).parent_path()) {
    if (dir_.empty()) dir_ = ".";
  }

  Status Inline(onnx::TensorProto& t) {
    const std::string what = "[onnx] " + model_ + ": initializer '" + t.name() + "': external data";
    std::string location;
    int64_t offset = 0, length = -1;
    for (const auto& kv : t.external_data()) {
      int64_t* number = kv.key() == "offset" ? &offset : kv.key() == "length" ? &length : nullptr;
      if (kv.key() == "location") {
        location = kv.value();
      } else if (number) {
        auto [end, ec] = std::from_chars(kv.value().data(), kv.value().data() + kv.value().size(), *number);
        if (ec != std::errc() || end != kv.value().data() + kv.value().size() || *number < 0) {
          return Status::Invalid(what + " has " + kv.key() + " '" + kv.value() + "', not a byte count");
        }
      } else if (kv.key() != "checksum" && kv.key() != "basepath") {
        return Status::Invalid(what + " has the unknown key '" + kv.key() + "'");
      }
    }
    if (location.empty()) return Status::Invalid(what + " names no location");
    const std::filesystem::path rel(location);
    if (rel.is_absolute()) return Status::Invalid(what + " location '" + location + "' is absolute; it must be relative to the model's folder");
    for (const auto& part : rel)
      if (part == "..") return Status::Invalid(what + " location '" + location + "' leaves the model's folder ('..')");
    std::error_code ec;
    const auto root = std::filesystem::canonical(dir_, ec);
    const auto file = ec ? root : std::filesystem::canonical(dir_ / rel, ec);
    if (ec) return Status::Invalid(what + " file '" + (dir_ / rel).string() + "' cannot be read: " + ec.message());
    const auto [mismatch, unused] = std::mismatch(root.begin(), root.end(), file.begin(), file.end());
    if (mismatch != root.end()) {
      return Status::Invalid(what + " location '" + location + "' resolves to '" + file.string() + "', outside the model's folder '" +
                             root.string() + "' (a symbolic link?)");
    }
    ASSIGN_OR_RETURN(DType dt, DTypeFromOnnx(t.data_type(), what));
    const std::vector<int64_t> dims(t.dims().begin(), t.dims().end());
    RETURN_IF_ERROR(CheckDims(dims).With(what + ": "));
    const auto want = static_cast<int64_t>(static_cast<size_t>(Shape(dims).numel()) * SizeOf(dt));
    if (length >= 0 && length != want) {
      return Status::Invalid(what + " has length " + std::to_string(length) + " but its shape " + Shape(dims).ToString() + " needs " +
                             std::to_string(want) + " bytes");
    }
    const int64_t size = static_cast<int64_t>(std::filesystem::file_size(file, ec));
    if (ec || !std::filesystem::is_regular_file(file)) return Status::Invalid(what + " file '" + file.string() + "' is not a regular file");
    if (offset > size || size - offset < want) {
      return Status::Invalid(what + " needs bytes [" + std::to_string(offset) + ", " + std::to_string(offset + want) + ") of '" +
                             file.string() + "', which has " + std::to_string(size) + " (truncated?)");
    }
    std::string* raw = t.mutable_raw_data();
    raw->resize(static_cast<size_t>(want));
    std::ifstream in(file, std::ios::binary);
    in.seekg(offset);
    if (want > 0 && !in.read(raw->data(), want)) return Status::Invalid(what + " cannot read '" + file.string() + "'");
    t.clear_external_data();
    t.set_data_location(onnx::TensorProto::DEFAULT);
    return Status::Ok();
  }

 private:
  std::string model_;
  std::filesystem::path dir_;
};

}  // namespace

Result<std::shared_ptr<const OnnxModel>> ReadOnnx(const std::string& path) {
  // A regular file is parsed from its mapping, not from a copy (a GPT-2's is 650 MB); anything
  // else (a pipe) is read whole, which also gives the errors for what cannot be read at all.
  Result<MappedFile> mapped = MappedFile::Open(path);
  std::string read;
  if (!mapped.ok()) {
    auto bytes = ReadWholeFile(path);
    if (!bytes.ok()) return bytes.status().With("[onnx] ");
    read = std::move(*bytes);
  }
  ASSIGN_OR_RETURN(std::shared_ptr<OnnxModel> model, Parse(mapped.ok() ? mapped->bytes() : std::string_view(read), path));
  ExternalData external(path);
  for (auto& t : *model->proto.mutable_graph()->mutable_initializer()) {
    if (t.data_location() != onnx::TensorProto::EXTERNAL) continue;
    RETURN_IF_ERROR(external.Inline(t));
    model->external_data = true;
  }
  return std::shared_ptr<const OnnxModel>(std::move(model));
}

Result<std::vector<OnnxInput>> OnnxInputs(const std::string& path) {
  ASSIGN_OR_RETURN(std::shared_ptr<const OnnxModel> model, ReadOnnx(path));
  const onnx::ModelProto& m = model->proto;
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

Result<Graph> ImportOnnx(std::shared_ptr<const OnnxModel> model, const std::map<std::string, TensorType>& inputs,
                         const ImportOptions& rules) {
  return Importer(std::move(model), inputs, rules).Run();
}

Result<Graph> ImportOnnxBytes(const std::string& bytes, const std::string& path,
                              const std::map<std::string, TensorType>& inputs, const ImportOptions& rules) {
  ASSIGN_OR_RETURN(std::shared_ptr<const OnnxModel> model, Parse(bytes, path));
  return ImportOnnx(std::move(model), inputs, rules);
}

Result<Graph> ImportOnnx(const std::string& path, const std::map<std::string, TensorType>& inputs, const ImportOptions& rules) {
  ASSIGN_OR_RETURN(std::shared_ptr<const OnnxModel> model, ReadOnnx(path));
  return ImportOnnx(std::move(model), inputs, rules);
}

}  // namespace fr::ir
