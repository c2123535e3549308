// Communicator: moves the data of the boxing tasks that span ranks (collectives, send, recv) for
// the runtime (DESIGN.md §4), without blocking. A small interface in the MLX manner: the MPI
// backend (mpi_comm.cpp) carries host memory; a NCCL backend would implement the same class for
// CUDA tensors. How a backend moves the bytes (MPI's shared-memory all-reduce, NCCL's kernels) is
// its own business.
//
// Semantics are those of boxing::Simulate, task for task (boxing.h): a collective over p ranks
// splits and concatenates in parts of sbp::SplitRange over p (uneven parts allowed), in the order
// of task.group; send and recv pair up by (sender, receiver, tag), with global ranks.
//
// Rules the caller keeps:
//   - Every rank calls Prepare with the same list: entry i is the group of collective id i (the
//     plan's boxing::Task::collective). Prepare blocks until the members of each group the rank
//     belongs to have created that collective's communicator together, in list order, so no two
//     ranks wait on each other. An entry prepared before with the same group is skipped.
//   - Issue order: the acts of one collective id start in act order on every member (the actor
//     runtime guarantees it). Different collective ids need no common order across ranks, and
//     the runtime gives none (each starts when its inputs are ready): a backend must not need
//     one, so each id has a communicator (and, on a device, a stream) of its own. Sends and
//     receives may start in any order; tags in flight are unique per (sender, receiver).
//   - Ordering with the device: Start is given the stream its inputs were produced on; the
//     movement reads them only after the work queued there before Start (on the host it is done).
//   - The tensors given to Start stay untouched until Poll reports the movement done: the inputs
//     are read and `out` is written in the background. The communicator keeps them alive.
//   - Poll is called until every started movement is done before the Communicator is destroyed:
//     destroying it with movements in flight aborts the job (the backend may still write to them).
//
// Errors: Status::Runtime("[actor] rank R: <what>: ...") naming the op and its group or peer, for
// a task that does not match its tensors, an unprepared group, or any backend failure. The
// communicator is then in an unknown state across ranks; the caller reports and calls Abort.
//
// Thread-safety: Prepare, Start, Poll and AwaitInputBuffer are called by one thread at a time (the
// runtime serialises them with a mutex: any of its stream threads may drive progress). rank(),
// size(), Cancel() and Abort() may be called from any thread.
#pragma once

#include <cstdint>
#include <memory>
#include <vector>

#include "base/collective.h"
#include "base/status.h"
#include "base/tensor.h"
#include "boxing/boxing.h"

namespace fr::actor {

// One data movement in flight; spent once Poll has reported it done.
struct CommHandle {
  int id = -1;
};

// The sends and receives of one tag between two ranks: what a backend that matches messages by
// order rather than by tag (NCCL) needs a channel of its own for.
struct Link {
  int sender = -1, receiver = -1, tag = -1;
  friend bool operator==(const Link&, const Link&) = default;
};

// How a rank ends a run (Runtime::Run): the last step it runs, which no rank's last may be below,
// and whether it stops the training there (RunOptions::wind_down).
struct StepNotice {
  int64_t last_step = -1;
  bool stopping = false;
};

class Communicator {
 public:
  virtual ~Communicator() = default;
  virtual int rank() const = 0;
  virtual int size() const = 0;

  // Creates what collectives over each group need (see the rules above). Errors for a group that
  // is empty, names a rank twice or a rank outside the world.
  // `input_bytes`, when given, has an entry per group: the most bytes of inputs one act of that
  // collective takes where the caller would lay them out in an input buffer (InputBuffer), else
  // 0. A backend may give such collectives memory of its own for their inputs (the MPI backend:
  // a window the members of a node share, for sum all-reduces of float32), so callers bound the
  // total (boxing::kSharedReduceBytesPerRank).
  virtual Status Prepare(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& input_bytes = {}) = 0;
  // Creates what the plan's sends and receives need, after Prepare: every rank calls it with the
  // same list, and it blocks until the pair of each link this rank is in has, in list order. It
  // replaces the last call's links. The MPI backend needs nothing (MPI matches by tag).
  virtual Status PrepareLinks(const std::vector<Link>& links) {
    (void)links;
    return Status::Ok();
  }

  // Memory of the backend's for collective `collective`'s inputs (see Prepare), as storage for
  // `bytes` laid out as boxing::BucketOffsets lays out a bucket's, zero-filled; null where the
  // backend has none for it or too little. An act whose inputs lie there at those offsets starts
  // without copying them; every act of the collective must then take its inputs from there
  // (another act's would be copied over them), and the caller writes them for the next act only
  // after AwaitInputBuffer. The storage is valid while the communicator is.
  virtual std::shared_ptr<Storage> InputBuffer(int collective, int64_t bytes) {
    (void)collective;
    (void)bytes;
    return nullptr;
  }
  // Returns once the backend, on every member, is done reading collective `collective`'s input
  // buffer for its acts so far, so that the inputs there may be written for the next act. An act
  // may complete before the other members have read this rank's inputs, so that no rank waits on
  // an idle one's wake-up; the wait is here instead, where it is normally long over. Called only
  // after the collective's last act here completed. Fails, naming the members that have not read,
  // once Cancel has been called: a member that died or hung never reads.
  virtual Status AwaitInputBuffer(int collective) {
    (void)collective;
    return Status::Ok();
  }
  // Acts so far that ran through an input buffer (see InputBuffer), whether their inputs lay there
  // already or were copied in.
  virtual int64_t buffered_acts() const { return 0; }

  // Any thread: every wait of this communicator on other ranks (AwaitInputBuffer) fails from now
  // on instead of waiting, so that the threads of a run that has failed (a peer that stalled) can
  // be joined. Movements in flight stay in flight, except on a device whose collectives the host
  // cannot otherwise release (NCCL's are aborted); the caller then reports and calls Abort.
  virtual void Cancel() = 0;

  // Starts the movement of task `t` (a collective, kSend or kRecv, with t.rank == rank()) with
  // this rank's inputs (per t.in: one for collectives and kSend, none for kRecv) and outputs
  // (allocated with the task's planned shapes and the inputs' dtype; none for kSend, else one).
  // A kAllReduce or kReduceScatter may carry several inputs (a gradient bucket), each reduced into
  // the output of the same index (a reduce-scatter's: this member's part of it along split_axis),
  // and a kAllGather several (a parameter bucket), each gathered into the output of the same
  // index: one collective call for all of them.
  // `after` is the stream the inputs were produced on (null: they are ready now; see the rules).
  // Never blocks: any packing into staging buffers happens here, the transfer in the background.
  virtual Result<CommHandle> Start(const boxing::Task& t, std::vector<Tensor> in, std::vector<Tensor> out,
                                   DeviceStream* after = nullptr) = 0;

  // Makes progress on every movement in flight, in one pass, and returns those that finished since
  // the last call: their outputs hold the result and their inputs may be reused. Never blocks.
  // One pass for all, rather than one test per movement: each pass runs MPI's progress engine,
  // which costs far more than checking a flag.
  virtual Result<std::vector<CommHandle>> Poll() = 0;
  // Movements started and not yet reported done.
  virtual int in_flight() const = 0;

  // The notices that end a run, through which the ranks agree where it stops (Runtime::Run): in
  // each run every rank calls BeginNotices(run) with the same `run`, then Notify once, then
  // PollNotices until no rank is missing; the run's notices are then spent. Called with Start and
  // Poll's one-thread-at-a-time rule. Never block.
  virtual Status BeginNotices(int64_t run) = 0;
  virtual Status Notify(const StepNotice& mine) = 0;
  // Merges the notices that arrived (this rank's own, once Notify was called) into `merged`: the
  // highest last_step, and stopping if any said so. Returns the ranks whose notice has not yet
  // arrived, or whose own notice is still being sent; empty once it is all done.
  virtual Result<std::vector<int>> PollNotices(StepNotice* merged) = 0;

  // Ends every rank of the job with exit code `code`. Does not return.
  [[noreturn]] virtual void Abort(int code) = 0;
};

// `inner`, for tensors on devices the host cannot address (a GPU's memory) too: their movement
// runs on host copies. Start waits on the host for the inputs' stream and copies the inputs to the
// host (it blocks, unlike `inner`'s), `inner` moves the copies, and Poll copies the outputs to the
// device once they are done. Movements of host-visible tensors pass through untouched. The path
// for device ranks without a device communicator (NCCL), and for ranks that share one GPU.
std::unique_ptr<Communicator> WithHostStaging(std::unique_ptr<Communicator> inner);

// Makes the collective group (base/collective.h) of `ranks` (global, in group order) in which
// this rank is member `index`. Every member calls it for the same group at the same point of its
// list of groups; it blocks until they all have.
class GroupMaker {
 public:
  virtual ~GroupMaker() = default;
  virtual Result<std::unique_ptr<CollectiveGroup>> Make(const std::vector<int>& ranks, int index) = 0;
};

// `inner`, with the collectives of tensors on devices of `type` run by groups from `maker`, one
// per collective id (made in Prepare), each on its own stream, ordered after the inputs' stream
// by an event rather than a wait on the host (actor/device_comm.cpp). Everything else passes to
// `inner`: sends and receives, tensors elsewhere, the notices. The path of CUDA ranks on NCCL.
std::unique_ptr<Communicator> WithDeviceGroups(std::unique_ptr<Communicator> inner, std::unique_ptr<GroupMaker> maker,
                                               DeviceType type);
// Groups on MPI over host memory, a thread per group as its stream (actor/group_makers.cpp): the
// device communicator's logic without a GPU, for the sim device and the tests. Needs MPI at
// MPI_THREAD_MULTIPLE.
std::unique_ptr<GroupMaker> HostGroups();

// The MPI communicator over all ranks of MPI_COMM_WORLD; every rank calls it (it duplicates the
// world communicator, so its traffic never meets the caller's). If MPI is not initialised yet,
// it initialises it with MPI_THREAD_MULTIPLE (argc and argv may be null) and the returned object
// finalises it when destroyed; otherwise MPI must run at MPI_THREAD_MULTIPLE and stays the
// caller's to finalise, after destroying the communicator. Destruction is collective too.
Result<std::unique_ptr<Communicator>> MpiWorld(int* argc, char*** argv);

}  // namespace fr::actor
