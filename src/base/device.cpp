#include "base/device.h"

#include <array>
#include <condition_variable>
#include <cstdlib>
#include <cstring>
#include <deque>
#include <mutex>
#include <chrono>
#include <thread>

#include "base/status.h"

namespace fr {

namespace {

// 64-byte aligned for vector kernels, zero-filled.
void* AlignedZeroed(size_t bytes) {
  const size_t rounded = bytes ? (bytes + 63) / 64 * 64 : 64;
  void* p = std::aligned_alloc(64, rounded);
  if (p) std::memset(p, 0, rounded);
  return p;
}

class DoneEvent final : public Event {
 public:
  bool Done() const override { return true; }
  void Wait() const override {}
};

class CpuStream final : public DeviceStream {
 public:
  void Copy(void* dst, const void* src, size_t bytes) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  std::shared_ptr<Event> Record() override {
    static const std::shared_ptr<Event> done = std::make_shared<DoneEvent>();  // nothing is ever pending
    return done;
  }
};

// A device whose memory is the host's (the CPU, sim): counted aligned allocations, copies by memcpy,
// the CPU's kernels. Each says what it is and how its streams run.
class HostMemoryBackend : public Backend {
 public:
  DeviceType kernels() const override { return DeviceType::kCpu; }
  bool host_visible() const override { return true; }
  void* Allocate(size_t bytes, int) override {
    void* p = AlignedZeroed(bytes);
    if (p) Count(static_cast<int64_t>(bytes));
    return p;
  }
  void Free(void* p, size_t bytes, int) override {
    std::free(p);
    Count(-static_cast<int64_t>(bytes));
  }
  void CopyNow(void* dst, const void* src, size_t bytes, int) override {
    if (bytes) std::memcpy(dst, src, bytes);
  }
  void ZeroNow(void* p, size_t bytes, int) override {
    if (bytes) std::memset(p, 0, bytes);
  }
};

class CpuBackend final : public HostMemoryBackend {
 public:
  DeviceType type() const override { return DeviceType::kCpu; }
  std::unique_ptr<DeviceStream> NewStream(int) override { return std::make_unique<CpuStream>(); }
};

std::atomic<int64_t> g_sim_copy_us{0};  // SetSimCopyLatency

// A stream whose copies a thread of its own runs, in order, while the queuing thread goes on.
class SimStream final : public DeviceStream {
 public:
  SimStream() : worker_([this] { Work(); }) {}
  ~SimStream() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
    }
    cv_.notify_all();
    worker_.join();
  }
  void Copy(void* dst, const void* src, size_t bytes) override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      queue_.push_back({dst, src, bytes});
      ++queued_;
    }
    cv_.notify_all();
  }
  std::shared_ptr<Event> Record() override {
    std::lock_guard<std::mutex> lock(mu_);
    return std::make_shared<SimEvent>(this, queued_);
  }
  // Stamped when recorded: the sim device's kernels run on the queuing thread as they are queued.
  std::shared_ptr<Event> RecordTimed() override {
    std::lock_guard<std::mutex> lock(mu_);
    auto e = std::make_shared<SimEvent>(this, queued_);
    e->at_ = std::chrono::steady_clock::now();
    return e;
  }

 private:
  struct Job {
    void* dst;
    const void* src;
    size_t bytes;
  };
  class SimEvent final : public Event {
   public:
    SimEvent(const SimStream* s, int64_t after) : s_(s), after_(after) {}
    bool Done() const override {
      std::lock_guard<std::mutex> lock(s_->mu_);
      return s_->done_ >= after_;
    }
    void Wait() const override {
      std::unique_lock<std::mutex> lock(s_->mu_);
      s_->cv_.wait(lock, [this] { return s_->done_ >= after_; });
    }
    double MillisSince(const Event& start) const override {
      const auto* s = dynamic_cast<const SimEvent*>(&start);
      if (!s || at_ == std::chrono::steady_clock::time_point{} || s->at_ == std::chrono::steady_clock::time_point{}) return -1;
      return std::chrono::duration<double, std::milli>(at_ - s->at_).count();
    }
    std::chrono::steady_clock::time_point at_{};  // RecordTimed's

   private:
    const SimStream* s_;  // an event outliving its stream is a caller's bug, as with CUDA's
    int64_t after_;
  };

  void Work() {
    std::unique_lock<std::mutex> lock(mu_);
    for (;;) {
      cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
      if (queue_.empty()) return;
      const Job j = queue_.front();
      queue_.pop_front();
      lock.unlock();
      if (const int64_t us = g_sim_copy_us.load(std::memory_order_relaxed)) std::this_thread::sleep_for(std::chrono::microseconds(us));
      if (j.bytes) std::memcpy(j.dst, j.src, j.bytes);
      lock.lock();
      ++done_;
      cv_.notify_all();
    }
  }

  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  std::deque<Job> queue_;         // guarded by mu_
  int64_t queued_ = 0, done_ = 0;  // guarded by mu_: copies queued and finished so far
  bool stop_ = false;              // guarded by mu_
  std::thread worker_;
};

class SimBackend final : public HostMemoryBackend {
 public:
  DeviceType type() const override { return DeviceType::kSim; }
  bool host_visible() const override { return !opaque_; }
  std::unique_ptr<DeviceStream> NewStream(int) override { return std::make_unique<SimStream>(); }

 private:
  const bool opaque_ = [] {
    const char* e = std::getenv("FLOWRUN_SIM_OPAQUE");
    return e != nullptr && std::string(e) == "1";
  }();
};

std::array<std::unique_ptr<Backend>, kNumDeviceTypes>& Backends() {
  static std::array<std::unique_ptr<Backend>, kNumDeviceTypes> all = [] {
    std::array<std::unique_ptr<Backend>, kNumDeviceTypes> a;
    a[static_cast<size_t>(DeviceType::kCpu)] = std::make_unique<CpuBackend>();
    a[static_cast<size_t>(DeviceType::kSim)] = std::make_unique<SimBackend>();
    return a;
  }();
  return all;
}

}  // namespace

void* Backend::AllocateHost(size_t bytes) { return BackendOf(DeviceType::kCpu)->Allocate(bytes, 0); }
void Backend::FreeHost(void* p, size_t bytes) { BackendOf(DeviceType::kCpu)->Free(p, bytes, 0); }

Backend* BackendOf(DeviceType t) { return Backends()[static_cast<size_t>(t)].get(); }

void SetSimCopyLatency(int64_t us) { g_sim_copy_us.store(us, std::memory_order_relaxed); }

void RegisterBackend(std::unique_ptr<Backend> b) {
  FR_CHECK(b != nullptr, "no backend");
  Backends()[static_cast<size_t>(b->type())] = std::move(b);
}

std::string ToString(const Device& d) {
  return d.type == DeviceType::kCpu ? "cpu" : std::string(Name(d.type)) + ":" + std::to_string(d.index);
}

}  // namespace fr
