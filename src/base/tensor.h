// Tensor: a dense, contiguous, row-major array on one device. Copying a Tensor shares its storage
// (like a shared_ptr); Clone() copies the data. A Tensor is not thread-safe by itself: the actor
// runtime guarantees that one register slot has one writer or many readers at a time.
#pragma once

#include <cstring>
#include <memory>
#include <span>
#include <string>

#include "base/device.h"
#include "base/dtype.h"
#include "base/shape.h"

namespace fr {

// Owns one allocation, made by its device's backend (base/device.h), zero-filled.
class Storage {
 public:
  Storage(size_t bytes, Device dev);
  // Host memory that `device`'s copies run on asynchronously (Backend::AllocateHost).
  struct PinnedFor {
    DeviceType device;
  };
  Storage(size_t bytes, PinnedFor pinned);
  // CPU memory that `owner` holds (an imported model's bytes), kept alive and never freed here:
  // a parameter's initial value read in place instead of copied. It is only as aligned as
  // `owner` made it (no kernel here assumes more than its element's alignment).
  Storage(void* data, size_t bytes, std::shared_ptr<const void> owner);
  ~Storage();
  Storage(const Storage&) = delete;
  Storage& operator=(const Storage&) = delete;
  void* data() const { return data_; }
  size_t bytes() const { return bytes_; }
  Device device() const { return dev_; }

 private:
  void* data_ = nullptr;
  size_t bytes_ = 0;
  Device dev_;
  Backend* backend_ = nullptr;         // null when the memory is borrowed
  bool pinned_ = false;                // host memory from backend_->AllocateHost
  std::shared_ptr<const void> owner_;  // set when the memory is borrowed
};

class Tensor {
 public:
  Tensor() = default;
  // Allocates zero-filled storage.
  Tensor(DType dt, Shape shape, Device dev = {});
  // A tensor on existing storage, which must hold at least its bytes (a reused allocation: its
  // contents are whatever the last user left).
  Tensor(DType dt, Shape shape, std::shared_ptr<Storage> storage);
  // The same at a byte offset into the storage (a piece of a larger allocation).
  Tensor(DType dt, Shape shape, std::shared_ptr<Storage> storage, size_t offset);
  // A view of shared storage with another shape (same element count).
  Tensor Reshaped(Shape shape) const;
  Tensor Clone() const;

  bool defined() const { return storage_ != nullptr; }
  DType dtype() const { return dtype_; }
  const Shape& shape() const { return shape_; }
  Device device() const { return storage_ ? storage_->device() : Device{}; }
  int64_t numel() const { return shape_.numel(); }
  size_t bytes() const { return static_cast<size_t>(numel()) * SizeOf(dtype_); }
  void* raw() const { return storage_ ? static_cast<char*>(storage_->data()) + offset_ : nullptr; }
  bool SharesStorageWith(const Tensor& o) const { return storage_ == o.storage_; }
  const std::shared_ptr<Storage>& storage() const { return storage_; }

  template <typename T> T* data() const {
    FR_CHECK(DTypeOf<T>() == dtype_, "tensor dtype is " + std::string(Name(dtype_)));
    return static_cast<T*>(raw());
  }
  template <typename T> std::span<T> span() const { return {data<T>(), static_cast<size_t>(numel())}; }
  void Zero() const;
  // Copies src's data here, across devices too (through the device side's backend, at once).
  void CopyFrom(const Tensor& src) const;
  // This tensor where host code can read it: itself on the CPU, else a copy.
  Tensor ToHost() const;

  // A scalar (or any-shape) tensor of value v.
  static Tensor Full(Shape shape, float v);
  std::string ToString(int max_elems = 8) const;

 private:
  DType dtype_ = DType::kF32;
  Shape shape_;
  std::shared_ptr<Storage> storage_;
  size_t offset_ = 0;
};

}  // namespace fr
