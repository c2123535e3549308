#include "config/config_reader.h"

#include <algorithm>
#include <charconv>
#include <cctype>
#include <cmath>
#include <cstddef>
#include <iterator>
#include <unordered_set>

namespace fr::config {
namespace {

const char kPlainTag[] = "?";   // yaml-cpp's tag for a plain (unquoted) scalar
const char kQuotedTag[] = "!";  // ... and for a quoted or block scalar

bool IsDigit(char c) { return c >= '0' && c <= '9'; }

// Skips a run of digits; returns how many.
size_t Digits(const std::string& s, size_t* i) {
  size_t start = *i;
  while (*i < s.size() && IsDigit(s[*i])) ++*i;
  return *i - start;
}

size_t Sign(const std::string& s) { return !s.empty() && (s[0] == '-' || s[0] == '+') ? 1 : 0; }

// YAML 1.2 core schema: [-+]?[0-9]+
bool LooksInt(const std::string& s) {
  size_t i = Sign(s);
  return Digits(s, &i) > 0 && i == s.size();
}

// YAML 1.2 core schema: [-+]?(\.[0-9]+|[0-9]+(\.[0-9]*)?)([eE][-+]?[0-9]+)?
bool LooksNumber(const std::string& s) {
  size_t i = Sign(s);
  size_t mantissa = Digits(s, &i);
  if (i < s.size() && s[i] == '.') {
    ++i;
    mantissa += Digits(s, &i);
  }
  if (mantissa == 0) return false;
  if (i < s.size() && (s[i] == 'e' || s[i] == 'E')) {
    ++i;
    if (i < s.size() && (s[i] == '-' || s[i] == '+')) ++i;
    if (Digits(s, &i) == 0) return false;
  }
  return i == s.size();
}

bool LooksBool(const std::string& s) { return s == "true" || s == "false"; }

// from_chars takes no leading '+'.
std::string_view Unsigned(const std::string& s) {
  return std::string_view(s).substr(!s.empty() && s[0] == '+' ? 1 : 0);
}

std::string Quote(const std::string& s) {
  const size_t kMax = 60;
  return "\"" + (s.size() > kMax ? s.substr(0, kMax) + "..." : s) + "\"";
}

std::string JoinPath(const std::string& parent, const std::string& child) {
  return parent.empty() ? child : parent + "." + child;
}

std::string Join(const std::vector<std::string>& words, const std::string& sep) {
  std::string out;
  for (const auto& w : words) out += (out.empty() ? "" : sep) + w;
  return out;
}

}  // namespace

void Origin::SetOverride(const std::string& key_path, const std::string& text) {
  for (auto it = overrides_.begin(); it != overrides_.end();) {
    bool deeper = it->first.size() > key_path.size() && it->first.starts_with(key_path) &&
                  it->first[key_path.size()] == '.';
    it = deeper ? overrides_.erase(it) : std::next(it);
  }
  overrides_[key_path] = text;
}

const std::string* Origin::FindOverride(const std::string& key_path) const {
  auto it = overrides_.find(key_path);
  return it == overrides_.end() ? nullptr : &it->second;
}

std::string Origin::Where(const YAML::Mark& mark) const {
  if (mark.is_null()) return "[config] " + file_ + ": ";
  return "[config] " + file_ + ":" + std::to_string(mark.line + 1) + ":" +
         std::to_string(mark.column + 1) + ": ";
}

size_t EditDistance(const std::string& a, const std::string& b) {
  std::vector<size_t> row(b.size() + 1);
  for (size_t j = 0; j <= b.size(); ++j) row[j] = j;
  for (size_t i = 1; i <= a.size(); ++i) {
    size_t diagonal = row[0];
    row[0] = i;
    for (size_t j = 1; j <= b.size(); ++j) {
      size_t above = row[j];
      row[j] = std::min({row[j] + 1, row[j - 1] + 1, diagonal + (a[i - 1] == b[j - 1] ? 0 : 1)});
      diagonal = above;
    }
  }
  return row[b.size()];
}

std::string DisplayKey(const std::string& key) {
  bool word = !key.empty() && std::all_of(key.begin(), key.end(), [](char c) {
    return std::isalnum(static_cast<unsigned char>(c)) || c == '_' || c == '-';
  });
  if (word) return key;
  const std::string quoted = Quote(key);
  return "[" + quoted + "]";
}

// ---- Val ----

Val::Val(const Origin& origin, const YAML::Node& node)
    : Val(&origin, node, node.Mark(), "", "", nullptr) {}

Val::Val(const Origin* origin, const YAML::Node& node, YAML::Mark mark, std::string path,
         std::string key_path, const std::string* override)
    : origin_(origin),
      node_(node),
      mark_(mark),
      path_(std::move(path)),
      key_path_(std::move(key_path)),
      override_(override) {}

Val Val::Child(const std::string& key, const YAML::Node& key_node, const YAML::Node& value) const {
  std::string key_path = JoinPath(key_path_, key);
  const std::string* ov = origin_->FindOverride(key_path);
  // An empty value's own mark points past it, at the next token; its key is the better place.
  YAML::Mark mark = value.IsNull() ? key_node.Mark() : value.Mark();
  std::string shown = DisplayKey(key);
  std::string path = path_.empty() || shown[0] == '[' ? path_ + shown : path_ + "." + shown;
  return Val(origin_, value, mark, path, key_path, ov ? ov : override_);
}

Val Val::AtKey(const YAML::Node& key_node) const {
  return Val(origin_, node_, key_node.Mark(), path_, key_path_, override_);
}

std::string Val::Where() const {
  if (override_) return "[config] --set " + *override_ + ": ";
  return origin_->Where(mark_);
}

Status Val::Error(const std::string& message) const { return Status::Invalid(Where() + message); }

Status Val::Expected(const std::string& what) const {
  return Error(Shown() + ": expected " + what + ", got " + Describe());
}

std::string Val::Shown() const { return path_.empty() ? "the document" : path_; }

std::string Val::Describe() const {
  if (!node_.IsDefined() || node_.IsNull()) return "nothing";
  if (node_.IsMap()) return node_.size() == 0 ? "an empty map" : "a map";
  if (node_.IsSequence()) {
    size_t n = node_.size();
    if (n == 0) return "an empty list";
    const std::string count = std::to_string(n);
    return "a list of " + count + (n == 1 ? " item" : " items");
  }
  // Locals, not "..." + Quote(s): GCC 12 warns falsely (-Wrestrict) on literal + temporary.
  const std::string& s = node_.Scalar();
  const std::string quoted = Quote(s);
  if (node_.Tag() == kQuotedTag) return "string " + quoted;
  if (node_.Tag() != kPlainTag) return node_.Tag() + " " + quoted;
  return LooksNumber(s) || LooksBool(s) ? s : "string " + quoted;
}

Result<int64_t> Val::Int() const {
  if (!node_.IsScalar() || node_.Tag() != kPlainTag || !LooksInt(node_.Scalar())) {
    return Expected("an integer");
  }
  std::string_view s = Unsigned(node_.Scalar());
  int64_t v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size()) {
    return Expected("an integer that fits in 64 bits");
  }
  return v;
}

Result<double> Val::Number() const {
  if (!node_.IsScalar() || node_.Tag() != kPlainTag || !LooksNumber(node_.Scalar())) {
    return Expected("a number");
  }
  std::string_view s = Unsigned(node_.Scalar());
  double v = 0;
  auto [end, ec] = std::from_chars(s.data(), s.data() + s.size(), v);
  if (ec != std::errc() || end != s.data() + s.size() || !std::isfinite(v)) {
    return Expected("a finite number");
  }
  return v;
}

Result<bool> Val::Bool() const {
  if (!node_.IsScalar() || node_.Tag() != kPlainTag || !LooksBool(node_.Scalar())) {
    return Expected("true or false");
  }
  return node_.Scalar() == "true";
}

Result<std::string> Val::String() const {
  if (!node_.IsScalar() || node_.Scalar().empty()) return Expected("a non-empty string");
  return node_.Scalar();
}

Result<std::vector<Val>> Val::Items() const {
  if (!node_.IsSequence()) return Expected("a list");
  std::vector<Val> items;
  for (size_t i = 0; i < node_.size(); ++i) {
    const YAML::Node item = node_[i];
    const std::string number = std::to_string(i);
    const std::string index = "[" + number + "]";
    YAML::Mark mark = item.IsNull() ? mark_ : item.Mark();
    items.push_back(Val(origin_, item, mark, path_ + index, key_path_ + index, override_));
  }
  return items;
}

Result<std::vector<Val::Entry>> Val::Entries() const {
  if (!node_.IsMap()) return Expected("a map");
  std::vector<Entry> entries;
  std::unordered_set<std::string> seen;  // a set: a map of 100k keys is read in linear time
  for (const auto& kv : node_) {
    if (!kv.first.IsScalar()) return AtKey(kv.first).Error(Shown() + ": expected a string key");
    Val value = Child(kv.first.Scalar(), kv.first, kv.second);
    if (!seen.insert(kv.first.Scalar()).second) return value.AtKey(kv.first).Error(value.path() + ": duplicate key");
    entries.push_back(Entry{kv.first.Scalar(), value.AtKey(kv.first), value});
  }
  return entries;
}

Result<std::vector<int64_t>> Val::IntList(bool (*ok)(int64_t), const std::string& what) const {
  ASSIGN_OR_RETURN(std::vector<Val> items, Items());
  std::vector<int64_t> out;
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(int64_t v, item.Int());
    if (!ok(v)) return item.Expected(what);
    out.push_back(v);
  }
  return out;
}

Result<std::vector<std::string>> Val::StringList() const {
  ASSIGN_OR_RETURN(std::vector<Val> items, Items());
  std::vector<std::string> out;
  for (const Val& item : items) {
    ASSIGN_OR_RETURN(std::string s, item.String());
    out.push_back(std::move(s));
  }
  return out;
}

// ---- Section ----

Result<Section> Section::Open(const Val& v, const std::vector<std::string>& keys) {
  Section section(v);
  ASSIGN_OR_RETURN(section.entries_, v.Entries());
  for (const Val::Entry& e : section.entries_) {
    if (std::find(keys.begin(), keys.end(), e.name) == keys.end()) {
      return section.UnknownKey(e, keys);
    }
  }
  return section;
}

Status Section::UnknownKey(const Val::Entry& e, const std::vector<std::string>& keys) const {
  const std::string& name = e.name;
  std::string where = self_.path().empty() ? "at top level" : "in " + self_.path();
  std::string best;
  size_t best_distance = SIZE_MAX;
  for (const auto& k : keys) {
    size_t d = EditDistance(name, k);
    if (d < best_distance) best = k, best_distance = d;
  }
  std::string msg = "unknown key '" + name + "' " + where;
  if (best_distance <= std::max<size_t>(2, name.size() / 3)) {
    return e.key.Error(msg + " (did you mean '" + best + "'?)");
  }
  return e.key.Error(msg + " (valid keys: " + Join(keys, ", ") + ")");
}

const Val* Section::Find(const std::string& key) const {
  for (const auto& e : entries_) {
    if (e.name == key) return &e.value;
  }
  return nullptr;
}

Result<Val> Section::Get(const std::string& key) const {
  if (const Val* v = Find(key)) return *v;
  return self_.Error(JoinPath(self_.path(), key) + " is required");
}

namespace {

template <typename T, typename ReadFn>
Status ReadAny(const Section& s, const std::string& key, T* out, Need need, ReadFn read) {
  if (need == Need::kOptional && !s.Has(key)) return Status::Ok();
  ASSIGN_OR_RETURN(Val v, s.Get(key));
  ASSIGN_OR_RETURN(*out, read(v));
  return Status::Ok();
}

}  // namespace

Status Section::Read(const std::string& key, int64_t* out, Need need) const {
  return ReadAny(*this, key, out, need, [](const Val& v) { return v.Int(); });
}
Status Section::Read(const std::string& key, double* out, Need need) const {
  return ReadAny(*this, key, out, need, [](const Val& v) { return v.Number(); });
}
Status Section::Read(const std::string& key, bool* out, Need need) const {
  return ReadAny(*this, key, out, need, [](const Val& v) { return v.Bool(); });
}
Status Section::Read(const std::string& key, std::string* out, Need need) const {
  return ReadAny(*this, key, out, need, [](const Val& v) { return v.String(); });
}

Status Section::ReadChoice(const std::string& key, const std::vector<std::string>& words,
                           size_t* index, Need need) const {
  *index = words.size();
  std::string word;
  RETURN_IF_ERROR(Read(key, &word, need));
  if (word.empty()) return Status::Ok();
  auto it = std::find(words.begin(), words.end(), word);
  const std::string list = Join(words, ", ");
  if (it == words.end()) return Find(key)->Expected("one of " + list);
  *index = static_cast<size_t>(it - words.begin());
  return Status::Ok();
}

Status Section::Check(const std::string& key, bool ok, const std::string& what) const {
  if (ok) return Status::Ok();
  const Val* v = Find(key);
  return v ? v->Expected(what) : Fail(key, "expected " + what);
}

Status Section::Fail(const std::string& key, const std::string& message) const {
  const Val* v = Find(key);
  return (v ? *v : self_).Error(JoinPath(self_.path(), key) + ": " + message);
}

Status Section::OnlyWith(const std::string& key, const std::string& condition,
                         const std::string& actual) const {
  for (const auto& e : entries_) {
    if (e.name != key) continue;
    return e.key.Error(e.value.path() + ": key '" + key + "' is only valid with " + condition +
                       ", not " + actual);
  }
  return Status::Ok();
}

}  // namespace fr::config
