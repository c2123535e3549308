#include "driver/layout.h"

#include <algorithm>

namespace fr {
namespace {

Status Bad(const Config& cfg, const std::string& key, const std::string& msg) {
  return Status::Invalid("[config] " + cfg.path + ": parallel." + key + ": " + msg);
}

Result<std::vector<int64_t>> Mesh(const Config& cfg, int per_stage) {
  std::vector<int64_t> mesh = cfg.parallel.mesh.empty() ? std::vector<int64_t>{per_stage} : cfg.parallel.mesh;
  if (mesh.size() > static_cast<size_t>(sbp::kMaxMeshAxes)) {
    return Bad(cfg, "mesh", "has " + std::to_string(mesh.size()) + " axes; at most " + std::to_string(sbp::kMaxMeshAxes) + " are supported");
  }
  int64_t known = 1;
  bool overflow = false;  // the entries multiply past int64: far more than any stage has
  int infer = -1;
  for (size_t i = 0; i < mesh.size(); ++i) {
    if (mesh[i] == -1) infer = static_cast<int>(i);
    else overflow = overflow || __builtin_mul_overflow(known, mesh[i], &known);
  }
  const std::string holds = overflow ? "more than 2^63" : std::to_string(known);
  if (infer >= 0) {
    if (overflow || per_stage % known) {
      return Bad(cfg, "mesh", "cannot infer -1: " + std::to_string(per_stage) + " ranks per stage are not a multiple of " +
                                  (overflow ? "the other entries' product (more than 2^63)" : holds));
    }
    mesh[static_cast<size_t>(infer)] = per_stage / known;
  } else if (overflow || known != per_stage) {
    std::string m;
    for (int64_t d : mesh) m += (m.empty() ? "" : "x") + std::to_string(d);
    return Bad(cfg, "mesh", "mesh " + m + " holds " + holds + " ranks, but each stage has " + std::to_string(per_stage));
  }
  return mesh;
}

}  // namespace

sbp::Cluster ClusterOf(const ClusterConfig& cl) {
  sbp::Cluster c;
  c.flops = cl.flops;
  c.bandwidth = cl.bandwidth_intra;
  c.latency = cl.latency_intra;
  c.bandwidth_inter = cl.bandwidth_inter;
  c.latency_inter = cl.latency_inter;
  c.devices_per_node = static_cast<int>(cl.devices_per_node);
  c.op_overhead = cl.op_overhead;
  c.shared_latency = cl.shared_latency;
  c.shared_bandwidth = cl.shared_bandwidth;
  c.stream_element = cl.stream_element;
  c.special_element = cl.special_element;
  c.busy_speedup = cl.busy_speedup;
  c.p2p_latency = cl.p2p_latency;
  c.p2p_wake = cl.p2p_wake;
  c.memory = cl.memory_gib * static_cast<double>(1LL << 30);
  return c;
}

Result<sbp::AssignOptions> Layout(const Config& cfg, const ir::TrainingGraph& tg, int ranks) {
  const ir::Graph& g = tg.graph;
  const ParallelConfig& par = cfg.parallel;
  sbp::AssignOptions o;
  const int n_stages = par.stages.empty() ? 1 : static_cast<int>(par.stages.size());
  if (ranks % n_stages) {
    return Bad(cfg, "stages", std::to_string(n_stages) + " stages do not divide " + std::to_string(ranks) + " ranks evenly");
  }
  const int per_stage = ranks / n_stages;
  ASSIGN_OR_RETURN(std::vector<int64_t> mesh, Mesh(cfg, per_stage));
  const DeviceType dev = par.device;
  for (int s = 0; s < n_stages; ++s) {
    std::vector<int> rs;
    for (int i = 0; i < per_stage; ++i) rs.push_back(s * per_stage + i);
    o.stages.emplace_back(dev, rs, Shape(mesh));
  }

  // Forward nodes by glob; every glob must match something.
  o.node_stage.assign(g.nodes.size(), -1);
  for (size_t s = 0; s < par.stages.size(); ++s) {
    for (const std::string& glob : par.stages[s]) {
      bool any = false;
      for (size_t n = 0; n < g.nodes.size(); ++n) {
        if (g.nodes[n].phase != ir::Phase::kForward || !g.nodes[n].AnswersTo(glob)) continue;
        any = true;
        if (o.node_stage[n] < 0) o.node_stage[n] = static_cast<int>(s);
      }
      if (!any) return Bad(cfg, "stages", "stage " + std::to_string(s) + " glob '" + glob + "' matches no node of the model");
    }
  }
  o.value_stage.assign(g.values.size(), -1);
  auto consumers = g.Consumers();
  auto producer_stage = [&](ir::ValueId v) {
    ir::NodeId p = g.value(v).producer;
    return p >= 0 ? o.node_stage[static_cast<size_t>(p)] : o.value_stage[static_cast<size_t>(v)];
  };
  for (size_t n = 0; n < g.nodes.size(); ++n) {
    const ir::Node& node = g.nodes[n];
    int& st = o.node_stage[n];
    if (par.stages.empty()) st = 0;
    if (st < 0 && node.phase == ir::Phase::kForward) return Bad(cfg, "stages", "node '" + node.name + "' matches no stage glob");
    // A sum of a value's gradient parts goes where the parts were made, when they were all made on
    // one stage: the residual stream at a stage cut is read only by the next stage, whose two
    // parts of its gradient, summed on the stage before, both crossed back (gpt_mini in 2 stages:
    // 2 x 128 KiB a micro-batch instead of 128 KiB).
    if (st < 0 && node.phase == ir::Phase::kBackward && node.op == OpKind::kAdd && node.out.size() == 1 &&
        g.value(node.out[0]).grad_of >= 0) {
      int parts = producer_stage(node.in[0]);  // a sum's parts: earlier backward ops, placed already
      for (ir::ValueId v : node.in)
        if (producer_stage(v) != parts) parts = -1;
      if (parts >= 0) st = parts;
    }
    if (st < 0 && node.origin >= 0) st = o.node_stage[static_cast<size_t>(node.origin)];
    for (size_t i = 0; st < 0 && i < node.in.size(); ++i) {
      ir::ValueId v = node.in[i];
      if (v == ir::kNoValue || g.value(v).kind == ir::ValueKind::kConst) continue;
      st = producer_stage(v);
    }
    // Sources take the stage of their first consumer.
    for (ir::ValueId v : node.in) {
      if (v == ir::kNoValue) continue;
      auto k = g.value(v).kind;
      if ((k == ir::ValueKind::kInput || k == ir::ValueKind::kParam) && o.value_stage[static_cast<size_t>(v)] < 0 && st >= 0)
        o.value_stage[static_cast<size_t>(v)] = st;
    }
    if (st < 0) st = 0;
  }
  for (const ir::ParamGrad& pg : tg.params) o.node_stage[static_cast<size_t>(pg.update)] = o.value_stage[static_cast<size_t>(pg.param)];
  for (int& s : o.value_stage) s = std::max(s, 0);

  for (const auto& [pattern, parts] : par.sbp) {
    auto nd = sbp::NdSbp::Parse(parts);
    if (!nd.ok()) return Bad(cfg, "sbp." + pattern, nd.status().message());
    if (nd->size() != static_cast<int>(mesh.size())) {
      return Bad(cfg, "sbp." + pattern, "has " + std::to_string(nd->size()) + " entries, but the mesh has " +
                                            std::to_string(mesh.size()) + (mesh.size() == 1 ? " axis" : " axes"));
    }
    o.hints.emplace_back(pattern, *nd);
  }
  o.zero = par.zero;
  o.bucket_bytes = par.bucket_kib << 10;
  o.cluster = ClusterOf(cfg.cluster);
  o.micro_batches = cfg.accumulation();
  return o;
}

}  // namespace fr
