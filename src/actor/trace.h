// Tracer: records every act of every actor on this rank and writes them as a Chrome trace (JSON
// "traceEvents", opened by Perfetto or chrome://tracing). Each stream is a track (compute, data,
// comm), so the overlap of compute and communication and the pipeline schedule are visible.
//
// Thread-safety: Record may be called from any stream thread; Write after the run.
#pragma once

#include <chrono>
#include <mutex>
#include <string>
#include <vector>

#include "base/status.h"
#include "ir/plan.h"

namespace fr::actor {

class Tracer {
 public:
  Tracer(const ir::Plan& plan, int rank);
  void Record(const ir::TaskDesc& t, int64_t act, bool begin);
  Status Write(const std::string& path) const;

  struct Event {
    int task;
    int64_t act;
    double begin_us, end_us;
  };
  std::vector<Event> events() const;

 private:
  const ir::Plan& plan_;
  int rank_;
  std::chrono::steady_clock::time_point start_;
  mutable std::mutex mu_;
  std::vector<double> open_;    // guarded by mu_: begin time of each task's current act
  std::vector<Event> events_;   // guarded by mu_
};

// "trace.json" for rank 0 of one, "trace.rank3.json" for rank 3 of several.
std::string TracePath(const std::string& path, int rank, int ranks);

}  // namespace fr::actor
