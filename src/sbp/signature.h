// Signature: one legal combination of input and output SBPs of an op on one mesh axis
// (DESIGN.md §1). Each op's rule (ops/op.h, OpDef::sbp) lists every legal Signature of a node;
// expanding them to N-D meshes and choosing among them is sbp::assign's job.
//
// `in` has one Sbp per node input, absent optional inputs included (they are always B); `out` has
// one per node output. An optimizer update mutates its in[0] in place, so in[0]'s Sbp is also the
// Sbp of the updated parameter.
#pragma once

#include <string>
#include <vector>

#include "sbp/sbp.h"

namespace fr::sbp {

struct Signature {
  std::vector<Sbp> in;
  std::vector<Sbp> out;

  bool operator==(const Signature&) const = default;

  // "(S(0), B) -> S(0)"; several outputs (or none) are parenthesised: "(P, B) -> (P, P)", "(S(0)) -> ()".
  std::string ToString() const {
    auto list = [](const std::vector<Sbp>& v) {
      std::string s = "(";
      for (size_t i = 0; i < v.size(); ++i) s += (i ? ", " : "") + v[i].ToString();
      return s + ")";
    };
    return list(in) + " -> " + (out.size() == 1 ? out[0].ToString() : list(out));
  }
};

}  // namespace fr::sbp
