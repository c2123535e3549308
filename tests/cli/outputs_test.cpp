// What `flowrun train` writes (issue 27: never lose or corrupt data), end to end through the binary:
// every output (log.jsonl, save.onnx, --trace) is checked before training, and refused when it is
// an input of the run, another output, a directory, a device, a FIFO or a socket, or in a folder
// that cannot take a file; outputs are written whole or not at all, and a failed write is exit 1.
// Each test runs on copies of the MLP's model and data in a directory of its own, so that a check
// that fails damages nothing of the repository's.
#include <gtest/gtest.h>
#include <sys/socket.h>
#include <sys/stat.h>
#include <sys/sysmacros.h>
#include <sys/un.h>
#include <unistd.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

#include "base/file.h"
#include "base/output_check.h"
#include "flowrun_cmd.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

using fr::testing::Flowrun;
using fr::testing::Output;
using fr::testing::Quote;
using fr::testing::TempDir;

std::string Slurp(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string((std::istreambuf_iterator<char>(f)), {});
}

// The MLP's model, data and config, copied into `tmp`.
struct Files {
  std::string config, model, x, y;
  std::vector<std::string> Inputs() const { return {config, model, x, y}; }
};

Files CopyRun(const TempDir& tmp, int steps = 2) {
  Files r;
  r.model = tmp.Write("model.onnx", Slurp("models/mlp.onnx"));
  r.x = tmp.Write("x.npy", Slurp("data/mlp_x.npy"));
  r.y = tmp.Write("y.npy", Slurp("data/mlp_y.npy"));
  r.config = tmp.Write("run.yaml", "model:\n"
                                   "  onnx: " + r.model + "\n"
                                   "  inputs: {x: x}\n"
                                   "  loss: {type: cross_entropy, logits: logits, labels: y}\n"
                                   "data: {format: npy, x: " + r.x + ", y: " + r.y + "}\n"
                                   "train: {steps: " + std::to_string(steps) + ", global_batch: 8, micro_batch: 4, seed: 1}\n"
                                   "optimizer: {type: sgd, lr: 0.01}\n");
  return r;
}

// `flowrun train` on the run with `args` after it, through `prefix` (shell commands before it).
Output Train(const Files& r, const std::vector<std::string>& args, const std::string& prefix = "", double deadline_s = 120) {
  std::vector<std::string> all = {"train", r.config};
  all.insert(all.end(), args.begin(), args.end());
  return Flowrun(all, prefix, deadline_s);
}

int StepLines(const std::string& out) {
  int n = 0;
  for (size_t at = out.find("step "); at != std::string::npos; at = out.find("step ", at + 1)) n += at == 0 || out[at - 1] == '\n';
  return n;
}

void ExpectRefusedBeforeTraining(const Output& o, const std::vector<std::string>& fragments) {
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_EQ(StepLines(o.out), 0) << "refused before training, not after:\n" << o.out;
  for (const std::string& f : fragments) EXPECT_NE(o.out.find(f), std::string::npos) << "want '" << f << "' in: " << o.out;
}

// Files other than `keep` in `dir`, sorted: what a writer left behind (temporary files).
std::vector<std::string> Extra(const std::string& dir, const std::vector<std::string>& keep) {
  std::vector<std::string> extra;
  for (const auto& e : fs::directory_iterator(dir)) {
    bool kept = false;
    for (const std::string& k : keep) kept = kept || fs::path(k).filename() == e.path().filename();
    if (!kept) extra.push_back(e.path().filename().string());
  }
  std::sort(extra.begin(), extra.end());
  return extra;
}

// An output onto an input of the run, under any name of it, is refused before training, and every
// input survives byte for byte. (Before the checks, log.jsonl truncated the model it named.)
TEST(Outputs, NeverOverwriteAnInput) {
  struct Row {
    const char* key;     // the output: a config key, or "--trace"
    const char* target;  // which input it names: model, x, y, config
    const char* alias;   // how: "path" as is, "symlink", "hardlink", "dotted" (DIR/./NAME)
  };
  const std::vector<Row> rows = {
      {"log.jsonl", "model", "path"},     {"log.jsonl", "model", "symlink"}, {"log.jsonl", "model", "hardlink"},
      {"save.onnx", "model", "dotted"},   {"save.onnx", "x", "path"},        {"log.jsonl", "y", "symlink"},
      {"log.jsonl", "config", "path"},    {"--trace", "model", "hardlink"},  {"--trace", "x", "dotted"},
  };
  for (const Row& row : rows) {
    SCOPED_TRACE(std::string(row.key) + " onto " + row.target + " by " + row.alias);
    TempDir tmp;
    const Files r = CopyRun(tmp);
    const std::string target = std::string(row.target) == "model" ? r.model
                               : std::string(row.target) == "x"   ? r.x
                               : std::string(row.target) == "y"   ? r.y
                                                                  : r.config;
    std::string path = target;
    if (std::string(row.alias) == "symlink") fs::create_symlink(target, path = tmp / "alias");
    if (std::string(row.alias) == "hardlink") fs::create_hard_link(target, path = tmp / "alias");
    if (std::string(row.alias) == "dotted") path = tmp / ("./" + fs::path(target).filename().string());
    std::vector<std::string> before;
    for (const std::string& in : r.Inputs()) before.push_back(Slurp(in));
    const bool trace = std::string(row.key) == "--trace";
    Output o = Train(r, trace ? std::vector<std::string>{"--trace", path} : std::vector<std::string>{"--set", std::string(row.key) + "=" + path});
    ExpectRefusedBeforeTraining(o, {trace ? "[train] --trace: '" : "[config] " + r.config + ": " + row.key + ": '", "an input of the run"});
    for (size_t i = 0; i < before.size(); ++i) EXPECT_TRUE(Slurp(r.Inputs()[i]) == before[i]) << r.Inputs()[i] << " changed";
  }
}

// Two outputs onto one file, however named, are refused: one would replace the other.
TEST(Outputs, NeverTwoOutputsOnOneFile) {
  TempDir tmp;
  const Files r = CopyRun(tmp);
  fs::create_directories(tmp / "sub");
  Output both = Train(r, {"--set", "log.jsonl=" + tmp / "out", "--set", "save={onnx: " + tmp / "sub/../out" + "}"});
  ExpectRefusedBeforeTraining(both, {"[config] " + r.config + ": ", "the same file as", "log.jsonl", "save.onnx"});
  const std::string old = tmp.Write("old.jsonl", "a previous run's log\n");
  fs::create_symlink(old, tmp / "link.jsonl");
  Output trace = Train(r, {"--set", "log.jsonl=" + old, "--trace", tmp / "link.jsonl"});
  ExpectRefusedBeforeTraining(trace, {"the same file as", "log.jsonl", "--trace"});
  EXPECT_EQ(Slurp(old), "a previous run's log\n");
}

// Only a regular file is replaced: a device, a FIFO or a socket at an output's path is refused and
// stays what it was. (Before, save.onnx onto /dev/null renamed the model over the device node.)
// The device is a node of this test's own (mknod, when the user may; /dev/full otherwise, which
// only the log names: a writer that replaces its path would not get to run on the system's node).
TEST(Outputs, OnlyRegularFilesAreReplaced) {
  TempDir tmp;
  const Files r = CopyRun(tmp);
  const std::string fifo = tmp / "fifo", sock = tmp / "sock", dev = tmp / "null";
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  const int s = ::socket(AF_UNIX, SOCK_STREAM, 0);
  sockaddr_un addr{};
  addr.sun_family = AF_UNIX;
  ASSERT_LT(sock.size(), sizeof addr.sun_path);
  sock.copy(addr.sun_path, sock.size());
  ASSERT_EQ(::bind(s, reinterpret_cast<sockaddr*>(&addr), sizeof addr), 0);
  const bool own_device = ::mknod(dev.c_str(), S_IFCHR | 0666, makedev(1, 3)) == 0;
  struct Row {
    std::vector<std::string> args;
    std::string path;
  };
  std::vector<Row> rows = {{{"--set", "save={onnx: " + fifo + "}"}, fifo},
                           {{"--set", "log.jsonl=" + sock}, sock},
                           {{"--trace", fifo}, fifo},
                           {{"--set", "log.jsonl=/dev/full"}, "/dev/full"}};
  if (own_device) {
    rows.push_back({{"--set", "save={onnx: " + dev + "}"}, dev});
    rows.push_back({{"--trace", dev}, dev});
  }
  for (const Row& row : rows) {
    SCOPED_TRACE(row.args[0] + " " + row.args[1]);
    struct stat before {};
    ASSERT_EQ(::lstat(row.path.c_str(), &before), 0);
    Output o = Train(r, row.args);
    ExpectRefusedBeforeTraining(o, {"'" + row.path + "' is not a regular file (a device, a FIFO or a socket)"});
    struct stat after {};
    ASSERT_EQ(::lstat(row.path.c_str(), &after), 0) << row.path << " is gone";
    EXPECT_EQ(after.st_ino, before.st_ino) << row.path << " was replaced";
    EXPECT_EQ(after.st_mode & S_IFMT, before.st_mode & S_IFMT) << row.path << " was replaced";
  }
  ::close(s);
}

// An output whose folder cannot take a file is refused before training (before, a save path under
// a regular file failed only once training had ended, and the run was lost). As root, permission
// bits do not stop a write, so the folder is a regular file's path; as another user, also a folder
// without write permission. The run is long: refused quickly, it prints no step.
TEST(Outputs, UnwritableFolderIsRefusedBeforeTraining) {
  TempDir tmp;
  const Files r = CopyRun(tmp, 1000000);
  tmp.Write("file", "not a folder\n");
  std::vector<std::pair<std::vector<std::string>, std::string>> rows = {
      {{"--set", "save={onnx: " + tmp / "file/trained.onnx" + "}"}, "save.onnx: cannot create a file in '" + tmp / "file" + "': Not a directory"},
      {{"--set", "log.jsonl=" + tmp / "file/sub/m.jsonl"}, "log.jsonl: cannot create a file in '" + tmp / "file/sub" + "'"},
      {{"--trace", tmp / "file/t.json"}, "--trace: cannot create a file in '" + tmp / "file" + "': Not a directory"},
  };
  if (::geteuid() != 0) {
    fs::create_directories(tmp / "locked");
    fs::permissions(tmp / "locked", fs::perms::owner_read | fs::perms::owner_exec);
    rows.push_back({{"--set", "save={onnx: " + tmp / "locked/trained.onnx" + "}"}, "Permission denied"});
  }
  for (const auto& [args, fragment] : rows) {
    SCOPED_TRACE(args[1]);
    Output o = Train(r, args, "", 60);
    ExpectRefusedBeforeTraining(o, {fragment});
  }
}

// A log write that fails (the disk full: here the file-size limit, which fails a write past it
// with EFBIG) stops the run with exit 1 and says why. Failing at the first record, the previous log
// at the path survives; later, the log holds the whole records written before. No temporary file
// is left. (Before, every write failed silently and the run exited 0.)
TEST(Outputs, FailedLogWriteIsAnError) {
  TempDir tmp;
  const Files r = CopyRun(tmp, 50);
  const std::string log = tmp.Write("m.jsonl", "a previous run's log\n");
  // SIGXFSZ ignored, so that the write fails instead of the process. 0 blocks: no record.
  Output first = Train(r, {"--set", "log.jsonl=" + log}, "trap '' XFSZ; ulimit -f 0; ");
  EXPECT_EQ(first.code, 1) << first.out;
  EXPECT_NE(first.out.find("[train] log.jsonl: cannot write '" + log + "': File too large"), std::string::npos) << first.out;
  EXPECT_EQ(StepLines(first.out), 1) << "the run stops at the failed write\n" << first.out;
  EXPECT_EQ(Slurp(log), "a previous run's log\n");
  // 1 block of 512 bytes: about three records.
  Output later = Train(r, {"--set", "log.jsonl=" + log}, "trap '' XFSZ; ulimit -f 1; ");
  EXPECT_EQ(later.code, 1) << later.out;
  EXPECT_NE(later.out.find("[train] log.jsonl: cannot write '" + log + "': File too large"), std::string::npos) << later.out;
  std::ifstream f(log);
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    ++n;
    EXPECT_EQ(line.rfind("{\"step\": " + std::to_string(n) + ",", 0), 0u) << line;
    EXPECT_EQ(line.back(), '}') << "whole records only: " << line;
  }
  EXPECT_GE(n, 1);
  EXPECT_EQ(StepLines(later.out), n + 1) << "the run stops at the failed write\n" << later.out;
  EXPECT_EQ(Slurp(log).back(), '\n');
  EXPECT_EQ(Extra(tmp.path(), r.Inputs()), std::vector<std::string>{"m.jsonl"});
}

// The same for the saved model and the trace: exit 1 naming the path and the reason, the file at
// the path untouched, nothing left beside it.
TEST(Outputs, FailedSaveOrTraceWriteIsAnError) {
  TempDir tmp;
  const Files r = CopyRun(tmp);
  const std::string saved = tmp.Write("trained.onnx", "a previous model\n");
  // 40 blocks: 20 KiB, a fifth of the model.
  Output save = Train(r, {"--set", "save={onnx: " + saved + "}"}, "trap '' XFSZ; ulimit -f 40; ");
  EXPECT_EQ(save.code, 1) << save.out;
  EXPECT_NE(save.out.find("[onnx] cannot write '" + saved + "': File too large"), std::string::npos) << save.out;
  EXPECT_EQ(Slurp(saved), "a previous model\n");
  const std::string trace = tmp.Write("t.json", "a previous trace\n");
  Output t = Train(r, {"--trace", trace}, "trap '' XFSZ; ulimit -f 1; ");
  EXPECT_EQ(t.code, 1) << t.out;
  EXPECT_NE(t.out.find("[actor] --trace: cannot write '" + trace + "': File too large"), std::string::npos) << t.out;
  EXPECT_EQ(Slurp(trace), "a previous trace\n");
  EXPECT_EQ((Extra(tmp.path(), r.Inputs())), (std::vector<std::string>{"t.json", "trained.onnx"}));
}

// A run that succeeds writes each output whole at its path (folders made as needed), through a
// symbolic link to where it points (the link stays), and leaves no temporary file.
TEST(Outputs, WrittenWholeAndNothingLeftBeside) {
  TempDir tmp;
  const Files r = CopyRun(tmp);
  fs::create_directories(tmp / "real");
  fs::create_symlink(tmp / "real/model.onnx", tmp / "latest.onnx");
  Output o = Train(r, {"--set", "log.jsonl=" + tmp / "out/m.jsonl", "--set", "save={onnx: " + tmp / "latest.onnx" + "}",
                       "--trace", tmp / "out/t.json"});
  ASSERT_EQ(o.code, 0) << o.out;
  EXPECT_EQ((Extra(tmp / "out", {})), (std::vector<std::string>{"m.jsonl", "t.json"}));
  EXPECT_EQ(Extra(tmp / "real", {"model.onnx"}), std::vector<std::string>{});
  EXPECT_TRUE(fs::is_symlink(tmp / "latest.onnx"));
  EXPECT_GT(fs::file_size(tmp / "real/model.onnx"), 100000u);
  const std::string log = Slurp(tmp / "out/m.jsonl");
  EXPECT_EQ(log.rfind("{\"step\": 1,", 0), 0u) << log;
  EXPECT_EQ(log.back(), '\n') << log;
  const std::string t = Slurp(tmp / "out/t.json");
  EXPECT_EQ(t.substr(t.size() - 4), "\n]}\n") << "the trace is whole";
}

// The pieces, without the binary: a relative symbolic link to a file not there yet is written
// through (the link stays); an AtomicFile given up leaves the old file and nothing beside it.
TEST(Outputs, AtomicFileThroughALinkAndGivenUp) {
  TempDir tmp;
  fs::create_directories(tmp / "sub");
  fs::create_symlink("sub/../real.txt", tmp / "link");
  ASSERT_TRUE(fr::WriteFileAtomically(tmp / "link", "new\n").ok());
  EXPECT_TRUE(fs::is_symlink(tmp / "link"));
  EXPECT_EQ(Slurp(tmp / "real.txt"), "new\n");
  {
    auto f = fr::AtomicFile::Create(tmp / "link");
    ASSERT_TRUE(f.ok()) << f.status().message();
    ASSERT_TRUE(f->Append("half of a file").ok());
    EXPECT_TRUE(fs::exists(f->temp_path()));
  }
  EXPECT_EQ(Slurp(tmp / "real.txt"), "new\n");
  EXPECT_EQ((Extra(tmp.path(), {})), (std::vector<std::string>{"link", "real.txt", "sub"}));
}

// A mapped file (what a checkpoint's restore reads) has the file's bytes, moves with them, and
// is refused with the path for a folder, a FIFO (at once, not waiting for a writer) and nothing.
TEST(Outputs, MappedFileReadsRegularFilesOnly) {
  TempDir tmp;
  const std::string text(100000, 'x');
  ASSERT_TRUE(fr::WriteFileAtomically(tmp / "f", text + "end").ok());
  auto m = fr::MappedFile::Open(tmp / "f");
  ASSERT_TRUE(m.ok()) << m.status().message();
  fr::MappedFile moved = std::move(*m);
  EXPECT_EQ(moved.bytes(), text + "end");
  ASSERT_TRUE(fr::WriteFileAtomically(tmp / "empty", "").ok());
  auto e = fr::MappedFile::Open(tmp / "empty");
  ASSERT_TRUE(e.ok()) << e.status().message();
  EXPECT_EQ(e->bytes(), "");
  ASSERT_EQ(::mkfifo((tmp / "fifo").c_str(), 0600), 0);
  for (const char* bad : {"sub-missing", "fifo", "."}) {
    auto b = fr::MappedFile::Open(tmp / bad);
    ASSERT_FALSE(b.ok()) << bad;
    EXPECT_NE(b.status().message().find("cannot read '" + (tmp / bad) + "'"), std::string::npos) << b.status().message();
  }
}

// Two outputs not written yet, one named through a symbolic link to the other's folder, are one file.
TEST(Outputs, OutputsNotWrittenYetAreComparedByResolvedPath) {
  TempDir tmp;
  fs::create_directories(tmp / "real");
  fs::create_directory_symlink(tmp / "real", tmp / "alias");
  const fr::Status s = fr::CheckOutput({"log.jsonl", tmp / "alias/m.jsonl"}, {{"save.onnx", tmp / "real/m.jsonl"}}, {});
  EXPECT_FALSE(s.ok());
  EXPECT_NE(s.message().find("is the same file as save.onnx"), std::string::npos) << s.message();
  EXPECT_TRUE(fr::CheckOutput({"log.jsonl", tmp / "alias/m.jsonl"}, {{"save.onnx", tmp / "real/m.onnx"}}, {}).ok());
  EXPECT_EQ(Extra(tmp / "real", {}), std::vector<std::string>{}) << "the folder probe leaves nothing";
}

}  // namespace
