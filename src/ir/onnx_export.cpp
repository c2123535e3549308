#include "ir/onnx_export.h"

#include <unistd.h>

#include <cstring>
#include <filesystem>
#include <fstream>
#include <set>

#include "ir/onnx_proto.h"

namespace fr::ir {
namespace {

std::string Dims(const onnx::TensorProto& t) {
  std::string s = "[";
  for (int i = 0; i < t.dims_size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims(i));
  return s + "]";
}

// Checks every weight against the file; fills `untied` with the Identity nodes whose outputs are
// weights (index into the graph's nodes).
Status Check(const OnnxModel& model, const std::map<std::string, TensorType>& weights, std::set<int>* untied) {
  const onnx::GraphProto& g = model.proto.graph();
  const std::string where = "[onnx] " + model.path + ": ";
  std::map<std::string, const onnx::TensorProto*> inits;
  for (const onnx::TensorProto& t : g.initializer()) inits[t.name()] = &t;
  std::map<std::string, int> identity_of;  // Identity output -> node index
  for (int i = 0; i < g.node_size(); ++i)
    if (g.node(i).op_type() == "Identity" && g.node(i).output_size() == 1) identity_of[g.node(i).output(0)] = i;
  for (const auto& [name, type] : weights) {
    if (type.dtype != DType::kF32) return Status::Invalid(where + "cannot save '" + name + "': only float32 parameters are saved");
    auto it = inits.find(name);
    if (it != inits.end()) {
      const onnx::TensorProto& t = *it->second;
      if (t.data_type() != onnx::TensorProto::FLOAT || Shape(std::vector<int64_t>(t.dims().begin(), t.dims().end())) != type.shape)
        return Status::Invalid(where + "cannot save '" + name + "' " + type.shape.ToString() + " over its initializer " + Dims(t));
      continue;
    }
    auto id = identity_of.find(name);
    if (id == identity_of.end())
      return Status::Invalid(where + "cannot save '" + name + "': the file has no initializer or Identity output of that name");
    untied->insert(id->second);
  }
  return Status::Ok();
}

}  // namespace

Status CheckOnnxWeights(const OnnxModel& model, const std::map<std::string, TensorType>& weights) {
  std::set<int> untied;
  return Check(model, weights, &untied);
}

Status WriteOnnx(const OnnxModel& model, const std::map<std::string, Tensor>& weights, const std::string& path) {
  std::map<std::string, TensorType> types;
  for (const auto& [name, t] : weights) types[name] = {t.dtype(), t.shape()};
  std::set<int> untied;
  RETURN_IF_ERROR(Check(model, types, &untied));
  onnx::ModelProto out = model.proto;
  onnx::GraphProto* g = out.mutable_graph();
  auto fill = [](onnx::TensorProto* t, const Tensor& w) {
    t->clear_float_data();
    t->set_raw_data(std::string(static_cast<const char*>(w.raw()), w.bytes()));  // little-endian float32, as ONNX stores it
  };
  std::set<std::string> done;
  for (onnx::TensorProto& t : *g->mutable_initializer()) {
    auto it = weights.find(t.name());
    if (it == weights.end()) continue;
    fill(&t, it->second);
    done.insert(t.name());
  }
  for (const auto& [name, w] : weights) {  // the untied: an initializer each, in place of its Identity
    if (done.count(name)) continue;
    onnx::TensorProto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (int64_t d : w.shape().dims()) t->add_dims(d);
    fill(t, w);
  }
  google::protobuf::RepeatedPtrField<onnx::NodeProto> kept;
  for (int i = 0; i < g->node_size(); ++i)
    if (!untied.count(i)) *kept.Add() = g->node(i);
  g->mutable_node()->Swap(&kept);

  std::error_code ec;
  const std::filesystem::path p(path);
  if (p.has_parent_path()) std::filesystem::create_directories(p.parent_path(), ec);
  // Written aside and renamed: a reader never sees half a file, and two runs saving to one path
  // (a test suite) do not write into each other's.
  const std::string tmp = path + ".partial." + std::to_string(::getpid());
  {
    std::ofstream f(tmp, std::ios::binary | std::ios::trunc);
    if (!f || !out.SerializeToOstream(&f) || !f.flush())
      return Status::Runtime("[onnx] cannot write '" + path + "': " + std::strerror(errno));
  }
  std::filesystem::rename(tmp, path, ec);
  if (ec) return Status::Runtime("[onnx] cannot write '" + path + "': " + ec.message());
  return Status::Ok();
}

}  // namespace fr::ir
