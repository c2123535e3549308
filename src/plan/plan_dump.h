// Renderings of a Plan for `flowrun plan --dump`: text for people, JSON for tools, and Graphviz
// dot (logical ops as nodes, boxing edges labelled with their transition and bytes).
#pragma once

#include <string>

#include "plan/plan.h"

namespace fr::ir {

std::string DumpText(const Plan& p, const Graph& g);
std::string DumpJson(const Plan& p, const Graph& g);
std::string DumpDot(const Plan& p, const Graph& g);

}  // namespace fr::ir
