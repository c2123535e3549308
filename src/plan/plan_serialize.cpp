#include "plan/plan_serialize.h"

#include <google/protobuf/io/coded_stream.h>
#include <google/protobuf/io/zero_copy_stream_impl_lite.h>

#include "base/hash.h"
#include "ops/op.h"
#include "plan.pb.h"  // generated from plan/plan.proto into the build directory

namespace fr::ir {
namespace {

// The wire enums carry the C++ values (plan.proto); a mismatch is a compile error here.
static_assert(static_cast<int>(DType::kU8) == wire::DTYPE_U8 && kNumDTypes == wire::DType_ARRAYSIZE);
static_assert(static_cast<int>(DeviceType::kSim) == wire::DEVICE_SIM && kNumDeviceTypes == wire::DeviceType_ARRAYSIZE);
static_assert(static_cast<int>(sbp::Kind::kPartial) == wire::Sbp::PARTIAL && static_cast<int>(sbp::Kind::kBroadcast) == wire::Sbp::BROADCAST);
static_assert(static_cast<int>(sbp::Reduce::kMin) == wire::REDUCE_MIN && static_cast<int>(sbp::Reduce::kMax) == wire::REDUCE_MAX);
static_assert(static_cast<int>(Phase::kOptimizer) == wire::PHASE_OPTIMIZER && static_cast<int>(Phase::kBackward) == wire::PHASE_BACKWARD);
static_assert(static_cast<int>(TaskKind::kNormSink) == wire::Task::NORM_SINK && static_cast<int>(TaskKind::kBoxing) == wire::Task::BOXING &&
              static_cast<int>(TaskKind::kStatSink) == wire::Task::STAT_SINK && static_cast<int>(TaskKind::kCopy) == wire::Task::COPY);
static_assert(static_cast<int>(boxing::Op::kAllToAll) == wire::Move::ALL_TO_ALL &&
              static_cast<int>(boxing::Op::kRecv) == wire::Move::RECV && static_cast<int>(boxing::Op::kZero) == wire::Move::ZERO);

template <typename Out, typename In> Out E(In v) { return static_cast<Out>(static_cast<int>(v)); }

template <typename Field, typename Seq> void Append(Field* f, const Seq& s) {
  for (const auto& x : s) f->Add(x);
}

void Put(const Device& d, wire::Device* w) {
  w->set_type(E<wire::DeviceType>(d.type));
  w->set_index(d.index);
}

void Put(const TensorType& t, wire::TensorType* w) {
  w->set_dtype(E<wire::DType>(t.dtype));
  Append(w->mutable_dims(), t.shape.dims());
}

void Put(const sbp::NdSbp& nd, wire::NdSbp* w) {
  for (const sbp::Sbp& s : nd.axes()) {
    wire::Sbp* ws = w->add_axes();
    ws->set_kind(E<wire::Sbp::Kind>(s.kind()));
    ws->set_axis(s.axis());
    ws->set_reduce(E<wire::Reduce>(s.reduce()));
  }
}

void Put(const sbp::Placement& p, wire::Placement* w) {
  w->set_type(E<wire::DeviceType>(p.type()));
  Append(w->mutable_ranks(), p.ranks());
  Append(w->mutable_hierarchy(), p.hierarchy().dims());
}

void Put(const AttrValue& v, wire::Attr* w) {
  if (auto* i = std::get_if<int64_t>(&v)) w->set_i(*i);
  else if (auto* f = std::get_if<double>(&v)) w->set_f(*f);
  else if (auto* is = std::get_if<std::vector<int64_t>>(&v)) Append(w->mutable_ints()->mutable_v(), *is);
  else if (auto* fs = std::get_if<std::vector<double>>(&v)) Append(w->mutable_floats()->mutable_v(), *fs);
  else w->set_s(std::get<std::string>(v));
}

void Put(const Node& n, wire::Node* w) {
  w->set_name(n.name);
  w->set_op(Def(n.op).name);
  Append(w->mutable_in(), n.in);
  Append(w->mutable_out(), n.out);
  for (const auto& [name, v] : n.attrs.all()) {  // std::map: in name order
    wire::Attr* a = w->add_attrs();
    a->set_name(name);
    Put(v, a);
  }
  w->set_phase(E<wire::Phase>(n.phase));
  w->set_origin(n.origin);
}

void Put(const Tensor& t, wire::Tensor* w) {
  w->set_dtype(E<wire::DType>(t.dtype()));
  Append(w->mutable_dims(), t.shape().dims());
  if (t.defined()) w->set_data(static_cast<const char*>(t.raw()), t.bytes());
}

// The group goes with a collective's first task only: its other tasks share it (boxing::Members),
// and writing it N times made the plan hash of N ranks quadratic.
void Put(const boxing::Task& m, bool with_group, wire::Move* w) {
  w->set_op(E<wire::Move::Op>(m.op));
  w->set_rank(m.rank);
  Append(w->mutable_in(), m.in);
  w->set_out(m.out);
  for (const auto& region : m.regions) {
    wire::Region* r = w->add_regions();
    for (const sbp::Range& a : region) {
      wire::Range* wr = r->add_axes();
      wr->set_begin(a.begin);
      wr->set_end(a.end);
    }
  }
  w->set_reduce(E<wire::Reduce>(m.reduce));
  w->set_peer(m.peer);
  w->set_tag(m.tag);
  if (with_group) Append(w->mutable_group(), m.group);
  w->set_concat_axis(m.concat_axis);
  w->set_split_axis(m.split_axis);
  w->set_collective(m.collective);
}

void Put(const TaskDesc& t, bool with_group, wire::Task* w) {
  w->set_id(t.id);
  w->set_rank(t.rank);
  w->set_stream(t.stream);
  Put(t.device, w->mutable_device());
  w->set_kind(E<wire::Task::Kind>(t.kind));
  w->set_name(t.name);
  w->set_node(t.node);
  w->set_logical(t.logical);
  w->set_param(t.param);
  w->set_param_piece(t.param_piece);
  w->set_update_group(t.update_group);
  for (const TaskInput& in : t.in) {
    wire::TaskInput* wi = w->add_in();
    wi->set_regst(in.regst);
    wi->set_konst(in.konst);
  }
  Append(w->mutable_out(), t.out);
  w->set_per_step(t.per_step);
  if (t.kind == TaskKind::kBoxing) Put(t.move, with_group, w->mutable_move());
}

void Put(const RegstDesc& r, wire::Regst* w) {
  w->set_id(r.id);
  w->set_value(r.value);
  Put(r.type, w->mutable_type());
  w->set_rank(r.rank);
  w->set_producer(r.producer);
  Append(w->mutable_consumers(), r.consumers);
  w->set_regst_num(r.regst_num);
  w->set_per_step(r.per_step);
  Put(r.device, w->mutable_device());
}

void Put(const ValuePlacement& v, wire::ValuePlacement* w) {
  w->set_value(v.value);
  w->set_stage(v.stage);
  Put(v.sbp, w->mutable_sbp());
  Append(w->mutable_regsts(), v.regsts);
}

void Put(const BoxingEdge& e, wire::BoxingEdge* w) {
  w->set_value(e.value);
  w->set_src_stage(e.src_stage);
  w->set_dst_stage(e.dst_stage);
  Put(e.src, w->mutable_src());
  Put(e.dst, w->mutable_dst());
  w->set_strategy(e.strategy);
  w->set_bytes_per_rank(e.bytes_per_rank);
  w->set_per_step(e.per_step);
  for (const std::string& c : e.consumers) w->add_consumers(c);
  w->set_bucket(e.bucket);
}

// Each element of `in` into a new element of the repeated message field `out`.
template <typename Seq, typename Field> void PutAll(const Seq& in, Field* out) {
  for (const auto& x : in) Put(x, out->Add());
}

// `const_data`: with the parameter pieces' bytes (else their types only).
wire::Plan ToWire(const Plan& p, bool const_data) {
  wire::Plan w;
  w.set_ranks(p.ranks);
  w.set_steps(p.steps);
  w.set_micro_batches(p.micro_batches);
  for (StreamKind s : p.streams) w.add_streams(Name(s));
  PutAll(p.stages, w.mutable_stages());
  w.set_pipeline_stages(p.pipeline_stages);
  PutAll(p.nodes, w.mutable_nodes());
  if (const_data) {
    PutAll(p.consts, w.mutable_consts());
  } else {
    for (const Tensor& t : p.consts) {
      wire::Tensor* c = w.add_consts();
      c->set_dtype(E<wire::DType>(t.dtype()));
      Append(c->mutable_dims(), t.shape().dims());
    }
  }
  std::vector<bool> grouped;  // collectives whose group is written
  for (const TaskDesc& t : p.tasks) {
    const int c = t.kind == TaskKind::kBoxing ? t.move.collective : -1;
    if (c >= 0 && grouped.size() <= static_cast<size_t>(c)) grouped.resize(static_cast<size_t>(c) + 1, false);
    Put(t, c >= 0 && !grouped[static_cast<size_t>(c)], w.mutable_tasks()->Add());
    if (c >= 0) grouped[static_cast<size_t>(c)] = true;
  }
  PutAll(p.regsts, w.mutable_regsts());
  PutAll(p.values, w.mutable_values());
  for (const std::string& s : p.node_sig) w.add_node_sig(s);
  Append(w.mutable_node_stage(), p.node_stage);
  PutAll(p.edges, w.mutable_edges());
  w.set_predicted_step_s(p.predicted.step_s);
  w.set_predicted_compute_s(p.predicted.compute_s);
  w.set_predicted_comm_s(p.predicted.comm_s);
  w.set_predicted_bubble_s(p.predicted.bubble_s);
  return w;
}

}  // namespace

std::string Serialize(const wire::Plan& w) {
  std::string out;
  {
    google::protobuf::io::StringOutputStream raw(&out);
    google::protobuf::io::CodedOutputStream coded(&raw);
    coded.SetSerializationDeterministic(true);
    FR_CHECK(w.SerializeToCodedStream(&coded) && !coded.HadError(), "plan serialization failed (a plan over 2 GiB?)");
  }  // the streams flush into `out` when they close
  return out;
}

std::string SerializePlan(const Plan& p) { return Serialize(ToWire(p, true)); }

uint64_t PlanHash(const Plan& p) {
  uint64_t h = Fnv1a64(Serialize(ToWire(p, false)));
  for (const Tensor& t : p.consts) h = Fnv1a64Words(t.raw(), t.bytes(), h);
  return h;
}

}  // namespace fr::ir
