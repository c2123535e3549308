// Reading ONNX protobuf values into flowrun's: element types and tensors. A tensor's byte count is
// checked against its shape before anything is allocated (a corrupt file may declare far more than
// it holds). Errors are Status values whose message starts with `what`.
#pragma once

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "onnx/onnx_pb.h"

namespace fr::ir {

// A parsed ONNX file (onnx_import.h: ReadOnnx).
struct OnnxModel {
  std::string path;  // for messages
  onnx::ModelProto proto;
  bool external_data = false;  // some initializers came from external data (now read into raw_data)
};

// float32, int64, int32, bool and uint8; any other element type is an error naming it.
Result<DType> DTypeFromOnnx(int32_t t, const std::string& what);

// The tensor's data (raw_data or the typed fields); external data is an error here (ReadOnnx
// reads initializers' external data into raw_data first). Given `owner`, the
// object that keeps `p` alive, raw_data is read in place (the tensor keeps `owner` alive and must
// not be written); otherwise it is copied.
Result<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& what,
                               std::shared_ptr<const void> owner = nullptr);

// The values of an int64 or int32 tensor; empty for other types.
std::vector<int64_t> ConstInts(const Tensor& t);

}  // namespace fr::ir
