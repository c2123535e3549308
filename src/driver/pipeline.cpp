#include "driver/pipeline.h"

#include <algorithm>
#include <cstdlib>
#include <optional>

#include "assign/step.h"
#include "base/glob.h"
#include "driver/layout.h"
#include "ir/onnx_import.h"
#include "ir/rewrite.h"
#include "ops/cuda/backend.h"
#include "ops/op.h"
#include "plan/lower.h"

namespace fr {
namespace {

// Whether an int64 field holds `value` in some sample.
bool Contains(const data::Dataset& ds, const std::string& field, int64_t value) {
  if (auto known = ds.KnownRange(field)) return value >= known->first && value < known->second;
  std::vector<int64_t> sample(static_cast<size_t>(ds.fields().at(field).sample.numel()));
  for (int64_t w = 0; w < ds.size(); ++w) {
    ds.CopySample(field, w, sample.data());
    for (int64_t x : sample)
      if (x == value) return true;
  }
  return false;
}

ir::TrainingSpec SpecOf(const Config& cfg, const data::Dataset& ds) {
  ir::TrainingSpec s;
  s.loss = cfg.model.loss.type == LossConfig::Type::kCrossEntropy ? ir::TrainingSpec::Loss::kCrossEntropy
                                                                    : ir::TrainingSpec::Loss::kMse;
  s.loss_input = cfg.model.loss.output;
  s.labels = cfg.model.loss.labels;
  const data::Field& f = ds.fields().at(cfg.model.loss.labels);
  // The mean over kept labels costs a count and its all-reduce each micro-batch: only where the
  // data has labels to leave out (a masked-LM's), never for token windows or in-range labels.
  if (cfg.model.loss.type == LossConfig::Type::kCrossEntropy && f.dtype == DType::kI64 &&
      Contains(ds, cfg.model.loss.labels, cfg.model.loss.ignore_index)) {
    s.ignore_index = cfg.model.loss.ignore_index;
  }
  std::vector<int64_t> dims = {cfg.train.micro_batch};
  dims.insert(dims.end(), f.sample.dims().begin(), f.sample.dims().end());
  s.labels_type = {f.dtype, Shape(dims)};
  s.micro_batches = cfg.accumulation();
  s.config_path = cfg.path;
  const OptimizerConfig& o = cfg.optimizer;
  s.optimizer.type = o.type == OptimizerConfig::Type::kSgd ? ir::OptimizerSpec::Type::kSgd : ir::OptimizerSpec::Type::kAdamW;
  s.optimizer.momentum = o.momentum;
  s.optimizer.nesterov = o.nesterov;
  s.optimizer.weight_decay = o.weight_decay;
  s.optimizer.grad_clip = o.grad_clip;
  s.optimizer.beta1 = o.beta1;
  s.optimizer.beta2 = o.beta2;
  s.optimizer.eps = o.eps;
  s.optimizer.schedule = Schedule{o.lr, cfg.schedule.min_lr, static_cast<int>(cfg.schedule.type), cfg.schedule.warmup,
                                  cfg.train.steps};
  return s;
}

double ProductFlops(const ir::Graph& g, int64_t micro_batches) {
  double total = 0;
  for (const ir::Node& n : g.nodes) {
    const double f = sbp::OpFlops(g, n);
    if (f == 0) continue;
    total += n.phase == ir::Phase::kOptimizer ? f : f * static_cast<double>(micro_batches);
  }
  return total;
}

// Where a data field comes from, for messages: its file, or its synthetic block.
std::string SourceOf(const Config& cfg, const std::string& field) {
  if (cfg.data.format == DataConfig::Format::kNpy) return "data." + field + ": '" + cfg.data.npy.at(field) + "'";
  if (cfg.data.format == DataConfig::Format::kTokens) return "data.train: '" + cfg.data.train + "'";
  return "data.fields." + field;
}

// The first value of integer field `field` outside [lo, hi), as "sample W has WHAT VALUE"; empty
// if none. Reads every sample only where the dataset holds them (a file's worth), never a synthetic
// set's, which may be 2^40 samples long.
std::string FirstOutside(const data::Dataset& ds, const std::string& field, int64_t lo, int64_t hi, const std::string& what,
                         std::optional<int64_t> allowed = std::nullopt) {
  if (auto known = ds.KnownRange(field)) {
    if (known->first >= lo && known->second <= hi) return "";
    if (!allowed || *allowed < known->first || *allowed >= known->second) {  // the range says it all
      return "its values span [" + std::to_string(known->first) + ", " + std::to_string(known->second) + "), so it has " +
             what + " " + (known->first < lo ? std::to_string(known->first) : std::to_string(known->second - 1));
    }
  }
  std::vector<int64_t> sample(static_cast<size_t>(ds.fields().at(field).sample.numel()));
  for (int64_t w = 0; w < ds.size(); ++w) {
    ds.CopySample(field, w, sample.data());
    for (int64_t x : sample)
      if ((x < lo || x >= hi) && !(allowed && x == *allowed)) return "sample " + std::to_string(w) + " has " + what + " " + std::to_string(x);
  }
  return "";
}

// Cross-entropy labels are checked against the logits' class count, and integer inputs read as
// Gather indices (token ids into an embedding) against the table's rows, once, before training:
// a bad value names its field, file and sample instead of failing at some step.
Status CheckIntegerData(const Config& cfg, const data::Dataset& ds, const ir::Graph& g) {
  for (const auto& [input, field] : cfg.model.inputs) {
    const ir::ValueId v = g.Find(input);
    if (v == ir::kNoValue || ds.fields().at(field).dtype != DType::kI64) continue;
    for (const ir::Node& n : g.nodes) {
      if (n.op != OpKind::kGather || n.in.size() < 2 || n.in[1] != v) continue;
      const Shape& table = g.type(n.in[0]).shape;
      const auto axis = table.Axis(n.attrs.Int("axis", 0));
      if (!axis.ok()) continue;
      const int64_t rows = table[*axis];
      const std::string bad = FirstOutside(ds, field, -rows, rows, "index");  // ONNX Gather takes negative indices too
      if (!bad.empty()) {
        return Status::Invalid("[data] " + SourceOf(cfg, field) + ": " + bad + ", outside [" + std::to_string(-rows) + ", " +
                               std::to_string(rows) + ") for '" + n.name + "', which indexes " + g.value(n.in[0]).name + " " +
                               table.ToString() + " with it (model.inputs." + input + ": " + field + ")");
      }
    }
  }
  if (cfg.model.loss.type != LossConfig::Type::kCrossEntropy) return Status::Ok();
  const std::string& field = cfg.model.loss.labels;
  const data::Field& f = ds.fields().at(field);
  ir::ValueId logits = g.Find(cfg.model.loss.output);
  if (f.dtype != DType::kI64 || logits == ir::kNoValue || g.type(logits).shape.rank() == 0) return Status::Ok();
  const Shape& ls = g.type(logits).shape;
  const int64_t classes = ls[ls.rank() - 1];
  const std::string bad = FirstOutside(ds, field, 0, classes, "label", cfg.model.loss.ignore_index);
  if (bad.empty()) return Status::Ok();
  return Status::Invalid("[data] " + SourceOf(cfg, field) + ": " + bad + ", outside [0, " + std::to_string(classes) +
                         ") for " + cfg.model.loss.output + " " + ls.ToString() + " and not model.loss.ignore_index (" +
                         std::to_string(cfg.model.loss.ignore_index) + ") (model.loss.labels: " + field + ")");
}

// A fused projection is split into its parts when a hint names it (NODE:i on its MatMul, or its
// weight or bias by name): a hint is what asks for tensor parallelism over its features, the one
// use the split has (ir/rewrite.h).
ir::RewriteOptions RewriteOptionsOf(const Config& cfg, const ir::Graph& g) {
  std::vector<std::string> hints;
  for (const auto& [pattern, nd] : cfg.parallel.sbp) hints.push_back(pattern);
  ir::RewriteOptions o;
  o.split = [hints, &g](const ir::Node& mm, ir::ValueId w, ir::ValueId b) {
    for (const std::string& h : hints) {
      const size_t colon = h.rfind(':');
      const bool node_input = colon != std::string::npos && colon + 1 < h.size() &&
                              std::all_of(h.begin() + static_cast<long>(colon) + 1, h.end(), ::isdigit);
      if (node_input ? GlobMatch(h.substr(0, colon), mm.name)
                     : GlobMatch(h, g.value(w).name) || (b != ir::kNoValue && GlobMatch(h, g.value(b).name)))
        return true;
    }
    return false;
  };
  return o;
}

}  // namespace

Result<std::string> PrepareDevice(const Config& cfg) {
  if (cfg.parallel.device != DeviceType::kCuda) return std::string();
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  ASSIGN_OR_RETURN(int gpu, cuda::InitDevice(local ? std::atoi(local) : 0));
  cuda::AllowTf32(cfg.parallel.tf32);
  return "CUDA GPU " + std::to_string(gpu) + (cfg.parallel.tf32 ? ", TF32 allowed" : ", FP32") +
         "; the CUDA backend is new and not yet verified on a GPU (issue 30)";
}

Result<Compiled> Prepare(const Config& cfg, std::shared_ptr<const ir::OnnxModel> model) {
  Compiled c;
  ASSIGN_OR_RETURN(c.dataset, data::OpenDataset(cfg.data, cfg.train.seed));
  if (cfg.eval.given) RETURN_IF_ERROR(data::SplitForEval(cfg, &c.dataset, &c.eval_dataset));
  const auto& fields = c.dataset->fields();
  auto field_list = [&] {
    std::string s;
    for (const auto& [name, f] : fields) s += (s.empty() ? "" : ", ") + name;
    return s;
  };
  std::map<std::string, ir::TensorType> bound;
  for (const auto& [input, field] : cfg.model.inputs) {
    auto it = fields.find(field);
    if (it == fields.end()) {
      return Status::Invalid("[config] " + cfg.path + ": model.inputs." + input + ": the data has no field '" + field +
                             "' (fields: " + field_list() + ")");
    }
    std::vector<int64_t> dims = {cfg.train.micro_batch};
    dims.insert(dims.end(), it->second.sample.dims().begin(), it->second.sample.dims().end());
    if (Status s = CheckDims(dims); !s.ok()) {
      return Status::Invalid("[config] " + cfg.path + ": train.micro_batch: " + std::to_string(cfg.train.micro_batch) +
                             " samples of data field '" + field + "' " + it->second.sample.ToString() + ": " + s.message());
    }
    bound[input] = {it->second.dtype, Shape(dims)};
    c.input_field[input] = field;
  }
  if (!fields.count(cfg.model.loss.labels)) {
    return Status::Invalid("[config] " + cfg.path + ": model.loss.labels: the data has no field '" +
                           cfg.model.loss.labels + "' (fields: " + field_list() + ")");
  }
  c.input_field[cfg.model.loss.labels] = cfg.model.loss.labels;
  if (!model) {
    ASSIGN_OR_RETURN(model, ir::ReadOnnx(cfg.model.onnx));
  }
  c.model = model;
  const ir::ImportOptions rules{cfg.model.trainable, cfg.model.frozen, "[config] " + cfg.path + ": ", cfg.model.untie,
                                cfg.model.tie, cfg.model.dropout, cfg.train.seed};
  ASSIGN_OR_RETURN(ir::Graph forward, ir::ImportOnnx(std::move(model), bound, rules));
  ir::Rewrite(forward, RewriteOptionsOf(cfg, forward));
  ASSIGN_OR_RETURN(c.training, ir::BuildTraining(std::move(forward), SpecOf(cfg, *c.dataset)));
  RETURN_IF_ERROR(CheckIntegerData(cfg, *c.dataset, c.training.graph));
  if (c.eval_dataset) {
    for (const auto& [name, f] : c.dataset->fields()) {
      const data::Field& e = c.eval_dataset->fields().at(name);
      if (e.dtype != f.dtype || !(e.sample == f.sample))
        return Status::Invalid("[data] eval.data: field '" + name + "' is " + e.sample.ToString() + ", the training data's " + f.sample.ToString());
    }
    RETURN_IF_ERROR(CheckIntegerData(cfg, *c.eval_dataset, c.training.graph));
  }
  c.flops_per_step = ProductFlops(c.training.graph, cfg.accumulation());
  c.tokens_per_step = cfg.train.global_batch * (cfg.data.format == DataConfig::Format::kTokens ? cfg.data.seq_len : 1);
  return c;
}

Result<Compiled> Compile(const Config& cfg, int ranks) {
  ASSIGN_OR_RETURN(Compiled c, Prepare(cfg));
  if (ranks <= 1 && cfg.parallel.sbp.empty()) {
    // One rank needs no assignment, but its layout is checked as any other's: a mesh or stages
    // that do not fit are errors here too, not ignored.
    RETURN_IF_ERROR(Layout(cfg, c.training, ranks).status());
    ASSIGN_OR_RETURN(c.plan, boxing::LowerOneDevice(c.training, cfg.train.steps, cfg.accumulation(), cfg.parallel.device));
  } else {
    ASSIGN_OR_RETURN(sbp::AssignOptions ao, Layout(cfg, c.training, ranks));
    ASSIGN_OR_RETURN(sbp::Assignment a, sbp::Assign(c.training, ao));
    boxing::LowerOptions lo;
    lo.steps = cfg.train.steps;
    lo.micro_batches = cfg.accumulation();
    lo.stages = ao.stages;
    lo.node_stage = ao.node_stage;
    lo.zero = ao.zero;
    lo.bucket_bytes = ao.bucket_bytes;
    auto plan = boxing::Lower(c.training, a, lo);
    if (!plan.ok()) return plan.status().With("[boxing] " + cfg.path + ": ");
    c.plan = std::move(plan).value();
    const sbp::StepTime t = sbp::ModelStep(c.training.graph, ao, a, ranks);
    c.plan.predicted = {t.step_s, t.compute_s, t.comm_s, t.bubble_s};
    c.assignment = std::move(a);
    c.lower = lo;
  }
  return c;
}

Result<ir::Plan> CompileEval(const Config& cfg, const Compiled& train, int first_collective, ir::TrainingGraph* graph) {
  const std::string where = "[config] " + cfg.path + ": eval: ";
  std::map<std::string, ir::TensorType> bound;
  for (const auto& [input, field] : cfg.model.inputs) {
    const ir::ValueId v = train.training.graph.Find(input);
    if (v != ir::kNoValue) bound[input] = train.training.graph.type(v);
  }
  ir::ImportOptions rules{cfg.model.trainable, cfg.model.frozen, "[config] " + cfg.path + ": ", cfg.model.untie,
                          cfg.model.tie, /*dropout=*/false, cfg.train.seed};
  rules.batchnorm_inference = true;
  ASSIGN_OR_RETURN(ir::Graph forward, ir::ImportOnnx(train.model, bound, rules));
  ir::Rewrite(forward, RewriteOptionsOf(cfg, forward));
  ir::TrainingSpec spec = SpecOf(cfg, *train.eval_dataset);
  spec.forward_only = true;
  ASSIGN_OR_RETURN(*graph, ir::BuildTraining(std::move(forward), spec));
  const ir::Graph& g = graph->graph;
  ir::Plan plan;
  if (!train.assignment) {
    ASSIGN_OR_RETURN(plan, boxing::LowerOneDevice(*graph, cfg.eval.steps, cfg.accumulation(), cfg.parallel.device));
  } else {
    // Every value and op as training lays it out, found by name: the same model on the same layout.
    // What training has not got, a BatchNorm's running statistics (variables here) and the
    // Reshapes that read them, is B on the stage of the node that reads it: boxing gives that
    // node what its training signature takes.
    const ir::Graph& tg = train.training.graph;
    const sbp::Assignment& ta = *train.assignment;
    std::map<std::string, ir::NodeId> train_node;
    for (size_t n = 0; n < tg.nodes.size(); ++n) train_node[tg.nodes[n].name] = static_cast<ir::NodeId>(n);
    sbp::Assignment a;
    boxing::LowerOptions lo = train.lower;
    lo.steps = cfg.eval.steps;
    lo.node_stage.assign(g.nodes.size(), -1);
    a.node_sig.resize(g.nodes.size());
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      auto t = train_node.find(g.nodes[n].name);
      if (t == train_node.end()) continue;
      a.node_sig[n] = ta.node_sig[static_cast<size_t>(t->second)];
      lo.node_stage[n] = train.lower.node_stage[static_cast<size_t>(t->second)];
    }
    std::vector<std::vector<ir::NodeId>> readers(g.values.size());
    for (size_t n = 0; n < g.nodes.size(); ++n)
      for (ir::ValueId v : g.nodes[n].in)
        if (v != ir::kNoValue) readers[static_cast<size_t>(v)].push_back(static_cast<ir::NodeId>(n));
    auto read_on = [&](ir::ValueId v) {  // the stage of a node that reads v, or -1
      for (ir::NodeId r : readers[static_cast<size_t>(v)])
        if (lo.node_stage[static_cast<size_t>(r)] >= 0) return lo.node_stage[static_cast<size_t>(r)];
      return -1;
    };
    auto broadcast = [&](int stage) { return sbp::NdSbp::Broadcast(lo.stages[static_cast<size_t>(stage)].ndim()); };
    for (size_t n = g.nodes.size(); n-- > 0;) {  // readers first
      if (lo.node_stage[n] >= 0) continue;
      int stage = -1;
      for (ir::ValueId v : g.nodes[n].out) stage = stage >= 0 ? stage : read_on(v);
      if (stage < 0) return Status::Invalid(where + "internal: node '" + g.nodes[n].name + "' is neither in the training graph nor read");
      lo.node_stage[n] = stage;
      a.node_sig[n].in.assign(g.nodes[n].in.size(), broadcast(stage));
      a.node_sig[n].out.assign(g.nodes[n].out.size(), broadcast(stage));
    }
    for (size_t v = 0; v < g.values.size(); ++v) {
      const ir::Value& val = g.values[v];
      const ir::ValueId t = tg.Find(val.name);
      if (t != ir::kNoValue && (val.kind != ir::ValueKind::kParam || tg.value(t).kind == ir::ValueKind::kParam)) {
        a.value_stage.push_back(ta.value_stage[static_cast<size_t>(t)]);
        a.value_sbp.push_back(val.kind == ir::ValueKind::kConst ? sbp::NdSbp() : ta.value_sbp[static_cast<size_t>(t)]);
        continue;
      }
      const int stage = val.producer >= 0 ? lo.node_stage[static_cast<size_t>(val.producer)] : read_on(static_cast<ir::ValueId>(v));
      if (stage < 0) return Status::Invalid(where + "internal: value '" + val.name + "' is neither in the training graph nor read");
      a.value_stage.push_back(stage);
      a.value_sbp.push_back(val.kind == ir::ValueKind::kConst ? sbp::NdSbp() : broadcast(stage));
    }
    auto lowered = boxing::Lower(*graph, a, lo);
    if (!lowered.ok()) return lowered.status().With("[boxing] " + cfg.path + ": eval: ");
    plan = std::move(lowered).value();
  }
  for (ir::TaskDesc& t : plan.tasks)
    if (t.kind == ir::TaskKind::kBoxing && t.move.collective >= 0) t.move.collective += first_collective;
  return plan;
}

}  // namespace fr
