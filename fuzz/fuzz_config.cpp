// The config loader (config/config.h) on arbitrary text, with --set overrides: the input is the YAML
// text, then, after each NUL byte, one "key.path=value" override.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "config/config.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  std::string text(reinterpret_cast<const char*>(data), size);
  std::vector<std::string> parts;
  size_t start = 0;
  for (size_t nul; (nul = text.find('\0', start)) != std::string::npos; start = nul + 1) {
    parts.push_back(text.substr(start, nul - start));
  }
  parts.push_back(text.substr(start));
  std::vector<std::string> overrides(parts.begin() + 1, parts.end());
  auto cfg = fr::ParseConfig(parts[0], "fuzz.yaml", overrides);
  if (cfg.ok()) {
    // What search writes must read back to a valid config.
    auto again = fr::ParseConfig(fr::ConfigToYaml(*cfg), "fuzz-roundtrip.yaml");
    if (!again.ok()) __builtin_trap();
  }
  return 0;
}
