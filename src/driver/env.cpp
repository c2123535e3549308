#include "driver/env.h"

#include <dnnl.h>
#include <mpi.h>
#include <omp.h>
#include <sched.h>
#include <sys/stat.h>
#include <unistd.h>

#include <algorithm>
#include <chrono>
#include <thread>
#include <condition_variable>
#include <mutex>
#include <cerrno>
#include <cmath>
#include <cctype>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <ctime>
#include <filesystem>
#include <fstream>
#include <functional>
#include <iostream>
#include <sstream>
#include <vector>

#include "actor/stream.h"
#include "actor/world.h"
#include "base/affinity.h"
#include "base/file.h"
#include "base/output_check.h"
#include "base/watchdog.h"
#include "base/process.h"
#include "base/report.h"
#include "base/status.h"
#include "boxing/boxing.h"
#include "graph/graph.h"
#include "ops/cuda/backend.h"
#include "ops/op.h"

namespace fr {
namespace {

// Waits for an MPI request as the runtime waits (actor::WaitAsRuntime), testing twice a poll as
// the runtime's poll looks.
bool WaitAsRuntime(MPI_Request& req, int ranks, double seconds = 1e9) {
  return actor::WaitAsRuntime(
      [&req] {
        int done = 0;
        MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        if (!done) MPI_Test(&req, &done, MPI_STATUS_IGNORE);
        return done != 0;
      },
      ranks, seconds);
}

constexpr int kGemmSizes[] = {512, 256};
constexpr int kGemmReps = 10;  // blocks
constexpr int kGemmsPerBlock = 4;
constexpr int kLatencyReps = 200;
constexpr int kBandwidthReps = 10;
constexpr int kRuntimeReps = 100;
constexpr int kIdleReps = 40;
constexpr size_t kIdleMessageBytes = 64 << 10;
constexpr int kShortWaitGemms = 1, kLongWaitGemms = 4;  // of Burst(192): how long a receiver waits
constexpr int kBusyReps = 25;  // blocks: this VM's speed drifts
constexpr int kBusyGemms = 8;  // per block: several scheduler time slices with every rank busy
constexpr int kBurstN = 128, kBurstGemms = 4;  // a short burst of work before a collective
constexpr int64_t kBandwidthFloats = int64_t{1} << 20;  // 4 MiB
constexpr int64_t kElementRows = 256, kElementCols = 256;  // 256 KiB a tensor: a small model's activations
constexpr int kElementOpsPerBlock = 16;

// ---- Re-launching under mpirun -------------------------------------------------------------

// Fails early, before any rank starts, when FILE could not be written (base/output_check.h);
// writes nothing.
Status CheckWritable(const std::string& file) { return CheckOutput({"--out", file}, {}, {}).With("[env] "); }

int Relaunch(const EnvArgs& a) {
  std::vector<std::string> args = {"env", "--ranks", std::to_string(a.ranks), "--repeats", std::to_string(a.repeats),
                                   "--device", a.device, "--timeout", std::to_string(a.Deadline()), "--launched"};
  if (a.tf32) args.push_back("--tf32");
  if (!a.out.empty()) {
    if (Status s = CheckWritable(a.out); !s.ok()) return Fail(s);
    std::error_code ec;
    std::string out = std::filesystem::absolute(a.out, ec).string();  // the ranks may start elsewhere
    args.insert(args.end(), {"--out", ec ? a.out : out});
  }
  // A rank that died or hung would hold the others in their collectives for good; one repeat
  // takes seconds here, so minutes each is a deadline no working machine meets. The ranks keep
  // the same deadline themselves (Measured); mpirun's is a little later, for their message.
  Result<int> code = RunUnderMpirun(a.ranks, args, "", a.Deadline() + 30);
  if (code.ok()) return *code;
  std::string msg = "[env] " + code.status().message();
  if (code.status().exit_code() == 2) {
    return Fail(Status::Invalid(msg + ", or launch the ranks yourself: mpirun -n " + std::to_string(a.ranks) +
                                " flowrun env"));
  }
  return Fail(Status::Runtime(msg));
}

// ---- This machine ----------------------------------------------------------------------------

struct Host {
  std::string name, cpu, date;
  int cores = 0;
  double mem_total_gib = 0;
};

std::string Trimmed(const std::string& s) {
  std::string r;
  for (char c : s) {
    if (std::isspace(static_cast<unsigned char>(c))) {
      if (!r.empty() && r.back() != ' ') r += ' ';
    } else {
      r += c;
    }
  }
  while (!r.empty() && r.back() == ' ') r.pop_back();
  return r;
}

Result<Host> ReadHost() {
  Host h;
  std::ifstream mem("/proc/meminfo");
  if (!mem) return Status::Runtime("[env] cannot read /proc/meminfo: " + std::string(std::strerror(errno)));
  std::string key;
  int64_t kib = -1;
  while (mem >> key) {
    if (key == "MemTotal:") {
      mem >> kib;
      break;
    }
    mem.ignore(1 << 20, '\n');
  }
  if (kib <= 0) return Status::Runtime("[env] /proc/meminfo: no MemTotal line");
  h.mem_total_gib = static_cast<double>(kib) / (1024.0 * 1024.0);

  std::ifstream cpu("/proc/cpuinfo");
  std::string line;
  while (std::getline(cpu, line)) {
    auto colon = line.find(':');
    if (colon == std::string::npos) continue;
    std::string k = Trimmed(line.substr(0, colon));
    if (k == "model name" || k == "Model" || k == "cpu model" || k == "Hardware") {
      h.cpu = Trimmed(line.substr(colon + 1));
      if (k == "model name") break;
    }
  }
  if (h.cpu.empty()) h.cpu = "unknown CPU";
  h.cores = static_cast<int>(std::max(1L, ::sysconf(_SC_NPROCESSORS_ONLN)));
  char name[256] = {};
  if (::gethostname(name, sizeof name - 1) != 0 || !name[0]) std::snprintf(name, sizeof name, "localhost");
  h.name = name;
  std::time_t now = std::time(nullptr);
  std::tm tm {};
  localtime_r(&now, &tm);
  char date[32];
  std::strftime(date, sizeof date, "%Y-%m-%d", &tm);
  h.date = date;
  return h;
}

// ---- Measurements, every rank at once ---------------------------------------------------------

double Median(std::vector<double> v) {
  std::sort(v.begin(), v.end());
  size_t n = v.size();
  return n % 2 ? v[n / 2] : 0.5 * (v[n / 2 - 1] + v[n / 2]);
}

// Env's own barriers and reductions wait as the runtime does too: flowrun turns Open MPI's yield
// when idle off (actor::MpiWorld), and a rank spinning in a blocking call took the core from a rank
// that shared it and was still timing its work.
int WorldSize() {
  int n = 1;
  MPI_Comm_size(MPI_COMM_WORLD, &n);
  return n;
}

void Barrier() {
  MPI_Request req;
  MPI_Ibarrier(MPI_COMM_WORLD, &req);
  WaitAsRuntime(req, WorldSize());
}

double AllReduce(double x, MPI_Op op) {
  double r = 0;
  MPI_Request req;
  MPI_Iallreduce(&x, &r, 1, MPI_DOUBLE, op, MPI_COMM_WORLD, &req);
  WaitAsRuntime(req, WorldSize());
  return r;
}

// Waits for `req` testing without a pause and yielding the core between tests, as Open MPI's
// blocking calls do when ranks oversubscribe the cores: for the transport's own figures (an 8-byte
// and a 4 MiB all-reduce, which give `bandwidth`), with no wait between polls in them; the
// runtime's waits are in the latency figures (BusyCollectiveSeconds, IdleMessageAfter).
void WaitDriving(MPI_Request& req) {
  for (int done = 0; !done;) {
    MPI_Test(&req, &done, MPI_STATUS_IGNORE);
    if (!done) sched_yield();
  }
}

// Seconds per n x n x n sgemm: the median over blocks of kGemmsPerBlock back to back, each block
// between two barriers, so a block lasts until the slowest rank is done. Ranks that share cores
// thus report the share they get, not a turn alone on a core while the others wait.
Result<double> GemmSeconds(int n) {
  const size_t nn = static_cast<size_t>(n) * static_cast<size_t>(n);
  std::vector<float> a(nn), b(nn), c(nn);  // [n, n] each
  for (size_t i = 0; i < nn; ++i) {
    a[i] = static_cast<float>(i % 17) * 0.01f - 0.08f;
    b[i] = static_cast<float>(i % 13) * 0.02f - 0.12f;
  }
  std::vector<double> t;
  for (int r = -1; r < kGemmReps; ++r) {  // one warm-up block
    Barrier();
    double t0 = MPI_Wtime();
    for (int i = 0; i < kGemmsPerBlock; ++i) {
      dnnl_status_t s = dnnl_sgemm('N', 'N', n, n, n, 1.0f, a.data(), n, b.data(), n, 0.0f, c.data(), n);
      if (s != dnnl_success) {
        return Status::Runtime("[env] dnnl_sgemm " + std::to_string(n) + "^3 failed with status " +
                               std::to_string(static_cast<int>(s)));
      }
    }
    Barrier();
    if (r >= 0) t.push_back((MPI_Wtime() - t0) / kGemmsPerBlock);
  }
  return Median(t);
}

// Seconds per element read and written by one of flowrun's own CPU kernels, every rank running it
// at once on [kElementRows, kElementCols] activations: Add (two such tensors into a third) for the
// cost model's `stream` ops, Gelu with its bias for its `special` ones (sbp::Cluster). The median
// over blocks, each until the slowest rank is done, as for GEMMs.
Result<double> ElementSeconds(OpKind op) {
  ir::Graph g;
  Builder b(g);
  const Shape act{kElementRows, kElementCols};
  const bool gelu = op == OpKind::kGelu;
  const ir::ValueId x = g.AddValue("x", {DType::kF32, act}, ir::ValueKind::kInput);
  const ir::ValueId y = g.AddValue(gelu ? "bias" : "y", {DType::kF32, gelu ? Shape{kElementCols} : act}, ir::ValueKind::kInput);
  ir::Attrs attrs;
  if (gelu) {
    attrs.Set("div", std::sqrt(2.0));
    attrs.Set("one", 1.0);
    attrs.Set("half", 0.5);
  }
  ASSIGN_OR_RETURN(std::vector<ir::ValueId> out, b.Add(op, {x, y}, attrs, "element", ir::Phase::kForward));
  std::vector<Tensor> in = {Tensor::Full(act, 0), Tensor::Full(g.type(y).shape, 0.1f)};
  std::span<float> xs = in[0].span<float>();
  for (size_t i = 0; i < xs.size(); ++i) xs[i] = static_cast<float>(i % 23) * 0.25f - 2.75f;
  std::vector<Tensor> outs = {Tensor::Full(g.type(out[0]).shape, 0)};
  const double elements = static_cast<double>(in[0].numel() + in[1].numel() + outs[0].numel());
  const KernelFn kernel = Kernel(op, DeviceType::kCpu);
  const KernelCtx ctx{g.nodes.back(), in, outs};
  std::vector<double> t;
  for (int r = -1; r < kGemmReps; ++r) {  // one warm-up block
    Barrier();
    double t0 = MPI_Wtime();
    for (int i = 0; i < kElementOpsPerBlock; ++i) RETURN_IF_ERROR(kernel(ctx));
    Barrier();
    if (r >= 0) t.push_back((MPI_Wtime() - t0) / kElementOpsPerBlock / elements);
  }
  return Median(t);
}

double LatencySeconds() {
  double one = 1, sum = 0;
  std::vector<double> t;
  Barrier();
  for (int r = -20; r < kLatencyReps; ++r) {
    double t0 = MPI_Wtime();
    MPI_Request req;
    MPI_Iallreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
    WaitDriving(req);
    if (r >= 0) t.push_back(MPI_Wtime() - t0);
  }
  return Median(t);
}

// A point-to-point message as the runtime waits for it: ranks pair up (0-1, 2-3, ...) and
// ping-pong 8 bytes with MPI_Isend/MPI_Irecv tested with the comm stream's back-off; half the
// round trip. An odd rank out pairs with rank 0's partner chain and simply waits at the barrier.
double RuntimeMessageSeconds(int rank, int ranks) {
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  double x = 1, y = 0;
  std::vector<double> t;
  Barrier();
  for (int r = -10; r < kRuntimeReps && peer < ranks; ++r) {
    double t0 = MPI_Wtime();
    MPI_Request req;
    if (rank % 2 == 0) {
      MPI_Isend(&x, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
      MPI_Irecv(&y, 1, MPI_DOUBLE, peer, 8, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
    } else {
      MPI_Irecv(&y, 1, MPI_DOUBLE, peer, 7, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
      MPI_Isend(&x, 1, MPI_DOUBLE, peer, 8, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
    }
    if (r >= 0) t.push_back((MPI_Wtime() - t0) / 2);
  }
  Barrier();
  return t.empty() ? 0 : Median(t);
}

// steady_clock in seconds: one clock for every process on a machine, so ranks can compare stamps.
double SteadySeconds() {
  return std::chrono::duration<double>(std::chrono::steady_clock::now().time_since_epoch()).count();
}

// Compute for a rank to do between measurements: `gemms` n x n x n sgemms on constant matrices.
class Burst {
 public:
  explicit Burst(int n) : n_(n), a_(Size(n), 0.01f), b_(Size(n), -0.02f), c_(Size(n)) {}
  void Run(int gemms) {
    for (int i = 0; i < gemms; ++i)
      dnnl_sgemm('N', 'N', n_, n_, n_, 1.0f, a_.data(), n_, b_.data(), n_, 0.0f, c_.data(), n_);
  }

 private:
  static size_t Size(int n) { return static_cast<size_t>(n) * static_cast<size_t>(n); }
  int n_;
  std::vector<float> a_, b_, c_;
};

// Seconds per n x n x n sgemm on each of ranks 0..busy-1 while the others wait as the runtime's
// idle ranks do: the median over kBusyReps blocks of kBusyGemms each, a block lasting from the
// first rank's start to the last busy rank's finish (steady_clock is one clock on one machine),
// so ranks the scheduler ran in turn count as sharing. Every block ends with all ranks waiting
// as the runtime does.
double BusyGemmSeconds(int n, int rank, int busy, int ranks) {
  Burst work(n);
  std::vector<double> t;
  for (int r = -1; r < kBusyReps; ++r) {  // one warm-up block
    Barrier();
    const double t0 = SteadySeconds();
    if (rank < busy) work.Run(kBusyGemms);
    const double t1 = rank < busy ? SteadySeconds() : t0;
    MPI_Request req;
    MPI_Ibarrier(MPI_COMM_WORLD, &req);
    WaitAsRuntime(req, ranks);
    const double first = AllReduce(t0, MPI_MIN), last = AllReduce(t1, MPI_MAX);
    if (r >= 0) t.push_back((last - first) / kBusyGemms);
  }
  return Median(t);
}

// A collective as a training step meets it: every rank computes a short burst (kBurstGemms
// sgemms of kBurstN, about an op's worth, with the ranks sharing the cores as in a step), then
// all-reduces 8 bytes and waits as the runtime does. Its latency is what burst and collective
// took beyond the burst alone, each from the first rank's start to the last rank's finish, the
// two interleaved rep by rep: the waiting ranks' wake-ups, and the wait for the rank the
// scheduler ran last. Ranks that only wait for a collective (no burst) finish it 3-4x sooner,
// which priced gpt_mini's and the MLP's collectives at half what their traces show.
// `collective` runs one 8-byte all-reduce and waits for it as the runtime does.
Result<double> BusyCollectiveSeconds(const std::function<Status()>& collective) {
  Burst work(kBurstN);
  std::vector<double> alone, with;
  for (int r = -3; r < kRuntimeReps; ++r) {
    for (int once = 0; once < 2; ++once) {
      Barrier();
      const double t0 = SteadySeconds();
      work.Run(kBurstGemms);
      if (once) RETURN_IF_ERROR(collective());
      const double t1 = SteadySeconds();
      const double first = AllReduce(t0, MPI_MIN), last = AllReduce(t1, MPI_MAX);
      if (r >= 0) (once ? with : alone).push_back(last - first);
    }
  }
  return std::max(0.0, Median(with) - Median(alone));
}

// Open MPI's all-reduce of 8 bytes after a burst (BusyCollectiveSeconds).
Result<double> BusyMpiCollectiveSeconds(int ranks) {
  double one = 1, sum = 0;
  return BusyCollectiveSeconds([&] {
    MPI_Request req;
    MPI_Iallreduce(&one, &sum, 1, MPI_DOUBLE, MPI_SUM, MPI_COMM_WORLD, &req);
    WaitAsRuntime(req, ranks);
    return Status::Ok();
  });
}

// cluster.busy_speedup: for b = 1..ranks, how much faster each of b busy ranks computes than when
// all are busy (the slowest busy rank's median), made not increasing and at least 1, since noise
// must not tell the cost model that fewer busy ranks compute slower.
std::vector<double> BusySpeedup(int n, int rank, int ranks) {
  std::vector<double> seconds(static_cast<size_t>(ranks));
  for (int b = 1; b <= ranks; ++b) seconds[static_cast<size_t>(b - 1)] = BusyGemmSeconds(n, rank, b, ranks);
  std::vector<double> s(static_cast<size_t>(ranks), 1.0);
  for (int b = ranks - 1; b >= 1; --b) {
    const double x = seconds.back() / seconds[static_cast<size_t>(b - 1)];
    s[static_cast<size_t>(b - 1)] = std::max(s[static_cast<size_t>(b)], x);
  }
  return s;
}

// A point-to-point message of kIdleMessageBytes (an activation's size: past MPI's eager limit, so
// the rendezvous needs both ranks to poll) to a rank that has waited for it, as a pipeline stage
// waits for the one before it: ranks pair up (0-1, 2-3, ...); the even rank computes `gemms`
// sgemms and sends its clock first in the message, the odd one posts its receive at once, waits
// with the runtime's back-off and takes the difference (one machine: steady_clock is the same for
// every process). The longer a rank has waited, the longer its polls are apart and the later it
// sees the message. The odd ranks' medians, of the wait and of the message.
struct IdleMessage {
  double wait = 0;     // s, from posting the receive to the message leaving
  double seconds = 0;  // s, from leaving to received
};
IdleMessage IdleMessageAfter(int rank, int ranks, int gemms) {
  const int peer = rank % 2 == 0 ? rank + 1 : rank - 1;
  Burst work(192);  // about 14 MFLOP a sgemm
  std::vector<double> waits, t, message(kIdleMessageBytes / sizeof(double));
  Barrier();
  for (int r = -3; r < kIdleReps; ++r) {  // every rank, for the barrier; an odd one out waits there
    double& stamp = message[0];
    const int count = static_cast<int>(message.size());
    MPI_Request req;
    if (peer >= ranks) {
    } else if (rank % 2 == 0) {
      work.Run(gemms);
      stamp = SteadySeconds();
      MPI_Isend(message.data(), count, MPI_DOUBLE, peer, 9, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
    } else {
      const double posted = SteadySeconds();
      MPI_Irecv(message.data(), count, MPI_DOUBLE, peer, 9, MPI_COMM_WORLD, &req);
      WaitAsRuntime(req, ranks);
      if (r >= 0) {
        t.push_back(SteadySeconds() - stamp);
        waits.push_back(stamp - posted);
      }
    }
    Barrier();
  }
  if (t.empty()) return {};
  return {Median(waits), Median(t)};
}

// What the runtime spends to run one op besides its kernel: a message to another stream thread
// and its wake-up (actor/stream.cpp: a queue under a mutex and a condition variable), measured as
// half a ping-pong between two threads, while every rank does the same.
double DispatchSeconds() {
  std::mutex mu;
  std::condition_variable cv;
  int turn = 0;
  constexpr int kHops = 2000;
  std::thread peer([&] {
    for (int i = 0; i < kHops; ++i) {
      std::unique_lock<std::mutex> lock(mu);
      cv.wait(lock, [&] { return turn == 1; });
      turn = 0;
      cv.notify_all();
    }
  });
  Barrier();
  double t0 = MPI_Wtime();
  for (int i = 0; i < kHops; ++i) {
    std::unique_lock<std::mutex> lock(mu);
    turn = 1;
    cv.notify_all();
    cv.wait(lock, [&] { return turn == 0; });
  }
  double t = MPI_Wtime() - t0;
  peer.join();
  return t / (2.0 * kHops);
}

double AllReduceSeconds() {
  std::vector<float> in(static_cast<size_t>(kBandwidthFloats), 1.0f), out(in.size());
  std::vector<double> t;
  for (int r = -2; r < kBandwidthReps; ++r) {
    Barrier();
    double t0 = MPI_Wtime();
    MPI_Request req;
    MPI_Iallreduce(in.data(), out.data(), static_cast<int>(in.size()), MPI_FLOAT, MPI_SUM, MPI_COMM_WORLD, &req);
    WaitDriving(req);
    if (r >= 0) t.push_back(MPI_Wtime() - t0);
  }
  return Median(t);
}

// cluster.shared_allreduce: the runtime's float32 sum all-reduce through memory the ranks share
// (actor/comm.h), over every rank, its inputs lying in the window as a gradient bucket's do
// (Communicator::InputBuffer, AwaitInputBuffer before each act as the runtime's producers call
// it). `latency`: as BusyCollectiveSeconds measures MPI's, a burst of compute then 8 bytes, waited
// for as the runtime waits; `seconds`: kBandwidthFloats with every rank polling without a pause,
// and `driven` 8 bytes the same way. `used`: every act went through shared memory (false where the
// ranks share no node, or the window could not be made).
struct Shared {
  double latency = 0, driven = 0, seconds = 0;
  bool used = false;
};

Result<Shared> SharedAllReduce(actor::Communicator& comm, int ranks) {
  std::vector<int> all(static_cast<size_t>(ranks));
  for (int r = 0; r < ranks; ++r) all[static_cast<size_t>(r)] = r;
  const int64_t bytes = kBandwidthFloats * static_cast<int64_t>(sizeof(float));
  RETURN_IF_ERROR(comm.Prepare({all}, {bytes}));
  const int64_t acts_before = comm.buffered_acts();
  int64_t acts = 0;
  const boxing::Task t{.op = boxing::Op::kAllReduce, .rank = comm.rank(), .in = {0}, .out = 1, .group = all, .collective = 0};
  const std::shared_ptr<Storage> slot = comm.InputBuffer(0, bytes);  // null without a window: MPI's
  const Tensor big = slot ? Tensor(DType::kF32, Shape{kBandwidthFloats}, slot) : Tensor::Full(Shape{kBandwidthFloats}, 1);
  for (int64_t e = 0; e < kBandwidthFloats; ++e) big.data<float>()[e] = 1;
  const Tensor small(DType::kF32, Shape{2}, big.storage(), 0);  // the first 2 of the same ones, in place as well
  const Tensor small_sum = Tensor::Full(Shape{2}, 0), big_sum = Tensor::Full(Shape{kBandwidthFloats}, 0);
  auto run = [&](const Tensor& x, const Tensor& y, bool as_runtime) -> Status {
    RETURN_IF_ERROR(comm.AwaitInputBuffer(0));
    ASSIGN_OR_RETURN(actor::CommHandle h, comm.Start(t, {x}, {y}));
    ++acts;
    Status failed = Status::Ok();
    auto done = [&] {
      Result<std::vector<actor::CommHandle>> got = comm.Poll();
      if (!got.ok()) failed = got.status();
      if (!got.ok()) return true;
      return std::any_of(got->begin(), got->end(), [&](actor::CommHandle c) { return c.id == h.id; });
    };
    if (as_runtime) {
      actor::WaitAsRuntime(done, ranks);
    } else {
      while (!done()) sched_yield();  // as WaitDriving: a rank sharing the core gets its turn
    }
    return failed;
  };
  // The slowest rank's median over `reps` all-reduces of x into y, every rank polling without a pause.
  auto driven = [&](const Tensor& x, const Tensor& y, int reps) -> Result<double> {
    std::vector<double> t;
    for (int r = -2; r < reps; ++r) {
      Barrier();
      const double t0 = MPI_Wtime();
      RETURN_IF_ERROR(run(x, y, false));
      if (r >= 0) t.push_back(MPI_Wtime() - t0);
    }
    return AllReduce(Median(t), MPI_MAX);
  };
  Shared s;
  ASSIGN_OR_RETURN(s.latency, BusyCollectiveSeconds([&] { return run(small, small_sum, true); }));
  ASSIGN_OR_RETURN(s.driven, driven(small, small_sum, kLatencyReps));
  ASSIGN_OR_RETURN(s.seconds, driven(big, big_sum, kBandwidthReps));
  if (big_sum.data<float>()[0] != static_cast<float>(ranks))
    return Status::Runtime("[env] the shared-memory all-reduce summed to " + std::to_string(big_sum.data<float>()[0]));
  s.used = AllReduce(comm.buffered_acts() - acts_before == acts ? 1 : 0, MPI_MIN) > 0;
  RETURN_IF_ERROR(comm.Prepare({all}));  // frees the window
  return s;
}

struct Figures {
  double gemm_flops[std::size(kGemmSizes)] = {};  // per rank, the slowest rank's median
  double flops = 0;
  double latency = 0;        // s, an 8-byte all-reduce, every rank driving it (WaitDriving)
  double runtime_latency = 0;  // s, a collective after a burst of compute, as the runtime waits
  double runtime_message = 0;  // s, as the runtime waits for a point-to-point message
  double idle_message = 0;     // s, a 64 KiB one to a rank that has waited a while (kLongWaitGemms)
  double idle_wait = 0;        // s, how long it had waited
  double quick_message = 0;    // s, the same to a rank that has waited less (kShortWaitGemms)
  double quick_wait = 0;
  double p2p_latency = 0;      // s, idle_message less its bytes at `bandwidth`
  double p2p_quick = 0;        // s, quick_message less the same
  int busy_n = 0;              // the GEMM size busy_speedup was measured at
  std::vector<double> busy_speedup;
  double dispatch = 0;       // s per op, the runtime's hand-off between threads
  double stream_element = 0, special_element = 0;  // s per element, the slowest rank's median
  double allreduce_s = 0;    // the 4 MiB all-reduce
  double wire_bytes = 0;     // what boxing::Price charges each rank for it
  int collectives = 1;
  double bandwidth = 0;      // bytes/s per rank
  Shared shared;             // the all-reduce through shared memory
  double shared_bandwidth = 0;  // bytes it reads per second per rank (ranks x the tensor's bytes)
};

Result<Figures> Measure(int ranks, actor::Communicator& comm) {
  Figures f;
  int rank = 0;
  MPI_Comm_rank(MPI_COMM_WORLD, &rank);
  for (size_t i = 0; i < std::size(kGemmSizes); ++i) {
    const int n = kGemmSizes[i];
    ASSIGN_OR_RETURN(double s, GemmSeconds(n));
    f.gemm_flops[i] = 2.0 * n * n * n / AllReduce(s, MPI_MAX);
    if (f.gemm_flops[i] > f.flops) f.busy_n = n;
    f.flops = std::max(f.flops, f.gemm_flops[i]);
  }
  ASSIGN_OR_RETURN(double stream, ElementSeconds(OpKind::kAdd));
  f.stream_element = AllReduce(stream, MPI_MAX);
  ASSIGN_OR_RETURN(double special, ElementSeconds(OpKind::kGelu));
  f.special_element = AllReduce(special, MPI_MAX);
  f.busy_speedup = BusySpeedup(f.busy_n, rank, ranks);
  f.latency = AllReduce(LatencySeconds(), MPI_MAX);
  ASSIGN_OR_RETURN(f.runtime_latency, BusyMpiCollectiveSeconds(ranks));  // the same on every rank
  f.dispatch = AllReduce(DispatchSeconds(), MPI_MAX);
  f.runtime_message = AllReduce(RuntimeMessageSeconds(rank, ranks), MPI_MAX);
  const IdleMessage quick = IdleMessageAfter(rank, ranks, kShortWaitGemms);
  const IdleMessage idle = IdleMessageAfter(rank, ranks, kLongWaitGemms);
  f.quick_wait = AllReduce(quick.wait, MPI_MAX);
  f.quick_message = AllReduce(quick.seconds, MPI_MAX);
  f.idle_wait = AllReduce(idle.wait, MPI_MAX);
  f.idle_message = AllReduce(idle.seconds, MPI_MAX);
  f.allreduce_s = AllReduce(AllReduceSeconds(), MPI_MAX);
  ASSIGN_OR_RETURN(f.shared, SharedAllReduce(comm, ranks));
  const double read = static_cast<double>(ranks) * kBandwidthFloats * static_cast<double>(sizeof(float));
  f.shared_bandwidth = read / (f.shared.seconds > f.shared.driven ? f.shared.seconds - f.shared.driven : f.shared.seconds);
  const sbp::Placement all = sbp::Placement::Range(DeviceType::kCpu, 0, ranks);
  boxing::Estimate e = boxing::Price(boxing::Request{Shape{kBandwidthFloats}, DType::kF32, all,
                                                     sbp::NdSbp{sbp::Sbp::P()}, all, sbp::NdSbp{sbp::Sbp::B()}});
  if (e.strategy != "all-reduce" || !(e.bytes_per_rank > 0) || !std::isfinite(e.bytes_per_rank)) {
    return Status::Runtime("[env] the cost model prices P -> B on " + std::to_string(ranks) + " ranks as '" +
                           e.strategy + "', not one all-reduce");
  }
  f.wire_bytes = e.bytes_per_rank;
  f.collectives = std::max(1, e.collectives);
  double moving = f.allreduce_s - f.collectives * f.latency;
  f.bandwidth = f.wire_bytes / (moving > 0 ? moving : f.allreduce_s);
  // p2p_latency: what the message took beyond its bytes at that bandwidth.
  f.p2p_latency = std::max(0.1 * f.idle_message, f.idle_message - kIdleMessageBytes / f.bandwidth);
  f.p2p_quick = std::max(0.1 * f.quick_message, f.quick_message - kIdleMessageBytes / f.bandwidth);
  return f;
}

// Each figure's median over rounds of Measure (busy_speedup element by element, then made not
// increasing again, as BusySpeedup makes it); what rounds share (the sizes, the wire) from the first.
Figures MedianFigures(const std::vector<Figures>& rounds) {
  Figures m = rounds.front();
  auto median = [&](auto field) {
    std::vector<double> v;
    for (const Figures& f : rounds) v.push_back(field(f));
    return Median(v);
  };
  for (size_t i = 0; i < std::size(kGemmSizes); ++i) m.gemm_flops[i] = median([&](const Figures& f) { return f.gemm_flops[i]; });
  m.flops = median([](const Figures& f) { return f.flops; });
  m.latency = median([](const Figures& f) { return f.latency; });
  m.runtime_latency = median([](const Figures& f) { return f.runtime_latency; });
  m.runtime_message = median([](const Figures& f) { return f.runtime_message; });
  m.idle_message = median([](const Figures& f) { return f.idle_message; });
  m.p2p_latency = median([](const Figures& f) { return f.p2p_latency; });
  m.idle_wait = median([](const Figures& f) { return f.idle_wait; });
  m.quick_message = median([](const Figures& f) { return f.quick_message; });
  m.quick_wait = median([](const Figures& f) { return f.quick_wait; });
  m.p2p_quick = median([](const Figures& f) { return f.p2p_quick; });
  m.dispatch = median([](const Figures& f) { return f.dispatch; });
  m.stream_element = median([](const Figures& f) { return f.stream_element; });
  m.special_element = median([](const Figures& f) { return f.special_element; });
  m.allreduce_s = median([](const Figures& f) { return f.allreduce_s; });
  m.bandwidth = median([](const Figures& f) { return f.bandwidth; });
  m.shared.latency = median([](const Figures& f) { return f.shared.latency; });
  m.shared.driven = median([](const Figures& f) { return f.shared.driven; });
  m.shared.seconds = median([](const Figures& f) { return f.shared.seconds; });
  m.shared_bandwidth = median([](const Figures& f) { return f.shared_bandwidth; });
  for (const Figures& f : rounds) m.shared.used = m.shared.used && f.shared.used;
  for (size_t b = m.busy_speedup.size(); b-- > 0;) {
    m.busy_speedup[b] = median([&](const Figures& f) { return f.busy_speedup[b]; });
    if (b + 1 < m.busy_speedup.size()) m.busy_speedup[b] = std::max(m.busy_speedup[b], m.busy_speedup[b + 1]);
  }
  return m;
}

// ---- Output ---------------------------------------------------------------------------------

std::string Num(double x) {
  char b[32];
  std::snprintf(b, sizeof b, "%.1e", x);
  return b;
}

std::string Quoted(const std::string& s) {
  std::string q = "\"";
  for (char c : s) q += c == '"' || c == '\\' ? std::string("\\") + c : std::string(1, c);
  return q + "\"";
}

std::string Section(const Host& h, const Figures& f, int ranks, int threads, int repeats) {
  char mem[32];
  std::snprintf(mem, sizeof mem, "%.1f", std::max(0.1, std::round(h.mem_total_gib / ranks * 10) / 10));
  std::ostringstream o;
  auto line = [&](const std::string& text, const std::string& comment) {
    o << text;
    if (!comment.empty()) o << std::string(text.size() < 48 ? 48 - text.size() : 1, ' ') << "# " << comment;
    o << "\n";
  };
  o << "# Measured by `flowrun env --ranks " << ranks << (repeats > 1 ? " --repeats " + std::to_string(repeats) : "")
    << "`: " << ranks << " ranks at once, " << threads << " kernel thread(s) each"
    << (repeats > 1 ? ", each figure the median of " + std::to_string(repeats) + " rounds" : "") << ".\n";
  line("cluster:", "");
  line("  nodes: 1", "");
  line("  devices_per_node: " + std::to_string(ranks), "the ranks measured");
  line("  memory_gib: " + std::string(mem), "per device: MemTotal / ranks");
  line("  flops: " + Num(f.flops), "dense f32 GEMM FLOP/s per rank, all ranks at once");
  line("  # One machine: inter = intra (no second node to measure).", "");
  line("  bandwidth: {intra: " + Num(f.bandwidth) + ", inter: " + Num(f.bandwidth) + "}", "bytes/s per rank");
  const double round = f.runtime_latency / boxing::CollectiveRounds(ranks);
  line("  latency: {intra: " + Num(round) + ", inter: " + Num(round) + "}",
       "seconds per collective round (log2 of its ranks), amid compute, as the runtime waits");
  line("  p2p_latency: " + Num(f.p2p_latency), "seconds per point-to-point message to a waiting rank");
  if (f.idle_wait > 1.5 * f.quick_wait) {  // two waits apart (as written, two significant digits)
    line("  p2p_wake: [[" + Num(f.quick_wait) + ", " + Num(f.p2p_quick) + "], [" + Num(f.idle_wait) + ", " +
             Num(f.p2p_latency) + "]]",
         "[receiver's wait, latency]: the later, the longer");
  }
  if (f.shared.used) {
    line("  shared_allreduce: {latency: " + Num(f.shared.latency) + ", bandwidth: " + Num(f.shared_bandwidth) + "}",
         "float32 sum all-reduce through shared memory: seconds, amid compute; bytes read/s per rank");
  }
  line("  op_overhead: " + Num(f.dispatch), "seconds per op run, besides its kernel");
  line("  element_seconds: {stream: " + Num(f.stream_element) + ", special: " + Num(f.special_element) + "}",
       "per element an op reads and writes: Add, Gelu");
  std::string speedup;
  for (double x : f.busy_speedup) {
    char b[16];
    std::snprintf(b, sizeof b, "%.2f", x);
    speedup += (speedup.empty() ? "" : ", ") + std::string(b);
  }
  line("  busy_speedup: [" + speedup + "]", "per-rank GEMM speed, 1.." + std::to_string(ranks) + " ranks busy");
  line("  measured: " + Quoted("flowrun env: " + std::to_string(ranks) + " ranks on " + h.name + " (" +
                              std::to_string(h.cores) + " cores, " + h.cpu + "), " +
                              (repeats > 1 ? "median of " + std::to_string(repeats) + " rounds, " : "") + h.date),
       "");
  return o.str();
}

void Summary(const Host& h, const Figures& f, int ranks, int threads, int repeats) {
  char b[512];
  std::cerr << "[env] " << ranks << " ranks on " << h.name << " (" << h.cores << " cores, " << h.cpu << "), "
            << threads << " kernel thread(s) per rank, all measuring at once"
            << (repeats > 1 ? "; each figure the median of " + std::to_string(repeats) + " rounds" : "") << "\n";
  std::cerr << "[env] f32 GEMM per rank (median of " << kGemmReps << " blocks of " << kGemmsPerBlock
            << ", each until the slowest rank is done):";
  for (size_t i = 0; i < std::size(kGemmSizes); ++i) {
    std::snprintf(b, sizeof b, " %d^3 %.2f GFLOP/s", kGemmSizes[i], f.gemm_flops[i] / 1e9);
    std::cerr << b << (i + 1 < std::size(kGemmSizes) ? "," : "\n");
  }
  std::snprintf(b, sizeof b, "[env] all-reduce of 8 B: %.2f us driven, %.2f us after a burst of compute as the runtime waits (beyond the burst)\n",
                f.latency * 1e6, f.runtime_latency * 1e6);
  std::cerr << b;
  std::snprintf(b, sizeof b,
                "[env] point-to-point message as the runtime waits: %.2f us ping-pong (8 B); 64 KiB to a rank that waited "
                "%.0f us: %.2f us, %.0f us: %.2f us\n",
                f.runtime_message * 1e6, f.quick_wait * 1e6, f.quick_message * 1e6, f.idle_wait * 1e6, f.idle_message * 1e6);
  std::cerr << b;
  std::cerr << "[env] " << f.busy_n << "^3 GEMM speed per busy rank against all " << ranks << " busy, 1.." << ranks << " busy:";
  for (double x : f.busy_speedup) {
    std::snprintf(b, sizeof b, " %.2f", x);
    std::cerr << b;
  }
  std::cerr << "\n";
  std::snprintf(b, sizeof b, "[env] op dispatch between threads: %.2f us\n", f.dispatch * 1e6);
  std::cerr << b;
  std::snprintf(b, sizeof b, "[env] flowrun's kernels per element read and written, %lld x %lld activations: Add %.3f ns, Gelu %.3f ns\n",
                static_cast<long long>(kElementRows), static_cast<long long>(kElementCols), f.stream_element * 1e9,
                f.special_element * 1e9);
  std::cerr << b;
  std::snprintf(b, sizeof b,
                "[env] all-reduce of 4 MiB: %.3f ms (median of %d); %.2f MiB per rank on the wire -> %.2f GB/s per rank\n",
                f.allreduce_s * 1e3, kBandwidthReps, f.wire_bytes / (1 << 20), f.bandwidth / 1e9);
  std::cerr << b;
  if (f.shared.used) {
    std::snprintf(b, sizeof b,
                  "[env] all-reduce through shared memory: 8 B %.2f us driven, %.2f us after a burst as the runtime waits; "
                  "4 MiB %.3f ms, %.2f GB/s read per rank\n",
                  f.shared.driven * 1e6, f.shared.latency * 1e6, f.shared.seconds * 1e3, f.shared_bandwidth / 1e9);
  } else {
    std::snprintf(b, sizeof b, "[env] all-reduce through shared memory: not available here (the ranks share no node, or no shared-memory window could be made)\n");
  }
  std::cerr << b;
  std::snprintf(b, sizeof b, "[env] memory: %.1f GiB MemTotal / %d ranks\n", h.mem_total_gib, ranks);
  std::cerr << b;
}

// ---- GPUs (--device cuda) ---------------------------------------------------------------------

// Seconds per all-reduce of `floats` float32 over every rank's GPU, through `comm` as training
// moves gradients (NCCL, or host copies where ranks share a GPU): the median of `reps`, the slowest
// rank's.
Result<double> GpuAllReduceSeconds(actor::Communicator& comm, int64_t floats, int reps) {
  const int p = comm.size(), rank = comm.rank();
  std::vector<int> all;
  for (int r = 0; r < p; ++r) all.push_back(r);
  const boxing::Task t{.op = boxing::Op::kAllReduce, .rank = rank, .in = {0}, .out = 1, .group = all, .collective = 0};
  const Device gpu{DeviceType::kCuda, 0};
  Tensor x(DType::kF32, Shape{floats}, gpu), y(DType::kF32, Shape{floats}, gpu);
  std::vector<double> times;
  for (int r = -1; r < reps; ++r) {  // r = -1: the warm-up (NCCL connects on first use)
    Barrier();
    const auto start = std::chrono::steady_clock::now();
    ASSIGN_OR_RETURN(actor::CommHandle h, comm.Start(t, {x}, {y}));
    for (bool done = false; !done;) {
      ASSIGN_OR_RETURN(std::vector<actor::CommHandle> got, comm.Poll());
      for (const actor::CommHandle& c : got) done = done || c.id == h.id;
    }
    if (r >= 0) times.push_back(std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count());
  }
  return AllReduce(Median(times), MPI_MAX);
}

// flowrun env --device cuda: every rank on its GPU at once (Open MPI's local rank picks it, as in
// training). flops: cuBLAS SGEMM of 8192^3 (TF32 with --tf32); latency and bandwidth: all-reduces
// of 8 B and 64 MiB of device memory through the path training takes; memory: the GPU's over the
// ranks that share it.
int MeasuredGpu(const EnvArgs& a, actor::World& world, const Host& host) {
  const bool lead = world.rank == 0;
  const int p = world.size;
  const char* local = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  Result<int> ordinal = cuda::InitDevice(local ? std::atoi(local) : 0);
  Result<cuda::GpuInfo> gpu = ordinal.ok() ? cuda::Gpu() : Result<cuda::GpuInfo>(ordinal.status());
  int code = gpu.ok() ? 0 : Fail(gpu.status().With("[env] --device cuda: "));
  code = static_cast<int>(AllReduce(code, MPI_MAX));
  if (code) return code;
  auto fail = [&](const Status& s) {
    Fail(s.With("[env] --device cuda: "));
    world.comm->Abort(1);
    return 1;
  };
  Result<std::string> path = actor::UseDeviceCollectives(world, DeviceType::kCuda);
  if (!path.ok()) return fail(path.status());
  // The GEMM one rank at a time, after a warm-up on each: ranks that share a GPU would otherwise
  // overlap by chance, and the figure land anywhere between the GPU's and its share's.
  constexpr int kN = 8192, kGemmRuns = 10;
  Result<double> gemm = cuda::GemmSeconds(kN, a.tf32, 1);
  for (int r = 0; r < p; ++r) {
    Barrier();
    if (r == world.rank && gemm.ok()) gemm = cuda::GemmSeconds(kN, a.tf32, kGemmRuns);
  }
  if (!gemm.ok()) return fail(gemm.status());  // aborts every rank
  const double gpu_flops = 2.0 * kN * kN * kN / AllReduce(*gemm, MPI_MAX);
  std::vector<int> all;
  for (int r = 0; r < p; ++r) all.push_back(r);
  if (Status s = world.comm->Prepare({all}); !s.ok()) return fail(s);
  constexpr int64_t kSmall = 2, kLarge = 16 << 20;
  Result<double> small = GpuAllReduceSeconds(*world.comm, kSmall, 50);
  if (!small.ok()) return fail(small.status());
  Result<double> large = GpuAllReduceSeconds(*world.comm, kLarge, 10);
  if (!large.ok()) return fail(large.status());
  if (!lead) return 0;
  const double wire = 2.0 * (p - 1) / p * static_cast<double>(kLarge) * sizeof(float);
  const double moving = *large - *small;
  const double bandwidth = wire / (moving > 0 ? moving : *large);
  const double round = *small / boxing::CollectiveRounds(p);
  const int sharing = std::max(1, world.gpu_sharers);  // by PCI bus id (UseDeviceCollectives)
  const double memory_gib = std::floor(gpu->memory_bytes / (1 << 30) / sharing * 10) / 10;
  const double flops = gpu_flops / sharing;  // per rank, as memory
  char b[256];
  std::snprintf(b, sizeof b, "[env] %d ranks on %s, each on a %s (%.1f GiB); %s\n", p, host.name.c_str(), gpu->name.c_str(),
                gpu->memory_bytes / (1 << 30), path->c_str());
  std::cerr << b;
  std::snprintf(b, sizeof b, "[env] SGEMM %d^3 (%s): %.1f TFLOP/s per GPU, the slowest's median of %d, one rank at a time\n", kN,
                a.tf32 ? "TF32 allowed" : "FP32", gpu_flops / 1e12, kGemmRuns);
  std::cerr << b;
  std::snprintf(b, sizeof b, "[env] all-reduce of 8 B: %.2f us; of 64 MiB: %.3f ms -> %.2f GB/s per rank on the wire\n",
                *small * 1e6, *large * 1e3, bandwidth / 1e9);
  std::cerr << b;
  std::ostringstream o;
  o << "# Measured by `flowrun env --device cuda" << (a.tf32 ? " --tf32" : "") << " --ranks " << p << "`: " << p
    << " ranks at once, each on a GPU of this node.\n";
  o << "cluster:\n  nodes: 1\n  devices_per_node: " << p << "\n";
  o << "  memory_gib: " << memory_gib << "    # per rank: the GPU's memory over the ranks that share it\n";
  o << "  flops: " << Num(flops) << "    # per rank: cuBLAS SGEMM FLOP/s of its GPU" << (a.tf32 ? " (TF32 allowed)" : "")
    << " over the ranks that share it\n";
  o << "  # One node: inter = intra (no second node to measure).\n";
  o << "  bandwidth: {intra: " << Num(bandwidth) << ", inter: " << Num(bandwidth) << "}    # bytes/s per rank\n";
  o << "  latency: {intra: " << Num(round) << ", inter: " << Num(round) << "}    # seconds per collective round\n";
  o << "  p2p_latency: " << Num(*small) << "\n";
  o << "  measured: " << Quoted("flowrun env --device cuda: " + std::to_string(p) + " ranks on " + host.name + " (" +
                                gpu->name + "), " + *path + ", " + host.date)
    << "\n";
  if (a.out.empty()) {
    std::cout << o.str() << std::flush;
    return 0;
  }
  if (Status s = WriteFileAtomically(a.out, o.str()); !s.ok()) return Fail(s.With("[env] --out: "));
  std::cerr << "[env] wrote the cluster: section to " << a.out << std::endl;
  return 0;
}

int Measured(const EnvArgs& a, int* argc, char*** argv) {
  const std::string pinned = PinUnboundRank();  // as `flowrun train` runs its ranks
  // A rank that died or hung would hold the others in MPI_Init or a collective for good, and an
  // mpirun started by hand has no deadline of its own: every rank gives up after --timeout. Made
  // before the world, so that it outlives MPI_Finalize (the world's destructor).
  actor::Communicator* comm = nullptr;
  const char* rank_env = std::getenv("OMPI_COMM_WORLD_RANK");
  const int rank = rank_env ? std::atoi(rank_env) : 0;
  Watchdog dog(actor::GiveUpWaiting("env", "--timeout", &comm, &rank));
  dog.Arm("measuring with the other ranks", a.Deadline());
  auto world = actor::JoinWorld(argc, argv);
  if (!world.ok()) return Fail(world.status());
  comm = world->comm.get();
  const bool lead = world->rank == 0;
  if (lead && !pinned.empty()) std::cerr << "[env] " << pinned << "\n";
  const int p = world->size;
  if (a.ranks_given && p != a.ranks) {
    if (lead) {
      Fail(Status::Invalid("[env] the job has " + std::to_string(p) + " rank(s) but --ranks is " +
                           std::to_string(a.ranks) + " (mpirun -n " + std::to_string(a.ranks) + ")"));
    }
    return 2;
  }
  if (p < 2) {
    if (lead) Fail(Status::Invalid("[env] measuring collectives needs at least 2 ranks; the job has 1 (mpirun -n 2)"));
    return 2;
  }
  MPI_Comm_set_errhandler(MPI_COMM_WORLD, MPI_ERRORS_ARE_FATAL);
  if (!std::getenv("OMP_NUM_THREADS")) omp_set_num_threads(1);
  const int threads = omp_get_max_threads();

  // Rank 0's set-up (host facts, the output file) fails before the measurement, on every rank alike.
  Result<Host> host = Host{};
  int code = 0;
  if (lead) {
    host = ReadHost();
    if (!host.ok()) {
      code = Fail(host.status());
    } else if (!a.out.empty()) {
      if (Status s = CheckWritable(a.out); !s.ok()) code = Fail(s);
    }
  }
  code = static_cast<int>(AllReduce(code, MPI_MAX));
  if (code) return code;
  if (a.device == "cuda") return MeasuredGpu(a, *world, *host);

  std::vector<Figures> rounds;
  for (int r = 0; r < a.repeats; ++r) {
    auto f = Measure(p, *world->comm);
    if (!f.ok()) {
      Fail(f.status());
      world->comm->Abort(1);
    }
    rounds.push_back(*f);
  }
  if (!lead) return 0;
  const Figures f = MedianFigures(rounds);
  Summary(*host, f, p, threads, a.repeats);
  std::string section = Section(*host, f, p, threads, a.repeats);
  if (a.out.empty()) {
    std::cout << section << std::flush;
    return 0;
  }
  if (Status s = WriteFileAtomically(a.out, section); !s.ok()) return Fail(s.With("[env] --out: "));
  std::cerr << "[env] wrote the cluster: section to " << a.out << std::endl;
  return 0;
}

}  // namespace

int RunEnv(const EnvArgs& a, int* argc, char*** argv) {
  if (a.tf32 && a.device != "cuda") return Fail(Status::Invalid("[env] --tf32 is for GPU GEMMs: give --device cuda too"));
  if (a.ranks_given && a.ranks < 2) {
    return Fail(Status::Invalid("[env] --ranks must be at least 2 (got " + std::to_string(a.ranks) +
                                "): latency and bandwidth are measured between ranks"));
  }
  if (std::getenv("OMPI_COMM_WORLD_SIZE")) return Measured(a, argc, argv);
  if (a.launched) {
    return Fail(Status::Invalid("[env] started by mpirun but OMPI_COMM_WORLD_SIZE is not set: flowrun env needs "
                                "Open MPI's mpirun (openmpi-bin) first on PATH"));
  }
  return Relaunch(a);
}

}  // namespace fr
