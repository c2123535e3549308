// Strict, located reads of YAML nodes for the config loader (config.cpp). Internal to cli/.
//
// A Val is a node plus where it is: its key path for messages ("train.steps", "parallel.mesh[1]")
// and where it came from, a line:col in the file or a `--set` override. Reads never coerce: an
// integer is a plain scalar of digits that fits int64, a number is a plain YAML float or integer,
// a bool is plain `true`/`false`; a quoted "10" is a string. A Section is a map whose keys were
// checked against the allowed set (an unknown key gets a nearest-key suggestion; duplicates fail).
//
// Every failure is a Status::Invalid whose message starts with "[config] FILE:LINE:COL: " or
// "[config] --set KEY=VALUE: ". Vals refer to an Origin, which must outlive them.
#pragma once

#include <yaml-cpp/yaml.h>

#include <cstdint>
#include <map>
#include <string>
#include <utility>
#include <vector>

#include "base/status.h"

namespace fr::config {

// The file name for locations, and which key paths were written by which `--set` override.
class Origin {
 public:
  explicit Origin(std::string file) : file_(std::move(file)) {}
  // `key_path` ("train.steps") now comes from `text` ("train.steps=10"); deeper ones are dropped.
  void SetOverride(const std::string& key_path, const std::string& text);
  const std::string* FindOverride(const std::string& key_path) const;
  // "[config] FILE:LINE:COL: " for a file location, "[config] FILE: " if the mark is unknown.
  std::string Where(const YAML::Mark& mark) const;

 private:
  std::string file_;
  std::map<std::string, std::string> overrides_;  // key path -> override text
};

// Levenshtein distance, for "did you mean" suggestions.
size_t EditDistance(const std::string& a, const std::string& b);

// `key` in display form: itself when it is a plain word, else ["quoted"].
std::string DisplayKey(const std::string& key);

// Copyable but not assignable: YAML::Node's operator= rewrites the node it refers to.
class Val {
 public:
  // The document root.
  Val(const Origin& origin, const YAML::Node& node);
  Val(const Val&) = default;
  Val& operator=(const Val&) = delete;

  const YAML::Node& node() const { return node_; }
  const std::string& path() const { return path_; }  // "" for the root

  // The child under map key `key`; `key_node` gives the location when the value is empty.
  Val Child(const std::string& key, const YAML::Node& key_node, const YAML::Node& value) const;
  // The same node, located at its key (for errors about the key itself).
  Val AtKey(const YAML::Node& key_node) const;

  // "[config] WHERE: " + message.
  Status Error(const std::string& message) const;
  // "[config] WHERE: PATH: expected WHAT, got DESCRIPTION-OF-VALUE".
  Status Expected(const std::string& what) const;

  Result<int64_t> Int() const;
  Result<double> Number() const;  // finite
  Result<bool> Bool() const;
  Result<std::string> String() const;  // any non-empty scalar, quoted or not
  Result<std::vector<Val>> Items() const;  // the elements of a list
  // The entries of a map, in file order; keys must be scalars, duplicates are errors.
  struct Entry;
  Result<std::vector<Entry>> Entries() const;
  // A list of integers, each checked with `ok`; `what` describes a valid element.
  Result<std::vector<int64_t>> IntList(bool (*ok)(int64_t), const std::string& what) const;
  Result<std::vector<std::string>> StringList() const;

 private:
  Val(const Origin* origin, const YAML::Node& node, YAML::Mark mark, std::string path,
      std::string key_path, const std::string* override);
  std::string Describe() const;  // the value, for "got ..."
  std::string Shown() const;     // the path, or "the document" for the root
  std::string Where() const;

  const Origin* origin_;
  YAML::Node node_;
  YAML::Mark mark_;
  std::string path_;      // for messages
  std::string key_path_;  // the keys joined by '.' (no quoting), to match overrides
  const std::string* override_;  // the override that wrote this node, or null
};

struct Val::Entry {
  std::string name;
  Val key;    // located at the key
  Val value;  // located at the value (at the key when the value is empty)
};

enum class Need { kOptional, kRequired };

// The YAML words for an enum, in the order they are listed in messages.
template <typename E>
using Names = std::vector<std::pair<std::string, E>>;

template <typename E>
const std::string& NameOf(const Names<E>& names, E value) {
  for (const auto& [word, v] : names) {
    if (v == value) return word;
  }
  return names.front().first;  // unreachable for a complete table
}

// A map section whose keys have been checked.
class Section {
 public:
  // Fails unless `v` is a map whose keys are all in `keys`, each at most once.
  static Result<Section> Open(const Val& v, const std::vector<std::string>& keys);

  bool Has(const std::string& key) const { return Find(key) != nullptr; }
  // The value under `key`, or an error naming the missing dotted key.
  Result<Val> Get(const std::string& key) const;
  const Val* Find(const std::string& key) const;

  // Reads into *out when present; leaves *out (the default) alone when absent and optional.
  Status Read(const std::string& key, int64_t* out, Need need) const;
  Status Read(const std::string& key, double* out, Need need) const;
  Status Read(const std::string& key, bool* out, Need need) const;
  Status Read(const std::string& key, std::string* out, Need need) const;

  // Reads one of the words in `names` into *out.
  template <typename E>
  Status ReadEnum(const std::string& key, E* out, Need need, const Names<E>& names) const {
    std::vector<std::string> words;
    for (const auto& [word, value] : names) words.push_back(word);
    size_t index = 0;
    RETURN_IF_ERROR(ReadChoice(key, words, &index, need));
    if (index < names.size()) *out = names[index].second;
    return Status::Ok();
  }

  // "[config] WHERE: SECTION.KEY: message", at the key's value.
  Status Fail(const std::string& key, const std::string& message) const;
  // When `ok` is false: "KEY: expected WHAT, got VALUE" at the key's value (or at the section).
  Status Check(const std::string& key, bool ok, const std::string& what) const;
  // Fails if `key` is present: it belongs with another variant, e.g. ("seq_len", "format: tokens",
  // "npy") gives "key 'seq_len' is only valid with format: tokens, not npy".
  Status OnlyWith(const std::string& key, const std::string& condition,
                  const std::string& actual) const;

 private:
  explicit Section(Val self) : self_(std::move(self)) {}
  // Sets *index to the chosen word, or to words.size() when absent and optional.
  Status ReadChoice(const std::string& key, const std::vector<std::string>& words, size_t* index,
                    Need need) const;
  Status UnknownKey(const Val::Entry& e, const std::vector<std::string>& keys) const;

  Val self_;
  std::vector<Val::Entry> entries_;
};

}  // namespace fr::config
