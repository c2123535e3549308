// A Stream is one thread with a FIFO of messages. Every actor lives on one stream and is touched
// only by that stream's thread, so actors need no locks; only the queue is shared.
#pragma once

#include <chrono>
#include <condition_variable>
#include <deque>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

#include "actor/message.h"

namespace fr::actor {

class Stream {
 public:
  // What a poll hook found. kIdle: nothing in flight. kProgress: something finished. kWaiting:
  // work is in flight and this thread should look again soon. kCovered: work is in flight but
  // another thread is driving it; look again only as a safety net.
  enum class Poll { kIdle, kWaiting, kProgress, kCovered };
  // While a poll hook reports kWaiting the thread wakes to call it again: kPollMin after progress,
  // doubling to Hooks::poll_max while nothing completes (flowrun env measures collectives this
  // way). After kCovered it looks again in kPollCovered.
  static constexpr std::chrono::microseconds kPollMin{10}, kPollMax{200}, kPollCovered{1000}, kPollBusy{50},
      kPollSpin{1000};
  // The longest wait between polls for a rank with `ranks_on_node` ranks on `cores` cores: short
  // when each rank has a core (polling then takes nothing from anyone, and the rounds of a
  // collective finish sooner), kPollMax when ranks share cores (a waiting pipeline stage polling
  // eagerly slows the computing one).
  static std::chrono::microseconds PollMaxFor(int ranks_on_node, int cores);
  // Hooks::poll_spin for such a rank: kPollSpin when each rank has a core, else 0 (spinning would
  // take the core from a rank that shares it).
  static std::chrono::microseconds PollSpinFor(int ranks_on_node, int cores);

  struct Hooks {
    std::function<void(const Msg&)> handle;  // each message but kStop, which ends the thread
    std::function<Poll()> poll;              // optional: after messages (see poll_busy) and on each wake-up
    std::function<void()> init;              // optional: first, on the stream's thread
    // Optional: runs one piece of queued work when no message waits; false when there was none.
    std::function<bool()> work;
    std::chrono::microseconds poll_max = kPollMax;
    // While more messages wait, the poll hook runs at most this often (0: after every message).
    // Each poll is a full MPI progress pass, too dear after every act on a rank with a movement in
    // flight all step (a loss receive).
    std::chrono::microseconds poll_busy{0};
    // For this long after its last work a thread with movements in flight polls without sleeping,
    // then backs off. For a rank with a core of its own (Stream::PollSpinFor): a sleep, however
    // short it is asked to be, lasts the kernel's timer slack, and each of a collective's rounds
    // waits for both ranks to look.
    std::chrono::microseconds poll_spin{0};
  };
  Stream(std::string name, Hooks hooks);
  ~Stream();  // joins
  Stream(const Stream&) = delete;
  Stream& operator=(const Stream&) = delete;

  void Start();
  // Thread-safe.
  void Push(const Msg& m);
  // Thread-safe: the thread ends after the message it is handling; those still queued are dropped.
  void Stop();
  void Join();
  // Thread-safe: wakes the thread to run its poll hook (no message).
  void Poke();
  const std::string& name() const { return name_; }

 private:
  void Loop();

  std::string name_;
  Hooks hooks_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<Msg> queue_;  // guarded by mu_
  bool poked_ = false;     // guarded by mu_
  std::thread thread_;
};

}  // namespace fr::actor
