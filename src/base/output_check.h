// The checks on a file a run will write, made before the run starts (issue 27: an output never
// destroys data). A mistaken path must fail at once, with exit code 2, not replace a model, a data
// file or /dev/null at the end of a run, nor lose the run to a folder it cannot write.
#pragma once

#include <string>
#include <vector>

#include "base/status.h"

namespace fr {

// A file as the user named it: `key` is the config key or option ("log.jsonl", "--trace",
// "model.onnx"), `path` its value.
struct NamedFile {
  std::string key;
  std::string path;
};

// Whether `out` can be written without destroying anything. In this order:
//  - it is none of `inputs`, compared by FileId (base/file.h: symbolic links, hard links and other
//    spellings of one file count as that file);
//  - it is absent or a regular file: a directory, a device, a FIFO or a socket is refused;
//  - it is none of `others` (the run's other outputs), by FileId where both exist, else by
//    absolute path with symbolic links resolved;
//  - its folder exists or is made here, and takes a new file (one is made and removed).
// Errors (Invalid) read "KEY: 'PATH' ..." or "KEY: cannot create a file in 'FOLDER': REASON";
// callers put their component in front.
Status CheckOutput(const NamedFile& out, const std::vector<NamedFile>& others, const std::vector<NamedFile>& inputs);

}  // namespace fr
