#include "ir/onnx_export.h"

#include <google/protobuf/io/zero_copy_stream_impl.h>

#include <algorithm>
#include <cerrno>
#include <filesystem>
#include <utility>
#include <set>
#include <vector>

#include "base/file.h"
#include "ir/onnx_proto.h"

namespace fr::ir {
namespace {

// Past this many bytes of initializers the .onnx would near protobuf's 2 GiB limit: the weights go
// to external data.
constexpr int64_t kInlineBytes = int64_t{1} << 30;

std::string Dims(const onnx::TensorProto& t) {
  std::string s = "[";
  for (int i = 0; i < t.dims_size(); ++i) s += (i ? ", " : "") + std::to_string(t.dims(i));
  return s + "]";
}

// A node's own copy of an initializer it shared (onnx_import.h: "INIT@NODE"): the node, by index,
// reads `copy` in place of `init`.
struct PrivateCopy {
  int node = -1;
  std::string init, copy;
};

// Checks every weight against the file; fills `untied` with the Identity nodes whose outputs are
// weights (index into the graph's nodes), and `copies` with the private copies.
Status Check(const OnnxModel& model, const std::map<std::string, TensorType>& weights, std::set<int>* untied,
             std::vector<PrivateCopy>* copies) {
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
    if (id != identity_of.end()) {
      untied->insert(id->second);
      continue;
    }
    const size_t at = name.rfind('@');
    const std::string init = at == std::string::npos ? "" : name.substr(0, at), reader = at == std::string::npos ? "" : name.substr(at + 1);
    int node = -1;
    for (int i = 0; i < g.node_size() && node < 0 && inits.count(init); ++i) {
      const onnx::NodeProto& n = g.node(i);
      if ((n.name().empty() ? (n.output_size() ? n.output(0) : "") : n.name()) != reader) continue;
      if (std::find(n.input().begin(), n.input().end(), init) != n.input().end()) node = i;
    }
    if (node < 0) {
      return Status::Invalid(where + "cannot save '" + name +
                             "': the file has no initializer or Identity output of that name, nor a node of that name reading such an initializer");
    }
    const onnx::TensorProto& t = *inits[init];
    if (Shape(std::vector<int64_t>(t.dims().begin(), t.dims().end())) != type.shape)
      return Status::Invalid(where + "cannot save '" + name + "' " + type.shape.ToString() + " as a copy of " + init + " " + Dims(t));
    copies->push_back({node, init, name});
  }
  return Status::Ok();
}

// Initializers of at least this many bytes go to the external data file, as PyTorch's export puts
// them; smaller ones stay in the .onnx.
constexpr size_t kExternalMinBytes = 1024;

// Moves the initializers' raw data of at least kExternalMinBytes into PATH.data beside the model
// (ONNX external data: location, offset, length), written whole or not at all before the .onnx
// that points to it.
Status WriteExternalData(const std::string& path, onnx::GraphProto* g) {
  const std::filesystem::path p(path);
  const std::string name = p.filename().string() + ".data";
  auto file = AtomicFile::Create((p.parent_path() / name).string());
  if (!file.ok()) return file.status().With("[onnx] ");
  int64_t offset = 0;
  for (onnx::TensorProto& t : *g->mutable_initializer()) {
    if (t.raw_data().size() < kExternalMinBytes) continue;
    const auto length = static_cast<int64_t>(t.raw_data().size());
    RETURN_IF_ERROR(file->Append(t.raw_data()).With("[onnx] "));
    t.clear_raw_data();
    t.set_data_location(onnx::TensorProto::EXTERNAL);
    for (const auto& [key, value] : {std::pair<const char*, std::string>{"location", name},
                                     {"offset", std::to_string(offset)},
                                     {"length", std::to_string(length)}}) {
      auto* kv = t.add_external_data();
      kv->set_key(key);
      kv->set_value(value);
    }
    offset += length;
  }
  return file->Commit().With("[onnx] ");
}

}  // namespace

Status CheckOnnxWeights(const OnnxModel& model, const std::map<std::string, TensorType>& weights) {
  std::set<int> untied;
  std::vector<PrivateCopy> copies;
  return Check(model, weights, &untied, &copies);
}

Status WriteOnnx(const OnnxModel& model, const std::map<std::string, Tensor>& weights, const std::string& path) {
  std::map<std::string, TensorType> types;
  for (const auto& [name, t] : weights) types[name] = {t.dtype(), t.shape()};
  std::set<int> untied;
  std::vector<PrivateCopy> copies;
  RETURN_IF_ERROR(Check(model, types, &untied, &copies));
  onnx::ModelProto out = model.proto;
  onnx::GraphProto* g = out.mutable_graph();
  for (const PrivateCopy& c : copies)
    for (std::string& in : *g->mutable_node(c.node)->mutable_input())
      if (in == c.init) in = c.copy;
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
  for (const auto& [name, w] : weights) {  // the untied and the private copies: an initializer each
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

  int64_t raw_bytes = 0;
  for (const onnx::TensorProto& t : g->initializer()) raw_bytes += static_cast<int64_t>(t.raw_data().size());
  if (model.external_data || raw_bytes > kInlineBytes) RETURN_IF_ERROR(WriteExternalData(path, g));

  // Streamed into the file rather than serialized to memory first: a model can be most of memory.
  auto file = AtomicFile::Create(path);
  if (!file.ok()) return file.status().With("[onnx] ");
  google::protobuf::io::FileOutputStream stream(file->fd());
  if (!out.SerializeToZeroCopyStream(&stream) || !stream.Flush())
    return file->Failed(stream.GetErrno() ? stream.GetErrno() : EIO).With("[onnx] ");
  return file->Commit().With("[onnx] ");
}

}  // namespace fr::ir
