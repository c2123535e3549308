// The files a training run reads and writes (DESIGN.md §5), for the checks every rank makes before
// training: no output may destroy an input, another output or a special file, or be unwritable
// (base/output_check.h); and the ranks compare what they read (actor::AgreeOnRun).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

#include "base/output_check.h"
#include "base/status.h"
#include "config/config.h"

namespace fr {

// The config file, model.onnx, and the data files of data.format (none for synthetic data). The
// ONNX import reads no other file: external tensor data is refused (ir/onnx_proto.h).
std::vector<NamedFile> RunInputs(const Config& cfg);

// Every output of a run on `ranks` ranks with its writer: log.jsonl and save.onnx on rank 0, each
// rank's --trace file (actor::TracePath; `trace` empty: none).
struct RunOutput {
  NamedFile file;
  int rank = 0;
};
std::vector<RunOutput> RunOutputs(const Config& cfg, const std::string& trace, int ranks);

// Checks each output that `rank` writes against the inputs and every other output of the run.
// Errors (Invalid, exit code 2) read "[config] CONFIG: KEY: ..." for the config's keys and
// "[train] --trace: ..." for the option.
Status CheckRunOutputs(const Config& cfg, const std::string& trace, int rank, int ranks);

// FNV-1a of the sizes of the model and data files, in RunInputs order (0 for one that is not a
// regular file): ranks whose effective configs agree can still read different copies of a file, on
// different nodes. The config file is left out: its effective contents are compared instead.
uint64_t InputSizesHash(const Config& cfg);

}  // namespace fr
