#include "actor/stream.h"

#include <algorithm>
#include <chrono>

namespace fr::actor {

Stream::Stream(std::string name, Hooks hooks) : name_(std::move(name)), hooks_(std::move(hooks)) {}

Stream::~Stream() { Join(); }

void Stream::Start() {
  thread_ = std::thread([this] {
    if (hooks_.init) hooks_.init();
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

std::chrono::microseconds Stream::PollMaxFor(int ranks_on_node, int cores) {
  return ranks_on_node <= cores ? std::chrono::microseconds(40) : kPollMax;
}

std::chrono::microseconds Stream::PollSpinFor(int ranks_on_node, int cores) {
  return ranks_on_node <= cores ? kPollSpin : std::chrono::microseconds(0);
}

void Stream::Poke() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    poked_ = true;
  }
  cv_.notify_one();
}

void Stream::Stop() {
  Msg m;
  m.kind = MsgKind::kStop;
  {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.clear();
    queue_.push_back(m);
  }
  cv_.notify_one();
}

void Stream::Join() {
  if (thread_.joinable()) thread_.join();
}

void Stream::Loop() {
  // While movements are in flight the thread polls: often right after progress, backing off when
  // nothing completes, so waiting on a slow peer does not eat a core.
  auto wait = kPollMin;
  bool pending = false;
  auto last_poll = std::chrono::steady_clock::time_point{};
  auto last_busy = std::chrono::steady_clock::time_point{};
  for (;;) {
    Msg m;
    bool got = false, more = false;
    // Within Hooks::poll_spin of its last work, a thread with movements in flight polls again at
    // once instead of sleeping.
    const bool spin = pending && std::chrono::steady_clock::now() - last_busy < hooks_.poll_spin;
    // Queued work (Hooks::work) runs once every waiting message has been handled.
    bool worked = false;
    if (hooks_.work) {
      bool idle = false;
      {
        std::lock_guard<std::mutex> lock(mu_);
        idle = queue_.empty() && !poked_;
      }
      if (idle) worked = hooks_.work();
    }
    {
      std::unique_lock<std::mutex> lock(mu_);
      auto ready = [this] { return !queue_.empty() || poked_; };
      if (worked || spin) {
      } else if (pending) {
        cv_.wait_for(lock, wait, ready);
      } else {
        cv_.wait(lock, ready);
      }
      poked_ = false;
      if (!queue_.empty()) {
        m = queue_.front();
        queue_.pop_front();
        got = true;
        more = !queue_.empty();
      }
    }
    if (got) {
      if (m.kind == MsgKind::kStop) return;
      hooks_.handle(m);
    }
    if (!hooks_.poll) continue;
    // Between messages of a busy thread, at most every Hooks::poll_busy; always before it idles.
    const auto now = std::chrono::steady_clock::now();
    if (got && more && now - last_poll < hooks_.poll_busy) {
      pending = true;
      continue;
    }
    last_poll = now;
    const Poll p = hooks_.poll();
    pending = p != Poll::kIdle;
    if (got || worked || p == Poll::kProgress) last_busy = now;
    if (p == Poll::kCovered) {
      wait = kPollCovered;
    } else if (p == Poll::kProgress || got || worked || wait == kPollCovered) {
      wait = kPollMin;
    } else {
      wait = std::min(wait * 2, hooks_.poll_max);
    }
  }
}

}  // namespace fr::actor
