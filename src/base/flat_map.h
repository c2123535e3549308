// FlatMap: an open-addressing hash map from N 64-bit words to a value, for the cost model's
// innermost memo (SBP assignment looks prices up millions of times a search). Linear probing in
// one array, no per-entry allocation, grows at half load. Not thread-safe.
#pragma once

#include <array>
#include <cstddef>
#include <cstdint>
#include <vector>

namespace fr {

template <typename V, size_t N = 3>
class FlatMap {
 public:
  using Key = std::array<uint64_t, N>;

  explicit FlatMap(size_t capacity = 1024) { Rehash(capacity); }

  // The value of `k`, or nullptr.
  const V* Find(const Key& k) const {
    for (size_t i = Hash(k) & mask_;; i = (i + 1) & mask_) {
      const Slot& s = slots_[i];
      if (!s.used) return nullptr;
      if (Same(s.key, k)) return &s.value;
    }
  }

  // Inserts or overwrites.
  void Put(const Key& k, const V& v) {
    if (2 * (size_ + 1) > slots_.size()) Rehash(2 * slots_.size());
    Slot& s = Probe(k);
    if (!s.used) ++size_;
    s.used = true;
    s.key = k;
    s.value = v;
  }

  size_t size() const { return size_; }

  static uint64_t Hash(const Key& k) {
    uint64_t h = 0x9E3779B97F4A7C15ULL;
    for (uint64_t w : k) h = (h ^ (h >> 29) ^ w) * 0xC2B2AE3D27D4EB4FULL;
    return h ^ (h >> 32);
  }

 private:
  static bool Same(const Key& a, const Key& b) {
    for (size_t i = 0; i < N; ++i)
      if (a[i] != b[i]) return false;
    return true;
  }

  struct Slot {
    Key key{};
    V value{};
    bool used = false;
  };

  Slot& Probe(const Key& k) {
    for (size_t i = Hash(k) & mask_;; i = (i + 1) & mask_) {
      Slot& s = slots_[i];
      if (!s.used || Same(s.key, k)) return s;
    }
  }

  void Rehash(size_t capacity) {
    size_t n = 16;
    while (n < capacity) n *= 2;
    std::vector<Slot> old = std::move(slots_);
    slots_.assign(n, Slot{});
    mask_ = n - 1;
    size_ = 0;
    for (const Slot& s : old)
      if (s.used) Put(s.key, s.value);
  }

  std::vector<Slot> slots_;
  size_t mask_ = 0;
  size_t size_ = 0;
};

}  // namespace fr
