// FNV-1a, 64-bit: a stable hash of bytes (plans, configs, file sizes, dropout keys) that every
// rank and every build computes alike.
#pragma once

#include <cstdint>
#include <string_view>

namespace fr {

inline uint64_t Fnv1a64(std::string_view bytes) {
  uint64_t h = 14695981039346656037ull;
  for (unsigned char c : bytes) {
    h ^= c;
    h *= 1099511628211ull;
  }
  return h;
}

}  // namespace fr
