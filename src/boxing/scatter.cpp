// The region-intersection strategies: send-recv (across placements, src without P) and the
// general fallback. Both build every dst piece the same way:
//   - a dst device on a P(sum) axis at coordinate != 0 holds zeros; every other dst device holds
//     the fully reduced data of its region (on P(max|min) axes every coordinate holds a copy);
//   - for each combination of src partial-axis coordinates, the src pieces that intersect the dst
//     region send their intersection (one holder per B-replicated piece, chosen as DstPiece says),
//     or slice or copy it when on the dst rank, and the dst assembles them;
//   - the combinations are reduced, innermost partial axis first, each with its own op.
#include <array>
#include <map>

#include "boxing/strategies.h"

namespace fr::boxing {

namespace {

using Coords = std::vector<int64_t>;

bool Intersect(const Region& a, const Region& b, Region* out) {
  out->resize(a.size());
  for (size_t i = 0; i < a.size(); ++i) {
    sbp::Range& r = (*out)[i];
    r = sbp::Range{std::max(a[i].begin, b[i].begin), std::min(a[i].end, b[i].end)};
    if (r.begin >= r.end) return false;
  }
  return true;
}

// `r` in the coordinates of a buffer that holds `origin`.
Region Relative(const Region& r, const Region& origin) {
  Region out = r;
  for (size_t i = 0; i < r.size(); ++i) out[i] = sbp::Range{r[i].begin - origin[i].begin, r[i].end - origin[i].begin};
  return out;
}

// Reduces contributions keyed by their coordinates along `partial` (src mesh axes), innermost
// first. When every axis reduces with the same op one task does it all.
int ReduceNested(Builder& b, std::map<Coords, int> level, const std::vector<int>& partial) {
  const sbp::NdSbp& src = b.request().src;
  bool same = true;
  for (int a : partial) same = same && src[a].reduce() == src[partial[0]].reduce();
  if (same && level.size() > 1) {
    std::vector<int> ins;
    for (const auto& [c, buf] : level) ins.push_back(buf);
    return b.Reduce(std::move(ins), src[partial[0]].reduce());
  }
  for (size_t t = partial.size(); t-- > 0;) {
    std::map<Coords, std::vector<int>> groups;
    for (const auto& [c, buf] : level) groups[Coords(c.begin(), c.begin() + static_cast<std::ptrdiff_t>(t))].push_back(buf);
    level.clear();
    for (auto& [c, bufs] : groups) level[c] = bufs.size() == 1 ? bufs[0] : b.Reduce(bufs, src[partial[t]].reduce());
  }
  return level.begin()->second;
}

// What the src pieces give dst device `d` (logical region `region`; `local`: the src device on
// d's rank, or -1): calls take(holder, s, count, meet) for each run of `count` pieces it takes
// from consecutive src devices s..s+count-1 whose pieces meet its region alike, `meet` being that
// intersection
// (logical coordinates, valid during the call), from src devices holder..holder+count-1 (s
// itself, or the replicas of s that d reads from). Returns false, taking nothing, when d holds
// zeros. Both the plan (DstPiece) and the price (CountScatter) follow it.
template <typename TakeFn>
bool ForEachTake(const Request& r, int d, int local, const Region& region, TakeFn&& take) {
  const sbp::Placement& sp = r.src_place;
  const Coords dc = r.dst_place.Coords(d);
  for (int a = 0; a < r.dst.size(); ++a)
    if (r.dst[a].is_partial() && r.dst[a].reduce() == sbp::Reduce::kSum && dc[static_cast<size_t>(a)] != 0) return false;
  // Replicas along a B axis hold the same logical value, but with P inner to that axis each replica
  // may split it into different partial pieces: so one dst device takes every piece from the same
  // coordinate along each B axis, its own rank's when the dst rank holds src data, else the first.
  const Coords local_coords = local >= 0 ? sp.Coords(local) : Coords();
  int offset = 0;  // from a coordinate-0 replica to the chosen one, in device indices
  std::array<bool, sbp::kMaxMeshAxes> replica_axis{};
  for (int a = 0, stride = sp.size(); a < sp.ndim(); ++a) {
    stride /= static_cast<int>(sp.hierarchy()[a]);
    replica_axis[static_cast<size_t>(a)] = r.src[a].is_broadcast() && sp.hierarchy()[a] > 1;
    if (replica_axis[static_cast<size_t>(a)] && local >= 0)
      offset += static_cast<int>(local_coords[static_cast<size_t>(a)]) * stride;
  }
  // The src devices in index order (row-major over the mesh, axis 0 outermost), descending the
  // mesh axes with the piece narrowed as PieceRanges narrows it: a subtree whose piece misses the
  // region along a split dim, or that is not the first replica along a B axis, is skipped whole
  // (on 1024 ranks a dst piece meets a few src pieces, not 1024). Below the last axis that splits
  // or picks a replica, every device of a subtree holds the same piece: one run.
  int last = -1;  // the innermost such axis
  for (int a = 0; a < sp.ndim(); ++a)
    if (r.src[a].is_split() || replica_axis[static_cast<size_t>(a)]) last = a;
  int run = 1;  // devices in a subtree below `last`
  for (int a = last + 1; a < sp.ndim(); ++a) run *= static_cast<int>(sp.hierarchy()[a]);
  Region meet, piece;
  for (int64_t n : r.logical.dims()) piece.push_back(sbp::Range{0, n});
  auto walk = [&](auto&& self, int a, int s) -> void {
    if (a == last + 1) {
      if (Intersect(region, piece, &meet)) take(s * run + offset, s * run, run, meet);
      return;
    }
    const int h = static_cast<int>(sp.hierarchy()[a]);
    if (replica_axis[static_cast<size_t>(a)]) return self(self, a + 1, s * h);
    if (!r.src[a].is_split()) {
      for (int c = 0; c < h; ++c) self(self, a + 1, s * h + c);
      return;
    }
    sbp::Range& dim = piece[static_cast<size_t>(r.src[a].axis())];
    const sbp::Range want = region[static_cast<size_t>(r.src[a].axis())], whole = dim;
    for (int c = 0; c < h; ++c) {
      const sbp::Range sub = sbp::SplitRange(whole.size(), h, c);
      dim = sbp::Range{whole.begin + sub.begin, whole.begin + sub.end};
      if (dim.end <= want.begin) continue;
      if (dim.begin >= want.end) break;
      self(self, a + 1, s * h + c);
    }
    dim = whole;
  };
  walk(walk, 0, 0);
  return true;
}

// The dst piece of device `d`, built from the src pieces.
int DstPiece(Builder& b, int d, const std::vector<int>& partial, const std::vector<Coords>& src_coords,
             const std::vector<Region>& src_regions) {
  const Request& r = b.request();
  const int rank = r.dst_place.ranks()[static_cast<size_t>(d)];
  const Region region = sbp::PieceRanges(r.logical, r.dst, r.dst_place, d);
  const Shape shape = ShapeOf(region);
  std::map<Coords, std::pair<std::vector<int>, std::vector<Region>>> pieces;  // per partial combination
  auto take = [&](int first_holder, int first, int count, const Region& meet) {
    for (int k = 0; k < count; ++k) {
      const int holder = first_holder + k, s = first + k;
      int buf = b.src()[static_cast<size_t>(holder)];
      const Region& held = src_regions[static_cast<size_t>(holder)];
      if (meet != held) buf = b.Slice(buf, Relative(meet, held));
      if (b.buffer(buf).rank != rank) buf = b.Transfer(buf, rank);
      Coords combo;
      for (int a : partial) combo.push_back(src_coords[static_cast<size_t>(s)][static_cast<size_t>(a)]);
      auto& [bufs, at] = pieces[combo];
      bufs.push_back(buf);
      at.push_back(Relative(meet, region));
    }
  };
  if (!ForEachTake(r, d, r.src_place.IndexOf(rank), region, take)) return b.Zero(rank, shape);

  std::map<Coords, int> contributions;
  for (auto& [combo, p] : pieces) {
    auto& [bufs, at] = p;
    bool whole = bufs.size() == 1 && at[0] == Whole(shape);
    contributions[combo] = whole ? bufs[0] : b.Assemble(rank, shape, std::move(bufs), std::move(at));
  }
  FR_CHECK(!contributions.empty(), "the src pieces cover every region");
  int out = contributions.size() == 1 ? contributions.begin()->second : ReduceNested(b, std::move(contributions), partial);
  // A rank that is both source and destination copies its piece rather than sending it to itself.
  return b.IsSrc(out) ? b.Copy(out) : out;
}

void SrcPieces(const Request& r, std::vector<Coords>* coords, std::vector<Region>* regions) {
  for (int s = 0; s < r.src_place.size(); ++s) {
    coords->push_back(r.src_place.Coords(s));
    regions->push_back(sbp::PieceRanges(r.logical, r.src, r.src_place, s));
  }
}

std::vector<int> Scatter(Builder& b, const std::vector<int>& partial) {
  const Request& r = b.request();
  std::vector<Coords> src_coords;
  std::vector<Region> src_regions;
  SrcPieces(r, &src_coords, &src_regions);
  std::vector<int> dst;
  for (int d = 0; d < r.dst_place.size(); ++d)
    dst.push_back(DstPiece(b, d, partial, src_coords, src_regions));
  return dst;
}

// The src mesh axes whose coordinates index separate contributions.
std::vector<int> PartialAxes(const Request& r) {
  std::vector<int> axes;
  for (int a = 0; a < r.src.size(); ++a)
    if (r.src[a].is_partial() && r.src_place.hierarchy()[a] > 1) axes.push_back(a);
  return axes;
}

}  // namespace

std::optional<Built> CrossPlacement(Builder& b) {
  const Request& r = b.request();
  std::vector<int> partial = PartialAxes(r);
  if (r.src_place == r.dst_place || !partial.empty()) return std::nullopt;
  return Built{"send-recv", Scatter(b, partial)};
}

std::optional<Built> Fallback(Builder& b) { return Built{"fallback", Scatter(b, PartialAxes(b.request()))}; }

Estimate CountScatter(const Request& r) {
  std::vector<int> partial = PartialAxes(r);
  // Per src device, what it sends: a run of src devices all sending to one dst rank adds to a
  // range of devices, kept as differences and summed once at the end (a P to P(max) move on 1024
  // ranks is a million messages). Byte counts are whole numbers far below 2^53, so these sums
  // equal the Builder's, message by message, to the last bit.
  const sbp::Placement& sp = r.src_place;
  std::vector<double> sent(static_cast<size_t>(sp.size()) + 1, 0);
  std::vector<int> sends(static_cast<size_t>(sp.size()) + 1, 0);
  std::vector<int> index_of;  // global rank -> src device index, -1 when not in the src placement
  for (int i = 0; i < sp.size(); ++i) {
    const int rank = sp.ranks()[static_cast<size_t>(i)];
    if (static_cast<size_t>(rank) >= index_of.size()) index_of.resize(static_cast<size_t>(rank) + 1, -1);
    index_of[static_cast<size_t>(rank)] = i;
  }
  Traffic traffic;
  const double size = static_cast<double>(SizeOf(r.dtype));
  for (int d = 0; d < r.dst_place.size(); ++d) {
    const int rank = r.dst_place.ranks()[static_cast<size_t>(d)];
    const int self = static_cast<size_t>(rank) < index_of.size() ? index_of[static_cast<size_t>(rank)] : -1;
    auto take = [&](int first_holder, int, int count, const Region& meet) {
      double n = size;
      for (const sbp::Range& x : meet) n *= static_cast<double>(x.end - x.begin);
      int messages = count;
      sent[static_cast<size_t>(first_holder)] += n;
      sent[static_cast<size_t>(first_holder + count)] -= n;
      sends[static_cast<size_t>(first_holder)] += 1;
      sends[static_cast<size_t>(first_holder + count)] -= 1;
      if (self >= first_holder && self < first_holder + count) {  // its own piece: no message
        --messages;
        sent[static_cast<size_t>(self)] -= n;
        sent[static_cast<size_t>(self) + 1] += n;
        sends[static_cast<size_t>(self)] -= 1;
        sends[static_cast<size_t>(self) + 1] += 1;
      }
      if (messages > 0) traffic.Received(rank, n * messages, messages);
    };
    ForEachTake(r, d, self, sbp::PieceRanges(r.logical, r.dst, r.dst_place, d), take);
  }
  double bytes = 0;
  int messages = 0;
  for (int i = 0; i < sp.size(); ++i) {
    bytes += sent[static_cast<size_t>(i)];
    messages += sends[static_cast<size_t>(i)];
    if (messages > 0) traffic.Sent(sp.ranks()[static_cast<size_t>(i)], bytes, messages);
  }
  return Estimate{r.src_place == r.dst_place || !partial.empty() ? "fallback" : "send-recv", traffic.bytes_max(), 0,
                  traffic.messages_max(), 0, {}};
}

}  // namespace fr::boxing
