#include "actor/world.h"

#include <mpi.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <thread>
#include <vector>

#include "actor/stream.h"
#include "ops/cuda/backend.h"

namespace fr::actor {

std::function<void(const std::string&, double)> GiveUpWaiting(std::string tag, std::string knob, Communicator* const* comm,
                                                              const int* rank) {
  return [tag = std::move(tag), knob = std::move(knob), comm, rank](const std::string& what, double seconds) {
    std::fprintf(stderr, "flowrun: [%s] rank %d: %s took more than %d s (%s): another rank may have died or hung\n", tag.c_str(),
                 *rank, what.c_str(), static_cast<int>(seconds), knob.c_str());
    std::fflush(stderr);
    if (*comm) (*comm)->Abort(1);
    std::_Exit(1);
  };
}

Result<World> JoinWorld(int* argc, char*** argv) {
  World w;
  if (!std::getenv("OMPI_COMM_WORLD_SIZE")) return w;
  ASSIGN_OR_RETURN(std::unique_ptr<Communicator> mpi, MpiWorld(argc, argv));
  w.comm = WithHostStaging(std::move(mpi));
  w.rank = w.comm->rank();
  w.size = w.comm->size();
  return w;
}

Result<std::string> UseDeviceCollectives(World& w, DeviceType type) {
  const char* env = std::getenv("FLOWRUN_COLLECTIVES");
  const std::string mode = env ? env : "";
  if (!mode.empty() && mode != "host" && mode != "auto")
    return Status::Invalid("[actor] FLOWRUN_COLLECTIVES=" + mode + ": expected auto (the device's path) or host (host copies and MPI)");
  if (!w.comm || type == DeviceType::kCpu) return std::string();
  const std::string host_path = "collectives through host copies and MPI";
  if (type == DeviceType::kSim) {
    if (mode == "host") return host_path + " (FLOWRUN_COLLECTIVES=host)";
    w.comm = WithDeviceGroups(std::move(w.comm), HostGroups(), type);
    return std::string("collectives on the device communicator over MPI's host groups");
  }
  // Which GPU each rank drives, by host and PCI bus id: the ranks that share one share its memory
  // (gpu_sharers), and NCCL refuses a group in which two ranks share one, so then every
  // collective takes the host path (the same on every rank).
  constexpr int kKey = 256;
  char mine[kKey] = {};
  char host[128] = {};
  ::gethostname(host, sizeof host - 1);
  std::snprintf(mine, sizeof mine, "%s/%s", host, cuda::GpuKey().c_str());
  std::vector<char> all(static_cast<size_t>(kKey) * static_cast<size_t>(w.size));
  if (MPI_Allgather(mine, kKey, MPI_CHAR, all.data(), kKey, MPI_CHAR, MPI_COMM_WORLD) != MPI_SUCCESS)
    return Status::Runtime("[actor] rank " + std::to_string(w.rank) + ": exchanging the ranks' GPUs failed");
  std::map<std::string, std::vector<int>> by_gpu;
  for (int r = 0; r < w.size; ++r) by_gpu[std::string(&all[static_cast<size_t>(r) * kKey])].push_back(r);
  w.gpu_sharers = static_cast<int>(by_gpu[std::string(mine)].size());
  if (mode == "host") return host_path + " (FLOWRUN_COLLECTIVES=host)";
  for (const auto& [gpu, ranks] : by_gpu) {
    if (ranks.size() < 2) continue;
    std::string list;
    for (int r : ranks) list += (list.empty() ? "" : ",") + std::to_string(r);
    return host_path + " (ranks " + list + " share GPU " + gpu + ", which NCCL refuses)";
  }
  w.comm = WithDeviceGroups(std::move(w.comm), NcclGroups(), type);
  return "collectives on NCCL " + cuda::NcclVersion();
}

bool WaitAsRuntime(const std::function<bool()>& done, int ranks, double seconds) {
  const int cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  const auto most = Stream::PollMaxFor(ranks, cores);
  const auto now = std::chrono::steady_clock::now();
  const auto spin_until = now + Stream::PollSpinFor(ranks, cores);
  const auto deadline = seconds >= 1e9 ? std::chrono::steady_clock::time_point::max()
                                       : now + std::chrono::duration_cast<std::chrono::steady_clock::duration>(
                                                   std::chrono::duration<double>(seconds));
  auto wait = Stream::kPollMin;
  while (!done()) {
    const auto t = std::chrono::steady_clock::now();
    if (t > deadline) return false;
    if (t < spin_until) continue;
    std::this_thread::sleep_for(wait);
    wait = std::min(wait * 2, most);
  }
  return true;
}

namespace {

// RunDigest's fields, in order, and what a rank whose field differs from rank 0's did.
constexpr size_t kDigestParts = 3, kPlanPart = 2;
constexpr const char* kDiffers[kDigestParts] = {
    "started with a different config than rank 0 (the file with its --set overrides)",
    "read input files of other sizes than rank 0 (model.onnx or a data file differs)",
    "compiled a different plan than rank 0"};

// The ranks whose part `part` of the digests (kDigestParts a rank, rank-major) differs from rank
// 0's, as "1,3"; empty when all agree.
std::string Differing(const std::vector<unsigned long long>& all, size_t ranks, size_t part) {
  std::string differ;
  for (size_t r = 1; r < ranks; ++r)
    if (all[r * kDigestParts + part] != all[part]) differ += (differ.empty() ? "" : ",") + std::to_string(r);
  return differ;
}

}  // namespace

Status AgreeOnRun(const World& w, const RunDigest& digest, double timeout, const std::string& where) {
  if (w.size == 1) return Status::Ok();
  // Point to point through rank 0, not one all-gather: waiting on its own receive from each rank,
  // rank 0 can name the ranks that never came (stopped, or still compiling); the others wait on
  // rank 0 twice as long, so that rank 0 reports first when another rank is missing.
  constexpr int kTag = 7301, kParts = static_cast<int>(kDigestParts);
  const std::string me = "[actor] rank " + std::to_string(w.rank) + ": ";
  const size_t n = static_cast<size_t>(w.size);
  std::vector<unsigned long long> all(n * kDigestParts, 0);
  const unsigned long long mine[kDigestParts] = {digest.config, digest.inputs, digest.plan};
  std::copy(mine, mine + kDigestParts, all.begin() + static_cast<std::ptrdiff_t>(static_cast<size_t>(w.rank) * kDigestParts));
  auto late = [&](const std::string& who, double waited) {
    return Status::Runtime(me + who + " did not reach " + where + " within " + std::to_string(static_cast<int>(waited)) +
                           " s (parallel.timeout): died, hung, or still compiling (a plan that takes longer needs a "
                           "larger parallel.timeout)");
  };
  if (w.rank == 0) {
    std::vector<MPI_Request> reqs(n, MPI_REQUEST_NULL);
    for (size_t r = 1; r < n; ++r)
      if (MPI_Irecv(&all[r * kDigestParts], kParts, MPI_UNSIGNED_LONG_LONG, static_cast<int>(r), kTag, MPI_COMM_WORLD,
                    &reqs[r]) != MPI_SUCCESS)
        return Status::Runtime(me + "could not exchange the ranks' digests");
    std::vector<bool> got(n, false);
    got[0] = true;
    auto all_in = [&] {
      for (size_t r = 1; r < n; ++r) {
        int done = 0;
        if (!got[r] && MPI_Test(&reqs[r], &done, MPI_STATUS_IGNORE) == MPI_SUCCESS && done) got[r] = true;
        if (!got[r]) return false;
      }
      return true;
    };
    if (!WaitAsRuntime(all_in, w.size, timeout)) {
      std::string missing;
      for (size_t r = 1; r < n; ++r)
        if (!got[r]) missing += (missing.empty() ? "" : ",") + std::to_string(r);
      return late("rank(s) " + missing, timeout);
    }
    std::vector<MPI_Request> sends(n, MPI_REQUEST_NULL);
    for (size_t r = 1; r < n; ++r)
      MPI_Isend(all.data(), static_cast<int>(all.size()), MPI_UNSIGNED_LONG_LONG, static_cast<int>(r), kTag, MPI_COMM_WORLD, &sends[r]);
    auto sent = [&] {
      int done = 0;
      MPI_Testall(w.size, sends.data(), &done, MPI_STATUSES_IGNORE);
      return done != 0;
    };
    if (!WaitAsRuntime(sent, w.size, timeout)) return late("some rank", timeout);
  } else {
    MPI_Request reqs[2] = {MPI_REQUEST_NULL, MPI_REQUEST_NULL};
    if (MPI_Isend(mine, kParts, MPI_UNSIGNED_LONG_LONG, 0, kTag, MPI_COMM_WORLD, &reqs[0]) != MPI_SUCCESS ||
        MPI_Irecv(all.data(), static_cast<int>(all.size()), MPI_UNSIGNED_LONG_LONG, 0, kTag, MPI_COMM_WORLD, &reqs[1]) != MPI_SUCCESS)
      return Status::Runtime(me + "could not exchange the ranks' digests");
    auto both = [&] {
      int done = 0;
      MPI_Testall(2, reqs, &done, MPI_STATUSES_IGNORE);
      return done != 0;
    };
    if (!WaitAsRuntime(both, w.size, 2 * timeout)) return late("rank 0", 2 * timeout);
  }
  std::string msg;
  bool users = false;  // a config or a file differs: the user's to fix (exit code 2); a plan alone, flowrun's
  for (size_t part = 0; part < kDigestParts; ++part) {
    const std::string ranks = Differing(all, n, part);
    if (ranks.empty()) continue;
    msg += (msg.empty() ? "" : "; ") + ("rank(s) " + ranks + " " + kDiffers[part]);
    users = users || part != kPlanPart;
  }
  if (msg.empty()) return Status::Ok();
  msg = "[actor] " + msg + ": every rank must run the same config on the same files";
  return users ? Status::Invalid(msg) : Status::Runtime(msg);
}

CollectiveSetup SetUpCollectives(const ir::Plan& plan, int64_t budget_per_rank) {
  CollectiveSetup c;
  for (const ir::TaskDesc& t : plan.tasks) {
    if (t.kind == ir::TaskKind::kBoxing && t.move.op == boxing::Op::kSend) c.links.push_back({t.move.rank, t.move.peer, t.move.tag});
    if (t.kind != ir::TaskKind::kBoxing || t.move.collective < 0) continue;
    const auto id = static_cast<size_t>(t.move.collective);
    if (c.groups.size() <= id) {
      c.groups.resize(id + 1);
      c.input_bytes.resize(id + 1, 0);
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
    boxing::BucketOffsets(pieces, &bytes);  // laid out as a bucket is
    if (f32) c.input_bytes[id] = std::max(c.input_bytes[id], bytes);
  }
  std::map<int, int64_t> used;  // per rank: input bytes taken so far
  for (size_t id = 0; id < c.input_bytes.size(); ++id) {
    if (c.input_bytes[id] == 0) continue;
    bool fits = true;
    for (int r : c.groups[id]) fits = fits && used[r] + c.input_bytes[id] <= budget_per_rank;
    if (!fits) {
      c.input_bytes[id] = 0;
      continue;
    }
    for (int r : c.groups[id]) used[r] += c.input_bytes[id];
  }
  return c;
}

}  // namespace fr::actor
