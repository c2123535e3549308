// Datasets and the loader that turns them into micro-batches (DESIGN.md §5, "The config").
//
// A Dataset has named fields, each with a per-sample dtype and shape, and W samples:
//   npy:       fields x and y, from two .npy files with the same first dim (W = rows)
//   tokens:    fields tokens and targets, windows of seq_len over a uint16 file (W = full windows)
//   synthetic: the fields its config names, generated from the seed (W = samples)
//
// The Loader implements the sequential order rule: at step s, sample b of the global batch is
// window w = (s * global_batch + b) mod W; micro-batch m is samples [m * mb, (m + 1) * mb). With
// order: shuffle, position p = s * global_batch + b reads a seeded permutation of epoch p / W.
#pragma once

#include <map>
#include <memory>
#include <optional>
#include <utility>
#include <string>
#include <vector>

#include "actor/runtime.h"
#include "base/status.h"
#include "base/tensor.h"
#include "config/config.h"

namespace fr::data {

struct Field {
  DType dtype = DType::kF32;
  Shape sample;  // per-sample shape
};

class Dataset {
 public:
  virtual ~Dataset() = default;
  const std::map<std::string, Field>& fields() const { return fields_; }
  int64_t size() const { return size_; }
  // Copies sample w (< size()) of `field` to dst, which has room for one sample.
  virtual void CopySample(const std::string& field, int64_t w, void* dst) const = 0;
  // [lo, hi) holding every value of integer field `field` where the dataset knows it without
  // reading the samples (synthetic classes); checks then need not visit each of size() samples.
  virtual std::optional<std::pair<int64_t, int64_t>> KnownRange(const std::string&) const { return std::nullopt; }

 protected:
  std::map<std::string, Field> fields_;
  int64_t size_ = 0;
};

// Errors start with "[data]" and name the config key and file.
Result<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& cfg, int64_t seed);

// A .npy array: float32 or int64, C order, little-endian, with its raw data.
struct NpyArray {
  DType dtype = DType::kF32;
  std::vector<int64_t> shape;
  std::string data;
};
// Parses a whole .npy file's bytes; `key` and `path` name it in errors.
Result<NpyArray> ParseNpy(const std::string& bytes, const std::string& key, const std::string& path);

// The tokens dataset over a uint16 little-endian file's bytes (config key `key`: data.train,
// eval.data), windows of seq_len.
Result<std::unique_ptr<Dataset>> TokensFromBytes(const std::string& bytes, int64_t seq_len, const std::string& path,
                                                 const std::string& key = "data.train");

// The held-out data of an `eval:` section, and the training data without it: eval.data's windows
// (the training data stays whole), or the last eval.split of the training samples, which
// `*train` then no longer holds. Errors "[data] eval...." for a split that leaves either side empty.
Status SplitForEval(const Config& cfg, std::unique_ptr<Dataset>* train, std::unique_ptr<Dataset>* eval);

class Loader : public actor::Feeder {
 public:
  // `input_field`: graph input name -> dataset field.
  Loader(const Dataset& ds, std::map<std::string, std::string> input_field, const DataConfig& cfg,
         const TrainConfig& train);
  Status Fill(const std::string& input, int64_t step, int64_t micro, const Tensor& out) override;
  // The dataset sample read at position b of step s.
  int64_t SampleIndex(int64_t step, int64_t b) const;

 private:
  const Dataset& ds_;
  std::map<std::string, std::string> input_field_;
  bool shuffle_;
  int64_t global_batch_, micro_batch_, seed_;
  mutable std::map<int64_t, std::vector<int64_t>> perms_;  // shuffle: permutation per epoch
};

}  // namespace fr::data
