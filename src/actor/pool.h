// RegstPool: the memory of register slots, reused across the step. A slot takes its memory when
// its producer starts filling it and gives it back when its last consumer has read it, so
// registers whose lifetimes do not overlap share memory. Freed blocks are kept by device and exact
// size for the next taker (memory comes from the device's backend, base/device.h): a training step asks for the same sizes every micro-batch, so after the first
// step nothing new is allocated. Memory is never given back to the system before the pool dies.
//
// Thread-safe (a mutex; the compute thread does nearly all taking and giving).
#pragma once

#include <cstdint>
#include <map>
#include <memory>
#include <mutex>
#include <tuple>
#include <vector>

#include "base/tensor.h"

namespace fr::actor {

class RegstPool {
 public:
  // A tensor of the type on reused or new memory; its contents are undefined.
  Tensor Take(DType dtype, const Shape& shape, Device dev);
  // Gives the tensor's memory back. Memory someone else still shares is left to them.
  void Give(Tensor t);
  // The most memory the pool ever held: in use plus kept for reuse.
  int64_t peak_bytes() const;

 private:
  mutable std::mutex mu_;
  // guarded by mu_: by (device type, device index, bytes)
  std::map<std::tuple<DeviceType, int, size_t>, std::vector<std::shared_ptr<Storage>>> free_;
  int64_t held_ = 0, peak_ = 0;                                   // guarded by mu_
};

}  // namespace fr::actor
