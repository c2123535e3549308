// Evaluation on held-out data (the eval: section, driver/evaluate.h): the forward-only plan's loss
// is the training forward's on the same parameters and batch, on every layout; the split leaves
// the held-out samples out of training; configs that cannot be evaluated are refused.
#include <gtest/gtest.h>

#include <algorithm>
#include <cmath>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <string>
#include <vector>

#include "../flowrun_cmd.h"
#include "../temp_dir.h"
#include "driver/pipeline.h"

namespace {

namespace fs = std::filesystem;
using fr::testing::Bin;
using fr::testing::Quote;
using fr::testing::TempDir;

constexpr double kJobSeconds = 240;

struct Log {
  int code = -1;
  std::string out;
  std::vector<double> loss;                         // per step
  std::vector<std::pair<long, double>> eval_loss;  // (after step, loss)
};

double Number(const std::string& line, const std::string& key) {
  const size_t at = line.find("\"" + key + "\":");
  return at == std::string::npos ? NAN : std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

Log Train(const std::string& config, int ranks, const std::vector<std::string>& sets, const fs::path& jsonl) {
  std::string cmd = ranks > 1 ? "mpirun --oversubscribe --allow-run-as-root -n " + std::to_string(ranks) + " " : "";
  cmd += Bin() + " train " + config + " --set log.every=1 --set log.jsonl=" + Quote(jsonl.string());
  for (const std::string& s : sets) cmd += s.starts_with("--") ? " " + s : " --set " + Quote(s);  // an option, or a --set
  const fr::testing::Output o = fr::testing::Shell(cmd, kJobSeconds);
  Log r;
  r.code = o.code;
  r.out = cmd + "\n" + o.out;
  std::ifstream f(jsonl);
  for (std::string line; std::getline(f, line);) {
    if (line.find("\"eval_loss\":") != std::string::npos) {
      r.eval_loss.emplace_back(static_cast<long>(Number(line, "step")), Number(line, "eval_loss"));
    } else {
      r.loss.push_back(Number(line, "loss"));
    }
  }
  return r;
}

// A token file of exactly one batch of configs/gpt.yaml (16 windows of 64): every step trains on
// it, and an evaluation on it after step k sees the batch and parameters of step k + 1's forward.
fs::path OneBatch(const TempDir& tmp) {
  std::ifstream in("data/devils_dictionary.u16", std::ios::binary);
  std::string bytes(2 * (16 * 64 + 1), '\0');
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const fs::path p = fs::path(tmp.path()) / "one_batch.u16";
  std::ofstream(p, std::ios::binary) << bytes;
  return p;
}

void ExpectEvalIsTheNextForward(int ranks, const std::vector<std::string>& layout) {
  TempDir tmp;
  const fs::path data = OneBatch(tmp);
  std::vector<std::string> sets = {"train.steps=6", "data.train=" + data.string(), "eval={every: 1, steps: 1, data: " + data.string() + "}"};
  sets.insert(sets.end(), layout.begin(), layout.end());
  const Log r = Train("configs/gpt.yaml", ranks, sets, fs::path(tmp.path()) / "log.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.loss.size(), 6u) << r.out;
  ASSERT_EQ(r.eval_loss.size(), 6u) << r.out;
  for (size_t k = 0; k + 1 < 6; ++k) {
    EXPECT_EQ(r.eval_loss[k].first, static_cast<long>(k + 1));
    EXPECT_EQ(r.eval_loss[k].second, r.loss[k + 1]) << "the evaluation after step " << k + 1 << " and step " << k + 2 << "'s loss\n" << r.out;
  }
}

TEST(Eval, IsTheForwardLossOfTheTrainedParameters_1n1d) { ExpectEvalIsTheNextForward(1, {}); }
TEST(Eval, IsTheForwardLossOfTheTrainedParameters_1n2d) {
  ExpectEvalIsTheNextForward(2, {"parallel.sbp={idx: [\"S(0)\"]}"});
  ExpectEvalIsTheNextForward(2, {"parallel.sbp={idx: [\"S(0)\"]}", "parallel.zero=true"});
}

// The held-out loss is the model's, whatever the layout: one rank's within the layouts' rounding.
TEST(Eval, TheSameOnEveryLayout_1n2d) {
  TempDir tmp;
  const std::vector<std::string> common = {"train.steps=20", "eval={every: 10, steps: 2, split: 0.25}"};
  const Log one = Train("configs/mlp.yaml", 1, common, fs::path(tmp.path()) / "one.jsonl");
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(one.eval_loss.size(), 2u) << one.out;
  ASSERT_EQ(one.loss.size(), 20u) << one.out;
  const std::vector<std::vector<std::string>> layouts = {{"parallel.sbp={x: [\"S(0)\"]}"},
                                                         {"parallel.sbp={fc1.weight: [\"S(0)\"]}"},
                                                         {"parallel.stages=[[\"/fc1/*\", \"/Relu\"], [\"*\"]]"},
                                                         {"parallel.zero=true", "parallel.sbp={x: [\"S(0)\"]}"}};
  for (const auto& l : layouts) {
    std::vector<std::string> sets = common;
    sets.insert(sets.end(), l.begin(), l.end());
    const Log r = Train("configs/mlp.yaml", 2, sets, fs::path(tmp.path()) / "two.jsonl");
    SCOPED_TRACE(l.back());
    ASSERT_EQ(r.code, 0) << r.out;
    ASSERT_EQ(r.eval_loss.size(), 2u) << r.out;
    for (size_t i = 0; i < 2; ++i) {
      EXPECT_EQ(r.eval_loss[i].first, one.eval_loss[i].first);
      EXPECT_NEAR(r.eval_loss[i].second, one.eval_loss[i].second, 1e-5 * std::fabs(one.eval_loss[i].second)) << r.out;
    }
  }
}

// eval.split holds out the last windows: training sees exactly the file without them.
TEST(Eval, TheSplitIsLeftOutOfTraining_1n1d) {
  TempDir tmp;
  std::ifstream in("data/devils_dictionary.u16", std::ios::binary);
  std::string bytes(2 * (40 * 64 + 1), '\0');  // 40 windows of 64: the last 10 held out by 0.25
  in.read(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  const fs::path all = fs::path(tmp.path()) / "all.u16", first = fs::path(tmp.path()) / "first.u16";
  std::ofstream(all, std::ios::binary) << bytes;
  std::ofstream(first, std::ios::binary) << bytes.substr(0, 2 * (30 * 64 + 1));
  const Log split = Train("configs/gpt.yaml", 1, {"train.steps=8", "data.train=" + all.string(), "eval={steps: 1, split: 0.25}"},
                          fs::path(tmp.path()) / "a.jsonl");
  const Log cut = Train("configs/gpt.yaml", 1, {"train.steps=8", "data.train=" + first.string()}, fs::path(tmp.path()) / "b.jsonl");
  ASSERT_EQ(split.code, 0) << split.out;
  ASSERT_EQ(cut.code, 0) << cut.out;
  EXPECT_EQ(split.loss, cut.loss);
  ASSERT_EQ(split.eval_loss.size(), 1u) << split.out;  // every: 0, at the end only
  EXPECT_EQ(split.eval_loss[0].first, 8);
}

// The evaluation plan has the forward and the loss only: no backward, optimizer or norm tasks.
TEST(Eval, ThePlanIsForwardOnly) {
  auto cfg = fr::LoadConfig("configs/mlp.yaml", {"eval={steps: 3, split: 0.25}", "parallel.sbp={x: [\"S(0)\"]}"});
  ASSERT_TRUE(cfg.ok()) << cfg.status().message();
  auto c = fr::Compile(*cfg, 2);
  ASSERT_TRUE(c.ok()) << c.status().message();
  fr::ir::TrainingGraph g;
  auto plan = fr::CompileEval(*cfg, *c, 1000, &g);
  ASSERT_TRUE(plan.ok()) << plan.status().message();
  EXPECT_EQ(g.grad_norm_sq, fr::ir::kNoValue);
  for (const fr::ir::Node& n : g.graph.nodes) {
    EXPECT_NE(n.phase, fr::ir::Phase::kBackward) << n.name;
    EXPECT_NE(n.phase, fr::ir::Phase::kOptimizer) << n.name;
  }
  int losses = 0;
  for (const fr::ir::TaskDesc& t : plan->tasks) {
    EXPECT_NE(t.kind, fr::ir::TaskKind::kNormSink) << t.name;
    if (t.kind == fr::ir::TaskKind::kVariable) {
      EXPECT_LT(t.node, 0) << t.name << " updates its parameter";
    }
    if (t.kind == fr::ir::TaskKind::kBoxing && t.move.collective >= 0) {
      EXPECT_GE(t.move.collective, 1000) << t.name;
    }
    losses += t.kind == fr::ir::TaskKind::kLossSink;
  }
  EXPECT_EQ(losses, 1);
  EXPECT_EQ(plan->steps, 3);
}

// A BatchNormalization that trains (the TorchScript CNN and ResNet exports) is evaluated as
// PyTorch's model.eval() evaluates it: normalized with the running statistics training keeps. The
// 20 training losses (on the first three quarters of the samples) and the evaluations after steps
// 10 and 20 equal PyTorch's within rtol 1e-4 (tools/make_bn_eval.py writes NAME_eval.json).
constexpr double kPyTorchRtol = 1e-4;
const char* const kBatchNormEval = "eval={every: 10, steps: 2, split: 0.25}";

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The numbers of the flat JSON array after "key": in `text`.
std::vector<double> JsonArray(const std::string& text, const std::string& key) {
  std::vector<double> v;
  const size_t at = text.find("\"" + key + "\": [");
  if (at == std::string::npos) return v;
  const char* p = text.c_str() + text.find('[', at) + 1;
  for (char* next = nullptr;; p = next) {
    while (*p == ' ' || *p == '\n' || *p == ',') ++p;
    const double d = std::strtod(p, &next);
    if (next == p) break;
    v.push_back(d);
  }
  return v;
}

void ExpectPyTorchsEvalMode(const std::string& stem) {
  SCOPED_TRACE(stem);
  const std::string ref = ReadAll("tests/golden/exports/" + stem + "_eval.json");
  ASSERT_NE(ref.find(std::string("\"set\": \"") + kBatchNormEval + "\""), std::string::npos) << "the reference was made with another eval:";
  const std::vector<double> losses = JsonArray(ref, "losses"), steps = JsonArray(ref, "eval_steps"), evals = JsonArray(ref, "eval_losses");
  ASSERT_EQ(losses.size(), 20u);
  ASSERT_EQ(evals.size(), 2u);
  TempDir tmp;
  const Log r = Train("tests/golden/exports/" + stem + ".yaml", 1, {kBatchNormEval}, fs::path(tmp.path()) / "log.jsonl");
  ASSERT_EQ(r.code, 0) << r.out;
  ASSERT_EQ(r.loss.size(), losses.size()) << r.out;
  for (size_t i = 0; i < losses.size(); ++i) EXPECT_NEAR(r.loss[i], losses[i], kPyTorchRtol * std::fabs(losses[i])) << "step " << i + 1;
  ASSERT_EQ(r.eval_loss.size(), evals.size()) << r.out;
  double worst = 0;
  for (size_t i = 0; i < evals.size(); ++i) {
    EXPECT_EQ(r.eval_loss[i].first, static_cast<long>(steps[i]));
    EXPECT_NEAR(r.eval_loss[i].second, evals[i], kPyTorchRtol * std::fabs(evals[i])) << "the evaluation after step " << steps[i];
    worst = std::max(worst, std::fabs(r.eval_loss[i].second - evals[i]) / std::fabs(evals[i]));
  }
  std::cout << "[ parity   ] " << stem << ": evaluations " << r.eval_loss[0].second << ", " << r.eval_loss[1].second
            << ", max relative difference from PyTorch's " << worst << std::endl;
}
TEST(Eval, BatchNormIsPyTorchsEvalMode_1n1d) {
  for (const char* stem : {"cnn_torchscript_sgd", "cnn_torchscript_adamw", "resnet_torchscript_sgd", "resnet_torchscript_adamw"})
    ExpectPyTorchsEvalMode(stem);
}

// Every rank that evaluates a BatchNorm keeps its running statistics: data parallel, and two
// pipeline stages (the second's statistics on rank 1) evaluate as one rank does; and a run resumed
// from a checkpoint on two stages evaluates as the run it continues, bit for bit.
TEST(Eval, BatchNormOnEveryLayoutAndAfterAResume_1n2d) {
  TempDir tmp;
  const fs::path root = tmp.path();
  const std::string cfg = "tests/golden/exports/resnet_torchscript_sgd.yaml";
  const std::string pipeline = "parallel.stages=[[\"/0/*\", \"/1/*\", \"/2/*\", \"/3/*\"], [\"*\"]]";
  const Log one = Train(cfg, 1, {kBatchNormEval}, root / "one.jsonl");
  ASSERT_EQ(one.code, 0) << one.out;
  ASSERT_EQ(one.eval_loss.size(), 2u) << one.out;
  for (const std::string& layout : {std::string("parallel.sbp={x: [\"S(0)\"]}"), pipeline}) {
    SCOPED_TRACE(layout);
    const Log r = Train(cfg, 2, {kBatchNormEval, layout}, root / "two.jsonl");
    ASSERT_EQ(r.code, 0) << r.out;
    ASSERT_EQ(r.eval_loss.size(), 2u) << r.out;
    for (size_t i = 0; i < 2; ++i)
      EXPECT_NEAR(r.eval_loss[i].second, one.eval_loss[i].second, 1e-5 * std::fabs(one.eval_loss[i].second)) << r.out;
  }
  const std::string ck = "checkpoint={dir: " + (root / "ck").string() + ", every: 10}";
  const Log full = Train(cfg, 2, {kBatchNormEval, pipeline, ck}, root / "full.jsonl");
  ASSERT_EQ(full.code, 0) << full.out;
  fs::remove_all(root / "ck" / "step-00000020");
  const Log rest = Train(cfg, 2, {kBatchNormEval, pipeline, ck, "--resume"}, root / "rest.jsonl");
  ASSERT_EQ(rest.code, 0) << rest.out;
  ASSERT_EQ(full.eval_loss.size(), 2u) << full.out;
  ASSERT_EQ(rest.eval_loss.size(), 1u) << rest.out;
  EXPECT_EQ(rest.eval_loss[0].first, 20);
  EXPECT_EQ(rest.eval_loss[0].second, full.eval_loss[1].second) << rest.out;
}

// What cannot be evaluated is refused before training, with exit code 2, naming the key or file.
TEST(Eval, WhatCannotBeEvaluatedIsRefused_1n1d) {
  TempDir tmp;
  struct Case {
    std::string config;
    std::vector<std::string> sets;
    std::string expect;
  };
  const std::vector<Case> cases = {
      {"configs/gpt.yaml", {"eval={steps: 1, split: 0.1, data: data/devils_dictionary.u16}"}, "eval.split: give eval.data (a token file) or eval.split"},
      {"configs/gpt.yaml", {"eval={steps: 1}"}, "eval.data: missing: eval needs eval.data"},
      {"configs/gpt.yaml", {"eval={steps: 1, split: 1.5}"}, "a fraction of data.train's samples, in (0, 1)"},
      {"configs/gpt.yaml", {"eval={steps: 0, split: 0.1}"}, "eval.steps"},
      {"configs/gpt.yaml", {"eval={every: -1, split: 0.1}"}, "eval.every"},
      {"configs/gpt.yaml", {"eval={steps: 1, data: " + (fs::path(tmp.path()) / "none.u16").string() + "}"}, "[data] eval.data: cannot read '"},
      {"configs/mlp.yaml", {"eval={steps: 1, data: data/devils_dictionary.u16}"}, "a token file, for data.format tokens"},
      {"configs/mlp.yaml", {"eval={steps: 1, split: 0.00001}"}, "leaves none to evaluate on"},
  };
  for (const Case& c : cases) {
    const Log r = Train(c.config, 1, c.sets, fs::path(tmp.path()) / "log.jsonl");
    EXPECT_EQ(r.code, 2) << r.out;
    EXPECT_NE(r.out.find(c.expect), std::string::npos) << c.expect << "\n" << r.out;
    EXPECT_EQ(r.out.find("step 1/"), std::string::npos) << r.out;
  }
}

}  // namespace
