// Test helpers for boxing: physical pieces of a logical tensor under an nd-SBP, and the way back.
// Values are small integers, so every check is exact.
//   MakePieces: mesh axis 0 first, each axis turns every current tensor into its children: S(k)
//     slices, B copies, P(sum) splits values into random integers that sum to the parent, P(max)
//     (P(min)) gives pieces <= (>=) the parent with one random child exact per element.
//   Combine: the inverse, innermost mesh axis first: S concatenates, B requires equal copies,
//     P reduces. It fails (returns an undefined tensor and a reason) on unequal B copies or
//     mismatched shapes.
#pragma once

#include <random>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "boxing/simulate.h"
#include "sbp/sbp.h"

namespace fr::boxing::testing {

inline double Get(const Tensor& t, int64_t i) {
  return t.dtype() == DType::kF32 ? static_cast<double>(t.data<float>()[i]) : static_cast<double>(t.data<int64_t>()[i]);
}
inline void Set(const Tensor& t, int64_t i, double v) {
  if (t.dtype() == DType::kF32) {
    t.data<float>()[i] = static_cast<float>(v);
  } else {
    t.data<int64_t>()[i] = static_cast<int64_t>(v);
  }
}

inline bool Equal(const Tensor& a, const Tensor& b) {
  if (!(a.shape() == b.shape()) || a.dtype() != b.dtype()) return false;
  for (int64_t i = 0; i < a.numel(); ++i)
    if (Get(a, i) != Get(b, i)) return false;
  return true;
}

inline Tensor Logical(const Shape& s, DType dt, std::mt19937& rng) {
  Tensor t(dt, s);
  std::uniform_int_distribution<int> v(-9, 9);
  for (int64_t i = 0; i < t.numel(); ++i) Set(t, i, v(rng));
  return t;
}

inline std::vector<sbp::Range> WholeOf(const Shape& s) {
  std::vector<sbp::Range> r;
  for (int64_t d : s.dims()) r.push_back(sbp::Range{0, d});
  return r;
}

inline std::vector<Tensor> Children(const Tensor& t, sbp::Sbp s, int n, std::mt19937& rng) {
  std::vector<Tensor> c;
  if (s.is_split()) {
    for (int k = 0; k < n; ++k) {
      std::vector<sbp::Range> r = WholeOf(t.shape());
      r[static_cast<size_t>(s.axis())] = sbp::SplitRange(t.shape()[s.axis()], n, k);
      c.push_back(SliceOf(t, r));
    }
    return c;
  }
  for (int k = 0; k < n; ++k) c.push_back(t.Clone());
  if (s.is_broadcast() || n == 1) return c;
  std::uniform_int_distribution<int> delta(-5, 5), off(0, 4), who(0, n - 1);
  for (int64_t i = 0; i < t.numel(); ++i) {
    double v = Get(t, i);
    if (s.reduce() == sbp::Reduce::kSum) {
      double rest = v;
      for (int k = 0; k + 1 < n; ++k) {
        double x = delta(rng);
        Set(c[static_cast<size_t>(k)], i, x);
        rest -= x;
      }
      Set(c.back(), i, rest);
    } else {
      int exact = who(rng);
      double sign = s.reduce() == sbp::Reduce::kMax ? -1 : 1;
      for (int k = 0; k < n; ++k) Set(c[static_cast<size_t>(k)], i, k == exact ? v : v + sign * off(rng));
    }
  }
  return c;
}

// The piece of every device of `p`, in device order.
inline std::vector<Tensor> MakePieces(const Tensor& logical, const sbp::NdSbp& nd, const sbp::Placement& p, std::mt19937& rng) {
  std::vector<Tensor> level{logical};
  for (int a = 0; a < p.ndim(); ++a) {
    std::vector<Tensor> next;
    for (const Tensor& t : level)
      for (Tensor& c : Children(t, nd[a], static_cast<int>(p.hierarchy()[a]), rng)) next.push_back(std::move(c));
    level = std::move(next);
  }
  return level;
}

inline Tensor Combine(std::vector<Tensor> level, const sbp::NdSbp& nd, const sbp::Placement& p, std::string* why) {
  for (int a = p.ndim() - 1; a >= 0; --a) {
    const size_t n = static_cast<size_t>(p.hierarchy()[a]);
    std::vector<Tensor> next;
    for (size_t g = 0; g < level.size(); g += n) {
      std::vector<Tensor> kids(level.begin() + static_cast<std::ptrdiff_t>(g), level.begin() + static_cast<std::ptrdiff_t>(g + n));
      const sbp::Sbp s = nd[a];
      if (s.is_split()) {
        std::vector<int64_t> dims = kids[0].shape().dims();
        const size_t k = static_cast<size_t>(s.axis());
        dims[k] = 0;
        for (const Tensor& t : kids) dims[k] += t.shape()[s.axis()];
        Tensor out(kids[0].dtype(), Shape(dims));
        int64_t at = 0;
        for (const Tensor& t : kids) {
          Shape expect = out.shape();
          expect[s.axis()] = t.shape()[s.axis()];
          std::vector<sbp::Range> r = WholeOf(out.shape());
          r[k] = sbp::Range{at, at + t.shape()[s.axis()]};
          if (!(expect == t.shape())) {
            *why = "split pieces of mesh axis " + std::to_string(a) + " do not line up";
            return Tensor();
          }
          WriteRegion(out, r, t);
          at += t.shape()[s.axis()];
        }
        next.push_back(out);
      } else if (s.is_broadcast()) {
        for (const Tensor& t : kids) {
          if (!Equal(t, kids[0])) {
            *why = "broadcast copies along mesh axis " + std::to_string(a) + " differ";
            return Tensor();
          }
        }
        next.push_back(kids[0]);
      } else {
        Tensor acc = kids[0].Clone();
        for (size_t i = 1; i < n; ++i) {
          if (!(kids[i].shape() == acc.shape())) {
            *why = "partial pieces of mesh axis " + std::to_string(a) + " differ in shape";
            return Tensor();
          }
          ReduceInto(acc, kids[i], s.reduce());
        }
        next.push_back(acc);
      }
    }
    level = std::move(next);
  }
  return level[0];
}

// Every nd-SBP over `ndim` mesh axes whose entries come from `each`.
inline std::vector<sbp::NdSbp> NdSbps(const std::vector<sbp::Sbp>& each, int ndim) {
  std::vector<sbp::NdSbp> out{sbp::NdSbp()};
  for (int a = 0; a < ndim; ++a) {
    std::vector<sbp::NdSbp> next;
    for (const sbp::NdSbp& n : out)
      for (const sbp::Sbp& s : each) {
        std::vector<sbp::Sbp> v = n.axes();
        v.push_back(s);
        next.push_back(sbp::NdSbp(v));
      }
    out = next;
  }
  return out;
}

}  // namespace fr::boxing::testing
