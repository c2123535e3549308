// What every communicator (comm.h) shares about a movement: its description for errors, the checks
// that its tensors fit its task (boxing.h's definition of each op), and how a tensor's parts along
// an axis lie in memory.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"
#include "base/tensor.h"
#include "boxing/boxing.h"

namespace fr::actor {

// A row-major shape seen around one axis: outer x dim x inner elements. A part along the axis is
// one contiguous run per outer index; with outer == 1 the parts are contiguous in the tensor.
struct AxisView {
  int64_t outer = 1, dim = 1, inner = 1;
};
AxisView Around(const Shape& s, int axis);

// Whether host code reads and writes t's memory directly: the CPU's, or a host-visible device's
// (an undefined tensor has none to read).
bool HostVisible(const Tensor& t);

// "{0,1,3}".
std::string GroupString(const std::vector<int>& g);
// "all-gather over group {0,1} (collective 3)", "send to rank 2 tag 7".
std::string Describe(const boxing::Task& t);
// "[actor] rank R: <what>: <why>".
Status MovementError(int rank, const std::string& what, const std::string& why);

// Whether task `t`, run on `rank` of a world of `world` ranks, fits its inputs and outputs: the
// counts, dtypes and shapes boxing.h defines for its op, buckets included; the peer of a send or
// receive. A communicator would not notice some mismatches (a short message, different counts on
// two members) and leave `out` half written.
Status CheckMovement(const boxing::Task& t, int rank, int world, const std::vector<Tensor>& in,
                     const std::vector<Tensor>& out);

// Whether a bucket's inputs lie in one allocation in order, with gaps a multiple of the element
// size, and its outputs at the same offsets in another (actor::Runtime lays buckets out so): then
// one all-reduce over the whole span, the gaps included, takes the place of packing into a staging
// buffer and unpacking from it.
bool LaidOutAlike(const std::vector<Tensor>& in, const std::vector<Tensor>& out);

}  // namespace fr::actor
