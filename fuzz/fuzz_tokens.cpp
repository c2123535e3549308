// The uint16 token reader (data/dataset.h): the first two bytes give seq_len, the rest is the file.
// Every window of an accepted file is read, tokens and targets.
#include <cstddef>
#include <cstdint>
#include <string>
#include <vector>

#include "data/dataset.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t* data, size_t size) {
  if (size < 2) return 0;
  const int64_t seq_len = data[0] | data[1] << 8;
  auto ds = fr::data::TokensFromBytes(std::string(reinterpret_cast<const char*>(data) + 2, size - 2), seq_len,
                                      "fuzz.bin");
  if (!ds.ok()) return 0;
  std::vector<int64_t> window(static_cast<size_t>(seq_len));
  for (int64_t w = 0; w < (*ds)->size(); ++w) {
    (*ds)->CopySample("tokens", w, window.data());
    (*ds)->CopySample("targets", w, window.data());
  }
  return 0;
}
