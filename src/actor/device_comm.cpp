// The device communicator (comm.h: WithDeviceGroups): the collectives of tensors on one device
// type run on collective groups (base/collective.h), one per collective id, each with a stream of
// its own that waits for the inputs' stream by an event, not the host. Everything else passes to
// the communicator underneath.
//
// The groups move flat buffers of equal counts per member, as NCCL does; boxing's parts along an
// axis may be uneven and strided (boxing.h). So a collective whose parts are not one contiguous,
// even run per member is packed into a scratch buffer on the device, member by member, each
// member's run padded to the longest, moved, and unpacked, all queued on the group's stream.
#include <algorithm>
#include <cstdio>
#include <cstdlib>
#include <map>
#include <tuple>
#include <utility>

#include "actor/comm.h"
#include "actor/movement.h"

namespace fr::actor {
namespace {

using boxing::Op;
using boxing::Task;

GroupReduce ReduceOf(sbp::Reduce r) {
  switch (r) {
    case sbp::Reduce::kSum: return GroupReduce::kSum;
    case sbp::Reduce::kMax: return GroupReduce::kMax;
    case sbp::Reduce::kMin: return GroupReduce::kMin;
  }
  return GroupReduce::kSum;
}

// Where part j (of p, along an axis) of a tensor lies: `rows` runs of `run` bytes, `pitch` apart,
// from byte `offset`.
struct PartLayout {
  size_t offset = 0, run = 0, pitch = 0, rows = 0;
  size_t bytes() const { return run * rows; }
};

PartLayout PartOf(const Tensor& t, int axis, int p, int j) {
  const AxisView v = Around(t.shape(), axis);
  const sbp::Range r = sbp::SplitRange(v.dim, p, j);
  const size_t es = SizeOf(t.dtype());
  return PartLayout{static_cast<size_t>(r.begin * v.inner) * es, static_cast<size_t>(r.size() * v.inner) * es,
                    static_cast<size_t>(v.dim * v.inner) * es, static_cast<size_t>(v.outer)};
}

class DeviceCommunicator final : public Communicator {
 public:
  DeviceCommunicator(std::unique_ptr<Communicator> inner, std::unique_ptr<GroupMaker> maker, DeviceType type)
      : inner_(std::move(inner)), maker_(std::move(maker)), type_(type) {}

  ~DeviceCommunicator() override {
    if (!pending_.empty()) {
      std::fprintf(stderr, "[actor] rank %d: communicator destroyed with %zu movements in flight\n", rank(), pending_.size());
      std::fflush(stderr);
      Abort(1);
    }
  }

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }

  Status Prepare(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& input_bytes) override {
    RETURN_IF_ERROR(inner_->Prepare(groups, input_bytes));  // checks the groups, and serves host tensors
    for (size_t id = 0; id < groups.size(); ++id) {
      const std::vector<int>& g = groups[id];
      const auto k = std::find(g.begin(), g.end(), rank()) - g.begin();
      auto it = groups_.find(static_cast<int>(id));
      if (it != groups_.end() && it->second.ranks == g) continue;
      if (it != groups_.end()) {
        for (const auto& [h, p] : pending_)
          if (p.group == &it->second) return MovementError(rank(), "prepare group " + GroupString(g), "movements in flight on it");
        it->second.group->Record()->Wait();  // the last plan's movements are done with it
        groups_.erase(it);
      }
      if (k == static_cast<std::ptrdiff_t>(g.size())) continue;
      Result<std::unique_ptr<CollectiveGroup>> made = maker_->Make(g, static_cast<int>(k));
      if (!made.ok())
        return MovementError(rank(), "prepare group " + GroupString(g) + " (collective " + std::to_string(id) + ")",
                             made.status().message());
      groups_[static_cast<int>(id)] = Group{g, std::move(*made), nullptr};
    }
    return Status::Ok();
  }
  // inner_'s, for tensors elsewhere: the groups run every collective of this device's tensors.
  std::shared_ptr<Storage> InputBuffer(int collective, int64_t bytes) override {
    std::shared_ptr<Storage> b = inner_->InputBuffer(collective, bytes);
    return b && b->device().type == type_ ? nullptr : b;
  }
  Status AwaitInputBuffer(int collective) override { return inner_->AwaitInputBuffer(collective); }
  int64_t buffered_acts() const override { return inner_->buffered_acts(); }
  // On CUDA, NCCL's kernels may wait for a peer that is gone, and every device synchronisation
  // after them (a stream thread's, the runtime's at the end of the run) with them: abort the
  // groups too. A sim device's host groups finish what they run (or are left to the exit).
  void Cancel() override {
    inner_->Cancel();
    if (type_ != DeviceType::kCuda) return;
    for (auto& [id, g] : groups_) g.group->Abort();
    for (auto& [key, g] : links_) g.group->Abort();
  }

  // A 2-member group per link this rank is in: NCCL matches a pair's messages by order, and the
  // runtime starts sends and receives of different tags in any order, one tag's in act order.
  Status PrepareLinks(const std::vector<Link>& links) override {
    RETURN_IF_ERROR(inner_->PrepareLinks(links));
    std::map<LinkKey, Group> kept;
    for (const Link& l : links) {
      if (l.sender != rank() && l.receiver != rank()) continue;
      const LinkKey key{l.sender, l.receiver, l.tag};
      if (kept.count(key)) continue;
      if (auto it = links_.find(key); it != links_.end()) {
        kept.insert(links_.extract(it));  // the node moves: in-flight movements keep pointing at it
        continue;
      }
      const std::vector<int> pair = {l.sender, l.receiver};
      Result<std::unique_ptr<CollectiveGroup>> made = maker_->Make(pair, l.sender == rank() ? 0 : 1);
      if (!made.ok())
        return MovementError(rank(), "prepare the sends from rank " + std::to_string(l.sender) + " to rank " +
                                         std::to_string(l.receiver) + " tag " + std::to_string(l.tag),
                             made.status().message());
      kept.emplace(key, Group{pair, std::move(*made), nullptr});
    }
    for (const auto& [key, g] : links_)
      for (const auto& [h, p] : pending_)
        if (p.group == &g) return MovementError(rank(), "prepare links", "movements in flight on a link no longer listed");
    links_ = std::move(kept);
    return Status::Ok();
  }

  Result<CommHandle> Start(const Task& t, std::vector<Tensor> in, std::vector<Tensor> out, DeviceStream* after) override {
    const bool p2p = t.op == Op::kSend || t.op == Op::kRecv;
    auto link = links_.end();
    if (p2p && t.peer >= 0) link = links_.find(t.op == Op::kSend ? LinkKey{rank(), t.peer, t.tag} : LinkKey{t.peer, rank(), t.tag});
    if ((p2p && link == links_.end()) || !OnDevice(in) || !OnDevice(out)) {  // a link not prepared: inner_'s way
      ASSIGN_OR_RETURN(CommHandle h, inner_->Start(t, std::move(in), std::move(out), after));
      const int id = next_id_++;
      inner_ids_[h.id] = id;
      return CommHandle{id};
    }
    RETURN_IF_ERROR(CheckMovement(t, rank(), size(), in, out));
    const std::string what = Describe(t);
    if (p2p) return StartLink(link->second, t, std::move(in), std::move(out), after);
    auto it = groups_.find(t.collective);
    if (it == groups_.end() || !(it->second.ranks == t.group))
      return MovementError(rank(), what, "group not prepared (Prepare it on every rank first)");
    const DType dt = in[0].dtype();
    const bool reduces = t.op == Op::kAllReduce || t.op == Op::kReduceScatter;
    if (reduces && dt != DType::kF32 && dt != DType::kI64 && dt != DType::kI32)
      return MovementError(rank(), what, "no reduction for " + std::string(Name(dt)));
    Group& g = it->second;
    if (after) g.group->After(*after);
    Pending p{std::move(in), std::move(out), nullptr, nullptr, &g, what};
    Status s;
    switch (t.op) {
      case Op::kAllReduce: s = AllReduce(p, ReduceOf(t.reduce)); break;
      case Op::kAllGather: s = AllGather(p, t.concat_axis); break;
      case Op::kReduceScatter: s = ReduceScatter(p, t.split_axis, ReduceOf(t.reduce)); break;
      case Op::kAllToAll: s = AllToAll(p, t.split_axis, t.concat_axis); break;
      default: s = Status::Runtime("not a collective");
    }
    if (!s.ok()) return MovementError(rank(), what, s.message());
    p.done = g.group->Record();
    const int id = next_id_++;
    pending_.emplace(id, std::move(p));
    return CommHandle{id};
  }

  Result<std::vector<CommHandle>> Poll() override {
    std::vector<CommHandle> done;
    if (!inner_ids_.empty()) {
      ASSIGN_OR_RETURN(std::vector<CommHandle> inner_done, inner_->Poll());
      for (CommHandle h : inner_done) {
        auto it = inner_ids_.find(h.id);
        if (it == inner_ids_.end()) continue;
        done.push_back(CommHandle{it->second});
        inner_ids_.erase(it);
      }
    }
    for (auto it = pending_.begin(); it != pending_.end();) {
      if (Status s = it->second.group->group->Error(); !s.ok()) return MovementError(rank(), it->second.what, s.message());
      if (!it->second.done->Done()) {
        ++it;
        continue;
      }
      done.push_back(CommHandle{it->first});
      it = pending_.erase(it);
    }
    return done;
  }
  int in_flight() const override { return static_cast<int>(pending_.size() + inner_ids_.size()); }

  Status BeginNotices(int64_t run) override { return inner_->BeginNotices(run); }
  Status Notify(const StepNotice& mine) override { return inner_->Notify(mine); }
  Result<std::vector<int>> PollNotices(StepNotice* merged) override { return inner_->PollNotices(merged); }
  [[noreturn]] void Abort(int code) override {
    for (auto& [id, g] : groups_) g.group->Abort();
    for (auto& [key, g] : links_) g.group->Abort();
    inner_->Abort(code);
    std::abort();  // not reached: inner_'s Abort does not return either
  }

 private:
  struct Group {
    std::vector<int> ranks;
    std::unique_ptr<CollectiveGroup> group;
    std::shared_ptr<Storage> scratch;  // reused by the group's movements, which its stream orders
  };
  struct Pending {
    std::vector<Tensor> in, out;       // kept alive: the group reads and writes them
    std::shared_ptr<Event> done;
    std::shared_ptr<Storage> scratch;  // kept alive while a larger one replaces it
    Group* group;
    std::string what;
  };

  using LinkKey = std::tuple<int, int, int>;  // sender, receiver, tag

  Result<CommHandle> StartLink(Group& g, const Task& t, std::vector<Tensor> in, std::vector<Tensor> out, DeviceStream* after) {
    if (after) g.group->After(*after);
    std::vector<CollectiveGroup::Part> parts(2);
    const DType dt = t.op == Op::kSend ? in[0].dtype() : out[0].dtype();
    if (t.op == Op::kSend) {
      parts[1].send = in[0].raw();
      parts[1].send_count = static_cast<size_t>(in[0].numel());
    } else {
      parts[0].recv = out[0].raw();
      parts[0].recv_count = static_cast<size_t>(out[0].numel());
    }
    const std::string what = Describe(t);
    if (Status s = g.group->Exchange(parts, dt); !s.ok()) return MovementError(rank(), what, s.message());
    Pending p{std::move(in), std::move(out), g.group->Record(), nullptr, &g, what};
    const int id = next_id_++;
    pending_.emplace(id, std::move(p));
    return CommHandle{id};
  }

  bool OnDevice(const std::vector<Tensor>& ts) const {
    for (const Tensor& t : ts)
      if (t.defined() && t.device().type != type_) return false;
    return true;
  }

  // The group's scratch buffer of at least `bytes`, on the device of the movement's tensors.
  char* Scratch(Pending& p, size_t bytes) {
    Group& g = *p.group;
    if (!g.scratch || g.scratch->bytes() < bytes)
      g.scratch = std::make_shared<Storage>(std::max(bytes, g.scratch ? g.scratch->bytes() * 2 : bytes), p.in[0].device());
    p.scratch = g.scratch;
    return static_cast<char*>(g.scratch->data());
  }

  static void CopyBytes(CollectiveGroup& g, void* dst, const void* src, size_t bytes) {
    if (bytes && dst != src) g.Copy2D(dst, bytes, src, bytes, bytes, 1);
  }
  // Part `l` of a tensor at `base` to contiguous `dst` (pack), or back (unpack).
  static void Pack(CollectiveGroup& g, char* dst, const char* base, const PartLayout& l) {
    if (l.bytes()) g.Copy2D(dst, l.run, base + l.offset, l.pitch, l.run, l.rows);
  }
  static void Unpack(CollectiveGroup& g, char* base, const char* src, const PartLayout& l) {
    if (l.bytes()) g.Copy2D(base + l.offset, l.pitch, src, l.run, l.run, l.rows);
  }

  Status AllReduce(Pending& p, GroupReduce op) {
    CollectiveGroup& g = *p.group->group;
    const DType dt = p.in[0].dtype();
    const size_t es = SizeOf(dt);
    if (p.in.size() == 1) return g.AllReduce(p.in[0].raw(), p.out[0].raw(), p.in[0].bytes() / es, dt, op);
    if (LaidOutAlike(p.in, p.out)) {  // the runtime's bucket layout: one reduction over the span, gaps included
      const char* begin = static_cast<const char*>(p.in.front().raw());
      const size_t span = static_cast<size_t>(static_cast<const char*>(p.in.back().raw()) - begin) + p.in.back().bytes();
      return g.AllReduce(begin, p.out.front().raw(), span / es, dt, op);
    }
    size_t total = 0;
    for (const Tensor& x : p.in) total += x.bytes();
    char* s = Scratch(p, total);
    size_t at = 0;
    for (const Tensor& x : p.in) {
      CopyBytes(g, s + at, x.raw(), x.bytes());
      at += x.bytes();
    }
    RETURN_IF_ERROR(g.AllReduce(s, s, total / es, dt, op));
    at = 0;
    for (const Tensor& y : p.out) {
      CopyBytes(g, y.raw(), s + at, y.bytes());
      at += y.bytes();
    }
    return Status::Ok();
  }

  // Each member's bytes in a bucket laid out by member: member j's parts of every tensor in turn.
  static std::vector<size_t> MemberBytes(const std::vector<Tensor>& whole, int axis, int members) {
    std::vector<size_t> n(static_cast<size_t>(members), 0);
    for (const Tensor& t : whole)
      for (int j = 0; j < members; ++j) n[static_cast<size_t>(j)] += PartOf(t, axis, members, j).bytes();
    return n;
  }

  // Whether one tensor's parts along `axis` are contiguous and even: the group's flat layout.
  static bool Flat(const std::vector<Tensor>& whole, int axis, int members) {
    if (whole.size() != 1) return false;
    const AxisView v = Around(whole[0].shape(), axis);
    return v.outer == 1 && v.dim % members == 0;
  }

  Status AllGather(Pending& p, int axis) {
    CollectiveGroup& g = *p.group->group;
    const int m = g.members(), k = g.index();
    const DType dt = p.in[0].dtype();
    const size_t es = SizeOf(dt);
    if (Flat(p.out, axis, m)) return g.AllGather(p.in[0].raw(), p.out[0].raw(), p.in[0].bytes() / es, dt);
    const std::vector<size_t> n = MemberBytes(p.out, axis, m);
    const size_t most = (*std::max_element(n.begin(), n.end()) + es - 1) / es * es;
    char* s = Scratch(p, most * static_cast<size_t>(m));
    size_t at = most * static_cast<size_t>(k);
    for (const Tensor& x : p.in) {  // this member's parts are whole tensors
      CopyBytes(g, s + at, x.raw(), x.bytes());
      at += x.bytes();
    }
    RETURN_IF_ERROR(g.AllGather(s + most * static_cast<size_t>(k), s, most / es, dt));
    for (int j = 0; j < m; ++j) {
      at = most * static_cast<size_t>(j);
      for (const Tensor& y : p.out) {
        const PartLayout l = PartOf(y, axis, m, j);
        Unpack(g, static_cast<char*>(y.raw()), s + at, l);
        at += l.bytes();
      }
    }
    return Status::Ok();
  }

  Status ReduceScatter(Pending& p, int axis, GroupReduce op) {
    CollectiveGroup& g = *p.group->group;
    const int m = g.members();
    const DType dt = p.in[0].dtype();
    const size_t es = SizeOf(dt);
    if (Flat(p.in, axis, m)) return g.ReduceScatter(p.in[0].raw(), p.out[0].raw(), p.out[0].bytes() / es, dt, op);
    const std::vector<size_t> n = MemberBytes(p.in, axis, m);
    const size_t most = (*std::max_element(n.begin(), n.end()) + es - 1) / es * es;
    char* s = Scratch(p, most * static_cast<size_t>(m + 1));  // m members' runs, then the result
    char* result = s + most * static_cast<size_t>(m);  // a member's padding reduces into padding, never read
    for (int j = 0; j < m; ++j) {
      size_t at = most * static_cast<size_t>(j);
      for (const Tensor& x : p.in) {
        const PartLayout l = PartOf(x, axis, m, j);
        Pack(g, s + at, static_cast<const char*>(x.raw()), l);
        at += l.bytes();
      }
    }
    RETURN_IF_ERROR(g.ReduceScatter(s, result, most / es, dt, op));
    size_t at = 0;
    for (const Tensor& y : p.out) {  // this member's parts are whole tensors
      CopyBytes(g, y.raw(), result + at, y.bytes());
      at += y.bytes();
    }
    return Status::Ok();
  }

  // To member j goes part j of x along split_axis; from member j comes part j of y along
  // concat_axis. Parts contiguous in their tensor move from and to it in place.
  Status AllToAll(Pending& p, int split_axis, int concat_axis) {
    CollectiveGroup& g = *p.group->group;
    const int m = g.members();
    const Tensor &x = p.in[0], &y = p.out[0];
    const DType dt = x.dtype();
    const size_t es = SizeOf(dt);
    const bool pack = Around(x.shape(), split_axis).outer > 1, unpack = Around(y.shape(), concat_axis).outer > 1;
    char* s = (pack || unpack) ? Scratch(p, (pack ? x.bytes() : 0) + (unpack ? y.bytes() : 0)) : nullptr;
    char* send = pack ? s : static_cast<char*>(x.raw());
    char* recv = unpack ? s + (pack ? x.bytes() : 0) : static_cast<char*>(y.raw());
    std::vector<CollectiveGroup::Part> parts(static_cast<size_t>(m));
    size_t sent = 0, received = 0;
    for (int j = 0; j < m; ++j) {
      const PartLayout ls = PartOf(x, split_axis, m, j), lr = PartOf(y, concat_axis, m, j);
      if (pack) Pack(g, send + sent, static_cast<const char*>(x.raw()), ls);
      CollectiveGroup::Part& part = parts[static_cast<size_t>(j)];
      part.send = send + (pack ? sent : ls.offset);
      part.send_count = ls.bytes() / es;
      part.recv = recv + (unpack ? received : lr.offset);
      part.recv_count = lr.bytes() / es;
      sent += ls.bytes();
      received += lr.bytes();
    }
    RETURN_IF_ERROR(g.Exchange(parts, dt));
    if (unpack) {
      received = 0;
      for (int j = 0; j < m; ++j) {
        const PartLayout l = PartOf(y, concat_axis, m, j);
        Unpack(g, static_cast<char*>(y.raw()), recv + received, l);
        received += l.bytes();
      }
    }
    return Status::Ok();
  }

  std::unique_ptr<Communicator> inner_;
  std::unique_ptr<GroupMaker> maker_;
  DeviceType type_;
  std::map<int, Group> groups_;     // by collective id, the groups this rank is in
  std::map<LinkKey, Group> links_;  // the links this rank sends or receives on
  std::map<int, Pending> pending_;  // by handle id
  std::map<int, int> inner_ids_;    // inner_'s handle id -> ours, for movements inner_ runs
  int next_id_ = 0;
};

}  // namespace

std::unique_ptr<Communicator> WithDeviceGroups(std::unique_ptr<Communicator> inner, std::unique_ptr<GroupMaker> maker,
                                               DeviceType type) {
  return std::make_unique<DeviceCommunicator>(std::move(inner), std::move(maker), type);
}

}  // namespace fr::actor
