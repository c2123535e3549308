// Spreading a node's CPU ranks over its cores. Open MPI binds each rank to a core when there are
// at most 2, to a socket up to the core count, and not at all when the ranks oversubscribe the
// cores. Unbound, the kernel often stacks the ranks that compute together on one core while
// another idles.
#pragma once

#include <string>
#include <vector>

namespace fr {

// The CPUs local rank `local_rank` of `local_size` takes from `allowed` (the CPUs this process may
// run on, in order): an equal run of them, [r * n / size, (r + 1) * n / size), when there are at
// least as many as ranks; otherwise one, round-robin (rank r gets allowed[r % n]), so ranks next
// to each other, which the layouts put in one stage or group, land on different cores.
std::vector<int> RankCores(int local_rank, int local_size, const std::vector<int>& allowed);

// How many CPUs this process may run on (its affinity mask; at least 1).
int AllowedCpus();

// Pins this process to RankCores when it is one of several ranks on the node that Open MPI left
// unbound: its CPU set is every online CPU and no binding was asked for (`mpirun --bind-to X`
// sets OMPI_MCA_hwloc_base_binding_policy; that choice, `none` included, is kept). Call before
// MPI starts its threads, so every thread inherits it. Returns what it did in a line for the log,
// or "" when it left the binding alone.
std::string PinUnboundRank();

}  // namespace fr
