// Boxing: the data movement between a producer's (placement, nd-SBP) and what its consumer wants
// (DESIGN.md §1). Box() plans it as tasks on global ranks over buffers (physical tensors, each on
// one rank). It is pure planning: no MPI, no devices; simulate.h executes a Plan in one process.
//
// A chain of small strategies is tried in order; each declines or returns a plan, the last never
// declines (STYLE.md, "Boxing is a chain of small strategies"):
//   identity   same placement, same pieces: the dst buffers are the src buffers, no tasks
//   same-placement, per mesh axis (1-D and N-D):
//              P→B all-reduce, P→S reduce-scatter, S→B all-gather, S(i)→S(j) all-to-all,
//              B→S local slice, B→P zero-fill (device 0 keeps the data), S→P(sum) local assemble
//              into zeros, B→P(max|min) keep (the max of equal pieces is the piece). Reduce kinds
//              must match. On an N-D mesh each differing axis is one such step within every group
//              of devices along that axis; see strategies.cpp for the ordering rules.
//   send-recv  different placements, src without P: each dst device receives the intersections of
//              its region with the src pieces (one holder per B-replicated region) and assembles
//   fallback   anything: as send-recv, once per combination of src partial coordinates, then the
//              contributions are reduced with the src reduce op(s)
//
// Partial on several mesh axes nests like split: mesh axis 0 is outermost, so the logical tensor is
// R0(R1(...)) where Ra reduces over axis a with that axis' op; inner axes reduce first. Likewise
// B on an axis outer to a P axis copies a partial tensor whose copies may be split into different
// pieces: boxing never assumes such replicas are identical, only that they reduce to the same value.
//
// Bytes on the wire, per rank: a collective over p ranks costs each member 2(p-1)/p·size for
// all-reduce, (p-1)/p·size for all-gather and reduce-scatter (size = the group's whole tensor) and
// (p-1)/p²·size for all-to-all (each member sends (p-1)/p of its own 1/p share). A send costs the
// sender its bytes and a receive the receiver. A rank's figure is max(sent, received); a plan's is
// the max over ranks.
//
// Thread-safety: all functions are pure; call them from any thread.
#pragma once

#include <cstdint>
#include <initializer_list>
#include <memory>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/shape.h"
#include "base/status.h"
#include "sbp/sbp.h"

namespace fr::boxing {

struct Request {
  Shape logical;
  DType dtype = DType::kF32;
  sbp::Placement src_place;
  sbp::NdSbp src;
  sbp::Placement dst_place;
  sbp::NdSbp dst;
};

enum class Op : uint8_t {
  kCopy,           // out = in[0], on the same rank
  kSlice,          // out = in[0][regions[0]]
  kAssemble,       // out = zeros; out[regions[i]] = in[i]
  kZero,           // out = zeros
  kReduce,         // out = reduce(in...) elementwise with `reduce`
  kSend,           // send in[0] to `peer` with `tag`; no out
  kRecv,           // out = the message from `peer` with `tag`
  kAllReduce,      // out = reduce over the group of in[0]
  kAllGather,      // out = the group's in[0] concatenated along concat_axis, in group order
  kReduceScatter,  // out = part k (of the group's p) along split_axis of reduce(in[0])
  kAllToAll,       // in[0] is part k along concat_axis; out is part k along split_axis
};
const char* Name(Op op);

// A physical tensor on one global rank; the dtype is the plan's.
struct Buffer {
  int rank = -1;
  Shape shape;
};

// A collective's members: global ranks, in group order. Immutable, and shared by the group's
// tasks: a collective over N ranks has N tasks, and a copy of the N ranks in each made plans
// quadratic in the rank count (4000 ranks of data parallelism: 1.2 GB and 3.2 s to plan).
class Members {
 public:
  Members() = default;
  Members(std::vector<int> ranks) : ranks_(std::make_shared<const std::vector<int>>(std::move(ranks))) {}  // NOLINT
  Members(std::initializer_list<int> ranks) : Members(std::vector<int>(ranks)) {}
  const std::vector<int>& ranks() const { return ranks_ ? *ranks_ : Empty(); }
  operator const std::vector<int>&() const { return ranks(); }  // NOLINT
  std::vector<int>::const_iterator begin() const { return ranks().begin(); }
  std::vector<int>::const_iterator end() const { return ranks().end(); }
  size_t size() const { return ranks().size(); }
  bool empty() const { return ranks().empty(); }
  int operator[](size_t i) const { return ranks()[i]; }
  friend bool operator==(const Members& a, const Members& b) { return a.ranks_ == b.ranks_ || a.ranks() == b.ranks(); }
  friend bool operator==(const Members& a, const std::vector<int>& b) { return a.ranks() == b; }

 private:
  static const std::vector<int>& Empty() {
    static const std::vector<int> none;
    return none;
  }
  std::shared_ptr<const std::vector<int>> ranks_;
};

// One task on one rank. Ranges are per tensor axis, in the coordinates of the buffer they name.
// Parts of a collective follow sbp::SplitRange over the group size (uneven splits allowed).
struct Task {
  Op op = Op::kCopy;
  int rank = -1;
  std::vector<int> in = {};  // buffer ids
  int out = -1;         // buffer id; -1 for kSend
  // kSlice: regions[0] is the part of in[0] taken. kAssemble: regions[i] is where in[i] goes.
  std::vector<std::vector<sbp::Range>> regions = {};
  sbp::Reduce reduce = sbp::Reduce::kSum;  // kReduce, kAllReduce, kReduceScatter
  int peer = -1;                           // kSend: the receiver; kRecv: the sender
  int tag = -1;                            // kSend/kRecv: unique within the plan
  Members group = {};                      // collectives: global ranks, ordered
  int concat_axis = -1;                    // kAllGather, kAllToAll: the axis inputs are parts of
  int split_axis = -1;                     // kReduceScatter, kAllToAll: the axis outputs are parts of
  // Collectives: shared by the group's tasks. Ids grow in plan order on every rank, so issuing a
  // rank's collectives in plan order is one global order and no two ranks wait on each other.
  int collective = -1;
};

// Tasks are in a topological order: a task's inputs are src buffers or outputs of earlier tasks,
// and a kSend comes before its kRecv. A dst buffer may be a src buffer (unchanged piece, same rank).
struct Plan {
  std::string strategy;  // e.g. "identity", "all-gather", "all-reduce@1 > all-gather@0", "send-recv"
  DType dtype = DType::kF32;
  std::vector<Buffer> buffers;
  std::vector<Task> tasks;
  std::vector<int> src, dst;       // the buffer of each src / dst device index
  int64_t bytes_per_rank_max = 0;  // see the header comment
  int collectives = 0;             // the most collectives any one rank takes part in
};

// Plans the transition. Errors ("[boxing] ...") when an nd-SBP does not fit its placement or the
// logical shape (sbp::Check), or a placement is empty or names a rank twice.
Result<Plan> Box(const Request& r);

// The cost-model view, without building tasks: the same chain and choices as Box(), so strategy,
// bytes (unrounded) and collectives agree with its Plan. An invalid request prices as strategy
// "invalid" with infinite bytes, so a search never picks it.
struct Estimate {
  std::string strategy;
  double bytes_per_rank = 0;
  int collectives = 0;  // on the busiest rank
  int messages = 0;     // point-to-point sends or receives on the busiest rank
  // Latency rounds of those collectives on the busiest rank: one over p ranks takes ceil(log2 p),
  // as tree and recursive-doubling algorithms do, and the cost model charges a latency per round.
  int rounds = 0;
  // The all-reduces among those collectives (their part of the figures above, on the busiest
  // rank), and what they read summed over them: members x the tensor's bytes, as an all-reduce
  // through shared memory does (each member sums every member's copy). The cost model prices a
  // float32 sum all-reduce within a node by these (sbp::Cluster::shared_latency).
  struct AllReduces {
    int count = 0, rounds = 0;
    double bytes = 0, read = 0;
  };
  AllReduces allreduces;
};

// Latency rounds of one collective over p ranks: ceil(log2 p) (Estimate::rounds).
int CollectiveRounds(int p);
Estimate Price(const Request& r);

// The lowering fuses the per-step all-reduces of gradient accumulators into buckets of at most
// this many bytes per device (plan/lower.h); a bucket is one collective, and the buckets but the
// last reduce while backward computes, so the cost model charges each gradient its bytes' share of
// one collective's latency. Small enough that a small model gets several buckets to overlap, and
// that little is left to reduce after backward (docs/performance-history.md has the sizes tried).
inline constexpr int64_t kDefaultBucketBytes = 128 << 10;  // parallel.bucket_kib's default

// The most bytes of shared-memory windows a rank joins for all-reduces (actor::Communicator::
// Prepare's shared_bytes): gpt_mini's data-parallel gradients take 0.6 MiB. Shared memory is often
// scarce in containers (Docker gives /dev/shm 64 MiB), so a model's gradients beyond this go
// through MPI (actor::SetUpCollectives), and the cost model prices them so.
inline constexpr int64_t kSharedReduceBytesPerRank = 16 << 20;

// Where each of a bucket's pieces starts when they lie end to end in one allocation, each at a
// 64-byte boundary for vector kernels (the gaps stay zero), and in `end` the bytes the allocation
// needs: the layout of a gradient bucket's inputs and outputs (actor::Runtime) and of a member's
// slot in a shared-memory all-reduce (actor::Communicator), which must agree.
inline std::vector<int64_t> BucketOffsets(const std::vector<int64_t>& bytes, int64_t* end) {
  std::vector<int64_t> at;
  int64_t e = 0;
  for (int64_t b : bytes) {
    e = (e + 63) / 64 * 64;
    at.push_back(e);
    e += b;
  }
  *end = e;
  return at;
}

}  // namespace fr::boxing
