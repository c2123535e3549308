#include "driver/run_files.h"

#include <sys/stat.h>
#include <unistd.h>

#include <filesystem>

#include "actor/trace.h"
#include "base/file.h"
#include "base/hash.h"
#include "plan/plan_serialize.h"

namespace fr {

namespace {

std::vector<NamedFile> ModelAndData(const Config& cfg) {
  std::vector<NamedFile> in = {{"model.onnx", cfg.model.onnx}};
  switch (cfg.data.format) {
    case DataConfig::Format::kTokens:
      in.push_back({"data.train", cfg.data.train});
      break;
    case DataConfig::Format::kNpy:
      for (const auto& [field, path] : cfg.data.npy) in.push_back({"data." + field, path});
      break;
    case DataConfig::Format::kSynthetic:
      break;
  }
  if (!cfg.eval.data.empty()) in.push_back({"eval.data", cfg.eval.data});
  return in;
}

}  // namespace

std::vector<NamedFile> RunInputs(const Config& cfg) {
  std::vector<NamedFile> in = {{"the config", cfg.path}};
  for (NamedFile& f : ModelAndData(cfg)) in.push_back(std::move(f));
  return in;
}

std::vector<RunOutput> RunOutputs(const Config& cfg, const std::string& trace, int ranks) {
  std::vector<RunOutput> out;
  if (!cfg.log.jsonl.empty()) out.push_back({{"log.jsonl", cfg.log.jsonl}, 0});
  if (!cfg.save.onnx.empty()) out.push_back({{"save.onnx", cfg.save.onnx}, 0});
  if (!trace.empty())
    for (int r = 0; r < ranks; ++r) out.push_back({{"--trace", actor::TracePath(trace, r, ranks)}, r});
  return out;
}

Status CheckRunOutputs(const Config& cfg, const std::string& trace, int rank, int ranks) {
  const std::vector<NamedFile> inputs = RunInputs(cfg);
  const std::vector<RunOutput> outputs = RunOutputs(cfg, trace, ranks);
  for (size_t i = 0; i < outputs.size(); ++i) {
    if (outputs[i].rank != rank) continue;
    std::vector<NamedFile> others;
    for (size_t j = 0; j < outputs.size(); ++j)
      if (j != i) others.push_back(outputs[j].file);
    const NamedFile& f = outputs[i].file;
    const std::string where = f.key == "--trace" ? "[train] " : "[config] " + cfg.path + ": ";
    RETURN_IF_ERROR(CheckOutput(f, others, inputs).With(where));
  }
  // The checkpoint folder: made now, and written to once, so that a run is not lost to a folder it
  // cannot write at its first checkpoint.
  if (const std::string& dir = cfg.checkpoint.dir; !dir.empty() && rank == 0) {
    const std::string where = "[config] " + cfg.path + ": checkpoint.dir: ";
    std::error_code ec;
    std::filesystem::create_directories(dir, ec);
    if (!std::filesystem::is_directory(dir)) return Status::Invalid(where + "'" + dir + "' is not a folder and cannot be made one");
    const std::string probe = dir + "/.flowrun-probe." + std::to_string(::getpid());
    if (Status s = WriteFileAtomically(probe, "probe\n"); !s.ok()) return Status::Invalid(where + s.message());
    std::filesystem::remove(probe, ec);
  }
  return Status::Ok();
}

uint64_t InputSizesHash(const Config& cfg) {
  std::string sizes;
  for (const NamedFile& f : ModelAndData(cfg)) {
    struct stat st {};
    const bool regular = ::stat(f.path.c_str(), &st) == 0 && S_ISREG(st.st_mode);
    sizes += f.key + "=" + std::to_string(regular ? static_cast<long long>(st.st_size) : 0) + "\n";
  }
  return Fnv1a64(sizes);
}

}  // namespace fr
