#include "ir/onnx_proto.h"

#include <cstdint>
#include <cstring>

namespace fr::ir {

Result<DType> DTypeFromOnnx(int32_t t, const std::string& what) {
  switch (t) {
    case onnx::TensorProto::FLOAT: return DType::kF32;
    case onnx::TensorProto::INT64: return DType::kI64;
    case onnx::TensorProto::INT32: return DType::kI32;
    case onnx::TensorProto::BOOL: return DType::kBool;
    case onnx::TensorProto::UINT8: return DType::kU8;
    default:
      return Status::Invalid(what + " has ONNX element type " + std::to_string(t) +
                             " (" + onnx::TensorProto_DataType_Name(t) +
                             "); flowrun supports float32, int64, int32, bool and uint8");
  }
}

Result<Tensor> TensorFromProto(const onnx::TensorProto& p, const std::string& what, std::shared_ptr<const void> owner) {
  if (p.data_location() == onnx::TensorProto::EXTERNAL) {
    return Status::Invalid(what + " uses external data, which flowrun reads for the initializers of a model file only");
  }
  ASSIGN_OR_RETURN(DType dt, DTypeFromOnnx(p.data_type(), what));
  std::vector<int64_t> dims(p.dims().begin(), p.dims().end());
  Status s = CheckDims(dims);
  if (!s.ok()) return s.With(what + ": ");
  // Sizes are checked before allocating: a corrupt file may declare far more than it holds.
  const Shape shape(dims);
  const size_t want = static_cast<size_t>(shape.numel()) * SizeOf(dt);
  auto bad = [&](size_t got) {
    return Status::Invalid(what + " holds " + std::to_string(got) + " bytes of data, but its shape " +
                           shape.ToString() + " needs " + std::to_string(want) + " (truncated file?)");
  };
  if (p.has_raw_data() && p.raw_data().size() != want) return bad(p.raw_data().size());
  if (!p.has_raw_data()) {
    int n = dt == DType::kF32 ? p.float_data_size() : dt == DType::kI64 ? p.int64_data_size() : p.int32_data_size();
    if (static_cast<size_t>(n) * SizeOf(dt) != want) return bad(static_cast<size_t>(n) * SizeOf(dt));
  }
  if (p.has_raw_data() && owner && want && reinterpret_cast<uintptr_t>(p.raw_data().data()) % 16 == 0) {
    // The proto is never written through: graphs only read and slice (copy) initial values.
    void* bytes = const_cast<char*>(p.raw_data().data());
    return Tensor(dt, shape, std::make_shared<Storage>(bytes, want, std::move(owner)));
  }
  Tensor t(dt, shape);
  if (p.has_raw_data()) {
    if (want) std::memcpy(t.raw(), p.raw_data().data(), want);
    return t;
  }
  auto copy = [&](const auto& field, auto convert) {
    for (int i = 0; i < field.size(); ++i) convert(i, field.Get(i));
  };
  switch (dt) {
    case DType::kF32: copy(p.float_data(), [&](int i, float v) { t.data<float>()[i] = v; }); break;
    case DType::kI64: copy(p.int64_data(), [&](int i, int64_t v) { t.data<int64_t>()[i] = v; }); break;
    case DType::kI32: copy(p.int32_data(), [&](int i, int32_t v) { t.data<int32_t>()[i] = v; }); break;
    case DType::kBool: copy(p.int32_data(), [&](int i, int32_t v) { t.data<bool>()[i] = v != 0; }); break;
    case DType::kU8: copy(p.int32_data(), [&](int i, int32_t v) { t.data<uint8_t>()[i] = static_cast<uint8_t>(v); }); break;
  }
  return t;
}

std::vector<int64_t> ConstInts(const Tensor& t) {
  std::vector<int64_t> v;
  if (t.dtype() == DType::kI64) v.assign(t.data<int64_t>(), t.data<int64_t>() + t.numel());
  if (t.dtype() == DType::kI32) v.assign(t.data<int32_t>(), t.data<int32_t>() + t.numel());
  return v;
}

}  // namespace fr::ir
