#include "ir/onnx_lower.h"

#include <algorithm>
#include <cmath>

#include "ir/onnx_proto.h"

namespace fr::ir {
namespace {

Status NotConstant(const OnnxNodeCtx& c, int i, const std::string& what) {
  return c.error("input " + std::to_string(i) + " ('" + c.proto.input(i) + "') must be " + what);
}

bool Has(const std::vector<ValueId>& ins, size_t i) { return i < ins.size() && ins[i] != kNoValue; }

Result<std::vector<int64_t>> ConstIntsAt(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, int i) {
  const auto u = static_cast<size_t>(i);
  if (!Has(ins, u) || c.graph.value(ins[u]).kind != ValueKind::kConst) return NotConstant(c, i, "a constant");
  const Tensor& t = c.graph.value(ins[u]).data;
  if (t.dtype() != DType::kI64 && t.dtype() != DType::kI32) return NotConstant(c, i, "an integer constant");
  if (t.shape().rank() > 1) return NotConstant(c, i, "a constant of rank 0 or 1");
  return ConstInts(t);
}

Result<double> ConstScalarAt(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, int i) {
  const auto u = static_cast<size_t>(i);
  if (!Has(ins, u) || c.graph.value(ins[u]).kind != ValueKind::kConst || c.graph.value(ins[u]).data.numel() != 1) {
    return NotConstant(c, i, "a constant scalar");
  }
  const Tensor& t = c.graph.value(ins[u]).data;
  switch (t.dtype()) {
    case DType::kF32: return static_cast<double>(t.data<float>()[0]);
    case DType::kI64: return static_cast<double>(t.data<int64_t>()[0]);
    case DType::kI32: return static_cast<double>(t.data<int32_t>()[0]);
    default: return NotConstant(c, i, "a number");
  }
}

Status CheckedDims(const OnnxNodeCtx& c, const std::vector<int64_t>& dims) {
  return CheckDims(dims).With(c.what + ": ");
}

Status LowerSplit(const OnnxNodeCtx& c, const Shape& x, std::vector<ValueId>& ins, Attrs& a) {
  auto axis = x.Axis(a.Int("axis", 0));
  if (!axis.ok()) return c.error(axis.status().message());
  std::vector<int64_t> sizes;
  const int64_t outs = c.proto.output_size();
  const bool num_outputs = a.Has("num_outputs");
  if (Has(ins, 1) && num_outputs) return c.error("has both split sizes and num_outputs; ONNX allows one");
  if (Has(ins, 1)) {
    ASSIGN_OR_RETURN(sizes, ConstIntsAt(c, ins, 1));
  } else if (num_outputs) {
    // Opset 18: num_outputs parts of ceil(dim / num_outputs), the last one smaller if need be.
    const int64_t n = a.Int("num_outputs"), dim = x[*axis];
    if (n != outs) return c.error("num_outputs is " + std::to_string(n) + " but the node has " + std::to_string(outs) + " outputs");
    const int64_t part = (dim + n - 1) / n;
    if (part * (n - 1) >= dim && n > 1) {
      return c.error("cannot split dim " + std::to_string(dim) + " into " + std::to_string(n) + " parts of " +
                     std::to_string(part) + " with a non-empty last one");
    }
    sizes.assign(static_cast<size_t>(n), part);
    sizes.back() = dim - part * (n - 1);
  } else if (c.graph.opset >= 18) {
    return c.error("needs split sizes or num_outputs from opset 18");
  } else {
    const int64_t dim = x[*axis];
    if (dim % outs) {
      return c.error("cannot split dim " + std::to_string(dim) + " into " + std::to_string(outs) + " equal parts");
    }
    sizes.assign(static_cast<size_t>(outs), dim / outs);
  }
  if (static_cast<int64_t>(sizes.size()) != outs) {
    return c.error(std::to_string(sizes.size()) + " split sizes for " + std::to_string(outs) + " outputs");
  }
  a = Attrs();
  a.Set("axis", int64_t{*axis});
  a.Set("split", sizes);
  ins.resize(1);
  return Status::Ok();
}

// ONNX Slice(data, starts, ends, axes?, steps?): negative positions count from the end; positions
// clamp to [0, dim] for a step > 0 and to [-1, dim - 1] for a step < 0; axes not named stay whole.
Status LowerSlice(const OnnxNodeCtx& c, const Shape& x, std::vector<ValueId>& ins, Attrs& a) {
  ASSIGN_OR_RETURN(std::vector<int64_t> starts, ConstIntsAt(c, ins, 1));
  ASSIGN_OR_RETURN(std::vector<int64_t> ends, ConstIntsAt(c, ins, 2));
  std::vector<int64_t> axes, steps;
  if (Has(ins, 3)) {
    ASSIGN_OR_RETURN(axes, ConstIntsAt(c, ins, 3));
  }
  if (Has(ins, 4)) {
    ASSIGN_OR_RETURN(steps, ConstIntsAt(c, ins, 4));
  }
  if (axes.empty())
    for (size_t i = 0; i < starts.size(); ++i) axes.push_back(static_cast<int64_t>(i));
  if (steps.empty()) steps.assign(starts.size(), 1);
  if (ends.size() != starts.size() || axes.size() != starts.size() || steps.size() != starts.size()) {
    return c.error("starts, ends, axes and steps differ in length");
  }
  const int64_t r = x.rank();
  std::vector<int64_t> st(static_cast<size_t>(r), 0), en = x.dims(), sp(static_cast<size_t>(r), 1);
  std::vector<bool> seen(static_cast<size_t>(r), false);
  for (size_t i = 0; i < starts.size(); ++i) {
    const int64_t ax = axes[i] < 0 ? axes[i] + r : axes[i];
    if (ax < 0 || ax >= r || seen[static_cast<size_t>(ax)]) {
      return c.error("bad or repeated axis " + std::to_string(axes[i]) + " for " + x.ToString());
    }
    seen[static_cast<size_t>(ax)] = true;
    if (steps[i] == 0) return c.error("slice step 0");
    const int64_t dim = x[static_cast<int>(ax)];
    int64_t b = starts[i] < 0 ? starts[i] + dim : starts[i], e = ends[i] < 0 ? ends[i] + dim : ends[i];
    if (steps[i] > 0) {
      b = std::clamp(b, int64_t{0}, dim);
      e = std::clamp(e, int64_t{0}, dim);
    } else {
      b = std::clamp(b, int64_t{0}, dim - 1);
      e = std::clamp(e, int64_t{-1}, dim - 1);
    }
    st[static_cast<size_t>(ax)] = b;
    en[static_cast<size_t>(ax)] = e;
    sp[static_cast<size_t>(ax)] = steps[i];
  }
  a.Set("starts", st);
  a.Set("ends", en);
  a.Set("steps", sp);
  ins.resize(1);
  return Status::Ok();
}

// ConstantOfShape(shape) with its one-element tensor attribute `value` (float32 0 if absent).
Status LowerConstantOfShape(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, Attrs& a) {
  ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstIntsAt(c, ins, 0));
  RETURN_IF_ERROR(CheckedDims(c, shape));
  a = Attrs();
  a.Set("shape", shape);
  a.Set("dtype", static_cast<int64_t>(DType::kF32));
  for (const auto& at : c.proto.attribute()) {
    if (at.name() != "value") continue;
    ASSIGN_OR_RETURN(Tensor t, TensorFromProto(at.t(), c.what + " value"));
    if (t.numel() != 1) return c.error("value must have one element");
    double v = 0;
    switch (t.dtype()) {
      case DType::kF32: v = t.data<float>()[0]; break;
      case DType::kI64: v = static_cast<double>(t.data<int64_t>()[0]); break;
      case DType::kI32: v = t.data<int32_t>()[0]; break;
      case DType::kBool: v = t.data<bool>()[0] ? 1 : 0; break;
      case DType::kU8: v = t.data<uint8_t>()[0]; break;
    }
    a.Set("value", v);
    a.Set("dtype", static_cast<int64_t>(t.dtype()));
  }
  return Status::Ok();
}

Status LowerRange(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, Attrs& a) {
  ASSIGN_OR_RETURN(double start, ConstScalarAt(c, ins, 0));
  ASSIGN_OR_RETURN(double limit, ConstScalarAt(c, ins, 1));
  ASSIGN_OR_RETURN(double delta, ConstScalarAt(c, ins, 2));
  if (delta == 0 || !std::isfinite(start) || !std::isfinite(limit) || !std::isfinite(delta)) {
    return c.error("Range needs finite start, limit and a delta other than 0");
  }
  const double len = std::max(std::ceil((limit - start) / delta), 0.0);
  if (!(len <= double{1LL << 40})) return c.error("Range of " + std::to_string(len) + " elements is out of range");
  const auto size = static_cast<int64_t>(len);
  RETURN_IF_ERROR(CheckedDims(c, {size}));
  a.Set("size", size);
  return Status::Ok();
}

// Reduce*: `axes` from input 1 (ReduceSum from opset 13, the others from 18) or from the attribute
// (before 18), normalised and sorted. No axes reduce all of them, or none with noop_with_empty_axes.
Status LowerReduce(const OnnxNodeCtx& c, const Shape& x, std::vector<ValueId>& ins, Attrs& a) {
  const bool input_form = c.proto.op_type() == "ReduceSum" || c.graph.opset >= 18;
  std::vector<int64_t> axes;
  if (input_form) {
    if (a.Has("axes")) return c.error("takes its axes as input 1 from opset " + std::string(c.proto.op_type() == "ReduceSum" ? "13" : "18") + ", not as an attribute");
    if (Has(ins, 1)) {
      ASSIGN_OR_RETURN(axes, ConstIntsAt(c, ins, 1));
    }
  } else {
    if (ins.size() > 1) return c.error("takes its axes as an attribute before opset 18, not as input 1");
    axes = a.Ints("axes");
  }
  const bool noop = a.Int("noop_with_empty_axes", 0) != 0;
  std::vector<int64_t> norm;
  for (int64_t ax : axes) {
    const int64_t k = ax < 0 ? ax + x.rank() : ax;
    if (k < 0 || k >= x.rank()) return c.error("axis " + std::to_string(ax) + " is out of range for " + x.ToString());
    if (std::find(norm.begin(), norm.end(), k) != norm.end()) return c.error("axis " + std::to_string(ax) + " is repeated");
    norm.push_back(k);
  }
  if (norm.empty() && !noop)
    for (int64_t i = 0; i < x.rank(); ++i) norm.push_back(i);
  std::sort(norm.begin(), norm.end());
  const int64_t keepdims = a.Int("keepdims", 1);
  a = Attrs();
  a.Set("axes", norm);
  a.Set("keepdims", int64_t{keepdims != 0});
  ins.resize(1);
  return Status::Ok();
}

// Conv, MaxPool, AveragePool on NCHW: kernel (Conv: the weight's, which kernel_shape must match),
// strides, dilations and pads [top, left, bottom, right], auto_pad resolved into pads.
Status LowerWindow(const OnnxNodeCtx& c, OpKind k, const Shape& x, const std::vector<ValueId>& ins, Attrs& a) {
  if (x.rank() != 4) return c.error("flowrun runs 2-D " + c.proto.op_type() + " on [N, C, H, W] inputs, got " + x.ToString());
  std::vector<int64_t> kernel = a.Ints("kernel_shape");
  if (k == OpKind::kConv) {
    const Shape& w = c.graph.type(ins[1]).shape;
    if (w.rank() != 4) return c.error("the weight must be [M, C / group, kH, kW], got " + w.ToString());
    if (!kernel.empty() && kernel != std::vector<int64_t>{w[2], w[3]}) return c.error("kernel_shape differs from the weight's");
    kernel = {w[2], w[3]};
  }
  if (kernel.size() != 2) return c.error("needs a 2-D kernel_shape");
  const std::vector<int64_t> strides = a.IntsOr("strides", {1, 1}), dilations = a.IntsOr("dilations", {1, 1});
  std::vector<int64_t> pads = a.IntsOr("pads", {0, 0, 0, 0});
  if (strides.size() != 2 || dilations.size() != 2 || pads.size() != 4) return c.error("strides, dilations and pads must be 2-D");
  for (int64_t v : strides)
    if (v < 1) return c.error("strides must be >= 1");
  for (int64_t v : dilations)
    if (v < 1) return c.error("dilations must be >= 1");
  if (k == OpKind::kAveragePool && dilations != std::vector<int64_t>{1, 1}) return c.error("AveragePool with dilations is not supported");
  if (a.Int("storage_order") != 0) return c.error("storage_order 1 (column-major indices) is not supported");
  const std::string auto_pad = a.Str("auto_pad", "NOTSET");
  if (auto_pad == "VALID") {
    pads = {0, 0, 0, 0};
  } else if (auto_pad == "SAME_UPPER" || auto_pad == "SAME_LOWER") {
    for (int i = 0; i < 2; ++i) {
      const int64_t in = x[2 + i], out = (in + strides[static_cast<size_t>(i)] - 1) / strides[static_cast<size_t>(i)];
      const int64_t total = std::max<int64_t>(0, (out - 1) * strides[static_cast<size_t>(i)] +
                                                    (kernel[static_cast<size_t>(i)] - 1) * dilations[static_cast<size_t>(i)] + 1 - in);
      const int64_t small = total / 2, big = total - small;
      pads[static_cast<size_t>(i)] = auto_pad == "SAME_UPPER" ? small : big;
      pads[static_cast<size_t>(i) + 2] = auto_pad == "SAME_UPPER" ? big : small;
    }
  } else if (auto_pad != "NOTSET") {
    return c.error("auto_pad '" + auto_pad + "' is not one ONNX defines");
  }
  Attrs out;
  out.Set("kernel", kernel);
  out.Set("strides", strides);
  out.Set("dilations", dilations);
  out.Set("pads", pads);
  if (k == OpKind::kConv) out.Set("group", a.Int("group", 1));
  if (k != OpKind::kConv) out.Set("ceil_mode", int64_t{a.Int("ceil_mode") != 0});
  if (k == OpKind::kAveragePool) out.Set("count_include_pad", int64_t{a.Int("count_include_pad") != 0});
  a = out;
  return Status::Ok();
}

// Pad(X, pads, constant_value?, axes?): pads [begin..., end...] over `axes` (all by default), the
// value a constant scalar (0 by default) for mode constant; modes reflect, edge and wrap (opset 19).
Status LowerPad(const OnnxNodeCtx& c, const Shape& x, std::vector<ValueId>& ins, Attrs& a) {
  const std::string mode = a.Str("mode", "constant");
  const int64_t kind = mode == "constant" ? 0 : mode == "reflect" ? 1 : mode == "edge" ? 2 : mode == "wrap" ? 3 : -1;
  if (kind < 0 || (kind == 3 && c.graph.opset < 19)) {
    return c.error("mode '" + mode + "' is not a Pad mode of opset " + std::to_string(c.graph.opset) + " (constant, reflect, edge; wrap from 19)");
  }
  ASSIGN_OR_RETURN(std::vector<int64_t> pads, ConstIntsAt(c, ins, 1));
  double value = 0;
  if (Has(ins, 2)) {
    ASSIGN_OR_RETURN(value, ConstScalarAt(c, ins, 2));
  }
  std::vector<int64_t> axes;
  if (Has(ins, 3)) {
    ASSIGN_OR_RETURN(axes, ConstIntsAt(c, ins, 3));
  } else {
    for (int64_t i = 0; i < x.rank(); ++i) axes.push_back(i);
  }
  if (pads.size() != 2 * axes.size()) return c.error("needs 2 pads per padded axis");
  std::vector<int64_t> full(static_cast<size_t>(2 * x.rank()), 0);
  for (size_t i = 0; i < axes.size(); ++i) {
    const int64_t ax = axes[i] < 0 ? axes[i] + x.rank() : axes[i];
    if (ax < 0 || ax >= x.rank()) return c.error("axis " + std::to_string(axes[i]) + " is out of range for " + x.ToString());
    full[static_cast<size_t>(ax)] = pads[i];
    full[static_cast<size_t>(ax + x.rank())] = pads[i + axes.size()];
  }
  a = Attrs();
  a.Set("pads", full);
  a.Set("value", value);
  a.Set("mode", kind);
  ins.resize(1);
  return Status::Ok();
}

// Clip(X, min?, max?): the bounds, where given, are constant scalars.
Status LowerClip(const OnnxNodeCtx& c, std::vector<ValueId>& ins, Attrs& a) {
  a = Attrs();
  if (Has(ins, 1)) {
    ASSIGN_OR_RETURN(double lo, ConstScalarAt(c, ins, 1));
    a.Set("min", lo);
  }
  if (Has(ins, 2)) {
    ASSIGN_OR_RETURN(double hi, ConstScalarAt(c, ins, 2));
    a.Set("max", hi);
  }
  ins.resize(1);
  return Status::Ok();
}

}  // namespace

Result<std::vector<int64_t>> ReshapeTarget(const OnnxNodeCtx& c, const std::vector<ValueId>& ins, const Attrs& a) {
  const std::string& op = c.proto.op_type();
  const Shape& x = c.graph.type(ins[0]).shape;
  std::vector<int64_t> out;
  if (op == "Reshape") {
    ASSIGN_OR_RETURN(std::vector<int64_t> spec, ConstIntsAt(c, ins, 1));
    const bool allowzero = a.Int("allowzero") != 0;
    int64_t known = 1, infer_at = -1;
    for (size_t i = 0; i < spec.size(); ++i) {
      int64_t d = spec[i];
      if (d == 0 && !allowzero) {
        if (static_cast<int>(i) >= x.rank()) {
          return c.error("shape copies dim " + std::to_string(i) + " of a rank-" + std::to_string(x.rank()) + " input");
        }
        d = x[static_cast<int>(i)];
      }
      if (d == -1) {
        if (infer_at >= 0) return c.error("shape has more than one -1");
        infer_at = static_cast<int64_t>(i);
      } else if (d < 0) {
        return c.error("shape has a negative dimension " + std::to_string(d));
      } else if (__builtin_mul_overflow(known, d, &known)) {
        return c.error("shape " + Shape(spec).ToString() + " has more elements than int64 counts");
      }
      out.push_back(d);
    }
    if (infer_at >= 0) {
      if (known == 0 || x.numel() % known) return c.error("cannot reshape " + x.ToString() + " with a -1 in the shape");
      out[static_cast<size_t>(infer_at)] = x.numel() / known;
    }
  } else if (op == "Flatten") {
    int64_t axis = a.Int("axis", 1);
    if (axis < 0) axis += x.rank();
    if (axis < 0 || axis > x.rank()) return c.error("axis out of range");
    int64_t lead = 1;
    for (int i = 0; i < axis; ++i) lead *= x[i];
    out = {lead, x.numel() / (lead ? lead : 1)};
  } else {  // Squeeze / Unsqueeze: axes from input 1 (opset 13+)
    std::vector<int64_t> axes;
    if (Has(ins, 1)) {
      ASSIGN_OR_RETURN(axes, ConstIntsAt(c, ins, 1));
    }
    if (op == "Unsqueeze") {
      const int r = x.rank() + static_cast<int>(axes.size());
      std::vector<bool> inserted(static_cast<size_t>(r), false);
      for (int64_t ax : axes) {
        const int64_t k = ax < 0 ? ax + r : ax;
        if (k < 0 || k >= r || inserted[static_cast<size_t>(k)]) return c.error("bad axes");
        inserted[static_cast<size_t>(k)] = true;
      }
      for (int i = 0, j = 0; i < r; ++i) out.push_back(inserted[static_cast<size_t>(i)] ? 1 : x[j++]);
    } else {
      std::vector<bool> drop(static_cast<size_t>(x.rank()), axes.empty());
      for (int64_t ax : axes) {
        const int64_t k = ax < 0 ? ax + x.rank() : ax;
        if (k < 0 || k >= x.rank() || x[static_cast<int>(k)] != 1) {
          return c.error("cannot squeeze axis " + std::to_string(ax) + " of " + x.ToString());
        }
        drop[static_cast<size_t>(k)] = true;
      }
      for (int i = 0; i < x.rank(); ++i)
        if (!(drop[static_cast<size_t>(i)] && x[i] == 1)) out.push_back(x[i]);
    }
  }
  RETURN_IF_ERROR(CheckedDims(c, out));
  return out;
}

Status LowerOnnxNode(const OnnxNodeCtx& c, OpKind k, std::vector<ValueId>& ins, Attrs& a) {
  const Shape x = Has(ins, 0) ? c.graph.type(ins[0]).shape : Shape{};
  switch (k) {
    case OpKind::kSplit: return LowerSplit(c, x, ins, a);
    case OpKind::kSlice: return LowerSlice(c, x, ins, a);
    case OpKind::kExpand: {
      ASSIGN_OR_RETURN(std::vector<int64_t> shape, ConstIntsAt(c, ins, 1));
      RETURN_IF_ERROR(CheckedDims(c, shape));
      a.Set("shape", shape);
      ins.resize(1);
      return Status::Ok();
    }
    case OpKind::kTrilu:
      if (Has(ins, 1)) {
        ASSIGN_OR_RETURN(std::vector<int64_t> kv, ConstIntsAt(c, ins, 1));
        if (kv.size() != 1) return c.error("k must be one integer");
        a.Set("k", kv[0]);
      }
      ins.resize(1);
      return Status::Ok();
    case OpKind::kCast: {
      ASSIGN_OR_RETURN(DType to, DTypeFromOnnx(static_cast<int32_t>(a.Int("to", 0)), c.what + " (Cast) target"));
      a = Attrs();
      a.Set("dtype", static_cast<int64_t>(to));
      return Status::Ok();
    }
    case OpKind::kConstantOfShape: return LowerConstantOfShape(c, ins, a);
    case OpKind::kRange: return LowerRange(c, ins, a);
    case OpKind::kReduceMean:
      if (c.proto.op_type() == "GlobalAveragePool") {  // the mean over every axis past N and C
        if (x.rank() < 3) return c.error("needs an input [N, C, ...], got " + x.ToString());
        std::vector<int64_t> axes;
        for (int64_t i = 2; i < x.rank(); ++i) axes.push_back(i);
        a = Attrs();
        a.Set("axes", axes);
        a.Set("keepdims", int64_t{1});
        return Status::Ok();
      }
      return LowerReduce(c, x, ins, a);
    case OpKind::kReduceSum:
    case OpKind::kReduceMax: return LowerReduce(c, x, ins, a);
    case OpKind::kConv:
    case OpKind::kMaxPool:
    case OpKind::kAveragePool: return LowerWindow(c, k, x, ins, a);
    case OpKind::kClip: return LowerClip(c, ins, a);
    case OpKind::kTile: {
      ASSIGN_OR_RETURN(std::vector<int64_t> repeats, ConstIntsAt(c, ins, 1));
      a = Attrs();
      a.Set("repeats", repeats);
      ins.resize(1);
      return Status::Ok();
    }
    case OpKind::kPad: return LowerPad(c, x, ins, a);
    case OpKind::kScatterND: {  // reduction none or add; mul, max and min have no gradient here
      const std::string r = a.Str("reduction", "none");
      if (r != "none" && r != "add") return c.error("reduction '" + r + "' is not supported (none or add)");
      a = Attrs();
      a.Set("add", int64_t{r == "add"});
      return Status::Ok();
    }
    default: return Status::Ok();
  }
}

}  // namespace fr::ir
