#include "base/watchdog.h"

namespace fr {

Watchdog::Watchdog(std::function<void(const std::string&, double)> expire) : expire_(std::move(expire)) {
  thread_ = std::thread([this] { Loop(); });
}

Watchdog::~Watchdog() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    quit_ = true;
  }
  cv_.notify_all();
  thread_.join();
}

void Watchdog::Arm(std::string what, double seconds) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = true;
    what_ = std::move(what);
    seconds_ = seconds;
    deadline_ = std::chrono::steady_clock::now() +
                std::chrono::duration_cast<std::chrono::steady_clock::duration>(std::chrono::duration<double>(seconds));
  }
  cv_.notify_all();
}

void Watchdog::Disarm() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    armed_ = false;
  }
  cv_.notify_all();
}

void Watchdog::Loop() {
  std::unique_lock<std::mutex> lock(mu_);
  while (!quit_) {
    if (!armed_) {
      cv_.wait(lock);
      continue;
    }
    if (std::chrono::steady_clock::now() < deadline_) {
      cv_.wait_until(lock, deadline_);
      continue;
    }
    const std::string what = what_;
    const double seconds = seconds_;
    armed_ = false;
    lock.unlock();
    expire_(what, seconds);  // ends the process; if it returns, the watchdog waits for the next phase
    lock.lock();
  }
}

}  // namespace fr
