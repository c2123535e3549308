// Internal to boxing/: the one place that appends buffers and tasks to a plan and keeps the
// bookkeeping every strategy needs (tags, collective ids, bytes on the wire per rank).
//
// A dry builder keeps buffers (their shapes drive the byte counts) but drops tasks: Price() runs
// the same strategies through it, so its figures agree with Box() by construction.
#pragma once

#include <string>
#include <vector>

#include "boxing/boxing.h"

namespace fr::boxing {

using Region = std::vector<sbp::Range>;  // one range per tensor axis

// The whole of a tensor of shape `s`, and the shape of a region.
Region Whole(const Shape& s);
Shape ShapeOf(const Region& r);
// Member k's part of `s` split along `axis` over `parts` members (the whole of s for an axis
// outside its rank).
Region PartOf(const Shape& s, int axis, int parts, int k);

// A collective's kind and parameters, as carried by each member's Task.
struct CollectiveSpec {
  Op op = Op::kAllReduce;
  sbp::Reduce reduce = sbp::Reduce::kSum;
  int concat_axis = -1;
  int split_axis = -1;
};

// Bytes each member of a p-rank collective of `op` puts on the wire, for a group tensor of `size`
// bytes (boxing.h: all-reduce 2(p-1)/p, all-to-all (p-1)/p^2, the others (p-1)/p).
double CollectiveBytes(Op op, double p, double size);

// Per rank traffic: bytes sent and received, collectives joined, point-to-point sends and
// receives; the plan's figures are the busiest rank's. Sums follow the order of the calls.
struct Traffic {
  struct PerRank {
    double sent = 0, received = 0;
    int collectives = 0, rounds = 0, sends = 0, recvs = 0;
    Estimate::AllReduces allreduces;  // the all-reduces among those collectives
  };
  std::vector<PerRank> by_rank;  // indexed by global rank, grown as ranks appear (pricing a
                                 // movement over 1024 ranks counts up to a million messages)
  void Message(int from, int to, double bytes) {
    Sent(from, bytes, 1);
    Received(to, bytes, 1);
  }
  // `messages` point-to-point messages of `bytes` in all, out of or into `rank`.
  void Sent(int rank, double bytes, int messages) {
    PerRank& f = At(rank);
    f.sent += bytes;
    f.sends += messages;
  }
  void Received(int rank, double bytes, int messages) {
    PerRank& t = At(rank);
    t.received += bytes;
    t.recvs += messages;
  }
  // One member of a collective of `op` over `group_size` ranks: `bytes` on the wire, for a group
  // tensor of `size` bytes.
  void Member(int rank, double bytes, int group_size, Op op, double size);
  Estimate::AllReduces allreduces_max() const;  // each figure's max over ranks
  double bytes_max() const;
  int collectives_max() const;
  int rounds_max() const;
  int messages_max() const;

 private:
  PerRank& At(int rank) {
    if (static_cast<size_t>(rank) >= by_rank.size()) by_rank.resize(static_cast<size_t>(rank) + 1);
    return by_rank[static_cast<size_t>(rank)];
  }
};

class Builder {
 public:
  // Creates one buffer per src device (ids 0..n-1, in device order).
  Builder(const Request& r, bool dry);

  const Request& request() const { return r_; }
  bool dry() const { return dry_; }
  const std::vector<int>& src() const { return src_; }
  bool IsSrc(int id) const { return id < static_cast<int>(src_.size()); }
  const Buffer& buffer(int id) const { return buffers_[static_cast<size_t>(id)]; }

  int Slice(int in, Region region);  // on in's rank; `region` in in's coordinates
  int Assemble(int rank, Shape shape, std::vector<int> ins, std::vector<Region> at);
  int Zero(int rank, Shape shape);
  int Copy(int in);
  int Reduce(std::vector<int> ins, sbp::Reduce op);  // all on one rank
  // Sends `in` to `to` (a different rank) and returns the received buffer there.
  int Transfer(int in, int to);
  // One collective: ins[k] lives on group[k], whose output has shape outs[k]. Returns the outputs.
  std::vector<int> Collective(const CollectiveSpec& spec, const std::vector<int>& group,
                              const std::vector<int>& ins, const std::vector<Shape>& outs);

  const Traffic& traffic() const { return traffic_; }
  Plan Finish(std::string strategy, std::vector<int> dst) &&;

 private:
  int NewBuffer(int rank, Shape shape);
  void Add(Task t);
  double Bytes(const Shape& s) const;

  const Request& r_;
  bool dry_;
  std::vector<Buffer> buffers_;
  std::vector<Task> tasks_;
  std::vector<int> src_;
  int next_tag_ = 0, next_collective_ = 0;
  Traffic traffic_;
};

}  // namespace fr::boxing
