#include "actor/stream.h"

#include <algorithm>
#include <chrono>

namespace fr::actor {

Stream::Stream(std::string name, std::function<void(const Msg&)> handle, std::function<Poll()> poll,
               std::function<void()> init)
    : name_(std::move(name)), handle_(std::move(handle)), poll_(std::move(poll)), init_(std::move(init)) {}

Stream::~Stream() { Join(); }

void Stream::Start() {
  thread_ = std::thread([this] {
    if (init_) init_();
    Loop();
  });
}

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
  // While movements are in flight the thread polls: often right after progress, backing off when
  // nothing completes, so waiting on a slow peer does not eat a core.
  auto wait = kPollMin;
  bool pending = false;
  for (;;) {
    Msg m;
    bool got = false;
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return !queue_.empty(); };
      if (pending) {
        cv_.wait_for(lock, wait, ready);
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
    if (!poll_) continue;
    Poll p = poll_();
    pending = p != Poll::kIdle;
    wait = (p == Poll::kProgress || got) ? kPollMin : std::min(wait * 2, kPollMax);
  }
}

}  // namespace fr::actor
