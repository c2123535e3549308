// Starting this binary's ranks under Open MPI's mpirun (`flowrun env` re-launching itself,
// `flowrun search --validate` running candidates).
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace fr {

// This machine's physical memory in bytes (0 if unknown).
double PhysicalMemoryBytes();

// The most bytes one tensor of a graph may take: the machine's memory, unless set lower (fuzz
// targets do, to stay within the fuzzer's memory). Shape inference refuses larger outputs, and
// import folds constants within a fraction of it.
double MemoryBudgetBytes();
void SetMemoryBudgetBytes(double bytes);

// The full path of an executable on PATH, or "" when there is none.
std::string FindOnPath(const std::string& name);

// Runs `mpirun -n RANKS --oversubscribe [--allow-run-as-root when root] FLOWRUN ARGS...` (FLOWRUN:
// this binary) and waits for it; SIGINT, SIGTERM and SIGHUP sent to this process are passed on.
// With `output` set, the job's stdout and stderr go to that file. Returns mpirun's exit code
// (128 + signal when a signal ended it). Errors: no mpirun on PATH (Invalid), a failed start, a
// job still running after `timeout` seconds (then stopped: SIGTERM, SIGKILL 10 s later).
Result<int> RunUnderMpirun(int ranks, const std::vector<std::string>& args, const std::string& output = "",
                           double timeout = 1e9);

}  // namespace fr
