// Spreading a CPU kernel's independent work over the rank's kernel threads (OpenMP's, which
// oneDNN's GEMMs use too: flowrun sets their number per rank). Only work whose every output is
// computed exactly as the serial loop computes it goes through here (elementwise, or row by row),
// so that results do not depend on the number of threads.
#pragma once

#include <omp.h>

#include <algorithm>
#include <cstdint>

namespace fr::cpu {

// Work (elements read or written) below which a thread of its own does not pay for waking it.
inline constexpr int64_t kParallelGrain = int64_t{1} << 15;

// Calls f(begin, end) on contiguous ranges that cover [0, n) items, each item `cost` elements of
// work: on the calling thread alone when there is little work, else on up to one range a thread.
template <typename F>
void ParallelFor(int64_t n, int64_t cost, F f) {
  const int64_t work = n * std::max<int64_t>(cost, 1);
  const int64_t parts = std::min<int64_t>({static_cast<int64_t>(omp_get_max_threads()), work / kParallelGrain, n});
  if (parts <= 1) {
    f(int64_t{0}, n);
    return;
  }
#pragma omp parallel for num_threads(static_cast<int>(parts)) schedule(static, 1)
  for (int64_t p = 0; p < parts; ++p) f(n * p / parts, n * (p + 1) / parts);
}

}  // namespace fr::cpu
