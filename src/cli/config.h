// Config: the typed, validated contents of a flowrun YAML file (schema in README.md, "Config").
//
// LoadConfig reads the file, applies `--set key.path=value` overrides, and validates everything
// before returning: unknown keys at any depth, wrong types (no coercion: "10" is not an integer),
// missing required keys and impossible values are errors. Every error starts with "[config] ",
// names the file with line and column (or the --set override), says what was expected, and for an
// unknown key suggests the nearest valid one. Relative paths in the file are resolved against the
// directory of the config file, so a config runs from any working directory.
#pragma once

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <vector>

#include "base/status.h"

namespace fr {

struct LossConfig {
  enum class Type { kCrossEntropy, kMse } type = Type::kCrossEntropy;
  std::string output;  // the ONNX graph output the loss reads (`logits:` or `output:` in YAML)
  std::string labels;  // the data field holding labels / targets
};

struct ModelConfig {
  std::string onnx;                           // resolved path
  std::map<std::string, std::string> inputs;  // ONNX graph input -> data field
  LossConfig loss;
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
  std::string train;    // resolved path of the uint16 token file
  int64_t seq_len = 0;
  // npy: field name -> resolved path (keys `x` and `y` in YAML)
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

struct ParallelConfig {
  enum class Device { kCpu, kCuda } device = Device::kCpu;
  int64_t ranks = 0;                    // 0 = the world size
  std::vector<int64_t> mesh;            // empty = [ranks]
  std::vector<std::vector<std::string>> stages;
  std::vector<std::pair<std::string, std::vector<std::string>>> sbp;  // hint glob -> nd-SBP strings
  bool zero = false;
  double timeout = 60;                  // seconds
};

struct LogConfig {
  int64_t every = 1;
  std::string jsonl;  // resolved path; empty = none
};

struct Config {
  std::string path;  // the file it came from
  ModelConfig model;
  DataConfig data;
  TrainConfig train;
  OptimizerConfig optimizer;
  ScheduleConfig schedule;
  ParallelConfig parallel;
  LogConfig log;

  int64_t accumulation() const { return train.global_batch / train.micro_batch; }
};

// Loads, overrides and validates. `overrides` are "key.path=value" strings; the value is parsed
// as YAML, so `--set train.steps=10` gives an integer and `--set optimizer.type=sgd` a string.
Result<Config> LoadConfig(const std::string& path, const std::vector<std::string>& overrides = {});

// The same, from YAML text (for tests); `path` is used in messages and to resolve relative paths.
Result<Config> ParseConfig(const std::string& yaml_text, const std::string& path,
                           const std::vector<std::string>& overrides = {});

}  // namespace fr
