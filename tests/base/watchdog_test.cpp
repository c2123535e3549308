// base/watchdog.h: an armed phase past its deadline calls expire with its description; a phase
// disarmed in time never does.
#include "base/watchdog.h"

#include <gtest/gtest.h>

#include <atomic>
#include <chrono>
#include <mutex>
#include <thread>

namespace fr {
namespace {

struct Expiries {
  std::mutex mu;
  std::string what;
  double seconds = 0;
  std::atomic<int> count{0};
};

TEST(Watchdog, ExpiresPastTheDeadline) {
  Expiries e;
  Watchdog dog([&e](const std::string& what, double seconds) {
    std::lock_guard<std::mutex> lock(e.mu);
    e.what = what;
    e.seconds = seconds;
    e.count++;
  });
  const auto t0 = std::chrono::steady_clock::now();
  dog.Arm("waiting for rank 1", 0.1);
  while (e.count == 0 && std::chrono::steady_clock::now() - t0 < std::chrono::seconds(10))
    std::this_thread::sleep_for(std::chrono::milliseconds(5));
  EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(100));
  ASSERT_EQ(e.count, 1);
  std::lock_guard<std::mutex> lock(e.mu);
  EXPECT_EQ(e.what, "waiting for rank 1");
  EXPECT_EQ(e.seconds, 0.1);
}

TEST(Watchdog, DisarmedInTimeNeverExpires) {
  Expiries e;
  Watchdog dog([&e](const std::string&, double) { e.count++; });
  {
    Watchdog::Phase phase(dog, "a phase that ends in time", 0.2);
    std::this_thread::sleep_for(std::chrono::milliseconds(20));
  }
  dog.Arm("re-armed, then replaced", 0.2);
  dog.Arm("the replacement", 5);
  std::this_thread::sleep_for(std::chrono::milliseconds(400));
  EXPECT_EQ(e.count, 0);
}

}  // namespace
}  // namespace fr
