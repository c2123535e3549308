// Checkpoints and resume (driver/checkpoint.h): a run stopped at a checkpoint and resumed trains
// on as the run that never stopped, bit for bit on the same layout and within 1e-5 on another;
// every checkpoint that does not fit is refused with exit code 2, naming the file or tensor.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <cstdlib>
#include <chrono>
#include <csignal>
#include <filesystem>
#include <random>
#include <thread>
#include <fstream>
#include <string>
#include <vector>

#include "../flowrun_cmd.h"
#include "../temp_dir.h"

namespace {

namespace fs = std::filesystem;
using fr::testing::Quote;
using fr::testing::TempDir;

constexpr double kJobSeconds = 240;

std::string Bin() {
  const char* b = std::getenv("FLOWRUN_BIN");
  return b ? b : "build/src/flowrun";
}

struct Job {
  int code = -1;
  std::string out;
  std::vector<double> loss, gnorm;
};

// `flowrun train CONFIG` for 20 steps on `ranks` ranks with `sets`, logging every step to `jsonl`.
Job Train(const std::string& config, int ranks, const std::vector<std::string>& sets, const std::string& jsonl,
          const std::string& extra = "") {
  std::string cmd = ranks > 1 ? "mpirun --oversubscribe --allow-run-as-root -n " + std::to_string(ranks) + " " : "";
  cmd += Bin() + " train " + config + " --set train.steps=20 --set log.every=1 --set log.jsonl=" + Quote(jsonl);
  for (const std::string& s : sets) cmd += " --set " + Quote(s);
  cmd += " " + extra;
  const fr::testing::Output o = fr::testing::Shell(cmd, kJobSeconds);
  Job r;
  r.code = o.code;
  r.out = cmd + "\n" + o.out + (o.left ? "\n[test] processes outlived the job" : "");
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) {
    auto num = [&](const std::string& key) {
      const size_t at = line.find("\"" + key + "\":");
      return at == std::string::npos ? NAN : std::strtod(line.c_str() + at + key.size() + 3, nullptr);
    };
    r.loss.push_back(num("loss"));
    r.gnorm.push_back(num("gnorm"));
  }
  return r;
}

struct Layout {
  const char* name;
  int ranks;
  std::vector<std::string> sets;
};

const Layout kOne{"one rank", 1, {}};
const Layout kDp2{"DP2", 2, {"parallel.sbp={x: [\"S(0)\"]}"}};
const Layout kTp2{"TP2", 2, {"parallel.sbp={fc1.weight: [\"S(0)\"]}"}};
const Layout kPp2{"PP2", 2, {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]"}};
const Layout kZero{"ZeRO", 2, {"parallel.zero=true", "parallel.sbp={x: [\"S(0)\"]}"}};
const Layout k2x2{"2x2", 4, {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", B], fc1.weight: [B, \"S(0)\"]}"}};

std::vector<std::string> With(std::vector<std::string> a, const std::vector<std::string>& b) {
  a.insert(a.end(), b.begin(), b.end());
  return a;
}

// Trains 20 steps on `saved` with a checkpoint every 10, then resumes from step 10 on `resumed`:
// steps 11-20 must match the uninterrupted run's, exactly when `exact`, else within 1e-5.
void ExpectResumeMatches(const std::string& config, const std::vector<std::string>& both, const Layout& saved,
                         const Layout& resumed, bool exact) {
  SCOPED_TRACE(config + ": saved on " + saved.name + ", resumed on " + resumed.name);
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string ck = "checkpoint={dir: " + (root / "ck").string() + ", every: 10}";
  const Job full = Train(config, saved.ranks, With(With(both, saved.sets), {ck}), (root / "full.jsonl").string());
  ASSERT_EQ(full.code, 0) << full.out;
  ASSERT_EQ(full.loss.size(), 20u) << full.out;
  ASSERT_TRUE(fs::exists(root / "ck" / "step-00000010" / "COMMIT")) << full.out;
  fs::remove_all(root / "ck" / "step-00000020");  // as if the run had died after step 10's checkpoint
  const Job rest = Train(config, resumed.ranks, With(With(both, resumed.sets), {ck}), (root / "rest.jsonl").string(), "--resume");
  ASSERT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resumed: "), std::string::npos) << rest.out;
  ASSERT_EQ(rest.loss.size(), 10u) << rest.out;
  for (size_t i = 0; i < 10; ++i) {
    if (exact) {
      EXPECT_EQ(rest.loss[i], full.loss[10 + i]) << "step " << 11 + i << "\n" << rest.out;
      EXPECT_EQ(rest.gnorm[i], full.gnorm[10 + i]) << "step " << 11 + i;
    } else {
      EXPECT_NEAR(rest.loss[i], full.loss[10 + i], 1e-5 * std::fabs(full.loss[10 + i])) << "step " << 11 + i << "\n" << rest.out;
    }
  }
}

const char* kMlp = "configs/mlp.yaml";
const std::vector<std::string> kShuffle = {"data.order=shuffle"};

TEST(Checkpoint, ResumeOnTheSameLayoutIsBitIdentical_1n1d) {
  ExpectResumeMatches(kMlp, kShuffle, kOne, kOne, true);
  ExpectResumeMatches("tests/golden/mlp_sgd.yaml", kShuffle, kOne, kOne, true);
}
TEST(Checkpoint, ResumeOnTheSameLayoutIsBitIdentical_1n2d) {
  ExpectResumeMatches(kMlp, kShuffle, kDp2, kDp2, true);
  ExpectResumeMatches(kMlp, kShuffle, kZero, kZero, true);
  ExpectResumeMatches(kMlp, kShuffle, kPp2, kPp2, true);
}
// gpt_mini with AdamW and with SGD; BERT with dropout on (its masks follow the global step).
TEST(Checkpoint, ResumeGptAndDropoutOnTheSameLayout_1n2d) {
  const Layout dp{"DP2", 2, {"parallel.sbp={idx: [\"S(0)\"]}"}};
  ExpectResumeMatches("configs/gpt.yaml", {"schedule.warmup=2"}, dp, dp, true);
  ExpectResumeMatches("tests/golden/gpt_sgd.yaml", {}, kOne, kOne, true);
  const Layout bert{"DP2", 2, {"parallel.sbp={input_ids: [\"S(0)\"]}"}};
  ExpectResumeMatches("tests/golden/exports/bert_dropout_torchscript_sgd.yaml", {"model.dropout=true"}, bert, bert, true);
}

// The checkpoint holds the logical tensors: any layout resumes any other's. Every ordered pair of
// one rank, DP2, TP2, PP2, ZeRO and 2x2: each layout trains 20 steps with a checkpoint at 10, and
// every other layout resumes that checkpoint for steps 11-20, within 1e-5 of the saver's losses.
// In the stress suite: its 30 resumes take the restore path the Checkpoint tests take, 20 s in
// the release build and 90 s under the sanitizers, which leave the stress suite out.
TEST(CheckpointStress, ResumeOnEveryOtherLayout_2x2) {
  const std::vector<const Layout*> layouts = {&kOne, &kDp2, &kTp2, &kPp2, &kZero, &k2x2};
  TempDir tmp;
  const fs::path root = tmp.path();
  for (const Layout* saved : layouts) {
    const fs::path dir = root / (std::string("ck_") + std::to_string(saved - &kOne));
    const std::string ck = "checkpoint={dir: " + dir.string() + ", every: 10}";
    const Job full = Train(kMlp, saved->ranks, With(saved->sets, {ck}), (root / "full.jsonl").string());
    ASSERT_EQ(full.code, 0) << full.out;
    ASSERT_EQ(full.loss.size(), 20u) << full.out;
    const fs::path step10 = dir / "step-00000010";
    ASSERT_TRUE(fs::exists(step10 / "COMMIT")) << full.out;
    for (const Layout* resumed : layouts) {
      if (resumed == saved) continue;  // the same layout: bit for bit, above
      SCOPED_TRACE(std::string("saved on ") + saved->name + ", resumed on " + resumed->name);
      const Job rest = Train(kMlp, resumed->ranks, With(resumed->sets, {"checkpoint={dir: " + (root / "resumed").string() + "}"}),
                             (root / "rest.jsonl").string(), "--resume " + step10.string());
      ASSERT_EQ(rest.code, 0) << rest.out;
      ASSERT_EQ(rest.loss.size(), 10u) << rest.out;
      for (size_t i = 0; i < 10; ++i)
        EXPECT_NEAR(rest.loss[i], full.loss[10 + i], 1e-5 * std::fabs(full.loss[10 + i])) << "step " << 11 + i << "\n" << rest.out;
      fs::remove_all(root / "resumed");
    }
  }
}

// BatchNorm's running statistics are part of the state: a resumed ResNet saves the same model.
TEST(Checkpoint, RunningStatisticsResume_1n1d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string cfg = "tests/golden/exports/resnet_torchscript_sgd.yaml";
  const std::string ck = "checkpoint={dir: " + (root / "ck").string() + ", every: 10}";
  const Job full = Train(cfg, 1, {ck, "save.onnx=" + (root / "full.onnx").string()}, (root / "a.jsonl").string());
  ASSERT_EQ(full.code, 0) << full.out;
  fs::remove_all(root / "ck" / "step-00000020");
  const Job rest = Train(cfg, 1, {ck, "save.onnx=" + (root / "rest.onnx").string()}, (root / "b.jsonl").string(), "--resume");
  ASSERT_EQ(rest.code, 0) << rest.out;
  std::ifstream a(root / "full.onnx", std::ios::binary), b(root / "rest.onnx", std::ios::binary);
  const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
  EXPECT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "the resumed run saved another model";
}

TEST(Checkpoint, KeepsTheNewest_1n1d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const Job r = Train(kMlp, 1, {"checkpoint={dir: " + (root / "ck").string() + ", every: 4, keep: 2}"}, (root / "a.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  std::vector<std::string> left;
  for (const auto& e : fs::directory_iterator(root / "ck")) left.push_back(e.path().filename().string());
  std::sort(left.begin(), left.end());
  EXPECT_EQ(left, (std::vector<std::string>{"step-00000016", "step-00000020"}));
}

// `flowrun inspect` shows a checkpoint, and --export writes the model `save:` writes, byte for byte.
TEST(Checkpoint, InspectAndExport_1n2d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string dir = (root / "ck").string();
  const Job r = Train(kMlp, 2, {"parallel.sbp={x: [\"S(0)\"]}", "checkpoint={dir: " + dir + ", every: 10}",
                                "save.onnx=" + (root / "saved.onnx").string()},
                      (root / "a.jsonl").string());
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string exported = (root / "exported.onnx").string();
  const fr::testing::Output o = fr::testing::Shell(Bin() + " inspect " + dir + " --config configs/mlp.yaml --export " + Quote(exported), 120);
  ASSERT_EQ(o.code, 0) << o.out;
  for (const std::string& want : {"checkpoint: " + dir + "/step-00000020", std::string("step: 20"), std::string("written by: 2 rank(s)"),
                                  std::string("fc1.weight:state1"), std::string("+   steps: 300"), std::string("-   steps: 20")})
    EXPECT_NE(o.out.find(want), std::string::npos) << want << "\n" << o.out;
  std::ifstream a(root / "saved.onnx", std::ios::binary), b(exported, std::ios::binary);
  const std::string x((std::istreambuf_iterator<char>(a)), {}), y((std::istreambuf_iterator<char>(b)), {});
  EXPECT_FALSE(x.empty());
  EXPECT_TRUE(x == y) << "the exported model differs from the one the run saved";
  const fr::testing::Output bad = fr::testing::Shell(Bin() + " inspect " + (root / "none").string(), 60);
  EXPECT_EQ(bad.code, 2) << bad.out;
}

// A folder a checkpoint cannot go to is found before the first step, not at the first checkpoint.
TEST(Checkpoint, AnUnwritableFolderIsRefusedBeforeTraining_1n1d) {
  TempDir tmp;
  const std::string file = tmp.Write("a_file", "x");
  const Job r = Train(kMlp, 1, {"checkpoint={dir: " + file + ", every: 10}"}, tmp / "a.jsonl");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("checkpoint.dir: '" + file + "' is not a folder"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
}

// A checkpoint that does not fit is refused before training, exit code 2, naming what is wrong.
TEST(Checkpoint, WhatDoesNotFitIsRefused_1n1d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string dir = (root / "ck").string();
  const std::string ck = "checkpoint={dir: " + dir + ", every: 10}";
  ASSERT_EQ(Train(kMlp, 1, {ck}, (root / "a.jsonl").string()).code, 0);
  const fs::path step = root / "ck" / "step-00000020";
  auto refused = [&](const std::vector<std::string>& sets, const std::string& expect, const std::string& extra = "--resume") {
    const Job r = Train(kMlp, 1, sets, (root / "b.jsonl").string(), extra);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(expect), std::string::npos) << r.out;
  };
  refused({ck, "train.seed=7"}, "trained with train.seed 1234, the config has 7");
  refused({ck, "train.global_batch=32", "train.micro_batch=16"}, "trained with train.global_batch 64");
  refused({ck, "train.steps=10"}, "at step 20, past train.steps 10");
  refused({}, "--resume needs a folder");
  refused({}, "nothing: cannot read the folder", "--resume " + (root / "nothing").string());
  fs::create_directories(root / "empty");
  refused({}, "empty: no committed checkpoint", "--resume " + (root / "empty").string());
  {  // another model
    const Job r = Train("configs/mlp_ln_gelu.yaml", 1, {"train.seed=1234", "train.global_batch=64", "train.micro_batch=32"},
                        (root / "m.jsonl").string(), "--resume " + dir);
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find("[checkpoint] " + dir + "/step-00000020: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("tensor '"), std::string::npos) << r.out;
  }
  // A flipped byte: the checksum; a cut file: its size. Both name the file.
  const std::string file = (step / "rank-00000.safetensors").string();
  std::string bytes;
  {
    std::ifstream f(file, std::ios::binary);
    bytes.assign((std::istreambuf_iterator<char>(f)), {});
  }
  std::string flipped = bytes;
  flipped[flipped.size() / 2] ^= 1;
  std::ofstream(file, std::ios::binary | std::ios::trunc) << flipped;
  refused({ck}, file + ": checksum mismatch");
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes.substr(0, bytes.size() / 2);
  refused({ck}, file + ": " + std::to_string(bytes.size() / 2) + " bytes where the manifest says " + std::to_string(bytes.size()));
  // Without its commit marker a folder is not a checkpoint: the one before it is used.
  std::ofstream(file, std::ios::binary | std::ios::trunc) << bytes;
  fs::remove(step / "COMMIT");
  const Job older = Train(kMlp, 1, {ck}, (root / "c.jsonl").string(), "--resume");
  EXPECT_EQ(older.code, 0) << older.out;
  EXPECT_NE(older.out.find("resumed: " + dir + "/step-00000010"), std::string::npos) << older.out;
}


// Issue 31's preemption: a run with checkpoint.dir signalled mid-run finishes the steps begun on
// every rank, writes a checkpoint, and exits 0; the resumed run trains the rest. Both logs
// together must be the uninterrupted run's, bit for bit.
enum class Preempt { kSigtermToEveryRank, kSigtermToRank1, kSigusr1ToMpirun };

std::vector<double> Losses(const fs::path& jsonl) {
  std::vector<double> v;
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) v.push_back(std::strtod(line.c_str() + line.find("\"loss\":") + 7, nullptr));
  return v;
}

// The run is as long as it takes the signal to come (1.5 s of training, however fast the build);
// with a constant learning rate the length of a run does not change its steps, so the run the
// others are compared with is as long as the preempted one plus the 10 steps resumed after it.
void ExpectPreemptionResumes(const Layout& l, Preempt how) {
  SCOPED_TRACE(std::string("preempted on ") + l.name + " by " +
               (how == Preempt::kSigtermToEveryRank ? "SIGTERM to every rank" : how == Preempt::kSigtermToRank1 ? "SIGTERM to rank 1" : "SIGUSR1 to mpirun"));
  TempDir tmp;
  const fs::path root = tmp.path();
  auto cmd = [&](int64_t steps, const fs::path& jsonl, const std::string& extra) {
    std::string c = "exec ";
    if (l.ranks > 1) c += "mpirun --oversubscribe --allow-run-as-root -n " + std::to_string(l.ranks) + " ";
    c += Bin() + " train " + kMlp + " --set train.steps=" + std::to_string(steps) + " --set log.every=1 --set log.jsonl=" +
         Quote(jsonl.string()) + " --set data.order=shuffle --set schedule.type=constant";
    for (const std::string& s : l.sets) c += " --set " + Quote(s);
    return c + " " + extra;
  };
  const std::string ck = "--set 'checkpoint={dir: " + (root / "ck").string() + "}'";
  fr::testing::Job j(cmd(100000000, root / "a.jsonl", ck));
  const std::vector<pid_t> ranks = l.ranks > 1 ? fr::testing::WaitForRanks(j, l.ranks) : std::vector<pid_t>{j.pid()};
  ASSERT_EQ(ranks.size(), static_cast<size_t>(l.ranks)) << j.out();
  std::this_thread::sleep_for(std::chrono::milliseconds(1500));  // training
  if (how == Preempt::kSigtermToEveryRank) {
    for (pid_t p : ranks) ::kill(p, SIGTERM);
  } else if (how == Preempt::kSigtermToRank1) {
    ::kill(ranks[1], SIGTERM);
  } else {
    ::kill(j.pid(), SIGUSR1);
  }
  const fr::testing::Output a = j.Finish(60);
  const std::string tail = a.out.size() > 3000 ? a.out.substr(a.out.size() - 3000) : a.out;
  ASSERT_EQ(a.code, 0) << tail;
  EXPECT_EQ(a.left, 0) << tail;
  const size_t at = a.out.find("preempted (SIGTERM or SIGUSR1): stopped after step ");
  ASSERT_NE(at, std::string::npos) << tail;
  const int64_t stopped = std::strtoll(a.out.c_str() + at + 51, nullptr, 10);
  ASSERT_GT(stopped, 0) << tail;
  char folder[32];
  std::snprintf(folder, sizeof folder, "step-%08lld", static_cast<long long>(stopped));
  EXPECT_TRUE(fs::exists(root / "ck" / folder / "COMMIT")) << tail;
  const std::vector<double> first = Losses(root / "a.jsonl");
  ASSERT_EQ(first.size(), static_cast<size_t>(stopped)) << "the log holds every step run";

  const int64_t steps = stopped + 10;
  const fr::testing::Output ref = fr::testing::Shell(cmd(steps, root / "ref.jsonl", ""), kJobSeconds);
  ASSERT_EQ(ref.code, 0) << ref.out.substr(0, 2000);
  const std::vector<double> want = Losses(root / "ref.jsonl");
  ASSERT_EQ(want.size(), static_cast<size_t>(steps));
  for (size_t i = 0; i < first.size(); ++i) ASSERT_EQ(first[i], want[i]) << "step " << i + 1;

  const fr::testing::Output b = fr::testing::Shell(cmd(steps, root / "b.jsonl", ck + " --resume"), kJobSeconds);
  ASSERT_EQ(b.code, 0) << b.out.substr(0, 2000);
  EXPECT_NE(b.out.find("resumed: " + (root / "ck" / folder).string()), std::string::npos) << b.out.substr(0, 2000);
  const std::vector<double> rest = Losses(root / "b.jsonl");
  ASSERT_EQ(rest.size(), 10u);
  for (size_t i = 0; i < rest.size(); ++i) ASSERT_EQ(rest[i], want[static_cast<size_t>(stopped) + i]) << "step " << stopped + 1 + static_cast<int64_t>(i);
}

TEST(Checkpoint, PreemptedRunCheckpointsAndResumes_1n1d) { ExpectPreemptionResumes(kOne, Preempt::kSigtermToEveryRank); }
TEST(Checkpoint, PreemptedRunCheckpointsAndResumes_1n2d) {
  ExpectPreemptionResumes(kDp2, Preempt::kSigtermToRank1);  // the other rank learns it from rank 1
  ExpectPreemptionResumes(kPp2, Preempt::kSigtermToEveryRank);
  ExpectPreemptionResumes(kZero, Preempt::kSigusr1ToMpirun);
}

// A second SIGTERM, or SIGINT, stops at once without writing: exit code 128 + signal.
TEST(Checkpoint, SecondSigtermOrSigintStopsWithoutWriting_1n1d) {
  for (const bool twice : {true, false}) {
    SCOPED_TRACE(twice ? "SIGTERM twice" : "SIGINT");
    TempDir tmp;
    const fs::path root = tmp.path();
    fr::testing::Job j("exec " + Bin() + " train " + kMlp + " --set train.steps=100000000 --set log.every=100000000 --set 'checkpoint={dir: " +
                       (root / "ck").string() + "}'");
    std::this_thread::sleep_for(std::chrono::milliseconds(1500));
    ::kill(j.pid(), twice ? SIGTERM : SIGINT);
    if (twice) {  // a moment apart: two pending SIGTERMs are one
      std::this_thread::sleep_for(std::chrono::milliseconds(20));
      ::kill(j.pid(), SIGTERM);
    }
    const fr::testing::Output r = j.Finish(30);
    EXPECT_EQ(r.code, twice ? 143 : 130) << r.out;
    EXPECT_NE(r.out.find(twice ? "stopped by signal 15" : "stopped by signal 2"), std::string::npos) << r.out;
    EXPECT_FALSE(fs::exists(root / "ck") && !fs::is_empty(root / "ck")) << r.out;
  }
}

// A checkpoint its disk cannot hold: exit code 1 naming the file, and the checkpoint before it
// stays whole and resumes. The disk is a 512 KiB tmpfs: one checkpoint of the MLP (parameters and
// AdamW's moments, 0.3 MB) fits, the second does not. Mounting one needs root, as CI runs.
TEST(Checkpoint, AFullDiskFailsAndKeepsThePreviousCheckpoint_1n1d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const fs::path disk = root / "disk";
  fs::create_directories(disk);
  ASSERT_EQ(std::system(("mount -t tmpfs -o size=512k tmpfs " + Quote(disk.string())).c_str()), 0)
      << "this test mounts a small tmpfs as the full disk, which needs root";
  struct Unmount {
    std::string at;
    ~Unmount() { (void)std::system(("umount -l " + Quote(at)).c_str()); }
  } unmount{disk.string()};
  const std::string dir = (disk / "ck").string();
  const Job full = Train(kMlp, 1, {"checkpoint={dir: " + dir + ", every: 10}"}, (root / "a.jsonl").string());
  EXPECT_EQ(full.code, 1) << full.out;
  EXPECT_NE(full.out.find("[checkpoint] " + dir + ": cannot write '" + dir + "/.tmp-step-00000020/rank-00000.safetensors': No space left on device"),
            std::string::npos) << full.out;
  EXPECT_TRUE(fs::exists(disk / "ck" / "step-00000010" / "COMMIT")) << full.out;
  EXPECT_FALSE(fs::exists(disk / "ck" / "step-00000020")) << full.out;
  const Job rest = Train(kMlp, 1, {"checkpoint={dir: " + (root / "ck2").string() + "}"}, (root / "b.jsonl").string(), "--resume " + dir);
  EXPECT_EQ(rest.code, 0) << rest.out;
  EXPECT_NE(rest.out.find("resumed: " + dir + "/step-00000010"), std::string::npos) << rest.out;
  EXPECT_EQ(rest.loss.size(), 10u) << rest.out;
}

}  // namespace

namespace {

// Issue 31's fault test: SIGKILL at random moments of a run that checkpoints every step (most of
// its time goes to writing them), 50 trials. Each time a later --resume must find a committed
// checkpoint and train on exactly as the run that was never killed. FLOWRUN_STRESS_SEED replays.
TEST(CheckpointStress, KillsDuringWritesLeaveACommittedCheckpoint_1n1d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string bin = Bin();
  auto cmd = [&](const std::string& jsonl, const std::string& extra) {
    return "exec " + bin + " train " + kMlp + " --set train.steps=60 --set log.every=1 --set log.jsonl=" + Quote(jsonl) +
           " --set 'checkpoint={dir: " + (root / "ck").string() + ", every: 1, keep: 3}' " + extra;
  };
  const fr::testing::Output ref = fr::testing::Shell(bin + " train " + kMlp + " --set train.steps=60 --set log.every=1 --set log.jsonl=" +
                                                     Quote((root / "ref.jsonl").string()), kJobSeconds);
  ASSERT_EQ(ref.code, 0) << ref.out;
  std::vector<double> want;
  {
    std::ifstream f(root / "ref.jsonl");
    for (std::string line; std::getline(f, line);) want.push_back(std::strtod(line.c_str() + line.find("\"loss\":") + 7, nullptr));
  }
  ASSERT_EQ(want.size(), 60u);
  const char* given = std::getenv("FLOWRUN_STRESS_SEED");
  const unsigned seed = given ? static_cast<unsigned>(std::strtoul(given, nullptr, 10))
                              : static_cast<unsigned>(std::chrono::steady_clock::now().time_since_epoch().count());
  std::printf("FLOWRUN_STRESS_SEED=%u\n", seed);
  std::mt19937 rng(seed);
  int resumed = 0;
  for (int trial = 0; trial < 50; ++trial) {
    fs::remove_all(root / "ck");
    fr::testing::Job j(cmd((root / "killed.jsonl").string(), ""));
    std::this_thread::sleep_for(std::chrono::milliseconds(150 + rng() % 600));
    ::kill(j.pid(), SIGKILL);
    j.Finish(30);
    if (!fs::exists(root / "ck")) continue;  // killed before its first checkpoint: nothing to resume
    bool any = false;
    for (const auto& e : fs::directory_iterator(root / "ck"))
      any = any || (e.path().filename().string().rfind("step-", 0) == 0 && fs::exists(e.path() / "COMMIT"));
    if (!any) continue;
    // The rest without a checkpoint every step: what is checked is the one resumed from.
    const fr::testing::Output r = fr::testing::Shell(cmd((root / "rest.jsonl").string(), "--resume --set checkpoint.every=0"), kJobSeconds);
    ASSERT_EQ(r.code, 0) << "trial " << trial << "\n" << r.out;
    std::ifstream f(root / "rest.jsonl");
    int lines = 0;
    for (std::string line; std::getline(f, line); ++lines) {
      const long step = std::strtol(line.c_str() + line.find("\"step\":") + 7, nullptr, 10);
      const double loss = std::strtod(line.c_str() + line.find("\"loss\":") + 7, nullptr);
      ASSERT_TRUE(step >= 1 && step <= 60) << line;
      EXPECT_EQ(loss, want[static_cast<size_t>(step - 1)]) << "trial " << trial << ", step " << step;
    }
    const bool at_the_end = r.out.find("/step-00000060 (step 60 of 60)") != std::string::npos;  // killed after the last
    EXPECT_TRUE(lines > 0 || at_the_end) << "trial " << trial << "\n" << r.out;
    for (const auto& e : fs::directory_iterator(root / "ck"))  // what killed writes left is gone
      EXPECT_NE(e.path().filename().string().rfind(".tmp-", 0), 0u) << "trial " << trial << ": " << e.path();
    ++resumed;
  }
  EXPECT_GE(resumed, 25) << "too few kills landed after a first checkpoint to test anything";
}

}  // namespace
