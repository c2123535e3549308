// Executes a boxing::Plan on simulated ranks in one process: the boxing rung of the correctness
// ladder (DESIGN.md §6), with no MPI.
//
// Each rank runs its own tasks in plan order, as a rank of the real runtime issues them: a send
// never blocks (buffered), a receive waits for the message with its (sender, tag), and a
// collective runs once every member has reached it. Running out of runnable tasks before the end
// is reported as a deadlock. The run also checks the plan's contract (boxing.h): buffers on their
// task's rank, written once, with the shapes the plan gives them; each collective's tasks agree on
// op, group and parameters, one per member; every rank meets collectives in increasing id order;
// every message is received. Supports float32, int32 and int64 (copies work for any dtype).
#pragma once

#include <vector>

#include "base/tensor.h"
#include "boxing/boxing.h"

namespace fr::boxing {

// src[i] is the piece of src device i (the plan's dtype, its buffer's shape). Returns the piece of
// each dst device, or an error naming the broken rule and the task.
Result<std::vector<Tensor>> Simulate(const Plan& plan, const std::vector<Tensor>& src);

// Region helpers, also used by tests. A region has one range per tensor axis.
// A new tensor holding t[region].
Tensor SliceOf(const Tensor& t, const std::vector<sbp::Range>& region);
// dst[at] = src; `at` has src's shape.
void WriteRegion(const Tensor& dst, const std::vector<sbp::Range>& at, const Tensor& src);
// acc = reduce(acc, x), elementwise; same dtype and shape.
void ReduceInto(const Tensor& acc, const Tensor& x, sbp::Reduce op);

}  // namespace fr::boxing
