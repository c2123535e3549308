// The command line end to end (DESIGN.md §5, §6 rung 5): every bundled config trains and plans, and
// a table of bad inputs gives the expected exit code and message. Runs the binary named by
// FLOWRUN_BIN (tests/meson.build sets it) from the repository root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <sstream>
#include <string>
#include <vector>

#include "flowrun_cmd.h"
#include "temp_dir.h"

namespace {

namespace fs = std::filesystem;

using fr::testing::Bin;
using fr::testing::Flowrun;
using fr::testing::Output;
using fr::testing::Quote;
using fr::testing::TempDir;

std::string Root() { return fs::current_path().string(); }

std::vector<std::string> Sorted(const std::string& dir, const std::string& ext) {
  std::vector<std::string> v;
  for (const auto& e : fs::directory_iterator(dir))
    if (e.path().extension() == ext) v.push_back(e.path().string());
  std::sort(v.begin(), v.end());
  return v;
}

// A .npy (version 1.0) file: `descr` is "<f4" or "<i8"; `shape` as numpy writes it, e.g. "(8,)".
std::string Npy(const std::string& descr, const std::string& shape, const std::string& data) {
  std::string h = "{'descr': '" + descr + "', 'fortran_order': False, 'shape': " + shape + ", }";
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = "\x93NUMPY";
  out += '\x01';
  out += '\x00';
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + data;
}

template <typename T>
std::string Bytes(const std::vector<T>& v) {
  return std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(T));
}

// A small valid config over the repository's MLP and data; rows replace parts of it.
std::string MlpYaml(const std::string& onnx, const std::string& x, const std::string& y) {
  return "model:\n"
         "  onnx: " + onnx + "\n"
         "  inputs: {x: x}\n"
         "  loss: {type: cross_entropy, logits: logits, labels: y}\n"
         "data:\n"
         "  format: npy\n"
         "  x: " + x + "\n"
         "  y: " + y + "\n"
         "train: {steps: 2, global_batch: 8, micro_batch: 4, seed: 1}\n"
         "optimizer: {type: sgd, lr: 0.01}\n"
         "log: {every: 1}\n";
}

std::string DefaultYaml() {
  return MlpYaml(Root() + "/models/mlp.onnx", Root() + "/data/mlp_x.npy", Root() + "/data/mlp_y.npy");
}

std::string Replace(std::string s, const std::string& from, const std::string& to) {
  size_t at = s.find(from);
  if (at == std::string::npos) {
    ADD_FAILURE() << "'" << from << "' not in the base config";
    return s;
  }
  return s.replace(at, from.size(), to);
}

int CountLines(const std::string& out, const std::string& prefix) {
  std::istringstream is(out);
  int n = 0;
  for (std::string line; std::getline(is, line);) n += line.rfind(prefix, 0) == 0;
  return n;
}

TEST(Cli, Version) {
  Output r = Flowrun({"--version"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("flowrun 0.1.0"), std::string::npos) << r.out;
}

TEST(Cli, Help) {
  Output r = Flowrun({"--help"});
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("train"), std::string::npos) << r.out;
  EXPECT_NE(r.out.find("plan"), std::string::npos) << r.out;
}

// `flowrun ops`: one row per ONNX op type import accepts, with its opsets and kernels.
TEST(Cli, Ops) {
  Output r = Flowrun({"ops"});
  EXPECT_EQ(r.code, 0) << r.out;
  for (const char* row : {"Gemm                 13-21   cpu", "Gelu                 20-21   cpu",
                          "Constant             13-21   none: import resolves it"})
    EXPECT_NE(r.out.find(row), std::string::npos) << row << "\n" << r.out;
}

// parallel.device: cuda. Planning needs no GPU: the tasks go to cuda:0, with copy tasks for the
// host's data and for the loss and norm the host reads. Training without a visible GPU stops at
// once, exit 1, saying why (no GPU, or no CUDA module in a build without nvcc).
TEST(Cli, CudaPlansWithoutAGpuAndTrainsOnlyWithOne) {
  Output p = Flowrun({"plan", "configs/mlp.yaml", "--set", "parallel.device=cuda", "--dump"});
  EXPECT_EQ(p.code, 0) << p.out;
  for (const char* want : {"[compute] compute /fc1/Gemm on cuda:0", "[copy] copy x->cuda:0 on cuda:0",
                           "[copy] copy loss/sum:0->cpu on cuda:0, per step", "[data] data data on cpu"})
    EXPECT_NE(p.out.find(want), std::string::npos) << want << "\n" << p.out;
  Output t = Flowrun({"train", "configs/mlp.yaml", "--set", "parallel.device=cuda"}, "CUDA_VISIBLE_DEVICES= ");
  EXPECT_EQ(t.code, 1) << t.out;
  EXPECT_NE(t.out.find("flowrun: [cuda] "), std::string::npos) << t.out;
  EXPECT_EQ(t.out.find("internal error"), std::string::npos) << t.out;
  // So does every rank of a job, and the job ends with 1.
  Output two = Flowrun({"train", "configs/mlp.yaml", "--set", "parallel.device=cuda"},
                       "CUDA_VISIBLE_DEVICES= mpirun --oversubscribe --allow-run-as-root -n 2 ", 120);
  EXPECT_EQ(two.code, 1) << two.out;
  EXPECT_NE(two.out.find("flowrun: [cuda] "), std::string::npos) << two.out;
  Output tf32 = Flowrun({"plan", "configs/mlp.yaml", "--set", "parallel.tf32=true"});
  EXPECT_EQ(tf32.code, 2) << tf32.out;
  EXPECT_NE(tf32.out.find("parallel.tf32: expected false unless parallel.device is cuda"), std::string::npos) << tf32.out;
}

// Stage globs see the ONNX file's node names: the Erf and the attention's Where are fused into Gelu
// and MaskedSoftmax at import, and still answer to their names (they matched no node before).
TEST(Cli, StageGlobsMatchFusedNodesByTheirOnnxNames) {
  Output r = Flowrun({"plan", "configs/gpt.yaml", "--ranks", "2", "--set",
                      "parallel.stages=[[\"/wte/*\", \"/wpe/*\", \"/Add\", \"/blocks.0/*\", \"/blocks.0/mlp/act/Erf\", "
                      "\"/blocks.0/attn/Where\"], [\"*\"]]"});
  EXPECT_EQ(r.code, 0) << r.out;
}

TEST(Cli, NoSubcommand) {
  Output r = Flowrun({});
  EXPECT_EQ(r.code, 2) << r.out;
  Output u = Flowrun({"frobnicate"});
  EXPECT_EQ(u.code, 2) << u.out;
  // Command-line errors start as every other error does, and name the option.
  Output o = Flowrun({"plan", "configs/mlp.yaml", "--ranks", "0"});
  EXPECT_EQ(o.code, 2) << o.out;
  EXPECT_EQ(o.out.rfind("flowrun: --ranks: ", 0), 0u) << o.out;
}

// save: {onnx: PATH} writes model.onnx with the trained parameters: trained again from it, the
// next step's loss is the one the run that went on computed, to the last printed digit. Full-batch
// steps (global_batch = the 4096 rows) see the same samples, so step 3 of a 3-step run and step 1
// from the model saved after 2 steps read the same weights and data.
TEST(Cli, SavedModelContinuesTheRun) {
  TempDir tmp;
  const std::vector<std::string> batch = {"--set", "train.global_batch=4096", "--set", "train.micro_batch=2048", "--set",
                                          "log.every=1"};
  auto train = [&](std::vector<std::string> args) {
    args.insert(args.begin(), {"train", "configs/mlp.yaml"});
    args.insert(args.end(), batch.begin(), batch.end());
    return Flowrun(args);
  };
  auto losses = [](const std::string& jsonl) {
    std::vector<std::string> out;
    std::ifstream f(jsonl);
    for (std::string line; std::getline(f, line);) out.push_back(line.substr(line.find("\"loss\":"), 22));
    return out;
  };
  const std::string saved = tmp / "trained.onnx";
  Output on = train({"--set", "train.steps=3", "--set", "log.jsonl=" + tmp / "on.jsonl"});
  ASSERT_EQ(on.code, 0) << on.out;
  Output save = train({"--set", "train.steps=2", "--set", "save={onnx: " + saved + "}"});
  ASSERT_EQ(save.code, 0) << save.out;
  EXPECT_NE(save.out.find("saved: " + saved), std::string::npos) << save.out;
  Output again = train({"--set", "train.steps=1", "--set", "model.onnx=" + saved, "--set", "log.jsonl=" + tmp / "again.jsonl"});
  ASSERT_EQ(again.code, 0) << again.out;
  const std::vector<std::string> a = losses(tmp / "on.jsonl"), b = losses(tmp / "again.jsonl");
  ASSERT_EQ(a.size(), 3u);
  ASSERT_EQ(b.size(), 1u);
  EXPECT_EQ(b[0], a[2]);
  EXPECT_NE(b[0], a[0]) << "the saved model is the trained one, not the original";
}

// A tied head (the TorchScript exporter's transposed copy of the embedding table) is saved as the
// trained table's transpose, so that the saved model ties again on import, as the original did.
TEST(Cli, SavedTiedHeadIsTheTrainedTableTransposed) {
  TempDir tmp;
  const std::string saved = tmp / "tied.onnx";
  const std::string tie = "tied: onnx::MatMul_591 is the transpose of lm.transformer.wte.weight";
  Output plan = Flowrun({"plan", "tests/golden/exports/gpt2_torchscript_sgd.yaml"});
  ASSERT_EQ(plan.code, 0) << plan.out;
  EXPECT_NE(plan.out.find(tie), std::string::npos) << plan.out;
  Output train = Flowrun({"train", "tests/golden/exports/gpt2_torchscript_sgd.yaml", "--set", "train.steps=2", "--set",
                          "save={onnx: " + saved + "}"});
  ASSERT_EQ(train.code, 0) << train.out;
  Output again = Flowrun({"plan", "tests/golden/exports/gpt2_torchscript_sgd.yaml", "--set", "model.onnx=" + saved});
  ASSERT_EQ(again.code, 0) << again.out;
  EXPECT_NE(again.out.find(tie), std::string::npos) << again.out;
}

TEST(Cli, EveryConfigTrains) {
  TempDir tmp;
  auto configs = Sorted("configs", ".yaml");
  ASSERT_GE(configs.size(), 3u);
  for (const std::string& cfg : configs) {
    SCOPED_TRACE(cfg);
    // Warmup may not exceed the steps, so it is shortened with them. The bundled configs may log to
    // runs/; the test's log goes to its own directory.
    Output r = Flowrun({"train", cfg, "--set", "train.steps=3", "--set", "log.every=1", "--set", "schedule.warmup=1",
                        "--set", "log.jsonl=" + tmp / (fs::path(cfg).stem().string() + ".jsonl")});
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_EQ(CountLines(r.out, "step "), 3) << r.out;
    for (int s = 1; s <= 3; ++s)
      EXPECT_NE(r.out.find("step " + std::to_string(s) + "/3 | loss "), std::string::npos) << r.out;
    EXPECT_EQ(r.out.find("nan"), std::string::npos) << r.out;
  }
}

TEST(Cli, EveryConfigPlans) {
  for (const std::string& cfg : Sorted("configs", ".yaml")) {
    SCOPED_TRACE(cfg);
    Output r = Flowrun({"plan", cfg, "--dump"});
    EXPECT_EQ(r.code, 0) << r.out;
    EXPECT_NE(r.out.find("== ops: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("== tasks: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("rank 0: "), std::string::npos) << r.out;
    EXPECT_GT(CountLines(r.out, "  task "), 5) << r.out;
    for (const char* format : {"json", "dot"}) {
      Output f = Flowrun({"plan", cfg, "--format", format});
      EXPECT_EQ(f.code, 0) << f.out;
      EXPECT_NE(f.out.find(std::string(format) == "json" ? "\"ops\": [" : "digraph plan {"), std::string::npos) << f.out;
    }
    Output s = Flowrun({"plan", cfg});
    EXPECT_EQ(s.code, 0) << s.out;
    EXPECT_NE(s.out.find(" tasks, "), std::string::npos) << s.out;
  }
}

struct BadRun {
  const char* name;
  // Writes what the row needs into `tmp` and returns flowrun's arguments.
  std::vector<std::string> (*setup)(const TempDir& tmp);
  int code;
  std::vector<std::string> fragments;  // each must appear in the output
};

std::vector<std::string> TrainYaml(const TempDir& tmp, const std::string& yaml) {
  return {"train", tmp.Write("bad.yaml", yaml)};
}

const std::vector<BadRun>& BadRuns() {
  static const std::vector<BadRun> kRows = {
      {"unknown_key",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), "train: {steps: 2", "train: {stpes: 2")); },
       2, {"[config]", "bad.yaml:", "unknown key 'stpes'", "did you mean 'steps'"}},
      {"quoted_number",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), "steps: 2", "steps: \"2\"")); },
       2, {"[config]", "bad.yaml:9:", "train.steps", "expected an integer"}},
      {"config_missing", [](const TempDir& t) { return std::vector<std::string>{"train", t / "absent.yaml"}; },
       2, {"[config]", "cannot read", "absent.yaml"}},
      {"onnx_missing",
       [](const TempDir& t) {
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/models/mlp.onnx", t / "nope.onnx"));
       },
       2, {"[onnx] cannot read", "nope.onnx"}},
      {"onnx_garbage",
       [](const TempDir& t) {
         std::string bad = t.Write("garbage.onnx", "\x08\x07 definitely not an onnx model \xff\xff\xff");
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/models/mlp.onnx", bad));
       },
       2, {"[onnx]", "garbage.onnx", "not a valid ONNX model"}},
      {"onnx_directory",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), Root() + "/models/mlp.onnx", Root() + "/models")); },
       2, {"[onnx] cannot read", "/models'", "Is a directory"}},
      {"data_missing",
       [](const TempDir& t) {
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", t / "nox.npy"));
       },
       2, {"[data] data.x", "cannot read", "nox.npy"}},
      {"data_field_absent",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), "inputs: {x: x}", "inputs: {x: pixels}")); },
       2, {"[config]", "bad.yaml", "model.inputs.x", "no field 'pixels'"}},
      {"onnx_input_absent",
       [](const TempDir& t) {
         return TrainYaml(t, Replace(DefaultYaml(), "inputs: {x: x}", "inputs: {x: x, image: x}"));
       },
       2, {"[onnx]", "mlp.onnx", "'image'", "not a graph input"}},
      {"onnx_input_misspelt",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), "inputs: {x: x}", "inputs: {X: x}")); },
       2, {"[onnx]", "mlp.onnx", "'X'", "not a graph input"}},
      {"loss_output_absent",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), "logits: logits", "logits: scores")); },
       2, {"[config]", "bad.yaml", "model.loss.logits", "'scores'", "logits"}},
      {"label_out_of_range",
       [](const TempDir& t) {
         std::vector<float> x(8 * 64, 0.5f);
         std::vector<int64_t> y = {1, 2, 3, 99, 4, 5, 6, 7};
         std::string xp = t.Write("x.npy", Npy("<f4", "(8, 64)", Bytes(x)));
         std::string yp = t.Write("y.npy", Npy("<i8", "(8,)", Bytes(y)));
         return TrainYaml(t, MlpYaml(Root() + "/models/mlp.onnx", xp, yp));
       },
       2, {"[data] data.y", "y.npy", "sample 3", "label 99", "[0, 10)"}},
      {"synthetic_classes_above_logits",
       [](const TempDir&) {
         return std::vector<std::string>{"train", "configs/synthetic.yaml", "--set", "data.fields.y.classes=20"};
       },
       2, {"[data] data.fields.y", "span [0, 20), so it has label 19", "[0, 10)"}},
      {"npy_truncated",
       [](const TempDir& t) {
         std::ifstream f("data/mlp_y.npy", std::ios::binary);
         std::string bytes((std::istreambuf_iterator<char>(f)), {});
         std::string yp = t.Write("short_y.npy", bytes.substr(0, 1000));
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_y.npy", yp));
       },
       2, {"[data] data.y", "short_y.npy", "data bytes", "needs 32768"}},
      {"npy_header_truncated",
       [](const TempDir& t) {
         std::string yp = t.Write("hdr_y.npy", Npy("<i8", "(8,)", "").substr(0, 40));
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_y.npy", yp));
       },
       2, {"[data] data.y", "hdr_y.npy", "truncated header"}},
      {"data_directory",
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", Root() + "/data")); },
       2, {"[data] data.x", "cannot read", "Is a directory"}},
      {"onnx_named_pipe_nobody_writes",  // reads as empty: an error, not an open that waits forever
       [](const TempDir& t) {
         const std::string fifo = t / "model.onnx";
         if (::mkfifo(fifo.c_str(), 0600) != 0) return std::vector<std::string>{"mkfifo failed"};
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/models/mlp.onnx", fifo));
       },
       2, {"[onnx]", "model.onnx", "not a valid ONNX model"}},
      {"data_device",  // /dev/zero never ends: refused, not read
       [](const TempDir& t) { return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", "/dev/zero")); },
       2, {"[data] data.x", "cannot read '/dev/zero'", "not a file or a pipe"}},
      {"npy_shape_overflows",
       [](const TempDir& t) {
         std::string xp = t.Write("big_x.npy", Npy("<f4", "(99999999999999999999999, 64)", std::string(4, '\0')));
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", xp));
       },
       2, {"[data] data.x", "big_x.npy", "header shape (99999999999999999999999, 64)"}},
      {"npy_shape_negative",
       [](const TempDir& t) {
         std::string xp = t.Write("neg_x.npy", Npy("<f4", "(-5, 64)", std::string(1280, '\0')));
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", xp));
       },
       2, {"[data] data.x", "neg_x.npy", "header shape (-5, 64)"}},
      {"npy_rows_differ",
       [](const TempDir& t) {
         std::string xp = t.Write("x.npy", Npy("<f4", "(8, 64)", std::string(8 * 64 * 4, '\0')));
         return TrainYaml(t, Replace(DefaultYaml(), Root() + "/data/mlp_x.npy", xp));
       },
       2, {"[data] data.y", "mlp_y.npy' has 4096 rows but data.x: '", "x.npy' has 8"}},
      {"npy_no_rows",
       [](const TempDir& t) {
         std::string xp = t.Write("x.npy", Npy("<f4", "(0, 64)", ""));
         std::string yp = t.Write("y.npy", Npy("<i8", "(0,)", ""));
         return TrainYaml(t, MlpYaml(Root() + "/models/mlp.onnx", xp, yp));
       },
       2, {"[data] data.x", "x.npy' has no rows"}},
      {"token_outside_the_embedding",  // token 300 of a 256-row table, in window 1 (seq_len 64)
       [](const TempDir& t) {
         std::string tok(2 * 200, '\0');
         for (size_t i = 0; i < 200; ++i) tok[2 * i] = static_cast<char>(i % 200);
         tok[2 * 70] = static_cast<char>(300 & 0xff), tok[2 * 70 + 1] = static_cast<char>(300 >> 8);
         return std::vector<std::string>{"train", "configs/gpt.yaml", "--set", "data.train=" + t.Write("bad.u16", tok)};
       },
       2, {"[data] data.train", "bad.u16", "sample 1 has index 300", "outside [-256, 256)", "'/wte/Gather'", "wte.weight [256, 64]"}},
      {"save_to_a_directory",  // refused before training, not after
       [](const TempDir& t) { return TrainYaml(t, DefaultYaml() + "save: {onnx: " + t / "" + "}\n"); },
       2, {"[config]", "bad.yaml", "save.onnx", "is a directory"}},
      {"tokens_seq_len_huge",
       [](const TempDir&) {
         return std::vector<std::string>{"train", "configs/gpt.yaml", "--set", "data.seq_len=9223372036854775807"};
       },
       2, {"[data] data.train", "fewer than one window of seq_len + 1 = 9223372036854775808"}},
      {"micro_batch_shape_overflows",
       [](const TempDir& t) {
         const std::string huge = "9223372036854775807";
         return TrainYaml(t, Replace(DefaultYaml(), "global_batch: 8, micro_batch: 4", "global_batch: " + huge + ", micro_batch: " + huge));
       },
       2, {"[config]", "bad.yaml", "train.micro_batch: 9223372036854775807 samples of data field 'x' [64]"}},
      {"micro_batch_beyond_memory",  // 2^32 x 64 floats: 1 TiB for the input alone
       [](const TempDir& t) {
         return TrainYaml(t, Replace(DefaultYaml(), "global_batch: 8, micro_batch: 4", "global_batch: 4294967296, micro_batch: 4294967296"));
       },
       1, {"[train] rank 0 needs", "the largest registers: ", "[4294967296, ", "GiB of memory", "lower train.micro_batch"}},
      // A learning rate that blows the weights up: the run stops at the first non-finite loss or
      // gradient norm, after logging that step, instead of training on NaN to a clean exit.
      {"diverged",
       [](const TempDir& t) {
         return TrainYaml(t, Replace(Replace(DefaultYaml(), "lr: 0.01", "lr: 1.0e+30"), "steps: 2", "steps: 50"));
       },
       1, {"gnorm", "[train] step ", "training diverged", "lower optimizer.lr"}},
      {"ranks_2",
       [](const TempDir& t) { return TrainYaml(t, DefaultYaml() + "parallel: {ranks: 2}\n"); },
       2, {"[config]", "parallel.ranks is 2 but the job has 1 rank(s)", "mpirun -n 2"}},
      {"mesh_product_overflows",
       [](const TempDir&) {
         return std::vector<std::string>{"plan", "configs/mlp.yaml", "--ranks", "4", "--set",
                                         "parallel.mesh=[1048576, 1048576, 1048576, 1048576]"};
       },
       2, {"[config]", "parallel.mesh", "1048576x1048576x1048576x1048576 holds more than 2^63 ranks"}},
      {"mesh_entry_past_int",  // 2^32 + 1 was truncated to 1 on its way to MPI's int
       [](const TempDir&) {
         return std::vector<std::string>{"plan", "configs/mlp.yaml", "--set", "parallel.mesh=[4294967297]"};
       },
       2, {"[config]", "parallel.mesh[0]", "expected an integer in [1, 1048576]"}},
      {"mesh_inferred_product_overflows",
       [](const TempDir&) {
         return std::vector<std::string>{"plan", "configs/mlp.yaml", "--ranks", "4", "--set",
                                         "parallel.mesh=[-1, 1048576, 1048576, 1048576, 1048576]"};
       },
       2, {"[config]", "parallel.mesh", "cannot infer -1"}},
      {"set_unknown_key",
       [](const TempDir& t) {
         return std::vector<std::string>{"train", t.Write("ok.yaml", DefaultYaml()), "--set", "train.stpes=3"};
       },
       2, {"[config]", "--set", "stpes", "did you mean 'steps'"}},
      {"set_without_value",
       [](const TempDir& t) {
         return std::vector<std::string>{"train", t.Write("ok.yaml", DefaultYaml()), "--set", "train.steps"};
       },
       2, {"[config]", "train.steps"}},
      {"search_micro_batches_0",
       [](const TempDir&) { return std::vector<std::string>{"search", "configs/mlp.yaml", "--micro-batches", "0"}; },
       2, {"--micro-batches", "not in range 1 to 1048576"}},
      {"search_out_directory",
       [](const TempDir& t) {
         return std::vector<std::string>{"search", "configs/mlp.yaml", "--ranks", "2", "--out", t / ""};
       },
       2, {"[search] --out", "is a directory"}},
      {"plan_bad_config",
       [](const TempDir& t) {
         return std::vector<std::string>{"plan", t.Write("bad.yaml", Replace(DefaultYaml(), "lr: 0.01", "lr: fast"))};
       },
       2, {"[config]", "bad.yaml", "optimizer.lr"}},
      // One rank checks the layout as any count does (this mesh was accepted and ignored).
      {"mesh_on_one_rank",
       [](const TempDir&) {
         return std::vector<std::string>{"plan", "configs/mlp.yaml", "--set", "parallel.mesh=[2, 2]"};
       },
       2, {"[config]", "parallel.mesh", "holds 4 ranks, but each stage has 1"}},
      {"stages_on_one_rank",
       [](const TempDir&) {
         return std::vector<std::string>{"train", "configs/mlp.yaml", "--set", "parallel.stages=[['*'], ['*']]"};
       },
       2, {"[config]", "parallel.stages", "2 stages do not divide 1 ranks"}},
      // A permutation of 2^40 sample indices would not fit; found before anything runs.
      {"shuffle_of_2_to_the_40_samples",
       [](const TempDir&) {
         return std::vector<std::string>{"plan", "configs/synthetic.yaml", "--set", "data.samples=1099511627776", "--set",
                                         "data.order=shuffle"};
       },
       2, {"[data] data.order", "shuffle over 1099511627776 samples"}},
  };
  return kRows;
}

// 2^40 synthetic samples read in order plan and train as 1024 do: nothing visits them all (the
// label check read every sample, and ran on for hours).
TEST(Cli, HugeSyntheticDataSet) {
  Output r = Flowrun({"train", "configs/synthetic.yaml", "--set", "data.samples=1099511627776", "--set", "train.steps=2"},
                     "", 120);
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_FALSE(r.timed_out) << r.out;
}

TEST(Cli, BadInputs) {
  for (const BadRun& row : BadRuns()) {
    SCOPED_TRACE(row.name);
    TempDir tmp;
    Output r = Flowrun(row.setup(tmp));
    EXPECT_EQ(r.code, row.code) << r.out;
    for (const std::string& f : row.fragments)
      EXPECT_NE(r.out.find(f), std::string::npos) << "want '" << f << "' in: " << r.out;
    EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
  }
}

// Memory running out is an error with a message and exit code 1, not an abort: a plan of 100000
// ranks under a 1 GB address-space limit (it needs several).
TEST(Cli, ConfigFromAPipe) {  // `flowrun plan <(generate-config)` and `... | flowrun plan /dev/stdin`
  Output r = Flowrun({"plan", "/dev/stdin"}, "cat configs/mlp.yaml | ");
  EXPECT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("/dev/stdin: "), std::string::npos) << r.out;
  EXPECT_NE(r.out.find(" tasks, "), std::string::npos) << r.out;
}

// The MLP's 3 golden steps with config key `key` read from /dev/stdin, `file` piped into it: the
// same losses as read from the config's own file.
void ExpectPipeTrainsAsTheFile(const std::string& key, const std::string& file) {
  Output direct = Flowrun({"train", "tests/golden/mlp_sgd.yaml", "--set", "train.steps=3"});
  Output pipe = Flowrun({"train", "tests/golden/mlp_sgd.yaml", "--set", "train.steps=3", "--set", key + "=/dev/stdin"},
                        "cat " + file + " | ");
  ASSERT_EQ(direct.code, 0) << direct.out;
  ASSERT_EQ(pipe.code, 0) << pipe.out;
  auto losses = [](const std::string& out) {
    std::string l;
    for (size_t at = out.find("| loss "); at != std::string::npos; at = out.find("| loss ", at + 1))
      l += out.substr(at, out.find(" |", at + 2) - at) + "\n";
    return l;
  };
  EXPECT_FALSE(losses(direct.out).empty()) << direct.out;
  EXPECT_EQ(losses(pipe.out), losses(direct.out));
}

// 1 MiB of data through a pipe (its buffer grows from 64 KiB): the same samples, so the same losses.
TEST(Cli, DataFromAPipe) { ExpectPipeTrainsAsTheFile("data.x", "data/mlp_x.npy"); }

// The model through a pipe (a regular file is parsed from its mapping, anything else read whole).
TEST(Cli, ModelFromAPipe) { ExpectPipeTrainsAsTheFile("model.onnx", "models/mlp.onnx"); }

TEST(Cli, OutOfMemoryIsAnError) {
#if defined(__has_feature)
#if __has_feature(address_sanitizer) || __has_feature(thread_sanitizer)  // clang's spelling
#define FR_SANITIZED 1
#endif
#endif
#if defined(__SANITIZE_ADDRESS__) || defined(__SANITIZE_THREAD__) || defined(FR_SANITIZED)
  GTEST_SKIP() << "a sanitizer's allocator reserves far more than the limit and aborts on failure by design";
#endif
  Output r = Flowrun({"plan", "configs/mlp.yaml", "--ranks", "100000", "--set", "train.global_batch=3200000", "--set",
                      "train.micro_batch=3200000", "--set", "parallel.sbp={x: [\"S(0)\"]}"},
                     "ulimit -v 1000000; ");
  EXPECT_EQ(r.code, 1) << r.out;
  EXPECT_NE(r.out.find("flowrun: out of memory"), std::string::npos) << r.out;
  EXPECT_EQ(r.out.find("internal error"), std::string::npos) << r.out;
}

TEST(Cli, Jsonl) {
  TempDir tmp;
  const std::string path = tmp / "m.jsonl";
  Output r = Flowrun({"train", "tests/golden/mlp_sgd.yaml", "--set", "log.jsonl=" + path});
  ASSERT_EQ(r.code, 0) << r.out;
  std::ifstream f(path);
  ASSERT_TRUE(f) << path << " was not written";
  int n = 0;
  for (std::string line; std::getline(f, line);) {
    ++n;
    SCOPED_TRACE(line);
    EXPECT_EQ(line.front(), '{');
    EXPECT_EQ(line.back(), '}');
    EXPECT_EQ(line.rfind("{\"step\": " + std::to_string(n) + ",", 0), 0u);
    EXPECT_NE(line.find("\"loss\": "), std::string::npos);
  }
  EXPECT_EQ(n, 20);
}

}  // namespace
