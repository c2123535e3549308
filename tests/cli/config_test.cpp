// Config loading: a full file into the struct, defaults, overrides, the bundled configs, and a
// table of bad inputs with the message each must give. Run from the repository root.
#include "config/config.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <chrono>

#include <filesystem>
#include <string>
#include <vector>

namespace fr {
namespace {

const char kFull[] = R"(# every key
model:
  onnx: models/gpt.onnx
  inputs: {idx: tokens, pos: positions}
  loss: {type: cross_entropy, logits: logits, labels: targets}
data:
  format: tokens
  train: data/tiny.u16
  seq_len: 128
  order: shuffle
train:
  steps: 200
  global_batch: 32
  micro_batch: 8
  seed: -7
optimizer: {type: adamw, lr: 1.0e-3, betas: [0.9, 0.95], eps: 1e-6, weight_decay: 0.01,
            grad_clip: 1}
schedule: {type: cosine, warmup: 20, min_lr: 1.0e-4}
parallel:
  device: cuda
  ranks: 8
  mesh: [2, -1]
  stages:
    - ["/wte/*", "/blocks.0/*"]
    - ["*"]
  sbp:
    "/blocks.*/qkv/MatMul:1": [B, S(1)]
    idx: [S(0), B]
    loss: [P(max), P(min)]
    z: [P, S(10)]
  zero: true
  timeout: 2.5
  bucket_kib: 512
log: {every: 10, jsonl: runs/gpt/metrics.jsonl}
save: {onnx: runs/gpt/trained.onnx}
)";

TEST(Config, FullConfigRoundTrips) {
  Result<Config> r = ParseConfig(kFull, "full.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Config& c = *r;
  EXPECT_EQ(c.path, "full.yaml");
  EXPECT_EQ(c.model.onnx, "models/gpt.onnx");
  EXPECT_EQ(c.model.inputs, (std::map<std::string, std::string>{{"idx", "tokens"},
                                                                {"pos", "positions"}}));
  EXPECT_EQ(c.model.loss.type, LossConfig::Type::kCrossEntropy);
  EXPECT_EQ(c.model.loss.output, "logits");
  EXPECT_EQ(c.model.loss.labels, "targets");
  EXPECT_EQ(c.data.format, DataConfig::Format::kTokens);
  EXPECT_EQ(c.data.order, DataConfig::Order::kShuffle);
  EXPECT_EQ(c.data.train, "data/tiny.u16");
  EXPECT_EQ(c.data.seq_len, 128);
  EXPECT_EQ(c.train.steps, 200);
  EXPECT_EQ(c.train.global_batch, 32);
  EXPECT_EQ(c.train.micro_batch, 8);
  EXPECT_EQ(c.train.seed, -7);
  EXPECT_EQ(c.accumulation(), 4);
  EXPECT_EQ(c.optimizer.type, OptimizerConfig::Type::kAdamW);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 1e-3);
  EXPECT_DOUBLE_EQ(c.optimizer.beta1, 0.9);
  EXPECT_DOUBLE_EQ(c.optimizer.beta2, 0.95);
  EXPECT_DOUBLE_EQ(c.optimizer.eps, 1e-6);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0.01);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 1.0);
  EXPECT_EQ(c.schedule.type, ScheduleConfig::Type::kCosine);
  EXPECT_EQ(c.schedule.warmup, 20);
  EXPECT_DOUBLE_EQ(c.schedule.min_lr, 1e-4);
  EXPECT_EQ(c.parallel.device, DeviceType::kCuda);
  EXPECT_EQ(c.parallel.ranks, 8);
  EXPECT_EQ(c.parallel.mesh, (std::vector<int64_t>{2, -1}));
  EXPECT_EQ(c.parallel.stages, (std::vector<std::vector<std::string>>{
                                   {"/wte/*", "/blocks.0/*"}, {"*"}}));
  using Hint = std::pair<std::string, std::vector<std::string>>;
  EXPECT_EQ(c.parallel.sbp, (std::vector<Hint>{{"/blocks.*/qkv/MatMul:1", {"B", "S(1)"}},
                                               {"idx", {"S(0)", "B"}},
                                               {"loss", {"P(max)", "P(min)"}},
                                               {"z", {"P", "S(10)"}}}));  // file order
  EXPECT_TRUE(c.parallel.zero);
  EXPECT_DOUBLE_EQ(c.parallel.timeout, 2.5);
  EXPECT_EQ(c.parallel.bucket_kib, 512);
  EXPECT_EQ(c.log.every, 10);
  EXPECT_EQ(c.log.jsonl, "runs/gpt/metrics.jsonl");
  EXPECT_EQ(c.save.onnx, "runs/gpt/trained.onnx");
}

TEST(Config, DefaultsAndOtherVariants) {
  const char* text = R"(
model: {onnx: m.onnx, inputs: {x: x}, loss: {type: mse, output: pred, labels: y}}
data:
  format: synthetic
  samples: 64
  fields:
    x: {shape: [4, 2], dtype: f32}
    y: {shape: [], dtype: i64, classes: 10}
train: {steps: 5, global_batch: 6}
optimizer: {type: sgd, lr: 3, momentum: 0.5, nesterov: true}
)";
  Result<Config> r = ParseConfig(text, "min.yaml");
  ASSERT_TRUE(r.ok()) << r.status().message();
  const Config& c = *r;
  EXPECT_EQ(c.model.loss.type, LossConfig::Type::kMse);
  EXPECT_EQ(c.model.loss.output, "pred");
  EXPECT_EQ(c.data.format, DataConfig::Format::kSynthetic);
  EXPECT_EQ(c.data.order, DataConfig::Order::kSequential);
  EXPECT_EQ(c.data.samples, 64);
  ASSERT_EQ(c.data.synthetic.size(), 2u);
  EXPECT_EQ(c.data.synthetic.at("x").shape, (std::vector<int64_t>{4, 2}));
  EXPECT_EQ(c.data.synthetic.at("x").dtype, SyntheticField::DType::kF32);
  EXPECT_TRUE(c.data.synthetic.at("y").shape.empty());
  EXPECT_EQ(c.data.synthetic.at("y").dtype, SyntheticField::DType::kI64);
  EXPECT_EQ(c.data.synthetic.at("y").classes, 10);
  EXPECT_EQ(c.train.micro_batch, 6);
  EXPECT_EQ(c.train.seed, 0);
  EXPECT_EQ(c.optimizer.type, OptimizerConfig::Type::kSgd);
  EXPECT_DOUBLE_EQ(c.optimizer.lr, 3.0);
  EXPECT_DOUBLE_EQ(c.optimizer.momentum, 0.5);
  EXPECT_TRUE(c.optimizer.nesterov);
  EXPECT_DOUBLE_EQ(c.optimizer.weight_decay, 0);
  EXPECT_DOUBLE_EQ(c.optimizer.grad_clip, 0);
  EXPECT_EQ(c.schedule.type, ScheduleConfig::Type::kConstant);
  EXPECT_EQ(c.schedule.warmup, 0);
  EXPECT_EQ(c.parallel.device, DeviceType::kCpu);
  EXPECT_EQ(c.parallel.ranks, 0);
  EXPECT_TRUE(c.parallel.mesh.empty());
  EXPECT_DOUBLE_EQ(c.parallel.timeout, 60);
  EXPECT_EQ(c.parallel.bucket_kib, 128);
  EXPECT_EQ(c.log.every, 1);
  EXPECT_EQ(c.log.jsonl, "");
}

// Line numbers matter: the bad-config table below edits single lines of this file.
const char kBase[] = R"(model:
  onnx: models/mlp.onnx
  inputs: {x: x}
  loss: {type: cross_entropy, logits: logits, labels: y}
data:
  format: npy
  x: data/mlp_x.npy
  y: data/mlp_y.npy
train:
  steps: 20
  global_batch: 32
  micro_batch: 8
  seed: 0
optimizer:
  type: adamw
  lr: 1.0e-3
  betas: [0.9, 0.999]
schedule: {type: cosine, warmup: 5, min_lr: 1.0e-4}
parallel:
  mesh: [2, -1]
  sbp:
    x: [S(0)]
log: {every: 1}
)";

TEST(Config, NpyArraysBesideXAndY) {
  Result<Config> r = ParseConfig(kBase, "t.yaml", {"data.arrays={mask: data/m.npy, ids: data/i.npy}"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->data.npy, (std::map<std::string, std::string>{
                             {"x", "data/mlp_x.npy"}, {"y", "data/mlp_y.npy"}, {"mask", "data/m.npy"}, {"ids", "data/i.npy"}}));
  Result<Config> again = ParseConfig(ConfigToYaml(*r), "again.yaml");  // the YAML written back reads the same
  ASSERT_TRUE(again.ok()) << again.status().message();
  EXPECT_EQ(again->data.npy, r->data.npy);
}

TEST(Config, OverridesApply) {
  Result<Config> r = ParseConfig(kBase, "t.yaml",
                                 {"train.steps=10", "optimizer={type: sgd, lr: 0.5, momentum: 0.9}",
                                  "parallel.mesh=[2,2]", "log.jsonl=out.jsonl",
                                  "parallel.sbp.w=[B, S(1)]", "train.seed=1", "train.seed=2"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->train.steps, 10);
  EXPECT_EQ(r->train.seed, 2);  // the later override wins
  EXPECT_EQ(r->optimizer.type, OptimizerConfig::Type::kSgd);
  EXPECT_DOUBLE_EQ(r->optimizer.lr, 0.5);
  EXPECT_DOUBLE_EQ(r->optimizer.momentum, 0.9);
  EXPECT_EQ(r->parallel.mesh, (std::vector<int64_t>{2, 2}));
  EXPECT_EQ(r->log.jsonl, "out.jsonl");
  ASSERT_EQ(r->parallel.sbp.size(), 2u);
  EXPECT_EQ(r->parallel.sbp[1].first, "w");
}

// The cost model's per-element prices: read from cluster.element_seconds, written back by
// ConfigToYaml (what `flowrun search` writes) as they were.
TEST(Config, ClusterElementSecondsRoundTrip) {
  Result<Config> r = ParseConfig(kBase, "t.yaml", {"cluster.element_seconds={stream: 2.5e-10, special: 1.75e-9}"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->cluster.stream_element, 2.5e-10);
  EXPECT_DOUBLE_EQ(r->cluster.special_element, 1.75e-9);
  Result<Config> back = ParseConfig(ConfigToYaml(*r), "back.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << ConfigToYaml(*r);
  EXPECT_DOUBLE_EQ(back->cluster.stream_element, 2.5e-10);
  EXPECT_DOUBLE_EQ(back->cluster.special_element, 1.75e-9);
  // Not given: 0, and the cost model derives them from flops (sbp::Cluster).
  Result<Config> none = ParseConfig(kBase, "t.yaml", {"cluster.flops=1.0e+10"});
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->cluster.stream_element, 0);
  EXPECT_EQ(ConfigToYaml(*none).find("element_seconds"), std::string::npos);
}

TEST(Config, ClusterP2pWakeRoundTrips) {
  Result<Config> r = ParseConfig(kBase, "t.yaml", {"cluster.p2p_wake=[[2.0e-4, 1.6e-5], [9.0e-4, 9.5e-5]]"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  ASSERT_EQ(r->cluster.p2p_wake.size(), 2u);
  EXPECT_DOUBLE_EQ(r->cluster.p2p_wake[0].first, 2.0e-4);
  EXPECT_DOUBLE_EQ(r->cluster.p2p_wake[1].second, 9.5e-5);
  Result<Config> back = ParseConfig(ConfigToYaml(*r), "back.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << ConfigToYaml(*r);
  EXPECT_EQ(back->cluster.p2p_wake, r->cluster.p2p_wake);
  // Not given: one price for every message (p2p_latency), and nothing written.
  Result<Config> none = ParseConfig(kBase, "t.yaml", {"cluster.flops=1.0e+10"});
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->cluster.p2p_wake.empty());
  EXPECT_EQ(ConfigToYaml(*none).find("p2p_wake"), std::string::npos);
}

TEST(Config, ClusterSharedAllReduceRoundTrips) {
  Result<Config> r = ParseConfig(kBase, "t.yaml", {"cluster.shared_allreduce={latency: 7.5e-5, bandwidth: 5.3e+9}"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_DOUBLE_EQ(r->cluster.shared_latency, 7.5e-5);
  EXPECT_DOUBLE_EQ(r->cluster.shared_bandwidth, 5.3e9);
  Result<Config> back = ParseConfig(ConfigToYaml(*r), "back.yaml");
  ASSERT_TRUE(back.ok()) << back.status().message() << "\n" << ConfigToYaml(*r);
  EXPECT_EQ(back->cluster.shared_latency, r->cluster.shared_latency);
  EXPECT_EQ(back->cluster.shared_bandwidth, r->cluster.shared_bandwidth);
  // Not given: all-reduces priced as the other collectives, and nothing written.
  Result<Config> none = ParseConfig(kBase, "t.yaml", {"cluster.flops=1.0e+10"});
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_EQ(none->cluster.shared_latency, 0);
  EXPECT_EQ(ConfigToYaml(*none).find("shared_allreduce"), std::string::npos);
}

TEST(Config, OverrideCreatesSections) {
  std::string text = kBase;
  text = text.substr(0, text.find("schedule:"));  // no schedule, parallel or log
  Result<Config> r = ParseConfig(text, "t.yaml", {"schedule.type=linear", "parallel.zero=true"});
  ASSERT_TRUE(r.ok()) << r.status().message();
  EXPECT_EQ(r->schedule.type, ScheduleConfig::Type::kLinear);
  EXPECT_TRUE(r->parallel.zero);
}

TEST(Config, BundledConfigsParse) {
  int count = 0;
  for (const char* dir : {"configs", "tests/golden"}) {
    ASSERT_TRUE(std::filesystem::is_directory(dir)) << dir << ": run from the repository root";
    for (const auto& entry : std::filesystem::directory_iterator(dir)) {
      if (entry.path().extension() != ".yaml") continue;
      Result<Config> r = LoadConfig(entry.path().string());
      EXPECT_TRUE(r.ok()) << r.status().message();
      ++count;
    }
  }
  EXPECT_GE(count, 7);  // 3 in configs/, 4 golden runs
  Result<Config> mlp = LoadConfig("configs/mlp.yaml");
  ASSERT_TRUE(mlp.ok()) << mlp.status().message();
  EXPECT_EQ(mlp->model.onnx, "models/mlp.onnx");  // relative to the working directory, as written
  EXPECT_EQ(mlp->data.npy.at("x"), "data/mlp_x.npy");
  EXPECT_EQ(mlp->accumulation(), 2);
}

TEST(Config, MissingFile) {
  Result<Config> r = LoadConfig("no/such/config.yaml");
  ASSERT_FALSE(r.ok());
  EXPECT_EQ(r.status().message(),
            "[config] cannot read 'no/such/config.yaml': No such file or directory");
  EXPECT_EQ(r.status().exit_code(), 2);
}

struct BadCase {
  const char* line;                    // a line of kBase to replace ("" = none)
  const char* with;                    // its replacement (may span lines)
  std::vector<std::string> overrides;  // --set arguments
  const char* message;                 // a fragment the error must contain
};

const BadCase kBadCases[] = {
    // Unknown keys, with and without a suggestion.
    {"log: {every: 1}", "logg: {every: 1}", {},
     "[config] t.yaml:23:1: unknown key 'logg' at top level (did you mean 'log'?)"},
    {"  steps: 20", "  stpes: 20", {},
     "[config] t.yaml:10:3: unknown key 'stpes' in train (did you mean 'steps'?)"},
    {"  seed: 0", "  banana: 0", {},
     "t.yaml:13:3: unknown key 'banana' in train (valid keys: steps, global_batch, micro_batch, "
     "seed)"},
    {"    x: [S(0)]", "    x: [S(0)]\n  zeroo: true", {},
     "t.yaml:23:3: unknown key 'zeroo' in parallel (did you mean 'zero'?)"},
    {"  seed: 0", "  steps: 30", {}, "t.yaml:13:3: train.steps: duplicate key"},
    // Types: no coercion.
    {"  steps: 20", "  steps: \"20\"", {},
     "[config] t.yaml:10:10: train.steps: expected an integer, got string \"20\""},
    {"  global_batch: 32", "  global_batch: 32.5", {},
     "t.yaml:11:17: train.global_batch: expected an integer, got 32.5"},
    {"  steps: 20", "  steps: 99999999999999999999", {},
     "t.yaml:10:10: train.steps: expected an integer that fits in 64 bits"},
    {"  mesh: [2, -1]", "  zero: \"true\"", {},
     "t.yaml:20:9: parallel.zero: expected true or false, got string \"true\""},
    {"  mesh: [2, -1]", "  zero: yes", {},
     "t.yaml:20:9: parallel.zero: expected true or false, got string \"yes\""},
    {"  lr: 1.0e-3", "  lr: '1.0e-3'", {},
     "t.yaml:16:7: optimizer.lr: expected a number, got string \"1.0e-3\""},
    {"  x: data/mlp_x.npy", "  x: [a, b]", {},
     "t.yaml:7:6: data.x: expected a non-empty string, got a list of 2 items"},
    {"  onnx: models/mlp.onnx", "  onnx:", {},
     "t.yaml:2:3: model.onnx: expected a non-empty string, got nothing"},
    // Missing keys: located at the enclosing map.
    {"  onnx: models/mlp.onnx", "  # no onnx", {}, "[config] t.yaml:3:3: model.onnx is required"},
    {"  format: npy", "  # no format", {}, "t.yaml:7:3: data.format is required"},
    {"  loss: {type: cross_entropy, logits: logits, labels: y}", "  loss: {type: mse, labels: y}",
     {}, "t.yaml:4:9: model.loss.output is required"},
    // Impossible values.
    {"  micro_batch: 8", "  micro_batch: 5", {},
     "t.yaml:12:16: train.micro_batch: expected a divisor of train.global_batch (32), got 5"},
    {"  lr: 1.0e-3", "  lr: -1.0e-3", {},
     "t.yaml:16:7: optimizer.lr: expected a number > 0, got -1.0e-3"},
    {"  betas: [0.9, 0.999]", "  betas: [0.9, 1.0]", {},
     "t.yaml:17:16: optimizer.betas[1]: expected a number in [0, 1), got 1.0"},
    {"  betas: [0.9, 0.999]", "  betas: [0.9]", {},
     "t.yaml:17:10: optimizer.betas: expected a list of 2 numbers [beta1, beta2], got a list of 1 "
     "item"},
    {"  mesh: [2, -1]", "  mesh: [-1, -1]", {},
     "t.yaml:20:14: parallel.mesh[1]: at most one entry may be -1, and parallel.mesh[0] is -1"},
    {"  mesh: [2, -1]", "  mesh: [2, 0]", {},
     "t.yaml:20:13: parallel.mesh[1]: expected an integer in [1, 1048576], or -1 (inferred), got 0"},
    // Counts past what MPI's int holds were truncated (2^32 + 1 ranks ran as 1).
    {"  mesh: [2, -1]", "  mesh: [2, 4294967297]", {},
     "t.yaml:20:13: parallel.mesh[1]: expected an integer in [1, 1048576], or -1 (inferred), got 4294967297"},
    {"", "", {"parallel.ranks=4294967297"},
     "--set parallel.ranks=4294967297: parallel.ranks: expected an integer in [1, 1048576] (or 0 = the world size), got 4294967297"},
    {"", "", {"parallel.bucket_kib=0"}, "--set parallel.bucket_kib=0: parallel.bucket_kib: expected an integer in [1, 1048576] (KiB), got 0"},
    {"schedule: {type: cosine, warmup: 5, min_lr: 1.0e-4}",
     "schedule: {type: cosine, warmup: -1, min_lr: 1.0e-4}", {},
     "t.yaml:18:34: schedule.warmup: expected an integer >= 0, got -1"},
    {"schedule: {type: cosine, warmup: 5, min_lr: 1.0e-4}",
     "schedule: {type: cosine, warmup: 5, min_lr: 1.0e-2}", {},
     "t.yaml:18:45: schedule.min_lr: expected a number in [0, optimizer.lr = 0.001], got 1.0e-2"},
    // Keys that belong to another variant.
    {"  betas: [0.9, 0.999]", "  momentum: 0.9", {},
     "t.yaml:17:3: optimizer.momentum: key 'momentum' is only valid with type: sgd, not adamw"},
    {"  y: data/mlp_y.npy", "  y: data/mlp_y.npy\n  seq_len: 4", {},
     "t.yaml:9:3: data.seq_len: key 'seq_len' is only valid with format: tokens, not npy"},
    {"  loss: {type: cross_entropy, logits: logits, labels: y}",
     "  loss: {type: mse, logits: logits, labels: y}", {},
     "t.yaml:4:21: model.loss.logits: key 'logits' is only valid with type: cross_entropy, not "
     "mse"},
    // Enums and SBP strings.
    {"  type: adamw", "  type: adam", {},
     "t.yaml:15:9: optimizer.type: expected one of sgd, adamw, got string \"adam\""},
    {"  format: npy", "  format: csv", {},
     "t.yaml:6:11: data.format: expected one of tokens, npy, synthetic, got string \"csv\""},
    {"    x: [S(0)]", "    x: [S(0), S(-1)]", {},
     "t.yaml:22:15: parallel.sbp.x[1]: expected an SBP: S(n) with n >= 0, B, P, P(max) or P(min), "
     "got string \"S(-1)\""},
    {"    x: [S(0)]", "    \"/a.b/c:1\": [P(sum)]", {},
     "t.yaml:22:18: parallel.sbp[\"/a.b/c:1\"][0]: expected an SBP"},
    // YAML syntax and document shape.
    {"  betas: [0.9, 0.999]", "  betas: [0.9, 0.999", {},
     "[config] t.yaml:18:9: end of sequence flow not found"},
    {"  format: npy", "  format: npy\n   bad: 1", {}, "[config] t.yaml:7:"},
    // Overrides.
    {"", "", {"train.stpes=10"},
     "[config] --set train.stpes=10: unknown key 'stpes' in train (did you mean 'steps'?)"},
    {"", "", {"trian.steps=10"},
     "[config] --set trian.steps=10: unknown key 'trian' at top level (did you mean 'train'?)"},
    {"", "", {"train.steps"}, "[config] --set train.steps: expected KEY.PATH=VALUE"},
    {"", "", {"=10"}, "[config] --set =10: empty key path, expected KEY.PATH=VALUE"},
    {"", "", {"train..steps=10"}, "[config] --set train..steps=10: empty key in 'train..steps'"},
    {"", "", {"train.steps=[1"}, "[config] --set train.steps=[1: the value is not valid YAML"},
    {"", "", {"train.steps.x=1"},
     "[config] --set train.steps.x=1: train.steps is not a map, so it has no key 'x'"},
    {"", "", {"train.steps=\"10\""},
     "[config] --set train.steps=\"10\": train.steps: expected an integer, got string \"10\""},
    {"", "", {"train.steps=1.5"},
     "[config] --set train.steps=1.5: train.steps: expected an integer, got 1.5"},
    {"", "", {"optimizer.lr=-1"},
     "[config] --set optimizer.lr=-1: optimizer.lr: expected a number > 0, got -1"},
    {"", "", {"parallel.mesh=[-1, 2, -1]"},
     "[config] --set parallel.mesh=[-1, 2, -1]: parallel.mesh[2]: at most one entry may be -1"},
    {"", "", {"optimizer={type: sgd, lr: 0.1, nesterov: true}"},
     "[config] --set optimizer={type: sgd, lr: 0.1, nesterov: true}: optimizer.nesterov: needs "
     "optimizer.momentum > 0"},
    {"",
     "",
     {"data={format: synthetic, samples: 4, fields: {x: {shape: [], dtype: f32, classes: 3}}}"},
     "data.fields.x.classes: key 'classes' is only valid with dtype: i64, not f32"},
    {"", "", {"data={format: synthetic, samples: 4, fields: {y: {shape: [], dtype: i64}}}"},
     "data.fields.y.classes is required"},
    {"", "", {"data={format: synthetic, samples: 4, fields: {}}"},
     "data.fields: expected a non-empty map of field name -> {shape, dtype}, got an empty map"},
    // cluster.element_seconds: both classes, each > 0.
    {"", "", {"cluster.element_seconds={stream: 2.0e-10}"},
     "[config] --set cluster.element_seconds={stream: 2.0e-10}: cluster.element_seconds.special is required"},
    {"", "", {"cluster.element_seconds={stream: 0, special: 1.0e-9}"},
     "cluster.element_seconds.stream: expected seconds per element > 0, got 0"},
    {"", "", {"cluster.element_seconds={stream: 2.0e-10, special: 1.0e-9, exp: 1}"},
     "unknown key 'exp' in cluster.element_seconds"},
    // cluster.p2p_wake: [wait, latency] pairs, >= 0, the waits increasing.
    {"", "", {"cluster.p2p_wake=[[9.0e-4, 9.5e-5], [2.0e-4, 1.6e-5]]"},
     "cluster.p2p_wake[1]: expected a list of [wait, latency] pairs in seconds, >= 0, the waits increasing"},
    {"", "", {"cluster.p2p_wake=[[2.0e-4, 1.6e-5, 3]]"}, "cluster.p2p_wake[0]: expected a list of [wait, latency] pairs"},
    {"", "", {"cluster.p2p_wake=[[2.0e-4, -1.0e-5]]"}, "cluster.p2p_wake[0]: expected a list of [wait, latency] pairs"},
    {"", "", {"cluster.p2p_wake=2.0e-4"}, "cluster.p2p_wake"},
    // cluster.shared_allreduce: both figures, each > 0.
    {"", "", {"cluster.shared_allreduce={latency: 7.5e-5}"}, "cluster.shared_allreduce.bandwidth is required"},
    {"", "", {"cluster.shared_allreduce={latency: 0, bandwidth: 5.3e+9}"},
     "cluster.shared_allreduce.latency: expected seconds per all-reduce > 0, got 0"},
    {"", "", {"cluster.shared_allreduce={latency: 7.5e-5, bandwidth: 5.3e+9, rounds: 1}"},
     "unknown key 'rounds' in cluster.shared_allreduce"},
    // data.arrays: more npy fields, none named twice.
    {"", "", {"data.arrays={x: other.npy}"}, "data.arrays.x: expected a field other than data.x"},
    {"", "", {"data.arrays={}"}, "data.arrays: expected a map of field names to .npy files"},
    {"  y: data/mlp_y.npy", "  y: data/mlp_y.npy\n  arrays: [a.npy]", {}, "data.arrays: expected a map"},
    // model.trainable / model.frozen: non-empty lists of globs.
    {"", "", {"model.trainable=[]"}, "model.trainable: expected a non-empty list of initializer-name globs"},
    {"", "", {"model.frozen=w"}, "model.frozen: expected a list"},
    // An override that fixes the file's value is not blamed for a later, unrelated error.
    {"  micro_batch: 8", "  micro_batch: 5", {"train.steps=10"},
     "[config] t.yaml:12:16: train.micro_batch: expected a divisor"},
};

TEST(Config, BadConfigs) {
  for (const BadCase& c : kBadCases) {
    std::string text = kBase;
    if (*c.line) {
      size_t at = text.find(std::string(c.line) + "\n");
      ASSERT_NE(at, std::string::npos) << "not in kBase: " << c.line;
      text.replace(at, std::string(c.line).size(), c.with);
    }
    Result<Config> r = ParseConfig(text, "t.yaml", c.overrides);
    ASSERT_FALSE(r.ok()) << "accepted: " << c.with << " " << testing::PrintToString(c.overrides);
    EXPECT_EQ(r.status().code(), Code::kInvalidInput);
    EXPECT_EQ(r.status().message().rfind("[config] ", 0), 0u) << r.status().message();
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << "  message: " << r.status().message() << "\n  wanted:  " << c.message;
  }
}

TEST(Config, BadDocuments) {
  struct Case {
    const char* text;
    const char* message;
  } cases[] = {
      {"- a\n- b\n",
       "[config] t.yaml:1:1: the document: expected a map of sections (model, data, train, "
       "optimizer, ...), got a list"},
      {"", "[config] t.yaml: model is required"},
      {"model: {}\n---\ndata: {}\n", "[config] t.yaml:3:1: expected one YAML document, found 2"},
      {"model: [a: 1\n", "[config] t.yaml:2:1:"},
      // yaml-cpp's LoadAll never returned on these.
      {",", "[config] t.yaml:1:1: cannot read YAML here"},
      {",avgn", "[config] t.yaml:1:1: cannot read YAML here"},
  };
  for (const Case& c : cases) {
    Result<Config> r = ParseConfig(c.text, "t.yaml");
    ASSERT_FALSE(r.ok()) << c.text;
    EXPECT_NE(r.status().message().find(c.message), std::string::npos)
        << "  message: " << r.status().message() << "\n  wanted:  " << c.message;
  }
}

// Duplicate keys are found in linear time: 100k keys took minutes, checked pairwise.
// Machine speed cancels out of the ratio of two sizes' times: 4x the keys take about 4x as long
// when linear, 16x when pairwise. The best of two runs of each keeps out a busy machine's noise.
TEST(Config, ManyKeysReadInLinearTime) {
  auto best_seconds = [](int keys) {
    std::string text;
    for (int i = 0; i < keys; ++i) text += "k" + std::to_string(i) + ": 1\n";
    double best = 1e9;
    for (int run = 0; run < 2; ++run) {
      const auto start = std::chrono::steady_clock::now();
      Result<Config> r = ParseConfig(text, "t.yaml");
      best = std::min(best, std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
      EXPECT_FALSE(r.ok());
      EXPECT_NE(r.status().message().find("unknown key 'k0' at top level"), std::string::npos) << r.status().message();
    }
    return best;
  };
  const double small = best_seconds(10000), large = best_seconds(40000);
  EXPECT_LT(large / small, 8.0) << "10k keys: " << small << " s, 40k keys: " << large << " s";
}

}  // namespace
}  // namespace fr
