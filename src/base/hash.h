// FNV-1a, 64-bit: a stable hash of bytes (plans, configs, file sizes, dropout keys) that every
// rank and every build computes alike.
#pragma once

#include <cstddef>
#include <cstdint>
#include <cstring>
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

// FNV-1a over 64-bit words (the tail byte by byte), from `h`: 8 times the speed of Fnv1a64 for
// bulk data such as a plan's parameter pieces. Not Fnv1a64's value; the same on every rank.
inline uint64_t Fnv1a64Words(const void* data, size_t n, uint64_t h = 14695981039346656037ull) {
  const auto* p = static_cast<const unsigned char*>(data);
  size_t i = 0;
  for (; i + 8 <= n; i += 8) {
    uint64_t w;
    std::memcpy(&w, p + i, 8);
    h ^= w;
    h *= 1099511628211ull;
  }
  for (; i < n; ++i) {
    h ^= p[i];
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
