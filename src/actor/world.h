// The job's ranks: whether this process runs under mpirun, and the start-up checks every rank
// makes before training (DESIGN.md §4).
#pragma once

#include <cstdint>
#include <functional>
#include <memory>
#include <string>
#include <vector>

#include "actor/comm.h"
#include "base/status.h"
#include "plan/plan.h"

namespace fr::actor {

struct World {
  int rank = 0;
  int size = 1;
  std::unique_ptr<Communicator> comm;  // null when not launched by mpirun
  int gpu_sharers = 1;                  // ranks driving this rank's GPU, itself included (UseDeviceCollectives)
};

// Under mpirun (Open MPI's OMPI_COMM_WORLD_SIZE is set) initialises MPI and returns this rank;
// otherwise one rank and no MPI at all.
Result<World> JoinWorld(int* argc, char*** argv);

// Picks how the collectives of device tensors run, once the device is chosen, and wraps w.comm
// for it; every rank calls it (it exchanges which GPU each rank drives). CUDA: NCCL
// (WithDeviceGroups over NcclGroups) unless two ranks of a node share a GPU, which NCCL refuses;
// then host copies and MPI (WithHostStaging, as JoinWorld set up). sim: MPI's host groups
// (HostGroups), the device path without a GPU. FLOWRUN_COLLECTIVES=host keeps host copies and MPI
// for any device (auto, the default: as above). Returns the path taken, for the start-up line; empty for one rank or the CPU.
Result<std::string> UseDeviceCollectives(World& w, DeviceType type);

// A rank's watchdog action (base/watchdog.h) for its waits on the other ranks that nothing can
// interrupt (MPI_Init, blocking collectives): prints "flowrun: [TAG] rank R: WHAT took more than S
// s (KNOB): another rank may have died or hung", ends the job through *comm once that is set
// (before, this process alone, which mpirun then ends everywhere) and exits 1. `comm` and `rank`
// are read when it fires.
std::function<void(const std::string& what, double seconds)> GiveUpWaiting(std::string tag, std::string knob,
                                                                           Communicator* const* comm, const int* rank);

// NCCL's groups, on this process's GPU: member 0 of each makes its unique id and sends it to the
// others over MPI (actor/nccl_groups.cpp).
std::unique_ptr<GroupMaker> NcclGroups();

// Waits for a movement as an idle stream of the runtime waits (actor::Stream): `done` polls it
// once and says whether it completed; it is polled at once, again for Stream::PollSpinFor, then
// after sleeps of Stream::kPollMin doubling to Stream::PollMaxFor, for `ranks` ranks on this
// machine's cores. A rank that spun in a blocking call instead would take the core from a rank
// sharing it (Open MPI's yield when idle is off: MpiWorld). False when `seconds` passed first.
bool WaitAsRuntime(const std::function<bool()>& done, int ranks, double seconds = 1e9);

// What every rank of a job must have the same of, as hashes. The config is hashed whole, as
// ConfigToYaml writes it after the --set overrides, so that every setting the ranks must share
// (data format, files, order, seed, batch sizes, steps, optimizer, schedule...) is covered, and one
// added later too; the plan does not show most of them (the loader's order, for one).
struct RunDigest {
  uint64_t config = 0;  // the effective config
  uint64_t inputs = 0;  // the sizes of the model and data files (copies on each node may differ)
  uint64_t plan = 0;    // the compiled Plan (ir::PlanHash)
};

// Every rank runs the same job: compares the digests of all ranks. An error names, for each part
// that differs, the ranks whose part differs from rank 0's; or, after `timeout` seconds (rank 0) or
// twice that (the others), the ranks that never got this far. Every rank calls it; past it, every
// rank has called it (a barrier with a deadline). `where` names the point in the messages.
Status AgreeOnRun(const World& w, const RunDigest& digest, double timeout, const std::string& where = "the start of training");

// What Communicator::Prepare needs from a plan: each collective's group and, for a once-a-step
// float32 sum all-reduce (the gradients' buckets, the norm's), the most bytes of inputs one of
// its acts takes, laid out as a bucket, so that the backend may give it an input buffer
// (Communicator::InputBuffer; the MPI backend's is memory the members of a node share). Per
// micro-batch all-reduces get none, as the cost model prices them (sbp::Cluster). Collectives get
// input bytes in id order while every member's total stays within `budget_per_rank`. Every rank
// computes the same from the same plan, so a collective's members agree on its path.
struct CollectiveSetup {
  std::vector<std::vector<int>> groups;  // entry i: the group of collective i
  std::vector<int64_t> input_bytes;      // entry i: its input buffer's bytes, or 0
  std::vector<Link> links;               // every send's, in plan order (Communicator::PrepareLinks)
};
CollectiveSetup SetUpCollectives(const ir::Plan& plan, int64_t budget_per_rank = boxing::kSharedReduceBytesPerRank);

}  // namespace fr::actor
