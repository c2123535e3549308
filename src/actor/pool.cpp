#include "actor/pool.h"

#include <algorithm>

namespace fr::actor {

Tensor RegstPool::Take(DType dtype, const Shape& shape, Device dev) {
  const size_t bytes = static_cast<size_t>(shape.numel()) * SizeOf(dtype);
  {
    std::lock_guard<std::mutex> lock(mu_);
    auto it = free_.find({dev.type, dev.index, bytes});
    if (it != free_.end() && !it->second.empty()) {
      std::shared_ptr<Storage> s = std::move(it->second.back());
      it->second.pop_back();
      return Tensor(dtype, shape, std::move(s));
    }
    held_ += static_cast<int64_t>(bytes);
    peak_ = std::max(peak_, held_);
  }
  return Tensor(dtype, shape, dev);
}

void RegstPool::Give(Tensor t) {
  std::shared_ptr<Storage> s = t.storage();
  t = Tensor();
  if (!s) return;
  std::lock_guard<std::mutex> lock(mu_);
  if (s.use_count() > 1) {  // still shared (a view kept somewhere): not ours to reuse
    held_ -= static_cast<int64_t>(s->bytes());
    return;
  }
  free_[{s->device().type, s->device().index, s->bytes()}].push_back(std::move(s));
}

int64_t RegstPool::peak_bytes() const {
  std::lock_guard<std::mutex> lock(mu_);
  return peak_;
}

}  // namespace fr::actor
