#include "actor/stream.h"

#include <chrono>

namespace fr::actor {

Stream::Stream(std::string name, std::function<void(const Msg&)> handle, std::function<bool()> poll)
    : name_(std::move(name)), handle_(std::move(handle)), poll_(std::move(poll)) {}

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
  bool pending = false;  // poll_ reported work in flight
  for (;;) {
    Msg m;
    bool got = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return !queue_.empty(); };
      if (pending) {
        cv_.wait_for(lock, std::chrono::microseconds(20), ready);
      } else {
        cv_.wait(lock, ready);
      }
      if (!queue_.empty()) {
        m = queue_.front();
        queue_.pop_front();
        got = true;
      }
    }
    if (got) {
      if (m.kind == MsgKind::kStop) return;
      handle_(m);
    }
    if (poll_) pending = poll_();
  }
}

}  // namespace fr::actor
