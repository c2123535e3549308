// The Plan: the physical program of one training job. Every rank runs a subset of its tasks; each
// task becomes one actor. Tasks exchange registers (regsts): a regst has regst_num slots that its
// producer fills and its consumers read and give back, which bounds memory and gives back pressure.
//
// Time shape: a step has M micro-batches. A task acts once per micro-batch (per_step = false) or
// once per step. A per-step regst read by a per-micro-batch task is held for the M acts of the
// step (parameters); a per-micro-batch task writing a per-step regst fills one slot over M acts
// (gradient accumulation). A variable task owns one parameter and its optimizer state: it emits
// the parameter once per step and applies the update when the step's gradient arrives, after
// every reader has given the previous value back.
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "ir/graph.h"

namespace fr::ir {

enum class TaskKind : uint8_t {
  kData,      // reads micro-batches from the data source
  kCompute,   // runs one node's kernel
  kVariable,  // owns a parameter; runs its update node
  kLossSink,  // collects the loss per micro-batch for the step log
  kNormSink,  // collects the squared gradient norm per step
};
const char* Name(TaskKind k);

struct RegstDesc {
  int id = 0;
  ValueId value = kNoValue;
  TensorType type;
  int producer = -1;           // task id
  std::vector<int> consumers;  // task ids
  int regst_num = 1;
  bool per_step = false;
  Device device;               // where its slots live
  int64_t bytes() const { return type.shape.numel() * static_cast<int64_t>(SizeOf(type.dtype)); }
};

struct TaskDesc {
  int id = 0;
  int rank = 0;
  int stream = 0;              // index into Plan::streams
  Device device;               // where it computes; kernels are looked up by device.type
  TaskKind kind = TaskKind::kCompute;
  std::string name;
  NodeId node = -1;            // kCompute: its node; kVariable: the update node
  ValueId param = kNoValue;    // kVariable
  std::vector<int> in;         // regst per node input (-1: a constant, absent, or the variable's own param)
  std::vector<int> out;        // regsts it writes
  bool per_step = false;
};

struct Plan {
  int ranks = 1;
  int64_t steps = 0;
  int64_t micro_batches = 1;
  std::vector<std::string> streams;  // "compute", "data", ...
  std::vector<TaskDesc> tasks;
  std::vector<RegstDesc> regsts;

  // Acts of a task over the whole run.
  int64_t Acts(const TaskDesc& t) const;
  // Human-readable: the training graph's nodes with shapes, then tasks per rank and memory.
  std::string Dump(const Graph& g) const;
};

}  // namespace fr::ir
