// SBP vocabulary (DESIGN.md §1): how a logical tensor maps onto the devices of a placement.
//
//   S(i)    split along axis i: pieces concatenate to the logical tensor. Uneven sizes are allowed;
//           the first (size % n) ranks get one more row.
//   B       broadcast: every piece is the whole tensor.
//   P       partial sum: pieces have the logical shape and sum elementwise to it; P(max) and
//           P(min) reduce with max and min.
//
// NdSbp has one Sbp per axis of the placement's hierarchy (device mesh), e.g. [S(0), B] on 2x4.
// All types are small values with ==, hashing, Parse and ToString in this notation.
#pragma once

#include <array>
#include <cstdint>
#include <functional>
#include <string>
#include <vector>

#include "base/dtype.h"
#include "base/shape.h"
#include "base/status.h"

namespace fr::sbp {

enum class Kind : uint8_t { kSplit, kBroadcast, kPartial };
enum class Reduce : uint8_t { kSum, kMax, kMin };

class Sbp {
 public:
  constexpr Sbp() = default;  // B
  static constexpr Sbp S(int axis) { return Sbp(Kind::kSplit, axis, Reduce::kSum); }
  static constexpr Sbp B() { return Sbp(); }
  static constexpr Sbp P(Reduce r = Reduce::kSum) { return Sbp(Kind::kPartial, 0, r); }

  Kind kind() const { return kind_; }
  bool is_split() const { return kind_ == Kind::kSplit; }
  bool is_broadcast() const { return kind_ == Kind::kBroadcast; }
  bool is_partial() const { return kind_ == Kind::kPartial; }
  int axis() const { return axis_; }        // for S
  Reduce reduce() const { return reduce_; }  // for P
  // The SBP of a gradient: S stays S, B becomes P(sum), P(sum) becomes B.
  Sbp Dual() const;

  bool operator==(const Sbp&) const = default;
  std::string ToString() const;             // "S(0)", "B", "P", "P(max)", "P(min)"
  static Result<Sbp> Parse(const std::string& s);
  size_t Hash() const { return static_cast<size_t>(kind_) * 131 + static_cast<size_t>(axis_) * 7 + static_cast<size_t>(reduce_); }

 private:
  constexpr Sbp(Kind k, int axis, Reduce r) : kind_(k), reduce_(r), axis_(static_cast<int16_t>(axis)) {}
  Kind kind_ = Kind::kBroadcast;
  Reduce reduce_ = Reduce::kSum;
  int16_t axis_ = 0;  // Parse accepts two digits
};

// Meshes have at most this many axes, so an NdSbp is a small inline value (the assigner copies
// millions of them).
inline constexpr int kMaxMeshAxes = 6;

class NdSbp {
 public:
  NdSbp() = default;
  NdSbp(std::initializer_list<Sbp> s) : NdSbp(std::vector<Sbp>(s)) {}
  explicit NdSbp(const std::vector<Sbp>& s);  // at most kMaxMeshAxes entries
  static NdSbp Broadcast(int rank) { return NdSbp(std::vector<Sbp>(static_cast<size_t>(rank))); }

  int size() const { return n_; }
  const Sbp& operator[](int i) const { return v_[static_cast<size_t>(i)]; }
  Sbp& operator[](int i) { return v_[static_cast<size_t>(i)]; }
  std::vector<Sbp> axes() const { return {v_.begin(), v_.begin() + n_}; }
  bool any_partial() const;
  bool all_broadcast() const;
  bool operator==(const NdSbp& o) const {
    if (n_ != o.n_) return false;
    for (int i = 0; i < n_; ++i)
      if (!(v_[static_cast<size_t>(i)] == o.v_[static_cast<size_t>(i)])) return false;
    return true;
  }
  std::string ToString() const;  // "[S(0), B]"
  // "[S(0), B]", "S(0)" (1-D shorthand) or a list of Sbp strings.
  static Result<NdSbp> Parse(const std::string& s);
  static Result<NdSbp> Parse(const std::vector<std::string>& parts);
  size_t Hash() const;

 private:
  std::array<Sbp, kMaxMeshAxes> v_{};
  uint8_t n_ = 0;
};

// Devices of one type, named by global rank, arranged as a mesh (the hierarchy).
class Placement {
 public:
  Placement() = default;
  Placement(DeviceType type, std::vector<int> ranks, Shape hierarchy);
  // The ranks first..first+n-1 as a 1-D placement.
  static Placement Range(DeviceType type, int first, int n);

  DeviceType type() const { return type_; }
  const std::vector<int>& ranks() const { return ranks_; }
  const Shape& hierarchy() const { return hierarchy_; }
  int size() const { return static_cast<int>(ranks_.size()); }
  int ndim() const { return hierarchy_.rank(); }
  // Position of a global rank in the placement, or -1.
  int IndexOf(int rank) const;
  // Mesh coordinates of the i-th device (row-major over the hierarchy).
  std::vector<int64_t> Coords(int index) const;
  bool operator==(const Placement&) const = default;
  std::string ToString() const;  // "cpu 0-3", "cpu 0-3 as 2x2", "cpu {0,2,5}"
  size_t Hash() const;

 private:
  DeviceType type_ = DeviceType::kCpu;
  std::vector<int> ranks_;
  Shape hierarchy_;
};

// The [begin, end) range of `dim` elements held by part `index` of `parts`: the first
// (dim % parts) parts get one more.
struct Range {
  int64_t begin = 0, end = 0;
  int64_t size() const { return end - begin; }
  bool operator==(const Range&) const = default;
};
Range SplitRange(int64_t dim, int parts, int index);

// The slice of the logical tensor (per-axis ranges) held by device `index` of placement `p`
// under `nd`; partial and broadcast axes take the whole dim. Requires nd.size() == p.ndim().
std::vector<Range> PieceRanges(const Shape& logical, const NdSbp& nd, const Placement& p, int index);
Shape PieceShape(const Shape& logical, const NdSbp& nd, const Placement& p, int index);

// Checks that `nd` can describe a tensor of `logical` shape on `p`: one Sbp per mesh axis, split
// axes in range, and every split gives each device at least one element. Splits may be uneven.
// Several mesh axes may split the same tensor axis: mesh axis 0 splits first, then each part is
// split again along mesh axis 1, and so on. The check is per mesh axis, never against the total
// device count.
Status Check(const Shape& logical, const NdSbp& nd, const Placement& p);

}  // namespace fr::sbp

template <> struct std::hash<fr::sbp::Sbp> { size_t operator()(const fr::sbp::Sbp& s) const { return s.Hash(); } };
template <> struct std::hash<fr::sbp::NdSbp> { size_t operator()(const fr::sbp::NdSbp& s) const { return s.Hash(); } };
template <> struct std::hash<fr::sbp::Placement> { size_t operator()(const fr::sbp::Placement& p) const { return p.Hash(); } };
