// Internal to boxing/: the 1-D transitions (one mesh axis, one group of devices), the building
// block of the same-placement strategies. A group is the devices along one mesh axis with every
// other mesh coordinate fixed; together they hold one "group tensor", a region of the logical one.
#pragma once

#include <optional>
#include <string_view>
#include <vector>

#include "boxing/builder.h"

namespace fr::boxing {

enum class Step : uint8_t {
  kKeep,           // same SBP: nothing moves
  kCopy,           // B→P(max|min): every piece stays (the max of equal pieces is the piece)
  kSlice,          // B→S(i): each device slices its part, no traffic
  kZeroFill,       // B→P(sum): device 0 keeps the piece, the others hold zeros
  kAssemble,       // S(i)→P(sum): each device writes its part into zeros, no traffic
  kAllReduce,      // P(r)→B
  kReduceScatter,  // P(r)→S(i)
  kAllGather,      // S(i)→B
  kAllToAll,       // S(i)→S(j)
};
std::string_view Name(Step s);

// The 1-D step from `from` to `to`, or nullopt when there is none (P(sum)→P(max), S→P(max), ...).
std::optional<Step> Classify(sbp::Sbp from, sbp::Sbp to);

// The collective a step runs, or nullopt for the steps that move no data between ranks.
std::optional<Op> CollectiveOf(Step s);

struct Group {
  std::vector<int> ranks;  // global ranks, in coordinate order along the axis
  std::vector<int> in;     // the buffer each member holds
  Region region;           // the group tensor, in logical coordinates
};

// Applies `step` (from → to) within `g` and returns each member's new buffer. Members whose piece
// does not change keep their buffer.
std::vector<int> Apply(Builder& b, Step step, const Group& g, sbp::Sbp from, sbp::Sbp to);

}  // namespace fr::boxing
