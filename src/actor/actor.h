// Actor: runs one Plan task. It acts when every input regst it needs has a ready slot and every
// output it fills has a free slot; after acting it sends a req to the consumers of what it filled
// and an ack to the producers of what it finished reading. There is no scheduler: readiness is
// local, and regst_num slots per regst bound how far a producer runs ahead (back pressure).
//
// Thread-safety: an actor is touched only by its stream's thread (Handle), except acts_done(),
// which any thread may read.
#pragma once

#include <atomic>
#include <deque>
#include <map>
#include <utility>
#include <vector>

#include "actor/message.h"
#include "base/status.h"
#include "base/tensor.h"
#include "graph/graph.h"
#include "ops/op.h"
#include "plan/plan.h"

namespace fr::actor {

class Runtime;

// A boxing task that moves data across ranks through the communicator (not a local copy or slice).
bool MovesAcrossRanks(const ir::TaskDesc& t);

class Actor {
 public:
  Actor(Runtime& rt, const ir::Plan& plan, const ir::TaskDesc& task);
  void Handle(const Msg& m);
  int64_t acts_done() const { return acts_done_.load(std::memory_order_relaxed); }
  int64_t total_acts() const { return total_; }
  const ir::TaskDesc& task() const { return task_; }
  // On a thread that runs its ready acts oldest micro-batch first (Runtime): TryAct only announces
  // that the next act is ready, and the thread calls RunNext when its turn comes.
  void set_deferred(bool d) { deferred_ = d; }
  // The next act's (step, micro-batch): what the thread orders ready acts by.
  std::pair<int64_t, int64_t> NextKey() const;
  // The step the next act belongs to, for Runtime::MayStart: a variable's act k updates with step
  // k-1's gradient (act 0 only emits the parameter: step -1).
  int64_t NextStep() const;
  // Whether what it writes is sent across ranks (a gradient accumulator in a bucket, the last
  // forward op of a pipeline stage): among ready acts of one micro-batch these go first, so that
  // the movement starts while the thread computes the rest.
  bool feeds_movement() const { return feeds_movement_; }
  void RunNext();
  // A grouped variable waiting for its group (Runtime::JoinUpdate): its update's kernel context,
  // on the inputs it holds for the act.
  KernelCtx UpdateCtx() const;

 private:
  // One regst seen from this actor. Act k uses the port iff skip <= k < skip + pieces * ratio; it
  // uses piece (k - skip) / ratio, and finishes it at the piece's last act.
  struct Port {
    int regst = -1;
    int peer = -1;         // producer (inputs)
    int64_t ratio = 1, skip = 0, pieces = 0;
    std::deque<int> slots;  // inputs: ready slots in order; outputs: free slots
    std::vector<int> pending;  // outputs: acks outstanding per slot
    int current = -1;       // outputs: the slot being filled
    bool copied = false;    // inputs: a copy onto a device fills it; outputs: one reads it onto one
    bool Uses(int64_t k) const { return k >= skip && k < skip + pieces * ratio; }
    bool Starts(int64_t k) const { return Uses(k) && (k - skip) % ratio == 0; }
    bool Ends(int64_t k) const { return Uses(k) && (k - skip) % ratio == ratio - 1; }
  };

  bool Ready() const;
  void CommDone();  // the in-flight movement finished
  void TryAct();
  void ActOnce();
  void Finish();  // gives back what act next_ read, announces what it wrote
  bool Communicates() const;
  // Whether act k updates the parameter with its update group, not alone.
  bool JoinsGroup(int64_t k) const { return task_.update_group >= 0 && k > 0; }
  Status Body(int64_t k);
  Status Compute(int64_t step, int64_t micro);
  Status Variable(int64_t k);
  // The tensor behind node input i for this act (a regst slot, a constant or the parameter).
  Tensor InputTensor(size_t i) const;
  Tensor RegstTensor(int regst) const;
  Status Move();
  Status Copy();
  Port* InPort(int regst);

  Runtime& rt_;
  const ir::Plan& plan_;
  const ir::TaskDesc& task_;
  DeviceStream* stream_;       // its device's compute stream, which its kernels queue on
  std::vector<Port> in_, out_;
  // A copy task's marks, by (regst, slot): an event recorded on the device's compute stream when
  // the slot's message arrived, after the kernels of the act that sent it were queued (Handle).
  // Inputs: the slot's producer is done when its mark is; outputs: the slot's readers are. The
  // copy waits for the mark, not for everything queued on the compute stream since (Copy).
  std::map<std::pair<int, int>, std::shared_ptr<Event>> marks_;
  int64_t total_ = 0;
  int64_t next_ = 0;           // the next act
  bool in_flight_ = false;     // a data movement started and not finished, or a group update
  std::vector<Tensor> update_in_;  // JoinsGroup: the update node's inputs for the act
  int64_t update_step_ = 0;        // and its step
  bool deferred_ = false;
  bool announced_ = false;     // deferred: its next act is in the thread's ready set
  bool feeds_movement_ = false;
  std::atomic<int64_t> acts_done_{0};
};

}  // namespace fr::actor
