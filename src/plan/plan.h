// The Plan: the physical program of one training job, the same on every rank. Each rank runs its
// own tasks; each task becomes one actor. Tasks exchange registers (regsts): a regst lives on one
// rank and has regst_num slots that its producer fills and its consumers read and give back, which
// bounds memory and gives back pressure.
//
// Physical view: every logical op becomes one compute task per device of its placement, running a
// physical copy of the node (Plan::nodes, shapes of the pieces). Every data movement is a task too:
// boxing tasks (slice, assemble, reduce, copy, send, recv and collectives, see boxing/boxing.h)
// carry a boxing::Task with their parameters, collectives numbered in one compile-time order.
//
// Time shape: a step has M micro-batches. A task acts once per micro-batch (per_step = false) or
// once per step. A per-step regst read by a per-micro-batch task is held for the M acts of the
// step (parameters); a per-micro-batch task writing a per-step regst fills one slot over M acts
// (gradient accumulation). A variable task owns one parameter piece and its optimizer state: it
// emits the piece once per step and applies the update when the step's gradient arrives, after
// every reader has given the previous value back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "boxing/boxing.h"
#include "graph/graph.h"
#include "sbp/sbp.h"

namespace fr::ir {

enum class TaskKind : uint8_t {
  kData,      // reads its rank's pieces of the micro-batches from the data source
  kCompute,   // runs one physical node's kernel
  kVariable,  // owns a parameter piece; runs its update node
  kBoxing,    // one boxing::Task: data movement
  kLossSink,  // reports the step's loss (its micro-batches' summed, over M) to the step log
  kNormSink,  // collects the squared gradient norm per step
  kStatSink,  // reports a micro-batch's BatchNorm statistic (its `param`) to the trainer: rank 0 and its stage's ranks
  kCopy,      // copies a regst to another device of its rank (host to device or back): in[0] -> out[0]
};
const char* Name(TaskKind k);

// What a stream of a rank runs: kernels (and the register pool's acts), the data loader, data
// movement across ranks, or copies between a rank's devices. The runtime gives each kind its
// thread and polling (actor/runtime.h).
enum class StreamKind : uint8_t { kCompute, kData, kComm, kCopy };
const char* Name(StreamKind k);

struct RegstDesc {
  int id = 0;
  ValueId value = kNoValue;    // the logical tensor it holds a piece of (or a boxing intermediate of)
  TensorType type;             // the piece
  int rank = 0;
  int producer = -1;           // task id
  std::vector<int> consumers;  // task ids
  int regst_num = 1;
  bool per_step = false;
  Device device;               // where its slots live: its producer's device
  int64_t bytes() const { return type.shape.numel() * static_cast<int64_t>(SizeOf(type.dtype)); }
};

// A node input of a task: a regst, a constant piece (Plan::consts), or nothing.
struct TaskInput {
  int regst = -1;
  int konst = -1;
};

struct TaskDesc {
  int id = 0;
  int rank = 0;
  int stream = 0;              // index into Plan::streams
  // Where it runs: compute, variable and boxing tasks on their stage's device, the loader and the
  // sinks on the host, a copy on the device side of its copy. Every regst it reads is on this
  // device (a kCopy reads the other side's), which lowering makes so with kCopy tasks.
  Device device;
  TaskKind kind = TaskKind::kCompute;
  std::string name;
  int node = -1;               // kCompute: index into Plan::nodes; kVariable: its update node (or -1)
  NodeId logical = -1;         // the logical node, for dumps
  ValueId param = kNoValue;    // kVariable: the parameter; kStatSink: the statistic it reports
  int param_piece = -1;        // kVariable: index into Plan::consts of its initial piece
  // kVariable: the update group it belongs to (plan/lower.h), or -1 where it updates alone.
  // Variables of one group update in one call of their op's group kernel (ops/op.h).
  int update_group = -1;
  std::vector<TaskInput> in;   // per node input (kCompute, kVariable: in[0] is the parameter itself)
  std::vector<int> out;        // regsts it writes
  bool per_step = false;
  boxing::Task move;           // kBoxing; its in/out are regst ids
};

// Where a logical tensor lives and what data movement its consumers needed.
struct ValuePlacement {
  ValueId value = kNoValue;
  int stage = 0;
  sbp::NdSbp sbp;
  std::vector<int> regsts;     // its piece per device of the stage's placement
};

struct BoxingEdge {
  ValueId value = kNoValue;
  int src_stage = 0, dst_stage = 0;
  sbp::NdSbp src, dst;
  std::string strategy;
  int64_t bytes_per_rank = 0;  // per act
  bool per_step = false;
  int bucket = -1;             // a gradient all-reduce fused into this bucket (plan/lower.h)
  std::vector<std::string> consumers;  // logical node names
};

struct Plan {
  int ranks = 1;
  int64_t steps = 0;
  int64_t micro_batches = 1;
  std::vector<StreamKind> streams;        // indexed by TaskDesc::stream
  // The pipeline's stages (LowerOptions::stages), then, where rank 0 alone is not one of them, the
  // stage the loss and norm sinks live on.
  std::vector<sbp::Placement> stages;
  int pipeline_stages = 1;                // of `stages`, the first this many hold the model
  std::vector<Node> nodes;                // physical nodes
  std::vector<Tensor> consts;             // constant pieces and initial parameter pieces
  std::vector<TaskDesc> tasks;
  std::vector<RegstDesc> regsts;
  std::vector<ValuePlacement> values;     // per logical value with a producer or source
  std::vector<std::string> node_sig;      // per logical node: its nd-signature, for dumps
  std::vector<int> node_stage;            // per logical node
  std::vector<BoxingEdge> edges;
  // The step model's prediction (assign/step.h), for plans the SBP assignment made (zero otherwise):
  // the step, and of the busiest stage's work its compute and data movement, and its bubble.
  struct Prediction {
    double step_s = 0, compute_s = 0, comm_s = 0, bubble_s = 0;
  };
  Prediction predicted;

  // Acts of a task over `steps` steps (the whole run: Plan::steps).
  int64_t Acts(const TaskDesc& t) const { return Acts(t, steps); }
  int64_t Acts(const TaskDesc& t, int64_t steps) const;
  // Whether a copy task fills device register `regst`, or reads host register `regst` onto a
  // device. The runtime gives the slots of both memory of their own (the latter pinned), and
  // hands them between the copy and the other side by events (actor::Runtime).
  bool CopiedIn(int regst) const;
  bool CopiedOut(int regst) const;
  // Bytes a rank sends per step, summed over its boxing tasks.
  int64_t BytesMoved(int rank) const;
  // Memory per rank: parameters, optimizer state, and registers. The runtime gives a slot memory
  // only while it is filled or read (actor/pool.h), so `regsts` is an estimate of the most it
  // holds at once: one micro-batch run in the rank's task order (a topological order, ties by
  // task id), each per-micro-batch slot live from its producer to its last consumer, while
  // per-step regsts, the loader's, those with several slots (pipeline edges) and both sides of a
  // copy onto a device (CopiedIn, CopiedOut: their own memory) count in full all the time. `regsts_every_slot` is what one allocation per slot would take.
  struct Memory { int64_t params = 0, state = 0, regsts = 0, regsts_every_slot = 0; };
  Memory MemoryOf(int rank) const;
};

}  // namespace fr::ir
