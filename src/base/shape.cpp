#include "base/shape.h"

#include <algorithm>

namespace fr {

std::string Shape::ToString() const {
  std::string s = "[";
  for (size_t i = 0; i < dims_.size(); ++i) {
    if (i) s += ", ";
    s += std::to_string(dims_[i]);
  }
  return s + "]";
}

Result<int> Shape::Axis(int64_t axis) const {
  int64_t r = rank();
  if (axis < -r || axis >= r) {  // a scalar has no axis
    return Status::Invalid("axis " + std::to_string(axis) + " is out of range for rank " +
                           std::to_string(r));
  }
  return static_cast<int>(axis < 0 ? axis + r : axis);
}

Status CheckDims(const std::vector<int64_t>& dims) {
  constexpr int64_t kMaxDim = int64_t{1} << 40, kMaxNumel = int64_t{1} << 48;
  // The product of the non-zero dims is bounded too: strides of [0, 2^40, 2^40] overflow although
  // it has no elements.
  int64_t n = 1;
  for (int64_t d : dims) {
    if (d < 0 || d > kMaxDim) return Status::Invalid("dimension " + std::to_string(d) + " is out of range");
    if (d != 0 && n > kMaxNumel / d) return Status::Invalid("shape's dims multiply past 2^48");
    if (d != 0) n *= d;
  }
  return Status::Ok();
}

Result<Shape> Broadcast(const Shape& a, const Shape& b) {
  int r = std::max(a.rank(), b.rank());
  std::vector<int64_t> out(static_cast<size_t>(r));
  for (int i = 0; i < r; ++i) {
    int ia = a.rank() - r + i, ib = b.rank() - r + i;
    int64_t da = ia >= 0 ? a[ia] : 1, db = ib >= 0 ? b[ib] : 1;
    if (da != db && da != 1 && db != 1) {
      return Status::Invalid("shapes " + a.ToString() + " and " + b.ToString() + " do not broadcast");
    }
    out[static_cast<size_t>(i)] = da == 1 ? db : da;
  }
  return Shape(std::move(out));
}

std::vector<int64_t> Strides(const Shape& s) {
  std::vector<int64_t> st(static_cast<size_t>(s.rank()));
  int64_t acc = 1;
  for (int i = s.rank() - 1; i >= 0; --i) {
    st[static_cast<size_t>(i)] = acc;
    acc *= s[i];
  }
  return st;
}

}  // namespace fr
