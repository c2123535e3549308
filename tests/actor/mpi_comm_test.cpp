// The MPI communicator against the boxing simulator, under mpirun with 2, 3 and 4 ranks
// (DESIGN.md §6, rungs 3 and 4). Every rank plans the same transitions with boxing::Box, builds
// the same integer-valued src pieces and simulates the plan locally for the expected dst pieces.
// Then it runs its own tasks for real: local ops with the simulate.h helpers, the others through
// the Communicator, each as soon as its inputs are ready (collectives in plan order), as the
// actor runtime will. Its dst pieces must equal the simulator's exactly.
//
// With FLOWRUN_TEST_COMM=groups the same tests run the device communicator (comm.h:
// WithDeviceGroups) over MPI's host groups, with CPU tensors as its device's: every collective
// then takes the device path (packing parts into a scratch buffer, padding uneven ones, buckets)
// that NCCL's groups take on GPUs.
#include "actor/comm.h"

#include <gtest/gtest.h>
#include <mpi.h>

#include <algorithm>
#include <chrono>
#include <cstdlib>
#include <cstdio>
#include <map>
#include <random>
#include <set>
#include <thread>

#include "../boxing/pieces.h"
#include "boxing/simulate.h"

namespace fr::actor {
namespace {

using boxing::Op;
using boxing::Plan;
using boxing::Request;
using boxing::Task;
using sbp::NdSbp;
using sbp::Placement;
using sbp::Reduce;
using sbp::Sbp;
using boxing::testing::NdSbps;

Communicator* g_comm = nullptr;  // the world communicator, made in main
bool g_groups = false;           // g_comm is the device communicator over host groups

// The shared-memory input buffers are the MPI communicator's; the device communicator runs every
// collective of its device's tensors on its groups instead, and offers none.
#define SKIP_WITHOUT_INPUT_BUFFERS() \
  if (g_groups) GTEST_SKIP() << "the device communicator has no shared-memory input buffers (MPI's own)"

const Sbp kS0 = Sbp::S(0), kS1 = Sbp::S(1), kB = Sbp::B(), kP = Sbp::P(), kPMax = Sbp::P(Reduce::kMax);

Placement Ranks(std::vector<int> r) {
  const int n = static_cast<int>(r.size());
  return Placement(DeviceType::kCpu, std::move(r), Shape{n});
}
Placement Mesh2x2() { return Placement(DeviceType::kCpu, {0, 1, 2, 3}, Shape{2, 2}); }

// Every (src, dst) pair of nd-SBPs built from `each`, on every shape, that fits its placements.
std::vector<Request> Pairs(const std::vector<Shape>& shapes, const Placement& sp, const Placement& dp,
                           const std::vector<Sbp>& each, DType dt = DType::kF32) {
  std::vector<Request> rs;
  for (const Shape& s : shapes)
    for (const NdSbp& a : NdSbps(each, sp.ndim()))
      for (const NdSbp& b : NdSbps(each, dp.ndim())) {
        Request r{s, dt, sp, a, dp, b};
        if (sbp::Check(s, a, sp).ok() && sbp::Check(s, b, dp).ok()) rs.push_back(r);
      }
  return rs;
}

std::string Describe(const Request& r) {
  return r.logical.ToString() + " " + std::string(Name(r.dtype)) + " " + r.src.ToString() + " on " +
         r.src_place.ToString() + " -> " + r.dst.ToString() + " on " + r.dst_place.ToString();
}

// Runs this rank's tasks of `plan` and returns every buffer's value (undefined off this rank).
// Counts the movements it starts per op in `started`.
Result<std::vector<Tensor>> Execute(Communicator& comm, const Plan& plan, const std::vector<Tensor>& src,
                                    std::map<Op, int>& started) {
  const int me = comm.rank();
  std::vector<Tensor> val(plan.buffers.size());
  std::vector<bool> ready(plan.buffers.size(), false);
  for (size_t i = 0; i < src.size(); ++i) {
    const size_t b = static_cast<size_t>(plan.src[i]);
    if (plan.buffers[b].rank == me) {
      val[b] = src[i].Clone();
      ready[b] = true;
    }
  }
  std::vector<const Task*> mine;
  for (const Task& t : plan.tasks)
    if (t.rank == me) mine.push_back(&t);
  enum class State { kWaiting, kInFlight, kDone };
  std::vector<State> state(mine.size(), State::kWaiting);
  std::vector<CommHandle> handle(mine.size());
  size_t done = 0;
  auto last_progress = std::chrono::steady_clock::now();
  while (done < mine.size()) {
    bool progress = false, collective_waits = false;
    ASSIGN_OR_RETURN(std::vector<CommHandle> finished, comm.Poll());
    for (CommHandle f : finished) {
      size_t i = 0;
      while (i < mine.size() && !(state[i] == State::kInFlight && handle[i].id == f.id)) ++i;
      if (i == mine.size()) return Status::Runtime("Poll reported handle " + std::to_string(f.id) + ", not in flight");
      if (mine[i]->op != Op::kSend) ready[static_cast<size_t>(mine[i]->out)] = true;
      state[i] = State::kDone;
      ++done;
      progress = true;
    }
    for (size_t i = 0; i < mine.size(); ++i) {
      const Task& t = *mine[i];
      const size_t out = static_cast<size_t>(t.out);
      if (state[i] != State::kWaiting) continue;
      const bool collective = t.collective >= 0;
      if (collective && collective_waits) continue;  // collectives start in plan order
      bool inputs = true;
      for (int b : t.in) inputs = inputs && ready[static_cast<size_t>(b)];
      if (!inputs) {
        collective_waits = collective_waits || collective;
        continue;
      }
      auto in = [&](size_t k) { return val[static_cast<size_t>(t.in[k])]; };
      const Shape& shape = t.out >= 0 ? plan.buffers[out].shape : Shape{};
      bool local = true;
      switch (t.op) {
        case Op::kCopy: val[out] = in(0).Clone(); break;
        case Op::kSlice: val[out] = boxing::SliceOf(in(0), t.regions[0]); break;
        case Op::kZero: val[out] = Tensor(plan.dtype, shape); break;
        case Op::kAssemble:
          val[out] = Tensor(plan.dtype, shape);
          for (size_t k = 0; k < t.in.size(); ++k) boxing::WriteRegion(val[out], t.regions[k], in(k));
          break;
        case Op::kReduce:
          val[out] = in(0).Clone();
          for (size_t k = 1; k < t.in.size(); ++k) boxing::ReduceInto(val[out], in(k), t.reduce);
          break;
        default: {
          local = false;
          std::vector<Tensor> ins;
          for (size_t k = 0; k < t.in.size(); ++k) ins.push_back(in(k));
          if (t.op != Op::kSend) val[out] = Tensor(plan.dtype, shape);
          ASSIGN_OR_RETURN(handle[i], comm.Start(t, std::move(ins), t.op == Op::kSend ? std::vector<Tensor>{} : std::vector<Tensor>{val[out]}));
          state[i] = State::kInFlight;
          ++started[t.op];
        }
      }
      if (local) {
        ready[out] = true;
        state[i] = State::kDone;
        ++done;
      }
      progress = true;
    }
    const auto now = std::chrono::steady_clock::now();
    if (progress) {
      last_progress = now;
    } else if (now - last_progress > std::chrono::seconds(60)) {
      return Status::Runtime("[actor] rank " + std::to_string(me) + ": no progress for 60 s");
    } else {
      std::this_thread::yield();  // ranks may outnumber cores
    }
  }
  return val;
}

// The distinct collective groups of a plan, in plan order: what every rank prepares.
std::vector<std::vector<int>> Groups(const Plan& plan) {
  std::vector<std::vector<int>> gs;
  std::set<int> seen;
  for (const Task& t : plan.tasks)
    if (t.collective >= 0 && seen.insert(t.collective).second) gs.push_back(t.group);
  return gs;
}

// The plan's sends, in plan order: what every rank prepares links for.
std::vector<Link> Links(const Plan& plan) {
  std::vector<Link> ls;
  for (const Task& t : plan.tasks)
    if (t.op == Op::kSend) ls.push_back({t.rank, t.peer, t.tag});
  return ls;
}

// Runs every request on every rank; a rank fails on its own wrong pieces, and every rank fails
// when any rank did (the failures are summed over the world).
void RunAll(const std::vector<Request>& rs, const char* what) {
  Communicator& comm = *g_comm;
  const auto start = std::chrono::steady_clock::now();
  int failed = 0, pieces = 0;
  std::map<Op, int> started;
  for (size_t c = 0; c < rs.size(); ++c) {
    const Request& r = rs[c];
    Result<Plan> plan = boxing::Box(r);
    if (!plan.ok()) {  // the same on every rank
      ADD_FAILURE() << Describe(r) << ": " << plan.status().message();
      ++failed;
      continue;
    }
    std::mt19937 rng(static_cast<unsigned>(1000 + c));
    const Tensor logical = boxing::testing::Logical(r.logical, r.dtype, rng);
    const std::vector<Tensor> src = boxing::testing::MakePieces(logical, r.src, r.src_place, rng);
    Result<std::vector<Tensor>> want = boxing::Simulate(*plan, src);
    if (!want.ok()) {
      ADD_FAILURE() << Describe(r) << ": simulate: " << want.status().message();
      ++failed;
      continue;
    }
    Status s = comm.Prepare(Groups(*plan));
    if (s.ok()) s = comm.PrepareLinks(Links(*plan));
    Result<std::vector<Tensor>> got = s.ok() ? Execute(comm, *plan, src, started) : Result<std::vector<Tensor>>(s);
    if (!got.ok()) {  // the other ranks may be waiting on this one: end the job
      std::fprintf(stderr, "%s (%s): %s\n", Describe(r).c_str(), plan->strategy.c_str(),
                   got.status().message().c_str());
      comm.Abort(2);
    }
    for (size_t d = 0; d < plan->dst.size(); ++d) {
      const size_t b = static_cast<size_t>(plan->dst[d]);
      if (plan->buffers[b].rank != comm.rank()) continue;
      ++pieces;
      if (!boxing::testing::Equal((*got)[b], (*want)[d]) && ++failed <= 5)
        ADD_FAILURE() << Describe(r) << " (" << plan->strategy << "): dst piece " << d << " is " << (*got)[b].ToString()
                      << ", the simulator's " << (*want)[d].ToString();
    }
  }
  int failed_all = 0;
  MPI_Allreduce(&failed, &failed_all, 1, MPI_INT, MPI_SUM, MPI_COMM_WORLD);
  const double ms = std::chrono::duration<double, std::milli>(std::chrono::steady_clock::now() - start).count();
  if (comm.rank() == 0) {
    std::string ops;
    for (const auto& [op, n] : started) ops += " " + std::string(boxing::Name(op)) + " " + std::to_string(n);
    std::printf("%s on %d ranks: %zu cases, %d dst pieces on rank 0, %d failed in all, %.0f ms; rank 0 started%s\n",
                what, comm.size(), rs.size(), pieces, failed_all, ms, ops.c_str());
  }
  EXPECT_EQ(failed_all, 0) << what;
  EXPECT_FALSE(rs.empty());
}

std::vector<int> World() {
  std::vector<int> r;
  for (int i = 0; i < g_comm->size(); ++i) r.push_back(i);
  return r;
}

// Misuse is reported, not crashed on; none of these reaches MPI. First in the file, so that no
// group is prepared yet.
TEST(MpiComm, Errors) {
  Communicator& comm = *g_comm;
  const int me = comm.rank(), other = (me + 1) % comm.size();
  Task gather{.op = Op::kAllGather, .rank = me, .in = {0}, .out = 1, .group = {other, me}, .concat_axis = 0,
              .collective = 0};
  Result<CommHandle> h = comm.Start(gather, {Tensor(DType::kF32, Shape{2, 3})}, {Tensor(DType::kF32, Shape{4, 3})});
  ASSERT_FALSE(h.ok());
  EXPECT_EQ(h.status().message(), "[actor] rank " + std::to_string(me) + ": all-gather over group {" +
                                      std::to_string(other) + "," + std::to_string(me) +
                                      "} (collective 0): group not prepared (Prepare it on every rank first)");
  h = comm.Start(gather, {Tensor(DType::kF32, Shape{2, 3})}, {Tensor(DType::kF32, Shape{6, 3})});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("does not fit output [6, 3]"), std::string::npos) << h.status().message();
  Task send{.op = Op::kSend, .rank = me, .in = {0}, .out = -1, .peer = me, .tag = 1};
  h = comm.Start(send, {Tensor(DType::kF32, Shape{2})}, {});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("send to rank " + std::to_string(me) + " tag 1: bad peer"), std::string::npos);
  Result<std::vector<CommHandle>> none = comm.Poll();  // the failed starts left nothing in flight
  ASSERT_TRUE(none.ok()) << none.status().message();
  EXPECT_TRUE(none->empty());
  EXPECT_EQ(comm.in_flight(), 0);
  Status s = comm.Prepare({{0, 0}});
  EXPECT_NE(s.message().find("a group needs distinct ranks"), std::string::npos) << s.message();
}

const std::vector<Shape> kShapes = {Shape{7, 5}, Shape{5, 3, 4}};

TEST(MpiComm, AllPairs_1nNd) {
  RunAll(Pairs(kShapes, Ranks(World()), Ranks(World()), {kS0, kS1, kB, kP, kPMax}), "AllPairs_1nNd");
}

// Element e of bucket input i on `rank`.
float BucketValue(size_t i, int64_t e, int rank) { return static_cast<float>(100 * i + e + 1000 * rank); }

// Runs movement `t` to completion.
void Complete(Communicator& comm, const Task& t, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  Result<CommHandle> h = comm.Start(t, in, out);
  ASSERT_TRUE(h.ok()) << h.status().message();
  for (bool done = false; !done;) {
    Result<std::vector<CommHandle>> got = comm.Poll();
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (CommHandle c : *got) done = done || c.id == h->id;
  }
}

// Runs bucket all-reduce `t` to completion and checks every output against the sum over ranks.
void ReduceBucket(Communicator& comm, const Task& t, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  ASSERT_NO_FATAL_FAILURE(Complete(comm, t, in, out));
  for (size_t i = 0; i < out.size(); ++i) {
    for (int64_t e = 0; e < out[i].numel(); ++e) {
      float want = 0;
      for (int r = 0; r < comm.size(); ++r) want += BucketValue(i, e, r);
      ASSERT_EQ(out[i].data<float>()[e], want) << "output " << i << " element " << e;
    }
  }
}

// A gradient bucket: one all-reduce task with several inputs, each reduced into its own output,
// in place or not, of different shapes; on every rank the sum over ranks, elementwise and exact.
TEST(MpiComm, AllReduceBucket_1nNd) {
  Communicator& comm = *g_comm;
  const int me = comm.rank();
  Task t{.op = Op::kAllReduce, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .collective = 0};
  ASSERT_TRUE(comm.Prepare({World()}).ok());
  const std::vector<Shape> shapes = {Shape{3, 4}, Shape{1}, Shape{5, 2, 2}};
  std::vector<Tensor> in, out;
  for (size_t i = 0; i < shapes.size(); ++i) {
    Tensor x(DType::kF32, shapes[i]);
    for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = BucketValue(i, e, me);
    in.push_back(x);
    out.push_back(i == 1 ? x : Tensor(DType::kF32, shapes[i]));  // input 1 in place
  }
  ReduceBucket(comm, t, in, out);
  Result<CommHandle> bad = comm.Start(t, in, {out[0], out[1]});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("3 inputs but 2 outputs"), std::string::npos) << bad.status().message();
}

// For each element of part k of p along `axis` of shape s, row-major, its index in the whole.
std::vector<int64_t> WholeIndices(const Shape& s, int axis, int p, int k) {
  int64_t outer = 1, inner = 1;
  for (int a = 0; a < s.rank(); ++a) {
    if (a < axis) outer *= s[a];
    if (a > axis) inner *= s[a];
  }
  const sbp::Range r = sbp::SplitRange(s[axis], p, k);
  std::vector<int64_t> at;
  for (int64_t o = 0; o < outer; ++o)
    for (int64_t d = r.begin; d < r.begin + r.size(); ++d)
      for (int64_t n = 0; n < inner; ++n) at.push_back((o * s[axis] + d) * inner + n);
  return at;
}

// ZeRO's gradient bucket: one reduce-scatter task with several inputs; output i is this rank's
// part of the sum over ranks of input i along the split axis. Parts uneven (7 and 5 over 2-4
// ranks) and, along axis 1, not contiguous in the input; on every rank exact.
TEST(MpiComm, ReduceScatterBucket_1nNd) {
  Communicator& comm = *g_comm;
  const int me = comm.rank(), p = comm.size();
  ASSERT_TRUE(comm.Prepare({World()}).ok());
  for (int axis : {0, 1}) {
    SCOPED_TRACE("split axis " + std::to_string(axis));
    Task t{.op = Op::kReduceScatter, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .split_axis = axis,
           .collective = 0};
    const std::vector<Shape> shapes = {Shape{7, 5}, Shape{5, 7}, Shape{4, 5, 3}};
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor x(DType::kF32, shapes[i]);
      for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = BucketValue(i, e, me);
      in.push_back(x);
      Shape part = shapes[i];
      part[axis] = sbp::SplitRange(shapes[i][axis], p, me).size();
      out.emplace_back(DType::kF32, part);
    }
    ASSERT_NO_FATAL_FAILURE(Complete(comm, t, in, out));
    for (size_t i = 0; i < shapes.size(); ++i) {
      const std::vector<int64_t> whole = WholeIndices(shapes[i], axis, p, me);
      for (size_t e = 0; e < whole.size(); ++e) {
        float want = 0;
        for (int k = 0; k < p; ++k) want += BucketValue(i, whole[e], k);
        ASSERT_EQ(out[i].data<float>()[e], want) << "output " << i << " element " << e;
      }
    }
  }
  Task t{.op = Op::kReduceScatter, .rank = me, .in = {0, 1}, .out = -1, .group = World(), .split_axis = 0,
         .collective = 0};
  Result<CommHandle> bad = comm.Start(t, {Tensor(DType::kF32, Shape{8}), Tensor(DType::kF32, Shape{8})},
                                      {Tensor(DType::kF32, Shape{8}), Tensor(DType::kF32, Shape{8})});
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("does not fit output [8]"), std::string::npos) << bad.status().message();
}

// ZeRO's parameter bucket: one all-gather task with several inputs; output i is input i's parts
// from every rank, concatenated along the concat axis. Parts uneven and, along axis 1, not
// contiguous in the output.
TEST(MpiComm, AllGatherBucket_1nNd) {
  Communicator& comm = *g_comm;
  const int me = comm.rank(), p = comm.size();
  ASSERT_TRUE(comm.Prepare({World()}).ok());
  for (int axis : {0, 1}) {
    SCOPED_TRACE("concat axis " + std::to_string(axis));
    Task t{.op = Op::kAllGather, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .concat_axis = axis,
           .collective = 0};
    const std::vector<Shape> shapes = {Shape{7, 5}, Shape{5, 7}, Shape{4, 5, 3}};  // the outputs
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Shape part = shapes[i];
      part[axis] = sbp::SplitRange(shapes[i][axis], p, me).size();
      Tensor x(DType::kF32, part);  // this rank's part holds the whole's values there
      const std::vector<int64_t> whole = WholeIndices(shapes[i], axis, p, me);
      for (size_t e = 0; e < whole.size(); ++e) x.data<float>()[e] = BucketValue(i, whole[e], 0);
      in.push_back(x);
      out.emplace_back(DType::kF32, shapes[i]);
    }
    ASSERT_NO_FATAL_FAILURE(Complete(comm, t, in, out));
    for (size_t i = 0; i < shapes.size(); ++i)
      for (int64_t e = 0; e < out[i].numel(); ++e) ASSERT_EQ(out[i].data<float>()[e], BucketValue(i, e, 0)) << i << " " << e;
  }
}

// A bucket laid out as the runtime lays gradient buckets out (actor::Runtime::LayOutBucket): its
// inputs end to end in one allocation, 64-byte aligned with zero gaps, its outputs at the same
// offsets in another; reduced over the whole span in place of a packed copy, with the same sums,
// and the gaps stay zero. Also with the outputs shifted, which must not take that path.
TEST(MpiComm, AllReduceBucketLaidOut_1nNd) {
  Communicator& comm = *g_comm;
  const int me = comm.rank();
  Task t{.op = Op::kAllReduce, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .collective = 0};
  ASSERT_TRUE(comm.Prepare({World()}).ok());
  const std::vector<Shape> shapes = {Shape{3, 5}, Shape{1}, Shape{5, 2, 2}};
  const std::vector<size_t> offsets = {0, 64, 128};  // 60, 4 and 80 bytes: gaps after the first two
  for (size_t shift : {size_t{0}, size_t{4}}) {
    SCOPED_TRACE("outputs shifted by " + std::to_string(shift) + " bytes");
    auto in_storage = std::make_shared<fr::Storage>(256, fr::Device{});
    auto out_storage = std::make_shared<fr::Storage>(256, fr::Device{});
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor x(DType::kF32, shapes[i], in_storage, offsets[i]);
      for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = BucketValue(i, e, me);
      in.push_back(x);
      out.emplace_back(DType::kF32, shapes[i], out_storage, offsets[i] + shift);
    }
    ReduceBucket(comm, t, in, out);
    std::vector<bool> used(256 / sizeof(float), false);
    for (size_t i = 0; i < shapes.size(); ++i)
      for (int64_t e = 0; e < out[i].numel(); ++e) used[(offsets[i] + shift) / sizeof(float) + static_cast<size_t>(e)] = true;
    const auto* all = static_cast<const float*>(out_storage->data());
    for (size_t k = 0; k < used.size(); ++k) {
      if (!used[k]) {
        ASSERT_EQ(all[k], 0.0f) << "gap element " << k;
      }
    }
  }
}

// Sum all-reduces of float32 prepared with shared bytes run through memory the ranks share:
// buckets (one input in place) reduced exactly, act after act, so that a rank starts the next act
// while another still reads the last; two collectives in flight at once; a bucket larger than
// the shared slot and an int64 all-reduce on the same collective still go through MPI.
TEST(MpiComm, SharedAllReduce_1nNd) {
  SKIP_WITHOUT_INPUT_BUFFERS();
  Communicator& comm = *g_comm;
  const int me = comm.rank();
  const std::vector<Shape> shapes = {Shape{3, 4}, Shape{1}, Shape{5, 2, 2}};
  const int64_t bytes = 64 + 64 + 20 * 4;  // laid out in a slot at 64-byte boundaries (boxing::BucketOffsets)
  ASSERT_TRUE(comm.Prepare({World(), World()}, {bytes, bytes}).ok());
  const int64_t buffered_before = comm.buffered_acts();
  auto bucket = [&](int act, int64_t scale) {
    std::vector<Tensor> in, out;
    for (size_t i = 0; i < shapes.size(); ++i) {
      Tensor x(DType::kF32, Shape{shapes[i].numel() * scale});
      for (int64_t e = 0; e < x.numel(); ++e) x.data<float>()[e] = BucketValue(i, e, me) + static_cast<float>(act);
      in.push_back(x);
      out.push_back(i == 1 ? x : Tensor(DType::kF32, x.shape()));
    }
    return std::make_pair(in, out);
  };
  auto check = [&](const std::vector<Tensor>& out, int act) {
    for (size_t i = 0; i < out.size(); ++i)
      for (int64_t e = 0; e < out[i].numel(); ++e) {
        float want = 0;
        for (int r = 0; r < comm.size(); ++r) want += BucketValue(i, e, r) + static_cast<float>(act);
        ASSERT_EQ(out[i].data<float>()[e], want) << "act " << act << " output " << i << " element " << e;
      }
  };
  Task t0{.op = Op::kAllReduce, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .collective = 0};
  Task t1 = t0;
  t1.collective = 1;
  for (int act = 0; act < 20; ++act) {
    auto [in, out] = bucket(act, 1);
    ASSERT_NO_FATAL_FAILURE(Complete(comm, t0, in, out));
    ASSERT_NO_FATAL_FAILURE(check(out, act));
  }
  // Both collectives in flight, started in the opposite order on odd ranks.
  auto [in0, out0] = bucket(100, 1);
  auto [in1, out1] = bucket(200, 1);
  std::vector<std::pair<const Task*, std::pair<std::vector<Tensor>, std::vector<Tensor>>>> both = {{&t0, {in0, out0}}, {&t1, {in1, out1}}};
  if (me % 2) std::swap(both[0], both[1]);
  std::set<int> waiting;
  for (auto& [t, io] : both) {
    Result<CommHandle> h = comm.Start(*t, io.first, io.second);
    ASSERT_TRUE(h.ok()) << h.status().message();
    waiting.insert(h->id);
  }
  while (!waiting.empty()) {
    Result<std::vector<CommHandle>> got = comm.Poll();
    ASSERT_TRUE(got.ok()) << got.status().message();
    for (CommHandle c : *got) waiting.erase(c.id);
  }
  ASSERT_NO_FATAL_FAILURE(check(out0, 100));
  ASSERT_NO_FATAL_FAILURE(check(out1, 200));
  EXPECT_EQ(comm.buffered_acts() - buffered_before, comm.size() > 1 ? 22 : 0);
  // Twice the slot: MPI's all-reduce, the same sums.
  auto [big_in, big_out] = bucket(7, 2);
  ASSERT_NO_FATAL_FAILURE(Complete(comm, t0, big_in, big_out));
  ASSERT_NO_FATAL_FAILURE(check(big_out, 7));
  Task ti{.op = Op::kAllReduce, .rank = me, .in = {0}, .out = 1, .group = World(), .collective = 0};
  Tensor xi(DType::kI64, Shape{4}), yi(DType::kI64, Shape{4});
  for (int64_t e = 0; e < 4; ++e) xi.data<int64_t>()[e] = e + 10 * me;
  ASSERT_NO_FATAL_FAILURE(Complete(comm, ti, {xi}, {yi}));
  for (int64_t e = 0; e < 4; ++e) EXPECT_EQ(yi.data<int64_t>()[e], comm.size() * e + 10 * (comm.size() * (comm.size() - 1) / 2));
  // One more shared act after the fallbacks: the act count stayed in step on every rank.
  auto [in2, out2] = bucket(21, 1);
  ASSERT_NO_FATAL_FAILURE(Complete(comm, t0, in2, out2));
  ASSERT_NO_FATAL_FAILURE(check(out2, 21));
  EXPECT_EQ(comm.buffered_acts() - buffered_before, comm.size() > 1 ? 23 : 0);
  // Prepared without shared bytes, the same collective goes through MPI again.
  ASSERT_TRUE(comm.Prepare({World(), World()}).ok());
  auto [in3, out3] = bucket(22, 1);
  ASSERT_NO_FATAL_FAILURE(Complete(comm, t0, in3, out3));
  ASSERT_NO_FATAL_FAILURE(check(out3, 22));
  EXPECT_EQ(comm.buffered_acts() - buffered_before, comm.size() > 1 ? 23 : 0);
}

// A bucket whose inputs lie in this member's slot (Communicator::InputBuffer, as the runtime lays
// out gradient buckets) is summed without copying them. An act completes on a member once it has
// its sums, and the member rewrites its inputs for the next act right after AwaitInputBuffer,
// which returns once every member has read them. The last member lingers before each poll, so a
// member that rewrote its inputs before the others had read them would spoil their sums.
TEST(MpiComm, SharedAllReduceOfInputsInPlace_1nNd) {
  SKIP_WITHOUT_INPUT_BUFFERS();
  Communicator& comm = *g_comm;
  const int me = comm.rank();
  const std::vector<int64_t> sizes = {1, 48, 7};  // floats
  std::vector<int64_t> bytes;
  for (int64_t n : sizes) bytes.push_back(n * 4);
  int64_t end = 0;
  const std::vector<int64_t> at = fr::boxing::BucketOffsets(bytes, &end);
  EXPECT_EQ(at, (std::vector<int64_t>{0, 64, 256}));
  EXPECT_EQ(end, 256 + 28);
  ASSERT_TRUE(comm.Prepare({World()}, {end}).ok());
  std::shared_ptr<fr::Storage> slot = comm.InputBuffer(0, end);
  if (comm.size() == 1) {
    EXPECT_EQ(slot, nullptr);  // one member: MPI's all-reduce, no window
    return;
  }
  ASSERT_NE(slot, nullptr);
  EXPECT_EQ(comm.InputBuffer(0, end + 64), nullptr) << "larger than the slot";
  std::vector<Tensor> in, out;
  for (size_t i = 0; i < sizes.size(); ++i) {
    in.emplace_back(DType::kF32, Shape{sizes[i]}, slot, static_cast<size_t>(at[i]));
    out.emplace_back(DType::kF32, Shape{sizes[i]});
  }
  Task t{.op = Op::kAllReduce, .rank = me, .in = {0, 1, 2}, .out = -1, .group = World(), .collective = 0};
  const int64_t buffered_before = comm.buffered_acts();
  for (int act = 0; act < 30; ++act) {
    ASSERT_TRUE(comm.AwaitInputBuffer(0).ok());
    for (size_t i = 0; i < in.size(); ++i)
      for (int64_t e = 0; e < in[i].numel(); ++e) in[i].data<float>()[e] = BucketValue(i, e, me) + static_cast<float>(act);
    Result<CommHandle> h = comm.Start(t, in, out);
    ASSERT_TRUE(h.ok()) << h.status().message();
    for (bool done = false; !done;) {
      if (me == comm.size() - 1) std::this_thread::sleep_for(std::chrono::microseconds(200));
      Result<std::vector<CommHandle>> got = comm.Poll();
      ASSERT_TRUE(got.ok()) << got.status().message();
      done = !got->empty();
    }
    for (size_t i = 0; i < out.size(); ++i)
      for (int64_t e = 0; e < out[i].numel(); ++e) {
        float want = 0;
        for (int r = 0; r < comm.size(); ++r) want += BucketValue(i, e, r) + static_cast<float>(act);
        ASSERT_EQ(out[i].data<float>()[e], want) << "act " << act << " output " << i << " element " << e;
      }
  }
  EXPECT_EQ(comm.buffered_acts() - buffered_before, 30);
  // An output in the slot, which the other members read, is refused (on every member alike).
  Result<CommHandle> bad = comm.Start(t, in, in);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("shared-memory slot"), std::string::npos) << bad.status().message();
}

// A member that never reads the others' inputs (a rank that hung) holds them in
// AwaitInputBuffer until Cancel, which the runtime calls when it gives up on a stalled run: the
// wait then fails naming that member, so the caller's threads can be joined (issue 27).
TEST(MpiComm, CancelBreaksTheWaitOnAHungMember_1nNd) {
  if (g_comm->size() < 2) GTEST_SKIP() << "needs 2 ranks";
  Result<std::unique_ptr<Communicator>> made = MpiWorld(nullptr, nullptr);  // Cancel is for good: a fresh one
  ASSERT_TRUE(made.ok()) << made.status().message();
  Communicator& comm = **made;
  const int me = comm.rank(), last = comm.size() - 1;
  ASSERT_TRUE(comm.Prepare({World()}, {64}).ok());
  std::shared_ptr<fr::Storage> slot = comm.InputBuffer(0, 64);
  ASSERT_NE(slot, nullptr);
  Tensor in(DType::kF32, Shape{16}, slot, 0), out(DType::kF32, Shape{16});
  const Task t{.op = Op::kAllReduce, .rank = me, .in = {0}, .out = -1, .group = World(), .collective = 0};
  auto finish = [&](CommHandle h) {
    for (bool done = false; !done;) {
      Result<std::vector<CommHandle>> got = comm.Poll();
      ASSERT_TRUE(got.ok()) << got.status().message();
      done = std::any_of(got->begin(), got->end(), [&](CommHandle c) { return c.id == h.id; });
    }
  };
  // The last member arrives first and then stays away; the others find every input there, sum
  // them at once, and wait for it to read theirs.
  Result<CommHandle> h = me == last ? comm.Start(t, {in}, {out}) : Result<CommHandle>(CommHandle{});
  ASSERT_TRUE(h.ok()) << h.status().message();
  MPI_Barrier(MPI_COMM_WORLD);
  if (me != last) {
    h = comm.Start(t, {in}, {out});
    ASSERT_TRUE(h.ok()) << h.status().message();
    ASSERT_NO_FATAL_FAILURE(finish(*h));
    const auto t0 = std::chrono::steady_clock::now();
    std::thread canceller([&comm] {
      std::this_thread::sleep_for(std::chrono::milliseconds(300));
      comm.Cancel();
    });
    const Status s = comm.AwaitInputBuffer(0);
    canceller.join();
    EXPECT_GE(std::chrono::steady_clock::now() - t0, std::chrono::milliseconds(250)) << "returned before Cancel";
    ASSERT_FALSE(s.ok());
    EXPECT_NE(s.message().find("rank(s) " + std::to_string(last) + " had not read"), std::string::npos) << s.message();
  }
  MPI_Barrier(MPI_COMM_WORLD);
  if (me == last) {
    ASSERT_NO_FATAL_FAILURE(finish(*h));  // nothing left in flight for the destructor
  }
}

TEST(MpiComm, Int64_1nNd) {
  RunAll(Pairs({Shape{7, 5}}, Ranks(World()), Ranks(World()), {kS0, kS1, kB, kP, kPMax}, DType::kI64), "Int64_1nNd");
}

TEST(MpiComm, All2D_2x2) {
  if (g_comm->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  RunAll(Pairs(kShapes, Mesh2x2(), Mesh2x2(), {kS0, kS1, kB, kP}), "All2D_2x2");
}

TEST(MpiComm, MixedReduce2D_2x2) {
  if (g_comm->size() != 4) GTEST_SKIP() << "needs 4 ranks";
  RunAll(Pairs({Shape{7, 5}}, Mesh2x2(), Mesh2x2(), {kS0, kB, kP, kPMax}), "MixedReduce2D_2x2");
}

// Messages past the eager limit: the rendezvous protocol must progress while ranks poll.
TEST(MpiComm, Large_1nNd) {
  RunAll(Pairs({Shape{301, 97}}, Ranks(World()), Ranks(World()), {kS0, kS1, kB, kP}), "Large_1nNd");
  if (g_comm->size() >= 3)
    RunAll(Pairs({Shape{301, 97}}, Ranks({0, 1}), Ranks({2, 0, 1}), {kS0, kS1, kB, kP}), "Large_2to3");
}

TEST(MpiComm, Cross_2to3) {
  if (g_comm->size() < 3) GTEST_SKIP() << "needs 3 ranks";
  const std::vector<Sbp> each = {kS0, kS1, kB, kP, kPMax};
  std::vector<Request> rs = Pairs(kShapes, Ranks({0, 1}), Ranks({0, 1, 2}), each);
  for (Request& r : Pairs(kShapes, Ranks({2, 0, 1}), Ranks({1, 2}), each)) rs.push_back(r);
  if (g_comm->size() == 4) {
    for (Request& r : Pairs({Shape{7, 5}}, Ranks({0, 1}), Ranks({1, 2, 3}), each)) rs.push_back(r);
    for (Request& r : Pairs({Shape{7, 5}}, Mesh2x2(), Ranks({3, 2, 1}), {kS0, kS1, kB, kP})) rs.push_back(r);
  }
  RunAll(rs, "Cross_2to3");
}

// Only rank 0 prints the usual report; the others print their failures, prefixed with the rank.
class RankFailures : public ::testing::EmptyTestEventListener {
 public:
  explicit RankFailures(int rank) : rank_(rank) {}
  void OnTestPartResult(const ::testing::TestPartResult& r) override {
    if (r.failed())
      std::fprintf(stderr, "[rank %d] %s:%d: %s\n", rank_, r.file_name() ? r.file_name() : "?", r.line_number(),
                   r.summary());
  }

 private:
  int rank_;
};

}  // namespace
}  // namespace fr::actor

int main(int argc, char** argv) {
  int provided = 0;
  MPI_Init_thread(&argc, &argv, MPI_THREAD_MULTIPLE, &provided);
  ::testing::InitGoogleTest(&argc, argv);
  int rc = 1;
  {
    fr::Result<std::unique_ptr<fr::actor::Communicator>> comm = fr::actor::MpiWorld(&argc, &argv);
    if (!comm.ok()) {
      std::fprintf(stderr, "%s\n", comm.status().message().c_str());
      MPI_Abort(MPI_COMM_WORLD, 1);
    }
    const char* mode = std::getenv("FLOWRUN_TEST_COMM");
    fr::actor::g_groups = mode && std::string(mode) == "groups";
    if (fr::actor::g_groups)
      *comm = fr::actor::WithDeviceGroups(std::move(*comm), fr::actor::HostGroups(), fr::DeviceType::kCpu);
    fr::actor::g_comm = comm->get();
    if (fr::actor::g_comm->rank() != 0) {
      ::testing::TestEventListeners& ls = ::testing::UnitTest::GetInstance()->listeners();
      delete ls.Release(ls.default_result_printer());
      ls.Append(new fr::actor::RankFailures(fr::actor::g_comm->rank()));
    }
    rc = RUN_ALL_TESTS();
    fr::actor::g_comm = nullptr;
  }
  MPI_Finalize();
  return rc;
}
