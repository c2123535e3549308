// Rung 4 of the correctness ladder (DESIGN.md §6): under `mpirun -n N`, every parallel strategy
// gives the single-device losses within rtol 1e-5. Each case runs the same config twice through
// the binary (FLOWRUN_BIN): once on one rank, once under mpirun with the strategy's settings, and
// compares the 20 per-step losses and gradient norms of the JSONL logs.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <iterator>
#include <fstream>
#include <map>
#include <regex>
#include <set>
#include <tuple>
#include <string>
#include <thread>
#include <vector>

#include "../flowrun_cmd.h"
#include "onnx/onnx_pb.h"

namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-5;
// Each mpirun job's deadline: a run that hangs fails its case, and leaves nothing running.
constexpr double kJobSeconds = 240;

using fr::testing::Quote;

struct Case {
  const char* name;
  const char* config;
  int ranks;
  std::vector<std::string> sets;  // the strategy: hints, mesh, stages, zero
  std::vector<std::string> both;  // settings for the reference run and the strategy run alike
  std::string env = "";           // environment assignments for the command line
};

struct Run {
  int code = -1;
  std::string out;
  std::vector<double> loss, gnorm;
};

// Runs a command line as a Job (tests/flowrun_cmd.h); returns the command and its output.
std::string Shell(const std::string& cmd, int* code) {
  const fr::testing::Output r = fr::testing::Shell(cmd, kJobSeconds);
  *code = r.code;
  return cmd + "\n" + r.out + (r.left ? "\n[test] " + std::to_string(r.left) + " process(es) outlived the job" : "");
}

Run Train(const Case& c, int ranks, bool strategy) {
  const char* bin = std::getenv("FLOWRUN_BIN");
  fs::path dir = fs::temp_directory_path() / ("flowrun_dist_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  std::string jsonl = (dir / (std::string(c.name) + (strategy ? "_n.jsonl" : "_1.jsonl"))).string();
  std::string cmd = c.env;
  if (ranks > 1) cmd += "mpirun --oversubscribe --allow-run-as-root -n " + std::to_string(ranks) + " ";
  cmd += std::string(bin ? bin : "build/src/flowrun") + " train " + c.config + " --set train.steps=20 --set log.every=1";
  cmd += " --set log.jsonl=" + Quote(jsonl);
  for (const std::string& s : c.both) cmd += " --set " + Quote(s);
  if (strategy)
    for (const std::string& s : c.sets) cmd += " --set " + Quote(s);
  Run r;
  r.out = Shell(cmd, &r.code);
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) {
    auto num = [&](const std::string& key) {
      size_t at = line.find("\"" + key + "\":");
      return at == std::string::npos ? NAN : std::strtod(line.c_str() + at + key.size() + 3, nullptr);
    };
    r.loss.push_back(num("loss"));
    r.gnorm.push_back(num("gnorm"));
  }
  fs::remove(jsonl);
  r.out = cmd + "\n" + r.out;
  return r;
}

void ExpectSameLosses(const Case& c) {
  Run ref = Train(c, 1, false);
  ASSERT_EQ(ref.code, 0) << ref.out;
  Run got = Train(c, c.ranks, true);
  ASSERT_EQ(got.code, 0) << got.out;
  ASSERT_EQ(ref.loss.size(), 20u) << ref.out;
  ASSERT_EQ(got.loss.size(), 20u) << got.out;
  double worst = 0;
  for (size_t i = 0; i < 20; ++i) {
    EXPECT_NEAR(got.loss[i], ref.loss[i], kRtol * std::fabs(ref.loss[i])) << "step " << i + 1 << "\n" << got.out;
    EXPECT_NEAR(got.gnorm[i], ref.gnorm[i], 1e-4 * std::fabs(ref.gnorm[i])) << "step " << i + 1;
    worst = std::max(worst, std::fabs(got.loss[i] - ref.loss[i]) / std::fabs(ref.loss[i]));
  }
  std::printf("%s: max relative loss difference %.3g over 20 steps\n", c.name, worst);
}

const char* kMlp = "configs/mlp.yaml";
const char* kLn = "configs/mlp_ln_gelu.yaml";
const std::string kSgd = "optimizer={type: sgd, lr: 0.05, momentum: 0.9, grad_clip: 1.0}";

TEST(Distributed, AccumulationAlone_1n1d) {
  ExpectSameLosses({"accum", kMlp, 1, {"train.micro_batch=8"}, {"train.global_batch=32", "train.micro_batch=32"}});
}
TEST(Distributed, DataParallel_1n2d) { ExpectSameLosses({"dp2", kMlp, 2, {"parallel.sbp={x: [\"S(0)\"]}"}, {}}); }
TEST(Distributed, DataParallel_Uneven_1n3d) { ExpectSameLosses({"dp3", kMlp, 3, {"parallel.sbp={x: [\"S(0)\"]}"}, {}}); }
TEST(Distributed, DataParallel_1n4d) { ExpectSameLosses({"dp4", kLn, 4, {"parallel.sbp={x: [\"S(0)\"]}"}, {}}); }
TEST(Distributed, DataParallel_Sgd_1n2d) {
  ExpectSameLosses({"dp2_sgd", kLn, 2, {"parallel.sbp={x: [\"S(0)\"]}"}, {kSgd, "schedule.warmup=2"}});
}
TEST(Distributed, TensorParallelFromHint_1n2d) {
  ExpectSameLosses({"tp2", kMlp, 2, {"parallel.sbp={fc1.weight: [\"S(0)\"]}"}, {}});
}
TEST(Distributed, Hybrid2D_2x2) {
  ExpectSameLosses({"hybrid", kMlp, 4, {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", B], fc1.weight: [B, \"S(0)\"]}"}, {}});
}
TEST(Distributed, Zero_1n2d) {
  ExpectSameLosses({"zero", kMlp, 2, {"parallel.zero=true", "parallel.sbp={x: [\"S(0)\"]}"}, {}});
}
// Over 4 ranks the parameters' parts are uneven (fc3's 10 biases: 3, 3, 2, 2), packed into and
// out of the gradient and parameter buckets.
TEST(Distributed, Zero_1n4d) {
  ExpectSameLosses({"zero4", kMlp, 4, {"parallel.zero=true", "parallel.sbp={x: [\"S(0)\"]}"}, {}});
}
// Data parallel on both axes of a 2x2 mesh with ZeRO: a parameter that cannot be sharded evenly
// four ways (fc3.bias [10]) stays whole on the data axes instead of leaving its update without a
// signature (it did not plan before).
TEST(Distributed, ZeroOn2DDataMesh_2x2) {
  ExpectSameLosses({"zero_2d", kMlp, 4, {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", \"S(0)\"]}", "parallel.zero=true"}, {}});
}
TEST(Distributed, Pipeline2Stages_4Micro) {
  ExpectSameLosses({"pp2", kLn, 2, {"parallel.stages=[[\"/fc1/*\", \"/ln/*\"], [\"*\"]]"},
                    {"train.micro_batch=4", "train.global_batch=16"}});
}
TEST(Distributed, PipelineTimesData_2x2) {
  ExpectSameLosses({"pp_dp", kMlp, 4, {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]", "parallel.sbp={x: [\"S(0)\"]}"},
                    {"train.micro_batch=16"}});
}
// The same with ZeRO: each stage's parameters gathered and its gradients reduce-scattered in its
// own buckets.
TEST(Distributed, PipelineTimesZero_2x2) {
  ExpectSameLosses({"pp_zero", kMlp, 4,
                    {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]", "parallel.sbp={x: [\"S(0)\"]}", "parallel.zero=true"},
                    {"train.micro_batch=16"}});
}

// gpt_mini as PyTorch exports it: anonymous weights are hinted as NODE:i.
const char* kGpt = "configs/gpt.yaml";
const std::vector<std::string> kGptShort = {"schedule.warmup=2"};

TEST(Distributed, Gpt_DataParallel_1n2d) {
  ExpectSameLosses({"gpt_dp2", kGpt, 2, {"parallel.sbp={idx: [\"S(0)\"]}"}, kGptShort});
}
// Where Open MPI cannot make a shared-memory window (here its one-sided component forced to one
// without them), the gradients' all-reduces go through MPI: the run says so once and gives the
// same losses.
TEST(Distributed, Gpt_DataParallel_WithoutSharedMemory_1n2d) {
  ::setenv("OMPI_MCA_osc", "pt2pt", 1);
  const Case c{"gpt_dp2_mpi", kGpt, 2, {"parallel.sbp={idx: [\"S(0)\"]}"}, kGptShort};
  const auto ref = Train(c, 1, false);
  const auto got = Train(c, c.ranks, true);
  ::unsetenv("OMPI_MCA_osc");
  ASSERT_EQ(ref.code, 0) << ref.out;
  ASSERT_EQ(got.code, 0) << got.out;
  EXPECT_NE(got.out.find("no shared-memory window for all-reduces (MPI_Win_allocate_shared failed); they go through MPI"),
            std::string::npos)
      << got.out;
  ASSERT_EQ(got.loss.size(), 20u) << got.out;
  for (size_t i = 0; i < 20; ++i) EXPECT_NEAR(got.loss[i], ref.loss[i], kRtol * std::fabs(ref.loss[i])) << "step " << i + 1;
}
// The plan of tests/boxing/plan_test.cpp's GptTensorParallelFromQkvFcHints: one sequence per
// micro-batch, planned for a fast interconnect, so attention runs Megatron's way (q, k, v split by
// heads, the output projection row-parallel).
TEST(Distributed, Gpt_TensorParallelFromHints_1n2d) {
  ExpectSameLosses({"gpt_tp2", kGpt, 2,
                    {"parallel.sbp={\"/blocks.*/attn/qkv/MatMul:1\": [\"S(1)\"], \"/blocks.*/mlp/fc/MatMul:1\": [\"S(1)\"]}",
                     "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
                     "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6",
                     "cluster.op_overhead=0"},
                    {"schedule.warmup=2", "train.global_batch=2", "train.micro_batch=1"}});
}
TEST(Distributed, Gpt_Pipeline2Stages_4Micro) {
  ExpectSameLosses({"gpt_pp2", kGpt, 2, {"parallel.stages=[[\"/wte/*\", \"/wpe/*\", \"/Add\", \"/blocks.0/*\"], [\"*\"]]"},
                    {"schedule.warmup=2", "train.micro_batch=4"}});
}
TEST(Distributed, Gpt_Hybrid2D_2x2) {
  ExpectSameLosses({"gpt_hybrid", kGpt, 4,
                    {"parallel.mesh=[2, 2]",
                     "parallel.sbp={idx: [\"S(0)\", B], \"/blocks.*/attn/qkv/MatMul:1\": [B, \"S(1)\"], "
                     "\"/blocks.*/mlp/fc/MatMul:1\": [B, \"S(1)\"]}"},
                    kGptShort});
}

// The device path: the same job on the simulated second device (parallel.device: sim) and on the
// CPU. On sim every task but the loader and the sinks runs on the device, the plan copies data in
// and the loss and norm out as tasks, and the runtime allocates through the sim backend and runs
// those copies on its own stream: the losses and norms must be the CPU's bit for bit.
// Collectives between sim ranks run on the device communicator over MPI's host groups
// (actor::UseDeviceCollectives), as CUDA ranks' run on NCCL's.
// `opaque`: with FLOWRUN_SIM_OPAQUE=1 the sim device's memory is, to everything but its kernels,
// memory the host cannot address, as a GPU's: local movements go through host copies
// (Actor::Move); with `host_collectives` (FLOWRUN_COLLECTIVES=host) movements between ranks too
// (actor::WithHostStaging), as for CUDA ranks that share a GPU.
void ExpectSameOnSim(const char* name, const char* config, int ranks, const std::vector<std::string>& sets,
                     bool opaque = false, bool host_collectives = false) {
  std::vector<std::string> cpu = sets, sim = sets;
  cpu.push_back("parallel.device=cpu");
  sim.push_back("parallel.device=sim");
  const std::string sim_name = std::string(name) + (opaque ? "_opaque" : "_sim") + (host_collectives ? "_host" : "");
  const std::string env = std::string(opaque ? "FLOWRUN_SIM_OPAQUE=1 " : "") + (host_collectives ? "FLOWRUN_COLLECTIVES=host " : "");
  const Run ref = Train(Case{name, config, ranks, {}, cpu}, ranks, false);
  const Run got = Train(Case{sim_name.c_str(), config, ranks, {}, sim, env.c_str()}, ranks, false);
  const std::string path = host_collectives ? "collectives through host copies and MPI" : "collectives on the device communicator";
  if (ranks > 1) {
    EXPECT_NE(got.out.find(path), std::string::npos) << got.out;
  }
  ASSERT_EQ(ref.code, 0) << ref.out;
  ASSERT_EQ(got.code, 0) << got.out;
  ASSERT_EQ(ref.loss.size(), 20u) << ref.out;
  ASSERT_EQ(got.loss, ref.loss) << got.out;
  ASSERT_EQ(got.gnorm, ref.gnorm) << got.out;
}
TEST(Distributed, SimDevice_OneRank_1n1d) { ExpectSameOnSim("sim1", kMlp, 1, {"train.micro_batch=16"}); }
TEST(Distributed, SimDevice_Gpt_DataParallel_1n2d) {
  std::vector<std::string> sets = kGptShort;
  sets.push_back("parallel.sbp={idx: [\"S(0)\"]}");
  ExpectSameOnSim("sim_gpt_dp2", kGpt, 2, sets);
}
TEST(Distributed, SimDevice_PipelineTimesZero_2x2) {
  ExpectSameOnSim("sim_pp_zero", kMlp, 4,
                  {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]", "parallel.sbp={x: [\"S(0)\"]}", "parallel.zero=true",
                   "train.micro_batch=16"});
}
TEST(Distributed, OpaqueSimDevice_OneRank_1n1d) { ExpectSameOnSim("opaque1", kMlp, 1, {"train.micro_batch=16"}, true); }
TEST(Distributed, OpaqueSimDevice_Gpt_DataParallel_1n2d) {
  std::vector<std::string> sets = kGptShort;
  sets.push_back("parallel.sbp={idx: [\"S(0)\"]}");
  ExpectSameOnSim("opaque_gpt_dp2", kGpt, 2, sets, true);
}
TEST(Distributed, OpaqueSimDevice_Gpt_TensorParallel_1n2d) {
  ExpectSameOnSim("opaque_gpt_tp2", kGpt, 2,
                  {"parallel.sbp={\"/blocks.*/attn/qkv/MatMul:1\": [\"S(1)\"], \"/blocks.*/mlp/fc/MatMul:1\": [\"S(1)\"]}",
                   "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
                   "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6", "cluster.op_overhead=0",
                   "schedule.warmup=2", "train.global_batch=2", "train.micro_batch=1"},
                  true);
}
TEST(Distributed, OpaqueSimDevice_HostCollectives_Gpt_DataParallel_1n2d) {
  std::vector<std::string> sets = kGptShort;
  sets.push_back("parallel.sbp={idx: [\"S(0)\"]}");
  ExpectSameOnSim("opaque_gpt_dp2", kGpt, 2, sets, true, true);
}
TEST(Distributed, OpaqueSimDevice_HostCollectives_PipelineTimesZero_2x2) {
  ExpectSameOnSim("opaque_pp_zero", kMlp, 4,
                  {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]", "parallel.sbp={x: [\"S(0)\"]}", "parallel.zero=true",
                   "train.micro_batch=16"},
                  true, true);
}
TEST(Distributed, OpaqueSimDevice_PipelineTimesZero_2x2) {
  ExpectSameOnSim("opaque_pp_zero", kMlp, 4,
                  {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]", "parallel.sbp={x: [\"S(0)\"]}", "parallel.zero=true",
                   "train.micro_batch=16"},
                  true);
}

// Ranks that oversubscribe the cores are left unbound by mpirun; flowrun pins them round-robin so
// the ranks of one stage do not take turns on one core. A binding asked for, `none` included, is
// kept. Both runs train alike.
// Exports of current PyTorch (tools/make_exports.py; their shapes are static, micro-batch 4): the
// dynamo export of Llama (GQA, rotary tables held constant), data parallel and tensor parallel.
const char* kLlama = "tests/golden/exports/llama_dynamo_sgd.yaml";
TEST(Distributed, LlamaExport_DataParallel_1n2d) {
  ExpectSameLosses({"llama_dp2", kLlama, 2, {"parallel.sbp={input_ids: [\"S(0)\"]}"}, {}});
}
// Megatron's layout, from hints: the projections' inputs whole (B), q, k and v split by heads (one
// of the two kv heads each: attention runs S(1) on the head axis), the MLP's gate and up
// projections by columns and its down projection by rows (a partial sum); the cost model, told of
// a fast interconnect, places the rest.
TEST(Distributed, LlamaExport_TensorParallel_1n2d) {
  ExpectSameLosses({"llama_tp2", kLlama, 2,
                    {"parallel.sbp={mul_4: [B], mul_10: [B], mul_13: [B], mul_19: [B], val_110: [\"S(1)\"], val_117: [\"S(1)\"], val_124: [\"S(1)\"], val_243: [\"S(1)\"], "
                     "val_245: [\"S(1)\"], val_251: [\"S(1)\"], val_258: [\"S(1)\"], val_265: [\"S(1)\"], "
                     "val_379: [\"S(1)\"], val_381: [\"S(1)\"]}",
                     "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
                     "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6",
                     "cluster.op_overhead=0"},
                    {}});
}

// Cross-entropy's ignore_index (-100, as PyTorch): labels of every third sample, more on one
// rank's half of a batch than the other's, are left out. The mean is over the whole micro-batch's
// kept labels, so data parallel equals one rank only if the count is all-reduced like the sum.
TEST(Distributed, IgnoredLabels_DataParallel_1n2d) {
  std::ifstream in("data/mlp_y.npy", std::ios::binary);
  std::string bytes((std::istreambuf_iterator<char>(in)), {});
  ASSERT_GT(bytes.size(), 10u);
  const size_t header = 10 + (static_cast<uint8_t>(bytes[8]) | static_cast<uint8_t>(bytes[9]) << 8);  // npy v1
  auto* labels = reinterpret_cast<int64_t*>(bytes.data() + header);
  const size_t n = (bytes.size() - header) / sizeof(int64_t);
  for (size_t i = 0; i < n; ++i)
    if (i % 3 == 0 || (i % 32) < 5) labels[i] = -100;
  const fs::path dir = fs::temp_directory_path() / ("flowrun_ignore_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string path = (dir / "y.npy").string();
  std::ofstream(path, std::ios::binary) << bytes;
  const Case c{"ignore_dp2", kMlp, 2, {"parallel.sbp={x: [\"S(0)\"]}"}, {"data.y=" + path}};
  ExpectSameLosses(c);
  const auto plain = Train({"ignore_plain", kMlp, 1, {}, {}}, 1, false);
  const auto ignored = Train(c, 1, false);
  fs::remove_all(dir);
  ASSERT_EQ(plain.loss.size(), 20u);
  ASSERT_EQ(ignored.loss.size(), 20u);
  EXPECT_NE(plain.loss[0], ignored.loss[0]) << "the ignored labels changed nothing";
}

// The BERT export (TorchScript; three inputs from npy arrays): data parallel, and tensor parallel
// with Megatron's MLP, from hints: the intermediate projection by columns ((B, S(1)) -> S(2)), the
// output projection by rows ((S(2), S(0)) -> P).
const char* kBert = "tests/golden/exports/bert_torchscript_sgd.yaml";
TEST(Distributed, BertExport_DataParallel_1n2d) {
  ExpectSameLosses({"bert_dp2", kBert, 2, {"parallel.sbp={input_ids: [\"S(0)\"]}"}, {}});
}
TEST(Distributed, BertExport_TensorParallel_1n2d) {
  ExpectSameLosses({"bert_tp2", kBert, 2,
                    {"parallel.sbp={\"/bert/bert/encoder/layer.*/intermediate/dense/MatMul:1\": [\"S(1)\"], "
                     "\"/bert/bert/encoder/layer.*/intermediate/dense/MatMul_output_0\": [\"S(2)\"], "
                     "\"/bert/bert/encoder/layer.*/output/dense/MatMul:1\": [\"S(0)\"], "
                     "\"/bert/bert/encoder/layer.*/output/dense/MatMul_output_0\": [P]}",
                     "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
                     "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6",
                     "cluster.op_overhead=0"},
                    {}});
}

// BERT for masked LM: the mean over the masked positions' labels, whose count differs between the
// ranks' halves of a batch, is the whole micro-batch's under data parallelism too.
TEST(Distributed, BertMaskedLm_DataParallel_1n2d) {
  ExpectSameLosses({"mlm_dp2", "tests/golden/exports/bert_mlm_dynamo_sgd.yaml", 2, {"parallel.sbp={input_ids: [\"S(0)\"]}"}, {}});
}

// Dropout trains (tools/make_exports.py's bert_dropout: 8 Dropout nodes at 0.1, one on the
// attention probabilities): every layout draws the logical tensor's mask, each piece its part of
// it, so data, tensor and pipeline parallel equal one rank. On one rank, a rerun repeats every
// bit, and the losses differ from those of model.dropout: false from the first step.
const char* kBertDropout = "tests/golden/exports/bert_dropout_torchscript_sgd.yaml";
const std::string kDropoutOn = "model.dropout=true";
TEST(Distributed, Dropout_DataParallel_1n2d) {
  ExpectSameLosses({"drop_dp2", kBertDropout, 2, {"parallel.sbp={input_ids: [\"S(0)\"]}"}, {kDropoutOn}});
}
TEST(Distributed, Dropout_TensorParallel_1n2d) {
  ExpectSameLosses({"drop_tp2", kBertDropout, 2,
                    {"parallel.sbp={\"/bert/bert/encoder/layer.*/intermediate/dense/MatMul:1\": [\"S(1)\"], "
                     "\"/bert/bert/encoder/layer.*/intermediate/dense/MatMul_output_0\": [\"S(2)\"], "
                     "\"/bert/bert/encoder/layer.*/attention/self/Dropout_output_0\": [\"S(1)\"]}"},
                    {kDropoutOn}});
}
TEST(Distributed, Dropout_Pipeline2Stages_1n2d) {
  ExpectSameLosses({"drop_pp2", kBertDropout, 2,
                    {"parallel.stages=[[\"/bert/bert/embeddings/*\", \"/bert/bert/encoder/layer.0/*\"], [\"*\"]]"},
                    {kDropoutOn}});
}
TEST(Distributed, Dropout_IsSeededAndDrops_1n1d) {
  const ::Run on = Train({"drop_on", kBertDropout, 1, {}, {kDropoutOn}}, 1, false);
  const ::Run again = Train({"drop_again", kBertDropout, 1, {}, {kDropoutOn}}, 1, false);
  const ::Run off = Train({"drop_off", kBertDropout, 1, {}, {}}, 1, false);
  const ::Run seeded = Train({"drop_seed", kBertDropout, 1, {}, {kDropoutOn, "train.seed=7"}}, 1, false);
  for (const ::Run* r : {&on, &again, &off, &seeded}) {
    ASSERT_EQ(r->code, 0) << r->out;
    ASSERT_EQ(r->loss.size(), 20u) << r->out;
  }
  for (size_t i = 0; i < 20; ++i) EXPECT_EQ(on.loss[i], again.loss[i]) << "step " << i + 1;
  EXPECT_NE(on.loss[0], off.loss[0]) << "dropout changed nothing";
  EXPECT_NE(on.loss[0], seeded.loss[0]) << "train.seed does not move the masks";
}

// The ResNet export (TorchScript, BatchNormalization in training mode), data parallel: each rank
// holds half of every micro-batch, and BatchNorm's statistics are the whole micro-batch's (its
// ReduceMean over a split batch is a partial sum that boxing all-reduces), as on one rank. With
// each rank's own statistics the losses would differ from the first step.
const char* kResNet = "tests/golden/exports/resnet_torchscript_sgd.yaml";
TEST(Distributed, ResNetExport_DataParallel_1n2d) {
  ExpectSameLosses({"resnet_dp2", kResNet, 2, {"parallel.sbp={x: [\"S(0)\"]}"}, {}});
}

// The running statistics a run saves, by initializer name.
std::map<std::string, std::vector<float>> SavedRunningStats(const std::string& path) {
  std::ifstream in(path, std::ios::binary);
  onnx::ModelProto m;
  std::map<std::string, std::vector<float>> out;
  if (!m.ParseFromString(std::string((std::istreambuf_iterator<char>(in)), {}))) return out;
  for (const onnx::TensorProto& t : m.graph().initializer()) {
    if (!t.name().ends_with("running_mean") && !t.name().ends_with("running_var")) continue;
    const auto* f = reinterpret_cast<const float*>(t.raw_data().data());
    out[t.name()].assign(f, f + t.raw_data().size() / sizeof(float));
  }
  return out;
}

// BatchNorm's running statistics follow the global batch's statistics on every layout: data
// parallel (each rank holds half of a micro-batch) and two pipeline stages (the second stage's
// statistics reach rank 0 from rank 1) save the running statistics of one rank.
TEST(Distributed, ResNetRunningStats_1n2d) {
  const fs::path dir = fs::temp_directory_path() / ("flowrun_running_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string one = (dir / "one.onnx").string(), dp = (dir / "dp.onnx").string(), pp = (dir / "pp.onnx").string();
  const ::Run a = Train({"running_1", kResNet, 1, {}, {"save.onnx=" + one}}, 1, false);
  const ::Run b = Train({"running_dp", kResNet, 2, {"parallel.sbp={x: [\"S(0)\"]}"}, {"save.onnx=" + dp}}, 2, true);
  const ::Run c = Train({"running_pp", kResNet, 2, {"parallel.stages=[[\"/0/*\", \"/1/*\", \"/2/*\", \"/3/*\"], [\"*\"]]"},
                         {"save.onnx=" + pp}}, 2, true);
  const auto want = SavedRunningStats(one), got_dp = SavedRunningStats(dp), got_pp = SavedRunningStats(pp);
  fs::remove_all(dir);
  for (const ::Run* r : {&a, &b, &c}) ASSERT_EQ(r->code, 0) << r->out;
  ASSERT_EQ(want.size(), 12u) << a.out;
  for (const auto* got : {&got_dp, &got_pp}) {
    ASSERT_EQ(got->size(), want.size());
    for (const auto& [name, w] : want) {
      const std::vector<float>& g = got->at(name);
      ASSERT_EQ(g.size(), w.size()) << name;
      float scale = 0;
      for (float v : w) scale = std::max(scale, std::fabs(v));
      for (size_t i = 0; i < w.size(); ++i) EXPECT_NEAR(g[i], w[i], kRtol * scale) << name << " channel " << i;
    }
  }
}

TEST(Distributed, PinsUnboundRanks_1n4d) {
  const char* bin = std::getenv("FLOWRUN_BIN");
  const std::string train = std::string(bin ? bin : "build/src/flowrun") + " train " + kMlp +
                            " --set train.steps=2 --set 'parallel.sbp={x: [\"S(0)\"]}'";
  int code = -1;
  std::string out = Shell("mpirun --allow-run-as-root --oversubscribe -n 4 " + train, &code);
  EXPECT_EQ(code, 0) << out;
  // With 4 cores or more mpirun binds the ranks itself (to a socket), and flowrun may leave them.
  if (std::thread::hardware_concurrency() < 4) {
    EXPECT_NE(out.find("pinned round-robin, one core each"), std::string::npos) << out;
  }
  out = Shell("mpirun --allow-run-as-root --oversubscribe --bind-to none -n 4 " + train, &code);
  EXPECT_EQ(code, 0) << out;
  EXPECT_EQ(out.find("pinned"), std::string::npos) << out;
}

// Gradient buckets reduce while backward computes the rest: in a step's last micro-batch, some
// bucket's all-reduce starts before that micro-batch's last compute act on the rank. A scheduler
// that runs the accumulators after the whole backward (as the pipeline order once did, for data
// parallelism too: its loss sink's stage made every plan look like a pipeline) fails this.
struct TraceEvent {
  std::string name, cat;
  double ts = 0;
  int step = 0, micro = 0;
};
std::vector<TraceEvent> ReadTrace(const std::string& path) {
  std::vector<TraceEvent> events;
  std::ifstream f(path);
  const std::regex re(R"re("name": "([^"]*)", "cat": "(\w+)", .*"ts": ([0-9.]+), .*"step": (\d+), "micro": (\d+))re");
  for (std::string line; std::getline(f, line);) {
    std::smatch m;
    if (!std::regex_search(line, m, re)) continue;
    events.push_back({m[1], m[2], std::stod(m[3]), std::stoi(m[4]), std::stoi(m[5])});
  }
  return events;
}
TEST(Distributed, GptBucketsReduceDuringBackward) {
  struct TraceCase {
    const char* name;
    int ranks;
    std::vector<std::string> sets;
  };
  const TraceCase cases[] = {
      {"dp2", 2, {"parallel.sbp={idx: [\"S(0)\"]}"}},
      // Stage 0 (ranks 0 and 1) holds block 0 and the embeddings: two buckets.
      {"dp2_pp2", 4,
       {"parallel.mesh=[2]", "parallel.sbp={idx: [\"S(0)\"]}", "train.micro_batch=4",
        "parallel.stages=[[\"/wte/*\", \"/wpe/*\", \"/Add\", \"/blocks.0/*\"], [\"*\"]]"}},
  };
  const char* bin = std::getenv("FLOWRUN_BIN");
  for (const TraceCase& tc : cases) {
    SCOPED_TRACE(tc.name);
    fs::path dir = fs::temp_directory_path() / ("flowrun_trace_" + std::to_string(::getpid()));
    fs::create_directories(dir);
    const std::string trace = (dir / tc.name).string();
    std::string cmd = "mpirun --allow-run-as-root --oversubscribe -n " + std::to_string(tc.ranks) + " " +
                      std::string(bin ? bin : "build/src/flowrun") + " train " + kGpt +
                      " --set train.steps=3 --trace " + Quote(trace);
    for (const std::string& s : tc.sets) cmd += " --set " + Quote(s);
    int code = -1;
    std::string out = Shell(cmd, &code);
    ASSERT_EQ(code, 0) << out;
    std::vector<TraceEvent> events = ReadTrace(trace + ".rank0");
    fs::remove_all(dir);
    ASSERT_FALSE(events.empty()) << out;
    int last_micro = 0;
    for (const TraceEvent& e : events) last_micro = std::max(last_micro, e.micro);
    ASSERT_GT(last_micro, 0);
    for (int step = 1; step < 3; ++step) {
      double first_bucket = 1e300, last_compute = 0;
      for (const TraceEvent& e : events) {
        if (e.step != step) continue;
        if (e.name.rfind("bucket", 0) == 0) first_bucket = std::min(first_bucket, e.ts);
        if (e.cat == "compute" && e.micro == last_micro) last_compute = std::max(last_compute, e.ts);
      }
      ASSERT_LT(first_bucket, 1e300) << "no bucket in step " << step << "\n" << out;
      EXPECT_LT(first_bucket, last_compute) << "step " << step << ": the buckets wait for the whole backward";
    }
  }
}

// On a device, --trace has a track of the kernels' device time beside each stream that queues
// them: an event per compute and variable act, inside its act on the host's clock, except that
// an update group's kernels are one event, on the act of the member that queued them. The sim
// device runs its kernels as the act queues them, so there the device's time lies within the
// act's (on CUDA it starts when the GPU gets to the kernels, after the act has queued them), up
// to the clock's stated uncertainty: early by at most that, never late.
TEST(Distributed, SimDeviceTraceHasTheKernelsTrack_1n1d) {
  const fs::path dir = fs::temp_directory_path() / ("flowrun_device_trace_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::string trace = (dir / "trace.json").string();
  const char* bin = std::getenv("FLOWRUN_BIN");
  int code = -1;
  const std::string out = Shell(std::string(bin ? bin : "build/src/flowrun") + " train " + kGpt +
                                    " --set train.steps=3 --set parallel.device=sim --trace " + Quote(trace), &code);
  ASSERT_EQ(code, 0) << out;
  std::ifstream f(trace);
  const std::regex act(R"re("name": "([^"]*)", "cat": "(\w+)", "ph": "X", "pid": 0, "tid": (\d+), "ts": ([0-9.]+), "dur": ([0-9.]+), "args": \{"step": (\d+), "micro": (\d+))re");
  std::map<std::tuple<std::string, int, int>, std::pair<double, double>> host, device;  // (task, step, micro) -> [begin, end]
  bool named = false;
  double uncertainty = -1;
  const std::regex clock(R"re("device_clock".*"uncertainty_us": ([0-9.]+))re");
  for (std::string line; std::getline(f, line);) {
    named = named || line.find("\"name\": \"compute (device)\"") != std::string::npos;
    std::smatch c;
    if (std::regex_search(line, c, clock)) uncertainty = std::stod(c[1]);
    std::smatch m;
    if (!std::regex_search(line, m, act)) continue;
    const std::string cat = m[2];
    const int tid = std::stoi(m[3]);
    const double ts = std::stod(m[4]), end = ts + std::stod(m[5]);
    const auto key = std::make_tuple(std::string(m[1]), std::stoi(m[6]), std::stoi(m[7]));
    if (tid >= 100) {
      device[key] = {ts, end};
    } else if (cat == "compute" || cat == "variable") {
      host[key] = {ts, end};
    }
  }
  fs::remove_all(dir);
  EXPECT_TRUE(named) << "no \"compute (device)\" track";
  ASSERT_GE(uncertainty, 0) << "no device_clock event";
  ASSERT_FALSE(host.empty());
  // The plan's update groups: each of the 3 updating acts of a group's variables is one event.
  const std::string dump = Shell(std::string(bin ? bin : "build/src/flowrun") + " plan " + kGpt +
                                     " --set parallel.device=sim --dump", &code);
  ASSERT_EQ(code, 0) << dump;
  const std::regex member(R"(\(update group (\d+)\))");
  std::set<std::string> groups;
  size_t grouped = 0;
  for (auto it = std::sregex_iterator(dump.begin(), dump.end(), member); it != std::sregex_iterator(); ++it, ++grouped)
    groups.insert((*it)[1]);
  ASSERT_GT(grouped, groups.size()) << "gpt_mini's updates are not grouped";
  EXPECT_EQ(device.size(), host.size() - 3 * (grouped - groups.size()))
      << "a device event per compute act, per variable act alone and per update group's";
  for (const auto& [key, d] : device) {
    auto h = host.find(key);
    ASSERT_NE(h, host.end()) << std::get<0>(key);
    // Microseconds; 0.01 for the file's rounding to nanoseconds.
    EXPECT_GE(d.first, h->second.first - uncertainty - 0.01) << std::get<0>(key);
    EXPECT_LE(d.second, h->second.second + 0.01) << std::get<0>(key);
    EXPECT_LE(d.first, d.second) << std::get<0>(key);
  }
}

// save: {onnx: PATH} writes model.onnx again with the trained parameters. Each layout's saved
// model, trained 3 steps and loaded again on one rank, gives the loss the one-rank run's saved
// model gives (within rtol 1e-5): every piece gathered to its place, only one of each replica,
// and the parts of a fused projection split for tensor parallelism (NAME[i]) joined back.
double LossOfSaved(const std::string& onnx, const char* config, const std::vector<std::string>& both, std::string* out) {
  const char* bin = std::getenv("FLOWRUN_BIN");
  const std::string jsonl = onnx + ".jsonl";
  std::string cmd = std::string(bin ? bin : "build/src/flowrun") + " train " + config + " --set train.steps=1 --set log.every=1" +
                    " --set model.onnx=" + Quote(onnx) + " --set log.jsonl=" + Quote(jsonl);
  for (const std::string& s : both) cmd += " --set " + Quote(s);
  int code = -1;
  *out += Shell(cmd, &code);
  std::ifstream f(jsonl);
  std::string line;
  std::getline(f, line);
  const size_t at = line.find("\"loss\":");
  return code != 0 || at == std::string::npos ? NAN : std::strtod(line.c_str() + at + 7, nullptr);
}

TEST(Distributed, SavedModelsMatchOneRank) {
  const char* bin = std::getenv("FLOWRUN_BIN");
  fs::path dir = fs::temp_directory_path() / ("flowrun_save_" + std::to_string(::getpid()));
  fs::create_directories(dir);
  const std::vector<Case> cases = {
      {"mlp_zero_dp2", kMlp, 2, {"parallel.sbp={x: [\"S(0)\"]}", "parallel.zero=true"}, {}},
      {"mlp_hybrid", kMlp, 4, {"parallel.mesh=[2, 2]", "parallel.sbp={x: [\"S(0)\", B], fc1.weight: [B, \"S(0)\"]}"}, {}},
      {"gpt_tp2", kGpt, 2,
       {"parallel.sbp={\"/blocks.*/attn/qkv/MatMul:1\": [\"S(1)\"], \"/blocks.*/mlp/fc/MatMul:1\": [\"S(1)\"]}",
        "cluster.flops=1.0e+13", "cluster.latency={intra: 5.0e-6, inter: 5.0e-6}",
        "cluster.bandwidth={intra: 1.0e+11, inter: 1.0e+11}", "cluster.p2p_latency=5.0e-6", "cluster.op_overhead=0"},
       {"schedule.warmup=2", "train.global_batch=2", "train.micro_batch=1"}},
      {"gpt_pp2", kGpt, 2, {"parallel.stages=[[\"/wte/*\", \"/wpe/*\", \"/Add\", \"/blocks.0/*\"], [\"*\"]]"},
       {"schedule.warmup=2", "train.micro_batch=4"}},
  };
  for (const Case& c : cases) {
    SCOPED_TRACE(c.name);
    std::string out;
    double loss[2];
    for (int strategy = 0; strategy < 2; ++strategy) {
      const std::string onnx = (dir / (std::string(c.name) + (strategy ? "_n.onnx" : "_1.onnx"))).string();
      std::string cmd = strategy ? "mpirun --allow-run-as-root --oversubscribe -n " + std::to_string(c.ranks) + " " : "";
      cmd += std::string(bin ? bin : "build/src/flowrun") + " train " + c.config + " --set train.steps=3 --set log.every=3" +
             " --set " + Quote("save={onnx: " + onnx + "}");
      for (const std::string& s : c.both) cmd += " --set " + Quote(s);
      if (strategy)
        for (const std::string& s : c.sets) cmd += " --set " + Quote(s);
      int code = -1;
      out += Shell(cmd, &code);
      ASSERT_EQ(code, 0) << out;
      ASSERT_NE(out.find("saved: " + onnx), std::string::npos) << out;
      loss[strategy] = LossOfSaved(onnx, c.config, c.both, &out);
      ASSERT_FALSE(std::isnan(loss[strategy])) << out;
    }
    EXPECT_NEAR(loss[1], loss[0], kRtol * std::fabs(loss[0])) << out;
  }
  fs::remove_all(dir);
}

}  // namespace
