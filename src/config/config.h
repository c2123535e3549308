// Config: the typed, validated contents of a flowrun YAML file (schema: DESIGN.md section 5, "The
// config").
//
// LoadConfig reads the file, applies `--set key.path=value` overrides, and validates everything
// before returning: unknown keys at any depth, duplicate keys, wrong types (no coercion: "10" is
// not an integer, 1.5 is not an integer, "true" is not a bool), missing required keys and
// impossible values are errors. Every error is a Status::Invalid (exit code 2) whose message
// starts with "[config] ", then "FILE:LINE:COL: " (1-based, at the offending key or value; at the
// enclosing map for a missing key) or "--set KEY=VALUE: " when an override wrote the offending
// value, then the dotted key path and what was expected, e.g.
//   [config] configs/mlp.yaml:14:3: train.steps: expected an integer, got string "10"
//   [config] configs/mlp.yaml:14:3: unknown key 'stpes' in train (did you mean 'steps'?)
// Relative paths (model.onnx, data files, log.jsonl) are kept as written: they are relative to the
// working directory, and flowrun runs from the repository root. Nothing checks that files exist;
// whoever opens a file reports it missing.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/dtype.h"
#include "base/status.h"

namespace fr {

struct LossConfig {
  enum class Type { kCrossEntropy, kMse } type = Type::kCrossEntropy;
  std::string output;  // the ONNX graph output the loss reads (`logits:` or `output:` in YAML)
  std::string labels;  // the data field holding labels / targets
  int64_t ignore_index = -100;  // cross_entropy: labels of this value are left out (PyTorch's default)
};

struct ModelConfig {
  std::string onnx;                           // path as written
  std::map<std::string, std::string> inputs;  // ONNX graph input -> data field
  LossConfig loss;
  // Globs over float initializer names overriding import's rule of what trains (ir/onnx_import.h).
  std::vector<std::string> trainable, frozen;
  std::vector<std::string> untie;  // initializer globs: transposed copies of a table kept separate
  std::vector<std::string> tie;    // initializer globs: merged initializers kept one parameter
  bool dropout = true;              // false: the model's Dropout nodes are the identity
};

struct SyntheticField {
  std::vector<int64_t> shape;  // per sample
  enum class DType { kF32, kI64 } dtype = DType::kF32;
  int64_t classes = 0;         // for i64 fields: values in [0, classes)
};

struct DataConfig {
  enum class Format { kTokens, kNpy, kSynthetic } format = Format::kNpy;
  enum class Order { kSequential, kShuffle } order = Order::kSequential;
  // tokens
  std::string train;    // path of the uint16 token file, as written
  int64_t seq_len = 0;
  // npy: field name -> path as written (keys `x`, `y` and the map `arrays` in YAML)
  std::map<std::string, std::string> npy;
  // synthetic
  std::map<std::string, SyntheticField> synthetic;
  int64_t samples = 0;  // synthetic: number of distinct samples
};

struct TrainConfig {
  int64_t steps = 0;
  int64_t global_batch = 0;
  int64_t micro_batch = 0;  // defaults to global_batch
  int64_t seed = 0;
};

struct OptimizerConfig {
  enum class Type { kSgd, kAdamW } type = Type::kSgd;
  double lr = 0;
  double momentum = 0;         // sgd
  bool nesterov = false;       // sgd
  double beta1 = 0.9, beta2 = 0.999, eps = 1e-8;  // adamw
  double weight_decay = 0;     // sgd: L2 added to the gradient; adamw: decoupled
  double grad_clip = 0;        // 0 = off; else max global L2 norm
};

struct ScheduleConfig {
  enum class Type { kConstant, kLinear, kCosine } type = Type::kConstant;
  int64_t warmup = 0;
  double min_lr = 0;
};

// The most ranks a job, a stage or a mesh axis may have; larger counts are config errors (they
// would not fit the int that MPI counts ranks in).
inline constexpr int64_t kMaxRanks = int64_t{1} << 20;

struct ParallelConfig {
  // cpu; cuda, a GPU per rank; sim, a simulated second device in host memory with the CPU's
  // kernels, which runs the device path (copies between host and device as tasks) without a GPU.
  DeviceType device = DeviceType::kCpu;
  bool tf32 = false;                    // float32 GEMMs on CUDA may use TF32 tensor cores
  int64_t ranks = 0;                    // 0 = the world size
  std::vector<int64_t> mesh;            // empty = [ranks]
  std::vector<std::vector<std::string>> stages;
  std::vector<std::pair<std::string, std::vector<std::string>>> sbp;  // glob -> nd-SBP, file order
  bool zero = false;
  double timeout = 60;                  // seconds
  int64_t bucket_kib = 128;             // gradient (and ZeRO parameter) buckets, KiB per device
};

// The machine `flowrun search` and the cost model price (DESIGN.md §4), per device. `flowrun env`
// measures this machine and prints the section. Without it the cost model uses its defaults.
struct ClusterConfig {
  bool given = false;                 // the config has a cluster: section
  int64_t nodes = 1;
  int64_t devices_per_node = 0;       // 0 = all ranks on one node
  double memory_gib = 16;             // per device
  double flops = 5e10;                // per device (rank), dense f32 GEMM FLOP/s
  double bandwidth_intra = 4e9, bandwidth_inter = 4e9;  // bytes/s per rank
  double latency_intra = 5e-6, latency_inter = 5e-6;    // seconds per collective round (ceil(log2 p) for p ranks)
  double p2p_latency = 0;             // seconds per point-to-point message within a node; 0 = latency.intra
  // [wait, latency] points: a point-to-point message's latency by how long its receiver had waited
  // (sbp::Cluster::p2p_wake); `flowrun env` measures two. Empty: p2p_latency for every message.
  std::vector<std::pair<double, double>> p2p_wake;
  // shared_allreduce: {latency, bandwidth} of a float32 sum all-reduce through shared memory
  // within a node (sbp::Cluster::shared_latency); 0 = not given.
  double shared_latency = 0, shared_bandwidth = 0;
  double op_overhead = 0;             // seconds per op run on a rank, besides its kernel
  // element_seconds: {stream, special}, seconds per element read and written by ops that are not
  // matrix products, per rank, all ranks at once (sbp::Cluster says which ops are which); 0 = not
  // given.
  double stream_element = 0, special_element = 0;
  // Ranks that share a node's cores (CPU ranks, more than cores): `flops` was measured with every
  // rank busy, and a rank computing while others wait gets more. Element b-1 is how much faster
  // each of b busy ranks computes than when all devices_per_node are (the last is 1); `flowrun env`
  // measures it. Empty: a device per rank, no sharing.
  std::vector<double> busy_speedup;
  std::string measured;               // free text: how the figures were obtained
};

struct LogConfig {
  int64_t every = 1;
  std::string jsonl;  // path as written; empty = none
};

// Where the trained model goes: a copy of model.onnx with the trained parameters as its
// initializers, written by rank 0 when training ends.
struct SaveConfig {
  std::string onnx;  // path as written; empty = not saved
};

// Checkpoints of the whole training state (driver/checkpoint.h): every `every` steps (0: only at
// the end) and at the end, into DIR/step-NNNNNNNN, keeping the newest `keep` (0: all).
struct CheckpointConfig {
  std::string dir;        // empty = no checkpoints
  int64_t every = 0;
  int64_t keep = 0;
  double timeout = 300;   // seconds a checkpoint may take to commit on every rank
};

// Evaluation on held-out data (the `eval:` section): the mean loss over `steps` batches of
// train.global_batch, forward only, every `every` steps (0: only at the end) and at the end. The
// batches are those of `data` (a token file, data.format tokens) or the last `split` of data.train's
// samples, which training then leaves out; the same batches every time, in order.
struct EvalConfig {
  bool given = false;
  int64_t every = 0;
  int64_t steps = 1;
  std::string data;  // path as written; empty: split
  double split = 0;  // (0, 1): the held-out fraction of data.train
};

struct Config {
  std::string path;  // the file it came from
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  ParallelConfig parallel;
  ClusterConfig cluster;
  LogConfig log;
  SaveConfig save;
  CheckpointConfig checkpoint;
  EvalConfig eval;

  int64_t accumulation() const { return train.global_batch / train.micro_batch; }
};

// Loads, overrides and validates. `overrides` are "key.path=value" strings, applied in order (a
// later one wins); the value is parsed as YAML, so `--set train.steps=10` gives an integer,
// `--set optimizer.type=sgd` a string and `--set parallel.mesh=[2,2]` a list. Missing maps on the
// path are created. A string without '=' or with an empty key is an error. An unreadable file gives
// "[config] cannot read 'PATH': REASON".
Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// The config as YAML that LoadConfig reads back to the same Config (every key written; numbers
// round-trip exactly). `flowrun search` writes its best candidate with it.
std::string ConfigToYaml(const Config& c);

// The same, from YAML text (for tests); `path` is used in messages only.
Result<Config> ParseConfig(const std::string& yaml_text, const std::string& path,
                           const std::vector<std::string>& overrides = {});

}  // namespace fr
