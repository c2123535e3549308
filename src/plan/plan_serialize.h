// Plan serialization: the bytes every rank compares at start-up to know that all ranks compiled
// the same Plan (DESIGN.md §4), and a stable form for tools. Schema: plan/plan.proto.
//
// SerializePlan is deterministic: the same Plan gives the same bytes in every process of the same
// build (protobuf's deterministic serialization; attrs in name order). It covers the whole Plan,
// the initial parameter pieces and the predicted times included, so two plans with equal bytes
// are the same program. PlanHash is FNV-1a (64-bit) of those bytes.
//
// Thread-safety: pure functions of their argument; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "plan/plan.h"

namespace fr::ir {

std::string SerializePlan(const Plan& p);
uint64_t PlanHash(const Plan& p);  // Fnv1a64 (base/hash.h) of SerializePlan

}  // namespace fr::ir
