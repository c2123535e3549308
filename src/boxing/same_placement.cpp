// Identity and the same-placement strategy (1-D and N-D).
//
// The N-D decomposition. On one placement, src and dst differ on some mesh axes (axes of size 1
// do not count: every SBP gives the same piece there). Changing one axis a while the others stay
// is a 1-D step inside every group of devices along a (the devices that share all other mesh
// coordinates). The other axes give each group one region of the logical tensor, the group tensor;
// the group's pieces are its 1-D pieces of that region, so the 1-D steps apply unchanged, and all
// groups' collectives go into the one plan. Several differing axes change one at a time. Changing
// axis a, from the current nd-SBP `cur`, is valid when:
//   - a 1-D step exists for cur[a]→dst[a];
//   - if that step splits or gathers tensor axis k, no later mesh axis (size > 1) splits k: a later
//     axis splits inside a's parts, so the group's pieces would not be a 1-D split of its tensor;
//   - if it reduces (P→B, P→S), every later partial axis reduces with the same op: inner axes
//     reduce first (boxing.h), and reducing an outer axis across an inner one of another kind
//     changes the value; an outer partial axis is fine whatever its kind;
//   - the new nd-SBP still fits the shape (sbp::Check).
// Introducing P (zero-fill, assemble, copy) is valid under any other axes. Among the valid orders
// the one with the fewest bytes wins; ties prefer slicing first (it shrinks what later steps
// move), then resolving P, then all-to-all, all-gather, and introducing P last. When no order is
// valid the strategy declines and the fallback plans it.
#include <algorithm>

#include "boxing/steps.h"
#include "boxing/strategies.h"

namespace fr::boxing {

using sbp::NdSbp;
using sbp::Sbp;

namespace {

bool Trivial(const sbp::Placement& p, int axis) { return p.hierarchy()[axis] == 1; }

// Tie-break rank of a step; lower goes first.
int Priority(Step s) {
  switch (s) {
    case Step::kSlice: return 0;
    case Step::kAllReduce:
    case Step::kReduceScatter: return 1;
    case Step::kAllToAll: return 2;
    case Step::kAllGather: return 3;
    default: return 4;
  }
}

// The steps of `order` from `src`, or nullopt when one is not valid (see the file comment).
std::optional<std::vector<Step>> Validate(const Request& r, NdSbp cur, const std::vector<int>& order) {
  const sbp::Placement& pl = r.src_place;
  std::vector<Step> steps;
  for (int a : order) {
    Sbp from = cur[a], to = r.dst[a];
    std::optional<Step> step = Classify(from, to);
    if (!step) return std::nullopt;
    for (int c = a + 1; c < pl.ndim(); ++c) {
      if (Trivial(pl, c)) continue;
      const Sbp& later = cur[c];
      if (later.is_split() && ((from.is_split() && from.axis() == later.axis()) || (to.is_split() && to.axis() == later.axis())))
        return std::nullopt;
      if (from.is_partial() && !to.is_partial() && later.is_partial() && later.reduce() != from.reduce())
        return std::nullopt;
    }
    cur[a] = to;
    if (!sbp::Check(r.logical, cur, pl).ok()) return std::nullopt;
    steps.push_back(*step);
  }
  return steps;
}

// The strategy's name for `steps` along `order`: "all-gather" on 1-D, "all-reduce@1 > all-gather@0".
std::string StepNames(const sbp::Placement& pl, const std::vector<int>& order, const std::vector<Step>& steps) {
  if (pl.ndim() == 1) return std::string(Name(steps[0]));
  std::string name;
  for (size_t s = 0; s < order.size(); ++s) name += (s ? " > " : "") + std::string(Name(steps[s])) + "@" + std::to_string(order[s]);
  return name;
}

// Builds the steps of a valid `order` into `b`; returns the dst buffers.
std::vector<int> Build(Builder& b, NdSbp cur, const std::vector<int>& order, const std::vector<Step>& steps) {
  const Request& r = b.request();
  const sbp::Placement& pl = r.src_place;
  std::vector<int> bufs = b.src();  // per device index
  for (size_t s = 0; s < order.size(); ++s) {
    int a = order[s];
    int64_t stride = 1;
    for (int c = a + 1; c < pl.ndim(); ++c) stride *= pl.hierarchy()[c];
    NdSbp whole = cur;
    whole[a] = Sbp::B();
    for (int first = 0; first < pl.size(); ++first) {
      if (pl.Coords(first)[static_cast<size_t>(a)] != 0) continue;
      Group g;
      g.region = sbp::PieceRanges(r.logical, whole, pl, first);
      for (int64_t k = 0; k < pl.hierarchy()[a]; ++k) {
        int dev = first + static_cast<int>(k * stride);
        g.ranks.push_back(pl.ranks()[static_cast<size_t>(dev)]);
        g.in.push_back(bufs[static_cast<size_t>(dev)]);
      }
      std::vector<int> out = Apply(b, steps[s], g, cur[a], r.dst[a]);
      for (int64_t k = 0; k < pl.hierarchy()[a]; ++k) bufs[static_cast<size_t>(first + k * stride)] = out[static_cast<size_t>(k)];
    }
    cur[a] = r.dst[a];
  }
  return bufs;
}

// What Build would count, without building, when every step's group tensor is equally large in
// every group (each step's nd-SBP with its own axis made B splits every tensor axis evenly): then
// every rank takes part in one group per step and moves the same bytes, summed in step order as
// the Builder sums them. nullopt when some pieces are uneven.
struct Count {
  double bytes = 0;
  int collectives = 0, rounds = 0;
  Estimate::AllReduces allreduces;
};
std::optional<Count> EvenCount(const Request& r, NdSbp cur, const std::vector<int>& order, const std::vector<Step>& steps) {
  const sbp::Placement& pl = r.src_place;
  Count n;
  for (size_t s = 0; s < order.size(); ++s) {
    const int a = order[s];
    NdSbp whole = cur;
    whole[a] = Sbp::B();
    double size = static_cast<double>(SizeOf(r.dtype));
    for (int k = 0; k < r.logical.rank(); ++k) {
      int64_t parts = 1;
      for (int c = 0; c < pl.ndim(); ++c)
        if (whole[c].is_split() && whole[c].axis() == k) parts *= pl.hierarchy()[c];
      if (r.logical[k] % parts) return std::nullopt;
      size *= static_cast<double>(r.logical[k] / parts);
    }
    if (std::optional<Op> op = CollectiveOf(steps[s])) {
      const int p = static_cast<int>(pl.hierarchy()[a]);
      const double bytes = CollectiveBytes(*op, p, size);
      n.bytes += bytes;
      n.collectives += 1;
      n.rounds += CollectiveRounds(p);
      if (*op == Op::kAllReduce) {
        n.allreduces.count += 1;
        n.allreduces.rounds += CollectiveRounds(p);
        n.allreduces.bytes += bytes;
        n.allreduces.read += p * size;
      }
    }
    cur[a] = r.dst[a];
  }
  return n;
}

struct Route {
  NdSbp start;
  std::vector<int> order;
  std::vector<Step> steps;
};

// The route SamePlacement takes, or nullopt when it declines (identity's case included).
std::optional<Route> Choose(const Request& r) {
  if (!(r.src_place == r.dst_place)) return std::nullopt;
  const sbp::Placement& pl = r.src_place;
  NdSbp start = r.src;
  std::vector<int> axes;
  for (int a = 0; a < pl.ndim(); ++a) {
    if (Trivial(pl, a)) {
      start[a] = r.dst[a];
    } else if (!(r.src[a] == r.dst[a])) {
      axes.push_back(a);
    }
  }
  if (axes.empty() || !sbp::Check(r.logical, start, pl).ok()) return std::nullopt;  // empty: identity's

  // Every order of the differing axes (few: a mesh has 1 to 3 axes); keep the best valid one.
  std::optional<Route> best;
  double best_bytes = 0;
  std::vector<int> best_key;
  std::vector<int> order = axes;
  do {
    std::optional<std::vector<Step>> steps = Validate(r, start, order);
    if (!steps) continue;
    double bytes = 0;
    if (order.size() > 1) {
      if (std::optional<Count> n = EvenCount(r, start, order, *steps)) {
        bytes = n->bytes;
      } else {
        Builder trial(r, /*dry=*/true);
        Build(trial, start, order, *steps);
        bytes = trial.traffic().bytes_max();
      }
    }
    std::vector<int> key;
    for (Step s : *steps) key.push_back(Priority(s));
    if (!best || bytes < best_bytes || (bytes == best_bytes && key < best_key)) {
      best = Route{start, order, *steps};
      best_bytes = bytes;
      best_key = key;
    }
  } while (std::next_permutation(order.begin(), order.end()));
  return best;
}

bool IsIdentity(const Request& r) {
  if (!(r.src_place == r.dst_place)) return false;
  for (int a = 0; a < r.src.size(); ++a)
    if (!(r.src[a] == r.dst[a]) && !Trivial(r.src_place, a)) return false;
  return true;
}

}  // namespace

std::optional<Built> Identity(Builder& b) {
  if (!IsIdentity(b.request())) return std::nullopt;
  return Built{"identity", b.src()};
}

std::optional<Built> SamePlacement(Builder& b) {
  std::optional<Route> route = Choose(b.request());
  if (!route) return std::nullopt;
  Built built;
  built.strategy = StepNames(b.request().src_place, route->order, route->steps);
  built.dst = Build(b, route->start, route->order, route->steps);
  return built;
}

std::optional<Estimate> PriceOnePlacement(const Request& r) {
  if (IsIdentity(r)) return Estimate{"identity", 0, 0, 0, 0, {}};
  std::optional<Route> route = Choose(r);
  if (!route) return CountScatter(r);
  std::optional<Count> n = EvenCount(r, route->start, route->order, route->steps);
  if (!n) return std::nullopt;
  return Estimate{StepNames(r.src_place, route->order, route->steps), n->bytes, n->collectives, 0, n->rounds, n->allreduces};
}

}  // namespace fr::boxing
