// CUDA kernels of the reductions, the losses and the optimizer: SumTo and the Reduce ops, cross
// entropy and MSE with their gradients, the gradient norm (SquareSum, AddN, ClipCoef), and the
// SGD and AdamW updates, multi-tensor. Sums accumulate in double, as on the CPU, and always combine in the same
// order: a whole-tensor sum is a fixed number of blocks (a function of the size alone) whose
// partial sums one block then adds in order; an output of a reduction is one column of threads.
#include <cmath>
#include <limits>
#include <optional>

#include "base/schedule.h"
#include "ops/cuda/common.cuh"
#include "ops/cuda/kernels.h"

namespace fr::cuda {
namespace {

// Blocks of a whole-tensor sum: enough to fill the GPU, fixed by n so that the order is too.
unsigned SumBlocks(int64_t n) { return static_cast<unsigned>(std::clamp<int64_t>((n + 4095) / 4096, 1, 1024)); }

template <typename F>
__global__ void PartialSums(int64_t n, F term, double* partial) {
  double s = 0;
  FR_GRID_LOOP(i, n) s += term(i);
  s = BlockSum(s);
  if (threadIdx.x == 0) partial[blockIdx.x] = s;
}

// out[0] = float(sum / divisor), or out[0] + float(sum) with `add`.
__global__ void FinishSum(const double* partial, int blocks, float* out, double divisor) {
  double s = 0;
  for (int b = threadIdx.x; b < blocks; b += blockDim.x) s += partial[b];
  s = BlockSum(s);
  if (threadIdx.x == 0) out[0] = static_cast<float>(s / divisor);
}

// out[0] = float(sum of term(i) for i < n / divisor), deterministic.
template <typename F>
Status SumAll(const KernelCtx& c, int64_t n, F term, float* out, double divisor) {
  cudaStream_t s = StreamOf(c);
  const unsigned blocks = SumBlocks(n);
  Scratch partial(blocks * sizeof(double), s);
  if (!partial.ok()) return NoScratch(c, "a reduction's scratch");
  PartialSums<<<blocks, kThreads, 0, s>>>(n, term, partial.as<double>());
  FinishSum<<<1, kThreads, 0, s>>>(partial.as<double>(), static_cast<int>(blocks), out, divisor);
  return Launched(c);
}

// A reduction of x onto `kept` (x's shape with 1 on the reduced axes): the output's axes and the
// reduced ones, each with its stride in x. Adjacent axes of one kind merge (x is contiguous), so
// that a bias gradient is one reduced axis and one kept, and finding an offset divides little.
struct Reduction {
  int out_rank = 0, red_rank = 0;
  int64_t out_dims[kMaxRank] = {}, out_stride[kMaxRank] = {};
  int64_t red_dims[kMaxRank] = {}, red_stride[kMaxRank] = {};
  int64_t outputs = 1, reduced = 1;
  __device__ static int64_t Walk(int64_t i, int rank, const int64_t* dims, const int64_t* stride) {
    if (rank == 1) return i * stride[0];
    int64_t off = 0;
    for (int d = rank - 1; d >= 0; --d) {
      const int64_t q = IDiv(i, dims[d]);
      off += (i - q * dims[d]) * stride[d];
      i = q;
    }
    return off;
  }
  __device__ int64_t Out(int64_t o) const { return Walk(o, out_rank, out_dims, out_stride); }
  __device__ int64_t Red(int64_t t) const { return Walk(t, red_rank, red_dims, red_stride); }
};

bool MakeReduction(const fr::Shape& x, const fr::Shape& kept, Reduction* r) {
  if (x.rank() > kMaxRank) return false;
  const std::vector<int64_t> st = Strides(x);
  bool last_reduced = false;
  for (int d = 0; d < x.rank(); ++d) {
    if (x[d] == 1) continue;  // no offset to add
    const bool reduced = kept[d] == 1;
    int& rank = reduced ? r->red_rank : r->out_rank;
    int64_t* dims = reduced ? r->red_dims : r->out_dims;
    int64_t* stride = reduced ? r->red_stride : r->out_stride;
    if (rank > 0 && last_reduced == reduced && stride[rank - 1] == x[d] * st[static_cast<size_t>(d)]) {
      dims[rank - 1] *= x[d];  // the previous axis of this kind is the one just before: merge
      stride[rank - 1] = st[static_cast<size_t>(d)];
    } else {
      dims[rank] = x[d];
      stride[rank++] = st[static_cast<size_t>(d)];
    }
    (reduced ? r->reduced : r->outputs) *= x[d];
    last_reduced = reduced;
  }
  return true;
}

// A block is 32 outputs by kLanes lanes over one chunk of the reduced terms (ChunksOf); lane l
// folds its chunk's terms l, l + kLanes, ... in order, then lane 0 folds the lanes' results in
// order. With one chunk that is the output; with more, each chunk's result goes to `partial`
// ([chunk][output]) and FinishReduceK folds the chunks in order.
enum class Fold { kSum, kMax, kIntSum };

template <Fold kFold, typename Acc>
__device__ Acc FoldIn(Acc acc, Acc v) {
  if constexpr (kFold == Fold::kSum) return acc + v;
  else if constexpr (kFold == Fold::kIntSum) return static_cast<Acc>(static_cast<uint64_t>(acc) + static_cast<uint64_t>(v));
  else return (v > acc || isnan(v)) ? v : acc;
}

template <Fold kFold, typename T, typename Acc>
__device__ void Store(Acc total, T* y, int64_t o, bool adds, double divisor) {
  if constexpr (kFold == Fold::kSum) {
    const float f = static_cast<float>(total / divisor);
    y[o] = adds ? y[o] + f : f;
  } else {
    y[o] = static_cast<T>(total);
  }
}

template <Fold kFold, typename T, typename Acc>
__global__ void ReduceK(const T* x, Reduction r, T* y, Acc* partial, bool adds, double divisor) {
  __shared__ Acc part[kLanes][32];
  const int64_t o = static_cast<int64_t>(blockIdx.x) * 32 + threadIdx.x;
  Acc acc = kFold == Fold::kMax ? Acc(-INFINITY) : Acc(0);
  if (o < r.outputs) {
    const int64_t base = r.Out(o);
    int64_t begin, end;
    ChunkRange(r.reduced, &begin, &end);
    for (int64_t t = begin + threadIdx.y; t < end; t += kLanes) acc = FoldIn<kFold>(acc, static_cast<Acc>(x[base + r.Red(t)]));
  }
  part[threadIdx.y][threadIdx.x] = acc;
  __syncthreads();
  if (threadIdx.y != 0 || o >= r.outputs) return;
  Acc total = part[0][threadIdx.x];
  for (int l = 1; l < kLanes; ++l) total = FoldIn<kFold>(total, part[l][threadIdx.x]);
  if (gridDim.y == 1) Store<kFold>(total, y, o, adds, divisor);
  else partial[blockIdx.y * r.outputs + o] = total;
}

template <Fold kFold, typename T, typename Acc>
__global__ void FinishReduceK(const Acc* partial, int chunks, int64_t outputs, T* y, bool adds, double divisor) {
  FR_GRID_LOOP(o, outputs) {
    Acc total = partial[o];
    for (int k = 1; k < chunks; ++k) total = FoldIn<kFold>(total, partial[k * outputs + o]);
    Store<kFold>(total, y, o, adds, divisor);
  }
}

// Integer max, where -inf is not an int64.
__global__ void ReduceMaxI64(const int64_t* x, Reduction r, int64_t* y) {
  FR_GRID_LOOP(o, r.outputs) {
    const int64_t base = r.Out(o);
    int64_t m = std::numeric_limits<int64_t>::min();
    for (int64_t t = 0; t < r.reduced; ++t) m = max(m, x[base + r.Red(t)]);
    y[o] = m;
  }
}

template <Fold kFold, typename T, typename Acc>
Status Reduce(const KernelCtx& c, const fr::Shape& kept, bool adds, double divisor) {
  const Tensor &X = c.in[0], &Y = c.out[0];
  Reduction r;
  if (!MakeReduction(X.shape(), kept, &r)) return TooManyDims(c, X.shape().rank());
  if (r.outputs == 0) return Status::Ok();
  cudaStream_t s = StreamOf(c);
  const unsigned chunks = ChunksOf(r.outputs, r.reduced);
  std::optional<Scratch> partial;
  if (chunks > 1) {
    partial.emplace(chunks * static_cast<size_t>(r.outputs) * sizeof(Acc), s);
    if (!partial->ok()) return NoScratch(c, "a reduction's partial results");
  }
  Acc* parts = partial ? partial->as<Acc>() : nullptr;
  ReduceK<kFold, T, Acc><<<dim3(static_cast<unsigned>((r.outputs + 31) / 32), chunks), dim3(32, kLanes), 0, s>>>(
      static_cast<const T*>(X.raw()), r, static_cast<T*>(Y.raw()), parts, adds, divisor);
  if (chunks > 1)
    FinishReduceK<kFold, T, Acc><<<Blocks(r.outputs), kThreads, 0, s>>>(parts, static_cast<int>(chunks), r.outputs,
                                                                         static_cast<T*>(Y.raw()), adds, divisor);
  return Launched(c);
}

fr::Shape Kept(const KernelCtx& c, const fr::Shape& x) {
  std::vector<int64_t> d = x.dims();
  for (int64_t a : c.node.attrs.Ints("axes")) d[static_cast<size_t>(a)] = 1;
  return fr::Shape(d);
}

// `s` viewed at rank r (leading 1s), as a broadcast onto a tensor of rank r sees it.
fr::Shape AtRank(const fr::Shape& s, int r) {
  std::vector<int64_t> d(static_cast<size_t>(r - s.rank()), 1);
  d.insert(d.end(), s.dims().begin(), s.dims().end());
  return fr::Shape(d);
}

__global__ void ReduceMaxGradK(const float* dy, const float* x, const float* y, float* dx, Reduction r) {
  FR_GRID_LOOP(o, r.outputs) {
    const int64_t base = r.Out(o);
    float ties = 0.f;
    for (int64_t t = 0; t < r.reduced; ++t) ties += x[base + r.Red(t)] == y[o] ? 1.f : 0.f;
    for (int64_t t = 0; t < r.reduced; ++t) {
      const int64_t i = base + r.Red(t);
      dx[i] = x[i] == y[o] ? dy[o] / ties : 0.f;
    }
  }
}

__global__ void DivideBy(float* y, int64_t n, double d) { FR_GRID_LOOP(i, n) y[i] = static_cast<float>(y[i] / d); }

// Each row's loss m + log(sum e^(x - m)) - x[label], 0 for an ignored label.
__global__ void CrossEntropyRows(const float* x, const int64_t* y, int64_t classes, bool has_ignore, int64_t ignore,
                                 float* row_loss, DataError* err) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * classes;
  const int64_t label = y[r];
  const bool ignored = has_ignore && label == ignore;
  const bool bad = !ignored && (label < 0 || label >= classes);
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = fmaxf(m, row[j]);
  m = BlockMax(m);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) s += VExp(row[j] - m);
  s = BlockSum(s);
  if (threadIdx.x != 0) return;
  if (bad) ReportDataError(err, 2, label, classes);
  row_loss[r] = ignored || bad ? 0.f : m + logf(s) - row[label];
}

__global__ void CrossEntropyGradRows(const float* dl, const float* x, const int64_t* y, int64_t classes, bool has_ignore,
                                     int64_t ignore, float count, bool sum, float* dx, DataError* err) {
  const int64_t r = blockIdx.x;
  const float* row = x + r * classes;
  float* d = dx + r * classes;
  const int64_t label = y[r];
  const bool ignored = has_ignore && label == ignore;
  const bool bad = !ignored && (label < 0 || label >= classes);
  if (ignored || bad) {
    for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) d[j] = 0.f;
    if (bad && threadIdx.x == 0) ReportDataError(err, 2, label, classes);
    return;
  }
  const float scale = sum ? dl[0] : dl[0] / count;
  float m = -INFINITY;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) m = fmaxf(m, row[j]);
  m = BlockMax(m);
  float s = 0.f;
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) {
    const float e = VExp(row[j] - m);
    d[j] = e;
    s += e;
  }
  const float inv = scale / BlockSum(s);
  for (int64_t j = threadIdx.x; j < classes; j += blockDim.x) d[j] = d[j] * inv - (j == label ? scale : 0.f);
}

__global__ void MseGradK(const float* dl, const float* p, const float* t, float* d, int64_t n, float count) {
  const float scale = 2.f * dl[0] / count;
  FR_GRID_LOOP(i, n) d[i] = scale * (p[i] - t[i]);
}

// Up to kAddN scalars a launch; the running double sum carries over in `acc`.
constexpr int kAddN = 32;
struct Scalars {
  const float* p[kAddN];
  int n;
};

__global__ void AddNK(Scalars s, double* acc, bool first, bool last, float* out) {
  double total = first ? 0.0 : *acc;
  for (int i = 0; i < s.n; ++i) total += s.p[i][0];
  *acc = total;
  if (last) out[0] = static_cast<float>(total);
}

__global__ void ClipCoefK(const float* sq, double max_norm, float* out) {
  const double norm = sqrt(static_cast<double>(sq[0]));
  out[0] = static_cast<float>(fmin(1.0, max_norm / (norm + 1e-6)));
}

// Multi-tensor updates: one launch updates up to kMembers tensors, each cut into chunks of
// kChunk elements, one block per chunk; a block finds its tensor by the members' first blocks.
// The list travels as the kernel's argument (under 2 KiB), so a launch needs no copy.
constexpr int kMembers = 32;
constexpr int64_t kChunk = 8192;

struct Members {
  int count = 0;
  float* w[kMembers];
  const float* g[kMembers];
  float* s0[kMembers];  // SGD: momentum (or null); AdamW: m
  float* s1[kMembers];  // AdamW: v
  const float* coef[kMembers];  // the clip coefficient, or null
  int64_t n[kMembers];
  int64_t first[kMembers + 1];  // member t's chunks are blocks first[t] .. first[t + 1] - 1
};

struct SgdConsts {
  float lr, mu, wd;
  bool nesterov, first;
};

struct AdamConsts {
  float decay, b1, b2, eps, step_size, bc2_sqrt;
};

// Block b's member, and the element range [*begin, *end) of it this block updates.
__device__ int MemberOf(const Members& m, int64_t b, int64_t* begin, int64_t* end) {
  int t = 0;
  while (m.first[t + 1] <= b) ++t;
  *begin = (b - m.first[t]) * kChunk;
  *end = min(m.n[t], *begin + kChunk);
  return t;
}

__global__ void SgdK(Members m, SgdConsts k) {
  int64_t begin, end;
  const int t = MemberOf(m, blockIdx.x, &begin, &end);
  float* w = m.w[t];
  const float* g = m.g[t];
  float* buf = m.s0[t];
  const float coef = m.coef[t] ? m.coef[t][0] : 1.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    float d = g[i] * coef + k.wd * w[i];
    if (buf) {
      buf[i] = k.first ? d : k.mu * buf[i] + d;
      d = k.nesterov ? d + k.mu * buf[i] : buf[i];
    }
    w[i] -= k.lr * d;
  }
}

__global__ void AdamWK(Members m, AdamConsts k) {
  int64_t begin, end;
  const int t = MemberOf(m, blockIdx.x, &begin, &end);
  float* w = m.w[t];
  const float* g = m.g[t];
  float* mo = m.s0[t];
  float* v = m.s1[t];
  const float coef = m.coef[t] ? m.coef[t][0] : 1.f;
  for (int64_t i = begin + threadIdx.x; i < end; i += blockDim.x) {
    const float gi = g[i] * coef;
    w[i] *= k.decay;
    mo[i] = mo[i] * k.b1 + gi * (1.f - k.b1);
    v[i] = v[i] * k.b2 + gi * gi * (1.f - k.b2);
    const float denom = sqrtf(v[i]) / k.bc2_sqrt + k.eps;
    w[i] -= k.step_size * (mo[i] / denom);
  }
}

// Launches `kernel` over the members, kMembers at a time; every member shares the first one's
// node attributes and step (the lowering groups only such), so the constants are the same.
template <typename Consts>
Status LaunchGroup(std::span<const KernelCtx> members, void (*kernel)(Members, Consts), const Consts& k, int states) {
  Members m{};
  auto launch = [&]() -> Status {
    if (m.first[m.count] == 0) return Status::Ok();
    kernel<<<static_cast<unsigned>(m.first[m.count]), kThreads, 0, StreamOf(members[0])>>>(m, k);
    return Launched(members[0]);
  };
  m.first[0] = 0;
  for (const KernelCtx& c : members) {
    const int t = m.count++;
    m.w[t] = c.in[0].data<float>();
    m.g[t] = c.in[1].data<float>();
    m.s0[t] = states > 0 && !c.out.empty() ? c.out[0].data<float>() : nullptr;
    m.s1[t] = states > 1 ? c.out[1].data<float>() : nullptr;
    m.coef[t] = c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>() : nullptr;
    m.n[t] = c.in[0].numel();
    m.first[t + 1] = m.first[t] + (m.n[t] + kChunk - 1) / kChunk;
    if (m.count == kMembers) {
      RETURN_IF_ERROR(launch());
      m.count = 0;
    }
  }
  return m.count > 0 ? launch() : Status::Ok();
}

}  // namespace

Status SumTo(const KernelCtx& c) {
  const fr::Shape& x = c.in[0].shape();
  return Reduce<Fold::kSum, float, double>(c, AtRank(c.out[0].shape(), x.rank()), AddsInto(c), 1.0);
}

Status ReduceSum(const KernelCtx& c) {
  const fr::Shape kept = Kept(c, c.in[0].shape());
  if (c.out[0].dtype() == DType::kI64) return Reduce<Fold::kIntSum, int64_t, int64_t>(c, kept, false, 1.0);
  return Reduce<Fold::kSum, float, double>(c, kept, false, 1.0);
}

Status ReduceMean(const KernelCtx& c) {
  int64_t count = 1;
  for (int64_t a : c.node.attrs.Ints("axes")) count *= c.in[0].shape()[static_cast<int>(a)];
  count = c.node.attrs.Int("count", count);
  // The CPU rounds the double sum to float, then divides in double: the same here.
  const fr::Shape kept = Kept(c, c.in[0].shape());
  RETURN_IF_ERROR((Reduce<Fold::kSum, float, double>(c, kept, false, 1.0)));
  const int64_t n = c.out[0].numel();
  if (n == 0) return Status::Ok();
  DivideBy<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.out[0].data<float>(), n, static_cast<double>(count));
  return Launched(c);
}

Status ReduceMax(const KernelCtx& c) {
  const fr::Shape kept = Kept(c, c.in[0].shape());
  if (c.out[0].dtype() == DType::kI64) {
    Reduction r;
    if (!MakeReduction(c.in[0].shape(), kept, &r)) return TooManyDims(c, c.in[0].shape().rank());
    if (r.outputs == 0) return Status::Ok();
    ReduceMaxI64<<<Blocks(r.outputs), kThreads, 0, StreamOf(c)>>>(c.in[0].data<int64_t>(), r, c.out[0].data<int64_t>());
    return Launched(c);
  }
  return Reduce<Fold::kMax, float, float>(c, kept, false, 1.0);
}

Status ReduceMaxGrad(const KernelCtx& c) {
  Reduction r;
  if (!MakeReduction(c.in[1].shape(), Kept(c, c.in[1].shape()), &r)) return TooManyDims(c, c.in[1].shape().rank());
  if (r.outputs == 0) return Status::Ok();
  ReduceMaxGradK<<<Blocks(r.outputs), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.in[1].data<float>(),
                                                                  c.in[2].data<float>(), c.out[0].data<float>(), r);
  return Launched(c);
}

Status CrossEntropy(const KernelCtx& c) {
  const Tensor& L = c.in[0];
  const int64_t classes = L.shape()[L.shape().rank() - 1], rows = classes ? L.numel() / classes : 0;
  const bool sum = c.node.attrs.Int("sum") != 0;
  cudaStream_t s = StreamOf(c);
  Scratch loss(static_cast<size_t>(rows) * sizeof(float), s);
  if (!loss.ok()) return NoScratch(c, "a reduction's scratch");
  if (rows > 0) {
    CrossEntropyRows<<<static_cast<unsigned>(rows), RowThreads(classes), 0, s>>>(
        L.data<float>(), c.in[1].data<int64_t>(), classes, c.node.attrs.Has("ignore_index"), c.node.attrs.Int("ignore_index", 0),
        loss.as<float>(), DataErrorWord());
  }
  const float* per_row = loss.as<float>();
  return SumAll(c, rows, [per_row] __device__(int64_t i) { return static_cast<double>(per_row[i]); }, c.out[0].data<float>(),
                sum ? 1.0 : static_cast<double>(CountOf(c, rows)));
}

Status CrossEntropyGrad(const KernelCtx& c) {
  const Tensor& L = c.in[1];
  const int64_t classes = L.shape()[L.shape().rank() - 1], rows = classes ? L.numel() / classes : 0;
  if (rows == 0) return Status::Ok();
  CrossEntropyGradRows<<<static_cast<unsigned>(rows), RowThreads(classes), 0, StreamOf(c)>>>(
      c.in[0].data<float>(), L.data<float>(), c.in[2].data<int64_t>(), classes, c.node.attrs.Has("ignore_index"),
      c.node.attrs.Int("ignore_index", 0), static_cast<float>(CountOf(c, rows)), c.node.attrs.Int("sum") != 0,
      c.out[0].data<float>(), DataErrorWord());
  return Launched(c);
}

Status Mse(const KernelCtx& c) {
  const float *p = c.in[0].data<float>(), *t = c.in[1].data<float>();
  const int64_t n = c.in[0].numel();
  return SumAll(
      c, n, [p, t] __device__(int64_t i) { return static_cast<double>((p[i] - t[i]) * (p[i] - t[i])); }, c.out[0].data<float>(),
      static_cast<double>(CountOf(c, n)));
}

Status MseGrad(const KernelCtx& c) {
  const int64_t n = c.in[1].numel();
  if (n == 0) return Status::Ok();
  MseGradK<<<Blocks(n), kThreads, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.in[1].data<float>(), c.in[2].data<float>(),
                                                    c.out[0].data<float>(), n, static_cast<float>(CountOf(c, n)));
  return Launched(c);
}

Status SquareSum(const KernelCtx& c) {
  const float* x = c.in[0].data<float>();
  return SumAll(c, c.in[0].numel(), [x] __device__(int64_t i) { return static_cast<double>(x[i]) * x[i]; },
                c.out[0].data<float>(), 1.0);
}

Status AddN(const KernelCtx& c) {
  cudaStream_t s = StreamOf(c);
  Scratch acc(sizeof(double), s);
  if (!acc.ok()) return NoScratch(c, "a reduction's scratch");
  const size_t total = c.in.size();
  for (size_t at = 0; at < total || at == 0; at += kAddN) {
    Scalars sc{};
    sc.n = static_cast<int>(std::min<size_t>(kAddN, total - at));
    for (int i = 0; i < sc.n; ++i) sc.p[i] = c.in[at + static_cast<size_t>(i)].data<float>();
    AddNK<<<1, 1, 0, s>>>(sc, acc.as<double>(), at == 0, at + kAddN >= total, c.out[0].data<float>());
    if (total == 0) break;
  }
  return Launched(c);
}

Status ClipCoef(const KernelCtx& c) {
  ClipCoefK<<<1, 1, 0, StreamOf(c)>>>(c.in[0].data<float>(), c.node.attrs.Float("max_norm"), c.out[0].data<float>());
  return Launched(c);
}

Status SgdUpdateGroup(std::span<const KernelCtx> members) {
  if (members.empty()) return Status::Ok();
  const ir::Attrs& a = members[0].node.attrs;
  const float mu = static_cast<float>(a.Float("momentum"));
  const SgdConsts k{static_cast<float>(ScheduleOf(a).At(members[0].step)), mu, static_cast<float>(a.Float("weight_decay")),
                    a.Int("nesterov") != 0, members[0].step == 0};
  return LaunchGroup(members, SgdK, k, mu > 0 ? 1 : 0);
}

Status AdamWUpdateGroup(std::span<const KernelCtx> members) {
  if (members.empty()) return Status::Ok();
  const ir::Attrs& a = members[0].node.attrs;
  const double lr = ScheduleOf(a).At(members[0].step);
  const double b1 = a.Float("beta1"), b2 = a.Float("beta2"), t = static_cast<double>(members[0].step + 1);
  const AdamConsts k{static_cast<float>(1.0 - lr * a.Float("weight_decay")),
                     static_cast<float>(b1),
                     static_cast<float>(b2),
                     static_cast<float>(a.Float("eps")),
                     static_cast<float>(lr / (1.0 - std::pow(b1, t))),
                     static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)))};
  return LaunchGroup(members, AdamWK, k, 2);
}

Status SgdUpdate(const KernelCtx& c) { return SgdUpdateGroup({&c, 1}); }
Status AdamWUpdate(const KernelCtx& c) { return AdamWUpdateGroup({&c, 1}); }

}  // namespace fr::cuda
