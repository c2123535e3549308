// Tracer: records every act of every actor on this rank and writes them as a Chrome trace (JSON
// "traceEvents", opened by Perfetto or chrome://tracing). Each stream is a track (compute, data,
// comm), so the overlap of compute and communication and the pipeline schedule are visible.
// Times are the steady clock's (CLOCK_MONOTONIC on Linux, shared by the processes of a node), so
// the files of a node's ranks line up when opened together. Each act also carries its thread's
// CPU time (args.cpu_us): below the act's duration, the core was taken away meanwhile.
// On a device (CUDA, sim) a compute stream's acts queue kernels and return; their kernels' time on
// the device is a track of its own ("compute (device)"), from timed events around each act
// (RunOptions::on_device_act), placed on the host's clock by an origin event the host waited on.
//
// Thread-safety: Record may be called from any stream thread; Write after the run.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "ops/cuda/backend.h"
#include "plan/plan.h"

namespace fr::actor {

class Tracer {
 public:
  Tracer(const ir::Plan& plan, int rank);
  void Record(const ir::TaskDesc& t, int64_t act, bool begin);
  // The device's side: `origin`, recorded timed on the device right after `host_us` (the steady
  // clock's) and waited on for `uncertainty_us`, places the device's events on the host's clock:
  // each at most `uncertainty_us` early (the device reached `origin` within that wait), never
  // late. The file says so (a "device_clock" metadata event).
  void SetDeviceOrigin(std::shared_ptr<fr::Event> origin, double host_us, double uncertainty_us);
  void RecordDevice(const ir::TaskDesc& t, int64_t act, std::shared_ptr<fr::Event> begin, std::shared_ptr<fr::Event> end);
  // What the GPU ran (cuda::TakeKernelTrace), after the run.
  void AddDeviceSpans(std::vector<cuda::KernelSpan> spans);
  // The steady clock, in microseconds, as Record reads it.
  static double NowMicros();
  Status Write(const std::string& path) const;

  struct Event {
    int task;
    int64_t act;
    double begin_us, end_us;
    double cpu_us;  // the recording thread's CPU time over the act (args.cpu_us in the file)
  };
  std::vector<Event> events() const;
  // Device acts (task, act, begin and end in µs on the host's clock), once the device has run
  // them; empty without an origin.
  std::vector<Event> device_events() const;

 private:
  const ir::Plan& plan_;
  int rank_;
  mutable std::mutex mu_;
  struct Open {
    double wall_us = 0, cpu_us = 0;
  };
  std::vector<Open> open_;      // guarded by mu_: when each task's current act began
  std::vector<Event> events_;   // guarded by mu_
  struct DeviceAct {
    int task;
    int64_t act;
    std::shared_ptr<fr::Event> begin, end;
  };
  std::vector<DeviceAct> device_;           // guarded by mu_
  std::vector<cuda::KernelSpan> spans_;     // guarded by mu_
  std::shared_ptr<fr::Event> origin_;       // guarded by mu_
  double origin_us_ = 0, uncertainty_us_ = 0;  // guarded by mu_
};

// "trace.json" for rank 0 of one, "trace.rank3.json" for rank 3 of several.
std::string TracePath(const std::string& path, int rank, int ranks);

}  // namespace fr::actor
