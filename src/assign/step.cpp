#include "assign/step.h"

#include <algorithm>
#include <array>

namespace fr::sbp {

namespace {

// Cluster::p2p_wake at `wait`: linear between its points, the nearest beyond them.
double WakeLatency(const Cluster& cl, double wait) {
  const auto& w = cl.p2p_wake;
  if (wait <= w.front().first) return w.front().second;
  for (size_t i = 1; i < w.size(); ++i) {
    const auto [w0, l0] = w[i - 1];
    const auto [w1, l1] = w[i];
    if (wait <= w1) return l0 + (l1 - l0) * (wait - w0) / (w1 - w0);
  }
  return w.back().second;
}

}  // namespace

namespace {

// ModelStep's phases over one assignment: the stages' speed where ranks share cores, their
// compute, their data movement, and the pipeline schedule that combines them.
class StepModel {
 public:
  StepModel(const ir::Graph& g, const AssignOptions& o, const Assignment& a, int ranks)
      : g(g), o(o), a(a), cl(o.cluster), ranks_(ranks), S(static_cast<int>(o.stages.size())),
        M(static_cast<double>(o.micro_batches)), speedup(static_cast<size_t>(S), 1.0),
        crowded(static_cast<size_t>(S), 0.0), fwd(crowded), bwd(crowded) {
    t.stages.assign(static_cast<size_t>(S), StageTime{});
  }

  StepTime Run() {
    Speedups();
    Compute();
    Movements();
    return Schedule();
  }

 private:
  // busy_speedup: how fast a stage's ranks compute while every stage computes.
  void Speedups() {
    const int per_node = cl.devices_per_node > 0 ? cl.devices_per_node : ranks_;
    // With every stage busy, every rank of the job on the node computes at once.
    if (S > 1 && !cl.busy_speedup.empty()) {
      const int busy = std::clamp(std::min(ranks_, per_node), 1, static_cast<int>(cl.busy_speedup.size()));
      all_busy = cl.busy_speedup[static_cast<size_t>(busy - 1)];
    }
    if (S > 1 && !cl.busy_speedup.empty()) {
      for (int s = 0; s < S; ++s) {
        const int busy = std::clamp(std::min(o.stages[static_cast<size_t>(s)].size(), per_node), 1,
                                    static_cast<int>(cl.busy_speedup.size()));
        speedup[static_cast<size_t>(s)] = cl.busy_speedup[static_cast<size_t>(busy - 1)];
      }
    }
  }

  void Compute() {
    for (size_t n = 0; n < g.nodes.size(); ++n) {
      const auto s = static_cast<size_t>(o.node_stage[n]);
      StageTime& st = t.stages[s];
      const ir::Phase phase = g.nodes[n].phase;
      if (phase == ir::Phase::kOptimizer) {
        st.step_s += a.node_seconds[n];
      } else {
        const double w = a.node_seconds[n] / M / speedup[s];
        st.micro_s += w;
        (phase == ir::Phase::kForward || phase == ir::Phase::kLoss ? fwd : bwd)[s] += w;
        crowded[s] += a.node_seconds[n] / M / all_busy;
      }
    }
  }

  void Movements() {
    // A micro-batch's gradient on its way to its accumulator (read by accumulators only): the
    // runtime starts its movement when the backward op that made it finishes, and only the
    // accumulator waits for it, so one micro-batch's such movements are in flight together while
    // its backward goes on; priced one after another they would cost most of a step.
    std::vector<char> to_accumulator(g.values.size(), 0), read_otherwise(g.values.size(), 0);
    for (const ir::Node& n : g.nodes)
      for (ir::ValueId v : n.in)
        if (v >= 0) (n.op == OpKind::kAccumulate ? to_accumulator : read_otherwise)[static_cast<size_t>(v)] = 1;
    // Per stage, the latency already paid by movements in flight together: parameters per
    // micro-batch, parameters per step, gradient reductions per step, those not in buckets (one in
    // a bucket pays its share of its buckets' latency already, sbp::Assign), gradients into
    // their accumulators per micro-batch, and the parameters' squared gradient norms on their way to
    // the stage that sums them (each leaves as its gradient is reduced: traced, they travel together).
    // A step of one micro-batch starts with its inputs' movements (the data actor prefetches them)
    // and its parameter buckets in flight together (traced), so the inputs share the latency the
    // buckets already pay.
    std::vector<std::array<double, 5>> together(static_cast<size_t>(S), {0, 0, 0, 0, 0});
    for (const PricedEdge& e : a.edges)
      if (e.bucketed && e.per_step && g.value(e.value).kind == ir::ValueKind::kParam)
        together[static_cast<size_t>(e.dst_stage)][1] += e.latency;
    t.edge_s.assign(a.edges.size(), 0.0);
    for (size_t i = 0; i < a.edges.size(); ++i) {
      const PricedEdge& e = a.edges[i];
      StageTime& st = t.stages[static_cast<size_t>(e.dst_stage)];
      double seconds = e.seconds;
      const ir::Value& val = g.value(e.value);
      const bool gradient = g.ProducedBy(e.value, OpKind::kAccumulate) && !e.bucketed;
      const auto v = static_cast<size_t>(e.value);
      const bool partial_gradient = !e.per_step && to_accumulator[v] && !read_otherwise[v];
      const bool norm_part = e.per_step && g.ProducedBy(e.value, OpKind::kSquareSum);
      const bool param = val.kind == ir::ValueKind::kParam && !e.bucketed;
      const bool first_input = val.kind == ir::ValueKind::kInput && M == 1;
      if (param || first_input || gradient || partial_gradient || norm_part) {
        const int kind = norm_part ? 4 : partial_gradient ? 3 : gradient ? 2 : (e.per_step || first_input) ? 1 : 0;
        double& wait = together[static_cast<size_t>(e.dst_stage)][static_cast<size_t>(kind)];
        seconds -= e.latency - std::max(0.0, e.latency - wait);
        wait = std::max(wait, e.latency);
      }
      // A hop between pipeline stages reaches a rank that has waited for it: a forward hop into
      // stage d while the stages before d computed their forward, a backward hop into d while the
      // stages after it computed forward and backward (the first micro-batch, as W counts it). A
      // waiting rank's polls back off, so it sees a message the later the longer it waited
      // (Cluster::p2p_wake, as `flowrun env` measures it; one price for every hop overpriced the
      // short waits of fast stages).
      double latency = e.latency;
      const int from = a.value_stage[v];
      if (!cl.p2p_wake.empty() && e.p2p_messages > 0 && !e.per_step && from != e.dst_stage) {
        const bool forward = from < e.dst_stage;
        double waited = 0;
        for (int j = forward ? 0 : e.dst_stage + 1; j < (forward ? e.dst_stage : S); ++j)
          waited += fwd[static_cast<size_t>(j)] + (forward ? 0 : bwd[static_cast<size_t>(j)]);
        const double wake = e.p2p_messages * (WakeLatency(cl, waited) - cl.p2p_latency);
        seconds += wake;
        latency += wake;
      }
      if (e.per_step) {
        st.step_s += seconds;
      } else {
        st.micro_s += seconds / M;
        // Between stages in the steady state a hop's latency passes while the stage computes
        // other micro-batches (its bytes still cost the receiver), where each rank has a device of
        // its own; ranks that share cores wait for the receiver to be scheduled (gpt_mini's and the
        // MLP's pipelines on 4 ranks on 2 cores measured 1.2-1.9x their price with it hidden).
        const bool hop = a.value_stage[v] != e.dst_stage && cl.busy_speedup.empty();
        crowded[static_cast<size_t>(e.dst_stage)] += (hop ? seconds - latency : seconds) / M;
      }
      st.comm_s += seconds;
      t.edge_s[i] = seconds;
    }
  }

  StepTime Schedule() {
    double sum_w = 0, slowest = 0, u = 0;
    auto work = [&](int s) { return t.stages[static_cast<size_t>(s)].micro_s * M + t.stages[static_cast<size_t>(s)].step_s; };
    for (int s = 0; s < S; ++s) {
      if (work(s) > work(t.busiest)) t.busiest = s;
      sum_w += t.stages[static_cast<size_t>(s)].micro_s;
      slowest = std::max(slowest, crowded[static_cast<size_t>(s)]);
      u = std::max(u, t.stages[static_cast<size_t>(s)].step_s);
    }
    t.step_s = sum_w + (M - 1) * slowest + u;
    const size_t b = static_cast<size_t>(t.busiest);
    t.bubble_s = std::max(0.0, t.step_s - u - t.stages[b].micro_s - (M - 1) * crowded[b]);
    t.comm_s = t.stages[static_cast<size_t>(t.busiest)].comm_s;
    t.compute_s = work(t.busiest) - t.comm_s;
    return t;
  }

  const ir::Graph& g;
  const AssignOptions& o;
  const Assignment& a;
  const Cluster& cl;
  const int ranks_, S;
  const double M;
  StepTime t;
  std::vector<double> speedup;  // per stage
  double all_busy = 1.0;        // the speed-up with every rank of the node busy
  // Per stage, one micro-batch's work with every stage busy (compute without busy_speedup), and
  // its forward and backward compute as W counts it: how long a stage waits for a hop.
  std::vector<double> crowded, fwd, bwd;
};

}  // namespace

StepTime ModelStep(const ir::Graph& g, const AssignOptions& o, const Assignment& a, int ranks) {
  return StepModel(g, o, a, ranks).Run();
}

}  // namespace fr::sbp
