// Watchdog: bounds a phase of a command that waits on something it cannot interrupt (another rank
// inside a blocking MPI call, MPI_Init, MPI_Finalize). A phase is armed with a deadline; if it is
// still armed when the deadline passes, `expire` runs on the watchdog's own thread and must end the
// process (MPI_Abort, _exit): the waiting thread is stuck and cannot be asked to return.
//
// Waits the caller can interrupt (the actor runtime's, which Communicator::Cancel breaks) do not
// need one. Thread-safe; one phase at a time.
#pragma once

#include <chrono>
#include <condition_variable>
#include <functional>
#include <mutex>
#include <string>
#include <thread>

namespace fr {

class Watchdog {
 public:
  // `expire(what, seconds)` gets the armed phase's description and its allowance.
  explicit Watchdog(std::function<void(const std::string& what, double seconds)> expire);
  ~Watchdog();  // stops the thread; an armed phase is dropped
  Watchdog(const Watchdog&) = delete;
  Watchdog& operator=(const Watchdog&) = delete;

  // Starts timing phase `what`, replacing any armed one.
  void Arm(std::string what, double seconds);
  void Disarm();

  // Arms for the lifetime of the object.
  class Phase {
   public:
    Phase(Watchdog& w, std::string what, double seconds) : w_(w) { w_.Arm(std::move(what), seconds); }
    ~Phase() { w_.Disarm(); }
    Phase(const Phase&) = delete;
    Phase& operator=(const Phase&) = delete;

   private:
    Watchdog& w_;
  };

 private:
  void Loop();

  std::function<void(const std::string&, double)> expire_;
  std::mutex mu_;
  std::condition_variable cv_;
  bool armed_ = false;  // guarded by mu_
  bool quit_ = false;   // guarded by mu_
  std::string what_;    // guarded by mu_
  double seconds_ = 0;  // guarded by mu_
  std::chrono::steady_clock::time_point deadline_;  // guarded by mu_
  std::thread thread_;
};

}  // namespace fr
