#include "actor/stream.h"

namespace fr::actor {

Stream::Stream(std::string name, std::function<void(const Msg&)> handle)
    : name_(std::move(name)), handle_(std::move(handle)) {}

Stream::~Stream() { Join(); }

void Stream::Start() { thread_ = std::thread([this] { Loop(); }); }

void Stream::Push(const Msg& m) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(m);
  }
  cv_.notify_one();
}

void Stream::Stop() {
  Msg m;
  m.kind = MsgKind::kStop;
  Push(m);
}

void Stream::Join() {
  if (thread_.joinable()) thread_.join();
}

void Stream::Loop() {
  for (;;) {
    Msg m;
    {
      std::unique_lock<std::mutex> lock(mu_);
      cv_.wait(lock, [this] { return !queue_.empty(); });
      m = queue_.front();
      queue_.pop_front();
    }
    if (m.kind == MsgKind::kStop) return;
    handle_(m);
  }
}

}  // namespace fr::actor
