// The parallel layout of a job from the `parallel:` config section: the placement of each pipeline
// stage, the stage of every node and source tensor of the training graph, and the parsed hints.
//
// Ranks R split into S equal stages (`stages:` lists node-name globs per stage, first match wins);
// each stage is a device mesh of shape `mesh` (one -1 inferred; default [R / S]). Forward nodes go
// to the first stage with a matching glob. Backward nodes follow the forward node they
// differentiate; other nodes (loss, accumulation, optimizer) and source tensors follow their first
// input's producer or first consumer. Errors name the key: a rank count that does not fit the mesh,
// a glob that matches no node, a node that matches no stage, a hint with the wrong number of axes.
#pragma once

#include "assign/assign.h"
#include "config/config.h"
#include "ir/training.h"

namespace fr {

// The cost model's view of the config's cluster: section.
sbp::Cluster ClusterOf(const ClusterConfig& cl);

// `ranks`: the world size to plan for (parallel.ranks, or `plan --ranks`, or 1).
Result<sbp::AssignOptions> Layout(const Config& cfg, const ir::TrainingGraph& tg, int ranks);

}  // namespace fr
