// The job's ranks: whether this process runs under mpirun, and the start-up checks every rank
// makes before training (DESIGN.md §4).
#pragma once

#include <mpi.h>

#include <cstdint>
#include <memory>

#include "actor/comm.h"
#include "base/status.h"

namespace fr::actor {

struct World {
  int rank = 0;
  int size = 1;
  std::unique_ptr<Communicator> comm;  // null when not launched by mpirun
};

// Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE is set) initialises MPI and returns this rank;
// otherwise one rank and no MPI at all.
Result<World> JoinWorld(int* argc, char*** argv);

// Waits for `req` as an idle stream of the runtime waits (actor::Stream): tests, at once again
// for Stream::PollSpinFor, then sleeps Stream::kPollMin doubling to Stream::PollMaxFor, for `ranks`
// ranks on this machine's cores. A rank that spun in a blocking call instead would take the core
// from a rank sharing it (Open MPI's yield when idle is off: MpiWorld).
void WaitAsRuntime(MPI_Request& req, int ranks);

// Every rank compiled the same Plan: compares the hashes of all ranks (collective). An error names
// the ranks whose plan differs from rank 0's.
Status AgreeOnPlan(const World& w, uint64_t plan_hash);

}  // namespace fr::actor
