#include "boxing/builder.h"

#include <algorithm>
#include <cmath>

namespace fr::boxing {

const char* Name(Op op) {
  switch (op) {
    case Op::kCopy: return "copy";
    case Op::kSlice: return "slice";
    case Op::kAssemble: return "assemble";
    case Op::kZero: return "zero";
    case Op::kReduce: return "reduce";
    case Op::kSend: return "send";
    case Op::kRecv: return "recv";
    case Op::kAllReduce: return "all-reduce";
    case Op::kAllGather: return "all-gather";
    case Op::kReduceScatter: return "reduce-scatter";
    case Op::kAllToAll: return "all-to-all";
  }
  return "?";
}

Region Whole(const Shape& s) {
  Region r;
  for (int64_t d : s.dims()) r.push_back(sbp::Range{0, d});
  return r;
}

Region PartOf(const Shape& s, int axis, int parts, int k) {
  Region r = Whole(s);
  if (axis >= 0 && axis < s.rank()) r[static_cast<size_t>(axis)] = sbp::SplitRange(s[axis], parts, k);
  return r;
}

Shape ShapeOf(const Region& r) {
  std::vector<int64_t> d;
  for (const sbp::Range& x : r) d.push_back(x.size());
  return Shape(std::move(d));
}

Builder::Builder(const Request& r, bool dry) : r_(r), dry_(dry) {
  for (int i = 0; i < r.src_place.size(); ++i)
    src_.push_back(NewBuffer(r.src_place.ranks()[static_cast<size_t>(i)], sbp::PieceShape(r.logical, r.src, r.src_place, i)));
}

int Builder::NewBuffer(int rank, Shape shape) {
  buffers_.push_back(Buffer{rank, std::move(shape)});
  return static_cast<int>(buffers_.size()) - 1;
}

void Builder::Add(Task t) {
  if (!dry_) tasks_.push_back(std::move(t));
}

double Builder::Bytes(const Shape& s) const {
  return static_cast<double>(s.numel()) * static_cast<double>(SizeOf(r_.dtype));
}

int Builder::Slice(int in, Region region) {
  int rank = buffer(in).rank;
  int out = NewBuffer(rank, ShapeOf(region));
  Task t{.op = Op::kSlice, .rank = rank, .in = {in}, .out = out};
  t.regions.push_back(std::move(region));
  Add(std::move(t));
  return out;
}

int Builder::Assemble(int rank, Shape shape, std::vector<int> ins, std::vector<Region> at) {
  FR_CHECK(ins.size() == at.size(), "one region per input");
  int out = NewBuffer(rank, std::move(shape));
  Add(Task{.op = Op::kAssemble, .rank = rank, .in = std::move(ins), .out = out, .regions = std::move(at)});
  return out;
}

int Builder::Zero(int rank, Shape shape) {
  int out = NewBuffer(rank, std::move(shape));
  Add(Task{.op = Op::kZero, .rank = rank, .out = out});
  return out;
}

int Builder::Copy(int in) {
  int rank = buffer(in).rank;
  int out = NewBuffer(rank, buffer(in).shape);
  Add(Task{.op = Op::kCopy, .rank = rank, .in = {in}, .out = out});
  return out;
}

int Builder::Reduce(std::vector<int> ins, sbp::Reduce op) {
  FR_CHECK(!ins.empty(), "reduce of nothing");
  int rank = buffer(ins[0]).rank;
  int out = NewBuffer(rank, buffer(ins[0]).shape);
  Add(Task{.op = Op::kReduce, .rank = rank, .in = std::move(ins), .out = out, .reduce = op});
  return out;
}

int Builder::Transfer(int in, int to) {
  int from = buffer(in).rank;
  FR_CHECK(from != to, "a rank does not send to itself");
  int tag = next_tag_++;
  int out = NewBuffer(to, buffer(in).shape);
  traffic_.Message(from, to, Bytes(buffer(in).shape));
  Add(Task{.op = Op::kSend, .rank = from, .in = {in}, .peer = to, .tag = tag});
  Add(Task{.op = Op::kRecv, .rank = to, .out = out, .peer = from, .tag = tag});
  return out;
}

std::vector<int> Builder::Collective(const CollectiveSpec& spec, const std::vector<int>& group,
                                     const std::vector<int>& ins, const std::vector<Shape>& outs) {
  FR_CHECK(group.size() == ins.size() && group.size() == outs.size(), "one input and output per member");
  int id = next_collective_++;
  double p = static_cast<double>(group.size());
  double size = 0;  // the group's whole tensor
  switch (spec.op) {
    case Op::kAllReduce:
    case Op::kReduceScatter: size = Bytes(buffer(ins[0]).shape); break;
    case Op::kAllGather: size = Bytes(outs[0]); break;
    default:
      for (int in : ins) size += Bytes(buffer(in).shape);
  }
  const double per_rank = CollectiveBytes(spec.op, p, size);
  std::vector<int> out_ids;
  const Members members(group);  // one copy, shared by the group's tasks
  for (size_t k = 0; k < group.size(); ++k) {
    FR_CHECK(buffer(ins[k]).rank == group[k], "input on its member's rank");
    int out = NewBuffer(group[k], outs[k]);
    out_ids.push_back(out);
    traffic_.Member(group[k], per_rank, static_cast<int>(group.size()), spec.op, size);
    Add(Task{.op = spec.op, .rank = group[k], .in = {ins[k]}, .out = out, .reduce = spec.reduce,
             .group = members, .concat_axis = spec.concat_axis, .split_axis = spec.split_axis, .collective = id});
  }
  return out_ids;
}

double CollectiveBytes(Op op, double p, double size) {
  return op == Op::kAllReduce  ? 2 * (p - 1) / p * size
         : op == Op::kAllToAll ? (p - 1) / (p * p) * size
                               : (p - 1) / p * size;
}

void Traffic::Member(int rank, double bytes, int group_size, Op op, double size) {
  PerRank& m = At(rank);
  m.sent += bytes;
  m.received += bytes;
  m.collectives += 1;
  m.rounds += CollectiveRounds(group_size);
  if (op == Op::kAllReduce) {
    m.allreduces.count += 1;
    m.allreduces.rounds += CollectiveRounds(group_size);
    m.allreduces.bytes += bytes;
    m.allreduces.read += group_size * size;
  }
}

Estimate::AllReduces Traffic::allreduces_max() const {
  Estimate::AllReduces m;
  for (const PerRank& r : by_rank) {
    m.count = std::max(m.count, r.allreduces.count);
    m.rounds = std::max(m.rounds, r.allreduces.rounds);
    m.bytes = std::max(m.bytes, r.allreduces.bytes);
    m.read = std::max(m.read, r.allreduces.read);
  }
  return m;
}

int CollectiveRounds(int p) {
  int r = 0;
  while ((1 << r) < p) ++r;
  return r;
}

double Traffic::bytes_max() const {
  double m = 0;
  for (const PerRank& r : by_rank) m = std::max({m, r.sent, r.received});
  return m;
}

int Traffic::collectives_max() const {
  int m = 0;
  for (const PerRank& r : by_rank) m = std::max(m, r.collectives);
  return m;
}

int Traffic::rounds_max() const {
  int m = 0;
  for (const PerRank& r : by_rank) m = std::max(m, r.rounds);
  return m;
}

int Traffic::messages_max() const {
  int m = 0;
  for (const PerRank& r : by_rank) m = std::max({m, r.sends, r.recvs});
  return m;
}

Plan Builder::Finish(std::string strategy, std::vector<int> dst) && {
  Plan p;
  p.strategy = std::move(strategy);
  p.dtype = r_.dtype;
  p.bytes_per_rank_max = std::llround(traffic_.bytes_max());
  p.collectives = traffic_.collectives_max();
  p.buffers = std::move(buffers_);
  p.tasks = std::move(tasks_);
  p.src = src_;
  p.dst = std::move(dst);
  return p;
}

}  // namespace fr::boxing
