#include "base/tensor.h"

#include <cstdlib>
#include <new>
#include <sstream>

namespace fr {

Storage::Storage(size_t bytes, Device dev) : bytes_(bytes), dev_(dev), backend_(BackendOf(dev.type)) {
  FR_CHECK(backend_ != nullptr, "this build of flowrun has no " + std::string(Name(dev.type)) + " backend");
  data_ = backend_->Allocate(bytes, dev.index);
  if (data_ == nullptr) throw std::bad_alloc();  // as operator new does: main reports it
}

Storage::Storage(size_t bytes, PinnedFor pinned) : bytes_(bytes), backend_(BackendOf(pinned.device)), pinned_(true) {
  FR_CHECK(backend_ != nullptr, "this build of flowrun has no " + std::string(Name(pinned.device)) + " backend");
  data_ = backend_->AllocateHost(bytes);
  if (data_ == nullptr) throw std::bad_alloc();
}

Storage::Storage(void* data, size_t bytes, std::shared_ptr<const void> owner)
    : data_(data), bytes_(bytes), owner_(std::move(owner)) {
  FR_CHECK(owner_ != nullptr, "borrowed storage needs an owner");
}

Storage::~Storage() {
  if (owner_) return;
  if (pinned_) backend_->FreeHost(data_, bytes_);
  else backend_->Free(data_, bytes_, dev_.index);
}

Tensor::Tensor(DType dt, Shape shape, Device dev)
    : dtype_(dt), shape_(std::move(shape)),
      storage_(std::make_shared<Storage>(static_cast<size_t>(shape_.numel()) * SizeOf(dt), dev)) {}

Tensor::Tensor(DType dt, Shape shape, std::shared_ptr<Storage> storage)
    : dtype_(dt), shape_(std::move(shape)), storage_(std::move(storage)) {
  FR_CHECK(storage_ && storage_->bytes() >= bytes(), "storage of " + std::to_string(storage_ ? storage_->bytes() : 0) +
                                                          " bytes for a tensor of " + std::to_string(bytes()));
}

Tensor::Tensor(DType dt, Shape shape, std::shared_ptr<Storage> storage, size_t offset)
    : dtype_(dt), shape_(std::move(shape)), storage_(std::move(storage)), offset_(offset) {
  FR_CHECK(storage_ && storage_->bytes() >= offset_ + bytes(),
           "storage of " + std::to_string(storage_ ? storage_->bytes() : 0) + " bytes for a tensor of " +
               std::to_string(bytes()) + " at offset " + std::to_string(offset_));
}

Tensor Tensor::Reshaped(Shape shape) const {
  FR_CHECK(shape.numel() == numel(), shape.ToString() + " vs " + shape_.ToString());
  Tensor t = *this;
  t.shape_ = std::move(shape);
  return t;
}

Tensor Tensor::Clone() const {
  Tensor t(dtype_, shape_, device());
  t.CopyFrom(*this);
  return t;
}

void Tensor::CopyFrom(const Tensor& src) const {
  FR_CHECK(src.dtype_ == dtype_ && src.numel() == numel(), "copy between mismatched tensors");
  if (!bytes()) return;
  const Device to = device(), from = src.device();
  if (BackendOf(to.type)->host_visible() && BackendOf(from.type)->host_visible()) {
    std::memcpy(raw(), src.raw(), bytes());
    return;
  }
  const Device dev = to.type == DeviceType::kCpu ? from : to;  // the device side's backend copies (within a device too)
  BackendOf(dev.type)->CopyNow(raw(), src.raw(), bytes(), dev.index);
}

void Tensor::Zero() const {
  if (!bytes()) return;
  Backend* b = BackendOf(device().type);
  if (b->host_visible()) {
    std::memset(raw(), 0, bytes());
  } else {
    b->ZeroNow(raw(), bytes(), device().index);
  }
}

Tensor Tensor::ToHost() const {
  if (!defined() || device().type == DeviceType::kCpu) return *this;
  Tensor t(dtype_, shape_);
  t.CopyFrom(*this);
  return t;
}

Tensor Tensor::Full(Shape shape, float v) {
  Tensor t(DType::kF32, std::move(shape));
  for (float& x : t.span<float>()) x = v;
  return t;
}

std::string Tensor::ToString(int max_elems) const {
  std::ostringstream os;
  os << Name(dtype_) << shape_.ToString() << " {";
  int64_t n = std::min<int64_t>(numel(), max_elems);
  for (int64_t i = 0; i < n; ++i) {
    if (i) os << ", ";
    switch (dtype_) {
      case DType::kF32: os << data<float>()[i]; break;
      case DType::kI64: os << data<int64_t>()[i]; break;
      case DType::kI32: os << data<int32_t>()[i]; break;
      case DType::kBool: os << (data<bool>()[i] ? "true" : "false"); break;
      case DType::kU8: os << int{data<uint8_t>()[i]}; break;
    }
  }
  if (numel() > n) os << ", ...";
  os << "}";
  return os.str();
}

}  // namespace fr
