// A Stream is one thread with a FIFO of messages. Every actor lives on one stream and is touched
// only by that stream's thread, so actors need no locks; only the queue is shared.
#pragma once

#include <condition_variable>
#include <deque>
#include <chrono>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "actor/message.h"

namespace fr::actor {

class Stream {
 public:
  // `handle` runs on the stream's thread for each message, kStop excepted, which ends the thread.
  // `poll`, if set, runs on the thread between messages; while it reports work in flight (e.g.
  // non-blocking communication) the thread wakes to call it again: kPollMin after progress,
  // doubling to kPollMax while nothing completes. (flowrun env measures collectives this way.)
  enum class Poll { kIdle, kWaiting, kProgress };
  static constexpr std::chrono::microseconds kPollMin{10}, kPollMax{200};
  Stream(std::string name, std::function<void(const Msg&)> handle, std::function<Poll()> poll = nullptr, std::function<void()> init = nullptr);
  ~Stream();  // joins
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void Start();
  // Thread-safe.
  void Push(const Msg& m);
  void Stop();  // pushes kStop
  void Join();
  const std::string& name() const { return name_; }

 private:
  void Loop();

  std::string name_;
  std::function<void(const Msg&)> handle_;
  std::function<Poll()> poll_;
  std::function<void()> init_;  // run first on the stream's thread
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Msg> queue_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace fr::actor
