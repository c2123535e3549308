// Runtime: runs one rank's part of a Plan with actors on stream threads, and reports each finished
// step. A Runtime may run several times, each run a span of steps after the last (a checkpoint
// between them, for one), unless a run failed; the parameters and optimizer state carry over.
//
// Threads: one per stream of the Plan, except that the comm stream's actors run on the compute
// stream's thread. A boxing actor only starts a nonblocking movement or copies a piece, and on a
// CPU rank with one core a second busy thread only takes that core away: a separate comm thread
// switched threads ~100 times a step and slowed the kernels.
//
// Order: an actor acts as soon as its inputs are ready and its outputs have a free slot, so acts
// run in the order their inputs arrive; except in a pipeline (Plan::pipeline_stages > 1), where
// the compute thread first handles every message that waits and then runs the ready act of the
// oldest (step, micro-batch), one at a time (Stream::Hooks::work). Without that, a stage whose
// slots let it run ahead interleaved the forwards of two micro-batches op by op and handed the
// first to the next stage no sooner (plan/lower.h: the schedule). Within a micro-batch,
// acts whose output moves across ranks go first: by task order alone, a stage's gradient
// accumulators ran after its whole backward, and its gradient buckets reduced after it, not during.
// Data parallelism alone keeps arrival order, which runs each accumulator right after its gradient.
//
// Progress: movements across ranks run in the background (actor/comm.h) and someone must poll the
// communicator while any is in flight. The compute thread does between messages it handles (at
// most every kPollBusy while more wait), and, when it runs out of work, at once again for
// RunOptions::poll_spin, then on wake-ups that back off from kPollMin to kPollMax. A "progress"
// thread, where RunOptions::progress_thread asks for one, polls every kPollCovered as a safety net
// for kernels that run long. A finished movement reaches its actor as a kCommDone message.
//
// Failure: an act that fails stops every stream and Run returns its Status. If no actor makes
// progress for `stall_timeout` seconds, Run fails naming the tasks still waiting, instead of
// hanging.
#pragma once

#include <atomic>
#include <condition_variable>
#include <functional>
#include <map>
#include <memory>
#include <mutex>
#include <set>
#include <string>
#include <tuple>
#include <vector>

#include "actor/actor.h"
#include "actor/comm.h"
#include "actor/pool.h"
#include "actor/stream.h"
#include "plan/plan.h"

namespace fr::actor {

// Fills the graph input `input` ([micro_batch, ...]) with micro-batch `micro` of step `step`.
class Feeder {
 public:
  virtual ~Feeder() = default;
  virtual Status Fill(const std::string& input, int64_t step, int64_t micro, const Tensor& out) = 0;
};

struct StepRecord {
  int64_t step = 0;      // from 0
  double loss = 0;       // mean over the step's micro-batches
  double grad_norm = 0;  // global L2 norm before clipping
  double seconds = 0;    // wall time since the Runtime's first run started, when the step finished
};

struct RunOptions {
  Feeder* feeder = nullptr;
  // Called on a runtime thread, in step order; an error stops the run with it (Run returns it).
  std::function<Status(const StepRecord&)> on_step;
  // Called on the compute thread with each micro-batch's BatchNorm statistic (a stat-sink task's
  // `param`: on rank 0 and on its stage's ranks), in micro-batch order per statistic; `x` is valid
  // only during the call.
  std::function<void(ir::ValueId stat, int64_t step, int64_t micro, const Tensor& x)> on_stat;
  // Called on the actor's stream thread right before (begin) and after each act: traces, tests.
  std::function<void(const ir::TaskDesc&, int64_t act, bool begin)> on_act;
  // Called after each compute or variable act on a device stream with timed events recorded on it
  // before and after its kernels (DeviceStream::RecordTimed): their device time, for traces.
  std::function<void(const ir::TaskDesc&, int64_t act, std::shared_ptr<Event> begin, std::shared_ptr<Event> end)>
      on_device_act;
  double stall_timeout = 60;
  // The steps this run trains: from `first_step` (the steps done before, by an earlier run of the
  // same Runtime or a checkpoint's), `steps` of them (-1: to Plan::steps). The data, the schedule
  // and the optimizer see the global step.
  int64_t first_step = 0;
  int64_t steps = -1;
  // Polled every 200 ms; when it holds a signal number the run stops with an error naming it.
  const std::atomic<int>* stop_signal = nullptr;
  // Polled every 200 ms; once it is true on any rank, every rank runs the steps some rank has
  // begun and the run ends there, early and in order (Runtime::steps_done, wound_down): a
  // scheduler's SIGTERM, answered with a checkpoint. Either every rank passes one or none: the
  // ranks agree through notices at the end of each run (Communicator::Notify).
  const std::atomic<bool>* wind_down = nullptr;
  // Run first on every stream thread: per-thread settings such as the OpenMP team size, which a
  // thread does not inherit from the one that set it.
  std::function<void()> on_thread_start;
  // The longest an idle thread waits between polls of movements in flight (Stream::PollMaxFor).
  std::chrono::microseconds poll_max = Stream::kPollMax;
  // How long after its last work an idle thread polls without sleeping (Stream::PollSpinFor).
  std::chrono::microseconds poll_spin{0};
  // Whether a "progress" thread polls every Stream::kPollCovered while movements are in flight, so
  // that they go on while a kernel runs long. Worth it only where a CPU is left over: on a rank whose
  // kernels fill the CPUs it is bound to, each wake-up takes the core from a kernel.
  bool progress_thread = true;
};

class Communicator;

class Runtime {
 public:
  // `comm` carries this rank's collectives and point-to-point transfers; it may be null for a plan
  // whose boxing is all local (one rank).
  // `evaluates`: this is an evaluation of that (training) runtime. Its variables are the training's
  // parameters of the same names, the same memory (one the training does not hold, such as a
  // parameter it keeps constant, starts from its initial piece here), and its registers come from
  // the training's pool: an evaluation allocates little that training has not. This runtime must
  // not update them, and its runs never overlap the training's, which must outlive them.
  Runtime(const ir::Plan& plan, const ir::Graph& graph, int rank = 0, Communicator* comm = nullptr, Runtime* evaluates = nullptr);
  ~Runtime();
  Status Run(const RunOptions& opt);
  // After a Run that succeeded: the steps it ran (RunOptions::steps, or fewer where it wound down)
  // and whether some rank's wind_down was set, which every rank learns alike.
  int64_t steps_done() const { return steps_done_; }
  bool wound_down() const { return wound_down_; }

  // This rank's piece of a parameter (after Run: the trained value), on its device.
  Tensor Param(ir::ValueId v) const;
  // This rank's optimizer state for parameter v (the update node's outputs, each the piece's
  // shape; none for a parameter this rank does not hold), on its device. Writing into the tensors
  // between runs sets it (a checkpoint's).
  std::vector<Tensor> OptimizerStateOf(ir::ValueId v) const;

  // For actors.
  const ir::Graph& graph() const { return graph_; }
  Tensor& Slot(int regst, int slot) { return slots_[static_cast<size_t>(regst)][static_cast<size_t>(slot)]; }
  // A slot's memory: taken from the pool when its producer starts filling it, given back when its
  // last consumer has read it (a variable's slot, the parameter, is never pooled). Called on the
  // producer's stream thread. Fails where the slot still holds inputs that other ranks have to
  // read (a gradient bucket in shared memory) and the run was stopped while waiting for them.
  Status Acquire(int regst, int slot);
  void Release(int regst, int slot);
  // A slot a copy onto a device fills: the event its consumers' streams wait for before reading
  // it (DeviceStream::Wait), set by the copy before it announces the slot. Null where the slot was
  // complete when announced.
  void SetFilled(int regst, int slot, std::shared_ptr<Event> e) {
    filled_[static_cast<size_t>(regst)][static_cast<size_t>(slot)] = std::move(e);
  }
  const std::shared_ptr<Event>& Filled(int regst, int slot) const {
    return filled_[static_cast<size_t>(regst)][static_cast<size_t>(slot)];
  }
  // A host slot a copy onto a device reads: the event its producer waits for before it writes
  // the slot again, set by the copy before it gives the slot back; taken (null after).
  void SetReadDone(int regst, int slot, std::shared_ptr<Event> e) {
    read_done_[static_cast<size_t>(regst)][static_cast<size_t>(slot)] = std::move(e);
  }
  std::shared_ptr<Event> TakeReadDone(int regst, int slot) {
    return std::move(read_done_[static_cast<size_t>(regst)][static_cast<size_t>(slot)]);
  }
  // The most register memory this rank held at once (in use or kept for reuse, and the gradient
  // buckets' memory), after Run.
  int64_t peak_register_bytes() const { return pool_->peak_bytes() + bucket_bytes_; }
  void Send(const Msg& m);
  // Fills data regst `regst` (this rank's piece of a graph input) for a micro-batch.
  Status Feed(int regst, int64_t step, int64_t micro, const Tensor& out);
  void ReportLoss(int64_t step, double loss);
  void ReportGradNormSq(int64_t step, double sq);
  void ReportStat(ir::ValueId stat, int64_t step, int64_t micro, const Tensor& x) const;
  void Fail(const Status& s);
  // A grouped variable's update (TaskDesc::update_group): `a` has joined its group for act `act`
  // and waits in flight. The last member of the group to join runs the group kernel for all and
  // sends each kCommDone (on the compute thread, which runs every member).
  Status JoinUpdate(Actor* a, int64_t act);
  // Starts a communicating boxing task for `actor`, which gets kCommDone when it completes.
  Status StartComm(Actor* actor, const boxing::Task& t, std::vector<Tensor> in, std::vector<Tensor> out);
  void ActorFinished();
  // A deferred actor's next act is ready (called on its stream's thread).
  void Announce(Actor* a);
  // Whether an act of (this run's) step `step` may start: the ranks may be agreeing where the run
  // stops, or have agreed on an earlier step. Any stream thread, at every act: one atomic load
  // unless the act is the first of a step on this rank.
  bool MayStart(int64_t step);
  const RunOptions& options() const { return opt_; }
  int64_t first_step() const { return first_step_; }
  int64_t steps() const { return steps_; }
  const std::vector<Tensor>& OptimizerState(int task) const { return state_[static_cast<size_t>(task)]; }
  // Constant piece `konst` (Plan::consts) on device `dev` (copied there when the runtime was made).
  const Tensor& Const(int konst, Device dev) const;
  // The stream the copy tasks of device `dev` queue on (called on the copy stream's thread).
  DeviceStream& CopyStream(Device dev);
  // The stream the kernels of device `dev` queue on.
  DeviceStream& ComputeStream(Device dev);

 private:
  // A gradient bucket's inputs lie end to end in one allocation, and its outputs in another, for
  // the whole run (boxing::BucketOffsets), so that its all-reduce copies the inputs once into the
  // outputs and reduces them there: packed into a staging buffer and unpacked from it, each bucket
  // cost two copies and a buffer (Communicator::Start). Where the bucket's all-reduce runs through
  // shared memory, the inputs' allocation is this rank's slot of its window, and nothing is copied
  // before the sums; their producers write them again only after the other ranks have read them
  // (Acquire: Communicator::AwaitInputBuffer).
  void LayOutBucket(const ir::TaskDesc& t);
  void MaybeEmit();  // requires mu_
  // Any thread: polls the communicator unless another thread is at it, and sends kCommDone for
  // what finished.
  Stream::Poll Progress();
  std::string StallReport() const;
  // Run's wait: until every actor has done its acts, a failure, a stall or a signal; with
  // RunOptions::wind_down, the ranks agree on where the run ends on the way.
  void Watch(int mine);
  // The first data error (an index out of range, a label outside the classes) a kernel met on any
  // of this rank's devices that host code cannot read directly; read off the actors' streams.
  Status TakeDataErrors();
  // Where RunOptions::wind_down asks: stops new steps here and says how far this rank had got;
  // once the ranks agreed (Agree), lets them run to the agreed step.
  void Freeze(bool stopping);
  void Agree();
  // Every actor here has done its acts of the run's first `steps` steps.
  bool Reached(int64_t steps) const;
  // "all-reduce with rank(s) 1,2", "recv from rank 3": the other ranks a movement waits for.
  std::string GroupWaitString(const boxing::Task& t) const;

  const ir::Plan& plan_;
  const ir::Graph& graph_;
  int rank_;
  Communicator* comm_;
  std::mutex progress_mu_;                    // serialises the communicator's Start and Poll
  std::map<int, int> in_flight_;              // guarded by progress_mu_: handle -> actor (task id)
  std::atomic<int> in_flight_count_{0};       // in_flight_.size(), read without the lock
  std::atomic<int> awaiting_shared_{-1};      // the collective Acquire waits on, for StallReport
  RunOptions opt_;
  std::vector<std::vector<Tensor>> slots_;  // per regst
  // Per regst and slot (SetFilled, SetReadDone): written by the copy before the message about the
  // slot, read by its receiver after it.
  std::vector<std::vector<std::shared_ptr<Event>>> filled_, read_done_;
  std::vector<bool> pooled_;                 // per regst
  std::vector<int> in_window_;               // per regst: the collective whose shared slot holds it, or -1
  int64_t bucket_bytes_ = 0;                 // laid out by LayOutBucket
  RegstPool own_pool_;
  RegstPool* pool_ = &own_pool_;  // the training's, for an evaluation
  std::vector<std::vector<Tensor>> state_;  // by task id: a variable's optimizer state
  struct UpdateGroup {
    size_t members = 0;          // on this rank
    std::vector<Actor*> joined;  // waiting for the rest (JoinUpdate)
  };
  std::map<int, UpdateGroup> update_groups_;  // by TaskDesc::update_group
  int64_t first_step_ = 0, steps_ = 0;      // this run's (RunOptions)
  int64_t steps_done_ = 0;                  // the last run's, where it ended
  bool wound_down_ = false;
  int64_t runs_ = 0;                        // Run calls: the notices' tag
  // The highest step an act began on this rank plus one, with kFrozen set while the ranks agree
  // where the run ends (no new step begins meanwhile); no act of a step at or past limit_ begins.
  static constexpr int64_t kFrozen = int64_t{1} << 62;
  std::atomic<int64_t> started_{0};
  std::atomic<int64_t> limit_{kFrozen};
  bool notified_ = false;                   // Watch's: this rank's notice was sent
  StepNotice agreed_;                       // the notices merged so far
  std::string notice_wait_;                 // the ranks whose notice is missing, for StallReport
  bool ran_failed_ = false;                 // a run failed: the state is not one to go on from
  bool ran_ = false;                        // Run was called before
  std::map<std::tuple<int, DeviceType, int>, Tensor> device_consts_;  // (konst, device): a constant there
  std::map<std::pair<DeviceType, int>, std::unique_ptr<DeviceStream>> copy_streams_;  // by device
  // By device: the stream its kernels queue on, which a movement of its tensors is ordered after.
  std::map<std::pair<DeviceType, int>, std::unique_ptr<DeviceStream>> compute_streams_;
  // By device the host cannot address: the stream TakeDataErrors reads its error word on. A rank
  // that copies nothing back (data parallel ranks past 0) would not see its errors otherwise.
  std::map<std::pair<DeviceType, int>, std::unique_ptr<DeviceStream>> error_streams_;
  std::vector<std::unique_ptr<Actor>> actors_;   // by task id; null for other ranks' tasks
  std::vector<std::unique_ptr<Stream>> streams_;  // threads
  std::vector<int> stream_of_;                   // by task id: index into streams_
  std::unique_ptr<Stream> progress_;             // with a communicator and RunOptions::progress_thread
  // Pipelines: the compute thread's ready acts by (step, micro-batch, 0 if it feeds a movement
  // across ranks else 1, task), run first to last.
  std::set<std::tuple<int64_t, int64_t, int, int>> ready_;
  std::chrono::steady_clock::time_point start_;

  std::mutex mu_;
  std::condition_variable cv_;
  Status error_;                         // guarded by mu_
  bool failed_ = false;                  // guarded by mu_
  int finished_ = 0;                     // guarded by mu_
  std::map<int64_t, StepRecord> partial_;  // guarded by mu_: steps with loss or norm pending
  std::map<int64_t, int> parts_;         // guarded by mu_
  int64_t next_emit_ = 0;                // guarded by mu_
  int parts_per_step_ = 2;               // the loss and the gradient norm; the loss alone without a norm sink
  std::map<int, std::string> waiting_;   // guarded by mu_: in-flight movements by task, for stall reports
};

}  // namespace fr::actor
