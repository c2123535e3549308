// Strided iteration for numpy-style broadcasting, shared by the elementwise kernels.
#pragma once

#include <array>
#include <vector>

#include "base/shape.h"

namespace fr::cpu {

// Strides of `in` viewed in the rank of `out`: 0 along broadcast (size-1 or missing) dims.
inline std::vector<int64_t> BroadcastStrides(const fr::Shape& in, const fr::Shape& out) {
  std::vector<int64_t> st(static_cast<size_t>(out.rank()), 0);
  std::vector<int64_t> dense = Strides(in);
  for (int i = 0; i < in.rank(); ++i) {
    int o = out.rank() - in.rank() + i;
    st[static_cast<size_t>(o)] = in[i] == 1 ? 0 : dense[static_cast<size_t>(i)];
  }
  return st;
}

// a, b and out with adjacent axes of out merged where each input either spans both (its own
// layout makes them one axis) or is broadcast along both, and axes of size 1 dropped: the same
// element pairs, in the same order, in fewer and longer rows (x[16, 8, 16, 16] / s[1, 8, 1, 1]
// becomes [16, 8, 256] / [1, 8, 1]). out must hold elements.
struct Coalesced {
  fr::Shape a, b, out;
  int64_t inner() const { return out[out.rank() - 1]; }  // a row's length
  int64_t rows() const { return out.numel() / inner(); }
};
inline Coalesced Coalesce(const fr::Shape& a, const fr::Shape& b, const fr::Shape& out) {
  std::vector<int64_t> ra, rb, ro;
  int last_kind = -1;  // bit 0: a spans the axis, bit 1: b spans it
  for (int d = 0; d < out.rank(); ++d) {
    const int ia = d - (out.rank() - a.rank()), ib = d - (out.rank() - b.rank());
    const int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1, n = out[d];
    if (n == 1) continue;
    const int kind = (da == n ? 1 : 0) | (db == n ? 2 : 0);
    if (kind == last_kind) {
      ro.back() *= n;
      ra.back() *= da;
      rb.back() *= db;
    } else {
      ro.push_back(n);
      ra.push_back(da);
      rb.push_back(db);
      last_kind = kind;
    }
  }
  if (ro.empty()) return {fr::Shape{1}, fr::Shape{1}, fr::Shape{1}};
  return {fr::Shape(std::move(ra)), fr::Shape(std::move(rb)), fr::Shape(std::move(ro))};
}

// Calls row(offset_a, offset_b, out_offset, inner, stride_a_inner, stride_b_inner) for the
// innermost rows [first, last) of `out`, in order, where a and b are broadcast to `out`.
template <typename Row>
void ForEachRowIn(const fr::Shape& a, const fr::Shape& b, const fr::Shape& out, int64_t first, int64_t last, Row row) {
  int r = out.rank();
  if (r == 0) {
    if (first < last) row(0, 0, 0, 1, 0, 0);
    return;
  }
  auto sa = BroadcastStrides(a, out), sb = BroadcastStrides(b, out);
  int64_t inner = out[r - 1];
  if (inner == 0) return;
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  int64_t oa = 0, ob = 0;
  int64_t rest = first;
  for (int d = r - 2; d >= 0; --d) {  // row `first`'s index and offsets
    auto du = static_cast<size_t>(d);
    idx[du] = rest % out[d];
    rest /= out[d];
    oa += idx[du] * sa[du];
    ob += idx[du] * sb[du];
  }
  for (int64_t o = first; o < last; ++o) {
    row(oa, ob, o * inner, inner, sa[static_cast<size_t>(r - 1)], sb[static_cast<size_t>(r - 1)]);
    for (int d = r - 2; d >= 0; --d) {
      auto du = static_cast<size_t>(d);
      oa += sa[du];
      ob += sb[du];
      if (++idx[du] < out[d]) break;
      oa -= sa[du] * out[d];
      ob -= sb[du] * out[d];
      idx[du] = 0;
    }
  }
}

// The same for every row of `out`, its axes coalesced first: offsets are those of the shapes
// given, rows as long as the broadcast allows.
template <typename Row>
void ForEachRow(const fr::Shape& a, const fr::Shape& b, const fr::Shape& out, Row row) {
  if (out.numel() == 0) return;
  const Coalesced m = Coalesce(a, b, out);
  ForEachRowIn(m.a, m.b, m.out, 0, m.rows(), row);
}

// The same for three inputs: row(offsets {a, b, c}, out_offset, inner, inner strides {a, b, c}).
template <typename Row>
void ForEachRow3(const fr::Shape& a, const fr::Shape& b, const fr::Shape& c, const fr::Shape& out, Row row) {
  using Off = std::array<int64_t, 3>;
  const int r = out.rank();
  if (r == 0) { row(Off{0, 0, 0}, 0, 1, Off{0, 0, 0}); return; }
  const std::array<std::vector<int64_t>, 3> st = {BroadcastStrides(a, out), BroadcastStrides(b, out),
                                                   BroadcastStrides(c, out)};
  const int64_t inner = out[r - 1], outer = out.numel() / (inner ? inner : 1);
  if (inner == 0) return;
  const auto last = static_cast<size_t>(r - 1);
  const Off inner_st = {st[0][last], st[1][last], st[2][last]};
  std::vector<int64_t> idx(static_cast<size_t>(r), 0);
  Off off = {0, 0, 0};
  for (int64_t o = 0; o < outer; ++o) {
    row(off, o * inner, inner, inner_st);
    for (int d = r - 2; d >= 0; --d) {
      const auto du = static_cast<size_t>(d);
      for (size_t k = 0; k < 3; ++k) off[k] += st[k][du];
      if (++idx[du] < out[d]) break;
      for (size_t k = 0; k < 3; ++k) off[k] -= st[k][du] * out[d];
      idx[du] = 0;
    }
  }
}

}  // namespace fr::cpu
