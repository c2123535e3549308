#include "actor/movement.h"

#include <algorithm>

#include "base/device.h"

namespace fr::actor {

using boxing::Op;
using boxing::Task;

bool HostVisible(const Tensor& t) {
  const Backend* b = t.defined() ? BackendOf(t.device().type) : nullptr;
  return !t.defined() || (b && b->host_visible());
}

AxisView Around(const Shape& s, int axis) {
  AxisView v;
  for (int i = 0; i < s.rank(); ++i) {
    if (i < axis) v.outer *= s[i];
    if (i == axis) v.dim = s[i];
    if (i > axis) v.inner *= s[i];
  }
  return v;
}

std::string GroupString(const std::vector<int>& g) {
  std::string s = "{";
  for (size_t i = 0; i < g.size(); ++i) s += (i ? "," : "") + std::to_string(g[i]);
  return s + "}";
}

std::string Describe(const Task& t) {
  switch (t.op) {
    case Op::kSend: return "send to rank " + std::to_string(t.peer) + " tag " + std::to_string(t.tag);
    case Op::kRecv: return "recv from rank " + std::to_string(t.peer) + " tag " + std::to_string(t.tag);
    default:
      return std::string(boxing::Name(t.op)) + " over group " + GroupString(t.group) + " (collective " +
             std::to_string(t.collective) + ")";
  }
}

Status MovementError(int rank, const std::string& what, const std::string& why) {
  return Status::Runtime("[actor] rank " + std::to_string(rank) + ": " + what + ": " + why);
}

bool LaidOutAlike(const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const auto* in0 = static_cast<const char*>(in.front().raw());
  const auto* out0 = static_cast<const char*>(out.front().raw());
  const size_t es = SizeOf(in.front().dtype());
  size_t end = 0;
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].SharesStorageWith(in.front()) || !out[i].SharesStorageWith(out.front()) || in[i].SharesStorageWith(out[i]))
      return false;
    const auto at = static_cast<const char*>(in[i].raw()) - in0;
    if (at < static_cast<ptrdiff_t>(end) || static_cast<const char*>(out[i].raw()) - out0 != at || at % es != 0) return false;
    end = static_cast<size_t>(at) + in[i].bytes();
  }
  return in.front().storage()->bytes() >= end + (in0 - static_cast<const char*>(in.front().storage()->data())) &&
         out.front().storage()->bytes() >= end + (out0 - static_cast<const char*>(out.front().storage()->data()));
}

namespace {

Status CheckBucket(const Task& t, int rank, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
  const std::string what = Describe(t);
  if (t.rank != rank) return MovementError(rank, what, "the task is for rank " + std::to_string(t.rank));
  if (std::find(t.group.begin(), t.group.end(), rank) == t.group.end())
    return MovementError(rank, what, "rank " + std::to_string(rank) + " is not in the group");
  if (out.size() != in.size()) return MovementError(rank, what, std::to_string(in.size()) + " inputs but " + std::to_string(out.size()) + " outputs");
  const int p = static_cast<int>(t.group.size());
  const int k = static_cast<int>(std::find(t.group.begin(), t.group.end(), rank) - t.group.begin());
  for (size_t i = 0; i < in.size(); ++i) {
    if (!in[i].defined() || !out[i].defined()) return MovementError(rank, what, "tensor " + std::to_string(i) + " missing");
    if (in[i].dtype() != in[0].dtype() || out[i].dtype() != in[0].dtype()) return MovementError(rank, what, "dtypes differ within a bucket");
    // An all-reduce's output is its input's shape; a reduce-scatter's part k of it along the split
    // axis; an all-gather's input is part k of its output along the concat axis.
    Shape want = in[i].shape();
    if (t.op == Op::kReduceScatter) {
      if (t.split_axis < 0 || t.split_axis >= want.rank()) return MovementError(rank, what, "bad split axis for tensor " + std::to_string(i));
      want[t.split_axis] = sbp::SplitRange(want[t.split_axis], p, k).size();
    }
    if (t.op == Op::kAllGather) {
      want = out[i].shape();
      if (t.concat_axis < 0 || t.concat_axis >= want.rank()) return MovementError(rank, what, "bad concat axis for tensor " + std::to_string(i));
      Shape part = want;
      part[t.concat_axis] = sbp::SplitRange(want[t.concat_axis], p, k).size();
      if (!(part == in[i].shape())) want = Shape{};
    }
    if (!(want == out[i].shape()))
      return MovementError(rank, what, "input " + in[i].shape().ToString() + " does not fit output " + out[i].shape().ToString());
  }
  return Status::Ok();
}

}  // namespace

Status CheckMovement(const Task& t, int rank, int world, const std::vector<Tensor>& in, const std::vector<Tensor>& outs) {
  if ((t.op == Op::kAllReduce || t.op == Op::kReduceScatter || t.op == Op::kAllGather) && in.size() > 1)
    return CheckBucket(t, rank, in, outs);
  const std::string what = Describe(t);
  if (t.rank != rank) return MovementError(rank, what, "the task is for rank " + std::to_string(t.rank));
  const bool needs_in = t.op != Op::kRecv, needs_out = t.op != Op::kSend;
  if (in.size() != (needs_in ? 1u : 0u) || (needs_in && !in[0].defined()))
    return MovementError(rank, what, "expected " + std::string(needs_in ? "one input" : "no input") + ", got " +
                          std::to_string(in.size()));
  if (outs.size() > 1) return MovementError(rank, what, "expected at most one output, got " + std::to_string(outs.size()));
  const Tensor out = outs.empty() ? Tensor() : outs[0];
  if (needs_out != out.defined()) return MovementError(rank, what, needs_out ? "no output tensor" : "an output tensor for a send");
  if (needs_in && needs_out && in[0].dtype() != out.dtype()) return MovementError(rank, what, "input and output dtypes differ");
  if (t.op == Op::kSend || t.op == Op::kRecv) {
    if (t.peer < 0 || t.peer >= world || t.peer == rank) return MovementError(rank, what, "bad peer");
    if (t.tag < 0) return MovementError(rank, what, "negative tag");
    return Status::Ok();
  }
  const int p = static_cast<int>(t.group.size());
  const int k = static_cast<int>(std::find(t.group.begin(), t.group.end(), rank) - t.group.begin());
  if (k == p) return MovementError(rank, what, "rank " + std::to_string(rank) + " is not in the group");
  const Shape &x = in[0].shape(), &y = out.shape();
  Shape want = x;
  auto axis_ok = [&](int a) { return a >= 0 && a < x.rank() && x.rank() == y.rank(); };
  switch (t.op) {
    case Op::kAllReduce: break;
    case Op::kAllGather:
      if (!axis_ok(t.concat_axis)) return MovementError(rank, what, "bad concat axis");
      want[t.concat_axis] = y[t.concat_axis];
      if (x[t.concat_axis] != sbp::SplitRange(y[t.concat_axis], p, k).size()) want = Shape{};
      break;
    case Op::kReduceScatter:
      if (!axis_ok(t.split_axis)) return MovementError(rank, what, "bad split axis");
      want[t.split_axis] = sbp::SplitRange(x[t.split_axis], p, k).size();
      break;
    case Op::kAllToAll:
      // The group's tensor L: x is part k of L along concat_axis, y part k along split_axis.
      if (!axis_ok(t.concat_axis) || !axis_ok(t.split_axis) || t.concat_axis == t.split_axis)
        return MovementError(rank, what, "bad concat or split axis");
      want[t.split_axis] = sbp::SplitRange(x[t.split_axis], p, k).size();
      want[t.concat_axis] = y[t.concat_axis];
      if (x[t.concat_axis] != sbp::SplitRange(y[t.concat_axis], p, k).size()) want = Shape{};
      break;
    default: return MovementError(rank, what, "not a communicating op");
  }
  if (!(want == y)) return MovementError(rank, what, "input " + x.ToString() + " does not fit output " + y.ToString());
  return Status::Ok();
}


}  // namespace fr::actor
