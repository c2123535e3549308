// SBP assignment: picks a placement and nd-SBP for every tensor and an nd-signature for every op of
// the training graph, minimising the cost model's predicted step time.
//
// Inputs: the placement of each pipeline stage, the stage of each node and source value, and the
// user's hints. Hints are hard constraints: `name: [nd-SBP]` fixes the tensor of that name (glob),
// `NODE:i: [nd-SBP]` fixes the tensor feeding input i of a node (glob), first match wins.
//
// The cost of an assignment, per step, per rank:
//   compute  FLOPs of each op / (peak FLOP/s x the devices that share its work), where a mesh axis
//            shares the work when the op's signature on that axis splits or partials anything,
//            plus the runtime's overhead per op run (cluster.op_overhead);
//   boxing   for every tensor and every distinct (placement, nd-SBP) its consumers want that
//            differs from what it is: boxing::Price's bytes / bandwidth + collective rounds x latency.
// Micro-batch ops and their tensors count M times a step, per-step ones once.
//
// Algorithm (deterministic):
//   1. Candidates: each op's 1-D rule (ops/op.h, OpDef::sbp) on every mesh axis, expanded to the
//      cartesian product over the axes, keeping those whose every tensor fits (sbp::Check) and that
//      honour the hints on the op's outputs. Sources (data inputs, parameters) may take any nd-SBP
//      of S and B that fits; constants follow whatever their consumer wants, at no cost.
//   2. Two greedy starts in topological order: each op takes its cheapest candidate given the
//      tensors already placed; a source not yet placed takes the SBP its first consumer wants.
//      The second start also charges each forward op for the backward movement its choice implies
//      (the gradients of its inputs moving back, a parameter's gradient syncing once a step) and
//      has each backward op mirror its forward op (below) where a candidate does. Under ZeRO a
//      third: the second with the parameters whole, as without ZeRO, through step 4, then sharded
//      (each with its update) and refined and moved again (steps 3-4).
//   3. Refinement sweeps (coordinate descent on the global cost: each op re-picks its candidate
//      counting the boxing on both its input and its output edges; each parameter re-picks its
//      layout with its update op) until nothing changes or 8 sweeps.
//   4. Group moves, which per-op refinement cannot make: a layer goes from data to tensor
//      parallel only if its forward op, the backward ops derived from it, its parameters and
//      their updates change together. For every forward op that reads a parameter or multiplies
//      matrices (and every other op that pays for boxing) and each candidate: apply it, let the
//      backward ops take the mirrored signature (they read forward tensors as the forward op did;
//      the gradient of a tensor takes the dual of its SBP, S -> S, B -> P, P -> B, on mesh axes
//      where the forward op splits its work, and B where it is replicated), let the parameters take
//      what the op reads and their updates follow, let two rings of neighbouring ops re-pick, and
//      keep the move if the cost of everything it touched falls. Up to 4 rounds, then refinement
//      sweeps again. A rejected move is not tried again until something within three hops of its
//      group changes (nothing else can change its outcome).
//   5. The cheaper start wins (the first on a tie): by the cost above, or under ZeRO by the step
//      model's time (assign/step.h), which has a stage's parameter gathers pay one latency together
//      where the cost above pays one per gather.
// This finds Megatron's layout from one hint on the first layer of a pair (column split): the
// second layer's weight is split along its input features and one all-reduce follows the pair.
// Constraints: an optimizer update reads its parameter in place, so its signature takes the
// parameter's nd-SBP as is. Without ZeRO a parameter is B on every mesh axis along which the data
// is split (data parallelism replicates weights); with ZeRO it must be S on those axes, so its
// optimizer state is sharded and its readers gather it.
#pragma once

#include <map>
#include <mutex>
#include <optional>
#include <string>
#include <utility>
#include <vector>

#include "base/flat_map.h"
#include "ir/training.h"
#include "sbp/sbp.h"

namespace fr::sbp {

// The machine the cost model prices (DESIGN.md §4), from the config's cluster: section.
// A movement whose ranks sit on more than one node pays the inter-node figures: a collective
// along a mesh axis that spans nodes, a transfer between stages on different nodes.
struct Cluster {
  double flops = 5e10;          // per device, FLOP/s
  double bandwidth = 4e9;       // bytes/s per rank, collectives and point-to-point, within a node
  double latency = 5e-6;        // seconds per collective round (ceil(log2 p) per collective) or message, within a node
  double bandwidth_inter = 4e9; // the same across nodes
  double latency_inter = 5e-6;
  int devices_per_node = 0;     // global rank r sits on node r / devices_per_node; 0 = one node
  double p2p_latency = 0;       // seconds per point-to-point message within a node; 0 = latency
  // Optional: a point-to-point message's latency by how long its receiver had waited for it,
  // [wait, latency] points in increasing wait (linear between them, the nearest beyond): a waiting
  // rank's polls back off, so the longer it waits the later it sees a message. The step model
  // prices a pipeline's hops between stages with it (assign/step.h).
  std::vector<std::pair<double, double>> p2p_wake;
  // Optional: a float32 sum all-reduce among ranks of one node runs through memory they share
  // (actor/comm.h), so it pays `shared_latency` once (no rounds) and reads members x its tensor's
  // bytes at `shared_bandwidth` per rank, instead of the figures above. 0: priced as the others.
  double shared_latency = 0, shared_bandwidth = 0;
  double op_overhead = 0;       // seconds per op run (and per boxing message), besides its kernel
  // Seconds per element an op that is not a matrix product reads and writes, per device: `stream`
  // for ops that move data with little arithmetic (Add, Transpose, Accumulate, ...), `special` for
  // ops that evaluate exp, erf or a square root per element (Gelu, Softmax, LayerNormalization,
  // ...). 0: 16 and 80 times a FLOP at `flops` (what they were on the machine flowrun was built on).
  double stream_element = 0, special_element = 0;
  std::vector<double> busy_speedup;  // [b-1]: per-rank compute speed with b of a node's ranks busy (assign/step.h)
  double memory = 16.0 * (1 << 30);  // bytes per device
};

struct NdSignature {
  std::vector<NdSbp> in, out;
  uint8_t work_axes = 0;  // bit a: the op's work is divided along mesh axis a (something not B there)
  bool operator==(const NdSignature&) const = default;
  std::string ToString() const;
};

// Boxing prices shared by many assignments on one cluster: `flowrun search` assigns dozens of
// layouts of one model whose movements repeat (the same tensor types, placements and SBPs). An
// entry is the seconds of one movement under one Cluster, so a cache serves one cluster only.
// Thread-safe; assignments keep their own memo in front of it.
class PriceCache {
 public:
  using Key = FlatMap<double>::Key;
  // Small ids for what keys name. Gradient accumulators and parameters price apart from other
  // tensors of their type: they share their buckets' latency, as much as their stage's gradients
  // or parameters weigh (role: 0 another tensor, 1 a gradient, 2 a parameter, 3 a parameter
  // under ZeRO, whose gathers ride in buckets, 4 another tensor made once a step, whose sum
  // all-reduces run through shared memory).
  int TypeId(const Shape& shape, DType dtype, int role);
  int PlaceId(const Placement& p, double grad_bytes, double param_bytes);
  std::optional<double> Find(const Key& k);
  void Put(const Key& k, double seconds);

 private:
  std::mutex mu_;
  std::map<std::pair<std::vector<int64_t>, int>, int> types_;
  struct Place {
    Placement place;
    double grad_bytes = 0, param_bytes = 0;
  };
  std::vector<Place> places_;
  FlatMap<double> prices_{1 << 16};
};

struct AssignOptions {
  std::vector<Placement> stages;                      // at least one
  std::vector<int> node_stage;                        // per node
  std::vector<int> value_stage;                       // per value (sources; others follow producers)
  std::vector<std::pair<std::string, NdSbp>> hints;   // in config order
  bool zero = false;
  int64_t bucket_bytes = 0;  // parallel.bucket_kib; 0: boxing::kDefaultBucketBytes
  int64_t micro_batches = 1;
  Cluster cluster;
  bool group_moves = true;  // step 4 below; `flowrun search` ranks candidates without it first
  PriceCache* prices = nullptr;  // shared across assignments on the same cluster; may be null
};

// One priced boxing edge: a value moving from its nd-SBP to what consumers on `dst_stage` want.
struct PricedEdge {
  ir::ValueId value = ir::kNoValue;
  int dst_stage = 0;
  NdSbp have, want;
  double seconds = 0;      // per step (micro-batch edges count M times)
  double latency = 0;      // of which: collectives' and messages' latency and per-task overhead
  double p2p_messages = 0; // per step, the point-to-point messages in `latency` at Cluster::p2p_latency each
  bool per_step = false;   // moves once a step, not once per micro-batch
  bool bucketed = false;   // in a gradient or parameter bucket: `latency` is its share of the buckets'
};

struct Assignment {
  std::vector<int> value_stage;       // per value
  std::vector<NdSbp> value_sbp;       // per value as produced or held; empty for constants
  std::vector<NdSignature> node_sig;  // per node
  double compute_seconds = 0;         // predicted per step, summed over ops
  double boxing_seconds = 0;          // predicted per step, summed over boxing edges
  std::vector<double> node_seconds;   // per node: its compute per step
  std::vector<PricedEdge> edges;      // every boxing edge with a cost or a change of SBP
};

// A matrix product's FLOPs: 2 x output x K for MatMul and Gemm; 0 for other ops.
double OpFlops(const ir::Graph& g, const ir::Node& n);
// What one op takes on one device of `c` with the whole op to itself (all ranks busy, as `flops`
// was measured), besides op_overhead: a matrix product its FLOPs at `flops`, any other op the
// elements it reads and writes at stream_element or special_element.
double OpSeconds(const ir::Graph& g, const ir::Node& n, const Cluster& c);

// Errors ("[sbp] ...") name the hint, tensor and op: a hint that matches nothing, a hint that
// does not fit its tensor, a hint that the producing op cannot honour (with what it accepts).
Result<Assignment> Assign(const ir::TrainingGraph& tg, const AssignOptions& opt);

}  // namespace fr::sbp
