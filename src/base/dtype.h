// Element types and devices: the vocabulary every tensor, register and kernel carries.
#pragma once

#include <cstddef>
#include <cstdint>
#include <string>
#include <string_view>

namespace fr {

enum class DType : uint8_t { kF32, kI64, kI32, kBool, kU8 };
inline constexpr int kNumDTypes = 5;

inline size_t SizeOf(DType t) {
  switch (t) {
    case DType::kF32: return 4;
    case DType::kI64: return 8;
    case DType::kI32: return 4;
    case DType::kBool: return 1;
    case DType::kU8: return 1;
  }
  return 0;
}

inline std::string_view Name(DType t) {
  switch (t) {
    case DType::kF32: return "f32";
    case DType::kI64: return "i64";
    case DType::kI32: return "i32";
    case DType::kBool: return "bool";
    case DType::kU8: return "u8";
  }
  return "?";
}

template <typename T> constexpr DType DTypeOf();
template <> constexpr DType DTypeOf<float>() { return DType::kF32; }
template <> constexpr DType DTypeOf<int64_t>() { return DType::kI64; }
template <> constexpr DType DTypeOf<int32_t>() { return DType::kI32; }
template <> constexpr DType DTypeOf<bool>() { return DType::kBool; }
template <> constexpr DType DTypeOf<uint8_t>() { return DType::kU8; }

// Device types (base/device.h: each has a Backend). kSim is a second, simulated device in host
// memory that runs the CPU's kernels: it tests the device path without a GPU.
enum class DeviceType : uint8_t { kCpu, kCuda, kSim };
inline constexpr int kNumDeviceTypes = 3;

inline std::string_view Name(DeviceType d) {
  switch (d) {
    case DeviceType::kCpu: return "cpu";
    case DeviceType::kCuda: return "cuda";
    case DeviceType::kSim: return "sim";
  }
  return "?";
}

struct Device {
  DeviceType type = DeviceType::kCpu;
  int index = 0;
  bool operator==(const Device&) const = default;
};

}  // namespace fr
