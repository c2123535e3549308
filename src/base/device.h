// Devices: the memory of a device and the order of work on it, behind one small interface, in the
// manner of ggml's backends. The register pool, the runtime and lowering see only this; a device
// type is added by implementing Backend and registering it, not by branches through the runtime
// (docs/architecture.md: devices).
//
//   - Memory: Allocate and Free, counted per backend.
//   - Streams: work queued on a DeviceStream runs in queue order, asynchronously to the host. An
//     Event recorded on a stream is done once everything queued before it is.
//   - Copies between the host and a device (or within one) are queued on a stream.
//
// The CPU backend does everything at once: its events are done when recorded. The "sim" backend is
// a second device for tests and for trying the device path without a GPU: host memory from its own
// counted allocator, and a thread per stream that runs its copies, so that they really run
// asynchronously to the actors that queue them. Its kernels are the CPU's. With
// FLOWRUN_SIM_OPAQUE=1 in the environment it says the host cannot address its memory, as a GPU's:
// everything but its kernels then takes the paths it takes for CUDA (copies through the backend,
// movements between ranks and within one through host copies). A testing aid.
//
// Thread-safety: backends may be used from any thread; one DeviceStream from one thread at a time,
// except Record, which any thread may call (a copy marks where the compute stream is).
#pragma once

#include <atomic>
#include <cstddef>
#include <cstdint>
#include <memory>
#include <string>

#include "base/dtype.h"
#include "base/status.h"

namespace fr {

class Event {
 public:
  virtual ~Event() = default;
  virtual bool Done() const = 0;
  virtual void Wait() const = 0;
  // Milliseconds from `start` to this event as the device saw them, both recorded by RecordTimed
  // on one device and done; negative where the backend does not time its events (the CPU's).
  virtual double MillisSince(const Event& start) const {
    (void)start;
    return -1;
  }
};

class DeviceStream {
 public:
  virtual ~DeviceStream() = default;
  // Queues a copy of `bytes` from src to dst (host or this stream's device memory). Both stay
  // untouched until an event recorded after it is done.
  virtual void Copy(void* dst, const void* src, size_t bytes) = 0;
  virtual std::shared_ptr<Event> Record() = 0;
  // An event the device timestamps when it reaches it (Event::MillisSince): traces. Dearer than
  // Record on a GPU.
  virtual std::shared_ptr<Event> RecordTimed() { return Record(); }
  // Work queued on this stream after the call starts after `e` is done, an event of this
  // stream's device or the host's. Called by the thread that queues on the stream. By default
  // the calling thread waits for `e` itself: right for a stream whose kernels run on the thread
  // that queues them (the CPU's, sim's); a GPU's stream waits on the device instead.
  virtual void Wait(const std::shared_ptr<Event>& e) { e->Wait(); }
  void Synchronize() { Record()->Wait(); }
};

class Backend {
 public:
  virtual ~Backend() = default;
  virtual DeviceType type() const = 0;
  // The kernel set that runs on this device's memory (ops/registry.cpp looks kernels up by it).
  virtual DeviceType kernels() const = 0;
  // Whether host code may read and write this device's memory directly (then a copy between it
  // and the host is a memcpy, and the MPI communicator can carry its tensors).
  virtual bool host_visible() const = 0;
  // Zero-filled memory of device `index`; null when the device has no more.
  virtual void* Allocate(size_t bytes, int index) = 0;
  virtual void Free(void* p, size_t bytes, int index) = 0;
  // Zero-filled host memory that copies between the host and this device read or write while
  // the host goes on (a GPU's pinned memory); plain host memory where the backend has no such
  // thing. Null when there is no more.
  virtual void* AllocateHost(size_t bytes);
  virtual void FreeHost(void* p, size_t bytes);
  virtual std::unique_ptr<DeviceStream> NewStream(int index) = 0;
  // A copy that has finished when this returns (host code outside the actors: setup, save).
  virtual void CopyNow(void* dst, const void* src, size_t bytes, int index) = 0;
  // Zeroes `bytes` at `p` in device `index`'s memory, done when this returns.
  virtual void ZeroNow(void* p, size_t bytes, int index) = 0;
  // Free memory of device `index` now, in bytes; negative for host memory (the caller measures
  // the machine's itself).
  virtual double FreeBytes(int) const { return -1; }
  // The first data error (an index out of range, a label outside the classes) a kernel queued on
  // `s` met, cleared by the read; waits for what is queued on `s`. Kernels that run on the host
  // return theirs at once, so host backends have none here.
  virtual Status TakeDataError(DeviceStream&) { return Status::Ok(); }

  // Bytes allocated and not yet freed, and allocations made, over the process's life.
  int64_t live_bytes() const { return live_.load(std::memory_order_relaxed); }
  int64_t allocations() const { return allocations_.load(std::memory_order_relaxed); }

 protected:
  void Count(int64_t bytes) {
    live_.fetch_add(bytes, std::memory_order_relaxed);
    if (bytes > 0) allocations_.fetch_add(1, std::memory_order_relaxed);
  }

 private:
  std::atomic<int64_t> live_{0}, allocations_{0};
};

// The backend of device type `t`, or null where this build has none (CUDA, until its backend
// registers itself).
Backend* BackendOf(DeviceType t);
// Installs the backend of its type (at start-up, before any tensor of that type exists).
void RegisterBackend(std::unique_ptr<Backend> b);

// "cpu", "sim:0".
std::string ToString(const Device& d);

// A testing aid: each copy on a sim stream takes at least `us` microseconds from now on, so that
// code which reads a copy's result before its event is done, or writes its source, reads or
// writes the wrong data.
void SetSimCopyLatency(int64_t us);

}  // namespace fr
