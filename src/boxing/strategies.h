// Internal to boxing/: the strategies of the chain (boxing.h lists them). Each takes a fresh
// Builder (which holds the request and the src buffers) and either declines (std::nullopt, having
// added nothing that matters: the chain drops that builder) or returns its name and the dst
// buffers.
#pragma once

#include <optional>
#include <string>
#include <vector>

#include "boxing/builder.h"

namespace fr::boxing {

struct Built {
  std::string strategy;
  std::vector<int> dst;  // buffer of each dst device
};

// Same placement and the same piece on every device (equal nd-SBPs up to axes of size 1).
std::optional<Built> Identity(Builder& b);
// Same placement: one 1-D step per differing mesh axis (same_placement.cpp).
std::optional<Built> SamePlacement(Builder& b);
// Price's shortcuts: the Estimate of the plan the chain would build, counted without building it.
// One placement: Identity's, SamePlacement's when every step's group tensor is equally large in
// every group, else Fallback's; nullopt for uneven pieces (Price builds those dry).
std::optional<Estimate> PriceOnePlacement(const Request& r);
// CrossPlacement's or Fallback's, for a request the strategies before them decline.
Estimate CountScatter(const Request& r);
// Different placements, src without partial axes: send/recv of intersections (scatter.cpp).
std::optional<Built> CrossPlacement(Builder& b);
// Never declines (scatter.cpp).
std::optional<Built> Fallback(Builder& b);

}  // namespace fr::boxing
