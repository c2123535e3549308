#include "actor/world.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "actor/stream.h"

namespace fr::actor {

Result<World> JoinWorld(int* argc, char*** argv) {
  World w;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return w;
  ASSIGN_OR_RETURN(w.comm, MpiWorld(argc, argv));
  w.rank = w.comm->rank();
  w.size = w.comm->size();
  return w;
}

void WaitAsRuntime(const std::function<bool()>& done, int ranks) {
  const int cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const auto most = Stream::PollMaxFor(ranks, cores);
  const auto spin_until = std::chrono::steady_clock::now() + Stream::PollSpinFor(ranks, cores);
  auto wait = Stream::kPollMin;
  while (!done()) {
    if (std::chrono::steady_clock::now() < spin_until) continue;
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, most);
  }
}

void WaitAsRuntime(MPI_Request& req, int ranks) {
  WaitAsRuntime(
      [&req] {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);  // twice, as the runtime's poll looks
        return done != 0;
      },
      ranks);
}

Status AgreeOnPlan(const World& w, uint64_t plan_hash) {
  if (w.size == 1) return Status::Ok();
  std::vector<unsigned long long> all(static_cast<size_t>(w.size));
  unsigned long long mine = plan_hash;
  // Waits as the runtime does: ranks finish compiling at different times, and one spinning in a
  // blocking call would take half the core from a rank that shares it and is still compiling.
  MPI_Request req;
  if (MPI_Iallgather(&mine, 1, MPI_UNSIGNED_LONG_LONG, all.data(), 1, MPI_UNSIGNED_LONG_LONG, MPI_COMM_WORLD, &req) !=
      MPI_SUCCESS) {
    return Status::Runtime("[actor] rank " + std::to_string(w.rank) + ": could not exchange plan hashes");
  }
  WaitAsRuntime(req, w.size);
  std::string differ;
  for (int r = 1; r < w.size; ++r)
    if (all[static_cast<size_t>(r)] != all[0]) differ += " " + std::to_string(r);
  if (!differ.empty()) {
    return Status::Runtime("[actor] ranks" + differ + " compiled a different plan than rank 0 (configs or files differ between ranks?)");
  }
  return Status::Ok();
}

CollectiveSetup SetUpCollectives(const ir::Plan& plan, int64_t shared_per_rank) {
  CollectiveSetup c;
  for (const ir::TaskDesc& t : plan.tasks) {
    if (t.kind != ir::TaskKind::kBoxing || t.move.collective < 0) continue;
    const auto id = static_cast<size_t>(t.move.collective);
    if (c.groups.size() <= id) {
      c.groups.resize(id + 1);
      c.shared.resize(id + 1, 0);
    }
    if (c.groups[id].empty()) c.groups[id] = t.move.group;
    if (!t.per_step || t.move.op != boxing::Op::kAllReduce || t.move.reduce != sbp::Reduce::kSum) continue;
    std::vector<int64_t> pieces;
    bool f32 = true;
    for (int r : t.move.in) {
      pieces.push_back(plan.regsts[static_cast<size_t>(r)].bytes());
      f32 = f32 && plan.regsts[static_cast<size_t>(r)].type.dtype == DType::kF32;
    }
    int64_t bytes = 0;
    boxing::BucketOffsets(pieces, &bytes);  // laid out in the window as a bucket is
    if (f32) c.shared[id] = std::max(c.shared[id], bytes);
  }
  std::map<int, int64_t> used;  // per rank: shared bytes taken so far
  for (size_t id = 0; id < c.shared.size(); ++id) {
    if (c.shared[id] == 0) continue;
    bool fits = true;
    for (int r : c.groups[id]) fits = fits && used[r] + c.shared[id] <= shared_per_rank;
    if (!fits) {
      c.shared[id] = 0;
      continue;
    }
    for (int r : c.groups[id]) used[r] += c.shared[id];
  }
  return c;
}

}  // namespace fr::actor
