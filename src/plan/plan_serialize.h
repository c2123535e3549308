// Plan serialization: the bytes every rank compares at start-up to know that all ranks compiled
// the same Plan (DESIGN.md §4), and a stable form for tools. Schema: plan/plan.proto.
//
// SerializePlan is deterministic: the same Plan gives the same bytes in every process of the same
// build (protobuf's deterministic serialization; attrs in name order). It covers the whole Plan,
// the initial parameter pieces and the predicted times included, so two plans with equal bytes
// are the same program; protobuf limits it to plans under 2 GiB. PlanHash covers the same and has
// no limit: FNV-1a (64-bit) of the serialized plan without the pieces' bytes, then of those bytes
// a word at a time (every rank of a data-parallel GPT-2 holds the plan's pieces for all ranks).
//
// Thread-safety: pure functions of their argument; call them from any thread.
#pragma once

#include <cstdint>
#include <string>
#include <string_view>

#include "plan/plan.h"

namespace fr::ir {

std::string SerializePlan(const Plan& p);
uint64_t PlanHash(const Plan& p);

}  // namespace fr::ir
