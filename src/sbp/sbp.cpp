#include "sbp/sbp.h"

#include <algorithm>
#include <regex>

namespace fr::sbp {

Sbp Sbp::Dual() const {
  if (is_broadcast()) return P();
  if (is_partial()) return B();
  return *this;
}

std::string Sbp::ToString() const {
  switch (kind_) {
    case Kind::kSplit: return "S(" + std::to_string(axis_) + ")";
    case Kind::kBroadcast: return "B";
    case Kind::kPartial: return reduce_ == Reduce::kSum ? "P" : reduce_ == Reduce::kMax ? "P(max)" : "P(min)";
  }
  return "?";
}

Result<Sbp> Sbp::Parse(const std::string& text) {
  static const std::regex kSplit(R"(\s*S\((\d{1,2})\)\s*)");
  std::smatch m;
  if (std::regex_match(text, m, kSplit)) return S(std::stoi(m[1]));
  std::string t;
  for (char c : text)
    if (c != ' ') t += c;
  if (t == "B") return B();
  if (t == "P" || t == "P(sum)") return P();
  if (t == "P(max)") return P(Reduce::kMax);
  if (t == "P(min)") return P(Reduce::kMin);
  return Status::Invalid("'" + text + "' is not an SBP; expected S(axis), B, P, P(max) or P(min)");
}

NdSbp::NdSbp(const std::vector<Sbp>& s) : n_(static_cast<uint8_t>(s.size())) {
  FR_CHECK(s.size() <= static_cast<size_t>(kMaxMeshAxes), "an nd-SBP has at most " + std::to_string(kMaxMeshAxes) + " axes");
  std::copy(s.begin(), s.end(), v_.begin());
}

bool NdSbp::any_partial() const {
  for (int i = 0; i < n_; ++i)
    if ((*this)[i].is_partial()) return true;
  return false;
}

bool NdSbp::all_broadcast() const {
  for (int i = 0; i < n_; ++i)
    if (!(*this)[i].is_broadcast()) return false;
  return true;
}

std::string NdSbp::ToString() const {
  std::string s = "[";
  for (int i = 0; i < n_; ++i) s += (i ? ", " : "") + (*this)[i].ToString();
  return s + "]";
}

Result<NdSbp> NdSbp::Parse(const std::vector<std::string>& parts) {
  std::vector<Sbp> v;
  for (const std::string& p : parts) {
    ASSIGN_OR_RETURN(Sbp s, Sbp::Parse(p));
    v.push_back(s);
  }
  if (v.empty()) return Status::Invalid("an nd-SBP needs at least one entry");
  if (v.size() > static_cast<size_t>(kMaxMeshAxes)) return Status::Invalid("an nd-SBP has at most " + std::to_string(kMaxMeshAxes) + " entries (mesh axes)");
  return NdSbp(v);
}

Result<NdSbp> NdSbp::Parse(const std::string& text) {
  std::string t = text;
  while (!t.empty() && t.front() == ' ') t.erase(t.begin());
  while (!t.empty() && t.back() == ' ') t.pop_back();
  if (t.size() >= 2 && t.front() == '[' && t.back() == ']') t = t.substr(1, t.size() - 2);
  std::vector<std::string> parts;
  int depth = 0;
  std::string cur;
  for (char c : t) {
    if (c == '(') ++depth;
    if (c == ')') --depth;
    if (c == ',' && depth == 0) {
      parts.push_back(cur);
      cur.clear();
    } else {
      cur += c;
    }
  }
  parts.push_back(cur);
  auto r = Parse(parts);
  if (!r.ok()) return Status::Invalid("'" + text + "': " + r.status().message());
  return r;
}

size_t NdSbp::Hash() const {
  size_t h = n_;
  for (int i = 0; i < n_; ++i) h = h * 1000003u ^ (*this)[i].Hash();
  return h;
}

Placement::Placement(DeviceType type, std::vector<int> ranks, Shape hierarchy)
    : type_(type), ranks_(std::move(ranks)), hierarchy_(std::move(hierarchy)) {
  FR_CHECK(hierarchy_.numel() == static_cast<int64_t>(ranks_.size()), "hierarchy " + hierarchy_.ToString() +
                                                                          " does not hold " + std::to_string(ranks_.size()) + " ranks");
}

Placement Placement::Range(DeviceType type, int first, int n) {
  std::vector<int> r;
  for (int i = 0; i < n; ++i) r.push_back(first + i);
  return Placement(type, r, Shape{n});
}

int Placement::IndexOf(int rank) const {
  for (size_t i = 0; i < ranks_.size(); ++i)
    if (ranks_[i] == rank) return static_cast<int>(i);
  return -1;
}

std::vector<int64_t> Placement::Coords(int index) const {
  std::vector<int64_t> c(static_cast<size_t>(ndim()));
  int64_t rest = index;
  for (int a = ndim() - 1; a >= 0; --a) {
    c[static_cast<size_t>(a)] = rest % hierarchy_[a];
    rest /= hierarchy_[a];
  }
  return c;
}

std::string Placement::ToString() const {
  std::string s = std::string(Name(type_)) + " ";
  bool contiguous = !ranks_.empty();
  for (size_t i = 1; i < ranks_.size(); ++i) contiguous = contiguous && ranks_[i] == ranks_[i - 1] + 1;
  if (contiguous) {
    s += ranks_.size() == 1 ? std::to_string(ranks_[0])
                            : std::to_string(ranks_.front()) + "-" + std::to_string(ranks_.back());
  } else {
    s += "{";
    for (size_t i = 0; i < ranks_.size(); ++i) s += (i ? "," : "") + std::to_string(ranks_[i]);
    s += "}";
  }
  if (ndim() > 1) {
    s += " as ";
    for (int a = 0; a < ndim(); ++a) s += (a ? "x" : "") + std::to_string(hierarchy_[a]);
  }
  return s;
}

size_t Placement::Hash() const {
  size_t h = static_cast<size_t>(type_);
  for (int r : ranks_) h = h * 31 + static_cast<size_t>(r);
  for (int64_t d : hierarchy_.dims()) h = h * 17 + static_cast<size_t>(d);
  return h;
}

Range SplitRange(int64_t dim, int parts, int index) {
  int64_t base = dim / parts, extra = dim % parts, i = index;
  int64_t begin = i * base + std::min<int64_t>(i, extra);
  return Range{begin, begin + base + (i < extra ? 1 : 0)};
}

std::vector<Range> PieceRanges(const Shape& logical, const NdSbp& nd, const Placement& p, int index) {
  std::vector<Range> r;
  for (int64_t d : logical.dims()) r.push_back(Range{0, d});
  std::vector<int64_t> c = p.Coords(index);
  for (int a = 0; a < nd.size(); ++a) {
    if (!nd[a].is_split()) continue;
    Range& ax = r[static_cast<size_t>(nd[a].axis())];
    Range sub = SplitRange(ax.size(), static_cast<int>(p.hierarchy()[a]), static_cast<int>(c[static_cast<size_t>(a)]));
    ax = Range{ax.begin + sub.begin, ax.begin + sub.end};
  }
  return r;
}

Shape PieceShape(const Shape& logical, const NdSbp& nd, const Placement& p, int index) {
  std::vector<int64_t> dims;
  for (const Range& r : PieceRanges(logical, nd, p, index)) dims.push_back(r.size());
  return Shape(dims);
}

Status Check(const Shape& logical, const NdSbp& nd, const Placement& p) {
  if (nd.size() != p.ndim()) {
    return Status::Invalid("nd-SBP " + nd.ToString() + " has " + std::to_string(nd.size()) + " entries for a " +
                           std::to_string(p.ndim()) + "-D placement");
  }
  std::vector<int64_t> left = logical.dims();  // smallest piece along each axis so far
  for (int a = 0; a < nd.size(); ++a) {
    if (!nd[a].is_split()) continue;
    int axis = nd[a].axis();
    if (axis >= logical.rank()) {
      return Status::Invalid(nd[a].ToString() + " splits axis " + std::to_string(axis) + " of a rank-" +
                             std::to_string(logical.rank()) + " tensor " + logical.ToString());
    }
    int64_t parts = p.hierarchy()[a];
    if (left[static_cast<size_t>(axis)] < parts) {
      return Status::Invalid(nd[a].ToString() + " on mesh axis " + std::to_string(a) + " splits a dim of " +
                             std::to_string(left[static_cast<size_t>(axis)]) + " into " + std::to_string(parts) +
                             " parts of " + logical.ToString());
    }
    left[static_cast<size_t>(axis)] /= parts;
  }
  return Status::Ok();
}

}  // namespace fr::sbp
