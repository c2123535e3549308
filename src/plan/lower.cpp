#include "plan/lower.h"

#include <algorithm>
#include <map>
#include <set>

#include "boxing/simulate.h"
#include "ops/op.h"

namespace fr::boxing {

using ir::NodeId;
using ir::RegstDesc;
using ir::TaskDesc;
using ir::TaskKind;
using ir::ValueId;

namespace {

constexpr int kComputeStream = 0, kDataStream = 1, kCommStream = 2;  // kCopyStream = 3 when there are copies

class Lowering {
 public:
  Lowering(const ir::TrainingGraph& tg, const sbp::Assignment& a, const LowerOptions& o, ir::Plan& p)
      : tg_(tg), g_(tg.graph), a_(a), o_(o), p_(p) {}

  Status Run() {
    p_.streams = {ir::StreamKind::kCompute, ir::StreamKind::kData, ir::StreamKind::kComm};
    p_.stages = o_.stages;
    p_.pipeline_stages = static_cast<int>(o_.stages.size());
    std::set<int> ranks;
    for (const sbp::Placement& pl : p_.stages) ranks.insert(pl.ranks().begin(), pl.ranks().end());
    p_.ranks = ranks.empty() ? 1 : *ranks.rbegin() + 1;
    p_.node_stage = o_.node_stage;
    for (const sbp::NdSignature& s : a_.node_sig) p_.node_sig.push_back(s.ToString());
    value_index_.assign(g_.values.size(), -1);
    std::vector<bool> is_update(g_.nodes.size(), false);
    for (const ir::ParamGrad& pg : tg_.params)
      if (pg.update >= 0) is_update[static_cast<size_t>(pg.update)] = true;

    for (ValueId v : g_.inputs) AddDataPieces(v);
    for (const ir::ParamGrad& pg : tg_.params) AddVariable(pg);
    FoldProducts();
    std::vector<std::vector<int>> node_tasks(g_.nodes.size());
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      // A folded accumulator's tasks take the place of the op they run (backward order, which the
      // memory plan's lifetimes follow), not the accumulator's after the whole backward.
      if (const NodeId acc = folded_into_[n]; acc >= 0) {
        node_tasks[static_cast<size_t>(acc)] = AddCompute(acc);
      } else if (!is_update[n] && runs_[n] < 0) {
        node_tasks[n] = AddCompute(static_cast<NodeId>(n));
      }
    }
    // Wire every node input, boxing where the producer's layout is not the one wanted; a folded
    // accumulator's task reads its product's inputs.
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      if (folded_into_[n] >= 0) continue;
      auto id = static_cast<NodeId>(n);
      const std::vector<int>& tasks = is_update[n] ? variable_tasks_[id] : node_tasks[n];
      RETURN_IF_ERROR(Wire(runs_[n] >= 0 ? runs_[n] : id, tasks));
    }
    RETURN_IF_ERROR(AddSink(TaskKind::kLossSink, "loss", tg_.loss_sum));  // may join a gradient bucket
    if (tg_.grad_norm_sq != ir::kNoValue) RETURN_IF_ERROR(AddSink(TaskKind::kNormSink, "grad_norm", tg_.grad_norm_sq));
    for (const ir::Graph::Running& r : g_.running) RETURN_IF_ERROR(AddSink(TaskKind::kStatSink, "stat", r.batch));
    EmitBuckets();
    for (const TaskDesc& t : p_.tasks) {
      std::vector<int> regs = t.kind == TaskKind::kBoxing ? t.move.in : std::vector<int>{};
      for (const ir::TaskInput& in : t.in) regs.push_back(in.regst);
      for (int r : regs) {
        if (r < 0) continue;
        auto& cons = p_.regsts[static_cast<size_t>(r)].consumers;
        if (std::find(cons.begin(), cons.end(), t.id) == cons.end()) cons.push_back(t.id);
      }
    }
    PlaceOnDevices();
    GroupUpdates();
    return Status::Ok();
  }

 private:
  const sbp::Placement& StageOf(ValueId v) const {
    return p_.stages[static_cast<size_t>(a_.value_stage[static_cast<size_t>(v)])];
  }
  bool PerStep(ValueId v) const {
    const ir::Value& val = g_.value(v);
    if (val.kind == ir::ValueKind::kParam) return true;
    if (val.producer < 0) return false;
    const ir::Node& n = g_.node(val.producer);
    return n.phase == ir::Phase::kOptimizer || n.op == OpKind::kAccumulate;
  }

  TaskDesc& NewTask(TaskKind kind, std::string name, int rank, int stream, bool per_step) {
    TaskDesc t;
    t.id = static_cast<int>(p_.tasks.size());
    t.kind = kind;
    t.name = std::move(name);
    t.rank = rank;
    t.stream = stream;
    t.per_step = per_step;
    p_.tasks.push_back(std::move(t));
    return p_.tasks.back();
  }

  int NewRegst(ValueId v, ir::TensorType type, int rank, int producer, bool per_step, int num) {
    RegstDesc r;
    r.id = static_cast<int>(p_.regsts.size());
    r.value = v;
    r.type = std::move(type);
    r.rank = rank;
    r.producer = producer;
    r.per_step = per_step;
    r.regst_num = num;
    p_.regsts.push_back(std::move(r));
    return p_.regsts.back().id;
  }

  std::string TaskName(const std::string& base, int rank) const {
    return p_.ranks > 1 ? base + "@" + std::to_string(rank) : base;
  }

  ir::ValuePlacement& Placed(ValueId v) {
    if (value_index_[static_cast<size_t>(v)] < 0) {
      value_index_[static_cast<size_t>(v)] = static_cast<int>(p_.values.size());
      ir::ValuePlacement vp;
      vp.value = v;
      vp.stage = a_.value_stage[static_cast<size_t>(v)];
      vp.sbp = a_.value_sbp[static_cast<size_t>(v)];
      p_.values.push_back(vp);
    }
    return p_.values[static_cast<size_t>(value_index_[static_cast<size_t>(v)])];
  }

  ir::TensorType Piece(ValueId v, const sbp::NdSbp& nd, const sbp::Placement& pl, int d) const {
    return {g_.type(v).dtype, sbp::PieceShape(g_.type(v).shape, nd, pl, d)};
  }

  void AddDataPieces(ValueId v) {
    const sbp::Placement& pl = StageOf(v);
    ir::ValuePlacement& vp = Placed(v);
    for (int d = 0; d < pl.size(); ++d) {
      int rank = pl.ranks()[static_cast<size_t>(d)];
      auto it = data_task_.find(rank);
      if (it == data_task_.end()) {
        it = data_task_.emplace(rank, NewTask(TaskKind::kData, TaskName("data", rank), rank, kDataStream, false).id).first;
      }
      int r = NewRegst(v, Piece(v, vp.sbp, pl, d), rank, it->second, false, 2);
      p_.tasks[static_cast<size_t>(it->second)].out.push_back(r);
      Placed(v).regsts.push_back(r);
    }
  }

  void AddVariable(const ir::ParamGrad& pg) {
    const sbp::Placement& pl = StageOf(pg.param);
    const sbp::NdSbp nd = a_.value_sbp[static_cast<size_t>(pg.param)];
    const Tensor& init = g_.value(pg.param).data;
    for (int d = 0; d < pl.size(); ++d) {
      int rank = pl.ranks()[static_cast<size_t>(d)];
      TaskDesc& t = NewTask(TaskKind::kVariable, TaskName(g_.value(pg.param).name, rank), rank, kComputeStream, true);
      int tid = t.id;
      p_.tasks[static_cast<size_t>(tid)].param = pg.param;
      p_.tasks[static_cast<size_t>(tid)].logical = pg.update;
      p_.tasks[static_cast<size_t>(tid)].param_piece = static_cast<int>(p_.consts.size());
      // A whole piece (a replica) shares the initializer's memory: data parallelism over N ranks
      // would otherwise hold N copies of the model in every rank's plan.
      const std::vector<sbp::Range> ranges = sbp::PieceRanges(init.shape(), nd, pl, d);
      bool whole = true;
      for (size_t i = 0; i < ranges.size(); ++i) whole = whole && ranges[i].begin == 0 && ranges[i].end == init.shape().dims()[i];
      p_.consts.push_back(whole ? init : SliceOf(init, ranges));
      int r = NewRegst(pg.param, Piece(pg.param, nd, pl, d), rank, tid, true, 1);
      p_.tasks[static_cast<size_t>(tid)].out.push_back(r);
      Placed(pg.param).regsts.push_back(r);
      if (pg.update >= 0) variable_tasks_[pg.update].push_back(tid);
    }
    // The update node runs inside the variable task, on the physical piece (none in evaluation:
    // the variable only holds the parameter).
    for (int d = 0; d < pl.size() && pg.update >= 0; ++d) {
      TaskDesc& t = p_.tasks[static_cast<size_t>(variable_tasks_[pg.update][static_cast<size_t>(d)])];
      t.node = AddPhysicalNode(pg.update, pl, d);
    }
  }

  // A physical copy of node `id` for device d of placement `pl`, with piece shapes.
  int AddPhysicalNode(NodeId id, const sbp::Placement& pl, int d) {
    const ir::Node& n = g_.node(id);
    const sbp::NdSignature& s = a_.node_sig[static_cast<size_t>(id)];
    ir::Node phys = n;
    std::vector<ir::TensorType> logical_in, physical_out;
    for (ValueId v : n.in) logical_in.push_back(v == ir::kNoValue ? ir::TensorType{} : g_.type(v));
    for (size_t i = 0; i < n.out.size(); ++i) physical_out.push_back(Piece(n.out[i], s.out[i], pl, d));
    if (Def(n.op).physical) {
      std::vector<int64_t> start;
      for (const sbp::Range& r : sbp::PieceRanges(g_.type(n.out[0]).shape, s.out[0], pl, d)) start.push_back(r.begin);
      Def(n.op).physical(phys, logical_in, physical_out, start);
    }
    p_.nodes.push_back(std::move(phys));
    return static_cast<int>(p_.nodes.size() - 1);
  }

  // The nodes that read v, in node order (the graph's table, made on first use).
  const std::vector<NodeId>& Consumers(ValueId v) {
    if (consumers_.empty()) consumers_ = g_.Consumers();
    return consumers_[static_cast<size_t>(v)];
  }

  // Whether forward value v is read by a backward op (an activation saved for the backward).
  bool SavedForBackward(ValueId v) {
    const ir::Node* prod = g_.value(v).producer >= 0 ? &g_.node(g_.value(v).producer) : nullptr;
    if (!prod || (prod->phase != ir::Phase::kForward && prod->phase != ir::Phase::kLoss)) return false;
    for (NodeId u : Consumers(v))
      if (g_.node(u).phase == ir::Phase::kBackward) return true;
    return false;
  }
  std::vector<std::vector<NodeId>> consumers_;

  // A micro-batch's gradient made by MatMul, SumTo or GatherGrad, read by nothing but its
  // accumulator, on the same stage and in the layout the accumulator keeps (no boxing between
  // them), is not made apart: the accumulator's task runs the op that makes it, marked
  // "accumulate", and the kernel adds into the step's sum (a GEMM with beta 1, a sum or
  // scatter-add without zeroing first: cpu::AddsInto). One act a micro-batch instead of two, one
  // pass over the gradient fewer, and no register for it (gpt_mini: 19 of its 29 gradients, all
  // but LayerNorm's). The logical graph, its assignment and the step model are unchanged: the
  // model still prices the accumulator's act (docs/runtime.md, "Gradient accumulation", says why).
  void FoldProducts() {
    runs_.assign(g_.nodes.size(), -1);
    folded_into_.assign(g_.nodes.size(), -1);
    std::vector<bool> output(g_.values.size(), false);
    for (ValueId v : g_.outputs) output[static_cast<size_t>(v)] = true;
    for (size_t n = 0; n < g_.nodes.size(); ++n) {
      const ir::Node& acc = g_.nodes[n];
      if (acc.op != OpKind::kAccumulate || acc.in.size() != 1) continue;
      const ValueId v = acc.in[0];
      const NodeId made = g_.value(v).producer;
      if (made < 0 || output[static_cast<size_t>(v)] || Consumers(v).size() != 1) continue;
      const ir::Node& m = g_.node(made);
      if ((m.op != OpKind::kMatMul && m.op != OpKind::kSumTo && m.op != OpKind::kGatherGrad) || m.out.size() != 1) continue;
      if (o_.node_stage[static_cast<size_t>(made)] != o_.node_stage[n]) continue;
      if (!(a_.value_sbp[static_cast<size_t>(v)] == a_.node_sig[n].in[0])) continue;
      runs_[n] = made;
      folded_into_[static_cast<size_t>(made)] = static_cast<NodeId>(n);
    }
  }
  std::vector<NodeId> runs_;         // per node: the op an accumulator's task runs, or -1
  std::vector<NodeId> folded_into_;  // per node: the accumulator whose task runs it, or -1

  std::vector<int> AddCompute(NodeId id) {
    const ir::Node& n = g_.node(id);
    const sbp::Placement& pl = p_.stages[static_cast<size_t>(o_.node_stage[static_cast<size_t>(id)])];
    const sbp::NdSignature& s = a_.node_sig[static_cast<size_t>(id)];
    bool per_step = n.phase == ir::Phase::kOptimizer;
    bool out_per_step = per_step || n.op == OpKind::kAccumulate;
    const NodeId runs = runs_[static_cast<size_t>(id)];
    std::vector<int> tasks;
    for (int d = 0; d < pl.size(); ++d) {
      int rank = pl.ranks()[static_cast<size_t>(d)];
      int tid = NewTask(TaskKind::kCompute, TaskName(n.name, rank), rank, kComputeStream, per_step).id;
      p_.tasks[static_cast<size_t>(tid)].node = AddPhysicalNode(runs >= 0 ? runs : id, pl, d);
      if (runs >= 0) {  // the gradient's op, adding into the accumulator's output
        ir::Node& phys = p_.nodes.back();
        phys.attrs.Set("accumulate", int64_t{1});
        phys.name = n.name;
        phys.out = n.out;
        phys.phase = n.phase;
      }
      p_.tasks[static_cast<size_t>(tid)].logical = id;
      for (size_t i = 0; i < n.out.size(); ++i) {
        // A pipeline stage k keeps what its backward reads for up to S - k micro-batches (lower.h).
        const int stage = o_.node_stage[static_cast<size_t>(id)];
        const int64_t kept = std::min<int64_t>(static_cast<int64_t>(o_.stages.size()) - stage, o_.micro_batches);
        const int slots = o_.stages.size() > 1 && SavedForBackward(n.out[i]) ? static_cast<int>(kept) : 1;
        int r = NewRegst(n.out[i], Piece(n.out[i], s.out[i], pl, d), rank, tid, out_per_step, slots);
        p_.tasks[static_cast<size_t>(tid)].out.push_back(r);
        Placed(n.out[i]).regsts.push_back(r);
      }
      tasks.push_back(tid);
    }
    return tasks;
  }

  // The constant piece device d of `pl` reads under `want`: a slice, or zeros off the partial root.
  int ConstPiece(ValueId v, const sbp::Placement& pl, const sbp::NdSbp& want, int d) {
    const Tensor& data = g_.value(v).data;
    std::vector<int64_t> coords = pl.Coords(d);
    bool root = true;
    for (int a = 0; a < want.size(); ++a) root = root && (!want[a].is_partial() || want[a].reduce() != sbp::Reduce::kSum || coords[static_cast<size_t>(a)] == 0);
    Tensor piece = SliceOf(data, sbp::PieceRanges(data.shape(), want, pl, d));
    if (!root) piece.Zero();
    p_.consts.push_back(piece);
    return static_cast<int>(p_.consts.size() - 1);
  }

  Status Wire(NodeId id, const std::vector<int>& tasks) {
    const ir::Node& n = g_.node(id);
    const sbp::Placement& pl = p_.stages[static_cast<size_t>(o_.node_stage[static_cast<size_t>(id)])];
    int stage = o_.node_stage[static_cast<size_t>(id)];
    const sbp::NdSignature& s = a_.node_sig[static_cast<size_t>(id)];
    bool update = n.phase == ir::Phase::kOptimizer && (n.op == OpKind::kSgdUpdate || n.op == OpKind::kAdamWUpdate);
    for (size_t i = 0; i < n.in.size(); ++i) {
      ValueId v = n.in[i];
      std::vector<ir::TaskInput> per_device(static_cast<size_t>(pl.size()));
      if (v == ir::kNoValue || (update && i == 0)) {
        // absent, or the variable's own parameter
      } else if (g_.value(v).kind == ir::ValueKind::kConst) {
        for (int d = 0; d < pl.size(); ++d) per_device[static_cast<size_t>(d)].konst = ConstPiece(v, pl, s.in[i], d);
      } else {
        ASSIGN_OR_RETURN(std::vector<int> regs, Deliver(v, stage, s.in[i], n.name));
        for (int d = 0; d < pl.size(); ++d) per_device[static_cast<size_t>(d)].regst = regs[static_cast<size_t>(d)];
      }
      for (int d = 0; d < pl.size(); ++d) p_.tasks[static_cast<size_t>(tasks[static_cast<size_t>(d)])].in.push_back(per_device[static_cast<size_t>(d)]);
    }
    return Status::Ok();
  }

  // An edge between two pipeline stages (not into the sink stage AddSink may add).
  bool CrossesPipelineStages(int from, int to) const {
    const auto n = static_cast<int>(o_.stages.size());
    return from != to && from < n && to < n;
  }

  // The regsts holding `v` as `want` on stage `stage`, one per device: the producer's own when
  // they match, else the output of boxing tasks (planned once per (v, stage, want)).
  Result<std::vector<int>> Deliver(ValueId v, int stage, const sbp::NdSbp& want, const std::string& consumer) {
    ir::ValuePlacement& vp = Placed(v);
    const sbp::Placement& src = p_.stages[static_cast<size_t>(vp.stage)];
    const sbp::Placement& dst = p_.stages[static_cast<size_t>(stage)];
    if (vp.stage == stage && vp.sbp == want) return vp.regsts;
    auto key = std::make_tuple(v, stage, want.ToString());
    auto it = boxed_.find(key);
    if (it != boxed_.end()) {
      p_.edges[static_cast<size_t>(it->second.first)].consumers.push_back(consumer);
      return it->second.second;
    }
    Request req{g_.type(v).shape, g_.type(v).dtype, src, vp.sbp, dst, want};
    auto plan = Box(req);
    if (!plan.ok()) return plan.status().With("edge '" + g_.value(v).name + "' -> '" + consumer + "': ");
    std::vector<int> srcs = vp.regsts;  // copy: regsts may grow
    const size_t first_new = p_.regsts.size();
    const bool bucketed = Bucketable(v, *plan, vp.stage == stage);
    std::vector<int> dsts = bucketed ? Defer(v, *plan, srcs) : Emit(*plan, v, srcs, PerStep(v));
    if (CrossesPipelineStages(vp.stage, stage) && !PerStep(v)) {
      // Both ends hold one slot per stage, so stage k can start micro-batch m+1 while stage k+1
      // still holds m (the schedule in lower.h).
      const int depth = static_cast<int>(o_.stages.size());
      std::vector<int> regs = srcs;
      for (size_t r = first_new; r < p_.regsts.size(); ++r) regs.push_back(static_cast<int>(r));
      for (int r : regs) {
        int& num = p_.regsts[static_cast<size_t>(r)].regst_num;
        num = std::max(num, depth);
      }
    }
    ir::BoxingEdge e;
    e.value = v;
    e.src_stage = vp.stage;
    e.dst_stage = stage;
    e.src = vp.sbp;
    e.dst = want;
    e.strategy = plan->strategy;
    e.bytes_per_rank = plan->bytes_per_rank_max;
    e.per_step = PerStep(v);
    e.consumers.push_back(consumer);
    p_.edges.push_back(e);
    if (bucketed) deferred_.back().edge = static_cast<int>(p_.edges.size() - 1);
    boxed_[key] = {static_cast<int>(p_.edges.size() - 1), dsts};
    return dsts;
  }

  // Turns a boxing plan's tasks into Plan tasks; returns the regst of each dst device.
  std::vector<int> Emit(const boxing::Plan& bp, ValueId v, const std::vector<int>& src_regsts, bool per_step) {
    std::vector<int> regst_of(bp.buffers.size(), -1);
    for (size_t d = 0; d < bp.src.size(); ++d) regst_of[static_cast<size_t>(bp.src[d])] = src_regsts[d];
    int collective_base = next_collective_, tag_base = next_tag_;
    for (const boxing::Task& bt : bp.tasks) {
      std::string name = TaskName(g_.value(v).name + "/" + boxing::Name(bt.op), bt.rank);
      TaskDesc& t = NewTask(TaskKind::kBoxing, name, bt.rank, kCommStream, per_step);
      int tid = t.id;
      boxing::Task mv = bt;
      mv.in.clear();
      for (int b : bt.in) mv.in.push_back(regst_of[static_cast<size_t>(b)]);
      if (bt.out >= 0) {
        const boxing::Buffer& buf = bp.buffers[static_cast<size_t>(bt.out)];
        regst_of[static_cast<size_t>(bt.out)] = NewRegst(v, {bp.dtype, buf.shape}, bt.rank, tid, per_step, 1);
        mv.out = regst_of[static_cast<size_t>(bt.out)];
        p_.tasks[static_cast<size_t>(tid)].out.push_back(mv.out);
      }
      if (mv.collective >= 0) {
        mv.collective += collective_base;
        next_collective_ = std::max(next_collective_, mv.collective + 1);
      }
      if (mv.tag >= 0) {
        mv.tag += tag_base;
        next_tag_ = std::max(next_tag_, mv.tag + 1);
      }
      p_.tasks[static_cast<size_t>(tid)].move = std::move(mv);
    }
    std::vector<int> out;
    for (int b : bp.dst) out.push_back(regst_of[static_cast<size_t>(b)]);
    return out;
  }

  // Gradient buckets. A gradient accumulator whose boxing is one all-reduce (or, under ZeRO, one
  // reduce-scatter) per device, within one placement, is not emitted on its own: EmitBuckets fuses
  // such collectives, in the order backward makes their gradients (the node order of the ops that
  // make them), into buckets of at most LowerOptions::bucket_bytes per device, one fused task per device
  // and bucket. As with PyTorch DDP's buckets, a bucket pays one latency and one collective call
  // for all its gradients, and the first buckets reduce while backward still computes the rest.
  // Only accumulators qualify: nothing they depend on can wait for another collective in the
  // bucket.
  //
  // Parameter buckets: under ZeRO, likewise the per-step all-gathers of a stage's parameters for
  // their readers, in the order the step first reads them, so the first bucket holds the first
  // layers'. A bucket starts when its last parameter is updated; gathered one by one, they
  // delayed the next forward.
  // Without ZeRO a gathered parameter is one that tensor parallelism left whole for a reader;
  // those stay on their own, as the assigner prices them.
  struct Deferred {
    NodeId order;  // what orders the bucket: the op that made the gradient, or first reads the parameter
    boxing::Plan plan;
    std::vector<int> srcs, dsts;  // per device
    int edge = -1;                // its Plan::edges entry
  };

  bool Bucketable(ValueId v, const boxing::Plan& bp, bool same_stage) const {
    const bool gradient = g_.ProducedBy(v, OpKind::kAccumulate);
    const bool param = o_.zero && g_.value(v).kind == ir::ValueKind::kParam;
    if (!same_stage || !(gradient || param)) return false;
    if (bp.tasks.size() != bp.src.size() || bp.tasks.empty()) return false;
    for (size_t d = 0; d < bp.tasks.size(); ++d) {
      const boxing::Task& t = bp.tasks[d];
      const bool fuses = gradient ? t.op == Op::kAllReduce || t.op == Op::kReduceScatter : t.op == Op::kAllGather;
      if (!fuses || t.in != std::vector<int>{bp.src[d]} || t.out != bp.dst[d]) return false;
    }
    return true;
  }

  std::vector<int> Defer(ValueId v, const boxing::Plan& bp, const std::vector<int>& srcs) {
    NodeId order = g_.value(v).kind == ir::ValueKind::kParam ? Consumers(v).front()  // in node order
                                                             : g_.value(g_.node(g_.value(v).producer).in[0]).producer;
    Deferred d{order, bp, srcs, {}};
    for (size_t i = 0; i < srcs.size(); ++i) {
      const RegstDesc& src = p_.regsts[static_cast<size_t>(srcs[i])];
      const boxing::Buffer& out = bp.buffers[static_cast<size_t>(bp.dst[i])];  // a part, or a whole
      d.dsts.push_back(NewRegst(v, {src.type.dtype, out.shape}, src.rank, -1, true, 1));  // produced by its bucket
    }
    deferred_.push_back(std::move(d));
    return deferred_.back().dsts;
  }

  void EmitBuckets() {
    // Members fuse when every device runs the same collective (op, reduction, axes) over the same
    // group with the same dtype.
    auto key = [](const boxing::Plan& bp) {
      std::string k = std::string(Name(bp.dtype));
      int collective = -1;
      for (const boxing::Task& t : bp.tasks) {
        k += "|" + std::to_string(t.rank) + ":" + std::string(Name(t.op)) + ":" + std::to_string(t.split_axis) + ":" +
             std::to_string(t.concat_axis) + ":" + std::to_string(static_cast<int>(t.reduce)) + ":";
        if (t.collective == collective) continue;  // its tasks share one group: spelled out once
        collective = t.collective;
        for (int r : t.group) k += std::to_string(r) + ",";
      }
      return k;
    };
    std::map<std::string, std::vector<const Deferred*>> by_key;
    for (const Deferred& d : deferred_) by_key[key(d.plan)].push_back(&d);
    for (auto& [k, members] : by_key) {
      // In the order backward makes the gradients (its ops' node order), or the step reads the
      // parameters, packed greedily from the first: the last gradient bucket, which waits for
      // the last gradient and so is reduced after backward, is the remainder (gpt_mini's: the
      // token embedding's, 64 KiB). A member counts its larger side (a gathered parameter whole).
      std::stable_sort(members.begin(), members.end(),
                       [&](const Deferred* a, const Deferred* b) { return a->order < b->order; });
      auto bytes_of = [this](const Deferred* m) {
        return std::max(p_.regsts[static_cast<size_t>(m->srcs[0])].bytes(), p_.regsts[static_cast<size_t>(m->dsts[0])].bytes());
      };
      size_t first = 0;
      int64_t bytes = 0;
      for (size_t i = 0; i <= members.size(); ++i) {
        const int64_t b = i < members.size() ? bytes_of(members[i]) : 0;
        if (i == members.size() || (i > first && bytes + b > o_.bucket_bytes)) {
          EmitBucket({members.begin() + static_cast<long>(first), members.begin() + static_cast<long>(i)});
          first = i;
          bytes = 0;
        }
        bytes += b;
      }
    }
    deferred_.clear();
  }

  void EmitBucket(const std::vector<const Deferred*>& members) {
    const int bucket = next_bucket_++;
    const boxing::Plan& shape = members.front()->plan;  // every member's tasks match it
    int collectives = 0;
    for (size_t d = 0; d < shape.tasks.size(); ++d) {
      const boxing::Task& bt = shape.tasks[d];
      std::string name = TaskName("bucket" + std::to_string(bucket) + "/" + Name(bt.op), bt.rank);
      const int tid = NewTask(TaskKind::kBoxing, name, bt.rank, kCommStream, true).id;
      boxing::Task mv = bt;
      mv.in.clear();
      mv.out = -1;  // the outputs are the task's regsts, one per input
      mv.collective = next_collective_ + bt.collective;
      collectives = std::max(collectives, bt.collective + 1);
      for (const Deferred* m : members) {
        mv.in.push_back(m->srcs[d]);
        p_.regsts[static_cast<size_t>(m->dsts[d])].producer = tid;
        p_.tasks[static_cast<size_t>(tid)].out.push_back(m->dsts[d]);
      }
      p_.tasks[static_cast<size_t>(tid)].move = std::move(mv);
    }
    next_collective_ += collectives;
    for (const Deferred* m : members) p_.edges[static_cast<size_t>(m->edge)].bucket = bucket;
  }

  // A sink on global rank 0 that reads the per-step value `v` whole. Where v's stage holds rank 0,
  // v is made B across that stage and rank 0 reads its own piece: the loss's sum over the
  // micro-batches, partial under data parallelism, is then all-reduced once a step in the first
  // gradient bucket (it is ready before any gradient), and rank 0 keeps no receive in flight for
  // it (docs/performance-history.md, "the loss once a step"). Otherwise (a pipeline whose last
  // stage is elsewhere) v goes to rank 0, once a step. A BatchNorm statistic, every micro-batch,
  // gets a sink on each rank of its stage as well: each keeps the running average, which an
  // evaluation there reads (driver/running_stats.h); rank 0's is the one saved.
  Status AddSink(TaskKind kind, const std::string& name, ValueId v) {
    const bool stat = kind == TaskKind::kStatSink;
    auto sink = [&](int rank, int regst) {
      TaskDesc& t = NewTask(kind, stat ? TaskName("stat:" + g_.value(v).name, rank) : name, rank, kComputeStream, !stat);
      t.param = stat ? v : ir::kNoValue;
      t.in.push_back(ir::TaskInput{regst, -1});
    };
    const int stage = a_.value_stage[static_cast<size_t>(v)];
    const std::vector<int> ranks = p_.stages[static_cast<size_t>(stage)].ranks();
    const int ndim = p_.stages[static_cast<size_t>(stage)].ndim();
    const auto at = static_cast<size_t>(std::find(ranks.begin(), ranks.end(), 0) - ranks.begin());
    if (at < ranks.size() || stat) {
      ASSIGN_OR_RETURN(std::vector<int> regs, Deliver(v, stage, sbp::NdSbp::Broadcast(ndim), name));
      for (size_t d = 0; d < ranks.size(); ++d)
        if (stat || d == at) sink(ranks[d], regs[d]);
      if (at < ranks.size()) return Status::Ok();
    }
    const int to = SinkStage();
    ASSIGN_OR_RETURN(std::vector<int> regs, Deliver(v, to, sbp::NdSbp::Broadcast(p_.stages[static_cast<size_t>(to)].ndim()), name));
    sink(0, regs[0]);
    return Status::Ok();
  }

  // Every task and regst gets its device: the loader and the sinks run on the host (they read files
  // and report numbers), everything else on the device of its stage (all stages have one type:
  // parallel.device), each rank its device 0. A regst lives where its producer runs; where a
  // consumer runs elsewhere, a kCopy task on the copy stream moves it there first, one per regst
  // and destination device, with the regst's slots and time shape. A plan on the CPU alone gets
  // no copies and no copy stream.
  void PlaceOnDevices() {
    const DeviceType type = p_.stages.empty() ? DeviceType::kCpu : p_.stages[0].type();
    for (TaskDesc& t : p_.tasks) {
      const bool host = t.kind == TaskKind::kData || t.kind == TaskKind::kLossSink || t.kind == TaskKind::kNormSink ||
                        t.kind == TaskKind::kStatSink;
      t.device = host ? Device{} : Device{type, 0};
    }
    const size_t regsts = p_.regsts.size();
    for (size_t r = 0; r < regsts; ++r) {
      const int producer = p_.regsts[r].producer;
      p_.regsts[r].device = producer >= 0 ? p_.tasks[static_cast<size_t>(producer)].device : Device{type, 0};
      std::map<std::pair<DeviceType, int>, std::vector<int>> elsewhere;  // consumers by device
      for (int c : p_.regsts[r].consumers) {
        const Device d = p_.tasks[static_cast<size_t>(c)].device;
        if (!(d == p_.regsts[r].device)) elsewhere[{d.type, d.index}].push_back(c);
      }
      for (const auto& [where, consumers] : elsewhere) AddCopy(static_cast<int>(r), Device{where.first, where.second}, consumers);
    }
  }

  // Update groups: the variables of a device whose update nodes are alike (one op, the same
  // attributes and clip coefficient) and whose gradients become ready together (the same gradient
  // bucket, or none) update in one call of the op's group kernel: a few launches a step on a GPU
  // instead of one per parameter. A group waits for its last gradient; without a bucket, that is
  // the end of the backward, when the compute stream is free for the updates anyway.
  void GroupUpdates() {
    std::map<ValueId, int> bucket_of;  // a gradient's bucket
    for (const ir::BoxingEdge& e : p_.edges)
      if (e.bucket >= 0 && g_.value(e.value).kind != ir::ValueKind::kParam) bucket_of[e.value] = e.bucket;
    struct Group {
      const TaskDesc* first;
      int bucket;
      std::vector<int> tasks;
    };
    std::vector<Group> groups;
    auto coef = [](const TaskDesc& t) { return t.in.size() > 2 ? t.in[2].regst : -1; };
    for (const TaskDesc& t : p_.tasks) {
      if (t.kind != TaskKind::kVariable || t.node < 0) continue;
      const ir::Node& u = p_.nodes[static_cast<size_t>(t.node)];
      const auto b = bucket_of.find(g_.node(t.logical).in[1]);
      const int bucket = b == bucket_of.end() ? -1 : b->second;
      auto alike = [&](const Group& gr) {
        const TaskDesc& f = *gr.first;
        const ir::Node& fu = p_.nodes[static_cast<size_t>(f.node)];
        return f.rank == t.rank && f.device == t.device && f.stream == t.stream && fu.op == u.op &&
               fu.attrs.all() == u.attrs.all() && coef(f) == coef(t) && gr.bucket == bucket;
      };
      auto it = std::find_if(groups.begin(), groups.end(), alike);
      if (it == groups.end()) it = groups.insert(groups.end(), Group{&t, bucket, {}});
      it->tasks.push_back(t.id);
    }
    int next = 0;
    for (const Group& gr : groups) {
      if (gr.tasks.size() < 2) continue;
      for (int id : gr.tasks) p_.tasks[static_cast<size_t>(id)].update_group = next;
      ++next;
    }
  }

  void AddCopy(int from, Device to, const std::vector<int>& consumers) {
    if (std::find(p_.streams.begin(), p_.streams.end(), ir::StreamKind::kCopy) == p_.streams.end())
      p_.streams.push_back(ir::StreamKind::kCopy);
    const int stream = static_cast<int>(std::find(p_.streams.begin(), p_.streams.end(), ir::StreamKind::kCopy) - p_.streams.begin());
    const RegstDesc src = p_.regsts[static_cast<size_t>(from)];
    const std::string name = g_.value(src.value).name + "->" + ToString(to);
    TaskDesc& t = NewTask(TaskKind::kCopy, TaskName(name, src.rank), src.rank, stream, src.per_step);
    t.device = to.type == DeviceType::kCpu ? src.device : to;  // the device side's backend copies
    t.in.push_back(ir::TaskInput{from, -1});
    const int copy = t.id;
    const int dst = NewRegst(src.value, src.type, src.rank, copy, src.per_step, src.regst_num);
    p_.tasks[static_cast<size_t>(copy)].out.push_back(dst);
    p_.regsts[static_cast<size_t>(dst)].device = to;
    p_.regsts[static_cast<size_t>(dst)].consumers = consumers;
    std::vector<int>& cons = p_.regsts[static_cast<size_t>(from)].consumers;
    for (int c : consumers) {
      cons.erase(std::find(cons.begin(), cons.end(), c));
      TaskDesc& ct = p_.tasks[static_cast<size_t>(c)];
      for (ir::TaskInput& in : ct.in)
        if (in.regst == from) in.regst = dst;
      for (int& in : ct.move.in)
        if (in == from) in = dst;
    }
    cons.push_back(copy);
  }

  // The stage whose placement is rank 0 alone, added on first use when rank 0 is not already one.
  int SinkStage() {
    for (size_t i = 0; i < p_.stages.size(); ++i)
      if (p_.stages[i].size() == 1 && p_.stages[i].ranks()[0] == 0) return static_cast<int>(i);
    p_.stages.push_back(sbp::Placement(p_.stages[0].type(), {0}, Shape{1}));
    return static_cast<int>(p_.stages.size() - 1);
  }

  const ir::TrainingGraph& tg_;
  const ir::Graph& g_;
  const sbp::Assignment& a_;
  const LowerOptions& o_;
  ir::Plan& p_;
  std::vector<int> value_index_;
  std::map<int, int> data_task_;                       // rank -> data task
  std::map<NodeId, std::vector<int>> variable_tasks_;  // update node -> variable task per device
  std::map<std::tuple<ValueId, int, std::string>, std::pair<int, std::vector<int>>> boxed_;
  int next_collective_ = 0, next_tag_ = 0, next_bucket_ = 0;
  std::vector<Deferred> deferred_;
};

}  // namespace

Result<ir::Plan> Lower(const ir::TrainingGraph& tg, const sbp::Assignment& a, const LowerOptions& opt) {
  ir::Plan p;
  p.steps = opt.steps;
  p.micro_batches = opt.micro_batches;
  RETURN_IF_ERROR(Lowering(tg, a, opt, p).Run());
  return p;
}

Result<ir::Plan> LowerOneDevice(const ir::TrainingGraph& tg, int64_t steps, int64_t micro_batches, DeviceType device) {
  const ir::Graph& g = tg.graph;
  sbp::Assignment a;
  a.value_stage.assign(g.values.size(), 0);
  a.value_sbp.assign(g.values.size(), sbp::NdSbp{sbp::Sbp::B()});
  for (size_t v = 0; v < g.values.size(); ++v)
    if (g.values[v].kind == ir::ValueKind::kConst) a.value_sbp[v] = sbp::NdSbp();
  for (const ir::Node& n : g.nodes) {
    sbp::NdSignature s;
    s.in.assign(n.in.size(), sbp::NdSbp{sbp::Sbp::B()});
    s.out.assign(n.out.size(), sbp::NdSbp{sbp::Sbp::B()});
    a.node_sig.push_back(s);
  }
  LowerOptions o;
  o.steps = steps;
  o.micro_batches = micro_batches;
  o.stages = {sbp::Placement::Range(device, 0, 1)};
  o.node_stage.assign(g.nodes.size(), 0);
  return Lower(tg, a, o);
}

}  // namespace fr::boxing
