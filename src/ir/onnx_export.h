// ONNX export of a trained model: the file the user brought, with the trained parameters in place
// of its initializers, so it loads wherever the original did (PyTorch, onnxruntime, flowrun).
#pragma once

#include <map>
#include <string>

#include "base/status.h"
#include "base/tensor.h"
#include "ir/onnx_import.h"

namespace fr::ir {

// Writes `model` to `path` with each float32 initializer named in `weights` replaced by that
// tensor (same shape). A weight named after the output of an Identity node instead (a parameter
// the import untied from the initializer it shared, onnx_import.h) becomes an initializer of its
// own and the Identity goes. Any other name, a shape or dtype that differs, or a file that cannot
// be written is an "[onnx]" error naming it; nothing is written then. The file is written whole or
// not at all (base/file.h AtomicFile): a failed write leaves the file at `path` as it was. When
// the model came with external data, or its initializers pass 1 GiB, those of 1 KiB or more go to
// PATH.data beside it (ONNX external data), written whole before the .onnx that points to it.
Status WriteOnnx(const OnnxModel& model, const std::map<std::string, Tensor>& weights, const std::string& path);

// The same check without writing: whether WriteOnnx would accept weights of these names and types
// (train runs it before training, so a run is not lost to a name it cannot save).
Status CheckOnnxWeights(const OnnxModel& model, const std::map<std::string, TensorType>& weights);

}  // namespace fr::ir
