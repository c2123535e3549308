#include "boxing/simulate.h"

#include <algorithm>
#include <map>
#include <tuple>

#include "boxing/builder.h"

namespace fr::boxing {

namespace {

// Copies src[from] into dst[to]; the regions must have equal extents and lie inside the tensors.
Status CopyRegion(const Tensor& src, const Region& from, const Tensor& dst, const Region& to) {
  const int n = src.shape().rank();
  if (dst.dtype() != src.dtype() || static_cast<int>(from.size()) != n || static_cast<int>(to.size()) != n ||
      dst.shape().rank() != n)
    return Status::Runtime("region rank or dtype mismatch");
  for (int i = 0; i < n; ++i) {
    const sbp::Range &f = from[static_cast<size_t>(i)], &t = to[static_cast<size_t>(i)];
    if (f.size() != t.size() || f.begin < 0 || f.end > src.shape()[i] || t.begin < 0 || t.end > dst.shape()[i] || f.size() < 0)
      return Status::Runtime("region " + std::to_string(i) + " does not fit: " + src.shape().ToString() + " -> " +
                             dst.shape().ToString());
  }
  const size_t es = SizeOf(src.dtype());
  if (n == 0) {
    std::memcpy(dst.raw(), src.raw(), es);
    return Status::Ok();
  }
  for (const sbp::Range& f : from)
    if (f.size() == 0) return Status::Ok();
  const std::vector<int64_t> ss = Strides(src.shape()), ds = Strides(dst.shape());
  const size_t row = static_cast<size_t>(from.back().size()) * es;
  std::vector<int64_t> idx(static_cast<size_t>(n), 0);  // odometer over all axes but the last
  auto* s = static_cast<const char*>(src.raw());
  auto* d = static_cast<char*>(dst.raw());
  while (true) {
    int64_t so = 0, doff = 0;
    for (size_t i = 0; i < static_cast<size_t>(n); ++i) {
      so += (from[i].begin + idx[i]) * ss[i];
      doff += (to[i].begin + idx[i]) * ds[i];
    }
    std::memcpy(d + static_cast<size_t>(doff) * es, s + static_cast<size_t>(so) * es, row);
    int i = n - 2;
    for (; i >= 0; --i) {
      size_t ui = static_cast<size_t>(i);
      if (++idx[ui] < from[ui].size()) break;
      idx[ui] = 0;
    }
    if (i < 0) return Status::Ok();
  }
}

template <typename T>
void ReduceTyped(T* acc, const T* x, int64_t n, sbp::Reduce op) {
  for (int64_t i = 0; i < n; ++i) {
    switch (op) {
      case sbp::Reduce::kSum: acc[i] += x[i]; break;
      case sbp::Reduce::kMax: acc[i] = std::max(acc[i], x[i]); break;
      case sbp::Reduce::kMin: acc[i] = std::min(acc[i], x[i]); break;
    }
  }
}

Status Reduce(const Tensor& acc, const Tensor& x, sbp::Reduce op) {
  if (acc.dtype() != x.dtype() || !(acc.shape() == x.shape()))
    return Status::Runtime("reduce of " + x.shape().ToString() + " into " + acc.shape().ToString());
  switch (acc.dtype()) {
    case DType::kF32: ReduceTyped(acc.data<float>(), x.data<float>(), acc.numel(), op); break;
    case DType::kI64: ReduceTyped(acc.data<int64_t>(), x.data<int64_t>(), acc.numel(), op); break;
    case DType::kI32: ReduceTyped(acc.data<int32_t>(), x.data<int32_t>(), acc.numel(), op); break;
    default: return Status::Runtime(std::string("no reduction for ") + std::string(Name(acc.dtype())));
  }
  return Status::Ok();
}

class Sim {
 public:
  explicit Sim(const Plan& p) : p_(p), val_(p.buffers.size()) {}
  Result<std::vector<Tensor>> Run(const std::vector<Tensor>& src);

 private:
  Status Contract() const;
  Status Exec(const Task& t);
  Status ExecCollective(const std::vector<const Task*>& members);
  Status Put(int buf, Tensor t);
  const Tensor& In(const Task& t, size_t i) const { return val_[static_cast<size_t>(t.in[i])]; }

  const Plan& p_;
  std::vector<Tensor> val_;
  std::map<std::tuple<int, int, int>, Tensor> mail_;  // (from, to, tag)
};

Status Sim::Contract() const {
  std::map<int, int> last_collective;  // per rank
  std::map<int, std::vector<const Task*>> collectives;
  for (const Task& t : p_.tasks) {
    for (int b : t.in)
      if (b < 0 || b >= static_cast<int>(p_.buffers.size()) || p_.buffers[static_cast<size_t>(b)].rank != t.rank)
        return Status::Runtime(std::string(Name(t.op)) + " on rank " + std::to_string(t.rank) + " reads buffer " + std::to_string(b) + " of another rank");
    bool has_out = t.op != Op::kSend;
    if (has_out != (t.out >= 0) || (has_out && (t.out >= static_cast<int>(p_.buffers.size()) || p_.buffers[static_cast<size_t>(t.out)].rank != t.rank)))
      return Status::Runtime(std::string(Name(t.op)) + " on rank " + std::to_string(t.rank) + " has a bad output buffer");
    if (t.collective < 0) continue;
    int& last = last_collective.try_emplace(t.rank, -1).first->second;
    if (t.collective <= last) return Status::Runtime("rank " + std::to_string(t.rank) + " meets collective " + std::to_string(t.collective) + " after " + std::to_string(last));
    last = t.collective;
    collectives[t.collective].push_back(&t);
  }
  for (const auto& [id, ts] : collectives) {
    const Task& a = *ts[0];
    std::vector<int> ranks;
    for (const Task* t : ts) {
      if (t->op != a.op || t->group != a.group || t->reduce != a.reduce || t->concat_axis != a.concat_axis || t->split_axis != a.split_axis)
        return Status::Runtime("collective " + std::to_string(id) + ": members disagree");
      ranks.push_back(t->rank);
    }
    if (ranks != a.group) return Status::Runtime("collective " + std::to_string(id) + ": tasks are not one per member in group order");
  }
  return Status::Ok();
}

Status Sim::Put(int buf, Tensor t) {
  const Buffer& b = p_.buffers[static_cast<size_t>(buf)];
  if (val_[static_cast<size_t>(buf)].defined()) return Status::Runtime("buffer " + std::to_string(buf) + " written twice");
  if (!(t.shape() == b.shape)) return Status::Runtime("buffer " + std::to_string(buf) + " gets " + t.shape().ToString() + ", planned " + b.shape.ToString());
  val_[static_cast<size_t>(buf)] = std::move(t);
  return Status::Ok();
}

Status Sim::Exec(const Task& t) {
  for (size_t i = 0; i < t.in.size(); ++i)
    if (!In(t, i).defined()) return Status::Runtime("buffer " + std::to_string(t.in[i]) + " read before written");
  const Shape& out_shape = t.out >= 0 ? p_.buffers[static_cast<size_t>(t.out)].shape : Shape{};
  switch (t.op) {
    case Op::kCopy: return Put(t.out, In(t, 0).Clone());
    case Op::kSlice: {
      if (t.regions.size() != 1) return Status::Runtime("slice needs one region");
      Tensor out(p_.dtype, ShapeOf(t.regions[0]));
      RETURN_IF_ERROR(CopyRegion(In(t, 0), t.regions[0], out, Whole(out.shape())));
      return Put(t.out, out);
    }
    case Op::kAssemble: {
      if (t.regions.size() != t.in.size()) return Status::Runtime("assemble needs a region per input");
      Tensor out(p_.dtype, out_shape);
      for (size_t i = 0; i < t.in.size(); ++i) RETURN_IF_ERROR(CopyRegion(In(t, i), Whole(In(t, i).shape()), out, t.regions[i]));
      return Put(t.out, out);
    }
    case Op::kZero: return Put(t.out, Tensor(p_.dtype, out_shape));
    case Op::kReduce: {
      Tensor acc = In(t, 0).Clone();
      for (size_t i = 1; i < t.in.size(); ++i) RETURN_IF_ERROR(Reduce(acc, In(t, i), t.reduce));
      return Put(t.out, acc);
    }
    case Op::kSend:
      if (!mail_.emplace(std::tuple{t.rank, t.peer, t.tag}, In(t, 0)).second) return Status::Runtime("tag " + std::to_string(t.tag) + " sent twice");
      return Status::Ok();
    case Op::kRecv: {
      auto it = mail_.find({t.peer, t.rank, t.tag});
      Tensor got = it->second.Clone();
      mail_.erase(it);
      return Put(t.out, got);
    }
    default: return Status::Runtime("a collective outside its group");
  }
}

Status Sim::ExecCollective(const std::vector<const Task*>& m) {
  const Task& a = *m[0];
  const int p = static_cast<int>(m.size());
  std::vector<Tensor> in;
  for (const Task* t : m) {
    if (t->in.size() != 1 || !In(*t, 0).defined()) return Status::Runtime("collective input missing");
    in.push_back(In(*t, 0));
  }
  auto out_shape = [&](int k) { return p_.buffers[static_cast<size_t>(m[static_cast<size_t>(k)]->out)].shape; };
  Tensor acc;
  if (a.op == Op::kAllReduce || a.op == Op::kReduceScatter) {
    acc = in[0].Clone();
    for (int k = 1; k < p; ++k) RETURN_IF_ERROR(Reduce(acc, in[static_cast<size_t>(k)], a.reduce));
  }
  for (int k = 0; k < p; ++k) {
    Tensor out(p_.dtype, out_shape(k));
    switch (a.op) {
      case Op::kAllReduce: RETURN_IF_ERROR(CopyRegion(acc, Whole(acc.shape()), out, Whole(out.shape()))); break;
      case Op::kReduceScatter: RETURN_IF_ERROR(CopyRegion(acc, PartOf(acc.shape(), a.split_axis, p, k), out, Whole(out.shape()))); break;
      case Op::kAllGather:
        for (int j = 0; j < p; ++j) {
          const Tensor& x = in[static_cast<size_t>(j)];
          RETURN_IF_ERROR(CopyRegion(x, Whole(x.shape()), out, PartOf(out.shape(), a.concat_axis, p, j)));
        }
        break;
      case Op::kAllToAll:
        for (int j = 0; j < p; ++j) {
          const Tensor& x = in[static_cast<size_t>(j)];
          RETURN_IF_ERROR(CopyRegion(x, PartOf(x.shape(), a.split_axis, p, k), out, PartOf(out.shape(), a.concat_axis, p, j)));
        }
        break;
      default: return Status::Runtime(std::string(Name(a.op)) + " is not a collective");
    }
    RETURN_IF_ERROR(Put(m[static_cast<size_t>(k)]->out, out));
  }
  return Status::Ok();
}

Result<std::vector<Tensor>> Sim::Run(const std::vector<Tensor>& src) {
  RETURN_IF_ERROR(Contract());
  if (src.size() != p_.src.size()) return Status::Runtime("expected " + std::to_string(p_.src.size()) + " src pieces");
  for (size_t i = 0; i < src.size(); ++i) {
    if (src[i].dtype() != p_.dtype) return Status::Runtime("src piece " + std::to_string(i) + " has the wrong dtype");
    RETURN_IF_ERROR(Put(p_.src[i], src[i]));
  }
  std::map<int, std::vector<const Task*>> program;  // per rank, in plan order
  std::map<int, std::vector<const Task*>> members;  // per collective
  for (const Task& t : p_.tasks) {
    program[t.rank].push_back(&t);
    if (t.collective >= 0) members[t.collective].push_back(&t);
  }
  std::map<int, size_t> pc;
  for (bool progress = true; progress;) {
    progress = false;
    for (auto& [rank, tasks] : program) {
      for (size_t& i = pc[rank]; i < tasks.size(); ++i) {
        const Task& t = *tasks[i];
        if (t.op == Op::kRecv && !mail_.count({t.peer, t.rank, t.tag})) break;
        if (t.collective >= 0) {
          const std::vector<const Task*>& m = members[t.collective];
          bool all_there = std::all_of(m.begin(), m.end(), [&](const Task* x) {
            size_t at = pc[x->rank];
            return at < program[x->rank].size() && program[x->rank][at] == x;
          });
          if (!all_there) break;
          Status s = ExecCollective(m);
          if (!s.ok()) return s.With("[boxing] simulate: collective " + std::to_string(t.collective) + ": ");
          for (const Task* x : m)
            if (x->rank != rank) ++pc[x->rank];
        } else {
          Status s = Exec(t);
          if (!s.ok()) return s.With("[boxing] simulate: " + std::string(Name(t.op)) + " on rank " + std::to_string(rank) + ": ");
        }
        progress = true;
      }
    }
  }
  for (auto& [rank, tasks] : program) {
    if (pc[rank] < tasks.size())
      return Status::Runtime("[boxing] simulate: deadlock: rank " + std::to_string(rank) + " waits at its " + Name(tasks[pc[rank]]->op));
  }
  if (!mail_.empty()) return Status::Runtime("[boxing] simulate: a message was never received");
  std::vector<Tensor> dst;
  for (int b : p_.dst) {
    if (!val_[static_cast<size_t>(b)].defined()) return Status::Runtime("[boxing] simulate: dst buffer " + std::to_string(b) + " never written");
    dst.push_back(val_[static_cast<size_t>(b)]);
  }
  return dst;
}

}  // namespace

Result<std::vector<Tensor>> Simulate(const Plan& plan, const std::vector<Tensor>& src) {
  return Sim(plan).Run(src);
}

Tensor SliceOf(const Tensor& t, const std::vector<sbp::Range>& region) {
  Tensor out(t.dtype(), ShapeOf(region));
  Status s = CopyRegion(t, region, out, Whole(out.shape()));
  FR_CHECK(s.ok(), s.message());
  return out;
}

void WriteRegion(const Tensor& dst, const std::vector<sbp::Range>& at, const Tensor& src) {
  Status s = CopyRegion(src, Whole(src.shape()), dst, at);
  FR_CHECK(s.ok(), s.message());
}

void ReduceInto(const Tensor& acc, const Tensor& x, sbp::Reduce op) {
  Status s = Reduce(acc, x, op);
  FR_CHECK(s.ok(), s.message());
}

}  // namespace fr::boxing
