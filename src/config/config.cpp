// The config schema: one reader per section, checked with the strict reads of config_reader.h.
#include "config/config.h"

#include <yaml-cpp/eventhandler.h>
#include <yaml-cpp/yaml.h>

#include <charconv>
#include <cstdio>
#include <sstream>
#include <string>

#include "base/file.h"
#include "config/config_reader.h"

namespace fr {
namespace {

using config::Names;
using config::NameOf;
using config::Need;
using config::Origin;
using config::Section;
using config::Val;

const Names<LossConfig::Type> kLossTypes = {{"cross_entropy", LossConfig::Type::kCrossEntropy},
                                            {"mse", LossConfig::Type::kMse}};
const Names<DataConfig::Format> kFormats = {{"tokens", DataConfig::Format::kTokens},
                                            {"npy", DataConfig::Format::kNpy},
                                            {"synthetic", DataConfig::Format::kSynthetic}};
const Names<DataConfig::Order> kOrders = {{"sequential", DataConfig::Order::kSequential},
                                          {"shuffle", DataConfig::Order::kShuffle}};
const Names<SyntheticField::DType> kDTypes = {{"f32", SyntheticField::DType::kF32},
                                              {"i64", SyntheticField::DType::kI64}};
const Names<OptimizerConfig::Type> kOptimizers = {{"sgd", OptimizerConfig::Type::kSgd},
                                                  {"adamw", OptimizerConfig::Type::kAdamW}};
const Names<ScheduleConfig::Type> kSchedules = {{"constant", ScheduleConfig::Type::kConstant},
                                                {"linear", ScheduleConfig::Type::kLinear},
                                                {"cosine", ScheduleConfig::Type::kCosine}};
const Names<DeviceType> kDevices = {{"cpu", DeviceType::kCpu}, {"cuda", DeviceType::kCuda}, {"sim", DeviceType::kSim}};

std::string Num(double v) {
  char buf[32];
  std::snprintf(buf, sizeof buf, "%g", v);
  return buf;
}

// ---- model ----

Status ReadInputs(const Val& v, std::map<std::string, std::string>* inputs) {
  ASSIGN_OR_RETURN(std::vector<Val::Entry> entries, v.Entries());
  if (entries.empty()) return v.Expected("a non-empty map of ONNX graph input -> data field");
  for (const Val::Entry& e : entries) {
    ASSIGN_OR_RETURN((*inputs)[e.name], e.value.String());
  }
  return Status::Ok();
}

Status ReadLoss(const Val& v, LossConfig* loss) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"type", "logits", "output", "labels", "ignore_index"}));
  RETURN_IF_ERROR(s.ReadEnum("type", &loss->type, Need::kRequired, kLossTypes));
  RETURN_IF_ERROR(s.Read("labels", &loss->labels, Need::kRequired));
  // Both name the graph output the loss reads; the key says which kind of output it is.
  bool ce = loss->type == LossConfig::Type::kCrossEntropy;
  if (!ce) RETURN_IF_ERROR(s.OnlyWith("ignore_index", "type: cross_entropy", NameOf(kLossTypes, loss->type)));
  RETURN_IF_ERROR(s.Read("ignore_index", &loss->ignore_index, Need::kOptional));
  RETURN_IF_ERROR(s.OnlyWith(ce ? "output" : "logits", ce ? "type: mse" : "type: cross_entropy",
                             NameOf(kLossTypes, loss->type)));
  return s.Read(ce ? "logits" : "output", &loss->output, Need::kRequired);
}

Status ReadModel(const Val& v, ModelConfig* m) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"onnx", "inputs", "loss", "trainable", "frozen", "untie", "tie", "dropout"}));
  RETURN_IF_ERROR(s.Read("onnx", &m->onnx, Need::kRequired));
  RETURN_IF_ERROR(s.Read("dropout", &m->dropout, Need::kOptional));
  ASSIGN_OR_RETURN(Val inputs, s.Get("inputs"));
  RETURN_IF_ERROR(ReadInputs(inputs, &m->inputs));
  for (auto [key, globs] : {std::pair{"trainable", &m->trainable}, std::pair{"frozen", &m->frozen}, std::pair{"untie", &m->untie}, std::pair{"tie", &m->tie}}) {
    if (!s.Has(key)) continue;
    ASSIGN_OR_RETURN(Val list, s.Get(key));
    ASSIGN_OR_RETURN(*globs, list.StringList());
    if (globs->empty()) return list.Expected("a non-empty list of initializer-name globs");
  }
  ASSIGN_OR_RETURN(Val loss, s.Get("loss"));
  return ReadLoss(loss, &m->loss);
}

// ---- data ----

Result<SyntheticField> ReadField(const Val& v) {
  SyntheticField f;
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"shape", "dtype", "classes"}));
  ASSIGN_OR_RETURN(Val shape, s.Get("shape"));
  ASSIGN_OR_RETURN(f.shape, shape.IntList([](int64_t d) { return d >= 1; }, "an integer >= 1"));
  RETURN_IF_ERROR(s.ReadEnum("dtype", &f.dtype, Need::kRequired, kDTypes));
  if (f.dtype == SyntheticField::DType::kF32) {
    RETURN_IF_ERROR(s.OnlyWith("classes", "dtype: i64", "f32"));
    return f;
  }
  RETURN_IF_ERROR(s.Read("classes", &f.classes, Need::kRequired));
  RETURN_IF_ERROR(s.Check("classes", f.classes > 0, "an integer > 0"));
  return f;
}

Status ReadFields(const Val& v, std::map<std::string, SyntheticField>* fields) {
  ASSIGN_OR_RETURN(std::vector<Val::Entry> entries, v.Entries());
  if (entries.empty()) return v.Expected("a non-empty map of field name -> {shape, dtype}");
  for (const Val::Entry& e : entries) {
    ASSIGN_OR_RETURN((*fields)[e.name], ReadField(e.value));
  }
  return Status::Ok();
}

Status ReadDataFormat(const Section& s, DataConfig* d) {
  switch (d->format) {
    case DataConfig::Format::kTokens:
      RETURN_IF_ERROR(s.Read("train", &d->train, Need::kRequired));
      RETURN_IF_ERROR(s.Read("seq_len", &d->seq_len, Need::kRequired));
      return s.Check("seq_len", d->seq_len > 0, "an integer > 0");
    case DataConfig::Format::kNpy: {
      // Fields x and y, or any named in `arrays` (a model with several inputs), or both.
      for (const char* key : {"x", "y"})
        if (s.Has(key)) RETURN_IF_ERROR(s.Read(key, &d->npy[key], Need::kRequired));
      if (s.Has("arrays")) {
        ASSIGN_OR_RETURN(Val arrays, s.Get("arrays"));
        ASSIGN_OR_RETURN(std::vector<Val::Entry> entries, arrays.Entries());
        if (entries.empty()) return arrays.Expected("a map of field names to .npy files");
        for (const Val::Entry& e : entries) {
          if (d->npy.count(e.name)) return e.value.Expected("a field other than data." + e.name);
          ASSIGN_OR_RETURN(d->npy[e.name], e.value.String());
        }
      }
      if (d->npy.empty()) return s.Read("x", &d->npy["x"], Need::kRequired);  // says what is missing
      return Status::Ok();
    }
    case DataConfig::Format::kSynthetic: {
      RETURN_IF_ERROR(s.Read("samples", &d->samples, Need::kRequired));
      RETURN_IF_ERROR(s.Check("samples", d->samples > 0, "an integer > 0"));
      ASSIGN_OR_RETURN(Val fields, s.Get("fields"));
      return ReadFields(fields, &d->synthetic);
    }
  }
  return Status::Ok();
}

Status ReadData(const Val& v, DataConfig* d) {
  using F = DataConfig::Format;
  static const Names<F> kOwners = {{"train", F::kTokens}, {"seq_len", F::kTokens},
                                   {"x", F::kNpy},        {"y", F::kNpy},        {"arrays", F::kNpy},
                                   {"samples", F::kSynthetic}, {"fields", F::kSynthetic}};
  std::vector<std::string> keys = {"format", "order"};
  for (const auto& [key, owner] : kOwners) keys.push_back(key);
  ASSIGN_OR_RETURN(Section s, Section::Open(v, keys));
  RETURN_IF_ERROR(s.ReadEnum("format", &d->format, Need::kRequired, kFormats));
  RETURN_IF_ERROR(s.ReadEnum("order", &d->order, Need::kOptional, kOrders));
  for (const auto& [key, owner] : kOwners) {
    if (owner == d->format) continue;
    RETURN_IF_ERROR(
        s.OnlyWith(key, "format: " + NameOf(kFormats, owner), NameOf(kFormats, d->format)));
  }
  return ReadDataFormat(s, d);
}

// ---- train, optimizer, schedule ----

Status ReadTrain(const Val& v, TrainConfig* t) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"steps", "global_batch", "micro_batch", "seed"}));
  RETURN_IF_ERROR(s.Read("steps", &t->steps, Need::kRequired));
  RETURN_IF_ERROR(s.Check("steps", t->steps >= 1, "an integer >= 1"));
  RETURN_IF_ERROR(s.Read("global_batch", &t->global_batch, Need::kRequired));
  RETURN_IF_ERROR(s.Check("global_batch", t->global_batch >= 1, "an integer >= 1"));
  t->micro_batch = t->global_batch;
  RETURN_IF_ERROR(s.Read("micro_batch", &t->micro_batch, Need::kOptional));
  RETURN_IF_ERROR(s.Check("micro_batch", t->micro_batch >= 1, "an integer >= 1"));
  const std::string global = std::to_string(t->global_batch);
  RETURN_IF_ERROR(s.Check("micro_batch", t->global_batch % t->micro_batch == 0,
                          "a divisor of train.global_batch (" + global + ")"));
  return s.Read("seed", &t->seed, Need::kOptional);
}

Status ReadBetas(const Val& v, OptimizerConfig* o) {
  ASSIGN_OR_RETURN(std::vector<Val> items, v.Items());
  if (items.size() != 2) return v.Expected("a list of 2 numbers [beta1, beta2]");
  double* betas[2] = {&o->beta1, &o->beta2};
  for (size_t i = 0; i < 2; ++i) {
    ASSIGN_OR_RETURN(*betas[i], items[i].Number());
    if (*betas[i] < 0 || *betas[i] >= 1) return items[i].Expected("a number in [0, 1)");
  }
  return Status::Ok();
}

Status ReadSgd(const Section& s, OptimizerConfig* o) {
  RETURN_IF_ERROR(s.Read("momentum", &o->momentum, Need::kOptional));
  RETURN_IF_ERROR(s.Check("momentum", o->momentum >= 0 && o->momentum < 1, "a number in [0, 1)"));
  RETURN_IF_ERROR(s.Read("nesterov", &o->nesterov, Need::kOptional));
  if (o->nesterov && o->momentum <= 0) return s.Fail("nesterov", "needs optimizer.momentum > 0");
  return Status::Ok();
}

Status ReadAdamW(const Section& s, OptimizerConfig* o) {
  if (const Val* betas = s.Find("betas")) RETURN_IF_ERROR(ReadBetas(*betas, o));
  RETURN_IF_ERROR(s.Read("eps", &o->eps, Need::kOptional));
  return s.Check("eps", o->eps > 0, "a number > 0");
}

Status ReadOptimizer(const Val& v, OptimizerConfig* o) {
  using T = OptimizerConfig::Type;
  static const Names<T> kOwners = {{"momentum", T::kSgd}, {"nesterov", T::kSgd},
                                   {"betas", T::kAdamW},  {"eps", T::kAdamW}};
  std::vector<std::string> keys = {"type", "lr", "weight_decay", "grad_clip"};
  for (const auto& [key, owner] : kOwners) keys.push_back(key);
  ASSIGN_OR_RETURN(Section s, Section::Open(v, keys));
  RETURN_IF_ERROR(s.ReadEnum("type", &o->type, Need::kRequired, kOptimizers));
  for (const auto& [key, owner] : kOwners) {
    if (owner == o->type) continue;
    RETURN_IF_ERROR(
        s.OnlyWith(key, "type: " + NameOf(kOptimizers, owner), NameOf(kOptimizers, o->type)));
  }
  RETURN_IF_ERROR(s.Read("lr", &o->lr, Need::kRequired));
  RETURN_IF_ERROR(s.Check("lr", o->lr > 0, "a number > 0"));
  RETURN_IF_ERROR(s.Read("weight_decay", &o->weight_decay, Need::kOptional));
  RETURN_IF_ERROR(s.Check("weight_decay", o->weight_decay >= 0, "a number >= 0"));
  RETURN_IF_ERROR(s.Read("grad_clip", &o->grad_clip, Need::kOptional));
  RETURN_IF_ERROR(s.Check("grad_clip", o->grad_clip >= 0, "a number >= 0 (0 = off)"));
  return o->type == T::kSgd ? ReadSgd(s, o) : ReadAdamW(s, o);
}

Status ReadSchedule(const Val& v, const Config& c, ScheduleConfig* sc) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"type", "warmup", "min_lr"}));
  RETURN_IF_ERROR(s.ReadEnum("type", &sc->type, Need::kOptional, kSchedules));
  RETURN_IF_ERROR(s.Read("warmup", &sc->warmup, Need::kOptional));
  // A warm-up longer than the run is allowed (a short smoke run of a long config keeps its lr ramp).
  RETURN_IF_ERROR(s.Check("warmup", sc->warmup >= 0, "an integer >= 0"));
  RETURN_IF_ERROR(s.Read("min_lr", &sc->min_lr, Need::kOptional));
  const std::string lr = Num(c.optimizer.lr);
  return s.Check("min_lr", sc->min_lr >= 0 && sc->min_lr <= c.optimizer.lr,
                 "a number in [0, optimizer.lr = " + lr + "]");
}

// ---- parallel, log ----

Status ReadMesh(const Val& v, std::vector<int64_t>* mesh) {
  ASSIGN_OR_RETURN(std::vector<Val> items, v.Items());
  const Val* inferred = nullptr;
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(int64_t n, item.Int());
    if ((n < 1 && n != -1) || n > kMaxRanks) {
      return item.Expected("an integer in [1, " + std::to_string(kMaxRanks) + "], or -1 (inferred)");
    }
    if (n == -1 && inferred) {
      return item.Error(item.path() + ": at most one entry may be -1, and " + inferred->path() +
                        " is -1 already");
    }
    if (n == -1) inferred = &item;
    mesh->push_back(n);
  }
  return Status::Ok();
}

Status ReadStages(const Val& v, std::vector<std::vector<std::string>>* stages) {
  ASSIGN_OR_RETURN(std::vector<Val> items, v.Items());
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(std::vector<std::string> globs, item.StringList());
    if (globs.empty()) return item.Expected("a non-empty list of node-name globs");
    stages->push_back(std::move(globs));
  }
  return Status::Ok();
}

// S(n) with n >= 0, B, P, P(max), P(min).
bool IsSbp(const std::string& s) {
  if (s == "B" || s == "P" || s == "P(max)" || s == "P(min)") return true;
  if (s.size() < 4 || !s.starts_with("S(") || !s.ends_with(")")) return false;
  int axis = 0;
  const char* end = s.data() + s.size() - 1;
  auto [p, ec] = std::from_chars(s.data() + 2, end, axis);
  return ec == std::errc() && p == end && s[2] != '-' && s[2] != '+';
}

Status ReadSbp(const Val& v, std::vector<std::pair<std::string, std::vector<std::string>>>* sbp) {
  ASSIGN_OR_RETURN(std::vector<Val::Entry> entries, v.Entries());
  for (const Val::Entry& e : entries) {
    ASSIGN_OR_RETURN(std::vector<Val> items, e.value.Items());
    if (items.empty()) return e.value.Expected("a non-empty list of SBPs, one per mesh axis");
    ASSIGN_OR_RETURN(std::vector<std::string> nd, e.value.StringList());
    for (size_t i = 0; i < nd.size(); ++i) {
      if (!IsSbp(nd[i])) {
        return items[i].Expected("an SBP: S(n) with n >= 0, B, P, P(max) or P(min)");
      }
    }
    sbp->emplace_back(e.name, std::move(nd));
  }
  return Status::Ok();
}

Status ReadParallel(const Val& v, ParallelConfig* p) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"device", "tf32", "ranks", "mesh", "stages", "sbp", "zero",
                                                "timeout", "bucket_kib"}));
  RETURN_IF_ERROR(s.ReadEnum("device", &p->device, Need::kOptional, kDevices));
  RETURN_IF_ERROR(s.Read("tf32", &p->tf32, Need::kOptional));
  RETURN_IF_ERROR(s.Check("tf32", !p->tf32 || p->device == DeviceType::kCuda,
                          "false unless parallel.device is cuda (TF32 is a format of NVIDIA GPUs' tensor cores)"));
  RETURN_IF_ERROR(s.Read("ranks", &p->ranks, Need::kOptional));
  RETURN_IF_ERROR(s.Check("ranks", p->ranks >= 0 && p->ranks <= kMaxRanks,
                          "an integer in [1, " + std::to_string(kMaxRanks) + "] (or 0 = the world size)"));
  if (const Val* mesh = s.Find("mesh")) RETURN_IF_ERROR(ReadMesh(*mesh, &p->mesh));
  if (const Val* stages = s.Find("stages")) RETURN_IF_ERROR(ReadStages(*stages, &p->stages));
  if (const Val* sbp = s.Find("sbp")) RETURN_IF_ERROR(ReadSbp(*sbp, &p->sbp));
  RETURN_IF_ERROR(s.Read("zero", &p->zero, Need::kOptional));
  RETURN_IF_ERROR(s.Read("bucket_kib", &p->bucket_kib, Need::kOptional));
  RETURN_IF_ERROR(s.Check("bucket_kib", p->bucket_kib >= 1 && p->bucket_kib <= (int64_t{1} << 20), "an integer in [1, 1048576] (KiB)"));
  RETURN_IF_ERROR(s.Read("timeout", &p->timeout, Need::kOptional));
  return s.Check("timeout", p->timeout > 0, "a number of seconds > 0");
}

Status ReadPair(const Section& s, const std::string& key, double* intra, double* inter, const std::string& what) {
  const Val* v = s.Find(key);
  if (!v) return Status::Ok();
  ASSIGN_OR_RETURN(Section p, Section::Open(*v, {"intra", "inter"}));
  RETURN_IF_ERROR(p.Read("intra", intra, Need::kOptional));
  RETURN_IF_ERROR(p.Check("intra", *intra > 0, what));
  *inter = *intra;
  RETURN_IF_ERROR(p.Read("inter", inter, Need::kOptional));
  return p.Check("inter", *inter > 0, what);
}

// A map of two required numbers, each > 0 (cluster.shared_allreduce, cluster.element_seconds).
struct Positive {
  const char* key;
  double* to;
  const char* what;
};
Status ReadPositives(const Val& v, const Positive& a, const Positive& b) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {a.key, b.key}));
  for (const Positive& x : {a, b}) {
    RETURN_IF_ERROR(s.Read(x.key, x.to, Need::kRequired));
    RETURN_IF_ERROR(s.Check(x.key, *x.to > 0, x.what));
  }
  return Status::Ok();
}

// cluster.busy_speedup: a number >= 1 per busy-rank count 1..devices_per_node, not increasing,
// ending at 1 (all busy is what `flops` measured); [] for a device per rank.
Status ReadBusySpeedup(const Val& v, ClusterConfig* c) {
  const std::string what = "a list of devices_per_node numbers >= 1, one per count of busy ranks, not increasing, "
                           "the last 1 (flowrun env writes it), or [] for a device per rank";
  ASSIGN_OR_RETURN(std::vector<Val> items, v.Items());
  c->busy_speedup.clear();
  if (items.empty()) return Status::Ok();  // []: a device per rank
  if (c->devices_per_node < 1 || items.size() != static_cast<size_t>(c->devices_per_node)) {
    return v.Expected(what + (c->devices_per_node < 1 ? std::string("; it needs cluster.devices_per_node")
                                                      : ": cluster.devices_per_node is " + std::to_string(c->devices_per_node)));
  }
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(double x, item.Number());
    if (x < 1 || (!c->busy_speedup.empty() && x > c->busy_speedup.back())) return item.Expected(what);
    c->busy_speedup.push_back(x);
  }
  if (c->busy_speedup.back() != 1) return items.back().Expected(what);
  return Status::Ok();
}

// cluster.p2p_wake: [[wait, latency], ...], seconds >= 0, waits increasing.
Status ReadP2pWake(const Val& v, ClusterConfig* c) {
  const std::string what = "a list of [wait, latency] pairs in seconds, >= 0, the waits increasing (flowrun env writes it)";
  ASSIGN_OR_RETURN(std::vector<Val> items, v.Items());
  c->p2p_wake.clear();
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(std::vector<Val> pair, item.Items());
    if (pair.size() != 2) return item.Expected(what);
    ASSIGN_OR_RETURN(double wait, pair[0].Number());
    ASSIGN_OR_RETURN(double latency, pair[1].Number());
    if (wait < 0 || latency < 0 || (!c->p2p_wake.empty() && wait <= c->p2p_wake.back().first)) return item.Expected(what);
    c->p2p_wake.emplace_back(wait, latency);
  }
  return Status::Ok();
}

Status ReadCluster(const Val& v, ClusterConfig* c) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"nodes", "devices_per_node", "memory_gib", "flops", "bandwidth",
                                                "latency", "p2p_latency", "p2p_wake", "shared_allreduce", "op_overhead",
                                                "element_seconds", "busy_speedup",
                                                "measured"}));
  c->given = true;
  RETURN_IF_ERROR(s.Read("nodes", &c->nodes, Need::kOptional));
  RETURN_IF_ERROR(s.Check("nodes", c->nodes >= 1, "an integer >= 1"));
  RETURN_IF_ERROR(s.Read("devices_per_node", &c->devices_per_node, Need::kOptional));
  if (s.Find("devices_per_node")) RETURN_IF_ERROR(s.Check("devices_per_node", c->devices_per_node >= 1, "an integer >= 1"));
  RETURN_IF_ERROR(s.Read("memory_gib", &c->memory_gib, Need::kOptional));
  RETURN_IF_ERROR(s.Check("memory_gib", c->memory_gib > 0, "a number of GiB > 0"));
  RETURN_IF_ERROR(s.Read("flops", &c->flops, Need::kOptional));
  RETURN_IF_ERROR(s.Check("flops", c->flops > 0, "FLOP/s per device > 0"));
  RETURN_IF_ERROR(ReadPair(s, "bandwidth", &c->bandwidth_intra, &c->bandwidth_inter, "bytes/s per rank > 0"));
  RETURN_IF_ERROR(ReadPair(s, "latency", &c->latency_intra, &c->latency_inter, "seconds per message > 0"));
  RETURN_IF_ERROR(s.Read("p2p_latency", &c->p2p_latency, Need::kOptional));
  RETURN_IF_ERROR(s.Check("p2p_latency", c->p2p_latency >= 0, "seconds per message >= 0 (0 = latency.intra)"));
  if (const Val* w = s.Find("p2p_wake")) RETURN_IF_ERROR(ReadP2pWake(*w, c));
  if (const Val* v = s.Find("shared_allreduce")) {
    RETURN_IF_ERROR(ReadPositives(*v, {"latency", &c->shared_latency, "seconds per all-reduce > 0"},
                                  {"bandwidth", &c->shared_bandwidth, "bytes read per second per rank > 0"}));
  }
  RETURN_IF_ERROR(s.Read("op_overhead", &c->op_overhead, Need::kOptional));
  RETURN_IF_ERROR(s.Check("op_overhead", c->op_overhead >= 0, "seconds per op >= 0"));
  if (const Val* v = s.Find("element_seconds")) {
    RETURN_IF_ERROR(ReadPositives(*v, {"stream", &c->stream_element, "seconds per element > 0"},
                                  {"special", &c->special_element, "seconds per element > 0"}));
  }
  if (const Val* v = s.Find("busy_speedup")) RETURN_IF_ERROR(ReadBusySpeedup(*v, c));
  return s.Read("measured", &c->measured, Need::kOptional);
}

Status ReadLog(const Val& v, LogConfig* l) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"every", "jsonl"}));
  RETURN_IF_ERROR(s.Read("every", &l->every, Need::kOptional));
  RETURN_IF_ERROR(s.Check("every", l->every >= 1, "an integer >= 1"));
  return s.Read("jsonl", &l->jsonl, Need::kOptional);
}

Status ReadSave(const Val& v, SaveConfig* s) {
  ASSIGN_OR_RETURN(Section sec, Section::Open(v, {"onnx"}));
  return sec.Read("onnx", &s->onnx, Need::kRequired);
}

Status ReadCheckpoint(const Val& v, CheckpointConfig* c) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"dir", "every", "keep", "timeout"}));
  RETURN_IF_ERROR(s.Read("dir", &c->dir, Need::kRequired));
  RETURN_IF_ERROR(s.Read("every", &c->every, Need::kOptional));
  RETURN_IF_ERROR(s.Check("every", c->every >= 0, "an integer >= 0 (0: only at the end)"));
  RETURN_IF_ERROR(s.Read("keep", &c->keep, Need::kOptional));
  RETURN_IF_ERROR(s.Check("keep", c->keep >= 0, "an integer >= 0 (0: keep all)"));
  RETURN_IF_ERROR(s.Read("timeout", &c->timeout, Need::kOptional));
  return s.Check("timeout", c->timeout > 0, "seconds > 0");
}

Status ReadEval(const Val& v, const DataConfig& data, EvalConfig* e) {
  ASSIGN_OR_RETURN(Section s, Section::Open(v, {"every", "steps", "data", "split"}));
  e->given = true;
  RETURN_IF_ERROR(s.Read("every", &e->every, Need::kOptional));
  RETURN_IF_ERROR(s.Check("every", e->every >= 0, "an integer >= 0 (0: only at the end)"));
  RETURN_IF_ERROR(s.Read("steps", &e->steps, Need::kOptional));
  RETURN_IF_ERROR(s.Check("steps", e->steps >= 1, "an integer >= 1 (batches of train.global_batch per evaluation)"));
  RETURN_IF_ERROR(s.Read("data", &e->data, Need::kOptional));
  RETURN_IF_ERROR(s.Read("split", &e->split, Need::kOptional));
  const bool has_data = s.Has("data"), has_split = s.Has("split");
  if (has_data && has_split) return s.Fail("split", "give eval.data (a token file) or eval.split (a held-out fraction of data.train), not both");
  if (!has_data && !has_split)
    return s.Fail("data", "missing: eval needs eval.data (a token file) or eval.split (a held-out fraction of data.train)");
  if (has_split) RETURN_IF_ERROR(s.Check("split", e->split > 0 && e->split < 1, "a fraction of data.train's samples, in (0, 1)"));
  if (has_data)
    RETURN_IF_ERROR(s.Check("data", data.format == DataConfig::Format::kTokens,
                            "a token file, for data.format tokens; other formats hold out eval.split of their samples"));
  return Status::Ok();
}

Result<Config> Build(const Val& root, const std::string& path) {
  Config c;
  c.path = path;
  ASSIGN_OR_RETURN(Section top, Section::Open(root, {"model", "data", "train", "optimizer",
                                                     "schedule", "parallel", "cluster", "log", "save", "checkpoint", "eval"}));
  ASSIGN_OR_RETURN(Val model, top.Get("model"));
  RETURN_IF_ERROR(ReadModel(model, &c.model));
  ASSIGN_OR_RETURN(Val data, top.Get("data"));
  RETURN_IF_ERROR(ReadData(data, &c.data));
  ASSIGN_OR_RETURN(Val train, top.Get("train"));
  RETURN_IF_ERROR(ReadTrain(train, &c.train));
  ASSIGN_OR_RETURN(Val optimizer, top.Get("optimizer"));
  RETURN_IF_ERROR(ReadOptimizer(optimizer, &c.optimizer));
  if (const Val* v = top.Find("schedule")) RETURN_IF_ERROR(ReadSchedule(*v, c, &c.schedule));
  if (const Val* v = top.Find("parallel")) RETURN_IF_ERROR(ReadParallel(*v, &c.parallel));
  if (const Val* v = top.Find("cluster")) RETURN_IF_ERROR(ReadCluster(*v, &c.cluster));
  if (const Val* v = top.Find("log")) RETURN_IF_ERROR(ReadLog(*v, &c.log));
  if (const Val* v = top.Find("save")) RETURN_IF_ERROR(ReadSave(*v, &c.save));
  if (const Val* v = top.Find("checkpoint")) RETURN_IF_ERROR(ReadCheckpoint(*v, &c.checkpoint));
  if (const Val* v = top.Find("eval")) RETURN_IF_ERROR(ReadEval(*v, c.data, &c.eval));
  return c;
}

// ---- writing ----

std::string Quote(const std::string& s) {
  std::string q = "\"";
  for (char ch : s) {
    if (ch == '"' || ch == '\\') q += '\\';
    q += ch;
  }
  return q + "\"";
}

std::string Exact(double v) {
  char buf[40];
  std::snprintf(buf, sizeof buf, "%.17g", v);
  std::string s = buf;
  if (s.find_first_of(".eEn") == std::string::npos) s += ".0";  // stays a float in YAML
  return s;
}

std::string List(const std::vector<std::string>& items) {
  std::string s = "[";
  for (size_t i = 0; i < items.size(); ++i) s += (i ? ", " : "") + items[i];
  return s + "]";
}

std::string QuotedList(const std::vector<std::string>& items) {
  std::vector<std::string> q;
  for (const std::string& i : items) q.push_back(Quote(i));
  return List(q);
}

}  // namespace

namespace {

// ConfigToYaml, a section at a time.
std::string ModelYaml(const ModelConfig& m) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("model:");
  line("  onnx: " + Quote(m.onnx));
  std::vector<std::string> inputs;
  for (const auto& [k, v] : m.inputs) inputs.push_back(Quote(k) + ": " + Quote(v));
  line("  inputs: {" + List(inputs).substr(1, List(inputs).size() - 2) + "}");
  const bool ce = m.loss.type == LossConfig::Type::kCrossEntropy;
  line("  loss: {type: " + NameOf(kLossTypes, m.loss.type) + ", " + (ce ? "logits: " : "output: ") +
       Quote(m.loss.output) + ", labels: " + Quote(m.loss.labels) +
       (ce ? ", ignore_index: " + std::to_string(m.loss.ignore_index) : "") + "}");
  if (!m.trainable.empty()) line("  trainable: " + QuotedList(m.trainable));
  if (!m.frozen.empty()) line("  frozen: " + QuotedList(m.frozen));
  if (!m.untie.empty()) line("  untie: " + QuotedList(m.untie));
  if (!m.tie.empty()) line("  tie: " + QuotedList(m.tie));
  if (!m.dropout) line("  dropout: false");
  return y;
}

std::string DataYaml(const DataConfig& d) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("data:");
  line("  format: " + NameOf(kFormats, d.format));
  line("  order: " + NameOf(kOrders, d.order));
  switch (d.format) {
    case DataConfig::Format::kTokens:
      line("  train: " + Quote(d.train));
      line("  seq_len: " + std::to_string(d.seq_len));
      break;
    case DataConfig::Format::kNpy:
      for (const auto& [k, v] : d.npy) {
        if (k == "x" || k == "y") line("  " + k + ": " + Quote(v));
      }
      if (d.npy.size() > d.npy.count("x") + d.npy.count("y")) {
        line("  arrays:");
        for (const auto& [k, v] : d.npy)
          if (k != "x" && k != "y") line("    " + Quote(k) + ": " + Quote(v));
      }
      break;
    case DataConfig::Format::kSynthetic:
      line("  samples: " + std::to_string(d.samples));
      line("  fields:");
      for (const auto& [k, f] : d.synthetic) {
        std::vector<std::string> dims;
        for (int64_t d : f.shape) dims.push_back(std::to_string(d));
        std::string e = "    " + Quote(k) + ": {shape: " + List(dims) + ", dtype: " + NameOf(kDTypes, f.dtype);
        if (f.dtype == SyntheticField::DType::kI64) e += ", classes: " + std::to_string(f.classes);
        line(e + "}");
      }
      break;
  }
  return y;
}

std::string TrainYaml(const TrainConfig& t) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("train:");
  line("  steps: " + std::to_string(t.steps));
  line("  global_batch: " + std::to_string(t.global_batch));
  line("  micro_batch: " + std::to_string(t.micro_batch));
  line("  seed: " + std::to_string(t.seed));
  return y;
}

std::string OptimizerYaml(const OptimizerConfig& o, const ScheduleConfig& s) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("optimizer:");
  line("  type: " + NameOf(kOptimizers, o.type));
  line("  lr: " + Exact(o.lr));
  line("  weight_decay: " + Exact(o.weight_decay));
  line("  grad_clip: " + Exact(o.grad_clip));
  if (o.type == OptimizerConfig::Type::kSgd) {
    line("  momentum: " + Exact(o.momentum));
    line(std::string("  nesterov: ") + (o.nesterov ? "true" : "false"));
  } else {
    line("  betas: [" + Exact(o.beta1) + ", " + Exact(o.beta2) + "]");
    line("  eps: " + Exact(o.eps));
  }
  line("schedule: {type: " + NameOf(kSchedules, s.type) + ", warmup: " + std::to_string(s.warmup) +
       ", min_lr: " + Exact(s.min_lr) + "}");
  return y;
}

std::string ParallelYaml(const ParallelConfig& p) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("parallel:");
  line("  device: " + NameOf(kDevices, p.device));
  if (p.tf32) line("  tf32: true");
  line("  ranks: " + std::to_string(p.ranks));
  if (!p.mesh.empty()) {
    std::vector<std::string> m;
    for (int64_t d : p.mesh) m.push_back(std::to_string(d));
    line("  mesh: " + List(m));
  }
  if (!p.stages.empty()) {
    line("  stages:");
    for (const auto& st : p.stages) line("    - " + QuotedList(st));
  }
  if (!p.sbp.empty()) {
    line("  sbp:");
    for (const auto& [k, v] : p.sbp) line("    " + Quote(k) + ": " + QuotedList(v));
  }
  line(std::string("  zero: ") + (p.zero ? "true" : "false"));
  line("  bucket_kib: " + std::to_string(p.bucket_kib));
  line("  timeout: " + Exact(p.timeout));
  return y;
}

std::string ClusterYaml(const ClusterConfig& k) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("cluster:");
  line("  nodes: " + std::to_string(k.nodes));
  if (k.devices_per_node > 0) line("  devices_per_node: " + std::to_string(k.devices_per_node));
  line("  memory_gib: " + Exact(k.memory_gib));
  line("  flops: " + Exact(k.flops));
  line("  bandwidth: {intra: " + Exact(k.bandwidth_intra) + ", inter: " + Exact(k.bandwidth_inter) + "}");
  line("  latency: {intra: " + Exact(k.latency_intra) + ", inter: " + Exact(k.latency_inter) + "}");
  line("  p2p_latency: " + Exact(k.p2p_latency));
  if (!k.p2p_wake.empty()) {
    std::string list;
    for (const auto& [wait, latency] : k.p2p_wake) list += (list.empty() ? "[" : ", [") + Exact(wait) + ", " + Exact(latency) + "]";
    line("  p2p_wake: [" + list + "]");
  }
  if (k.shared_latency > 0) {
    line("  shared_allreduce: {latency: " + Exact(k.shared_latency) + ", bandwidth: " + Exact(k.shared_bandwidth) + "}");
  }
  line("  op_overhead: " + Exact(k.op_overhead));
  if (k.stream_element > 0) {
    line("  element_seconds: {stream: " + Exact(k.stream_element) + ", special: " + Exact(k.special_element) + "}");
  }
  if (!k.busy_speedup.empty()) {
    std::string list;
    for (double x : k.busy_speedup) list += (list.empty() ? "" : ", ") + Exact(x);
    line("  busy_speedup: [" + list + "]");
  }
  if (!k.measured.empty()) line("  measured: " + Quote(k.measured));
  return y;
}

std::string CheckpointYaml(const CheckpointConfig& k) {
  if (k.dir.empty()) return "";
  return "checkpoint: {dir: " + Quote(k.dir) + ", every: " + std::to_string(k.every) + ", keep: " + std::to_string(k.keep) +
         ", timeout: " + Exact(k.timeout) + "}\n";
}

std::string EvalYaml(const EvalConfig& e) {
  if (!e.given) return "";
  return "eval: {every: " + std::to_string(e.every) + ", steps: " + std::to_string(e.steps) +
         (e.data.empty() ? ", split: " + Exact(e.split) : ", data: " + Quote(e.data)) + "}\n";
}

std::string OutputsYaml(const LogConfig& log, const SaveConfig& save) {
  std::string y;
  auto line = [&](const std::string& s) { y += s + "\n"; };
  line("log:");
  line("  every: " + std::to_string(log.every));
  if (!log.jsonl.empty()) line("  jsonl: " + Quote(log.jsonl));
  if (!save.onnx.empty()) line("save: {onnx: " + Quote(save.onnx) + "}");
  return y;
}

}  // namespace

std::string ConfigToYaml(const Config& c) {
  return ModelYaml(c.model) + DataYaml(c.data) + TrainYaml(c.train) + OptimizerYaml(c.optimizer, c.schedule) +
         ParallelYaml(c.parallel) + (c.cluster.given ? ClusterYaml(c.cluster) : "") + OutputsYaml(c.log, c.save) +
         CheckpointYaml(c.checkpoint) + EvalYaml(c.eval);
}

namespace {

// ---- documents and overrides ----

std::string At(const std::string& file, const YAML::Mark& mark) { return Origin(file).Where(mark); }

// Counts a stream's documents without building them, keeping where each starts and where its
// first node is.
class DocumentMarks : public YAML::EventHandler {
 public:
  std::vector<YAML::Mark> starts, nodes;
  void OnDocumentStart(const YAML::Mark& m) override {
    starts.push_back(m);
    nodes.push_back(m);
    first_ = true;
  }
  void OnDocumentEnd() override {}
  void OnNull(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnAlias(const YAML::Mark& m, YAML::anchor_t) override { Node(m); }
  void OnScalar(const YAML::Mark& m, const std::string&, YAML::anchor_t, const std::string&) override { Node(m); }
  void OnSequenceStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { Node(m); }
  void OnSequenceEnd() override {}
  void OnMapStart(const YAML::Mark& m, const std::string&, YAML::anchor_t, YAML::EmitterStyle::value) override { Node(m); }
  void OnMapEnd() override {}

 private:
  void Node(const YAML::Mark& m) {
    if (first_) nodes.back() = m;
    first_ = false;
  }
  bool first_ = false;
};

Result<YAML::Node> ParseDocument(const std::string& text, const std::string& path) {
  try {
    // yaml-cpp's LoadAll never returns on some text (a stray ','): its parser then starts the same
    // document again at the same place. So documents are counted here, stopping where one starts
    // no further on than the one before, and only the one is loaded.
    std::istringstream in(text);
    YAML::Parser parser(in);
    DocumentMarks docs;
    while (parser.HandleNextDocument(docs)) {
      const size_t n = docs.starts.size();
      if (n >= 2 && docs.starts[n - 1].pos <= docs.starts[n - 2].pos) {
        return Status::Invalid(At(path, docs.nodes[n - 1]) + "cannot read YAML here (a ',' or other flow indicator outside [ ] or { }?)");
      }
    }
    if (docs.starts.size() > 1) {
      return Status::Invalid(At(path, docs.nodes[1]) + "expected one YAML document, found " + std::to_string(docs.starts.size()));
    }
    YAML::Node doc = YAML::Load(text);
    if (!doc.IsDefined() || doc.IsNull()) return YAML::Node(YAML::NodeType::Map);
    return doc;
  } catch (const YAML::Exception& e) {
    return Status::Invalid(At(path, e.mark) + e.msg);
  }
}

// Splits "a.b.c=value" and parses the value as YAML.
Status ParseOverride(const std::string& text, std::vector<std::string>* keys, YAML::Node* value) {
  const std::string where = "[config] --set " + text + ": ";
  size_t eq = text.find('=');
  if (eq == std::string::npos) return Status::Invalid(where + "expected KEY.PATH=VALUE");
  std::string path = text.substr(0, eq);
  if (path.empty()) return Status::Invalid(where + "empty key path, expected KEY.PATH=VALUE");
  for (size_t start = 0;;) {
    size_t dot = path.find('.', start);
    keys->push_back(path.substr(start, dot - start));
    if (keys->back().empty()) {
      return Status::Invalid(where + "empty key in '" + path + "', expected KEY.PATH=VALUE");
    }
    if (dot == std::string::npos) break;
    start = dot + 1;
  }
  try {
    *value = YAML::Load(text.substr(eq + 1));
  } catch (const YAML::Exception& e) {
    return Status::Invalid(where + "the value is not valid YAML: " + e.msg);
  }
  return Status::Ok();
}

// Writes the override into `root`, creating maps on the way; records which paths it wrote.
Status ApplyOverride(const std::string& text, YAML::Node& root, Origin* origin) {
  std::vector<std::string> keys;
  YAML::Node value;
  RETURN_IF_ERROR(ParseOverride(text, &keys, &value));
  YAML::Node map = root;
  std::string path;
  for (size_t i = 0; i + 1 < keys.size(); ++i) {
    path += (i ? "." : "") + keys[i];
    const YAML::Node& view = map;  // const lookups never add keys
    if (!view[keys[i]].IsDefined() || view[keys[i]].IsNull()) {
      map[keys[i]] = YAML::Node(YAML::NodeType::Map);
      origin->SetOverride(path, text);
    } else if (!view[keys[i]].IsMap()) {
      return Status::Invalid("[config] --set " + text + ": " + path +
                             " is not a map, so it has no key '" + keys[i + 1] + "'");
    }
    YAML::Node child = view[keys[i]];
    map.reset(child);
  }
  map[keys.back()] = value;
  origin->SetOverride(text.substr(0, text.find('=')), text);
  return Status::Ok();
}

}  // namespace

Result<Config> ParseConfig(const std::string& yaml_text, const std::string& path,
                           const std::vector<std::string>& overrides) {
  ASSIGN_OR_RETURN(YAML::Node root, ParseDocument(yaml_text, path));
  Origin origin(path);
  if (!root.IsMap()) {
    return Val(origin, root).Expected("a map of sections (model, data, train, optimizer, ...)");
  }
  for (const std::string& o : overrides) RETURN_IF_ERROR(ApplyOverride(o, root, &origin));
  return Build(Val(origin, root), path);
}

Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides) {
  auto text = ReadWholeFile(path);
  if (!text.ok()) return text.status().With("[config] ");
  return ParseConfig(*text, path, overrides);
}

}  // namespace fr
