// The ONNX importer (ir/onnx_import.h) on arbitrary bytes, through folding and shape inference,
// then the rewrites (ir/rewrite.h, every fused projection split) and the training graph
// (autodiff) on what it accepts. Each graph input is bound to its declared
// type, unknown or odd dims replaced by 2.
#include <cstddef>
#include <cstdint>
#include <map>
#include <string>

#include "base/process.h"
#include "ir/onnx_import.h"
#include "ir/onnx_proto.h"
#include "ir/rewrite.h"
#include "ir/training.h"
#include "onnx/onnx_pb.h"

// The fuzzer's process has 2 GiB (-rss_limit_mb): the importer budgets what it materialises as
// on a machine of 256 MiB, so that a model folding past its budget is an error, not an OOM.
extern "C" int LLVMFuzzerInitialize(int*, char***) {
  fr::SetMemoryBudgetBytes(256.0 * (1 << 20));
  return 0;
}

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  const std::string bytes(reinterpret_cast<const char*>(data), size);
  onnx::ModelProto m;
  if (!m.ParseFromString(bytes)) return 0;
  std::map<std::string, fr::ir::TensorType> inputs;
  for (const auto& in : m.graph().input()) {
    auto dt = fr::ir::DTypeFromOnnx(in.type().tensor_type().elem_type(), "fuzz");
    if (!dt.ok() || in.type().tensor_type().shape().dim_size() > 6) continue;
    std::vector<int64_t> dims;
    for (const auto& d : in.type().tensor_type().shape().dim()) {
      dims.push_back(d.has_dim_value() && d.dim_value() > 0 && d.dim_value() <= 64 ? d.dim_value() : 2);
    }
    inputs[in.name()] = fr::ir::TensorType{*dt, fr::Shape(dims)};
  }
  auto g = fr::ir::ImportOnnxBytes(bytes, "fuzz.onnx", inputs);
  if (!g.ok() || g->outputs.empty()) return 0;
  fr::ir::Rewrite(*g, fr::ir::RewriteOptions{[](const fr::ir::Node&, fr::ir::ValueId, fr::ir::ValueId) { return true; }});
  const fr::ir::TensorType out = g->type(g->outputs[0]);
  if (out.dtype != fr::DType::kF32) return 0;
  fr::ir::TrainingSpec spec;
  spec.loss = fr::ir::TrainingSpec::Loss::kMse;
  spec.loss_input = g->value(g->outputs[0]).name;
  spec.labels = "fuzz_labels";
  spec.labels_type = out;
  spec.config_path = "fuzz.yaml";
  (void)fr::ir::BuildTraining(std::move(*g), spec);
  return 0;
}
