// Boxing, exhaustively and in one process (DESIGN.md §6, rung 3): for every (src, dst) pair on
// 1-D placements of 1 to 5 devices, on 2x2, 2x3 and 2x2x2 meshes, and across placements, build the
// src pieces of an integer-valued logical tensor, plan with Box(), run the plan in the simulator,
// and check the dst pieces exactly. Then the strategy each classic transition must get, and its
// bytes on the wire.
#include "boxing/boxing.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstdio>
#include <map>
#include <set>

#include "boxing/simulate.h"
#include "pieces.h"

namespace fr::boxing {
namespace {

using sbp::NdSbp;
using sbp::Placement;
using sbp::Reduce;
using sbp::Sbp;
using boxing::testing::NdSbps;
using testing::Combine;
using testing::Equal;
using testing::Logical;
using testing::MakePieces;

const Sbp kS0 = Sbp::S(0), kS1 = Sbp::S(1), kB = Sbp::B(), kP = Sbp::P(), kPMax = Sbp::P(Reduce::kMax),
          kPMin = Sbp::P(Reduce::kMin);

Placement Ranks(std::vector<int> r) {
  int n = static_cast<int>(r.size());
  return Placement(DeviceType::kCpu, std::move(r), Shape{n});
}
Placement Mesh(std::vector<int64_t> dims, int first = 0) {
  Shape h(dims);
  std::vector<int> r;
  for (int i = 0; i < h.numel(); ++i) r.push_back(first + i);
  return Placement(DeviceType::kCpu, r, h);
}

Request Req(Shape s, Placement sp, NdSbp src, Placement dp, NdSbp dst, DType dt = DType::kF32) {
  return Request{std::move(s), dt, std::move(sp), std::move(src), std::move(dp), std::move(dst)};
}

std::string Describe(const Request& r) {
  return r.logical.ToString() + " " + r.src.ToString() + " on " + r.src_place.ToString() + " -> " + r.dst.ToString() +
         " on " + r.dst_place.ToString();
}

bool Fits(const Request& r) {
  return sbp::Check(r.logical, r.src, r.src_place).ok() && sbp::Check(r.logical, r.dst, r.dst_place).ok();
}

// Plans and simulates `r` on random pieces; returns "" when every dst piece is right.
std::string RunCase(const Request& r, std::mt19937& rng, Plan* out = nullptr) {
  Result<Plan> plan = Box(r);
  if (!plan.ok()) return plan.status().message();
  Tensor logical = Logical(r.logical, r.dtype, rng);
  Result<std::vector<Tensor>> dst = Simulate(*plan, MakePieces(logical, r.src, r.src_place, rng));
  if (!dst.ok()) return plan->strategy + ": " + dst.status().message();
  for (int d = 0; d < r.dst_place.size(); ++d) {
    const Tensor& got = (*dst)[static_cast<size_t>(d)];
    if (!(got.shape() == sbp::PieceShape(r.logical, r.dst, r.dst_place, d)))
      return plan->strategy + ": dst piece " + std::to_string(d) + " has shape " + got.shape().ToString();
    if (!r.dst.any_partial() && !Equal(got, SliceOf(logical, sbp::PieceRanges(r.logical, r.dst, r.dst_place, d))))
      return plan->strategy + ": dst piece " + std::to_string(d) + " is not its slice: " + got.ToString();
  }
  std::string why;
  Tensor back = Combine(*dst, r.dst, r.dst_place, &why);
  if (!back.defined()) return plan->strategy + ": " + why;
  if (!Equal(back, logical)) return plan->strategy + ": the dst pieces reduce to " + back.ToString();
  if (out) *out = std::move(plan).value();
  return "";
}

// Runs every fitting request; fails with the first few wrong ones. Returns the strategies used.
std::map<std::string, int> RunAll(const std::vector<Request>& rs, const char* what) {
  std::mt19937 rng(1234);
  std::map<std::string, int> used;
  int run = 0, failed = 0;
  for (const Request& r : rs) {
    if (!Fits(r)) continue;
    ++run;
    Plan plan;
    std::string err = RunCase(r, rng, &plan);
    if (!err.empty()) {
      if (++failed <= 10) ADD_FAILURE() << Describe(r) << ": " << err;
      continue;
    }
    used[plan.strategy.find('>') != std::string::npos ? "chain" : plan.strategy]++;
  }
  std::printf("%s: %d cases, %d failed;", what, run, failed);
  for (const auto& [s, n] : used) std::printf(" %s %d,", s.c_str(), n);
  std::printf("\n");
  EXPECT_GT(run, 0);
  return used;
}

std::vector<Request> Pairs(const std::vector<Shape>& shapes, const Placement& sp, const Placement& dp,
                           const std::vector<Sbp>& each, DType dt = DType::kF32) {
  std::vector<Request> rs;
  for (const Shape& s : shapes)
    for (const NdSbp& a : NdSbps(each, sp.ndim()))
      for (const NdSbp& b : NdSbps(each, dp.ndim())) rs.push_back(Req(s, sp, a, dp, b, dt));
  return rs;
}

const std::vector<Shape> kShapes = {Shape{7, 5}, Shape{5, 3, 4}};

int CountOp(const Plan& p, Op op) {
  int n = 0;
  for (const Task& t : p.tasks) n += t.op == op;
  return n;
}

// Checks that the plan is exactly one collective of `op` over ranks 0..n-1 and nothing else.
void ExpectOneCollective(const Plan& p, Op op, int n) {
  std::set<int> ids;
  std::vector<int> group;
  for (int i = 0; i < n; ++i) group.push_back(i);
  for (const Task& t : p.tasks) {
    EXPECT_EQ(t.op, op) << Name(t.op);
    EXPECT_EQ(t.group, group);
    ids.insert(t.collective);
  }
  EXPECT_EQ(p.tasks.size(), static_cast<size_t>(n));
  EXPECT_EQ(ids.size(), 1u);
  EXPECT_EQ(p.collectives, 1);
}

Plan MustBox(const Request& r) {
  std::mt19937 rng(7);
  Plan p;
  std::string err = RunCase(r, rng, &p);
  EXPECT_EQ(err, "") << Describe(r);
  return p;
}

// [8, 4] f32 is 128 bytes.
const Shape k84{8, 4};

TEST(Boxing, SToB_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kS0}, Ranks({0, 1, 2, 3}), {kB}));
  EXPECT_EQ(p.strategy, "all-gather");
  ExpectOneCollective(p, Op::kAllGather, 4);
  EXPECT_EQ(p.tasks[0].concat_axis, 0);
  EXPECT_EQ(p.bytes_per_rank_max, 96);  // 3/4 * 128
}

TEST(Boxing, PToB_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kP}, Ranks({0, 1, 2, 3}), {kB}));
  EXPECT_EQ(p.strategy, "all-reduce");
  ExpectOneCollective(p, Op::kAllReduce, 4);
  EXPECT_EQ(p.bytes_per_rank_max, 192);  // 2 * 3/4 * 128
  Plan m = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kPMax}, Ranks({0, 1, 2, 3}), {kB}));
  EXPECT_EQ(m.tasks[0].reduce, Reduce::kMax);
}

// Price counts the all-reduces apart from the other collectives, with what a shared-memory
// all-reduce reads (members x the tensor's bytes), for the cost model to price those through
// shared memory (sbp::Cluster::shared_latency).
TEST(Boxing, PriceCountsAllReducesApart_1n4d) {
  Estimate e = Price(Req(k84, Ranks({0, 1, 2, 3}), {kP}, Ranks({0, 1, 2, 3}), {kB}));
  EXPECT_EQ(e.allreduces.count, 1);
  EXPECT_EQ(e.allreduces.rounds, 2);
  EXPECT_EQ(e.allreduces.bytes, 192);
  EXPECT_EQ(e.allreduces.read, 4 * 128);
  Estimate rs = Price(Req(k84, Ranks({0, 1, 2, 3}), {kP}, Ranks({0, 1, 2, 3}), {kS1}));
  EXPECT_EQ(rs.collectives, 1);
  EXPECT_EQ(rs.allreduces.count, 0);
  EXPECT_EQ(rs.allreduces.read, 0);
  // On a 2 x 2 mesh, partial on both axes: one all-reduce per axis over 2 ranks each.
  Estimate both = Price(Req(k84, Mesh({2, 2}), {kP, kP}, Mesh({2, 2}), {kB, kB}));
  EXPECT_EQ(both.allreduces.count, 2);
  EXPECT_EQ(both.allreduces.rounds, 2);
  EXPECT_EQ(both.allreduces.bytes, both.bytes_per_rank);
  EXPECT_EQ(both.allreduces.read, 2 * (2 * 128));
  // Partial on one axis, split on the other: the all-reduce is of the half each group holds.
  Estimate half = Price(Req(k84, Mesh({2, 2}), {kS0, kP}, Mesh({2, 2}), {kS0, kB}));
  EXPECT_EQ(half.allreduces.count, 1);
  EXPECT_EQ(half.allreduces.read, 2 * 64);
}

TEST(Boxing, PToS_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kP}, Ranks({0, 1, 2, 3}), {kS1}));
  EXPECT_EQ(p.strategy, "reduce-scatter");
  ExpectOneCollective(p, Op::kReduceScatter, 4);
  EXPECT_EQ(p.tasks[0].split_axis, 1);
  EXPECT_EQ(p.bytes_per_rank_max, 96);
  Plan m = MustBox(Req(Shape{7, 5}, Ranks({0, 1, 2, 3}), {kPMin}, Ranks({0, 1, 2, 3}), {kS0}));  // uneven
  EXPECT_EQ(m.strategy, "reduce-scatter");
  EXPECT_EQ(m.tasks[0].reduce, Reduce::kMin);
}

TEST(Boxing, SToS_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kS0}, Ranks({0, 1, 2, 3}), {kS1}));
  EXPECT_EQ(p.strategy, "all-to-all");
  ExpectOneCollective(p, Op::kAllToAll, 4);
  EXPECT_EQ(p.bytes_per_rank_max, 24);  // each rank sends 3/4 of its 32 bytes
}

TEST(Boxing, BToS_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kB}, Ranks({0, 1, 2, 3}), {kS0}));
  EXPECT_EQ(p.strategy, "slice");
  EXPECT_EQ(CountOp(p, Op::kSlice), 4);
  EXPECT_EQ(p.tasks.size(), 4u);
  EXPECT_EQ(p.bytes_per_rank_max, 0);
}

TEST(Boxing, BToP_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kB}, Ranks({0, 1, 2, 3}), {kP}));
  EXPECT_EQ(p.strategy, "zero-fill");
  EXPECT_EQ(CountOp(p, Op::kZero), 3);
  EXPECT_EQ(p.dst[0], p.src[0]);
  EXPECT_EQ(p.bytes_per_rank_max, 0);
  Plan m = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kB}, Ranks({0, 1, 2, 3}), {kPMax}));
  EXPECT_EQ(m.strategy, "copy");
  EXPECT_TRUE(m.tasks.empty());
  Plan s = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kS1}, Ranks({0, 1, 2, 3}), {kP}));
  EXPECT_EQ(s.strategy, "assemble");
  EXPECT_EQ(s.bytes_per_rank_max, 0);
}

TEST(Boxing, Identity_1n4d) {
  Plan p = MustBox(Req(k84, Ranks({0, 1, 2, 3}), {kS0}, Ranks({0, 1, 2, 3}), {kS0}));
  EXPECT_EQ(p.strategy, "identity");
  EXPECT_TRUE(p.tasks.empty());
  EXPECT_EQ(p.dst, p.src);
  Plan one = MustBox(Req(k84, Ranks({3}), {kP}, Ranks({3}), {kS1}));  // one device: every SBP is the same piece
  EXPECT_EQ(one.strategy, "identity");
}

TEST(Boxing, ReduceKindsMustMatch_1n3d) {
  Plan p = MustBox(Req(Shape{7, 5}, Ranks({0, 1, 2}), {kP}, Ranks({0, 1, 2}), {kPMax}));
  EXPECT_EQ(p.strategy, "fallback");
  Plan s = MustBox(Req(Shape{7, 5}, Ranks({0, 1, 2}), {kS0}, Ranks({0, 1, 2}), {kPMin}));
  EXPECT_EQ(s.strategy, "fallback");
}

TEST(Boxing, All1D) {
  const std::vector<Sbp> each = {kS0, kS1, kB, kP, kPMax, kPMin};
  std::vector<Request> rs;
  for (int n = 1; n <= 5; ++n) {
    std::vector<int> r;
    for (int i = 0; i < n; ++i) r.push_back(i);
    for (Request& q : Pairs(kShapes, Ranks(r), Ranks(r), each)) rs.push_back(std::move(q));
  }
  RunAll(rs, "All1D");
  // Same placement, 1-D: only mismatched reduce kinds and S→P(max|min) reach the fallback, and
  // nothing but the fallback sends point to point.
  for (const Request& r : rs) {
    if (!Fits(r)) continue;
    Estimate e = Price(r);
    bool declined = r.src_place.size() > 1 && ((r.src[0].is_partial() && r.dst[0].is_partial() && !(r.src[0] == r.dst[0])) ||
                                              (r.src[0].is_split() && r.dst[0].is_partial() && r.dst[0].reduce() != Reduce::kSum));
    EXPECT_EQ(e.strategy == "fallback", declined) << Describe(r) << ": " << e.strategy;
  }
}

TEST(Boxing, All2D_2x2) { RunAll(Pairs(kShapes, Mesh({2, 2}), Mesh({2, 2}), {kS0, kS1, kB, kP}), "All2D_2x2"); }

TEST(Boxing, All2D_2x3) {
  RunAll(Pairs({Shape{7, 5}, Shape{6, 6, 4}}, Mesh({2, 3}), Mesh({2, 3}), {kS0, kS1, kB, kP}), "All2D_2x3");
}

TEST(Boxing, MixedReduce2D_2x2) {
  RunAll(Pairs({Shape{7, 5}}, Mesh({2, 2}), Mesh({2, 2}), {kS0, kB, kP, kPMax, kPMin}), "MixedReduce2D_2x2");
}

TEST(Boxing, Sample3D_2x2x2) {
  std::vector<Request> all = Pairs({Shape{8, 9}}, Mesh({2, 2, 2}), Mesh({2, 2, 2}), {kS0, kS1, kB, kP}), some;
  for (size_t i = 0; i < all.size(); i += 7) some.push_back(all[i]);
  RunAll(some, "Sample3D_2x2x2");
}

TEST(Boxing, TwoDStrategies_2x2) {
  Plan g = MustBox(Req(k84, Mesh({2, 2}), {kS0, kS1}, Mesh({2, 2}), {kS0, kB}));
  EXPECT_EQ(g.strategy, "all-gather@1");
  EXPECT_EQ(CountOp(g, Op::kAllGather), 4);
  EXPECT_EQ(g.collectives, 1);  // two groups, {0,1} and {2,3}, one collective each
  EXPECT_EQ(g.tasks[0].group, (std::vector<int>{0, 1}));
  EXPECT_EQ(g.tasks[2].group, (std::vector<int>{2, 3}));
  EXPECT_EQ(g.bytes_per_rank_max, 32);  // 1/2 of the 64-byte half each group gathers
  Plan r = MustBox(Req(k84, Mesh({2, 2}), {kS0, kP}, Mesh({2, 2}), {kB, kB}));
  EXPECT_EQ(r.strategy, "all-reduce@1 > all-gather@0");  // resolve P first: it is then half the size
  EXPECT_EQ(r.collectives, 2);
  EXPECT_EQ(r.bytes_per_rank_max, 64 + 64);
  // Latency rounds: one per collective over 2 ranks; the same all-reduce over all 4 takes 2.
  EXPECT_EQ(Price(Req(k84, Mesh({2, 2}), {kS0, kP}, Mesh({2, 2}), {kB, kB})).rounds, 2);
  EXPECT_EQ(Price(Req(k84, Mesh({4}), {kP}, Mesh({4}), {kB})).rounds, 2);
  EXPECT_EQ(Price(Req(k84, Mesh({2}), {kP}, Mesh({2}), {kB})).rounds, 1);
  EXPECT_EQ(Price(Req(k84, Mesh({8}), {kS0}, Mesh({8}), {kB})).rounds, 3);
  EXPECT_EQ(CollectiveRounds(3), 2);
}

TEST(Boxing, CrossPlacement) {
  const std::vector<Sbp> each = {kS0, kS1, kB, kP, kPMax};
  std::vector<Request> rs;
  const std::vector<std::pair<Placement, Placement>> edges = {
      {Ranks({0, 1}), Ranks({0, 1, 2})}, {Ranks({0, 1}), Ranks({2, 3, 4})}, {Ranks({0}), Ranks({0, 1, 2, 3})},
      {Ranks({0, 1, 2, 3}), Ranks({0})}, {Ranks({0, 1, 2, 3}), Ranks({4})}, {Ranks({3, 1, 0}), Ranks({1, 2})}};
  for (const auto& [sp, dp] : edges)
    for (Request& q : Pairs(kShapes, sp, dp, each)) rs.push_back(std::move(q));
  std::map<std::string, int> used = RunAll(rs, "CrossPlacement");
  EXPECT_EQ(used.size(), 2u);  // send-recv and, for partial sources, the fallback
  for (const Request& r : rs) {
    if (!Fits(r)) continue;
    EXPECT_EQ(Price(r).strategy, r.src.any_partial() && r.src_place.size() > 1 ? "fallback" : "send-recv");
  }
  // Meshes on both sides, and one mesh re-viewed with another hierarchy.
  RunAll(Pairs({Shape{7, 5}}, Mesh({2, 2}), Ranks({4, 5, 6}), {kS0, kS1, kB, kP}), "CrossPlacement_2x2_to_3");
  RunAll(Pairs({Shape{7, 5}}, Ranks({0, 1, 2, 3}), Mesh({2, 2}), {kS0, kS1, kB, kP}), "CrossPlacement_4_to_2x2");
  RunAll(Pairs({Shape{7, 5}}, Mesh({2, 2}), Mesh({2, 2}, 4), {kS0, kS1, kB, kP}), "CrossPlacement_2x2_to_2x2");
}

TEST(Boxing, CrossPlacementMoves) {
  // 2 -> 3 ranks, S(0) -> S(0) of [6, 4]: rows 0-2 | 3-5 become 0-1 | 2-3 | 4-5.
  Plan p = MustBox(Req(Shape{6, 4}, Ranks({0, 1}), {kS0}, Ranks({0, 1, 2}), {kS0}));
  EXPECT_EQ(p.strategy, "send-recv");
  EXPECT_EQ(CountOp(p, Op::kSend), 2);  // rank 0 sends row 2 to rank 1; rank 1 sends rows 4-5 to rank 2
  EXPECT_EQ(CountOp(p, Op::kAllGather) + CountOp(p, Op::kAllReduce), 0);
  EXPECT_EQ(p.bytes_per_rank_max, 32);  // rank 1 and 2 receive / send 2 rows of 16 bytes
  // B on 2 ranks to 1 rank that holds a replica: a local copy, no traffic.
  Plan c = MustBox(Req(Shape{6, 4}, Ranks({0, 1}), {kB}, Ranks({1}), {kB}));
  EXPECT_EQ(CountOp(c, Op::kSend), 0);
  EXPECT_EQ(CountOp(c, Op::kCopy), 1);
  EXPECT_EQ(c.bytes_per_rank_max, 0);
}

TEST(Boxing, Int64) {
  RunAll(Pairs(kShapes, Ranks({0, 1, 2}), Ranks({0, 1, 2}), {kS0, kS1, kB, kP, kPMax, kPMin}, DType::kI64), "Int64_1n3d");
  RunAll(Pairs({Shape{7, 5}}, Ranks({0, 1}), Ranks({1, 2, 3}), {kS0, kB, kP}, DType::kI64), "Int64_cross");
}

// Price counts without building (boxing.h): its strategy, bytes, collectives and messages must be
// those of the plan Box() builds, on even and uneven pieces, one placement and two.
TEST(Boxing, PriceAgrees) {
  std::vector<Request> rs = Pairs({Shape{7, 5}, Shape{8, 4}}, Ranks({0, 1, 2, 3}), Ranks({0, 1, 2, 3}), {kS0, kS1, kB, kP, kPMax});
  auto add = [&](std::vector<Request> more) {
    for (Request& q : more) rs.push_back(std::move(q));
  };
  add(Pairs({Shape{7, 5}, Shape{8, 4}, Shape{4, 6, 8}}, Mesh({2, 2}), Mesh({2, 2}), {kS0, kS1, kB, kP, kPMax}));
  add(Pairs({Shape{8, 12}, Shape{6, 4}}, Mesh({2, 4}), Mesh({2, 4}), {kS0, kS1, kB, kP}));
  add(Pairs({Shape{8, 8}}, Mesh({2, 2, 2}), Mesh({2, 2, 2}), {kS0, kS1, kB, kP}));
  add(Pairs({Shape{7, 5}}, Ranks({0, 1}), Ranks({1, 2, 3}), {kS0, kB, kP}));
  add(Pairs({Shape{8, 4}, Shape{7, 5}}, Mesh({2, 2}), Mesh({2, 2}, 4), {kS0, kS1, kB, kP, kPMax}));
  add(Pairs({Shape{8, 4}}, Mesh({2, 2}), Ranks({1, 2, 3}), {kS0, kS1, kB, kP}));
  add(Pairs({Shape{8, 4}}, Ranks({0, 1}), Mesh({2, 2}, 1), {kS0, kS1, kB, kP}));
  int checked = 0;
  std::set<std::string> strategies;
  for (const Request& r : rs) {
    if (!Fits(r)) continue;
    Result<Plan> p = Box(r);
    ASSERT_TRUE(p.ok()) << p.status().message();
    std::map<int, int> sends, recvs;
    for (const Task& t : p->tasks) {
      if (t.op == Op::kSend) ++sends[t.rank];
      if (t.op == Op::kRecv) ++recvs[t.rank];
    }
    int messages = 0;
    for (const auto& [rank, n] : sends) messages = std::max(messages, n);
    for (const auto& [rank, n] : recvs) messages = std::max(messages, n);
    std::map<int, int> rounds;  // per rank, over its collectives' tasks (one task per member)
    for (const Task& t : p->tasks)
      if (!t.group.empty()) rounds[t.rank] += CollectiveRounds(static_cast<int>(t.group.size()));
    int rounds_max = 0;
    for (const auto& [rank, n] : rounds) rounds_max = std::max(rounds_max, n);
    Estimate e = Price(r);
    EXPECT_EQ(e.strategy, p->strategy) << Describe(r);
    EXPECT_EQ(std::llround(e.bytes_per_rank), p->bytes_per_rank_max) << Describe(r);
    EXPECT_EQ(e.collectives, p->collectives) << Describe(r);
    EXPECT_EQ(e.messages, messages) << Describe(r);
    EXPECT_EQ(e.rounds, rounds_max) << Describe(r);
    strategies.insert(e.strategy.substr(0, e.strategy.find('@')));
    ++checked;
  }
  EXPECT_GT(checked, 5000);
  for (const char* s : {"identity", "all-reduce", "all-gather", "reduce-scatter", "all-to-all", "send-recv", "fallback"})
    EXPECT_TRUE(strategies.count(s)) << s;
}

TEST(Boxing, SimulatorRejectsBrokenPlans) {
  Request r = Req(k84, Ranks({0, 1}), {kS0}, Ranks({0, 1}), {kB});
  std::mt19937 rng(3);
  std::vector<Tensor> src = MakePieces(Logical(k84, DType::kF32, rng), r.src, r.src_place, rng);
  Plan p = Box(r).value();
  Plan missing = p;
  missing.tasks.pop_back();  // one member of the all-gather
  EXPECT_FALSE(Simulate(missing, src).ok());
  Plan reshaped = p;
  reshaped.buffers[static_cast<size_t>(reshaped.dst[1])].shape = Shape{4, 4};
  EXPECT_FALSE(Simulate(reshaped, src).ok());
  Plan moved = MustBox(Req(Shape{6, 4}, Ranks({0}), {kB}, Ranks({1}), {kB}));
  ASSERT_EQ(moved.tasks.size(), 2u);  // send, recv
  std::vector<Tensor> one = {Logical(Shape{6, 4}, DType::kF32, rng)};
  Plan unmatched = moved;
  unmatched.tasks[1].tag += 1;  // the recv waits forever
  Result<std::vector<Tensor>> dead = Simulate(unmatched, one);
  ASSERT_FALSE(dead.ok());
  EXPECT_NE(dead.status().message().find("deadlock"), std::string::npos) << dead.status().message();
}

TEST(Boxing, InvalidRequest) {
  Request r = Req(Shape{2, 3}, Ranks({0, 1, 2, 3}), {kS0}, Ranks({0, 1, 2, 3}), {kB});
  Result<Plan> p = Box(r);
  ASSERT_FALSE(p.ok());
  EXPECT_EQ(p.status().message().rfind("[boxing] src", 0), 0u) << p.status().message();
  EXPECT_EQ(Price(r).strategy, "invalid");
  EXPECT_TRUE(std::isinf(Price(r).bytes_per_rank));
  EXPECT_FALSE(Box(Req(Shape{4}, Ranks({0, 1}), {kB}, Ranks({1, 1}), {kB})).ok());  // a rank twice
  EXPECT_FALSE(Box(Req(Shape{4, 4}, Mesh({2, 2}), {kB}, Mesh({2, 2}), {kB, kB})).ok());  // 1 entry for a 2-D mesh
}

}  // namespace
}  // namespace fr::boxing
