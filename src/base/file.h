// Reading an input file (a config, an ONNX model, a data file) whole.
#pragma once

#include <string>

#include "base/status.h"

namespace fr {

// The bytes of `path`. A regular file is read in one allocation of its size (a GPT-2-sized ONNX
// model is 650 MB). A pipe is read to its end, so `flowrun train <(generate-config)` works; a named
// pipe that nobody writes to reads as empty instead of blocking the open forever. A directory, a
// device or a socket is an error. Errors (Invalid) read "cannot read 'PATH': REASON"; callers put
// their component and key in front.
Result<std::string> ReadWholeFile(const std::string& path);

}  // namespace fr
