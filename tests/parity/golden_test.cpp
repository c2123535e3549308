// Rung 2 of the correctness ladder (DESIGN.md §6): each golden run in tests/golden trains 20 steps
// on one device and its per-step loss and gradient norm equal PyTorch's within rtol 1e-4. The
// reference numbers (tests/golden/NAME.json) come from tools/make_reference.py. Runs the binary
// named by FLOWRUN_BIN from the repository root.
#include <gtest/gtest.h>
#include <sys/wait.h>
#include <unistd.h>

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <iostream>
#include <iterator>
#include <set>
#include <sstream>
#include <string>
#include <vector>

#include "../flowrun_cmd.h"
#include "onnx/onnx_pb.h"

namespace {

namespace fs = std::filesystem;

constexpr double kRtol = 1e-4;

// The golden runs with a test below; Parity.EveryGoldenRunHasATest keeps this list complete.
const char* const kGolden[] = {"mlp_sgd", "mlp_adamw", "mlp_ln_gelu_sgd", "mlp_ln_gelu_adamw", "gpt_sgd", "gpt_adamw",
                               "exports/gpt2_dynamo_sgd", "exports/gpt2_dynamo_adamw",
                               "exports/llama_dynamo_sgd", "exports/llama_dynamo_adamw",
                               "exports/gpt2_torchscript_sgd", "exports/gpt2_torchscript_adamw",
                               "exports/llama_torchscript_sgd", "exports/llama_torchscript_adamw",
                               "exports/nanogpt_dynamo_sgd", "exports/nanogpt_dynamo_adamw",
                               "exports/nanogpt_torchscript_sgd", "exports/nanogpt_torchscript_adamw",
                               "exports/cnn_torchscript_sgd", "exports/cnn_torchscript_adamw",
                               "exports/resnet_torchscript_sgd", "exports/resnet_torchscript_adamw",
                               "exports/cnn_dynamo_sgd", "exports/cnn_dynamo_adamw",
                               "exports/resnet_dynamo_sgd", "exports/resnet_dynamo_adamw",
                               "exports/bert_torchscript_sgd", "exports/bert_torchscript_adamw",
                               "exports/bert_dynamo_sgd", "exports/bert_dynamo_adamw",
                               "exports/bert_dropout_torchscript_sgd", "exports/bert_dropout_torchscript_adamw",
                               "exports/bert_dropout_dynamo_sgd", "exports/bert_dropout_dynamo_adamw",
                               "exports/bert_mlm_torchscript_sgd", "exports/bert_mlm_torchscript_adamw",
                               "exports/bert_mlm_dynamo_sgd", "exports/bert_mlm_dynamo_adamw",
                               "exports/gpt2_fresh_dynamo_sgd", "exports/gpt2_fresh_dynamo_adamw",
                               "exports/gpt2_fresh_torchscript_sgd", "exports/gpt2_fresh_torchscript_adamw",
                               "exports/gpt2_tanh_dynamo_sgd", "exports/gpt2_tanh_dynamo_adamw",
                               "exports/gpt2_tanh_torchscript_sgd", "exports/gpt2_tanh_torchscript_adamw"};

std::string ReadAll(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  return std::string(std::istreambuf_iterator<char>(f), {});
}

// The numbers of the JSON array after "key": in `text`.
std::vector<double> JsonArray(const std::string& text, const std::string& key) {
  std::vector<double> v;
  size_t at = text.find("\"" + key + "\"");
  if (at == std::string::npos) return v;
  at = text.find('[', at);
  size_t end = text.find(']', at);
  if (at == std::string::npos || end == std::string::npos) return v;
  const char* p = text.c_str() + at + 1;
  const char* stop = text.c_str() + end;
  while (p < stop) {
    char* next = nullptr;
    double d = std::strtod(p, &next);
    if (next == p) {
      ++p;
      continue;
    }
    v.push_back(d);
    p = next;
  }
  return v;
}

// The number after "key": in one JSONL line; NaN if absent.
double JsonNumber(const std::string& line, const std::string& key) {
  size_t at = line.find("\"" + key + "\":");
  if (at == std::string::npos) return std::nan("");
  return std::strtod(line.c_str() + at + key.size() + 3, nullptr);
}

struct Step {
  double step, loss, gnorm, lr;
};

std::vector<Step> ReadJsonl(const std::string& path) {
  std::vector<Step> out;
  std::ifstream f(path);
  for (std::string line; std::getline(f, line);) {
    if (line.empty()) continue;
    out.push_back({JsonNumber(line, "step"), JsonNumber(line, "loss"), JsonNumber(line, "gnorm"), JsonNumber(line, "lr")});
  }
  return out;
}

int RunFlowrun(const std::string& config, const std::string& jsonl, std::string& output, const std::string& save = "") {
  const char* bin = std::getenv("FLOWRUN_BIN");
  std::string cmd = std::string(bin && *bin ? bin : "build/src/flowrun") + " train '" + config + "' --set 'log.jsonl=" +
                    jsonl + "'";
  if (!save.empty()) cmd += " --set 'save.onnx=" + save + "'";
  // FLOWRUN_PARITY_SET="parallel.device=cuda ...": the same golden runs with settings of the
  // caller's (tools/gpu_check.sh runs them on a GPU).
  if (const char* extra = std::getenv("FLOWRUN_PARITY_SET")) {
    std::istringstream items(extra);
    for (std::string item; items >> item;) cmd += " --set '" + item + "'";
  }
  const fr::testing::Output r = fr::testing::Shell(cmd, 120);
  output += r.out;
  return r.code;
}

double RelDiff(double got, double want) { return std::fabs(got - want) / std::max(std::fabs(want), 1e-30); }

void CheckGolden(const std::string& name) {
  const std::string config = "tests/golden/" + name + ".yaml";
  const std::string ref = ReadAll("tests/golden/" + name + ".json");
  ASSERT_FALSE(ref.empty()) << "tests/golden/" << name << ".json is missing";
  const std::vector<double> losses = JsonArray(ref, "losses"), gnorms = JsonArray(ref, "gnorms"),
                            lrs = JsonArray(ref, "lrs");
  ASSERT_EQ(losses.size(), 20u);
  ASSERT_EQ(gnorms.size(), losses.size());
  ASSERT_EQ(lrs.size(), losses.size());

  std::string tmpl = (fs::temp_directory_path() / "flowrun_parity_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string jsonl = tmpl + "/" + fs::path(name).filename().string() + ".jsonl";
  std::string output;
  int code = RunFlowrun(config, jsonl, output);
  std::vector<Step> got = ReadJsonl(jsonl);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  ASSERT_EQ(code, 0) << output;
  ASSERT_EQ(got.size(), losses.size()) << output;

  double max_loss = 0, max_gnorm = 0, max_lr = 0;
  for (size_t i = 0; i < losses.size(); ++i) {
    SCOPED_TRACE("step " + std::to_string(i + 1));
    EXPECT_EQ(got[i].step, static_cast<double>(i + 1));
    EXPECT_NEAR(got[i].loss, losses[i], kRtol * std::fabs(losses[i]));
    EXPECT_NEAR(got[i].gnorm, gnorms[i], kRtol * std::fabs(gnorms[i]));
    EXPECT_NEAR(got[i].lr, lrs[i], 1e-6 * std::fabs(lrs[i]));
    max_loss = std::max(max_loss, RelDiff(got[i].loss, losses[i]));
    max_gnorm = std::max(max_gnorm, RelDiff(got[i].gnorm, gnorms[i]));
    max_lr = std::max(max_lr, RelDiff(got[i].lr, lrs[i]));
  }
  char line[256];
  std::snprintf(line, sizeof line, "%s: max relative difference over %zu steps: loss %.2e, gnorm %.2e, lr %.2e",
                name.c_str(), losses.size(), max_loss, max_gnorm, max_lr);
  std::cout << "[ parity   ] " << line << std::endl;
  ::testing::Test::RecordProperty("max_rel_loss", std::to_string(max_loss));
  ::testing::Test::RecordProperty("max_rel_gnorm", std::to_string(max_gnorm));
}

TEST(Parity, Golden_mlp_sgd_1n1d) { CheckGolden("mlp_sgd"); }
TEST(Parity, Golden_mlp_adamw_1n1d) { CheckGolden("mlp_adamw"); }
TEST(Parity, Golden_mlp_ln_gelu_sgd_1n1d) { CheckGolden("mlp_ln_gelu_sgd"); }
TEST(Parity, Golden_mlp_ln_gelu_adamw_1n1d) { CheckGolden("mlp_ln_gelu_adamw"); }
// gpt_mini as PyTorch exports it (models/gpt_mini.onnx, tools/make_gpt.py), on real text.
TEST(Parity, Golden_gpt_sgd_1n1d) { CheckGolden("gpt_sgd"); }
TEST(Parity, Golden_gpt_adamw_1n1d) { CheckGolden("gpt_adamw"); }

// Tiny Hugging Face models exported by current PyTorch (tools/make_exports.py): GPT-2 (tied head,
// tanh GELU as Pow and Tanh) and Llama (RMSNorm, rotary embeddings, grouped-query attention, SiLU),
// by the default (dynamo) exporter at opset 20 with the weights in external data, and by the
// TorchScript exporter (its tied head a transposed copy that import ties back; masks built from
// LessOrEqual and And); and nanoGPT (attention through scaled_dot_product_attention, the ONNX Gelu
// op in its tanh form, a tied head, positions folded by both exporters into an initializer that
// trains).
TEST(Parity, Golden_exports_gpt2_dynamo_sgd_1n1d) { CheckGolden("exports/gpt2_dynamo_sgd"); }
TEST(Parity, Golden_exports_gpt2_dynamo_adamw_1n1d) { CheckGolden("exports/gpt2_dynamo_adamw"); }
TEST(Parity, Golden_exports_llama_dynamo_sgd_1n1d) { CheckGolden("exports/llama_dynamo_sgd"); }
TEST(Parity, Golden_exports_llama_dynamo_adamw_1n1d) { CheckGolden("exports/llama_dynamo_adamw"); }
TEST(Parity, Golden_exports_gpt2_torchscript_sgd_1n1d) { CheckGolden("exports/gpt2_torchscript_sgd"); }
TEST(Parity, Golden_exports_gpt2_torchscript_adamw_1n1d) { CheckGolden("exports/gpt2_torchscript_adamw"); }
TEST(Parity, Golden_exports_llama_torchscript_sgd_1n1d) { CheckGolden("exports/llama_torchscript_sgd"); }
TEST(Parity, Golden_exports_llama_torchscript_adamw_1n1d) { CheckGolden("exports/llama_torchscript_adamw"); }
TEST(Parity, Golden_exports_nanogpt_dynamo_sgd_1n1d) { CheckGolden("exports/nanogpt_dynamo_sgd"); }
TEST(Parity, Golden_exports_nanogpt_dynamo_adamw_1n1d) { CheckGolden("exports/nanogpt_dynamo_adamw"); }
TEST(Parity, Golden_exports_nanogpt_torchscript_sgd_1n1d) { CheckGolden("exports/nanogpt_torchscript_sgd"); }
TEST(Parity, Golden_exports_nanogpt_torchscript_adamw_1n1d) { CheckGolden("exports/nanogpt_torchscript_adamw"); }
// A CNN (Conv, BatchNormalization, ReLU, MaxPool, AveragePool) and a tiny ResNet (torchvision's
// BasicBlock, a strided 1x1 downsample, GlobalAveragePool), exported in training mode by the
// TorchScript exporter, which keeps BatchNormalization with batch statistics.
TEST(Parity, Golden_exports_cnn_torchscript_sgd_1n1d) { CheckGolden("exports/cnn_torchscript_sgd"); }
TEST(Parity, Golden_exports_cnn_torchscript_adamw_1n1d) { CheckGolden("exports/cnn_torchscript_adamw"); }
TEST(Parity, Golden_exports_resnet_torchscript_sgd_1n1d) { CheckGolden("exports/resnet_torchscript_sgd"); }
TEST(Parity, Golden_exports_resnet_torchscript_adamw_1n1d) { CheckGolden("exports/resnet_torchscript_adamw"); }
// BERT for sequence classification: three graph inputs (input_ids, attention_mask, token_type_ids)
// fed from npy arrays, padded positions masked out.
TEST(Parity, Golden_exports_bert_torchscript_sgd_1n1d) { CheckGolden("exports/bert_torchscript_sgd"); }
TEST(Parity, Golden_exports_bert_torchscript_adamw_1n1d) { CheckGolden("exports/bert_torchscript_adamw"); }
TEST(Parity, Golden_exports_bert_dynamo_sgd_1n1d) { CheckGolden("exports/bert_dynamo_sgd"); }
TEST(Parity, Golden_exports_bert_dynamo_adamw_1n1d) { CheckGolden("exports/bert_dynamo_adamw"); }
// The same BERT with its dropouts at 0.1, exported in training mode (Dropout nodes kept), trained
// with model.dropout: false: it must equal PyTorch's model without dropout (the same weights).
TEST(Parity, Golden_exports_bert_dropout_torchscript_sgd_1n1d) { CheckGolden("exports/bert_dropout_torchscript_sgd"); }
TEST(Parity, Golden_exports_bert_dropout_torchscript_adamw_1n1d) { CheckGolden("exports/bert_dropout_torchscript_adamw"); }
TEST(Parity, Golden_exports_bert_dropout_dynamo_sgd_1n1d) { CheckGolden("exports/bert_dropout_dynamo_sgd"); }
TEST(Parity, Golden_exports_bert_dropout_dynamo_adamw_1n1d) { CheckGolden("exports/bert_dropout_dynamo_adamw"); }
// GPT-2 with its LayerNorms at PyTorch's initialisation (weights 1, biases 0): the dynamo exporter
// merges the equal initializers into one that every LayerNorm reads, which import unties (each
// reader its own copy); the TorchScript exporter shares them through Identity nodes.
TEST(Parity, Golden_exports_gpt2_fresh_dynamo_sgd_1n1d) { CheckGolden("exports/gpt2_fresh_dynamo_sgd"); }
TEST(Parity, Golden_exports_gpt2_fresh_dynamo_adamw_1n1d) { CheckGolden("exports/gpt2_fresh_dynamo_adamw"); }
TEST(Parity, Golden_exports_gpt2_fresh_torchscript_sgd_1n1d) { CheckGolden("exports/gpt2_fresh_torchscript_sgd"); }
TEST(Parity, Golden_exports_gpt2_fresh_torchscript_adamw_1n1d) { CheckGolden("exports/gpt2_fresh_torchscript_adamw"); }
// GPT-2 with F.gelu(approximate="tanh") (gelu_pytorch_tanh), exported at opsets 18 (dynamo) and 17
// (TorchScript), which write the GELU as chains in orders of their own: fused, as NewGELU's is.
TEST(Parity, Golden_exports_gpt2_tanh_dynamo_sgd_1n1d) { CheckGolden("exports/gpt2_tanh_dynamo_sgd"); }
TEST(Parity, Golden_exports_gpt2_tanh_dynamo_adamw_1n1d) { CheckGolden("exports/gpt2_tanh_dynamo_adamw"); }
TEST(Parity, Golden_exports_gpt2_tanh_torchscript_sgd_1n1d) { CheckGolden("exports/gpt2_tanh_torchscript_sgd"); }
TEST(Parity, Golden_exports_gpt2_tanh_torchscript_adamw_1n1d) { CheckGolden("exports/gpt2_tanh_torchscript_adamw"); }
// BERT for masked LM: logits [B, S, V] from a head tied to the word embeddings (TorchScript: a
// transposed copy tied back), 15% of the positions masked and labelled, the rest -100 (ignored).
TEST(Parity, Golden_exports_bert_mlm_torchscript_sgd_1n1d) { CheckGolden("exports/bert_mlm_torchscript_sgd"); }
TEST(Parity, Golden_exports_bert_mlm_torchscript_adamw_1n1d) { CheckGolden("exports/bert_mlm_torchscript_adamw"); }
TEST(Parity, Golden_exports_bert_mlm_dynamo_sgd_1n1d) { CheckGolden("exports/bert_mlm_dynamo_sgd"); }
TEST(Parity, Golden_exports_bert_mlm_dynamo_adamw_1n1d) { CheckGolden("exports/bert_mlm_dynamo_adamw"); }

// BatchNorm's running statistics (the TorchScript CNN and ResNet, training mode): training
// updates them from every micro-batch's statistics and save writes them; they must equal PyTorch's
// buffers after the same 20 steps (tools/make_exports.py: "running", started from the file's),
// within rtol 1e-4 of the tensor's largest magnitude: a channel's mean near 0 is a sum of terms
// that cancel, whose rounding is relative to the terms, not to the sum.
void CheckSavedRunningStats(const std::string& name) {
  const std::string ref = ReadAll("tests/golden/" + name + ".json");
  ASSERT_NE(ref.find("\"running\""), std::string::npos) << name << ".json has no running statistics";
  std::string tmpl = (fs::temp_directory_path() / "flowrun_parity_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  std::string output;
  const int code = RunFlowrun("tests/golden/" + name + ".yaml", tmpl + "/run.jsonl", output, tmpl + "/saved.onnx");
  onnx::ModelProto saved;
  const bool parsed = saved.ParseFromString(ReadAll(tmpl + "/saved.onnx"));
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  ASSERT_EQ(code, 0) << output;
  ASSERT_TRUE(parsed) << output;
  int checked = 0;
  double worst = 0;
  for (const onnx::TensorProto& t : saved.graph().initializer()) {
    const std::string& n = t.name();
    if (!n.ends_with("running_mean") && !n.ends_with("running_var")) continue;
    SCOPED_TRACE(n);
    const std::vector<double> want = JsonArray(ref, n);
    ASSERT_EQ(want.size() * sizeof(float), t.raw_data().size());
    const auto* got = reinterpret_cast<const float*>(t.raw_data().data());
    double scale = 0;
    for (double w : want) scale = std::max(scale, std::fabs(w));
    for (size_t i = 0; i < want.size(); ++i) {
      EXPECT_NEAR(got[i], want[i], kRtol * scale) << "channel " << i;
      worst = std::max(worst, std::fabs(got[i] - want[i]) / scale);
    }
    ++checked;
  }
  EXPECT_GE(checked, 4) << "the saved model has no running statistics";
  std::cout << "[ parity   ] " << name << ": " << checked << " running statistics, max relative difference " << worst << std::endl;
}
TEST(Parity, SavedRunningStats_cnn_torchscript_sgd_1n1d) { CheckSavedRunningStats("exports/cnn_torchscript_sgd"); }
TEST(Parity, SavedRunningStats_resnet_torchscript_adamw_1n1d) { CheckSavedRunningStats("exports/resnet_torchscript_adamw"); }

// The dynamo exporter folds every BatchNormalization into the Conv before it, even from a model in
// training mode: the file computes conv(x) with the running statistics baked in, not batch
// statistics, and no trainer can recover the model PyTorch trains. flowrun trains the file as it
// is; these check that it refuses nothing and differs from PyTorch, as it must, and not by a crash.
void ExpectFoldedBatchNormDiffers(const std::string& name) {
  const std::string ref = ReadAll("tests/golden/" + name + ".json");
  const std::vector<double> losses = JsonArray(ref, "losses");
  ASSERT_EQ(losses.size(), 20u);
  std::string tmpl = (fs::temp_directory_path() / "flowrun_parity_XXXXXX").string();
  ASSERT_NE(mkdtemp(tmpl.data()), nullptr);
  const std::string jsonl = tmpl + "/run.jsonl";
  std::string output;
  const int code = RunFlowrun("tests/golden/" + name + ".yaml", jsonl, output);
  const std::vector<Step> got = ReadJsonl(jsonl);
  std::error_code ec;
  fs::remove_all(tmpl, ec);
  ASSERT_EQ(code, 0) << output;
  ASSERT_EQ(got.size(), 20u) << output;
  EXPECT_GT(RelDiff(got[0].loss, losses[0]), 1e-3) << "the folded model's first loss should not be PyTorch's";
}
TEST(Parity, FoldedBatchNorm_exports_cnn_dynamo_sgd) { ExpectFoldedBatchNormDiffers("exports/cnn_dynamo_sgd"); }
TEST(Parity, FoldedBatchNorm_exports_cnn_dynamo_adamw) { ExpectFoldedBatchNormDiffers("exports/cnn_dynamo_adamw"); }
TEST(Parity, FoldedBatchNorm_exports_resnet_dynamo_sgd) { ExpectFoldedBatchNormDiffers("exports/resnet_dynamo_sgd"); }
TEST(Parity, FoldedBatchNorm_exports_resnet_dynamo_adamw) { ExpectFoldedBatchNormDiffers("exports/resnet_dynamo_adamw"); }

TEST(Parity, EveryGoldenRunHasATest) {
  std::set<std::string> files, listed(std::begin(kGolden), std::end(kGolden));
  for (const char* dir : {"tests/golden", "tests/golden/exports"})
    for (const auto& e : fs::directory_iterator(dir))
      if (e.path().extension() == ".yaml") {
        files.insert((std::string(dir) == "tests/golden" ? "" : "exports/") + e.path().stem().string());
      }
  EXPECT_EQ(files, listed) << "add a TEST(Parity, Golden_NAME_1n1d) for each tests/golden/NAME.yaml";
}

}  // namespace
