#include "data/dataset.h"

#include <algorithm>
#include <charconv>
#include <cmath>
#include <cstdint>
#include <cstring>
#include <numeric>
#include <string_view>

#include "base/file.h"
#include "base/hash.h"
#include "base/process.h"

namespace fr::data {
namespace {


Result<std::string> ReadAll(const std::string& key, const std::string& path) {
  auto bytes = ReadWholeFile(path);
  if (!bytes.ok()) return bytes.status().With("[data] " + key + ": ");
  return bytes;
}

// The header of a .npy file is a Python dict literal, e.g.
//   {'descr': '<f4', 'fortran_order': False, 'shape': (4096, 64), }
// read strictly: exactly the keys descr, fortran_order and shape, each once, with values of their
// type, and nothing after the closing brace but padding. A lenient reader takes the first of two
// 'descr' keys where numpy takes the last, and reads Fortran-ordered data in the wrong order.
class NpyHeader {
 public:
  explicit NpyHeader(std::string_view text) : s_(text) {}

  // Empty on success, else why the header is not one.
  std::string Parse(std::string* descr, bool* fortran, std::vector<int64_t>* shape) {
    Skip();
    if (!Eat('{')) return "header is not a dict";
    std::map<std::string, bool> seen;
    for (;;) {
      Skip();
      if (Eat('}')) break;
      std::string key;
      if (!Quoted(&key)) return "header key is not a quoted string";
      if (seen[key]) return "header repeats the key '" + key + "'";
      seen[key] = true;
      Skip();
      if (!Eat(':')) return "header has no ':' after '" + key + "'";
      Skip();
      if (key == "descr") {
        if (!Quoted(descr)) return "header descr is not a string";
      } else if (key == "fortran_order") {
        if (Word("True")) *fortran = true;
        else if (Word("False")) *fortran = false;
        else return "header fortran_order is not True or False";
      } else if (key == "shape") {
        const size_t at = i_;
        if (!Tuple(shape)) {
          const size_t close = s_.find(')', at);
          const std::string text(s_.substr(at, close == std::string_view::npos ? 40 : close + 1 - at));
          return "header shape " + text + " is not a tuple of integers that fit in 64 bits";
        }
      } else {
        return "header has the unknown key '" + key + "'";
      }
      Skip();
      if (Eat(',')) continue;
      Skip();
      if (Eat('}')) break;
      return "header has no ',' or '}' after '" + key + "'";
    }
    for (const char* k : {"descr", "fortran_order", "shape"})
      if (!seen.count(k)) return std::string("header has no ") + k;
    Skip();
    if (i_ != s_.size()) return "header has bytes after its dict";
    return "";
  }

 private:
  void Skip() {
    while (i_ < s_.size() && (s_[i_] == ' ' || s_[i_] == '\t' || s_[i_] == '\n' || s_[i_] == '\r')) ++i_;
  }
  bool Eat(char c) {
    if (i_ < s_.size() && s_[i_] == c) return ++i_, true;
    return false;
  }
  bool Word(std::string_view w) {
    if (s_.substr(i_, w.size()) != w) return false;
    i_ += w.size();
    return true;
  }
  bool Quoted(std::string* out) {
    if (i_ >= s_.size() || (s_[i_] != '\'' && s_[i_] != '"')) return false;
    const char q = s_[i_];
    const size_t end = s_.find(q, i_ + 1);
    if (end == std::string_view::npos) return false;
    *out = std::string(s_.substr(i_ + 1, end - i_ - 1));
    if (out->find('\\') != std::string::npos) return false;  // escapes: no valid key or descr has one
    i_ = end + 1;
    return true;
  }
  // "(4096, 64)", "(4096,)" or "()".
  bool Tuple(std::vector<int64_t>* dims) {
    if (!Eat('(')) return false;
    for (;;) {
      Skip();
      if (Eat(')')) return true;  // "()" or after a comma
      int64_t d = 0;
      const char* b = s_.data() + i_;
      auto [p, ec] = std::from_chars(b, s_.data() + s_.size(), d);
      if (ec != std::errc() || p == b || *b == '-' || *b == '+') return false;
      i_ += static_cast<size_t>(p - b);
      dims->push_back(d);
      Skip();
      if (Eat(')')) return dims->size() > 1;  // "(4)" is the number 4 in Python, not a tuple
      if (!Eat(',')) return false;
    }
  }

  std::string_view s_;
  size_t i_ = 0;
};

}  // namespace

Result<NpyArray> ParseNpy(const std::string& bytes, const std::string& key, const std::string& path) {
  auto bad = [&](const std::string& why) { return Status::Invalid("[data] " + key + ": '" + path + "': " + why); };
  if (bytes.size() < 10 || bytes.compare(0, 6, "\x93NUMPY") != 0) return bad("not a .npy file");
  const auto byte = [&](size_t i) { return static_cast<size_t>(static_cast<uint8_t>(bytes[i])); };
  const size_t major = byte(6);
  size_t hlen = 0, hstart = 0;
  if (major == 1) {
    hlen = byte(8) | byte(9) << 8;
    hstart = 10;
  } else if (major == 2 || major == 3) {
    if (bytes.size() < 12) return bad("truncated header");
    hlen = byte(8) | byte(9) << 8 | byte(10) << 16 | byte(11) << 24;
    hstart = 12;
  } else {
    return bad("unsupported .npy version " + std::to_string(major));
  }
  if (bytes.size() - hstart < hlen) return bad("truncated header");
  NpyArray out;
  std::string descr;
  bool fortran = false;
  std::string why = NpyHeader(std::string_view(bytes).substr(hstart, hlen)).Parse(&descr, &fortran, &out.shape);
  if (!why.empty()) return bad(why);
  if (descr == "<f4") out.dtype = DType::kF32;
  else if (descr == "<i8") out.dtype = DType::kI64;
  else return bad("dtype '" + descr + "' is not supported (float32 '<f4' or int64 '<i8')");
  if (fortran) return bad("Fortran order is not supported; save with np.ascontiguousarray");
  if (out.shape.empty()) return bad("a 0-d array has no samples");
  RETURN_IF_ERROR(CheckDims(out.shape).With("[data] " + key + ": '" + path + "': "));
  const auto want = static_cast<size_t>(Shape(out.shape).numel()) * SizeOf(out.dtype);
  if (bytes.size() - hstart - hlen != want) {
    return bad("holds " + std::to_string(bytes.size() - hstart - hlen) + " data bytes, shape " +
               Shape(out.shape).ToString() + " needs " + std::to_string(want));
  }
  out.data = bytes.substr(hstart + hlen);
  return out;
}

namespace {

class NpyDataset : public Dataset {
 public:
  Status Open(const DataConfig& cfg) {
    std::string first;  // "data.x: 'PATH'", the array the others must match
    for (const auto& [name, path] : cfg.npy) {
      ASSIGN_OR_RETURN(std::string bytes, ReadAll("data." + name, path));
      ASSIGN_OR_RETURN(NpyArray a, ParseNpy(bytes, "data." + name, path));
      Field f;
      f.dtype = a.dtype;
      f.sample = Shape(std::vector<int64_t>(a.shape.begin() + 1, a.shape.end()));
      const std::string source = "data." + name + ": '" + path + "'";
      if (!arrays_.empty() && a.shape[0] != size_) {
        return Status::Invalid("[data] " + source + " has " + std::to_string(a.shape[0]) + " rows but " + first +
                               " has " + std::to_string(size_));
      }
      if (a.shape[0] == 0) return Status::Invalid("[data] " + source + " has no rows");
      if (first.empty()) first = source;
      size_ = a.shape[0];
      fields_[name] = f;
      arrays_[name] = std::move(a.data);
    }
    return Status::Ok();
  }
  void CopySample(const std::string& field, int64_t w, void* dst) const override {
    const Field& f = fields_.at(field);
    size_t n = static_cast<size_t>(f.sample.numel()) * SizeOf(f.dtype);
    std::memcpy(dst, arrays_.at(field).data() + static_cast<size_t>(w) * n, n);
  }

 private:
  std::map<std::string, std::string> arrays_;
};

class TokenDataset : public Dataset {
 public:
  Status Open(const std::string& bytes, int64_t seq_len, const std::string& path, const std::string& key) {
    const std::string what = "[data] " + key + ": '" + path + "'";
    if (seq_len < 1) return Status::Invalid(what + ": seq_len must be at least 1");
    if (bytes.size() % 2) return Status::Invalid(what + " has an odd byte count; expected uint16 tokens");
    tokens_.resize(bytes.size() / 2);
    for (size_t i = 0; i < tokens_.size(); ++i)
      tokens_[i] = static_cast<uint16_t>(static_cast<uint8_t>(bytes[2 * i]) | static_cast<uint8_t>(bytes[2 * i + 1]) << 8);
    seq_ = seq_len;
    size_ = tokens_.size() > 0 ? static_cast<int64_t>(tokens_.size() - 1) / seq_ : 0;
    if (size_ == 0) {
      return Status::Invalid(what + " has " + std::to_string(tokens_.size()) +
                             " tokens, fewer than one window of seq_len + 1 = " + std::to_string(static_cast<uint64_t>(seq_) + 1));
    }
    fields_["tokens"] = Field{DType::kI64, Shape{seq_}};
    fields_["targets"] = Field{DType::kI64, Shape{seq_}};
    return Status::Ok();
  }
  void CopySample(const std::string& field, int64_t w, void* dst) const override {
    auto* out = static_cast<int64_t*>(dst);
    size_t start = static_cast<size_t>(w * seq_) + (field == "targets" ? 1 : 0);
    for (int64_t i = 0; i < seq_; ++i) out[i] = tokens_[start + static_cast<size_t>(i)];
  }

 private:
  std::vector<uint16_t> tokens_;
  int64_t seq_ = 0;
};

class SyntheticDataset : public Dataset {
 public:
  Status Open(const DataConfig& cfg, int64_t seed) {
    seed_ = static_cast<uint64_t>(seed);
    size_ = cfg.samples;
    int idx = 0;
    for (const auto& [name, f] : cfg.synthetic) {
      fields_[name] = Field{f.dtype == SyntheticField::DType::kF32 ? DType::kF32 : DType::kI64, Shape(f.shape)};
      classes_[name] = f.classes;
      index_[name] = idx++;
    }
    return Status::Ok();
  }
  void CopySample(const std::string& field, int64_t w, void* dst) const override {
    const Field& f = fields_.at(field);
    uint64_t base = SplitMix64(seed_ ^ SplitMix64(static_cast<uint64_t>(index_.at(field)) * 1000003ull + static_cast<uint64_t>(w)));
    for (int64_t i = 0; i < f.sample.numel(); ++i) {
      uint64_t r = SplitMix64(base + static_cast<uint64_t>(i));
      if (f.dtype == DType::kI64) {
        static_cast<int64_t*>(dst)[i] = static_cast<int64_t>(r % static_cast<uint64_t>(classes_.at(field)));
      } else {  // standard normal by Box-Muller
        double u1 = (static_cast<double>(r >> 11) + 1.0) / 9007199254740993.0;
        double u2 = static_cast<double>(SplitMix64(r) >> 11) / 9007199254740992.0;
        static_cast<float*>(dst)[i] = static_cast<float>(std::sqrt(-2.0 * std::log(u1)) * std::cos(2.0 * M_PI * u2));
      }
    }
  }
  std::optional<std::pair<int64_t, int64_t>> KnownRange(const std::string& field) const override {
    if (fields_.at(field).dtype != DType::kI64) return std::nullopt;
    return std::make_pair(int64_t{0}, classes_.at(field));
  }

 private:
  uint64_t seed_ = 0;
  std::map<std::string, int64_t> classes_;
  std::map<std::string, int> index_;
};

}  // namespace

namespace {

Result<std::unique_ptr<Dataset>> Open(const DataConfig& cfg, int64_t seed) {
  switch (cfg.format) {
    case DataConfig::Format::kNpy: {
      auto d = std::make_unique<NpyDataset>();
      RETURN_IF_ERROR(d->Open(cfg));
      return std::unique_ptr<Dataset>(std::move(d));
    }
    case DataConfig::Format::kTokens: {
      ASSIGN_OR_RETURN(std::string bytes, ReadAll("data.train", cfg.train));
      return TokensFromBytes(bytes, cfg.seq_len, cfg.train, "data.train");
    }
    case DataConfig::Format::kSynthetic: {
      auto d = std::make_unique<SyntheticDataset>();
      RETURN_IF_ERROR(d->Open(cfg, seed));
      return std::unique_ptr<Dataset>(std::move(d));
    }
  }
  return Status::Invalid("[data] unknown format");
}

}  // namespace

Result<std::unique_ptr<Dataset>> OpenDataset(const DataConfig& cfg, int64_t seed) {
  ASSIGN_OR_RETURN(std::unique_ptr<Dataset> d, Open(cfg, seed));
  // Shuffling keeps a permutation of every sample index: it must fit, with room to spare, in
  // memory, or the loader would fail its allocation mid-run.
  const double perm = 8.0 * static_cast<double>(d->size()), have = PhysicalMemoryBytes();
  if (cfg.order == DataConfig::Order::kShuffle && have > 0 && perm > have / 8) {
    return Status::Invalid("[data] data.order: shuffle over " + std::to_string(d->size()) + " samples keeps a " +
                           std::to_string(static_cast<int64_t>(perm / (1 << 20))) + " MiB permutation, more than an eighth of this machine's " +
                           std::to_string(static_cast<int64_t>(have / (1 << 20))) + " MiB; use order: sequential or fewer samples");
  }
  return d;
}

Result<std::unique_ptr<Dataset>> TokensFromBytes(const std::string& bytes, int64_t seq_len, const std::string& path,
                                                 const std::string& key) {
  auto d = std::make_unique<TokenDataset>();
  RETURN_IF_ERROR(d->Open(bytes, seq_len, path, key));
  return std::unique_ptr<Dataset>(std::move(d));
}

namespace {

// Samples [begin, begin + n) of another dataset.
class SubsetDataset : public Dataset {
 public:
  SubsetDataset(std::shared_ptr<const Dataset> base, int64_t begin, int64_t n) : base_(std::move(base)), begin_(begin) {
    fields_ = base_->fields();
    size_ = n;
  }
  void CopySample(const std::string& field, int64_t w, void* dst) const override { base_->CopySample(field, begin_ + w, dst); }
  std::optional<std::pair<int64_t, int64_t>> KnownRange(const std::string& field) const override { return base_->KnownRange(field); }

 private:
  std::shared_ptr<const Dataset> base_;
  int64_t begin_;
};

}  // namespace

Status SplitForEval(const Config& cfg, std::unique_ptr<Dataset>* train, std::unique_ptr<Dataset>* eval) {
  const EvalConfig& e = cfg.eval;
  if (!e.data.empty()) {
    ASSIGN_OR_RETURN(std::string bytes, ReadAll("eval.data", e.data));
    ASSIGN_OR_RETURN(*eval, TokensFromBytes(bytes, cfg.data.seq_len, e.data, "eval.data"));
    return Status::Ok();
  }
  const int64_t w = (*train)->size();
  const auto held = static_cast<int64_t>(std::llround(e.split * static_cast<double>(w)));
  if (held < 1 || held >= w) {
    return Status::Invalid("[data] eval.split: " + std::to_string(e.split) + " of the training data's " + std::to_string(w) +
                           " samples leaves " + (held < 1 ? "none to evaluate on" : "none to train on"));
  }
  std::shared_ptr<const Dataset> base(std::move(*train));
  *train = std::make_unique<SubsetDataset>(base, 0, w - held);
  *eval = std::make_unique<SubsetDataset>(base, w - held, held);
  return Status::Ok();
}

Loader::Loader(const Dataset& ds, std::map<std::string, std::string> input_field, const DataConfig& cfg,
               const TrainConfig& train)
    : ds_(ds), input_field_(std::move(input_field)), shuffle_(cfg.order == DataConfig::Order::kShuffle),
      global_batch_(train.global_batch), micro_batch_(train.micro_batch), seed_(train.seed) {}

int64_t Loader::SampleIndex(int64_t step, int64_t b) const {
  int64_t pos = step * global_batch_ + b, w = pos % ds_.size();
  if (!shuffle_) return w;
  int64_t epoch = pos / ds_.size();
  auto it = perms_.find(epoch);
  if (it == perms_.end()) {
    std::vector<int64_t> p(static_cast<size_t>(ds_.size()));
    std::iota(p.begin(), p.end(), 0);
    uint64_t state = SplitMix64(static_cast<uint64_t>(seed_) * 0x100000001B3ull + static_cast<uint64_t>(epoch));
    for (size_t i = p.size(); i > 1; --i) {
      state = SplitMix64(state);
      std::swap(p[i - 1], p[static_cast<size_t>(state % i)]);
    }
    if (perms_.size() > 2) perms_.erase(perms_.begin());
    it = perms_.emplace(epoch, std::move(p)).first;
  }
  return it->second[static_cast<size_t>(w)];
}

Status Loader::Fill(const std::string& input, int64_t step, int64_t micro, const Tensor& out) {
  const std::string& field = input_field_.at(input);
  const Field& f = ds_.fields().at(field);
  size_t bytes = static_cast<size_t>(f.sample.numel()) * SizeOf(f.dtype);
  auto* dst = static_cast<char*>(out.raw());
  for (int64_t i = 0; i < micro_batch_; ++i) {
    ds_.CopySample(field, SampleIndex(step, micro * micro_batch_ + i), dst + static_cast<size_t>(i) * bytes);
  }
  return Status::Ok();
}

}  // namespace fr::data
