// The .npy reader (data/dataset.h) on arbitrary bytes; an array it accepts is read back whole.
#include <cstddef>
#include <cstdint>
#include <string>

#include "data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  auto a = fr::data::ParseNpy(std::string(reinterpret_cast<const char*>(data), size), "data.x", "fuzz.npy");
  if (a.ok()) {
    // The accepted shape must account for exactly the data bytes it holds.
    size_t n = a->dtype == fr::DType::kF32 ? 4 : 8;
    for (int64_t d : a->shape) n *= static_cast<size_t>(d);
    if (n != a->data.size()) __builtin_trap();
  }
  return 0;
}
