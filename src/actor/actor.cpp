#include "actor/actor.h"

#include <algorithm>

#include "actor/movement.h"
#include "actor/runtime.h"
#include "boxing/simulate.h"
#include "ops/op.h"

namespace fr::actor {

using ir::TaskKind;

bool MovesAcrossRanks(const ir::TaskDesc& t) {
  if (t.kind != TaskKind::kBoxing) return false;
  switch (t.move.op) {
    case boxing::Op::kSend: case boxing::Op::kRecv: case boxing::Op::kAllReduce: case boxing::Op::kAllGather:
    case boxing::Op::kReduceScatter: case boxing::Op::kAllToAll: return true;
    default: return false;
  }
}

Actor::Actor(Runtime& rt, const ir::Plan& plan, const ir::TaskDesc& task)
    : rt_(rt), plan_(plan), task_(task), stream_(&rt.ComputeStream(task.device)) {
  total_ = plan.Acts(task, rt.steps());
  const int64_t m = plan.micro_batches;
  const bool variable = task.kind == TaskKind::kVariable;
  // Ratio of this task's acts to a regst's pieces: M when a per-micro-batch task meets a per-step regst.
  auto ratio = [&](const ir::RegstDesc& r) { return (!task.per_step && r.per_step) ? m : int64_t{1}; };
  std::vector<int> reads = task.kind == TaskKind::kBoxing ? task.move.in : std::vector<int>{};
  for (const ir::TaskInput& i : task.in) reads.push_back(i.regst);
  for (int r : reads) {
    if (r < 0 || InPort(r)) continue;
    const ir::RegstDesc& rd = plan.regsts[static_cast<size_t>(r)];
    Port p;
    p.regst = r;
    p.peer = rd.producer;
    p.ratio = ratio(rd);
    p.skip = variable ? 1 : 0;  // a variable reads the step's gradient after emitting the parameter
    p.copied = plan.CopiedIn(r);
    p.pieces = (total_ - p.skip) / p.ratio;
    in_.push_back(std::move(p));
  }
  for (int r : task.out) {
    const ir::RegstDesc& rd = plan.regsts[static_cast<size_t>(r)];
    Port p;
    p.regst = r;
    p.ratio = ratio(rd);
    p.pieces = variable ? rt.steps() : total_ / p.ratio;
    for (int s = 0; s < rd.regst_num; ++s) p.slots.push_back(s);
    p.pending.assign(static_cast<size_t>(rd.regst_num), 0);
    p.copied = plan.CopiedOut(r);
    out_.push_back(std::move(p));
  }
  for (int r : task.out)
    for (int c : plan.regsts[static_cast<size_t>(r)].consumers)
      if (MovesAcrossRanks(plan.tasks[static_cast<size_t>(c)])) feeds_movement_ = true;
}

Actor::Port* Actor::InPort(int regst) {
  for (Port& p : in_)
    if (p.regst == regst) return &p;
  return nullptr;
}

void Actor::Handle(const Msg& m) {
  // A copy's message about a device regst: the sender's kernels are queued on the compute stream.
  auto mark = [&] {
    const ir::RegstDesc& rd = plan_.regsts[static_cast<size_t>(m.regst)];
    if (task_.kind == TaskKind::kCopy && rd.device.type != DeviceType::kCpu) marks_[{m.regst, m.slot}] = rt_.ComputeStream(rd.device).Record();
  };
  if (m.kind == MsgKind::kReq) {
    mark();
    InPort(m.regst)->slots.push_back(m.slot);
  } else if (m.kind == MsgKind::kAck) {
    for (Port& p : out_) {
      if (p.regst != m.regst) continue;
      if (--p.pending[static_cast<size_t>(m.slot)] == 0) {
        mark();
        rt_.Release(p.regst, m.slot);
        p.slots.push_back(m.slot);
      }
    }
  } else if (m.kind == MsgKind::kCommDone) {
    CommDone();
    return;
  }
  TryAct();
}

bool Actor::Ready() const {
  const int64_t k = next_;
  for (const Port& p : in_)
    if (p.Uses(k) && p.slots.empty()) return false;
  for (const Port& p : out_) {
    if (p.Starts(k) && p.slots.empty()) return false;
    // A variable updates its parameter in place: every reader must have given it back.
    if (task_.kind == TaskKind::kVariable && p.pending[0] != 0) return false;
  }
  return rt_.MayStart(NextStep());
}

bool Actor::Communicates() const { return MovesAcrossRanks(task_); }

void Actor::TryAct() {
  if (deferred_) {
    if (!announced_ && next_ < total_ && !in_flight_ && Ready()) {
      announced_ = true;
      rt_.Announce(this);
    }
    return;
  }
  while (next_ < total_ && !in_flight_ && Ready()) ActOnce();
}

std::pair<int64_t, int64_t> Actor::NextKey() const {
  const int64_t m = plan_.micro_batches;
  if (task_.kind == TaskKind::kVariable) return {next_, -1};
  if (task_.per_step) return {next_, m};
  return {next_ / m, next_ % m};
}

int64_t Actor::NextStep() const {
  if (task_.kind == TaskKind::kVariable) return next_ - 1;
  return task_.per_step ? next_ : next_ / plan_.micro_batches;
}

void Actor::RunNext() {
  announced_ = false;
  if (next_ < total_ && !in_flight_ && Ready()) ActOnce();
  TryAct();
}

void Actor::ActOnce() {
  const int64_t k = next_;
  for (Port& p : out_) {
    if (p.Starts(k)) {
      p.current = p.slots.front();
      p.slots.pop_front();
      if (Status s = rt_.Acquire(p.regst, p.current); !s.ok()) {
        rt_.Fail(s);
        next_ = total_;
        return;
      }
      // A copy onto a device may still be reading the slot's last contents.
      if (p.copied)
        if (std::shared_ptr<Event> read = rt_.TakeReadDone(p.regst, p.current)) read->Wait();
    }
  }
  // What a copy onto this device filled: the stream that reads it waits for the copy.
  for (const Port& p : in_) {
    if (!p.copied || !p.Starts(k)) continue;
    DeviceStream& reads_on = task_.kind == TaskKind::kCopy ? rt_.CopyStream(task_.device) : *stream_;
    if (const std::shared_ptr<Event>& ready = rt_.Filled(p.regst, p.slots.front())) reads_on.Wait(ready);
  }
  const auto& on_act = rt_.options().on_act;
  if (on_act) on_act(task_, k, true);
  if (Communicates()) {  // started here, finished by CommDone when the communicator says so
    std::vector<Tensor> in;
    for (int r : task_.move.in) in.push_back(RegstTensor(r));
    std::vector<Tensor> out;  // one per output regst: several for a gradient bucket
    for (const Port& p : out_) out.push_back(rt_.Slot(p.regst, p.current));
    Status s = rt_.StartComm(this, task_.move, std::move(in), std::move(out));
    if (!s.ok()) {
      rt_.Fail(s.With("[actor] rank " + std::to_string(task_.rank) + ", task " + task_.name + ": "));
      next_ = total_;
      return;
    }
    in_flight_ = true;
    return;
  }
  if (JoinsGroup(k)) {  // finished by CommDone when the group's kernel is queued (which clears update_in_)
    const ir::Node& node = plan_.nodes[static_cast<size_t>(task_.node)];
    for (size_t i = 0; i < node.in.size(); ++i) update_in_.push_back(InputTensor(i));
    update_step_ = rt_.first_step() + k - 1;
    in_flight_ = true;
    if (Status s = rt_.JoinUpdate(this, k); !s.ok()) {
      rt_.Fail(s);
      next_ = total_;
    }
    return;
  }
  Status s = Body(k);
  if (!s.ok()) {
    if (on_act) on_act(task_, k, false);
    rt_.Fail(s);
    next_ = total_;
    return;
  }
  Finish();
}

void Actor::CommDone() {
  in_flight_ = false;
  // The group's kernel is queued: holding the gradient on would keep its register from the pool,
  // which then allocates a fresh one next step.
  update_in_.clear();
  Finish();
  TryAct();
}

void Actor::Finish() {
  const int64_t k = next_;
  const auto& on_act = rt_.options().on_act;
  if (on_act) on_act(task_, k, false);
  for (Port& p : in_) {
    if (!p.Ends(k)) continue;
    rt_.Send(Msg{MsgKind::kAck, p.peer, task_.id, p.regst, p.slots.front()});
    p.slots.pop_front();
  }
  for (Port& p : out_) {
    if (!p.Ends(k)) continue;
    const auto& consumers = plan_.regsts[static_cast<size_t>(p.regst)].consumers;
    if (consumers.empty()) {
      rt_.Release(p.regst, p.current);
      p.slots.push_back(p.current);
    } else {
      p.pending[static_cast<size_t>(p.current)] = static_cast<int>(consumers.size());
      for (int c : consumers) rt_.Send(Msg{MsgKind::kReq, c, task_.id, p.regst, p.current});
    }
    p.current = -1;
  }
  ++next_;
  acts_done_.store(next_, std::memory_order_relaxed);
  if (next_ == total_) rt_.ActorFinished();
}

Tensor Actor::InputTensor(size_t i) const {
  const ir::TaskInput& in = task_.in[i];
  if (task_.kind == TaskKind::kVariable && i == 0) return rt_.Slot(task_.out[0], 0);
  if (in.konst >= 0) return rt_.Const(in.konst, task_.device);
  if (in.regst < 0) return Tensor();
  return RegstTensor(in.regst);
}

Tensor Actor::RegstTensor(int r) const {
  for (const Port& p : in_)
    if (p.regst == r) return rt_.Slot(r, p.slots.front());
  FR_CHECK(false, "no port for regst " + std::to_string(r));
  return Tensor();
}

Status Actor::Compute(int64_t step, int64_t micro) {
  const ir::Node& node = plan_.nodes[static_cast<size_t>(task_.node)];
  std::vector<Tensor> in, out;
  for (size_t i = 0; i < node.in.size(); ++i) in.push_back(InputTensor(i));
  for (size_t i = 0; i < out_.size(); ++i) out.push_back(rt_.Slot(out_[i].regst, out_[i].current));
  KernelCtx ctx{node, in, out, step, micro, plan_.micro_batches, stream_};
  return Kernel(node.op, task_.device.type)(ctx);
}

KernelCtx Actor::UpdateCtx() const {
  return KernelCtx{plan_.nodes[static_cast<size_t>(task_.node)], update_in_, rt_.OptimizerState(task_.id), update_step_, 0,
                   plan_.micro_batches, stream_};
}

Status Actor::Variable(int64_t k) {
  if (k == 0 || task_.node < 0) return Status::Ok();  // act 0 only emits the initial value
  const ir::Node& node = plan_.nodes[static_cast<size_t>(task_.node)];
  std::vector<Tensor> in;
  for (size_t i = 0; i < node.in.size(); ++i) in.push_back(InputTensor(i));
  const std::vector<Tensor>& state = rt_.OptimizerState(task_.id);
  KernelCtx ctx{node, in, state, rt_.first_step() + k - 1, 0, plan_.micro_batches, stream_};
  return Kernel(node.op, task_.device.type)(ctx);
}

// Queued on the device's copy stream, which first waits for the kernels the copy depends on, by
// their mark (marks_): off the device, the source's producer; onto it, the kernels that last read
// the destination slot (a consumer acknowledges a slot when its kernels are queued, not run; the
// slot's memory is its own, not the pool's). Not for everything queued on the compute stream
// since: the copy of the next micro-batch's inputs overlaps this one's compute.
//   Onto a device, the act ends once the copy is queued: its consumers' streams wait for it by an
// event (Runtime::SetFilled), and the source slot's producer waits for it before writing the slot
// again (SetReadDone; the slot is pinned and not pooled). Off a device, the act ends when the
// copy has (the host reads the result next), and then the data errors the source's producers
// met are reported.
Status Actor::Copy() {
  const int in_regst = task_.in[0].regst;
  const int in_slot = InPort(in_regst)->slots.front();
  const Tensor src = RegstTensor(in_regst);
  const Tensor dst = rt_.Slot(out_[0].regst, out_[0].current);
  FR_CHECK(src.bytes() == dst.bytes() && !(src.device() == dst.device()), task_.name + ": not a copy between devices");
  const bool onto_device = src.device().type == DeviceType::kCpu;
  DeviceStream& s = rt_.CopyStream(task_.device);
  const std::shared_ptr<Event>& after = onto_device ? marks_[{out_[0].regst, out_[0].current}] : marks_[{in_regst, in_slot}];
  if (after) s.Wait(after);
  s.Copy(dst.raw(), src.raw(), src.bytes());
  if (onto_device) {
    std::shared_ptr<Event> done = s.Record();
    rt_.SetFilled(out_[0].regst, out_[0].current, done);
    rt_.SetReadDone(in_regst, in_slot, std::move(done));
    return Status::Ok();
  }
  s.Synchronize();
  return BackendOf(src.device().type)->TakeDataError(s);
}

namespace {

// A local movement of `m` from `in` (by m.in) into `out`, on host-addressable memory.
Status MoveLocally(const boxing::Task& m, const std::vector<Tensor>& in, const Tensor& out, const std::string& task) {
  switch (m.op) {
    case boxing::Op::kCopy: out.CopyFrom(in[0]); return Status::Ok();
    case boxing::Op::kSlice: out.CopyFrom(boxing::SliceOf(in[0], m.regions[0])); return Status::Ok();
    case boxing::Op::kZero: out.Zero(); return Status::Ok();
    case boxing::Op::kAssemble:
      out.Zero();
      for (size_t i = 0; i < in.size(); ++i) boxing::WriteRegion(out, m.regions[i], in[i]);
      return Status::Ok();
    case boxing::Op::kReduce:
      out.CopyFrom(in[0]);
      for (size_t i = 1; i < in.size(); ++i) boxing::ReduceInto(out, in[i], m.reduce);
      return Status::Ok();
    default:
      return Status::Runtime("[actor] " + task + ": " + boxing::Name(m.op) +
                             " needs the multi-rank runtime, which this version of flowrun does not have");
  }
}

}  // namespace

// Local data movement runs here; collectives and send/recv need the multi-rank runtime. On a
// device the host cannot address (a GPU's memory), it runs on host copies: after the device's
// kernels (the inputs' producers, the slot's last readers), the inputs are copied to the host
// and the result back. Local movements are rare (layouts that change within a rank).
Status Actor::Move() {
  const boxing::Task& m = task_.move;
  const Tensor out = m.out >= 0 ? rt_.Slot(m.out, out_[0].current) : Tensor();
  std::vector<Tensor> in;
  for (int r : m.in) in.push_back(RegstTensor(r));
  bool staged = !HostVisible(out);
  for (const Tensor& x : in) staged = staged || !HostVisible(x);
  if (!staged) return MoveLocally(m, in, out, task_.name);
  rt_.ComputeStream(task_.device).Synchronize();
  for (Tensor& x : in) x = x.ToHost();
  const Tensor host = out.defined() ? Tensor(out.dtype(), out.shape()) : Tensor();
  RETURN_IF_ERROR(MoveLocally(m, in, host, task_.name));
  if (out.defined()) out.CopyFrom(host);
  return Status::Ok();
}

Status Actor::Body(int64_t k) {
  const int64_t m = plan_.micro_batches;
  const int64_t step = rt_.first_step() + (task_.per_step ? k : k / m), micro = task_.per_step ? 0 : k % m;
  const auto& on_device = rt_.options().on_device_act;
  if (on_device && task_.device.type != DeviceType::kCpu &&
      (task_.kind == TaskKind::kCompute || task_.kind == TaskKind::kVariable)) {  // its kernels' device time
    std::shared_ptr<Event> begin = stream_->RecordTimed();
    Status s = task_.kind == TaskKind::kCompute ? Compute(step, micro) : Variable(k);
    on_device(task_, k, std::move(begin), stream_->RecordTimed());
    return s;
  }
  switch (task_.kind) {
    case TaskKind::kCompute: return Compute(step, micro);
    case TaskKind::kVariable: return Variable(k);
    case TaskKind::kData:
      for (const Port& p : out_) RETURN_IF_ERROR(rt_.Feed(p.regst, step, micro, rt_.Slot(p.regst, p.current)));
      return Status::Ok();
    case TaskKind::kBoxing: return Move();
    case TaskKind::kCopy: return Copy();
    case TaskKind::kLossSink:  // the micro-batches' losses summed
      rt_.ReportLoss(step, rt_.Slot(in_[0].regst, in_[0].slots.front()).data<float>()[0] / static_cast<double>(m));
      return Status::Ok();
    case TaskKind::kNormSink:
      rt_.ReportGradNormSq(step, rt_.Slot(in_[0].regst, in_[0].slots.front()).data<float>()[0]);
      return Status::Ok();
    case TaskKind::kStatSink:
      rt_.ReportStat(task_.param, step, micro, rt_.Slot(in_[0].regst, in_[0].slots.front()));
      return Status::Ok();
  }
  return Status::Ok();
}

}  // namespace fr::actor
