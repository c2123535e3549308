#include "driver/checkpoint.h"

#include <fcntl.h>
#include <unistd.h>
#include <yaml-cpp/yaml.h>
#include <zlib.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstring>
#include <filesystem>
#include <future>
#include <map>
#include <set>
#include <thread>

#include "base/file.h"
#include "driver/pipeline.h"
#include "driver/save.h"
#include "base/hash.h"
#include "boxing/simulate.h"

namespace fr {

namespace fs = std::filesystem;

namespace {

constexpr const char* kFormat = "flowrun-checkpoint/2";

std::string Numbered(const char* prefix, int64_t n, int width) {
  char buf[64];
  std::snprintf(buf, sizeof buf, "%s%0*lld", prefix, width, static_cast<long long>(n));
  return buf;
}
std::string StepFolder(int64_t step) { return Numbered("step-", step, 8); }
std::string RankFile(int rank, const char* ext) { return Numbered("rank-", rank, 5) + ext; }

std::string Hex(uint64_t v) {
  char buf[20];
  std::snprintf(buf, sizeof buf, "%016llx", static_cast<unsigned long long>(v));
  return buf;
}

std::string Json(const std::string& s) {
  std::string q = "\"";
  for (unsigned char c : s) {
    if (c == '"' || c == '\\') {
      q += '\\';
      q += static_cast<char>(c);
    } else if (c == '\n') {
      q += "\\n";
    } else if (c < 0x20) {
      char buf[8];
      std::snprintf(buf, sizeof buf, "\\u%04x", c);
      q += buf;
    } else {
      q += static_cast<char>(c);
    }
  }
  return q + "\"";
}

template <typename T> std::string JsonList(const std::vector<T>& v) {
  std::string s = "[";
  for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + std::to_string(v[i]);
  return s + "]";
}

const char* SafetensorsType(DType d) {
  switch (d) {
    case DType::kF32: return "F32";
    case DType::kI64: return "I64";
    case DType::kI32: return "I32";
    case DType::kBool: return "BOOL";
    case DType::kU8: return "U8";
  }
  return "?";
}

// One tensor of a rank's file: a region [begin, end) of logical tensor `name`.
struct Piece {
  std::string name;  // the logical tensor: a parameter, "PARAM:stateI", or a running statistic
  std::string role;  // parameter, optimizer_state, running_stat
  std::string dtype; // safetensors' name
  std::vector<int64_t> shape;  // the logical tensor's
  std::vector<int64_t> begin, end;
  Tensor data;        // the piece as the runtime holds it, on the host; or
  std::string owned;  // its bytes (a running statistic, kept as float64)
  std::string_view bytes() const {
    return data.defined() ? std::string_view(static_cast<const char*>(data.raw()), data.bytes()) : std::string_view(owned);
  }
};

// A safetensors file's start: an 8-byte little-endian header size and the JSON header (padded
// with spaces so that the data starts 8-byte aligned). The pieces' bytes follow, in order.
std::string SafetensorsHeader(const std::vector<Piece>& pieces, int64_t step) {
  std::string header = "{\"__metadata__\": {\"format\": " + Json(kFormat) + ", \"step\": \"" + std::to_string(step) + "\"}";
  size_t at = 0;
  for (const Piece& p : pieces) {
    std::vector<int64_t> dims;
    for (size_t i = 0; i < p.begin.size(); ++i) dims.push_back(p.end[i] - p.begin[i]);
    const size_t n = p.bytes().size();
    header += ", " + Json(p.name) + ": {\"dtype\": \"" + p.dtype + "\", \"shape\": " + JsonList(dims) +
              ", \"data_offsets\": [" + std::to_string(at) + ", " + std::to_string(at + n) + "]}";
    at += n;
  }
  header += "}";
  while ((8 + header.size()) % 8) header += ' ';
  std::string out(8, '\0');
  uint64_t n = header.size();
  for (int i = 0; i < 8; ++i) out[static_cast<size_t>(i)] = static_cast<char>((n >> (8 * i)) & 0xff);
  return out + header;
}

// zlib's CRC-32 (Python's zlib.crc32) of `bytes`, continuing from `crc`.
uint32_t Crc32(std::string_view bytes, uint32_t crc = 0) {
  return static_cast<uint32_t>(crc32_z(crc, reinterpret_cast<const Bytef*>(bytes.data()), bytes.size()));
}
std::string Hex8(uint32_t v) {
  char buf[12];
  std::snprintf(buf, sizeof buf, "%08x", v);
  return buf;
}

// A parameter piece this rank holds: device d of placement pl, holding region `ranges`.
struct Held {
  ir::ValueId value;
  const ir::Value* val;
  const sbp::NdSbp* sbp;
  const sbp::Placement* pl;
  int d;
  std::vector<sbp::Range> ranges;
};
std::vector<Held> HeldParams(const ir::Plan& plan, const ir::Graph& g, int rank) {
  std::vector<Held> out;
  for (const ir::ValuePlacement& vp : plan.values) {
    const ir::Value& val = g.value(vp.value);
    if (val.kind != ir::ValueKind::kParam) continue;
    const sbp::Placement& pl = plan.stages[static_cast<size_t>(vp.stage)];
    const int d = pl.IndexOf(rank);
    if (d >= 0) out.push_back({vp.value, &val, &vp.sbp, &pl, d, sbp::PieceRanges(val.type.shape, vp.sbp, pl, d)});
  }
  return out;
}

// The parameter piece, then its optimizer state, as the runtime holds them, with their names.
std::vector<std::pair<std::string, Tensor>> StateOf(const actor::Runtime& rt, const Held& h) {
  std::vector<std::pair<std::string, Tensor>> out = {{h.val->name, rt.Param(h.value)}};
  const std::vector<Tensor> state = rt.OptimizerStateOf(h.value);
  for (size_t i = 0; i < state.size(); ++i) out.emplace_back(h.val->name + ":state" + std::to_string(i), state[i]);
  return out;
}

// Which parameter pieces this rank writes, by value and region. Of the ranks that hold the same
// region (a broadcast parameter's, on every data-parallel rank) the one with the fewest values to
// write so far does, in plan order: so replicas share the writing and it scales with the ranks.
// Every rank computes the same assignment.
using Region = std::vector<int64_t>;  // begin, end of each axis
Region RegionOf(const std::vector<sbp::Range>& ranges) {
  Region r;
  for (const sbp::Range& x : ranges) r.insert(r.end(), {x.begin, x.end});
  return r;
}
std::set<std::pair<ir::ValueId, Region>> WrittenBy(const ir::Plan& plan, const ir::Graph& g, int rank) {
  std::set<std::pair<ir::ValueId, Region>> mine;
  std::map<int, int64_t> load;  // rank -> values to write
  for (const ir::ValuePlacement& vp : plan.values) {
    const ir::Value& val = g.value(vp.value);
    if (val.kind != ir::ValueKind::kParam) continue;
    const sbp::Placement& pl = plan.stages[static_cast<size_t>(vp.stage)];
    std::map<Region, int> writer;  // region -> its writer
    for (int e = 0; e < pl.size(); ++e) {
      const int r = pl.ranks()[static_cast<size_t>(e)];
      auto [at, added] = writer.emplace(RegionOf(sbp::PieceRanges(val.type.shape, vp.sbp, pl, e)), r);
      if (!added && load[r] < load[at->second]) at->second = r;
    }
    for (const auto& [region, r] : writer) {
      int64_t n = 1;
      for (size_t i = 0; i < region.size(); i += 2) n *= region[i + 1] - region[i];
      load[r] += n;
      if (r == rank) mine.emplace(vp.value, region);
    }
  }
  return mine;
}

// This rank's pieces: the parameter pieces it writes (WrittenBy) with their optimizer state; on
// rank 0, the running statistics.
std::vector<Piece> PiecesOf(const ir::Plan& plan, const ir::Graph& g, const actor::Runtime& rt, const RunningStats& running,
                            int rank) {
  std::vector<Piece> out;
  const auto writes = WrittenBy(plan, g, rank);
  for (const Held& h : HeldParams(plan, g, rank)) {
    if (!writes.count({h.value, RegionOf(h.ranges)})) continue;
    for (const auto& [name, tensor] : StateOf(rt, h)) {
      Piece p;
      p.name = name;
      p.role = name == h.val->name ? "parameter" : "optimizer_state";
      p.dtype = SafetensorsType(tensor.dtype());
      p.shape = h.val->type.shape.dims();
      for (const sbp::Range& r : h.ranges) {
        p.begin.push_back(r.begin);
        p.end.push_back(r.end);
      }
      p.data = tensor.ToHost();  // the runtime's own memory on a CPU rank: nothing is copied
      out.push_back(std::move(p));
    }
  }
  if (rank == 0) {
    for (const auto& [name, stat] : running.Exact()) {
      Piece p;
      p.name = name;
      p.role = "running_stat";
      p.dtype = "F64";
      p.shape = stat.first.dims();
      p.begin.assign(p.shape.size(), 0);
      p.end = p.shape;
      p.owned.assign(reinterpret_cast<const char*>(stat.second.data()), stat.second.size() * sizeof(double));
      out.push_back(std::move(p));
    }
  }
  return out;
}

Status FsyncFolder(const std::string& dir) {
  const int fd = ::open(dir.c_str(), O_RDONLY | O_DIRECTORY);
  if (fd < 0 || ::fsync(fd) != 0) {
    const int err = errno;
    if (fd >= 0) ::close(fd);
    return Status::Runtime("cannot sync folder '" + dir + "': " + std::strerror(err));
  }
  ::close(fd);
  return Status::Ok();
}

// Rank 0: once every rank's rank-R.json is in `tmp`, the manifest, the commit marker, the rename.
Status Commit(const Config& cfg, int64_t step, uint64_t plan_hash, int ranks, const std::string& tmp, const std::string& final) {
  const std::string where = "[checkpoint] " + cfg.checkpoint.dir + ": ";
  const auto deadline = std::chrono::steady_clock::now() + std::chrono::duration<double>(cfg.checkpoint.timeout);
  for (int r = 0; r < ranks; ++r) {
    while (!fs::exists(tmp + "/" + RankFile(r, ".json"))) {
      if (std::chrono::steady_clock::now() > deadline) {
        std::string missing;
        for (int q = r; q < ranks; ++q)
          if (!fs::exists(tmp + "/" + RankFile(q, ".json"))) missing += (missing.empty() ? "" : ",") + std::to_string(q);
        return Status::Runtime(where + "rank(s) " + missing + " did not finish writing step " + std::to_string(step) + " within " +
                               std::to_string(static_cast<int>(cfg.checkpoint.timeout)) + " s (checkpoint.timeout)");
      }
      std::this_thread::sleep_for(std::chrono::milliseconds(5));
    }
  }
  // The manifest: every rank's pieces, grouped by logical tensor.
  std::map<std::string, std::string> tensor_head;             // name -> its fields
  std::map<std::string, std::vector<std::string>> pieces;     // name -> its pieces
  std::vector<std::string> files;
  for (int r = 0; r < ranks; ++r) {
    const std::string path = tmp + "/" + RankFile(r, ".json");
    ASSIGN_OR_RETURN(std::string text, ReadWholeFile(path));
    YAML::Node n;
    try {
      n = YAML::Load(text);
      files.push_back(YAML::Dump(n["file"]));
      for (const YAML::Node& p : n["pieces"]) {
        const std::string name = p["name"].as<std::string>();
        tensor_head[name] = "\"role\": " + Json(p["role"].as<std::string>()) + ", \"dtype\": " + Json(p["dtype"].as<std::string>()) +
                            ", \"shape\": " + JsonList(p["shape"].as<std::vector<int64_t>>());
        pieces[name].push_back("{\"file\": " + Json(n["file"]["name"].as<std::string>()) + ", \"begin\": " +
                               JsonList(p["begin"].as<std::vector<int64_t>>()) +
                               ", \"end\": " + JsonList(p["end"].as<std::vector<int64_t>>()) + "}");
      }
    } catch (const YAML::Exception& e) {
      return Status::Runtime(where + "cannot read '" + path + "': " + e.what());
    }
  }
  std::string m = "{\"format\": " + Json(kFormat) + ",\n \"step\": " + std::to_string(step) + ",\n \"ranks\": " +
                  std::to_string(ranks) + ",\n \"plan_hash\": \"" + Hex(plan_hash) + "\",\n \"train\": {\"seed\": " +
                  std::to_string(cfg.train.seed) + ", \"global_batch\": " + std::to_string(cfg.train.global_batch) +
                  "},\n \"config\": " + Json(ConfigToYaml(cfg)) + ",\n \"files\": [";
  for (size_t i = 0; i < files.size(); ++i) {
    YAML::Node f = YAML::Load(files[i]);
    m += std::string(i ? ",\n   " : "\n   ") + "{\"name\": " + Json(f["name"].as<std::string>()) +
         ", \"bytes\": " + f["bytes"].as<std::string>() + ", \"crc32\": " + Json(f["crc32"].as<std::string>()) + "}";
  }
  m += "],\n \"tensors\": [";
  bool first = true;
  for (const auto& [name, head] : tensor_head) {
    m += std::string(first ? "\n   " : ",\n   ") + "{\"name\": " + Json(name) + ", " + head + ", \"pieces\": [";
    for (size_t i = 0; i < pieces[name].size(); ++i) m += (i ? ", " : "") + pieces[name][i];
    m += "]}";
    first = false;
  }
  m += "]}\n";
  if (Status s = WriteFileAtomically(tmp + "/manifest.json", m); !s.ok()) return s.With(where);
  if (Status s = WriteFileAtomically(tmp + "/COMMIT", "step " + std::to_string(step) + "\n"); !s.ok()) return s.With(where);
  std::error_code ec;
  const std::string old = final + ".replaced";
  if (fs::exists(final)) {  // a checkpoint of the same step from an earlier run: replaced whole
    fs::remove_all(old, ec);
    fs::rename(final, old, ec);
    if (ec) return Status::Runtime(where + "cannot move '" + final + "' aside: " + ec.message());
  }
  fs::rename(tmp, final, ec);
  if (ec) return Status::Runtime(where + "cannot rename '" + tmp + "' to '" + final + "': " + ec.message());
  if (Status s = FsyncFolder(cfg.checkpoint.dir); !s.ok()) return s.With(where);
  fs::remove_all(old, ec);
  // Folders of earlier steps that runs killed mid-write left, and older checkpoints beyond `keep`,
  // now that this one is committed.
  for (const auto& e : fs::directory_iterator(cfg.checkpoint.dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind(".tmp-step-", 0) == 0 && name < ".tmp-" + StepFolder(step)) fs::remove_all(e.path(), ec);
  }
  if (cfg.checkpoint.keep > 0) {
    std::vector<std::string> steps;
    for (const auto& e : fs::directory_iterator(cfg.checkpoint.dir, ec))
      if (e.path().filename().string().rfind("step-", 0) == 0 && fs::exists(e.path() / "COMMIT")) steps.push_back(e.path().string());
    std::sort(steps.begin(), steps.end());
    for (size_t i = 0; i + static_cast<size_t>(cfg.checkpoint.keep) < steps.size(); ++i) fs::remove_all(steps[i], ec);
  }
  return Status::Ok();
}

// A safetensors file, mapped (base/file.h: not copied into memory) and checked against the
// manifest: its tensors by key.
struct StoredFile {
  MappedFile file;
  std::string_view bytes;  // file's
  std::map<std::string, std::pair<size_t, size_t>> at;  // key -> [begin, end) in `bytes`
};

Result<StoredFile> ReadStored(const std::string& path, int64_t size, const std::string& crc32) {
  const std::string bad = "[checkpoint] " + path + ": ";
  StoredFile f;
  ASSIGN_OR_RETURN(f.file, MappedFile::Open(path));
  f.bytes = f.file.bytes();
  if (static_cast<int64_t>(f.bytes.size()) != size)
    return Status::Invalid(bad + std::to_string(f.bytes.size()) + " bytes where the manifest says " + std::to_string(size) +
                           " (truncated or replaced)");
  if (Hex8(Crc32(f.bytes)) != crc32) return Status::Invalid(bad + "checksum mismatch (the file is corrupted)");
  uint64_t n = 0;
  for (int i = 0; i < 8 && i < static_cast<int>(f.bytes.size()); ++i)
    n |= static_cast<uint64_t>(static_cast<unsigned char>(f.bytes[static_cast<size_t>(i)])) << (8 * i);
  if (f.bytes.size() < 8 || n > f.bytes.size() - 8) return Status::Invalid(bad + "not a safetensors file");
  try {
    const YAML::Node h = YAML::Load(std::string(f.bytes.substr(8, n)));
    for (const auto& kv : h) {
      const std::string key = kv.first.as<std::string>();
      if (key == "__metadata__") continue;
      const auto off = kv.second["data_offsets"].as<std::vector<size_t>>();
      if (off.size() != 2 || off[0] > off[1] || off[1] > f.bytes.size() - 8 - n)
        return Status::Invalid(bad + "tensor '" + key + "' lies outside the file");
      f.at[key] = {8 + n + off[0], 8 + n + off[1]};
    }
  } catch (const YAML::Exception& e) {
    return Status::Invalid(bad + "bad header: " + e.what());
  }
  return f;
}

}  // namespace

std::string CheckpointPath(const std::string& dir, int64_t step) { return (fs::path(dir) / StepFolder(step)).string(); }

int64_t CheckpointBytes(const std::string& path) {
  std::error_code ec;
  int64_t total = 0;
  for (const auto& e : fs::directory_iterator(path, ec))
    if (e.is_regular_file(ec)) total += static_cast<int64_t>(e.file_size(ec));
  return total;
}

Status WriteCheckpoint(const Config& cfg, int64_t step, uint64_t plan_hash, const ir::Plan& plan, const ir::Graph& g,
                       const actor::Runtime& rt, const RunningStats& running, const actor::World& world) {
  const std::string where = "[checkpoint] " + cfg.checkpoint.dir + ": ";
  const std::string tmp = cfg.checkpoint.dir + "/.tmp-" + StepFolder(step), final = cfg.checkpoint.dir + "/" + StepFolder(step);
  if (world.rank == 0) {  // a folder left by a run that died mid-write holds nothing of this one
    std::error_code ec;
    fs::remove_all(tmp, ec);
    fs::create_directories(tmp, ec);
    if (ec) return Status::Runtime(where + "cannot make '" + tmp + "': " + ec.message());
  }
  RETURN_IF_ERROR(actor::AgreeOnRun(world, actor::RunDigest{}, cfg.checkpoint.timeout, "checkpoint " + StepFolder(step)));
  const std::vector<Piece> pieces = PiecesOf(plan, g, rt, running, world.rank);
  // Streamed from the runtime's tensors into the file, checksummed on the way: no copy of the state.
  const std::string file = RankFile(world.rank, ".safetensors");
  const std::string header = SafetensorsHeader(pieces, step);
  // The checksum on a thread of its own, beside the writes: it reads the same memory.
  std::future<uint32_t> checksum = std::async(std::launch::async, [&pieces, &header] {
    uint32_t c = Crc32(header);
    for (const Piece& p : pieces) c = Crc32(p.bytes(), c);
    return c;
  });
  size_t size = header.size();
  {
    auto f = AtomicFile::Create(tmp + "/" + file);
    if (!f.ok()) return f.status().With(where);
    Status s = f->Append(header);
    for (size_t i = 0; i < pieces.size() && s.ok(); ++i) {
      s = f->Append(pieces[i].bytes());
      size += pieces[i].bytes().size();
    }
    if (s.ok()) s = f->Commit();
    if (!s.ok()) return s.With(where);  // the future's destructor waits for the thread
  }
  const uint32_t crc = checksum.get();
  std::string j = "{\"file\": {\"name\": " + Json(file) + ", \"bytes\": " + std::to_string(size) + ", \"crc32\": " +
                  Json(Hex8(crc)) + "},\n \"pieces\": [";
  for (size_t i = 0; i < pieces.size(); ++i) {
    const Piece& p = pieces[i];
    j += std::string(i ? ",\n   " : "\n   ") + "{\"name\": " + Json(p.name) + ", \"role\": " + Json(p.role) + ", \"dtype\": " +
         Json(p.dtype) + ", \"shape\": " + JsonList(p.shape) + ", \"begin\": " + JsonList(p.begin) + ", \"end\": " + JsonList(p.end) + "}";
  }
  j += "]}\n";
  if (Status s = WriteFileAtomically(tmp + "/" + RankFile(world.rank, ".json"), j); !s.ok()) return s.With(where);
  if (world.rank != 0) return Status::Ok();
  return Commit(cfg, step, plan_hash, world.size, tmp, final);
}

Result<CheckpointInfo> LatestCheckpoint(const std::string& dir) {
  std::error_code ec;
  // A checkpoint folder itself (DIR/step-N): that one.
  fs::path given = fs::path(dir).lexically_normal();
  if (!given.has_filename()) given = given.parent_path();  // "DIR/step-N/"
  const std::string base = given.filename().string();
  if (base.rfind("step-", 0) == 0 && base.size() > 5 && base.find_first_not_of("0123456789", 5) == std::string::npos &&
      fs::exists(given / "COMMIT", ec))
    return CheckpointInfo{given.string(), std::stoll(base.substr(5))};
  std::vector<std::string> steps;
  for (const auto& e : fs::directory_iterator(dir, ec)) {
    const std::string name = e.path().filename().string();
    if (name.rfind("step-", 0) == 0 && name.find('.') == std::string::npos && fs::exists(e.path() / "COMMIT"))
      steps.push_back(name);
  }
  if (ec) return Status::Invalid("[checkpoint] " + dir + ": cannot read the folder: " + ec.message());
  if (steps.empty()) return Status::Invalid("[checkpoint] " + dir + ": no committed checkpoint (step-NNNNNNNN with a COMMIT file)");
  std::sort(steps.begin(), steps.end());
  CheckpointInfo c;
  c.path = dir + "/" + steps.back();
  c.step = std::stoll(steps.back().substr(5));
  return c;
}

Status RestoreCheckpoint(const CheckpointInfo& c, const Config& cfg, const ir::Plan& plan, const ir::Graph& g,
                         actor::Runtime& rt, RunningStats& running, int rank) {
  const std::string where = "[checkpoint] " + c.path + ": ";
  const std::string manifest_path = c.path + "/manifest.json";
  ASSIGN_OR_RETURN(std::string text, ReadWholeFile(manifest_path));
  struct Stored {
    std::string role, dtype;
    std::vector<int64_t> shape;
    std::vector<std::tuple<std::string, std::vector<int64_t>, std::vector<int64_t>>> pieces;  // file, begin, end
  };
  std::map<std::string, Stored> tensors;
  std::map<std::string, std::pair<int64_t, std::string>> files;  // name -> bytes, checksum
  try {
    const YAML::Node m = YAML::Load(text);
    if (!m["format"] || m["format"].as<std::string>() != kFormat)
      return Status::Invalid("[checkpoint] " + manifest_path + ": not a " + kFormat + " manifest");
    if (m["step"].as<int64_t>() != c.step)
      return Status::Invalid("[checkpoint] " + manifest_path + ": step " + m["step"].as<std::string>() + " in a folder of step " +
                             std::to_string(c.step));
    const int64_t seed = m["train"]["seed"].as<int64_t>(), batch = m["train"]["global_batch"].as<int64_t>();
    if (seed != cfg.train.seed)
      return Status::Invalid(where + "trained with train.seed " + std::to_string(seed) + ", the config has " +
                             std::to_string(cfg.train.seed) + " (the data order and dropout would change)");
    if (batch != cfg.train.global_batch)
      return Status::Invalid(where + "trained with train.global_batch " + std::to_string(batch) + ", the config has " +
                             std::to_string(cfg.train.global_batch) + " (the data order would change)");
    for (const YAML::Node& f : m["files"]) files[f["name"].as<std::string>()] = {f["bytes"].as<int64_t>(), f["crc32"].as<std::string>()};
    for (const YAML::Node& t : m["tensors"]) {
      Stored s{t["role"].as<std::string>(), t["dtype"].as<std::string>(), t["shape"].as<std::vector<int64_t>>(), {}};
      for (const YAML::Node& p : t["pieces"])
        s.pieces.emplace_back(p["file"].as<std::string>(), p["begin"].as<std::vector<int64_t>>(), p["end"].as<std::vector<int64_t>>());
      tensors[t["name"].as<std::string>()] = std::move(s);
    }
  } catch (const YAML::Exception& e) {
    return Status::Invalid("[checkpoint] " + manifest_path + ": " + e.what());
  }
  if (c.step > cfg.train.steps)
    return Status::Invalid(where + "at step " + std::to_string(c.step) + ", past train.steps " + std::to_string(cfg.train.steps));
  std::map<std::string, StoredFile> loaded;
  auto file = [&](const std::string& name) -> Result<const StoredFile*> {
    auto it = loaded.find(name);
    if (it != loaded.end()) return &it->second;
    auto f = files.find(name);
    if (f == files.end()) return Status::Invalid(where + "the manifest names file '" + name + "' but lists no such file");
    ASSIGN_OR_RETURN(StoredFile s, ReadStored(c.path + "/" + name, f->second.first, f->second.second));
    return &loaded.emplace(name, std::move(s)).first->second;
  };
  // Fills `out` (region `want` of logical tensor `name`) from the stored pieces that overlap it.
  auto fill = [&](const std::string& name, DType dtype, const Shape& shape, const std::vector<sbp::Range>& want,
                  const Tensor& out) -> Status {
    auto it = tensors.find(name);
    if (it == tensors.end()) return Status::Invalid(where + "no tensor '" + name + "' (a checkpoint of another model or optimizer?)");
    const Stored& s = it->second;
    if (s.shape != shape.dims() || s.dtype != SafetensorsType(dtype))
      return Status::Invalid(where + "tensor '" + name + "' is " + s.dtype + JsonList(s.shape) + ", the model's is " +
                             SafetensorsType(dtype) + shape.ToString());
    int64_t covered = 0;
    for (const auto& [fname, begin, end] : s.pieces) {
      std::vector<sbp::Range> inter, in_piece, in_want;
      bool overlaps = true;
      for (size_t i = 0; i < want.size(); ++i) {
        const int64_t lo = std::max(want[i].begin, begin[i]), hi = std::min(want[i].end, end[i]);
        overlaps = overlaps && lo < hi;
        in_piece.push_back({lo - begin[i], hi - begin[i]});
        in_want.push_back({lo - want[i].begin, hi - want[i].begin});
        inter.push_back({lo, hi});
      }
      if (!overlaps && !want.empty()) continue;
      ASSIGN_OR_RETURN(const StoredFile* f, file(fname));
      auto at = f->at.find(name);
      std::vector<int64_t> dims;
      for (size_t i = 0; i < begin.size(); ++i) dims.push_back(end[i] - begin[i]);
      const Shape piece_shape(dims);
      if (at == f->at.end() || at->second.second - at->second.first != static_cast<size_t>(piece_shape.numel()) * SizeOf(dtype))
        return Status::Invalid(where + fname + ": no tensor '" + name + "' of " + piece_shape.ToString() + " as the manifest says");
      Tensor piece(dtype, piece_shape);
      std::memcpy(piece.raw(), f->bytes.data() + at->second.first, piece.bytes());
      boxing::WriteRegion(out, in_want, boxing::SliceOf(piece, in_piece));
      int64_t n = 1;
      for (const sbp::Range& r : inter) n *= r.size();
      covered += n;
    }
    int64_t wanted = 1;
    for (const sbp::Range& r : want) wanted *= r.size();
    if (covered < wanted) return Status::Invalid(where + "the pieces of '" + name + "' do not cover the region this rank needs");
    return Status::Ok();
  };
  for (const Held& h : HeldParams(plan, g, rank)) {
    for (const auto& [name, target] : StateOf(rt, h)) {
      const Tensor host(target.dtype(), target.shape());
      RETURN_IF_ERROR(fill(name, h.val->type.dtype, h.val->type.shape, h.ranges, host));
      target.CopyFrom(host);
    }
  }
  // Every rank: an evaluation reads the running averages of its stages.
  for (const auto& [name, stat] : running.Exact()) {
    auto it = tensors.find(name);
    if (it == tensors.end() || it->second.role != "running_stat" || it->second.pieces.size() != 1)
      return Status::Invalid(where + "no running statistic '" + name + "'");
    const auto& [fname, begin, end] = it->second.pieces[0];
    ASSIGN_OR_RETURN(const StoredFile* f, file(fname));
    auto at = f->at.find(name);
    if (at == f->at.end() || at->second.second - at->second.first != stat.second.size() * sizeof(double))
      return Status::Invalid(where + fname + ": running statistic '" + name + "' is not " + stat.first.ToString());
    std::vector<double> v(stat.second.size());
    std::memcpy(v.data(), f->bytes.data() + at->second.first, v.size() * sizeof(double));
    running.Restore(name, v);
  }
  return Status::Ok();
}

namespace {

int Failed(const Status& s) {
  std::fprintf(stderr, "flowrun: %s\n", s.message().c_str());
  return s.exit_code();
}

std::vector<std::string> Lines(const std::string& text) {
  std::vector<std::string> out;
  size_t at = 0;
  while (at < text.size()) {
    const size_t nl = text.find('\n', at);
    out.push_back(text.substr(at, nl == std::string::npos ? std::string::npos : nl - at));
    if (nl == std::string::npos) break;
    at = nl + 1;
  }
  return out;
}

}  // namespace

int InspectCheckpoint(const std::string& path, const std::string& config, const std::string& export_onnx) {
  CheckpointInfo c;
  if (fs::exists(fs::path(path) / "COMMIT")) {
    c.path = path;
    const std::string name = fs::path(path).lexically_normal().filename().string();
    c.step = name.rfind("step-", 0) == 0 ? std::atoll(name.c_str() + 5) : -1;
  } else {
    auto found = LatestCheckpoint(path);
    if (!found.ok()) return Failed(found.status());
    c = *found;
  }
  const std::string manifest_path = c.path + "/manifest.json";
  auto text = ReadWholeFile(manifest_path);
  if (!text.ok()) return Failed(text.status().With("[checkpoint] "));
  std::string saved_config;
  try {
    const YAML::Node m = YAML::Load(*text);
    if (!m["format"] || m["format"].as<std::string>() != kFormat)
      return Failed(Status::Invalid("[checkpoint] " + manifest_path + ": not a " + kFormat + " manifest"));
    saved_config = m["config"].as<std::string>();
    std::printf("checkpoint: %s\nstep: %lld\nwritten by: %d rank(s), plan %s\n", c.path.c_str(),
                static_cast<long long>(m["step"].as<int64_t>()), m["ranks"].as<int>(), m["plan_hash"].as<std::string>().c_str());
    std::printf("files:\n");
    for (const YAML::Node& f : m["files"])
      std::printf("  %s  %lld bytes  crc32 %s\n", f["name"].as<std::string>().c_str(), static_cast<long long>(f["bytes"].as<int64_t>()),
                  f["crc32"].as<std::string>().c_str());
    std::printf("tensors:\n");
    for (const YAML::Node& t : m["tensors"]) {
      const auto shape = t["shape"].as<std::vector<int64_t>>();
      std::printf("  %-40s %-15s %s%s in %zu piece(s)\n", t["name"].as<std::string>().c_str(), t["role"].as<std::string>().c_str(),
                  t["dtype"].as<std::string>().c_str(), Shape(shape).ToString().c_str(), t["pieces"].size());
    }
  } catch (const YAML::Exception& e) {
    return Failed(Status::Invalid("[checkpoint] " + manifest_path + ": " + e.what()));
  }
  if (!config.empty()) {
    auto cfg = LoadConfig(config);
    if (!cfg.ok()) return Failed(cfg.status());
    const std::vector<std::string> a = Lines(saved_config), b = Lines(ConfigToYaml(*cfg));
    std::printf("config: lines that differ (- the checkpoint's, + %s):\n", config.c_str());
    int diffs = 0;
    for (const std::string& l : a)
      if (std::find(b.begin(), b.end(), l) == b.end()) std::printf("  - %s\n", l.c_str()), ++diffs;
    for (const std::string& l : b)
      if (std::find(a.begin(), a.end(), l) == a.end()) std::printf("  + %s\n", l.c_str()), ++diffs;
    if (!diffs) std::printf("  none\n");
  }
  if (!export_onnx.empty()) {  // the checkpoint's own config on one rank, its state restored, saved as save: saves
    auto cfg = ParseConfig(saved_config, manifest_path + " (config)");
    if (!cfg.ok()) return Failed(cfg.status());
    cfg->parallel = ParallelConfig{};
    cfg->parallel.device = DeviceType::kCpu;
    auto compiled = Compile(*cfg, 1);
    if (!compiled.ok()) return Failed(compiled.status());
    actor::Runtime rt(compiled->plan, compiled->training.graph);
    RunningStats running(compiled->training.graph);
    if (Status s = RestoreCheckpoint(c, *cfg, compiled->plan, compiled->training.graph, rt, running, 0); !s.ok()) return Failed(s);
    if (Status s = SaveTrained(compiled->plan, compiled->training, rt, nullptr, 0, cfg->parallel.timeout, *compiled->model,
                               running.Values(), export_onnx);
        !s.ok())
      return Failed(s);
    std::printf("exported: %s (model.onnx with the parameters of step %lld)\n", export_onnx.c_str(), static_cast<long long>(c.step));
  }
  return 0;
}

}  // namespace fr
