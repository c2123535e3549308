#include "actor/runtime.h"

#include <algorithm>
#include <cmath>

#include "actor/comm.h"
#include "boxing/simulate.h"

namespace fr::actor {
namespace {

// The device a host register's copies move it onto (Plan::CopiedOut), whose backend pins it.
DeviceType DeviceOfCopies(const ir::Plan& plan, const ir::RegstDesc& r) {
  for (int c : r.consumers) {
    const ir::TaskDesc& t = plan.tasks[static_cast<size_t>(c)];
    if (t.kind == ir::TaskKind::kCopy && t.device.type != DeviceType::kCpu) return t.device.type;
  }
  return DeviceType::kCpu;
}

}  // namespace

Runtime::Runtime(const ir::Plan& plan, const ir::Graph& graph, int rank, Communicator* comm, Runtime* evaluates)
    : plan_(plan), graph_(graph), rank_(rank), comm_(comm) {
  if (evaluates) pool_ = evaluates->pool_;
  std::vector<bool> shared(plan.regsts.size(), false);  // a variable that is the training's parameter
  slots_.resize(plan.regsts.size());
  filled_.resize(plan.regsts.size());
  read_done_.resize(plan.regsts.size());
  pooled_.assign(plan.regsts.size(), false);
  in_window_.assign(plan.regsts.size(), -1);
  for (const ir::RegstDesc& r : plan.regsts) {
    if (r.rank != rank_) continue;
    const auto n = static_cast<size_t>(r.regst_num);
    slots_[static_cast<size_t>(r.id)].resize(n);
    filled_[static_cast<size_t>(r.id)].resize(n);
    read_done_[static_cast<size_t>(r.id)].resize(n);
    // A variable's slot is the parameter, alive for the whole run. A copy's into a device has its
    // own memory (the copy stream writes it, ordered only after that slot's own readers: pooled
    // memory's last user may be any kernel still queued), and so has a host slot a copy reads onto
    // a device, pinned (the copy reads it after the copy act has ended). Every other slot is pooled.
    const bool variable = plan.tasks[static_cast<size_t>(r.producer)].kind == ir::TaskKind::kVariable;
    const bool copied_out = plan.CopiedOut(r.id);
    if (!variable && !plan.CopiedIn(r.id) && !copied_out) {
      pooled_[static_cast<size_t>(r.id)] = true;
      continue;
    }
    if (variable && evaluates) {
      const std::string& name = graph.value(plan.tasks[static_cast<size_t>(r.producer)].param).name;
      const ir::ValueId v = evaluates->graph_.Find(name);
      const Tensor p = v == ir::kNoValue ? Tensor() : evaluates->Param(v);
      if (p.defined()) {
        // Evaluation lays every parameter out as training does (driver/pipeline.h: CompileEval).
        FR_CHECK(p.shape() == r.type.shape && p.dtype() == r.type.dtype && p.device() == r.device && r.regst_num == 1,
                 "parameter '" + name + "' is laid out differently in training and in evaluation");
        slots_[static_cast<size_t>(r.id)][0] = p;
        shared[static_cast<size_t>(r.id)] = true;
        continue;
      }
    }
    for (Tensor& t : slots_[static_cast<size_t>(r.id)]) {
      if (copied_out) {  // pinned for this rank's device, where its copies run
        const size_t bytes = static_cast<size_t>(r.type.shape.numel()) * SizeOf(r.type.dtype);
        t = Tensor(r.type.dtype, r.type.shape, std::make_shared<Storage>(bytes, Storage::PinnedFor{DeviceOfCopies(plan, r)}));
      } else {
        t = Tensor(r.type.dtype, r.type.shape, r.device);
      }
    }
  }
  for (const ir::TaskDesc& t : plan.tasks)
    if (t.rank == rank_) LayOutBucket(t);
  parts_per_step_ = std::any_of(plan.tasks.begin(), plan.tasks.end(), [](const ir::TaskDesc& t) { return t.kind == ir::TaskKind::kNormSink; }) ? 2 : 1;
  state_.resize(plan.tasks.size());
  for (const ir::TaskDesc& t : plan.tasks) {  // a variable's slot starts as its initial piece
    if (t.rank != rank_ || t.kind != ir::TaskKind::kVariable) continue;
    if (!shared[static_cast<size_t>(t.out[0])]) Slot(t.out[0], 0).CopyFrom(plan.consts[static_cast<size_t>(t.param_piece)]);
    if (t.node < 0) continue;
    if (t.update_group >= 0) ++update_groups_[t.update_group].members;
    const ir::TensorType& piece = plan.regsts[static_cast<size_t>(t.out[0])].type;  // the state's shape
    for (size_t i = 0; i < plan.nodes[static_cast<size_t>(t.node)].out.size(); ++i)
      state_[static_cast<size_t>(t.id)].emplace_back(piece.dtype, piece.shape, t.device);
  }
  // Constants read on a device are copied there once; copies run on a stream per device.
  for (const ir::TaskDesc& t : plan.tasks) {
    if (t.rank != rank_) continue;
    // Kernels reach only their own device's memory (slots are allocated on their regst's device):
    // a register elsewhere means lowering missed a copy. Checked once here, not at every act.
    std::vector<int> reads = t.move.in;
    for (const ir::TaskInput& in : t.in) reads.push_back(in.regst);
    for (int r : reads) {
      if (r < 0 || t.kind == ir::TaskKind::kCopy) continue;
      const Device on = plan.regsts[static_cast<size_t>(r)].device;
      FR_CHECK(on == t.device, t.name + " on " + ToString(t.device) + " reads regst " + std::to_string(r) + " on " + ToString(on) +
                                   ": a copy between devices is missing");
    }
    if (t.kind == ir::TaskKind::kCopy && !copy_streams_.count({t.device.type, t.device.index}))
      copy_streams_[{t.device.type, t.device.index}] = BackendOf(t.device.type)->NewStream(t.device.index);
    if (!compute_streams_.count({t.device.type, t.device.index}))
      compute_streams_[{t.device.type, t.device.index}] = BackendOf(t.device.type)->NewStream(t.device.index);
    if (!BackendOf(t.device.type)->host_visible() && !error_streams_.count({t.device.type, t.device.index}))
      error_streams_[{t.device.type, t.device.index}] = BackendOf(t.device.type)->NewStream(t.device.index);
    if (t.device.type == DeviceType::kCpu) continue;
    for (const ir::TaskInput& in : t.in) {
      if (in.konst < 0 || device_consts_.count({in.konst, t.device.type, t.device.index})) continue;
      const Tensor& host = plan.consts[static_cast<size_t>(in.konst)];
      Tensor there(host.dtype(), host.shape(), t.device);
      there.CopyFrom(host);
      device_consts_[{in.konst, t.device.type, t.device.index}] = there;
    }
  }
}

const Tensor& Runtime::Const(int konst, Device dev) const {
  if (dev.type == DeviceType::kCpu) return plan_.consts[static_cast<size_t>(konst)];
  return device_consts_.at({konst, dev.type, dev.index});
}

DeviceStream& Runtime::CopyStream(Device dev) { return *copy_streams_.at({dev.type, dev.index}); }

DeviceStream& Runtime::ComputeStream(Device dev) { return *compute_streams_.at({dev.type, dev.index}); }

void Runtime::LayOutBucket(const ir::TaskDesc& t) {
  const std::vector<int>& in = t.move.in;
  if (t.kind != ir::TaskKind::kBoxing || t.move.op != boxing::Op::kAllReduce || in.empty() || t.out.size() != in.size())
    return;
  const ir::RegstDesc& first = plan_.regsts[static_cast<size_t>(in[0])];
  std::vector<int64_t> bytes;
  for (size_t i = 0; i < in.size(); ++i) {
    const ir::RegstDesc& a = plan_.regsts[static_cast<size_t>(in[i])];
    const ir::RegstDesc& b = plan_.regsts[static_cast<size_t>(t.out[i])];
    // Only a gradient that nothing else reads, one slot each side, one dtype and device.
    if (a.regst_num != 1 || b.regst_num != 1 || a.consumers != std::vector<int>{t.id} || !pooled_[static_cast<size_t>(a.id)] ||
        !pooled_[static_cast<size_t>(b.id)] || a.type.dtype != first.type.dtype || b.type.dtype != first.type.dtype ||
        a.bytes() != b.bytes() || a.device != first.device || b.device != first.device)
      return;
    bytes.push_back(a.bytes());
  }
  int64_t end = 0;
  const std::vector<int64_t> offset = boxing::BucketOffsets(bytes, &end);
  // The inputs lie in this rank's slot of the bucket's shared-memory window where it has one, so
  // that its all-reduce starts without copying them there (Communicator::InputBuffer). A bucket
  // of one tensor needs no layout otherwise: MPI reduces it where it is.
  std::shared_ptr<Storage> shared = comm_ ? comm_->InputBuffer(t.move.collective, end) : nullptr;
  if (shared && !(shared->device() == first.device)) shared = nullptr;  // the backend's buffer is elsewhere
  if (in.size() < 2 && !shared) return;
  for (const std::vector<int>* side : {&in, &t.out}) {
    std::shared_ptr<Storage> storage = side == &in ? shared : nullptr;
    if (!storage) storage = std::make_shared<Storage>(static_cast<size_t>(end), first.device);  // zero-filled
    for (size_t i = 0; i < side->size(); ++i) {
      const ir::RegstDesc& r = plan_.regsts[static_cast<size_t>((*side)[i])];
      slots_[static_cast<size_t>(r.id)][0] = Tensor(r.type.dtype, r.type.shape, storage, static_cast<size_t>(offset[i]));
      pooled_[static_cast<size_t>(r.id)] = false;
      if (storage == shared) in_window_[static_cast<size_t>(r.id)] = t.move.collective;
    }
    bucket_bytes_ += end;
  }
}

Status Runtime::Acquire(int regst, int slot) {
  if (const int c = in_window_[static_cast<size_t>(regst)]; c >= 0) {  // the other ranks read the last act's
    std::lock_guard<std::mutex> lock(progress_mu_);
    awaiting_shared_.store(c, std::memory_order_relaxed);  // for StallReport
    Status s = comm_->AwaitInputBuffer(c);
    awaiting_shared_.store(-1, std::memory_order_relaxed);
    RETURN_IF_ERROR(s);
  }
  if (!pooled_[static_cast<size_t>(regst)]) return Status::Ok();
  const ir::RegstDesc& r = plan_.regsts[static_cast<size_t>(regst)];
  FR_CHECK(!Slot(regst, slot).defined(), "slot taken twice: regst " + std::to_string(regst));
  Slot(regst, slot) = pool_->Take(r.type.dtype, r.type.shape, r.device);
  return Status::Ok();
}

void Runtime::Release(int regst, int slot) {
  if (!pooled_[static_cast<size_t>(regst)]) return;
  pool_->Give(std::move(Slot(regst, slot)));
  Slot(regst, slot) = Tensor();
}

Runtime::~Runtime() {
  for (auto& s : streams_) s->Join();
  if (progress_) progress_->Join();
}

Tensor Runtime::Param(ir::ValueId v) const {
  for (const ir::TaskDesc& t : plan_.tasks)
    if (t.kind == ir::TaskKind::kVariable && t.param == v && t.rank == rank_) return slots_[static_cast<size_t>(t.out[0])][0];
  return Tensor();
}

std::vector<Tensor> Runtime::OptimizerStateOf(ir::ValueId v) const {
  for (const ir::TaskDesc& t : plan_.tasks)
    if (t.kind == ir::TaskKind::kVariable && t.param == v && t.rank == rank_) return state_[static_cast<size_t>(t.id)];
  return {};
}

void Runtime::Send(const Msg& m) { streams_[static_cast<size_t>(stream_of_[static_cast<size_t>(m.dst)])]->Push(m); }

Status Runtime::Feed(int regst, int64_t step, int64_t micro, const Tensor& out) {
  const ir::RegstDesc& r = plan_.regsts[static_cast<size_t>(regst)];
  const ir::Value& v = graph_.value(r.value);
  if (r.type.shape == v.type.shape) return opt_.feeder->Fill(v.name, step, micro, out);
  // This rank holds a piece: read the micro-batch, keep the piece.
  for (const ir::ValuePlacement& vp : plan_.values) {
    if (vp.value != r.value) continue;
    auto d = std::find(vp.regsts.begin(), vp.regsts.end(), regst) - vp.regsts.begin();
    Tensor whole(v.type.dtype, v.type.shape);
    RETURN_IF_ERROR(opt_.feeder->Fill(v.name, step, micro, whole));
    const sbp::Placement& pl = plan_.stages[static_cast<size_t>(vp.stage)];
    out.CopyFrom(boxing::SliceOf(whole, sbp::PieceRanges(v.type.shape, vp.sbp, pl, static_cast<int>(d))));
    return Status::Ok();
  }
  return Status::Runtime("[actor] no placement for data regst " + std::to_string(regst));
}

Status Runtime::JoinUpdate(Actor* a, int64_t act) {
  UpdateGroup& g = update_groups_.at(a->task().update_group);
  g.joined.push_back(a);
  if (g.joined.size() < g.members) return Status::Ok();
  std::vector<KernelCtx> members;
  for (const Actor* m : g.joined) members.push_back(m->UpdateCtx());
  const ir::TaskDesc& t = a->task();
  const GroupKernelFn kernel = GroupKernel(plan_.nodes[static_cast<size_t>(t.node)].op, t.device.type);
  FR_CHECK(kernel != nullptr, t.name + ": an update group of an op without a group kernel");
  Status s;
  if (opt_.on_device_act && t.device.type != DeviceType::kCpu) {  // the group's device time, as the last member's
    DeviceStream& stream = ComputeStream(t.device);
    std::shared_ptr<Event> begin = stream.RecordTimed();
    s = kernel(members);
    opt_.on_device_act(t, act, std::move(begin), stream.RecordTimed());
  } else {
    s = kernel(members);
  }
  for (const Actor* m : g.joined) Send(Msg{MsgKind::kCommDone, m->task().id, t.id, -1, -1});
  g.joined.clear();
  return s;
}

Status Runtime::StartComm(Actor* actor, const boxing::Task& t, std::vector<Tensor> in, std::vector<Tensor> out) {
  if (!comm_) return Status::Runtime(std::string(boxing::Name(t.op)) + " needs other ranks: run under mpirun");
  {
    std::lock_guard<std::mutex> lock(progress_mu_);
    DeviceStream* after = compute_streams_.at({actor->task().device.type, actor->task().device.index}).get();
    ASSIGN_OR_RETURN(CommHandle h, comm_->Start(t, std::move(in), std::move(out), after));
    in_flight_[h.id] = actor->task().id;
    if (in_flight_count_.fetch_add(1, std::memory_order_relaxed) == 0 && progress_) progress_->Poke();
  }
  std::string with = GroupWaitString(t);
  std::lock_guard<std::mutex> lock(mu_);
  waiting_[actor->task().id] = with + " (" + actor->task().name + ")";
  return Status::Ok();
}

std::string Runtime::GroupWaitString(const boxing::Task& t) const {
  if (t.op == boxing::Op::kSend || t.op == boxing::Op::kRecv)
    return std::string(t.op == boxing::Op::kSend ? "send to" : "recv from") + " rank " + std::to_string(t.peer);
  std::string with;
  for (int r : t.group)
    if (r != rank_) with += (with.empty() ? "" : ",") + std::to_string(r);
  return std::string(boxing::Name(t.op)) + " with rank(s) " + with;
}

Stream::Poll Runtime::Progress() {
  if (in_flight_count_.load(std::memory_order_relaxed) == 0) return Stream::Poll::kIdle;
  std::unique_lock<std::mutex> lock(progress_mu_, std::try_to_lock);
  if (!lock.owns_lock()) return Stream::Poll::kWaiting;  // another thread is polling
  Result<std::vector<CommHandle>> done = comm_->Poll();
  if (!done.ok()) {
    Fail(done.status());
    return Stream::Poll::kIdle;
  }
  for (CommHandle h : *done) {
    const int task = in_flight_.at(h.id);
    in_flight_.erase(h.id);
    in_flight_count_.fetch_sub(1, std::memory_order_relaxed);
    {
      std::lock_guard<std::mutex> g(mu_);
      waiting_.erase(task);
    }
    Send(Msg{MsgKind::kCommDone, task, task, -1, -1});
  }
  if (in_flight_.empty()) return Stream::Poll::kIdle;
  return done->empty() ? Stream::Poll::kWaiting : Stream::Poll::kProgress;
}

void Runtime::Announce(Actor* a) {
  const auto [step, micro] = a->NextKey();
  ready_.emplace(step, micro, a->feeds_movement() ? 0 : 1, a->task().id);
}

void Runtime::Fail(const Status& s) {
  {
    std::lock_guard<std::mutex> lock(mu_);
    if (failed_) return;
    failed_ = true;
    error_ = s;
  }
  cv_.notify_all();
}

Status Runtime::TakeDataErrors() {
  for (auto& [dev, stream] : error_streams_) RETURN_IF_ERROR(BackendOf(dev.first)->TakeDataError(*stream));
  return Status::Ok();
}

void Runtime::ActorFinished() {
  {
    std::lock_guard<std::mutex> lock(mu_);
    ++finished_;
  }
  cv_.notify_all();
}

void Runtime::ReportLoss(int64_t step, double loss) {
  std::lock_guard<std::mutex> lock(mu_);
  partial_[step].loss = loss;
  ++parts_[step];
  MaybeEmit();
}

void Runtime::ReportGradNormSq(int64_t step, double sq) {
  std::lock_guard<std::mutex> lock(mu_);
  partial_[step].grad_norm = std::sqrt(sq);
  ++parts_[step];
  MaybeEmit();
}

void Runtime::ReportStat(ir::ValueId stat, int64_t step, int64_t micro, const Tensor& x) const {
  if (opt_.on_stat) opt_.on_stat(stat, step, micro, x);
}

void Runtime::MaybeEmit() {
  while (parts_.count(next_emit_) && parts_[next_emit_] == parts_per_step_) {
    StepRecord r = partial_[next_emit_];
    r.step = next_emit_;
    r.seconds = std::chrono::duration<double>(std::chrono::steady_clock::now() - start_).count();
    partial_.erase(next_emit_);
    parts_.erase(next_emit_);
    ++next_emit_;
    if (!opt_.on_step || failed_) continue;
    if (Status s = opt_.on_step(r); !s.ok()) {
      failed_ = true;
      error_ = s;
      cv_.notify_all();
    }
  }
}

// Requires mu_. Names the peers this rank waits for, if any: a dead or hung rank shows up there.
std::string Runtime::StallReport() const {
  std::string msg = "[actor] rank " + std::to_string(rank_) + ": no progress for " +
                    std::to_string(static_cast<int>(opt_.stall_timeout)) + " s (parallel.timeout)";
  std::vector<std::string> waiting;
  for (const auto& [task, what] : waiting_) waiting.push_back(what);
  if (const int c = awaiting_shared_.load(std::memory_order_relaxed); c >= 0) {
    for (const ir::TaskDesc& t : plan_.tasks) {
      if (t.rank != rank_ || t.kind != ir::TaskKind::kBoxing || t.move.collective != c) continue;
      waiting.push_back(GroupWaitString(t.move) + " (to read this rank's inputs of " + t.name + ")");
      break;
    }
  }
  if (notified_ && !notice_wait_.empty()) waiting.push_back("the end of the run with rank(s) " + notice_wait_);
  if (!waiting.empty()) {
    msg += "; waiting for other ranks, which may have died or hung:";
    for (const std::string& w : waiting) msg += "\n  " + w;
    return msg;
  }
  msg += "; tasks still waiting:";
  int shown = 0;
  for (const auto& a : actors_) {
    if (!a || a->acts_done() >= a->total_acts() || shown++ >= 10) continue;
    msg += "\n  " + a->task().name + " (" + std::to_string(a->acts_done()) + "/" + std::to_string(a->total_acts()) + " acts)";
  }
  return msg;
}

bool Runtime::MayStart(int64_t step) {
  int64_t cur = started_.load(std::memory_order_acquire);
  while (step >= (cur & ~kFrozen)) {
    if ((cur & kFrozen) != 0 || step >= limit_.load(std::memory_order_acquire)) return false;
    if (started_.compare_exchange_weak(cur, step + 1, std::memory_order_acq_rel)) return true;
  }
  return true;
}

bool Runtime::Reached(int64_t steps) const {
  for (const auto& a : actors_)
    if (a && a->acts_done() < plan_.Acts(a->task(), steps)) return false;
  return true;
}

void Runtime::Freeze(bool stopping) {
  const int64_t last = (started_.fetch_or(kFrozen, std::memory_order_acq_rel) & ~kFrozen) - 1;
  notified_ = true;
  agreed_.last_step = std::max(agreed_.last_step, last);
  agreed_.stopping = agreed_.stopping || stopping;
  if (!comm_) return;
  std::lock_guard<std::mutex> lock(progress_mu_);
  if (Status s = comm_->Notify(StepNotice{last, stopping}); !s.ok()) Fail(s);
}

void Runtime::Agree() {
  limit_.store(agreed_.last_step + 1, std::memory_order_release);
  started_.fetch_and(~kFrozen, std::memory_order_acq_rel);
  for (const auto& a : actors_)  // the actors that waited for the agreement
    if (a) Send(Msg{MsgKind::kStart, a->task().id, a->task().id, -1, -1});
}

void Runtime::Watch(int mine) {
  const bool agree = opt_.wind_down != nullptr;
  bool decided = !agree;
  int64_t target = steps_;  // the steps the run ends after
  int64_t last_progress = -1;
  auto last_change = std::chrono::steady_clock::now(), last_error_read = last_change;
  std::chrono::milliseconds ask(1);
  std::unique_lock<std::mutex> lock(mu_);
  while (!failed_ && !(decided && (target == steps_ ? finished_ == mine : Reached(target)))) {
    // While the ranks agree, this rank's steps wait: ask often, from 1 ms backing off to 32 ms for
    // a rank still deep in a long step.
    cv_.wait_for(lock, notified_ && !decided ? ask : std::chrono::milliseconds(200));
    if (notified_ && !decided) ask = std::min(ask * 2, std::chrono::milliseconds(32));
    int64_t progress = 0;
    for (const auto& a : actors_) progress += a ? a->acts_done() : 0;
    auto now = std::chrono::steady_clock::now();
    if (progress != last_progress) {
      last_progress = progress;
      last_change = now;
    } else if (std::chrono::duration<double>(now - last_change).count() > opt_.stall_timeout) {
      failed_ = true;
      error_ = Status::Runtime(StallReport());
    }
    if (!error_streams_.empty() && now - last_error_read > std::chrono::milliseconds(200) && !failed_) {
      last_error_read = now;
      lock.unlock();
      const Status e = TakeDataErrors();
      lock.lock();
      if (!e.ok() && !failed_) {
        failed_ = true;
        error_ = e;
      }
    }
    if (opt_.stop_signal && opt_.stop_signal->load() != 0 && !failed_) {
      failed_ = true;
      error_ = Status::Runtime("[actor] rank " + std::to_string(rank_) + ": stopped by signal " +
                               std::to_string(opt_.stop_signal->load()));
    }
    if (decided || failed_) continue;
    // Every rank sends its notice when it has done its acts or winds down, or another rank
    // winds down; the run ends after the highest step any rank began, which every rank then runs.
    const bool finished = finished_ == mine;
    lock.unlock();
    const bool stopping = opt_.wind_down->load();
    if (!notified_ && (finished || stopping)) Freeze(stopping);
    std::vector<int> missing;
    if (comm_) {
      std::lock_guard<std::mutex> g(progress_mu_);
      Result<std::vector<int>> r = comm_->PollNotices(&agreed_);
      if (r.ok()) missing = std::move(*r);
      else Fail(r.status());
    }
    if (!notified_ && agreed_.stopping) Freeze(stopping);
    lock.lock();
    notice_wait_.clear();
    for (int r : missing) notice_wait_ += (notice_wait_.empty() ? "" : ",") + std::to_string(r);
    if (notified_ && missing.empty() && !failed_) {
      decided = true;
      target = agreed_.last_step + 1;
      lock.unlock();
      Agree();
      lock.lock();
    }
  }
  steps_done_ = target;
  wound_down_ = agreed_.stopping;
}

Status Runtime::Run(const RunOptions& opt) {
  opt_ = opt;
  first_step_ = opt.first_step;
  steps_ = opt.steps >= 0 ? opt.steps : plan_.steps - opt.first_step;
  FR_CHECK(first_step_ >= 0 && steps_ >= 0 && !ran_failed_, "Run over steps " + std::to_string(first_step_) + "+" + std::to_string(steps_));
  // A run after another starts afresh; the parameters, optimizer state and memory stay.
  actors_.clear();
  streams_.clear();
  progress_.reset();
  ready_.clear();
  for (auto& [id, g] : update_groups_) g.joined.clear();
  finished_ = 0;
  next_emit_ = first_step_;
  // A run that begins winding down begins no step of its own (Watch).
  started_.store(opt.wind_down && opt.wind_down->load() ? kFrozen : 0);
  limit_.store(kFrozen);
  notified_ = false;
  agreed_ = StepNotice{};
  notice_wait_.clear();
  ++runs_;
  if (opt.wind_down && comm_) {
    std::lock_guard<std::mutex> lock(progress_mu_);
    if (Status s = comm_->BeginNotices(runs_); !s.ok()) return s;
  }
  if (!ran_) start_ = std::chrono::steady_clock::now();  // StepRecord::seconds count from the first run
  ran_ = true;
  // Threads (see runtime.h): the comm stream's actors run on the compute stream's thread.
  std::vector<int> thread_of(plan_.streams.size(), -1);
  const auto compute = std::find(plan_.streams.begin(), plan_.streams.end(), ir::StreamKind::kCompute) - plan_.streams.begin();
  for (size_t i = 0; i < plan_.streams.size(); ++i) {
    const ir::StreamKind kind = plan_.streams[i];
    if (kind == ir::StreamKind::kComm && compute < static_cast<long>(plan_.streams.size())) continue;
    Stream::Hooks hooks;
    hooks.handle = [this](const Msg& m) { actors_[static_cast<size_t>(m.dst)]->Handle(m); };
    hooks.init = opt.on_thread_start;
    hooks.poll_max = opt.poll_max;
    if (comm_ && kind != ir::StreamKind::kData && kind != ir::StreamKind::kCopy) {
      hooks.poll = [this] { return Progress(); };
      hooks.poll_busy = Stream::kPollBusy;
      hooks.poll_spin = opt.poll_spin;
    }
    if (kind == ir::StreamKind::kCompute && plan_.pipeline_stages > 1) {  // a pipeline: oldest micro-batch first (runtime.h)
      hooks.work = [this] {
        if (ready_.empty()) return false;
        const int task = std::get<3>(*ready_.begin());
        ready_.erase(ready_.begin());
        actors_[static_cast<size_t>(task)]->RunNext();
        return true;
      };
    }
    thread_of[i] = static_cast<int>(streams_.size());
    streams_.push_back(std::make_unique<Stream>(ir::Name(kind), std::move(hooks)));
  }
  for (size_t i = 0; i < plan_.streams.size(); ++i)
    if (thread_of[i] < 0) thread_of[i] = thread_of[static_cast<size_t>(compute)];
  if (comm_ && opt.progress_thread) {  // the safety net: polls while a kernel runs long with movements in flight
    Stream::Hooks hooks;
    hooks.handle = [](const Msg&) {};
    hooks.poll = [this] { return Progress() == Stream::Poll::kIdle ? Stream::Poll::kIdle : Stream::Poll::kCovered; };
    progress_ = std::make_unique<Stream>("progress", std::move(hooks));
  }
  int mine = 0;
  actors_.resize(plan_.tasks.size());
  stream_of_.resize(plan_.tasks.size());
  for (const ir::TaskDesc& t : plan_.tasks) {
    stream_of_[static_cast<size_t>(t.id)] = thread_of[static_cast<size_t>(t.stream)];
    if (t.rank != rank_) continue;
    actors_[static_cast<size_t>(t.id)] = std::make_unique<Actor>(*this, plan_, t);
    // A movement only starts on the thread (it runs in the background): it starts when ready.
    if (plan_.pipeline_stages > 1 && stream_of_[static_cast<size_t>(t.id)] == thread_of[static_cast<size_t>(compute)] &&
        !MovesAcrossRanks(t))
      actors_[static_cast<size_t>(t.id)]->set_deferred(true);
    ++mine;
  }
  if (progress_) progress_->Start();
  for (auto& s : streams_) s->Start();
  for (const auto& a : actors_)
    if (a) Send(Msg{MsgKind::kStart, a->task().id, a->task().id, -1, -1});

  Watch(mine);
  std::unique_lock<std::mutex> lock(mu_);
  Status result = failed_ ? error_ : Status::Ok();
  lock.unlock();
  // A stream thread may be waiting on a peer that will never answer: release it before joining.
  if (failed_ && comm_) comm_->Cancel();
  for (auto& s : streams_) s->Stop();
  for (auto& s : streams_) s->Join();
  if (progress_) {
    progress_->Stop();
    progress_->Join();
  }
  ran_failed_ = failed_;
  // Kernels queued on a device may still run (the last step's updates): a run ends when they have,
  // so that what reads the parameters next (evaluation on its own streams, a checkpoint) sees them.
  for (auto& [dev, stream] : compute_streams_) stream->Synchronize();
  if (!failed_) {  // an error in the run's last kernels
    if (Status e = TakeDataErrors(); !e.ok()) {
      failed_ = ran_failed_ = true;
      result = error_ = e;
    }
  }
  // Every act is done, but the acks of the last ones may still have been queued when the streams
  // stopped: the slots they free are free, for the next run.
  if (!failed_)
    for (size_t r = 0; r < slots_.size(); ++r)
      for (size_t s = 0; pooled_[r] && s < slots_[r].size(); ++s)
        if (slots_[r][s].defined()) Release(static_cast<int>(r), static_cast<int>(s));
  return result;
}

}  // namespace fr::actor
