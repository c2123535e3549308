// Saving the trained model (config `save: {onnx: PATH}`): when training ends, rank 0 gathers each
// parameter's pieces from the ranks that hold them (one per distinct piece: replicas are equal)
// and writes model.onnx again with the trained values as its initializers (ir/onnx_export.h).
#pragma once

#include <map>
#include <string>

#include "actor/comm.h"
#include "actor/runtime.h"
#include "ir/onnx_proto.h"
#include "ir/training.h"
#include "plan/plan.h"

namespace fr {

// The parameters as the ONNX file names them: each under its own name, except the parts a rewrite
// cut from one (NAME[i], ir/rewrite.h), which join back along their last axis under NAME; and
// the BatchNorm running statistics training updates.
std::map<std::string, ir::TensorType> SavedTypes(const ir::TrainingGraph& t);

// After Runtime::Run on every rank: each rank sends rank 0 the pieces only it is first to hold,
// and rank 0 writes the file. Every rank calls it; `comm` may be null on one rank. A transfer that
// makes no progress for `timeout` seconds is an error (the caller aborts the job).
// `running`: on rank 0, BatchNorm's running statistics (driver/running_stats.h), saved as they are.
Status SaveTrained(const ir::Plan& plan, const ir::TrainingGraph& t, const actor::Runtime& rt, actor::Communicator* comm,
                   int rank, double timeout, const ir::OnnxModel& model, const std::map<std::string, Tensor>& running,
                   const std::string& path);

}  // namespace fr
