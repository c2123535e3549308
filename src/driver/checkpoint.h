// Checkpoints: the logical training state after a step, written by every rank in parallel and
// read back on any layout (docs/checkpoints.md).
//
// DIR/step-NNNNNNNN/ holds one safetensors file per rank (rank-RRRRR.safetensors: the pieces of the
// parameters and their optimizer state that rank holds, a piece held by several ranks written by
// the first; BatchNorm's running statistics in rank 0's), and manifest.json: the step, the config
// the run had, the plan hash, each file's size and FNV-1a 64 checksum, and for every logical
// tensor its type, shape and which region of it each piece holds. No rank gathers the model.
//
// Commit: rank 0 empties DIR/.tmp-step-NNNNNNNN, the ranks meet (actor::AgreeOnRun), each writes
// its file and then a small rank-RRRRR.json naming its pieces (both fsynced and renamed into
// place), rank 0 waits for every rank's (checkpoint.timeout), writes manifest.json and COMMIT, and
// renames the folder to step-NNNNNNNN. A folder by that name is complete; anything else is not a
// checkpoint. Older ones beyond checkpoint.keep are removed after the new one commits.
//
// Restore reads, for each piece this rank holds in the new plan, the regions of the stored pieces
// that overlap it: the same layout or another (rank count, tensor or pipeline parallelism, ZeRO).
// The data order, dropout and the schedule are functions of the global step and train.seed, so
// the step is the rest of the state.
#pragma once

#include <cstdint>
#include <string>

#include "actor/runtime.h"
#include "actor/world.h"
#include "base/status.h"
#include "config/config.h"
#include "driver/running_stats.h"
#include "ir/training.h"
#include "plan/plan.h"

namespace fr {

// Writes the state after `step` steps. Every rank calls it between runs of the runtime; rank 0
// commits. Errors: Runtime "[checkpoint] ..." (a write that failed, a rank that did not finish
// within checkpoint.timeout).
Status WriteCheckpoint(const Config& cfg, int64_t step, uint64_t plan_hash, const ir::Plan& plan, const ir::Graph& g,
                       const actor::Runtime& rt, const RunningStats& running, const actor::World& world);

// DIR/step-NNNNNNNN: where the checkpoint after `step` steps lies.
std::string CheckpointPath(const std::string& dir, int64_t step);
// The bytes of the files in checkpoint folder `path` (0 where it cannot be read).
int64_t CheckpointBytes(const std::string& path);

struct CheckpointInfo {
  std::string path;  // DIR/step-NNNNNNNN
  int64_t step = 0;  // steps done
};

// The newest committed checkpoint in `dir`, or `dir` itself where it is one (DIR/step-N with its
// COMMIT). Invalid "[checkpoint] ..." when there is none.
Result<CheckpointInfo> LatestCheckpoint(const std::string& dir);

// Loads this rank's pieces of every parameter and its optimizer state into `rt` (before its first
// run), and the running statistics (every rank keeps them: running_stats.h). Invalid "[checkpoint] PATH: ..." naming the file or
// tensor for a checkpoint that does not fit: another model, a missing tensor, a wrong shape, a
// changed train.seed or train.global_batch, a failed checksum, a truncated file.
Status RestoreCheckpoint(const CheckpointInfo& c, const Config& cfg, const ir::Plan& plan, const ir::Graph& g,
                         actor::Runtime& rt, RunningStats& running, int rank);

// `flowrun inspect PATH`: a checkpoint folder (step-N) or a checkpoint.dir (its newest). Prints the
// step, the layout it was written from, its files and tensors; with `config`, the lines of that
// config (as ConfigToYaml writes it) that differ from the checkpoint's; with `export_onnx`, writes
// the trained model as `save:` would, from the checkpoint's own config. Returns the exit code.
int InspectCheckpoint(const std::string& path, const std::string& config, const std::string& export_onnx);

}  // namespace fr
