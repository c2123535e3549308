// ONNX import: every bundled model imports with sane ops and shapes, and a table of broken models
// (built here with the onnx protobuf API) each gives its "[onnx]" message. Run from the repository
// root.
#include "ir/onnx_import.h"

#include <gtest/gtest.h>

#include <cmath>
#include <cstring>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <functional>
#include <limits>
#include <map>
#include <set>
#include <string>
#include <utility>
#include <vector>

#include "ir/onnx_export.h"
#include "ir/onnx_proto.h"
#include "ir/onnx_spec.h"
#include "onnx/onnx_pb.h"
#include "ops/op.h"
#include "temp_dir.h"

namespace fr::ir {
namespace {

std::map<std::string, TensorType> BindAll(const std::string& path, int64_t dynamic) {
  auto ins = OnnxInputs(path);
  EXPECT_TRUE(ins.ok()) << ins.status().message();
  std::map<std::string, TensorType> bound;
  if (!ins.ok()) return bound;
  for (const OnnxInput& in : *ins) {
    std::vector<int64_t> dims = in.dims;
    for (int64_t& d : dims)
      if (d < 0) d = dynamic;
    bound[in.name] = {in.dtype, Shape(dims)};
  }
  return bound;
}

std::map<OpKind, int> OpCounts(const Graph& g) {
  std::map<OpKind, int> n;
  for (const Node& node : g.nodes) ++n[node.op];
  return n;
}

// Every node's inputs come from earlier nodes, inputs, parameters or constants, no node is left
// with only constant inputs (those are folded), and every value has a fully known shape.
void ExpectWellFormed(const Graph& g, const std::string& what) {
  std::vector<bool> ready(g.values.size(), false);
  for (size_t v = 0; v < g.values.size(); ++v) {
    ValueKind k = g.values[v].kind;
    ready[v] = k == ValueKind::kInput || k == ValueKind::kParam || k == ValueKind::kConst;
    for (int64_t d : g.values[v].type.shape.dims()) EXPECT_GE(d, 0) << what << ": value " << g.values[v].name;
  }
  for (const Node& n : g.nodes) {
    bool all_const = true;
    for (ValueId v : n.in) all_const &= v == kNoValue || g.value(v).kind == ValueKind::kConst;
    EXPECT_FALSE(all_const) << what << ": node " << n.name << " has only constant inputs and was not folded";
    for (ValueId v : n.in)
      if (v != kNoValue) {
        EXPECT_TRUE(ready[static_cast<size_t>(v)]) << what << ": node " << n.name << " reads an unready value";
      }
    for (ValueId v : n.out) {
      ready[static_cast<size_t>(v)] = true;
      EXPECT_EQ(g.value(v).producer, static_cast<NodeId>(&n - g.nodes.data())) << what << ": producer of " << g.value(v).name;
    }
  }
  for (ValueId v : g.outputs) EXPECT_TRUE(ready[static_cast<size_t>(v)]) << what << ": output never produced";
  for (ValueId v : g.params) {
    EXPECT_EQ(g.value(v).kind, ValueKind::kParam);
    EXPECT_TRUE(g.value(v).data.defined()) << what << ": param " << g.value(v).name << " has no initial value";
  }
}

TEST(Import, EveryBundledModel) {
  int models = 0;
  for (const auto& e : std::filesystem::directory_iterator("models")) {
    if (e.path().extension() != ".onnx") continue;
    const std::string path = e.path().string();
    SCOPED_TRACE(path);
    ++models;
    auto bound = BindAll(path, 4);
    ASSERT_FALSE(bound.empty());
    auto g = ImportOnnx(path, bound);
    ASSERT_TRUE(g.ok()) << g.status().message();
    EXPECT_EQ(g->opset, 17);
    EXPECT_FALSE(g->nodes.empty());
    EXPECT_FALSE(g->params.empty());
    EXPECT_EQ(g->inputs.size(), bound.size());
    ASSERT_EQ(g->outputs.size(), 1u);
    EXPECT_EQ(g->type(g->outputs[0]).shape[0], 4) << "batch follows the bound dynamic dim";
    ExpectWellFormed(*g, path);
  }
  EXPECT_GE(models, 2);
}

TEST(Import, MlpOpsAndShapes) {
  auto ins = OnnxInputs("models/mlp.onnx");
  ASSERT_TRUE(ins.ok()) << ins.status().message();
  ASSERT_EQ(ins->size(), 1u);
  EXPECT_EQ((*ins)[0].name, "x");
  EXPECT_EQ((*ins)[0].dtype, DType::kF32);
  EXPECT_EQ((*ins)[0].dims, (std::vector<int64_t>{-1, 64}));

  auto g = ImportOnnx("models/mlp.onnx", BindAll("models/mlp.onnx", 4));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto n = OpCounts(*g);
  EXPECT_EQ(n[OpKind::kGemm], 3);
  EXPECT_EQ(n[OpKind::kRelu], 2);
  EXPECT_EQ(g->nodes.size(), 5u);
  EXPECT_EQ(g->params.size(), 6u);  // 3 weights, 3 biases
  EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{4, 10}));
  EXPECT_EQ(g->value(g->outputs[0]).name, "logits");
  EXPECT_EQ(g->type(g->inputs[0]).shape, (Shape{4, 64}));
}

// flowrun search imports one model at several batch sizes: every import of one parsed model reads
// the weights in place (no copy per graph), with the values a plain import copies.
TEST(Import, ImportsOfOneModelShareItsWeights) {
  const std::string path = "models/gpt_mini.onnx";
  auto model = ReadOnnx(path);
  ASSERT_TRUE(model.ok()) << model.status().message();
  auto a = ImportOnnx(*model, BindAll(path, 2));
  auto b = ImportOnnx(*model, BindAll(path, 8));
  auto copied = ImportOnnx(path, BindAll(path, 2));
  ASSERT_TRUE(a.ok() && b.ok() && copied.ok());
  ASSERT_EQ(a->params.size(), b->params.size());
  ASSERT_EQ(a->params.size(), copied->params.size());
  ASSERT_FALSE(a->params.empty());
  for (size_t i = 0; i < a->params.size(); ++i) {
    const Tensor& x = a->value(a->params[i]).data;
    const Tensor& y = b->value(b->params[i]).data;
    const Tensor& z = copied->value(copied->params[i]).data;
    ASSERT_EQ(x.bytes(), z.bytes()) << a->value(a->params[i]).name;
    EXPECT_EQ(x.raw(), y.raw()) << a->value(a->params[i]).name << " is a copy per import";
    EXPECT_EQ(std::memcmp(x.raw(), z.raw(), x.bytes()), 0) << a->value(a->params[i]).name;
  }
}

TEST(Import, MlpLnGeluOpsAndFolding) {
  const std::string path = "models/mlp_ln_gelu.onnx";
  auto g = ImportOnnx(path, BindAll(path, 4));
  ASSERT_TRUE(g.ok()) << g.status().message();
  auto n = OpCounts(*g);
  EXPECT_EQ(n[OpKind::kLayerNormalization], 1);
  EXPECT_EQ(n[OpKind::kErf], 1);
  EXPECT_EQ(n[OpKind::kTanh], 1);
  EXPECT_EQ(n[OpKind::kGemm] + n[OpKind::kMatMul], 3);
  for (const Node& node : g->nodes) {
    if (node.op != OpKind::kLayerNormalization) continue;
    EXPECT_EQ(node.out.size(), 3u) << "LayerNormalization gives Y, mean and inv_std_dev";
    EXPECT_EQ(g->type(node.out[0]).shape, (Shape{4, g->type(node.in[0]).shape[1]}));
  }
  // GELU is x * 0.5 * (1 + erf(x / sqrt(2))): its scalars are constants, never parameters or nodes.
  std::vector<float> consts;
  for (const Value& v : g->values) {
    if (v.kind == ValueKind::kConst && v.data.defined() && v.data.dtype() == DType::kF32 && v.data.numel() == 1)
      consts.push_back(v.data.data<float>()[0]);
    if (v.kind == ValueKind::kParam) {
      EXPECT_GE(v.type.shape.rank(), 1) << v.name;
    }
  }
  auto has = [&](float want) {
    for (float c : consts)
      if (std::fabs(c - want) < 1e-5f) return true;
    return false;
  };
  EXPECT_TRUE(has(0.5f));
  EXPECT_TRUE(has(1.0f));
  EXPECT_TRUE(has(std::sqrt(2.0f)) || has(1.0f / std::sqrt(2.0f)));
  EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{4, 8}));
  EXPECT_EQ(g->value(g->outputs[0]).name, "pred");
}

TEST(Import, MissingFile) {
  const std::string path = "models/does_not_exist.onnx";
  auto g = ImportOnnx(path, {});
  ASSERT_FALSE(g.ok());
  EXPECT_EQ(g.status().code(), Code::kInvalidInput);
  EXPECT_EQ(g.status().message().rfind("[onnx] cannot read '" + path + "'", 0), 0u) << g.status().message();
  EXPECT_NE(g.status().message().find("No such file"), std::string::npos) << g.status().message();
  auto ins = OnnxInputs(path);
  ASSERT_FALSE(ins.ok());
  EXPECT_EQ(ins.status().message().rfind("[onnx] cannot read '" + path + "'", 0), 0u) << ins.status().message();
}

// The small valid model every bad case starts from:
//   x [N, 4] -> Gemm(W [3, 4], B [3], transB=1) "gemm" -> h [N, 3] -> Relu "relu" -> y [N, 3]
onnx::ModelProto SmallModel() {
  onnx::ModelProto m;
  m.set_ir_version(8);
  m.set_producer_name("import_test");
  auto* op = m.add_opset_import();
  op->set_domain("");
  op->set_version(17);
  onnx::GraphProto* g = m.mutable_graph();
  g->set_name("small");
  auto* x = g->add_input();
  x->set_name("x");
  auto* xt = x->mutable_type()->mutable_tensor_type();
  xt->set_elem_type(onnx::TensorProto::FLOAT);
  xt->mutable_shape()->add_dim()->set_dim_param("N");
  xt->mutable_shape()->add_dim()->set_dim_value(4);
  auto add_init = [&](const std::string& name, std::vector<int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) {
      t->add_dims(d);
      n *= d;
    }
    std::vector<float> v(static_cast<size_t>(n));
    for (size_t i = 0; i < v.size(); ++i) v[i] = 0.1f * static_cast<float>(i);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  };
  add_init("W", {3, 4});
  add_init("B", {3});
  auto* gemm = g->add_node();
  gemm->set_name("gemm");
  gemm->set_op_type("Gemm");
  gemm->add_input("x");
  gemm->add_input("W");
  gemm->add_input("B");
  gemm->add_output("h");
  auto* tb = gemm->add_attribute();
  tb->set_name("transB");
  tb->set_type(onnx::AttributeProto::INT);
  tb->set_i(1);
  auto* relu = g->add_node();
  relu->set_name("relu");
  relu->set_op_type("Relu");
  relu->add_input("h");
  relu->add_output("y");
  auto* y = g->add_output();
  y->set_name("y");
  y->mutable_type()->mutable_tensor_type()->set_elem_type(onnx::TensorProto::FLOAT);
  return m;
}

std::map<std::string, TensorType> SmallBinding() { return {{"x", {DType::kF32, Shape{2, 4}}}}; }

onnx::NodeProto* NodeNamed(onnx::ModelProto& m, const std::string& name) {
  for (auto& n : *m.mutable_graph()->mutable_node())
    if (n.name() == name) return &n;
  return nullptr;
}

onnx::TensorProto* InitNamed(onnx::ModelProto& m, const std::string& name) {
  for (auto& t : *m.mutable_graph()->mutable_initializer())
    if (t.name() == name) return &t;
  return nullptr;
}

std::string Serialize(const onnx::ModelProto& m) {
  std::string s;
  EXPECT_TRUE(m.SerializeToString(&s));
  return s;
}

TEST(Import, SmallModelIsValid) {
  auto g = ImportOnnxBytes(Serialize(SmallModel()), "small.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->nodes.size(), 2u);
  EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{2, 3}));
}

// ---- Folding: shape arithmetic and masks become constants; the kernels that remain are static. ----

onnx::NodeProto* AddOnnxNode(onnx::GraphProto* g, const std::string& op, const std::string& name,
                             std::vector<std::string> in, std::vector<std::string> out) {
  auto* n = g->add_node();
  n->set_op_type(op);
  n->set_name(name);
  for (const auto& i : in) n->add_input(i);
  for (const auto& o : out) n->add_output(o);
  return n;
}

void IntAttr(onnx::NodeProto* n, const std::string& name, int64_t v) {
  auto* a = n->add_attribute();
  a->set_name(name);
  a->set_type(onnx::AttributeProto::INT);
  a->set_i(v);
}

// A Constant node with an int64 (or, with `f`, float) tensor value.
void AddConstNode(onnx::GraphProto* g, const std::string& out, std::vector<int64_t> dims, std::vector<int64_t> v,
                  std::vector<float> f = {}) {
  auto* n = AddOnnxNode(g, "Constant", out + "_node", {}, {out});
  auto* a = n->add_attribute();
  a->set_name("value");
  a->set_type(onnx::AttributeProto::TENSOR);
  auto* t = a->mutable_t();
  for (int64_t d : dims) t->add_dims(d);
  if (f.empty()) {
    t->set_data_type(onnx::TensorProto::INT64);
    for (int64_t x : v) t->add_int64_data(x);
  } else {
    t->set_data_type(onnx::TensorProto::FLOAT);
    for (float x : f) t->add_float_data(x);
  }
}

// x [N, 4] -> Reshape to [N, 2, 2] through Shape -> Gather -> Unsqueeze -> Concat (as PyTorch's
// view(B, 2, 2) exports), then a causal masked fill with two masks: Trilu of a ConstantOfShape,
// and PyTorch's registered tril buffer (a float initializer, shared through Identity) cut with a
// Slice whose end comes from the Shape chain; each compared with Equal(., 0) and Cast to bool.
// Then Softmax, a Split and a Concat of the halves, and an Expand of a Range-made constant added.
onnx::ModelProto FoldingModel() {
  onnx::ModelProto m = SmallModel();
  onnx::GraphProto* g = m.mutable_graph();
  g->clear_node();
  g->clear_initializer();
  g->mutable_output(0)->set_name("out");
  auto* buf = g->add_initializer();  // tril(ones(3, 3)) as [1, 3, 3]
  buf->set_name("bias");
  buf->set_data_type(onnx::TensorProto::FLOAT);
  for (int64_t d : {1, 3, 3}) buf->add_dims(d);
  for (int i = 0; i < 3; ++i)
    for (int j = 0; j < 3; ++j) buf->add_float_data(j <= i ? 1.f : 0.f);
  AddOnnxNode(g, "Identity", "share", {"bias"}, {"bias2"});
  AddOnnxNode(g, "Shape", "shape", {"x"}, {"xs"});
  AddConstNode(g, "zero", {}, {0});
  IntAttr(AddOnnxNode(g, "Gather", "batch", {"xs", "zero"}, {"n"}), "axis", 0);
  AddConstNode(g, "axes0", {1}, {0});
  AddOnnxNode(g, "Unsqueeze", "unsq", {"n", "axes0"}, {"n1"});
  AddConstNode(g, "two_two", {2}, {2, 2});
  IntAttr(AddOnnxNode(g, "Concat", "cat_shape", {"n1", "two_two"}, {"target"}), "axis", 0);
  AddOnnxNode(g, "Reshape", "view", {"x", "target"}, {"h"});                        // [N, 2, 2]
  AddConstNode(g, "sq_shape", {2}, {2, 2});
  AddOnnxNode(g, "ConstantOfShape", "ones", {"sq_shape"}, {"o"});                     // f32 0 by default
  AddConstNode(g, "one_f", {}, {}, {1.f});
  AddOnnxNode(g, "Add", "plus1", {"o", "one_f"}, {"o1"});
  IntAttr(AddOnnxNode(g, "Trilu", "tril", {"o1"}, {"tl"}), "upper", 0);
  AddConstNode(g, "zero_f", {}, {}, {0.f});
  AddOnnxNode(g, "Equal", "is0", {"tl", "zero_f"}, {"m1"});
  AddConstNode(g, "ninf", {}, {}, {-INFINITY});
  AddOnnxNode(g, "Where", "fill1", {"m1", "ninf", "h"}, {"w1"});
  AddConstNode(g, "one_i", {}, {1});                                                    // the Slice's end: dim 1 of h
  AddOnnxNode(g, "Shape", "shape_h", {"h"}, {"hs"});
  IntAttr(AddOnnxNode(g, "Gather", "dim1", {"hs", "one_i"}, {"t"}), "axis", 0);
  AddOnnxNode(g, "Unsqueeze", "unsq_t", {"t", "axes0"}, {"t1"});
  AddConstNode(g, "starts", {2}, {0, 0});
  AddOnnxNode(g, "Concat", "ends", {"t1", "t1"}, {"ends_v"})->add_attribute()->CopyFrom([] {
    onnx::AttributeProto a;
    a.set_name("axis");
    a.set_type(onnx::AttributeProto::INT);
    a.set_i(0);
    return a;
  }());
  AddConstNode(g, "axes12", {2}, {1, 2});
  AddOnnxNode(g, "Slice", "cut", {"bias2", "starts", "ends_v", "axes12"}, {"b2"});   // [1, 2, 2]
  AddOnnxNode(g, "Equal", "is0b", {"b2", "zero_f"}, {"m2"});
  IntAttr(AddOnnxNode(g, "Cast", "to_bool", {"m2"}, {"m2b"}), "to", onnx::TensorProto::BOOL);
  AddOnnxNode(g, "Where", "fill2", {"m2b", "ninf", "w1"}, {"w2"});
  IntAttr(AddOnnxNode(g, "Softmax", "softmax", {"w2"}, {"p"}), "axis", -1);
  AddConstNode(g, "halves", {2}, {1, 1});
  IntAttr(AddOnnxNode(g, "Split", "split", {"p", "halves"}, {"p0", "p1"}), "axis", 2);
  IntAttr(AddOnnxNode(g, "Concat", "swap", {"p1", "p0"}, {"q"}), "axis", 2);
  AddConstNode(g, "r0", {}, {0});
  AddConstNode(g, "r2", {}, {2});
  AddConstNode(g, "r1", {}, {1});
  AddOnnxNode(g, "Range", "range", {"r0", "r2", "r1"}, {"ri"});                         // [0, 1]
  IntAttr(AddOnnxNode(g, "Cast", "to_f", {"ri"}, {"rf"}), "to", onnx::TensorProto::FLOAT);
  AddConstNode(g, "exp_shape", {2}, {2, 1});
  AddOnnxNode(g, "Expand", "expand", {"rf", "exp_shape"}, {"e"});                      // [2, 2]
  AddOnnxNode(g, "Add", "out_add", {"q", "e"}, {"out"});
  return m;
}

TEST(Import, FoldsShapeArithmeticAndMasks) {
  auto g = ImportOnnxBytes(Serialize(FoldingModel()), "fold.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  ExpectWellFormed(*g, "fold.onnx");
  std::vector<std::string> ops;
  for (const Node& n : g->nodes) ops.push_back(Def(n.op).name);
  EXPECT_EQ(ops, (std::vector<std::string>{"Reshape", "Where", "Where", "Softmax", "Split", "Concat", "Add"}));
  // The tril buffer reaches the output only through Equal: no parameter. Its unused original stays
  // one, for training's note that it is not trained.
  ASSERT_EQ(g->params.size(), 1u);
  EXPECT_EQ(g->value(g->params[0]).name, "bias");
  EXPECT_EQ(g->type(g->nodes[0].out[0]).shape, (Shape{2, 2, 2}));
  // Both masks are constant bool tensors, true above the diagonal.
  for (int w : {1, 2}) {
    const Value& cond = g->value(g->nodes[static_cast<size_t>(w)].in[0]);
    ASSERT_EQ(cond.kind, ValueKind::kConst);
    ASSERT_EQ(cond.data.dtype(), DType::kBool);
    ASSERT_EQ(cond.data.numel(), 4);
    const bool* c = cond.data.data<bool>();
    EXPECT_EQ(std::vector<bool>(c, c + 4), (std::vector<bool>{false, true, false, false})) << "Where " << w;
  }
  const Value& e = g->value(g->nodes.back().in[1]);
  ASSERT_EQ(e.kind, ValueKind::kConst);
  EXPECT_EQ(e.type.shape, (Shape{2, 2}));
  EXPECT_EQ(std::vector<float>(e.data.data<float>(), e.data.data<float>() + 4), (std::vector<float>{0, 1, 0, 1}));
  EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{2, 2, 2}));
}

// PyTorch's eval-mode export merges initializers of equal value through Identity; each name stays
// its own parameter.
TEST(Import, IdentityOfAParameterIsAnotherParameter) {
  onnx::ModelProto m = SmallModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddOnnxNode(g, "Identity", "dup", {"B"}, {"B2"});
  AddOnnxNode(g, "Add", "add", {"y", "B2"}, {"z"});
  g->mutable_output(0)->set_name("z");
  // Nodes must follow their inputs: move "dup" first.
  g->mutable_node()->SwapElements(0, 2);
  g->mutable_node()->SwapElements(1, 2);
  auto gr = ImportOnnxBytes(Serialize(m), "dup.onnx", SmallBinding());
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  ASSERT_EQ(gr->params.size(), 3u);
  const Value& b = gr->value(gr->params[1]);
  const Value& b2 = gr->value(gr->params[2]);
  EXPECT_EQ(b2.name, "B2");
  EXPECT_FALSE(b.data.SharesStorageWith(b2.data));
  EXPECT_EQ(std::vector<float>(b.data.data<float>(), b.data.data<float>() + 3),
            std::vector<float>(b2.data.data<float>(), b2.data.data<float>() + 3));
}

// The dynamo exporter merges initializers of equal value (up to 1024 elements): two nodes reading
// one small initializer are two parameters, the second reader's a copy named B@NODE; model.tie
// keeps one; a larger initializer read twice is a real share. save: gives the copy an initializer
// of its own and points its node at it.
TEST(Import, MergedInitializerIsUntied) {
  onnx::ModelProto m = SmallModel();
  AddOnnxNode(m.mutable_graph(), "Add", "add", {"y", "B"}, {"z"});
  m.mutable_graph()->mutable_output(0)->set_name("z");
  auto g = ImportOnnxBytes(Serialize(m), "merged.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(g->params.size(), 3u);
  EXPECT_EQ(g->value(g->params[2]).name, "B@add");
  ASSERT_EQ(g->copies.size(), 1u);
  EXPECT_EQ(g->copies[0].original, "B");
  ImportOptions tie;
  tie.tie = {"B"};
  auto one = ImportOnnxBytes(Serialize(m), "merged.onnx", SmallBinding(), tie);
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->params.size(), 2u);
  tie.tie = {"W"};  // W [3, 4] is read once
  auto none = ImportOnnxBytes(Serialize(m), "merged.onnx", SmallBinding(), tie);
  ASSERT_FALSE(none.ok());
  EXPECT_NE(none.status().message().find("model.tie: 'W' matches no float initializer"), std::string::npos) << none.status().message();

  fr::testing::TempDir dir;
  const std::string in = dir.Write("merged.onnx", Serialize(m));
  auto model = ReadOnnx(in);
  ASSERT_TRUE(model.ok()) << model.status().message();
  ASSERT_TRUE(WriteOnnx(**model, {{"B", Tensor::Full(Shape{3}, 1.f)}, {"B@add", Tensor::Full(Shape{3}, 2.f)}}, dir / "saved.onnx").ok());
  auto saved = ImportOnnx(dir / "saved.onnx", SmallBinding());
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  ASSERT_EQ(saved->params.size(), 3u) << "the saved model reads two initializers";
  EXPECT_TRUE(saved->copies.empty());
  for (ValueId p : saved->params) {
    const Value& v = saved->value(p);
    if (v.name == "B") {
      EXPECT_EQ(v.data.data<float>()[0], 1.f);
    } else if (v.name == "B@add") {
      EXPECT_EQ(v.data.data<float>()[0], 2.f);
    }
  }
  EXPECT_FALSE(CheckOnnxWeights(**model, {{"B@gemm_missing", {DType::kF32, Shape{3}}}}).ok());
}

// What trains: weights (read by Gemm, MatMul directly or through Transpose) and rank-1 tensors; a
// rank-2 initializer read only elementwise (a mask, a table) is held constant. The config's globs
// override the rule, and a glob that matches nothing is an error.
TEST(Import, WhatTrainsFollowsWhatTheGraphDoes) {
  onnx::ModelProto m = SmallModel();
  onnx::GraphProto* g = m.mutable_graph();
  auto add_init = [&](const std::string& name, std::vector<int64_t> dims) {
    auto* t = g->add_initializer();
    t->set_name(name);
    t->set_data_type(onnx::TensorProto::FLOAT);
    int64_t n = 1;
    for (int64_t d : dims) t->add_dims(d), n *= d;
    std::vector<float> v(static_cast<size_t>(n), 0.5f);
    t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
  };
  add_init("V", {3, 3});
  add_init("T", {2, 3});
  add_init("S", {1});
  AddOnnxNode(g, "Transpose", "vt", {"V"}, {"Vt"});
  AddOnnxNode(g, "MatMul", "mm", {"y", "Vt"}, {"u"});
  AddOnnxNode(g, "Add", "mask", {"u", "T"}, {"masked"});
  AddOnnxNode(g, "Mul", "scale", {"masked", "S"}, {"z"});
  g->mutable_output(0)->set_name("z");
  auto names = [](const Graph& gr) {
    std::set<std::string> n;
    for (ValueId p : gr.params) n.insert(gr.value(p).name);
    return n;
  };
  auto gr = ImportOnnxBytes(Serialize(m), "rule.onnx", SmallBinding());
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_EQ(names(*gr), (std::set<std::string>{"W", "B", "V"}));
  ASSERT_EQ(gr->held.size(), 2u);
  EXPECT_EQ(gr->held[0].name, "T");
  EXPECT_NE(gr->held[0].why.find("elementwise"), std::string::npos) << gr->held[0].why;
  EXPECT_EQ(gr->held[1].name, "S");  // a single value: a scale, not a bias
  EXPECT_NE(gr->held[1].why.find("single value"), std::string::npos) << gr->held[1].why;

  ImportOptions rules{{"T"}, {"W*"}, "[config] c.yaml: ", {}, {}};
  gr = ImportOnnxBytes(Serialize(m), "rule.onnx", SmallBinding(), rules);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_EQ(names(*gr), (std::set<std::string>{"B", "V", "T"}));
  ASSERT_EQ(gr->held.size(), 2u);
  EXPECT_EQ(gr->held[0].name, "W");
  EXPECT_EQ(gr->held[0].why, "model.frozen");

  for (const ImportOptions& bad : {ImportOptions{{"t"}, {}, "[config] c.yaml: ", {}, {}}, ImportOptions{{}, {"nothing*"}, "[config] c.yaml: ", {}, {}}}) {
    gr = ImportOnnxBytes(Serialize(m), "rule.onnx", SmallBinding(), bad);
    ASSERT_FALSE(gr.ok());
    const std::string& msg = gr.status().message();
    EXPECT_EQ(msg.rfind("[config] c.yaml: model.", 0), 0u) << msg;
    EXPECT_NE(msg.find(bad.trainable.empty() ? "'nothing*'" : "'t'"), std::string::npos) << msg;
  }
}

// A head stored as the transpose of the embedding table (the TorchScript exporter's tied head)
// trains as the table: its MatMul reads Transpose(table). model.untie keeps it apart; a copy that
// is not exactly the transpose stays apart.
TEST(Import, TransposedCopyOfATableIsTied) {
  auto model = [](bool exact) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(20);
    onnx::GraphProto* g = m.mutable_graph();
    auto* x = g->add_input();
    x->set_name("idx");
    auto* xt = x->mutable_type()->mutable_tensor_type();
    xt->set_elem_type(onnx::TensorProto::INT64);
    xt->mutable_shape()->add_dim()->set_dim_value(2);
    std::vector<float> e(12), et(12);
    for (int i = 0; i < 4; ++i)
      for (int j = 0; j < 3; ++j) e[static_cast<size_t>(i * 3 + j)] = et[static_cast<size_t>(j * 4 + i)] = 0.25f * static_cast<float>(i * 3 + j);
    if (!exact) et[5] += 1.f;
    auto add_init = [&](const std::string& name, std::vector<int64_t> dims, const std::vector<float>& v) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      for (int64_t d : dims) t->add_dims(d);
      t->set_raw_data(std::string(reinterpret_cast<const char*>(v.data()), v.size() * sizeof(float)));
    };
    add_init("E", {4, 3}, e);
    add_init("Et", {3, 4}, et);
    add_init("P", {2, 3}, std::vector<float>(6, 0.5f));  // positions, added to the lookup: trained
    AddOnnxNode(g, "Gather", "embed", {"E", "idx"}, {"tok"});
    AddOnnxNode(g, "Add", "pos", {"tok", "P"}, {"h"});
    AddOnnxNode(g, "MatMul", "head", {"h", "Et"}, {"logits"});
    g->add_output()->set_name("logits");
    return Serialize(m);
  };
  const std::map<std::string, TensorType> bind = {{"idx", {DType::kI64, Shape{2}}}};
  auto names = [](const Graph& gr) {
    std::set<std::string> n;
    for (ValueId p : gr.params) n.insert(gr.value(p).name);
    return n;
  };
  auto gr = ImportOnnxBytes(model(true), "tied.onnx", bind);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_EQ(names(*gr), (std::set<std::string>{"E", "P"}));
  ASSERT_EQ(gr->tied.size(), 1u);
  EXPECT_EQ(gr->tied[0].copy, "Et");
  EXPECT_EQ(gr->tied[0].table, "E");
  ExpectWellFormed(*gr, "tied");
  EXPECT_EQ(gr->nodes[0].op, OpKind::kTranspose);

  ImportOptions apart;
  apart.untie = {"Et"};
  gr = ImportOnnxBytes(model(true), "tied.onnx", bind, apart);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_EQ(names(*gr), (std::set<std::string>{"E", "Et", "P"}));
  EXPECT_TRUE(gr->tied.empty());

  gr = ImportOnnxBytes(model(false), "tied.onnx", bind);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  EXPECT_EQ(names(*gr), (std::set<std::string>{"E", "Et", "P"}));
  EXPECT_TRUE(gr->tied.empty());
}

// A small CNN as exporters write it: Conv with auto_pad, BatchNormalization in training mode (its
// formula's ops, running statistics held constant), MaxPool, GlobalAveragePool (a ReduceMean).
// MaxPool's Indices output is refused where a node reads it.
TEST(Import, ConvNet) {
  auto model = [](bool read_indices) {
    onnx::ModelProto m;
    m.set_ir_version(8);
    auto* op = m.add_opset_import();
    op->set_domain("");
    op->set_version(17);
    onnx::GraphProto* g = m.mutable_graph();
    auto* x = g->add_input();
    x->set_name("img");
    auto* xt = x->mutable_type()->mutable_tensor_type();
    xt->set_elem_type(onnx::TensorProto::FLOAT);
    for (int64_t d : {2, 3, 7, 7}) xt->mutable_shape()->add_dim()->set_dim_value(d);
    auto add_init = [&](const std::string& name, std::vector<int64_t> dims, float v) {
      auto* t = g->add_initializer();
      t->set_name(name);
      t->set_data_type(onnx::TensorProto::FLOAT);
      int64_t n = 1;
      for (int64_t d : dims) t->add_dims(d), n *= d;
      std::vector<float> vals(static_cast<size_t>(n));
      for (size_t i = 0; i < vals.size(); ++i) vals[i] = v + 0.01f * static_cast<float>(i);
      t->set_raw_data(std::string(reinterpret_cast<const char*>(vals.data()), vals.size() * sizeof(float)));
    };
    add_init("w", {4, 3, 3, 3}, 0.1f);
    add_init("gamma", {4}, 1.f);
    add_init("beta", {4}, 0.f);
    add_init("mean", {4}, 0.f);
    add_init("var", {4}, 1.f);
    auto* conv = AddOnnxNode(g, "Conv", "conv", {"img", "w"}, {"c"});
    auto* ap = conv->add_attribute();
    ap->set_name("auto_pad");
    ap->set_type(onnx::AttributeProto::STRING);
    ap->set_s("SAME_UPPER");
    auto* strides = conv->add_attribute();
    strides->set_name("strides");
    strides->set_type(onnx::AttributeProto::INTS);
    strides->add_ints(2);
    strides->add_ints(2);
    IntAttr(AddOnnxNode(g, "BatchNormalization", "bn", {"c", "gamma", "beta", "mean", "var"}, {"n", "rm", "rv"}), "training_mode", 1);
    auto* pool = AddOnnxNode(g, "MaxPool", "pool", {"n"}, {"p", "idx"});
    auto* k = pool->add_attribute();
    k->set_name("kernel_shape");
    k->set_type(onnx::AttributeProto::INTS);
    k->add_ints(2);
    k->add_ints(2);
    AddOnnxNode(g, "GlobalAveragePool", "gap", {"p"}, {"y"});
    if (read_indices) AddOnnxNode(g, "Neg", "use_idx", {"idx"}, {"z"});
    g->add_output()->set_name("y");
    return Serialize(m);
  };
  const std::map<std::string, TensorType> bind = {{"img", {DType::kF32, Shape{2, 3, 7, 7}}}};
  auto gr = ImportOnnxBytes(model(false), "cnn.onnx", bind);
  ASSERT_TRUE(gr.ok()) << gr.status().message();
  ExpectWellFormed(*gr, "cnn");
  EXPECT_EQ(gr->type(gr->outputs[0]).shape, (Shape{2, 4, 1, 1}));
  const Node& conv = gr->nodes[0];
  EXPECT_EQ(conv.op, OpKind::kConv);
  EXPECT_EQ(conv.attrs.Ints("pads"), (std::vector<int64_t>{1, 1, 1, 1}));  // SAME_UPPER: 7 -> 4 at stride 2
  std::map<OpKind, int> ops = OpCounts(*gr);
  EXPECT_EQ(ops[OpKind::kReduceMean], 3);  // the batch mean, the variance, the global average pool
  std::set<std::string> held;
  for (const auto& h : gr->held) held.insert(h.name);
  EXPECT_EQ(held, (std::set<std::string>{"mean", "var"}));
  auto bad = ImportOnnxBytes(model(true), "cnn.onnx", bind);
  ASSERT_FALSE(bad.ok());
  EXPECT_NE(bad.status().message().find("'idx', an optional output of pool"), std::string::npos) << bad.status().message();
}

TEST(Import, GptMiniOpsAndShapes) {
  for (const auto& [path, t] : {std::pair{"models/gpt_mini.onnx", 64}, {"models/gpt_mini2.onnx", 32}}) {
    SCOPED_TRACE(path);
    auto ins = OnnxInputs(path);
    ASSERT_TRUE(ins.ok()) << ins.status().message();
    ASSERT_EQ(ins->size(), 1u);
    EXPECT_EQ((*ins)[0].name, "idx");
    EXPECT_EQ((*ins)[0].dtype, DType::kI64);
    auto g = ImportOnnx(path, BindAll(path, 4));
    ASSERT_TRUE(g.ok()) << g.status().message();
    ExpectWellFormed(*g, path);
    auto n = OpCounts(*g);
    for (OpKind k : {OpKind::kShape, OpKind::kEqual, OpKind::kCast, OpKind::kRange, OpKind::kSlice,
                     OpKind::kConstantOfShape, OpKind::kTrilu, OpKind::kExpand, OpKind::kConcat}) {
      EXPECT_EQ(n[k], 0) << Def(k).name << " should have folded";
    }
    const int layers = n[OpKind::kSoftmax];
    EXPECT_GE(layers, 2);
    EXPECT_EQ(n[OpKind::kGather], 2);  // the token and position embeddings
    EXPECT_EQ(n[OpKind::kWhere], layers);
    EXPECT_EQ(n[OpKind::kSplit], layers);
    EXPECT_EQ(n[OpKind::kLayerNormalization], 2 * layers + 1);
    EXPECT_EQ(static_cast<int>(g->params.size()), 5 + 12 * layers);  // wte, wpe, 12 per block, ln_f (2), head
    for (ValueId p : g->params) EXPECT_EQ(g->value(p).name.find(".attn.bias"), std::string::npos) << "the mask buffer";
    EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{4, t, 256}));
    for (const Node& node : g->nodes) {
      if (node.op != OpKind::kWhere) continue;
      const Value& cond = g->value(node.in[0]);
      ASSERT_EQ(cond.kind, ValueKind::kConst);
      ASSERT_EQ(cond.type, (TensorType{DType::kBool, Shape{1, 1, t, t}}));
      int wrong = 0;
      for (int64_t i = 0; i < t * t; ++i) wrong += cond.data.data<bool>()[i] != (i % t > i / t);
      EXPECT_EQ(wrong, 0) << "the causal mask is true strictly above the diagonal";
    }
  }
}

struct BadCase {
  const char* name;
  // Returns the bytes to import; may also change the binding.
  std::function<std::string(onnx::ModelProto&, std::map<std::string, TensorType>&)> make;
  std::vector<std::string> fragments;  // each must appear in the message
};

// Mutates the model and serializes it.
template <typename F>
std::function<std::string(onnx::ModelProto&, std::map<std::string, TensorType>&)> Mutate(F f) {
  return [f](onnx::ModelProto& m, std::map<std::string, TensorType>& b) {
    f(m, b);
    return Serialize(m);
  };
}

void SetOpset(onnx::ModelProto& m, int64_t v) { m.mutable_opset_import(0)->set_version(v); }

const std::vector<BadCase>& BadCases() {
  using Binding = std::map<std::string, TensorType>;
  static const std::vector<BadCase> kCases = {
      {"garbage_bytes",
       [](onnx::ModelProto&, Binding&) { return std::string("\xff\xfe this is not a protobuf \x07\x01\x00 at all", 34); },
       {"small.onnx", "not a valid ONNX model"}},
      {"truncated",
       [](onnx::ModelProto& m, Binding&) {
         std::string s = Serialize(m);
         return s.substr(0, s.size() / 2);
       },
       {"small.onnx", "not a valid ONNX model", "truncated"}},
      {"empty", [](onnx::ModelProto&, Binding&) { return std::string(); }, {"small.onnx", "not a valid ONNX model"}},
      {"unsupported_op", Mutate([](onnx::ModelProto& m, Binding&) { NodeNamed(m, "relu")->set_op_type("Celu"); }),
       {"node 'relu'", "Celu", "opset 17", "Supported", "`flowrun ops`", "Gemm", "Relu", "LayerNormalization"}},
      {"opset_11", Mutate([](onnx::ModelProto& m, Binding&) { SetOpset(m, 11); }), {"opset 11", "13 to 21"}},
      {"opset_22", Mutate([](onnx::ModelProto& m, Binding&) { SetOpset(m, 22); }), {"opset 22", "13 to 21"}},
      {"no_opset", Mutate([](onnx::ModelProto& m, Binding&) { m.clear_opset_import(); }), {"opset 0"}},
      {"missing_initializer",
       Mutate([](onnx::ModelProto& m, Binding&) { m.mutable_graph()->mutable_initializer()->RemoveLast(); }),
       {"node 'gemm'", "input 'B'", "not produced"}},
      {"short_raw_data",
       Mutate([](onnx::ModelProto& m, Binding&) { InitNamed(m, "W")->set_raw_data(std::string(20, '\0')); }),
       {"initializer 'W'", "20 bytes", "needs 48"}},
      {"short_float_data",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* w = InitNamed(m, "W");
         w->clear_raw_data();
         for (int i = 0; i < 5; ++i) w->add_float_data(1.f);
       }),
       {"initializer 'W'", "20 bytes", "needs 48"}},
      {"overflowing_dims",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* w = InitNamed(m, "W");
         w->clear_dims();
         w->add_dims(int64_t{1} << 40);
         w->add_dims(int64_t{1} << 40);
       }),
       {"initializer 'W'", "2^48"}},
      {"negative_dim",
       Mutate([](onnx::ModelProto& m, Binding&) { InitNamed(m, "W")->set_dims(0, -3); }),
       {"initializer 'W'", "dimension -3"}},
      // Within the element limit, but far more than the file holds: must fail before allocating.
      {"huge_dims_tiny_data",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* w = InitNamed(m, "W");
         w->clear_dims();
         w->add_dims(int64_t{1} << 24);
         w->add_dims(int64_t{1} << 23);
       }),
       {"initializer 'W'", "48 bytes", "needs 562949953421312"}},
      {"unsupported_initializer_dtype",
       Mutate([](onnx::ModelProto& m, Binding&) { InitNamed(m, "B")->set_data_type(onnx::TensorProto::DOUBLE); }),
       {"initializer 'B'", "DOUBLE"}},
      {"input_wrong_dtype", Mutate([](onnx::ModelProto&, Binding& b) { b["x"].dtype = DType::kI64; }),
       {"graph input 'x'", "f32", "i64"}},
      {"input_wrong_shape", Mutate([](onnx::ModelProto&, Binding& b) { b["x"].shape = Shape{2, 5}; }),
       {"graph input 'x'", "[N, 4]", "[2, 5]"}},
      {"input_unbound", Mutate([](onnx::ModelProto&, Binding& b) { b.clear(); }),
       {"graph input 'x'", "not bound", "model.inputs"}},
      {"binding_not_an_input", Mutate([](onnx::ModelProto&, Binding& b) { b["tokens"] = {DType::kI64, Shape{2}}; }),
       {"'tokens'", "not a graph input"}},
      {"non_default_domain",
       Mutate([](onnx::ModelProto& m, Binding&) { NodeNamed(m, "relu")->set_domain("com.microsoft"); }),
       {"node 'relu'", "com.microsoft", "domain"}},
      {"gemm_unsupported_attribute",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* a = NodeNamed(m, "gemm")->add_attribute();
         a->set_name("broadcast");
         a->set_type(onnx::AttributeProto::INT);
         a->set_i(1);
       }),
       {"node 'gemm'", "attribute 'broadcast'", "Gemm"}},
      {"reshape_shape_not_constant",
       Mutate([](onnx::ModelProto& m, Binding& b) {
         auto* s = m.mutable_graph()->add_input();
         s->set_name("shape");
         auto* st = s->mutable_type()->mutable_tensor_type();
         st->set_elem_type(onnx::TensorProto::INT64);
         st->mutable_shape()->add_dim()->set_dim_value(2);
         b["shape"] = {DType::kI64, Shape{2}};
         auto* r = m.mutable_graph()->add_node();
         r->set_name("reshape");
         r->set_op_type("Reshape");
         r->add_input("y");
         r->add_input("shape");
         r->add_output("z");
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'reshape'", "Reshape", "'shape'", "must be a constant"}},
      {"slice_end_not_constant",
       Mutate([](onnx::ModelProto& m, Binding& b) {
         auto* s = m.mutable_graph()->add_input();
         s->set_name("end");
         auto* st = s->mutable_type()->mutable_tensor_type();
         st->set_elem_type(onnx::TensorProto::INT64);
         st->mutable_shape()->add_dim()->set_dim_value(1);
         b["end"] = {DType::kI64, Shape{1}};
         AddConstNode(m.mutable_graph(), "start", {1}, {0});
         AddOnnxNode(m.mutable_graph(), "Slice", "cut", {"y", "start", "end"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'cut'", "Slice", "'end'", "must be a constant"}},
      {"cast_to_double",
       Mutate([](onnx::ModelProto& m, Binding&) {
         IntAttr(AddOnnxNode(m.mutable_graph(), "Cast", "to_f64", {"y"}, {"z"}), "to", onnx::TensorProto::DOUBLE);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'to_f64'", "DOUBLE"}},
      {"split_uneven",
       Mutate([](onnx::ModelProto& m, Binding&) {
         IntAttr(AddOnnxNode(m.mutable_graph(), "Split", "halves", {"y"}, {"z", "z2"}), "axis", 1);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'halves'", "cannot split dim 3 into 2"}},
      {"output_not_produced",
       Mutate([](onnx::ModelProto& m, Binding&) { m.mutable_graph()->mutable_output(0)->set_name("nowhere"); }),
       {"graph output 'nowhere'", "not produced"}},
      {"gemm_too_few_inputs",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* n = NodeNamed(m, "gemm");
         n->clear_input();
         n->add_input("x");
       }),
       {"node 'gemm'", "has 1 inputs"}},
      {"gemm_shape_mismatch",
       Mutate([](onnx::ModelProto& m, Binding&) { NodeNamed(m, "gemm")->mutable_attribute(0)->set_i(0); }),
       {"node 'gemm'", "Gemm"}},
      // Malformed nodes are refused against their op's spec before anything reads them (these
      // crashed: protobuf CHECKs, SIGFPE, std::bad_variant_access, reads past a shape's end).
      {"relu_without_outputs", Mutate([](onnx::ModelProto& m, Binding&) { NodeNamed(m, "relu")->clear_output(); }),
       {"node 'relu'", "has 0 outputs", "Relu gives 1 outputs"}},
      {"gemm_floats_where_an_int_belongs",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* a = NodeNamed(m, "gemm")->mutable_attribute(0);
         a->set_type(onnx::AttributeProto::FLOATS);
         a->add_floats(1.f);
       }),
       {"node 'gemm'", "attribute 'transB' is floats but must be an int"}},
      {"gemm_required_input_unnamed", Mutate([](onnx::ModelProto& m, Binding&) { NodeNamed(m, "gemm")->set_input(1, ""); }),
       {"node 'gemm'", "input 1 has no name but is required"}},
      {"split_without_outputs",
       Mutate([](onnx::ModelProto& m, Binding&) {
         IntAttr(AddOnnxNode(m.mutable_graph(), "Split", "none", {"y"}, {}), "axis", 1);
       }),
       {"node 'none'", "has 0 outputs"}},
      {"split_sizes_that_wrap_around",
       Mutate([](onnx::ModelProto& m, Binding&) {
         constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
         AddConstNode(m.mutable_graph(), "sizes", {3}, {kMax, kMax, 5});  // sums to 3 modulo 2^64
         IntAttr(AddOnnxNode(m.mutable_graph(), "Split", "wrap", {"y", "sizes"}, {"z", "z1", "z2"}), "axis", 1);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'wrap'", "overflow"}},
      {"softmax_of_a_scalar",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "s", {}, {}, {1.f});
         IntAttr(AddOnnxNode(m.mutable_graph(), "Softmax", "soft", {"s"}, {"z"}), "axis", 0);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'soft'", "out of range for rank 0"}},
      {"gather_from_a_scalar",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "s", {}, {}, {1.f});
         AddConstNode(m.mutable_graph(), "i", {}, {0});
         AddOnnxNode(m.mutable_graph(), "Gather", "pick", {"s", "i"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'pick'", "out of range for rank 0"}},
      {"concat_without_axis",
       Mutate([](onnx::ModelProto& m, Binding&) { AddOnnxNode(m.mutable_graph(), "Concat", "cat", {"y", "y"}, {"z"}); }),
       {"node 'cat'", "attribute 'axis' is required"}},
      {"constant_with_two_values",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "c", {}, {1});
         auto* a = NodeNamed(m, "c_node")->add_attribute();
         a->set_name("value_float");
         a->set_type(onnx::AttributeProto::FLOAT);
       }),
       {"node 'c_node'", "exactly one value"}},
      {"trilu_k_a_float",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "k", {}, {}, {1e30f});
         AddOnnxNode(m.mutable_graph(), "Trilu", "tri", {"y", "k"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'tri'", "'k'", "an integer constant"}},
      {"reshape_to_a_product_past_int64",  // found by fuzz_onnx: the known dims' product overflowed
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "target", {3}, {int64_t{1} << 62, 16, -1});
         AddOnnxNode(m.mutable_graph(), "Reshape", "view", {"y", "target"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'view'", "more elements than int64 counts"}},
      // Opsets 18-21: what a node may have depends on its opset.
      {"gelu_before_opset_20",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddOnnxNode(m.mutable_graph(), "Gelu", "act", {"y"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'act'", "Gelu is an op of opset 20 and later"}},
      {"gelu_tanh",
       Mutate([](onnx::ModelProto& m, Binding&) {
         SetOpset(m, 20);
         auto* a = AddOnnxNode(m.mutable_graph(), "Gelu", "act", {"y"}, {"z"})->add_attribute();
         a->set_name("approximate");
         a->set_type(onnx::AttributeProto::STRING);
         a->set_s("erf");
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'act'", "approximate='erf' is not an approximation ONNX defines"}},
      {"split_num_outputs_before_opset_18",
       Mutate([](onnx::ModelProto& m, Binding&) {
         auto* n = AddOnnxNode(m.mutable_graph(), "Split", "parts", {"y"}, {"z", "z1"});
         IntAttr(n, "axis", 1);
         IntAttr(n, "num_outputs", 2);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'parts'", "attribute 'num_outputs' of Split exists from opset 18"}},
      {"split_without_sizes_at_opset_18",
       Mutate([](onnx::ModelProto& m, Binding&) {
         SetOpset(m, 18);
         IntAttr(AddOnnxNode(m.mutable_graph(), "Split", "parts", {"y"}, {"z", "z1", "z2"}), "axis", 1);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'parts'", "needs split sizes or num_outputs from opset 18"}},
      {"split_num_outputs_not_the_outputs",
       Mutate([](onnx::ModelProto& m, Binding&) {
         SetOpset(m, 18);
         auto* n = AddOnnxNode(m.mutable_graph(), "Split", "parts", {"y"}, {"z", "z1"});
         IntAttr(n, "axis", 1);
         IntAttr(n, "num_outputs", 3);
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'parts'", "num_outputs is 3 but the node has 2 outputs"}},
      // Resource budgets: a tiny model must not fold a Range into gigabytes.
      {"range_folds_past_the_budget",
       Mutate([](onnx::ModelProto& m, Binding&) {
         AddConstNode(m.mutable_graph(), "r0", {}, {0});
         AddConstNode(m.mutable_graph(), "rn", {}, {int64_t{1} << 28});  // 2 GiB of int64
         AddConstNode(m.mutable_graph(), "r1", {}, {1});
         AddOnnxNode(m.mutable_graph(), "Range", "big", {"r0", "rn", "r1"}, {"z"});
         m.mutable_graph()->mutable_output(0)->set_name("z");
       }),
       {"node 'big'", "past the", "MiB that import folds"}},
  };
  return kCases;
}

// With FLOWRUN_FUZZ_CORPUS=DIR set, the models of this file are written there as DIR/NAME.onnx:
// tools/fuzz.sh's seed corpus for the ONNX target (fuzz/corpus/onnx) is made so.
void ToCorpus(const std::string& name, const std::string& bytes) {
  const char* dir = std::getenv("FLOWRUN_FUZZ_CORPUS");
  if (!dir) return;
  std::ofstream(std::string(dir) + "/" + name + ".onnx", std::ios::binary) << bytes;
}

// Every row: not ok, kInvalidInput, a message that starts with "[onnx] " and holds each fragment.
TEST(Import, BadOnnxTable) {
  ToCorpus("small", Serialize(SmallModel()));
  ToCorpus("folding", Serialize(FoldingModel()));
  for (const BadCase& c : BadCases()) {
    SCOPED_TRACE(c.name);
    onnx::ModelProto m = SmallModel();
    auto binding = SmallBinding();
    std::string bytes = c.make(m, binding);
    ToCorpus(c.name, bytes);
    auto g = ImportOnnxBytes(bytes, "small.onnx", binding);
    if (g.ok()) {
      ADD_FAILURE() << c.name << ": imported without an error";
      continue;
    }
    const std::string& msg = g.status().message();
    EXPECT_EQ(msg.rfind("[onnx] ", 0), 0u) << msg;
    EXPECT_EQ(g.status().code(), Code::kInvalidInput) << msg;
    for (const std::string& f : c.fragments)
      EXPECT_NE(msg.find(f), std::string::npos) << "want '" << f << "' in: " << msg;
  }
}

// Folded integer arithmetic wraps around as two's complement (it was a signed overflow: undefined,
// and an error under UBSan), and integer Range steps that overflow on their way are exact.
TEST(Import, FoldedIntegerArithmeticWraps) {
  onnx::ModelProto m = SmallModel();
  auto* g = m.mutable_graph();
  constexpr int64_t kMax = std::numeric_limits<int64_t>::max();
  AddConstNode(g, "big", {}, {kMax});
  AddConstNode(g, "two", {}, {2});
  AddOnnxNode(g, "Mul", "twice", {"big", "two"}, {"wrapped"});
  AddConstNode(g, "minus1", {}, {-1});
  AddConstNode(g, "lowest", {}, {std::numeric_limits<int64_t>::min()});
  AddOnnxNode(g, "Div", "negate", {"lowest", "minus1"}, {"still_lowest"});
  AddConstNode(g, "step", {}, {int64_t{1} << 62});
  AddOnnxNode(g, "Range", "wide", {"lowest", "big", "step"}, {"r"});
  for (const char* out : {"wrapped", "still_lowest", "r"}) g->add_output()->set_name(out);
  auto graph = ImportOnnxBytes(Serialize(m), "small.onnx", SmallBinding());
  ASSERT_TRUE(graph.ok()) << graph.status().message();
  auto value = [&](const char* name) { return ConstInts(graph->value(graph->Find(name)).data); };
  EXPECT_EQ(value("wrapped"), std::vector<int64_t>{-2});
  EXPECT_EQ(value("still_lowest"), std::vector<int64_t>{std::numeric_limits<int64_t>::min()});
  const int64_t lo = std::numeric_limits<int64_t>::min(), q = int64_t{1} << 62;
  EXPECT_EQ(value("r"), (std::vector<int64_t>{lo, -q, 0, q}));  // lo + i * q
}

// Opset 18's Split by num_outputs: parts of ceil(dim / n), the last smaller (y is [2, 3]: 2 + 1).
TEST(Import, SplitByNumOutputs) {
  onnx::ModelProto m = SmallModel();
  SetOpset(m, 18);
  auto* n = AddOnnxNode(m.mutable_graph(), "Split", "parts", {"y"}, {"a", "b"});
  IntAttr(n, "axis", 1);
  IntAttr(n, "num_outputs", 2);
  m.mutable_graph()->mutable_output(0)->set_name("a");
  m.mutable_graph()->add_output()->set_name("b");
  auto g = ImportOnnxBytes(Serialize(m), "small.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{2, 2}));
  EXPECT_EQ(g->type(g->outputs[1]).shape, (Shape{2, 1}));
}

// ONNX's Gelu (opset 20) imports as flowrun's fused Gelu, whose kernel computes the erf form:
// 0.5 x (1 + erf(x / sqrt 2)), against std::erf here.
TEST(Import, GeluOfOpset20) {
  onnx::ModelProto m = SmallModel();
  SetOpset(m, 21);
  AddOnnxNode(m.mutable_graph(), "Gelu", "act", {"y"}, {"z"});
  m.mutable_graph()->mutable_output(0)->set_name("z");
  auto g = ImportOnnxBytes(Serialize(m), "small.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  const Node& gelu = g->nodes.back();
  ASSERT_EQ(gelu.op, OpKind::kGelu);
  Tensor x(DType::kF32, Shape{2, 3}), y(DType::kF32, Shape{2, 3});
  const float xs[] = {-3.f, -1.f, -0.25f, 0.f, 0.5f, 2.f};
  std::copy(std::begin(xs), std::end(xs), x.data<float>());
  std::vector<Tensor> in = {x}, out = {y};
  ASSERT_TRUE(Def(OpKind::kGelu).cpu(KernelCtx{gelu, in, out}).ok());
  for (int i = 0; i < 6; ++i) {
    const double want = 0.5 * xs[i] * (1 + std::erf(xs[i] / std::sqrt(2.0)));
    EXPECT_NEAR(y.data<float>()[i], want, 1e-6 + 1e-6 * std::abs(want)) << xs[i];
  }
}

// SmallModel's output through Dropout(y, ratio[, training_mode]) to z.
onnx::ModelProto DropoutModel(float ratio, int training_mode = -1) {
  onnx::ModelProto m = SmallModel();
  onnx::GraphProto* g = m.mutable_graph();
  AddConstNode(g, "ratio", {}, {}, {ratio});
  std::vector<std::string> in = {"y", "ratio"};
  if (training_mode >= 0) {
    auto* t = AddOnnxNode(g, "Constant", "mode_node", {}, {"mode"})->add_attribute();
    t->set_name("value");
    t->set_type(onnx::AttributeProto::TENSOR);
    t->mutable_t()->set_data_type(onnx::TensorProto::BOOL);
    t->mutable_t()->add_int32_data(training_mode);
    in.push_back("mode");
  }
  AddOnnxNode(g, "Dropout", "drop", in, {"z"});
  g->mutable_output(0)->set_name("z");
  return m;
}

int DropoutNodes(const Graph& g) {
  int n = 0;
  for (const Node& node : g.nodes) n += node.op == OpKind::kDropout;
  return n;
}

TEST(Import, DropoutTrains) {
  auto g = ImportOnnxBytes(Serialize(DropoutModel(0.25f, 1)), "small.onnx", SmallBinding());
  ASSERT_TRUE(g.ok()) << g.status().message();
  ASSERT_EQ(DropoutNodes(*g), 1);
  const Node& drop = g->nodes.back();
  EXPECT_EQ(drop.op, OpKind::kDropout);
  EXPECT_DOUBLE_EQ(drop.attrs.Float("ratio"), 0.25);
  // Absent training_mode trains too (flowrun runs the training graph); train.seed moves the key.
  ImportOptions seeded;
  seeded.seed = 5;
  auto other = ImportOnnxBytes(Serialize(DropoutModel(0.25f)), "small.onnx", SmallBinding(), seeded);
  ASSERT_TRUE(other.ok()) << other.status().message();
  ASSERT_EQ(DropoutNodes(*other), 1);
  EXPECT_NE(other->nodes.back().attrs.Int("key"), drop.attrs.Int("key"));
}

TEST(Import, DropoutThatIsTheIdentity) {
  ImportOptions off;
  off.dropout = false;
  for (const auto& [what, bytes, opts] : {std::tuple{"model.dropout: false", Serialize(DropoutModel(0.25f)), off},
                                          std::tuple{"training_mode false", Serialize(DropoutModel(0.25f, 0)), ImportOptions{}},
                                          std::tuple{"ratio 0", Serialize(DropoutModel(0.f, 1)), ImportOptions{}}}) {
    auto g = ImportOnnxBytes(bytes, "small.onnx", SmallBinding(), opts);
    ASSERT_TRUE(g.ok()) << what << ": " << g.status().message();
    EXPECT_EQ(DropoutNodes(*g), 0) << what;
    EXPECT_EQ(g->nodes.back().op, OpKind::kRelu) << what;
  }
}

TEST(Import, DropoutThatIsRefused) {
  auto ratio = ImportOnnxBytes(Serialize(DropoutModel(1.f)), "small.onnx", SmallBinding());
  ASSERT_FALSE(ratio.ok());
  EXPECT_NE(ratio.status().message().find("node 'drop'"), std::string::npos) << ratio.status().message();
  EXPECT_NE(ratio.status().message().find("outside [0, 1)"), std::string::npos) << ratio.status().message();
  onnx::ModelProto mask = DropoutModel(0.5f);
  NodeNamed(mask, "drop")->add_output("mask");
  AddOnnxNode(mask.mutable_graph(), "Identity", "use_mask", {"mask"}, {"mask2"});
  auto read = ImportOnnxBytes(Serialize(mask), "small.onnx", SmallBinding());
  ASSERT_FALSE(read.ok());
  EXPECT_NE(read.status().message().find("uses 'mask', an optional output of drop"), std::string::npos) << read.status().message();
  onnx::ModelProto computed = DropoutModel(0.5f);  // the ratio from the data: not a constant
  NodeNamed(computed, "drop")->set_input(1, "x");
  auto data = ImportOnnxBytes(Serialize(computed), "small.onnx", SmallBinding());
  ASSERT_FALSE(data.ok());
  EXPECT_NE(data.status().message().find("must be a constant scalar"), std::string::npos) << data.status().message();
}

// Pad's modes: reflect and edge at every opset flowrun reads, wrap from 19; anything else is refused.
TEST(Import, PadModes) {
  for (const auto& [mode, opset, ok] : {std::tuple{"reflect", 17, true}, std::tuple{"edge", 17, true}, std::tuple{"wrap", 19, true},
                                        std::tuple{"wrap", 18, false}, std::tuple{"mirror", 21, false}}) {
    SCOPED_TRACE(std::string(mode) + " at opset " + std::to_string(opset));
    onnx::ModelProto m = SmallModel();
    SetOpset(m, opset);
    AddConstNode(m.mutable_graph(), "pads", {4}, {0, 1, 0, 2});
    auto* pad = AddOnnxNode(m.mutable_graph(), "Pad", "pad", {"y", "pads"}, {"z"});
    auto* a = pad->add_attribute();
    a->set_name("mode");
    a->set_type(onnx::AttributeProto::STRING);
    a->set_s(mode);
    m.mutable_graph()->mutable_output(0)->set_name("z");
    auto g = ImportOnnxBytes(Serialize(m), "pad.onnx", SmallBinding());
    ASSERT_EQ(g.ok(), ok) << (g.ok() ? "" : g.status().message());
    if (!ok) {
      EXPECT_NE(g.status().message().find("is not a Pad mode"), std::string::npos) << g.status().message();
      continue;
    }
    EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{2, 6}));
    EXPECT_EQ(g->nodes.back().attrs.Int("mode"), std::string(mode) == "reflect" ? 1 : std::string(mode) == "edge" ? 2 : 3);
  }
}

// ScatterND's reductions: none and add import (add from opset 16), mul, max and min are refused.
TEST(Import, ScatterNDReductions) {
  for (const auto& [reduction, ok] : {std::pair{"", true}, std::pair{"add", true}, std::pair{"mul", false}, std::pair{"max", false}}) {
    SCOPED_TRACE(std::string("reduction '") + reduction + "'");
    onnx::ModelProto m = SmallModel();
    SetOpset(m, 18);
    AddConstNode(m.mutable_graph(), "idx", {1, 1}, {1});
    AddConstNode(m.mutable_graph(), "upd", {1, 3}, {}, {5.f, 6.f, 7.f});
    auto* sc = AddOnnxNode(m.mutable_graph(), "ScatterND", "scatter", {"y", "idx", "upd"}, {"z"});
    if (*reduction) {
      auto* a = sc->add_attribute();
      a->set_name("reduction");
      a->set_type(onnx::AttributeProto::STRING);
      a->set_s(reduction);
    }
    m.mutable_graph()->mutable_output(0)->set_name("z");
    auto g = ImportOnnxBytes(Serialize(m), "scatter.onnx", SmallBinding());
    ASSERT_EQ(g.ok(), ok) << (g.ok() ? "" : g.status().message());
    if (!ok) {
      EXPECT_NE(g.status().message().find("is not supported (none or add)"), std::string::npos) << g.status().message();
      continue;
    }
    EXPECT_EQ(g->nodes.back().op, OpKind::kScatterND);
    EXPECT_EQ(g->nodes.back().attrs.Int("add"), std::string(reduction) == "add" ? 1 : 0);
    EXPECT_EQ(g->type(g->outputs[0]).shape, (Shape{2, 3}));
  }
}

// ---- External data: initializers in a file beside the model ----

// SmallModel with W's 48 bytes in `location` at byte 16 (after 16 bytes of something else).
std::string ExternalModel(const fr::testing::TempDir& dir, const std::string& location, int64_t offset = 16,
                          int64_t length = 48) {
  onnx::ModelProto m = SmallModel();
  onnx::TensorProto* w = InitNamed(m, "W");
  const std::string bytes = std::string(16, 'x') + w->raw_data();
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto add = [&](const char* key, const std::string& value) {
    auto* kv = w->add_external_data();
    kv->set_key(key);
    kv->set_value(value);
  };
  add("location", location);
  add("offset", std::to_string(offset));
  if (length >= 0) add("length", std::to_string(length));
  std::filesystem::create_directories(dir / "model");
  dir.Write("model/weights.bin", bytes);
  return dir.Write("model/small.onnx", Serialize(m));
}

TEST(Import, ExternalData) {
  fr::testing::TempDir dir;
  auto inline_graph = ImportOnnxBytes(Serialize(SmallModel()), "small.onnx", SmallBinding());
  ASSERT_TRUE(inline_graph.ok());
  for (int64_t length : {int64_t{48}, int64_t{-1}}) {  // length is optional
    auto g = ImportOnnx(ExternalModel(dir, "weights.bin", 16, length), SmallBinding());
    ASSERT_TRUE(g.ok()) << g.status().message();
    const Tensor& w = g->value(g->Find("W")).data, &want = inline_graph->value(inline_graph->Find("W")).data;
    ASSERT_EQ(w.shape(), want.shape());
    EXPECT_EQ(std::memcmp(w.raw(), want.raw(), 48), 0) << "the weights are the file's bytes 16 to 64";
  }
}

// A model that came with external data is saved with it: the trained W in saved.onnx.data, which
// the import reads back. (W is 48 bytes: the threshold is lowered by making it bigger.)
TEST(Import, SavedWithExternalData) {
  fr::testing::TempDir dir;
  onnx::ModelProto m = SmallModel();
  onnx::TensorProto* w = InitNamed(m, "W");
  w->clear_dims();
  w->add_dims(3);
  w->add_dims(400);  // 4800 bytes: past the 1 KiB that stays inline
  w->set_raw_data(std::string(4800, '\0'));
  const std::string bytes = w->raw_data();
  w->clear_raw_data();
  w->set_data_location(onnx::TensorProto::EXTERNAL);
  auto* kv = w->add_external_data();
  kv->set_key("location");
  kv->set_value("w.bin");
  dir.Write("w.bin", bytes);
  const std::string in = dir.Write("in.onnx", Serialize(m));
  auto model = ReadOnnx(in);
  ASSERT_TRUE(model.ok()) << model.status().message();
  EXPECT_TRUE((*model)->external_data);
  Tensor trained = Tensor::Full(Shape{3, 400}, 7.f);
  ASSERT_TRUE(WriteOnnx(**model, {{"W", trained}}, dir / "saved.onnx").ok());
  EXPECT_TRUE(std::filesystem::exists(dir / "saved.onnx.data"));
  EXPECT_LT(std::filesystem::file_size(dir / "saved.onnx"), 4800u) << "W is not inline";
  auto saved = ReadOnnx(dir / "saved.onnx");
  ASSERT_TRUE(saved.ok()) << saved.status().message();
  const onnx::TensorProto* sw = nullptr;
  for (const auto& t : (*saved)->proto.graph().initializer())
    if (t.name() == "W") sw = &t;
  ASSERT_NE(sw, nullptr);
  ASSERT_EQ(sw->raw_data().size(), 4800u);
  const float* v = reinterpret_cast<const float*>(sw->raw_data().data());
  EXPECT_EQ(v[0], 7.f);
  EXPECT_EQ(v[1199], 7.f);
}

TEST(Import, ExternalDataThatIsRefused) {
  fr::testing::TempDir dir;
  std::filesystem::create_directories(dir / "model");
  dir.Write("secret.bin", std::string(64, 's'));
  std::filesystem::create_symlink(dir / "secret.bin", dir / "model/link.bin");
  struct Case {
    std::string location;
    int64_t offset, length;
    std::string why;
  } cases[] = {
      {dir / "model/weights.bin", 16, 48, "is absolute"},
      {"../secret.bin", 0, 48, "leaves the model's folder ('..')"},
      {"link.bin", 0, 48, "outside the model's folder"},
      {"missing.bin", 0, 48, "cannot be read"},
      {"weights.bin", 40, 48, "needs bytes [40, 88)"},
      {"weights.bin", 16, 44, "has length 44 but its shape [3, 4] needs 48 bytes"},
      {"", 16, 48, "names no location"},
  };
  for (const Case& c : cases) {
    const std::string path = ExternalModel(dir, c.location, c.offset, c.length);
    auto g = ImportOnnx(path, SmallBinding());
    ASSERT_FALSE(g.ok()) << c.location;
    EXPECT_EQ(g.status().code(), Code::kInvalidInput);
    EXPECT_NE(g.status().message().find("[onnx] " + path + ": initializer 'W': external data"), std::string::npos) << g.status().message();
    EXPECT_NE(g.status().message().find(c.why), std::string::npos) << c.location << " -> " << g.status().message();
  }
}

// A step of any int64 slices one element (fuzz_onnx found end - start + step overflowing).
TEST(Import, SliceStepsAtTheEndsOfInt64) {
  for (int64_t step : {std::numeric_limits<int64_t>::max(), std::numeric_limits<int64_t>::min()}) {
    onnx::ModelProto m = SmallModel();
    auto* g = m.mutable_graph();
    AddConstNode(g, "starts", {1}, {step > 0 ? 0 : -1});
    AddConstNode(g, "ends", {1}, {step > 0 ? 3 : -4});
    AddConstNode(g, "axes", {1}, {1});
    AddConstNode(g, "steps", {1}, {step});
    AddOnnxNode(g, "Slice", "one", {"y", "starts", "ends", "axes", "steps"}, {"z"});
    g->mutable_output(0)->set_name("z");
    auto graph = ImportOnnxBytes(Serialize(m), "small.onnx", SmallBinding());
    ASSERT_TRUE(graph.ok()) << graph.status().message();
    EXPECT_EQ(graph->type(graph->outputs[0]).shape, (Shape{2, 1})) << step;
  }
}

// Every op type flowrun imports has a spec row: a node of it is checked before anything reads it.
TEST(Import, EveryImportedOpTypeHasASpec) {
  for (int k = 0; k < kNumOps; ++k) {
    const OpDef& d = Def(static_cast<OpKind>(k));
    if (!d.onnx && static_cast<OpKind>(k) != OpKind::kGelu) continue;
    onnx::NodeProto n;
    n.set_op_type(d.name);
    n.set_name("probe");
    EXPECT_NE(CheckOnnxNode(n, 21), "") << d.name << ": a node with no inputs or outputs passed its spec";
  }
}

}  // namespace
}  // namespace fr::ir
