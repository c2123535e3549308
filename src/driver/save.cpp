#include "driver/save.h"

#include <algorithm>
#include <chrono>
#include <set>
#include <thread>
#include <vector>

#include "boxing/builder.h"
#include "boxing/simulate.h"
#include "ir/onnx_export.h"
#include "sbp/sbp.h"

namespace fr {
namespace {

// One piece of a parameter that rank 0 needs: the first device of its placement holding it.
struct ParamPiece {
  ir::ValueId param = ir::kNoValue;
  int rank = 0;
  std::vector<sbp::Range> region;  // in the parameter's logical coordinates
};

// Every distinct piece of every parameter, in the training graph's parameter order: the same list
// on every rank (the plan is), so senders and rank 0 agree on the order of the messages.
Result<std::vector<ParamPiece>> Pieces(const ir::Plan& plan, const ir::TrainingGraph& t) {
  std::vector<ParamPiece> out;
  for (const ir::ParamGrad& pg : t.params) {
    auto vp = std::find_if(plan.values.begin(), plan.values.end(), [&](const ir::ValuePlacement& p) { return p.value == pg.param; });
    if (vp == plan.values.end()) return Status::Runtime("[save] parameter '" + t.graph.value(pg.param).name + "' is not in the plan");
    const sbp::Placement& pl = plan.stages[static_cast<size_t>(vp->stage)];
    const Shape& shape = t.graph.type(pg.param).shape;
    std::set<std::vector<std::pair<int64_t, int64_t>>> seen;
    for (int d = 0; d < pl.size(); ++d) {
      ParamPiece p{pg.param, pl.ranks()[static_cast<size_t>(d)], sbp::PieceRanges(shape, vp->sbp, pl, d)};
      std::vector<std::pair<int64_t, int64_t>> key;
      for (const sbp::Range& r : p.region) key.emplace_back(r.begin, r.end);
      if (seen.insert(key).second) out.push_back(std::move(p));
    }
  }
  return out;
}

// Runs one send or receive to completion, or gives up after `timeout` seconds (a rank that died
// or went another way), so that no rank waits for ever.
Status Move(actor::Communicator& comm, const boxing::Task& task, const Tensor& x, double timeout) {
  ASSIGN_OR_RETURN(actor::CommHandle h, task.op == boxing::Op::kSend ? comm.Start(task, {x}, {}) : comm.Start(task, {}, {x}));
  const auto start = std::chrono::steady_clock::now();
  for (;;) {
    ASSIGN_OR_RETURN(std::vector<actor::CommHandle> done, comm.Poll());
    for (const actor::CommHandle& c : done)
      if (c.id == h.id) return Status::Ok();
    if (std::chrono::duration<double>(std::chrono::steady_clock::now() - start).count() > timeout) {
      return Status::Runtime("[save] rank " + std::to_string(task.rank) + ": " +
                             (task.op == boxing::Op::kSend ? "sending rank 0" : "receiving from rank " + std::to_string(task.peer)) +
                             " a piece of the trained parameters made no progress for " + std::to_string(static_cast<int>(timeout)) +
                             " s (parallel.timeout)");
    }
    std::this_thread::sleep_for(std::chrono::microseconds(50));
  }
}

// "NAME[i]" -> NAME and i for a part a rewrite cut; false for any other name.
bool PartOf(const ir::Value& v, std::string* whole, int* index) {
  if (v.split_from.empty()) return false;
  const std::string& n = v.name;
  const size_t open = n.rfind('[');
  if (open == std::string::npos || n.back() != ']') return false;
  *whole = v.split_from;
  *index = std::stoi(n.substr(open + 1, n.size() - open - 2));
  return true;
}

}  // namespace

std::map<std::string, ir::TensorType> SavedTypes(const ir::TrainingGraph& t) {
  std::map<std::string, ir::TensorType> out;
  for (const ir::ParamGrad& pg : t.params) {
    const ir::Value& v = t.graph.value(pg.param);
    std::string whole;
    int index = 0;
    if (!PartOf(v, &whole, &index)) {
      out[v.name] = v.type;
      continue;
    }
    auto [it, fresh] = out.emplace(whole, v.type);
    if (!fresh) {  // parts join along their last axis
      Shape s = it->second.shape;
      s[s.rank() - 1] += v.type.shape[v.type.shape.rank() - 1];
      it->second.shape = s;
    }
  }
  for (const ir::Graph::Running& r : t.graph.running) out[r.initializer] = {DType::kF32, r.initial.shape()};
  for (const ir::Graph::Tie& tie : t.graph.tied) {  // a tied copy is saved as the table's transpose
    auto it = out.find(tie.table);
    if (it != out.end()) out[tie.copy] = {it->second.dtype, Shape{it->second.shape[1], it->second.shape[0]}};
  }
  return out;
}

Status SaveTrained(const ir::Plan& plan, const ir::TrainingGraph& t, const actor::Runtime& rt, actor::Communicator* comm,
                   int rank, double timeout, const ir::OnnxModel& model, const std::map<std::string, Tensor>& running,
                   const std::string& path) {
  ASSIGN_OR_RETURN(std::vector<ParamPiece> pieces, Pieces(plan, t));
  std::map<ir::ValueId, Tensor> params;  // rank 0: each parameter, assembled
  if (rank == 0)
    for (const ir::ParamGrad& pg : t.params) params[pg.param] = Tensor(DType::kF32, t.graph.type(pg.param).shape);
  for (size_t k = 0; k < pieces.size(); ++k) {
    const ParamPiece& p = pieces[k];
    if (p.rank != rank && rank != 0) continue;
    const int tag = static_cast<int>(k % 30000);  // one message at a time per pair, in list order
    if (p.rank == rank) {
      const Tensor mine = rt.Param(p.param).ToHost();
      if (!mine.defined()) return Status::Runtime("[save] rank " + std::to_string(rank) + " holds no piece of '" + t.graph.value(p.param).name + "'");
      if (rank == 0) {
        boxing::WriteRegion(params[p.param], p.region, mine);
      } else {
        if (!comm) return Status::Runtime("[save] no communicator to send rank 0 the trained parameters");
        RETURN_IF_ERROR(Move(*comm, boxing::Task{.op = boxing::Op::kSend, .rank = rank, .peer = 0, .tag = tag}, mine, timeout));
      }
    } else {  // rank 0 receives the piece
      if (!comm) return Status::Runtime("[save] no communicator to receive the trained parameters");
      Tensor piece(DType::kF32, boxing::ShapeOf(p.region));
      RETURN_IF_ERROR(Move(*comm, boxing::Task{.op = boxing::Op::kRecv, .rank = 0, .peer = p.rank, .tag = tag}, piece, timeout));
      boxing::WriteRegion(params[p.param], p.region, piece);
    }
  }
  if (rank != 0) return Status::Ok();
  // Parts cut from one parameter join back along their last axis, in part order.
  std::map<std::string, Tensor> weights;
  std::map<std::string, std::vector<std::pair<int, ir::ValueId>>> parts;
  for (const ir::ParamGrad& pg : t.params) {
    const ir::Value& v = t.graph.value(pg.param);
    std::string whole;
    int index = 0;
    if (PartOf(v, &whole, &index)) {
      parts[whole].emplace_back(index, pg.param);
    } else {
      weights[v.name] = params[pg.param];
    }
  }
  const std::map<std::string, ir::TensorType> types = SavedTypes(t);
  for (auto& [whole, list] : parts) {
    std::sort(list.begin(), list.end());
    Tensor joined(DType::kF32, types.at(whole).shape);
    int64_t at = 0;
    for (const auto& [index, v] : list) {
      const Tensor& part = params[v];
      boxing::Region region = boxing::Whole(part.shape());
      const int64_t width = part.shape()[part.shape().rank() - 1];
      region.back() = {at, at + width};
      boxing::WriteRegion(joined, region, part);
      at += width;
    }
    weights[whole] = joined;
  }
  for (const ir::Graph::Tie& tie : t.graph.tied) {
    auto it = weights.find(tie.table);
    if (it == weights.end()) continue;
    const Tensor& a = it->second;
    const int64_t rows = a.shape()[0], cols = a.shape()[1];
    Tensor b(DType::kF32, Shape{cols, rows});
    for (int64_t i = 0; i < rows; ++i)
      for (int64_t j = 0; j < cols; ++j) b.data<float>()[j * rows + i] = a.data<float>()[i * cols + j];
    weights[tie.copy] = b;
  }
  for (const auto& [name, value] : running) weights[name] = value;
  return ir::WriteOnnx(model, weights, path);
}

}  // namespace fr
