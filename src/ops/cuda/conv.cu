// CUDA kernels of the convolutional ops (ops/conv.cpp).
//
// Conv and its two gradients run on cuDNN (its convolution API), restricted to the algorithms
// cuDNN reports deterministic, and to direct sums in FMA math (no FFT or Winograd) unless TF32 is
// allowed (parallel.tf32), as the GEMMs are. cuDNN pads symmetrically; a node with uneven pads (ONNX's SAME_UPPER, for one) runs
// on an explicitly padded copy of its input, and its data gradient is cropped from the padded
// one.
//
// The pools are flowrun's own kernels: cuDNN's pooling has no dilation, no uneven pads and no
// ceil_mode, and does not specify which of tied maxima takes the gradient, where the CPU gives
// it to the first (as PyTorch does). Each output, and each input's gradient, is one thread that
// reads its windows in the CPU's order, so the pools give the CPU's bits.
#include <cudnn.h>

#include <array>
#include <climits>
#include <map>

#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

// A node's window and the sizes around it, as the CPU kernels' Geometry.
struct Geometry {
  int64_t n, c, h, w;  // input
  int64_t m, oh, ow;   // output channels and size
  int64_t kh, kw, sh, sw, pt, pl, pb, pr, dh, dw, group;
  bool even() const { return pt == pb && pl == pr; }
  int64_t hp() const { return h + pt + pb; }  // padded input
  int64_t wp() const { return w + pl + pr; }
};

Geometry GeometryOf(const ir::Node& node, const fr::Shape& x, const fr::Shape& y) {
  const auto k = node.attrs.Ints("kernel"), s = node.attrs.IntsOr("strides", {1, 1}),
             p = node.attrs.IntsOr("pads", {0, 0, 0, 0}), d = node.attrs.IntsOr("dilations", {1, 1});
  return {x[0], x[1], x[2], x[3], y[1], y[2], y[3], k[0], k[1], s[0], s[1], p[0], p[1], p[2], p[3], d[0], d[1],
          node.attrs.Int("group", 1)};
}

// ---- cuDNN convolutions ----

Status Cudnn(const KernelCtx& c, cudnnStatus_t s, const char* call) {
  if (s == CUDNN_STATUS_SUCCESS) return Launched(c);
  return Status::Runtime("[cuda] " + c.node.name + ": cuDNN " + call + ": " + cudnnGetErrorString(s));
}

// This thread's cuDNN handle (ThreadHandles, common.cuh), bound to the kernel's stream.
Result<cudnnHandle_t> Handle(const KernelCtx& c) {
  cudnnStatus_t made = CUDNN_STATUS_SUCCESS;
  cudnnHandle_t h = ThreadHandles<cudnnHandle_t>::Get([&](cudnnHandle_t* out) {
    made = cudnnCreate(out);
    return made == CUDNN_STATUS_SUCCESS;
  });
  if (!h)
    return Status::Runtime("[cuda] " + c.node.name + ": cudnnCreate: " + cudnnGetErrorString(made) +
                           " (is cuDNN 9 on the library path?)");
  cudnnSetStream(h, StreamOf(c));
  return h;
}

// cuDNN's workspace, at most this much: an algorithm that wants more is passed over.
constexpr size_t kMaxWorkspace = size_t{1} << 30;

enum class Pass { kForward, kData, kWeight };

// The descriptors of one convolution, on the padded input where the pads are uneven.
class ConvDescs {
 public:
  ConvDescs() {
    cudnnCreateTensorDescriptor(&x);
    cudnnCreateTensorDescriptor(&y);
    cudnnCreateTensorDescriptor(&bias);
    cudnnCreateFilterDescriptor(&w);
    cudnnCreateConvolutionDescriptor(&conv);
  }
  ~ConvDescs() {
    cudnnDestroyTensorDescriptor(x);
    cudnnDestroyTensorDescriptor(y);
    cudnnDestroyTensorDescriptor(bias);
    cudnnDestroyFilterDescriptor(w);
    cudnnDestroyConvolutionDescriptor(conv);
  }
  ConvDescs(const ConvDescs&) = delete;
  ConvDescs& operator=(const ConvDescs&) = delete;

  Status Set(const KernelCtx& c, const Geometry& g, bool tf32) {
    for (int64_t v : {g.n, g.c, g.hp(), g.wp(), g.m, g.oh, g.ow, g.n * g.c * g.hp() * g.wp(), g.n * g.m * g.oh * g.ow}) {
      if (v > INT_MAX) return Status::Invalid("[cuda] " + c.node.name + ": a convolution over more than 2^31 elements");
    }
    const int ph = g.even() ? static_cast<int>(g.pt) : 0, pw = g.even() ? static_cast<int>(g.pl) : 0;
    const int h = static_cast<int>(g.even() ? g.h : g.hp()), w_ = static_cast<int>(g.even() ? g.w : g.wp());
    RETURN_IF_ERROR(Cudnn(c, cudnnSetTensor4dDescriptor(x, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, int(g.n), int(g.c), h, w_),
                          "cudnnSetTensor4dDescriptor"));
    RETURN_IF_ERROR(Cudnn(c, cudnnSetTensor4dDescriptor(y, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, int(g.n), int(g.m), int(g.oh), int(g.ow)),
                          "cudnnSetTensor4dDescriptor"));
    RETURN_IF_ERROR(Cudnn(c, cudnnSetTensor4dDescriptor(bias, CUDNN_TENSOR_NCHW, CUDNN_DATA_FLOAT, 1, int(g.m), 1, 1),
                          "cudnnSetTensor4dDescriptor"));
    RETURN_IF_ERROR(Cudnn(c, cudnnSetFilter4dDescriptor(w, CUDNN_DATA_FLOAT, CUDNN_TENSOR_NCHW, int(g.m), int(g.c / g.group),
                                                        int(g.kh), int(g.kw)),
                          "cudnnSetFilter4dDescriptor"));
    RETURN_IF_ERROR(Cudnn(c, cudnnSetConvolution2dDescriptor(conv, ph, pw, int(g.sh), int(g.sw), int(g.dh), int(g.dw),
                                                             CUDNN_CROSS_CORRELATION, CUDNN_DATA_FLOAT),
                          "cudnnSetConvolution2dDescriptor"));
    RETURN_IF_ERROR(Cudnn(c, cudnnSetConvolutionGroupCount(conv, static_cast<int>(g.group)), "cudnnSetConvolutionGroupCount"));
    return Cudnn(c, cudnnSetConvolutionMathType(conv, tf32 ? CUDNN_DEFAULT_MATH : CUDNN_FMA_MATH), "cudnnSetConvolutionMathType");
  }

  cudnnTensorDescriptor_t x = nullptr, y = nullptr, bias = nullptr;  // bias: [1, M, 1, 1]
  cudnnFilterDescriptor_t w = nullptr;
  cudnnConvolutionDescriptor_t conv = nullptr;
};

// The algorithm of a pass, chosen once per shape on each thread: the first of cuDNN's heuristic
// ranking that is deterministic, uses neither tensor cores nor a transform unless TF32 is allowed,
// and needs at most kMaxWorkspace.
struct Choice {
  int algo = -1;
  cudnnMathType_t math = CUDNN_FMA_MATH;
  size_t workspace = 0;
};

// The pass, TF32, and the geometry's sizes.
using ChoiceKey = std::array<int64_t, 20>;

// The algorithms that convolve in a transformed domain (FFT, Winograd): their rounding errors
// exceed a direct sum's, so FP32 without TF32 does not use them.
bool Transforms(cudnnConvolutionFwdAlgo_t a) {
  return a == CUDNN_CONVOLUTION_FWD_ALGO_FFT || a == CUDNN_CONVOLUTION_FWD_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_FWD_ALGO_WINOGRAD_NONFUSED;
}
bool Transforms(cudnnConvolutionBwdDataAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_DATA_ALGO_WINOGRAD_NONFUSED;
}
bool Transforms(cudnnConvolutionBwdFilterAlgo_t a) {
  return a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_FFT_TILING ||
         a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD || a == CUDNN_CONVOLUTION_BWD_FILTER_ALGO_WINOGRAD_NONFUSED;
}

template <typename Perf>
bool Acceptable(const Perf& p, bool tf32) {
  return p.status == CUDNN_STATUS_SUCCESS && p.determinism == CUDNN_DETERMINISTIC && p.memory <= kMaxWorkspace &&
         (tf32 || (p.mathType != CUDNN_TENSOR_OP_MATH && p.mathType != CUDNN_TENSOR_OP_MATH_ALLOW_CONVERSION &&
                   !Transforms(p.algo)));
}

template <typename Perf, typename Get>
Result<Choice> Pick(const KernelCtx& c, bool tf32, Get get, const char* call) {
  Perf perf[16];
  int got = 0;
  RETURN_IF_ERROR(Cudnn(c, get(perf, 16, &got), call));
  for (int i = 0; i < got; ++i) {
    if (Acceptable(perf[i], tf32)) return Choice{static_cast<int>(perf[i].algo), perf[i].mathType, perf[i].memory};
  }
  return Status::Runtime("[cuda] " + c.node.name + ": cuDNN offers no deterministic algorithm for this convolution");
}

Result<Choice> ChooseUncached(const KernelCtx& c, cudnnHandle_t h, const ConvDescs& d, Pass pass, bool tf32) {
  switch (pass) {
    case Pass::kForward:
      return Pick<cudnnConvolutionFwdAlgoPerf_t>(
          c, tf32,
          [&](cudnnConvolutionFwdAlgoPerf_t* p, int n, int* got) {
            return cudnnGetConvolutionForwardAlgorithm_v7(h, d.x, d.w, d.conv, d.y, n, got, p);
          },
          "cudnnGetConvolutionForwardAlgorithm_v7");
    case Pass::kData:
      return Pick<cudnnConvolutionBwdDataAlgoPerf_t>(
          c, tf32,
          [&](cudnnConvolutionBwdDataAlgoPerf_t* p, int n, int* got) {
            return cudnnGetConvolutionBackwardDataAlgorithm_v7(h, d.w, d.y, d.conv, d.x, n, got, p);
          },
          "cudnnGetConvolutionBackwardDataAlgorithm_v7");
    case Pass::kWeight:
      break;
  }
  return Pick<cudnnConvolutionBwdFilterAlgoPerf_t>(
      c, tf32,
      [&](cudnnConvolutionBwdFilterAlgoPerf_t* p, int n, int* got) {
        return cudnnGetConvolutionBackwardFilterAlgorithm_v7(h, d.x, d.y, d.conv, d.w, n, got, p);
      },
      "cudnnGetConvolutionBackwardFilterAlgorithm_v7");
}

Result<Choice> Choose(const KernelCtx& c, cudnnHandle_t h, const ConvDescs& d, const Geometry& g, Pass pass, bool tf32) {
  thread_local std::map<ChoiceKey, Choice> chosen;
  const ChoiceKey key{static_cast<int64_t>(pass), tf32, g.n, g.c, g.h, g.w, g.m, g.oh, g.ow, g.kh, g.kw, g.sh, g.sw,
                      g.pt, g.pl, g.pb, g.pr, g.dh, g.dw, g.group};
  if (auto it = chosen.find(key); it != chosen.end()) return it->second;
  ASSIGN_OR_RETURN(Choice pick, ChooseUncached(c, h, d, pass, tf32));
  chosen.emplace(key, pick);
  return pick;
}

// xp[p][y][x] = x[p][y - pt][x - pl] inside, 0 in the pads.
__global__ void PadPlanes(const float* x, float* xp, int64_t planes, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t pt,
                          int64_t pl) {
  FR_GRID_LOOP(i, planes * hp * wp) {
    const int64_t xx = i % wp - pl, yy = i / wp % hp - pt, p = i / (wp * hp);
    xp[i] = yy >= 0 && yy < h && xx >= 0 && xx < w ? x[(p * h + yy) * w + xx] : 0.f;
  }
}

// The inverse: dx[p][y][x] = dxp[p][y + pt][x + pl].
__global__ void CropPlanes(const float* dxp, float* dx, int64_t planes, int64_t h, int64_t w, int64_t hp, int64_t wp, int64_t pt,
                           int64_t pl) {
  FR_GRID_LOOP(i, planes * h * w) {
    const int64_t xx = i % w, yy = i / w % h, p = i / (w * h);
    dx[i] = dxp[(p * hp + yy + pt) * wp + xx + pl];
  }
}

// The input (or its gradient) as cuDNN sees it: the tensor itself, or a padded copy of it.
class PaddedInput {
 public:
  PaddedInput(const Geometry& g, cudaStream_t s)
      : g_(g), s_(s), mem_(g.even() ? 0 : static_cast<size_t>(g.n * g.c * g.hp() * g.wp()) * sizeof(float), s) {}
  bool ok() const { return g_.even() || mem_.ok(); }
  // The padded copy of x (or x itself).
  const float* From(const float* x) {
    if (g_.even()) return x;
    const int64_t planes = g_.n * g_.c;
    PadPlanes<<<Blocks(planes * g_.hp() * g_.wp()), kThreads, 0, s_>>>(x, mem_.as<float>(), planes, g_.h, g_.w, g_.hp(), g_.wp(),
                                                                        g_.pt, g_.pl);
    return mem_.as<float>();
  }
  // Where a gradient for the padded input goes (dx itself when even); Crop then fills dx.
  float* Target(float* dx) { return g_.even() ? dx : mem_.as<float>(); }
  void Crop(float* dx) {
    if (g_.even()) return;
    const int64_t planes = g_.n * g_.c;
    CropPlanes<<<Blocks(planes * g_.h * g_.w), kThreads, 0, s_>>>(mem_.as<float>(), dx, planes, g_.h, g_.w, g_.hp(), g_.wp(), g_.pt,
                                                                   g_.pl);
  }

 private:
  Geometry g_;
  cudaStream_t s_;
  Scratch mem_;
};

// Runs `pass` of the node's convolution: sets up the descriptors, the algorithm and its workspace,
// and calls run(handle, descriptors, algorithm, workspace, bytes).
template <typename Run>
Status Convolve(const KernelCtx& c, const Geometry& g, Pass pass, Run run) {
  const bool tf32 = Tf32Math();
  ASSIGN_OR_RETURN(cudnnHandle_t h, Handle(c));
  ConvDescs d;
  RETURN_IF_ERROR(d.Set(c, g, tf32));
  ASSIGN_OR_RETURN(Choice choice, Choose(c, h, d, g, pass, tf32));
  if (tf32) RETURN_IF_ERROR(Cudnn(c, cudnnSetConvolutionMathType(d.conv, choice.math), "cudnnSetConvolutionMathType"));
  Scratch workspace(choice.workspace, StreamOf(c));
  if (!workspace.ok()) return NoScratch(c, "cuDNN's workspace of " + std::to_string(choice.workspace) + " bytes");
  return run(h, d, choice.algo, workspace.as<void>(), choice.workspace);
}

bool Empty(const KernelCtx& c) {
  for (const Tensor& t : c.out) {
    if (t.numel() == 0) return true;
  }
  return false;
}

const float kOne = 1.f, kZero = 0.f;

}  // namespace

Status Conv(const KernelCtx& c) {
  const Tensor &X = c.in[0], &W = c.in[1], &Y = c.out[0];
  if (Empty(c)) return Status::Ok();
  const Geometry g = GeometryOf(c.node, X.shape(), Y.shape());
  cudaStream_t s = StreamOf(c);
  PaddedInput xp(g, s);
  if (!xp.ok()) return NoScratch(c, "the padded input");
  const float* x = xp.From(X.data<float>());
  const float* bias = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
  return Convolve(c, g, Pass::kForward, [&](cudnnHandle_t h, const ConvDescs& d, int algo, void* ws, size_t bytes) {
    RETURN_IF_ERROR(Cudnn(c,
                          cudnnConvolutionForward(h, &kOne, d.x, x, d.w, W.data<float>(), d.conv,
                                                  static_cast<cudnnConvolutionFwdAlgo_t>(algo), ws, bytes, &kZero, d.y, Y.data<float>()),
                          "cudnnConvolutionForward"));
    return bias ? Cudnn(c, cudnnAddTensor(h, &kOne, d.bias, bias, &kOne, d.y, Y.data<float>()), "cudnnAddTensor") : Status::Ok();
  });
}

Status ConvGradData(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &W = c.in[1], &dX = c.out[0];
  if (dX.numel() == 0) return Status::Ok();
  const Geometry g = GeometryOf(c.node, dX.shape(), dY.shape());
  cudaStream_t s = StreamOf(c);
  if (dY.numel() == 0) return Launched(c, cudaMemsetAsync(dX.raw(), 0, dX.bytes(), s));
  PaddedInput dxp(g, s);
  if (!dxp.ok()) return NoScratch(c, "the padded input's gradient");
  float* dx = dxp.Target(dX.data<float>());
  RETURN_IF_ERROR(Convolve(c, g, Pass::kData, [&](cudnnHandle_t h, const ConvDescs& d, int algo, void* ws, size_t bytes) {
    return Cudnn(c,
                 cudnnConvolutionBackwardData(h, &kOne, d.w, W.data<float>(), d.y, dY.data<float>(), d.conv,
                                              static_cast<cudnnConvolutionBwdDataAlgo_t>(algo), ws, bytes, &kZero, d.x, dx),
                 "cudnnConvolutionBackwardData");
  }));
  dxp.Crop(dX.data<float>());
  return Launched(c);
}

Status ConvGradWeight(const KernelCtx& c) {
  const Tensor &dY = c.in[0], &X = c.in[1], &dW = c.out[0];
  if (dW.numel() == 0) return Status::Ok();
  const Geometry g = GeometryOf(c.node, X.shape(), dY.shape());
  cudaStream_t s = StreamOf(c);
  if (dY.numel() == 0) return Launched(c, cudaMemsetAsync(dW.raw(), 0, dW.bytes(), s));
  PaddedInput xp(g, s);
  if (!xp.ok()) return NoScratch(c, "the padded input");
  const float* x = xp.From(X.data<float>());
  return Convolve(c, g, Pass::kWeight, [&](cudnnHandle_t h, const ConvDescs& d, int algo, void* ws, size_t bytes) {
    return Cudnn(c,
                 cudnnConvolutionBackwardFilter(h, &kOne, d.x, x, d.y, dY.data<float>(), d.conv,
                                                static_cast<cudnnConvolutionBwdFilterAlgo_t>(algo), ws, bytes, &kZero, d.w,
                                                dW.data<float>()),
                 "cudnnConvolutionBackwardFilter");
  });
}

// ---- Pools ----

namespace {

// The flat index in its plane of output (oy, ox)'s maximum, as the CPU's ArgMax picks it: the
// first in scan order, or the last NaN; -1 for a window entirely in the padding.
__device__ int64_t ArgMaxOf(const Geometry& g, const float* plane, int64_t oy, int64_t ox) {
  const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
  float best = -INFINITY;
  int64_t arg = -1;
  for (int64_t i = 0; i < g.kh; ++i) {
    const int64_t iy = y0 + i * g.dh;
    if (iy < 0 || iy >= g.h) continue;
    for (int64_t j = 0; j < g.kw; ++j) {
      const int64_t ix = x0 + j * g.dw;
      if (ix < 0 || ix >= g.w) continue;
      const int64_t idx = iy * g.w + ix;
      if (arg < 0) arg = idx;
      if (plane[idx] > best || isnan(plane[idx])) {
        best = plane[idx];
        arg = idx;
      }
    }
  }
  return arg;
}

__global__ void MaxPoolK(Geometry g, const float* x, float* y) {
  FR_GRID_LOOP(o, g.n * g.c * g.oh * g.ow) {
    const int64_t ox = o % g.ow, oy = o / g.ow % g.oh, p = o / (g.ow * g.oh);
    const float* plane = x + p * g.h * g.w;
    const int64_t at = ArgMaxOf(g, plane, oy, ox);
    y[o] = at >= 0 ? plane[at] : -INFINITY;
  }
}

// Calls f(oy, ox) for every output whose window reads input (iy, ix) at a window position
// (i, j), in the CPU's scan order of outputs (oy, then ox, ascending).
template <typename F>
__device__ void ForEachCovering(const Geometry& g, int64_t iy, int64_t ix, int64_t dh, int64_t dw, F f) {
  for (int64_t i = g.kh - 1; i >= 0; --i) {  // oy ascends as i descends
    const int64_t ty = iy + g.pt - i * dh;
    if (ty < 0 || ty % g.sh != 0 || ty / g.sh >= g.oh) continue;
    for (int64_t j = g.kw - 1; j >= 0; --j) {
      const int64_t tx = ix + g.pl - j * dw;
      if (tx < 0 || tx % g.sw != 0 || tx / g.sw >= g.ow) continue;
      f(ty / g.sh, tx / g.sw);
    }
  }
}

// dx[p][idx] = the sum, in output order, of dy over the outputs whose maximum idx is: the CPU's
// additions in the CPU's order.
__global__ void MaxPoolGradK(Geometry g, const float* dy, const float* x, float* dx) {
  FR_GRID_LOOP(e, g.n * g.c * g.h * g.w) {
    const int64_t ix = e % g.w, iy = e / g.w % g.h, p = e / (g.w * g.h);
    const float* plane = x + p * g.h * g.w;
    const float* dyp = dy + p * g.oh * g.ow;
    const int64_t idx = iy * g.w + ix;
    float sum = 0.f;
    ForEachCovering(g, iy, ix, g.dh, g.dw, [&](int64_t oy, int64_t ox) {
      if (ArgMaxOf(g, plane, oy, ox) == idx) sum += dyp[oy * g.ow + ox];
    });
    dx[e] = sum;
  }
}

// The CPU's Divisor: the window's part inside the padded input (count_include_pad), else inside
// the input.
__device__ int64_t DivisorOf(const Geometry& g, int64_t y0, int64_t x0, bool include_pad) {
  auto span = [](int64_t start, int64_t k, int64_t lo, int64_t hi) {
    const int64_t s = min(start + k, hi) - max(start, lo);
    return s > 0 ? s : int64_t{0};
  };
  const int64_t d = include_pad ? span(y0, g.kh, -g.pt, g.h + g.pb) * span(x0, g.kw, -g.pl, g.w + g.pr)
                                : span(y0, g.kh, 0, g.h) * span(x0, g.kw, 0, g.w);
  return d > 1 ? d : 1;
}

// AveragePool reads each window contiguously (the CPU's does not dilate it).
__global__ void AveragePoolK(Geometry g, const float* x, float* y, bool include_pad) {
  FR_GRID_LOOP(o, g.n * g.c * g.oh * g.ow) {
    const int64_t ox = o % g.ow, oy = o / g.ow % g.oh, p = o / (g.ow * g.oh);
    const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
    const float* plane = x + p * g.h * g.w;
    float sum = 0.f;
    for (int64_t iy = max(y0, int64_t{0}); iy < min(y0 + g.kh, g.h); ++iy)
      for (int64_t ix = max(x0, int64_t{0}); ix < min(x0 + g.kw, g.w); ++ix) sum += plane[iy * g.w + ix];
    y[o] = __fdiv_rn(sum, static_cast<float>(DivisorOf(g, y0, x0, include_pad)));
  }
}

__global__ void AveragePoolGradK(Geometry g, const float* dy, float* dx, bool include_pad) {
  FR_GRID_LOOP(e, g.n * g.c * g.h * g.w) {
    const int64_t ix = e % g.w, iy = e / g.w % g.h, p = e / (g.w * g.h);
    const float* dyp = dy + p * g.oh * g.ow;
    float sum = 0.f;
    ForEachCovering(g, iy, ix, 1, 1, [&](int64_t oy, int64_t ox) {
      const int64_t y0 = oy * g.sh - g.pt, x0 = ox * g.sw - g.pl;
      sum += __fdiv_rn(dyp[oy * g.ow + ox], static_cast<float>(DivisorOf(g, y0, x0, include_pad)));
    });
    dx[e] = sum;
  }
}

}  // namespace

Status MaxPool(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[0].shape(), c.out[0].shape());
  const int64_t n = c.out[0].numel();
  if (n) MaxPoolK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(g, c.in[0].data<float>(), c.out[0].data<float>());
  return Launched(c);
}

Status MaxPoolGrad(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[1].shape(), c.in[0].shape());
  const int64_t n = c.out[0].numel();
  if (n) MaxPoolGradK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(g, c.in[0].data<float>(), c.in[1].data<float>(), c.out[0].data<float>());
  return Launched(c);
}

Status AveragePool(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.in[0].shape(), c.out[0].shape());
  const int64_t n = c.out[0].numel();
  const bool include_pad = c.node.attrs.Int("count_include_pad") != 0;
  if (n) AveragePoolK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(g, c.in[0].data<float>(), c.out[0].data<float>(), include_pad);
  return Launched(c);
}

Status AveragePoolGrad(const KernelCtx& c) {
  const Geometry g = GeometryOf(c.node, c.out[0].shape(), c.in[0].shape());
  const int64_t n = c.out[0].numel();
  const bool include_pad = c.node.attrs.Int("count_include_pad") != 0;
  if (n) AveragePoolGradK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(g, c.in[0].data<float>(), c.out[0].data<float>(), include_pad);
  return Launched(c);
}

}  // namespace fr::cuda
