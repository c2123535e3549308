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

// SplitMix64's output function: a bijection of 64-bit words whose outputs, for counters in
// sequence, pass the usual statistical tests (the data order's shuffle, dropout's masks).
inline uint64_t SplitMix64(uint64_t z) {
  z += 0x9e3779b97f4a7c15ull;
  z = (z ^ (z >> 30)) * 0xbf58476d1ce4e5b9ull;
  z = (z ^ (z >> 27)) * 0x94d049bb133111ebull;
  return z ^ (z >> 31);
}

}  // namespace fr
