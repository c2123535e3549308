// The chain: request validation, then the strategies in order (boxing.h), for Box() and Price().
#include <algorithm>
#include <limits>

#include "boxing/strategies.h"

namespace fr::boxing {

namespace {

using StrategyFn = std::optional<Built> (*)(Builder&);

// In order; the last never declines.
constexpr StrategyFn kChain[] = {Identity, SamePlacement, CrossPlacement, Fallback};

Status CheckSide(const char* side, const Shape& logical, const sbp::NdSbp& nd, const sbp::Placement& p) {
  auto where = [&] { return std::string("[boxing] ") + side + " " + nd.ToString() + " on " + p.ToString() + ": "; };
  if (p.size() == 0) return Status::Invalid(where() + "the placement is empty");
  const std::vector<int>& ranks = p.ranks();
  std::vector<int> sorted = ranks;  // sorted to find a fault in O(n log n): pricing checks 1024 ranks often
  std::sort(sorted.begin(), sorted.end());
  if (sorted.front() < 0 || std::adjacent_find(sorted.begin(), sorted.end()) != sorted.end()) {
    for (size_t i = 0; i < ranks.size(); ++i) {  // the first faulty rank in the placement's order
      bool repeated = std::find(ranks.begin(), ranks.begin() + static_cast<long>(i), ranks[i]) != ranks.begin() + static_cast<long>(i);
      if (ranks[i] < 0 || repeated) return Status::Invalid(where() + "rank " + std::to_string(ranks[i]) + " is negative or repeated");
    }
  }
  Status s = sbp::Check(logical, nd, p);
  return s.ok() ? s : s.With(where());
}

Status CheckRequest(const Request& r) {
  RETURN_IF_ERROR(CheckSide("src", r.logical, r.src, r.src_place));
  return CheckSide("dst", r.logical, r.dst, r.dst_place);
}

}  // namespace

Result<Plan> Box(const Request& r) {
  RETURN_IF_ERROR(CheckRequest(r));
  for (StrategyFn strategy : kChain) {
    Builder b(r, /*dry=*/false);
    if (std::optional<Built> got = strategy(b)) return std::move(b).Finish(std::move(got->strategy), std::move(got->dst));
  }
  Fatal(__FILE__, __LINE__, "boxing:", "the fallback declined");
}

Estimate Price(const Request& r) {
  if (!CheckRequest(r).ok()) return Estimate{"invalid", std::numeric_limits<double>::infinity(), 0, 0, 0, {}};
  if (!(r.src_place == r.dst_place)) return CountScatter(r);
  if (std::optional<Estimate> e = PriceOnePlacement(r)) return *e;
  for (StrategyFn strategy : kChain) {
    Builder b(r, /*dry=*/true);
    if (std::optional<Built> got = strategy(b))
      return Estimate{std::move(got->strategy), b.traffic().bytes_max(), b.traffic().collectives_max(), b.traffic().messages_max(),
                      b.traffic().rounds_max(), b.traffic().allreduces_max()};
  }
  Fatal(__FILE__, __LINE__, "boxing:", "the fallback declined");
}

}  // namespace fr::boxing
