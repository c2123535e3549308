// CPU kernels for the losses and their fused gradients. Sums accumulate in double. The means divide
// by attr "count" when the node has it (a piece of a split loss divides by the logical count, so
// the pieces' results sum to the logical mean; see ops/loss.cpp), else by the local count.
#include <algorithm>
#include <cmath>

#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

Status BadLabel(const KernelCtx& c, int64_t label, int64_t classes) {
  return Status::Invalid("[data] " + c.node.name + ": label " + std::to_string(label) + " is outside [0, " +
                         std::to_string(classes) + ")");
}

// A label of attribute ignore_index contributes nothing (PyTorch's ignore_index); without the
// attribute every label counts.
bool Ignored(const KernelCtx& c, int64_t label) {
  return c.node.attrs.Has("ignore_index") && label == c.node.attrs.Int("ignore_index");
}

}  // namespace

Status CrossEntropy(const KernelCtx& c) {
  const Tensor& L = c.in[0];
  int64_t classes = L.shape()[L.shape().rank() - 1], rows = L.numel() / classes;
  const float* x = L.data<float>();
  const int64_t* y = c.in[1].data<int64_t>();
  double total = 0;
  for (int64_t r = 0; r < rows; ++r) {
    const float* row = x + r * classes;
    if (Ignored(c, y[r])) continue;
    if (y[r] < 0 || y[r] >= classes) return BadLabel(c, y[r], classes);
    const float m = MaxOf(row, classes);
    const float s = SumOf(classes, [&](int64_t j) { return Exp(row[j] - m); });
    total += static_cast<double>(m + std::log(s) - row[y[r]]);
  }
  // "sum": the training graph divides by the count of labels not ignored itself.
  const bool sum = c.node.attrs.Int("sum") != 0;
  c.out[0].data<float>()[0] = static_cast<float>(sum ? total : total / static_cast<double>(CountOf(c, rows)));
  return Status::Ok();
}

// d logits = (softmax(logits) - onehot(label)) * dL / count.
Status CrossEntropyGrad(const KernelCtx& c) {
  const Tensor& L = c.in[1];
  int64_t classes = L.shape()[L.shape().rank() - 1], rows = L.numel() / classes;
  const bool sum = c.node.attrs.Int("sum") != 0;
  const float scale = sum ? c.in[0].data<float>()[0] : c.in[0].data<float>()[0] / static_cast<float>(CountOf(c, rows));
  const float* x = L.data<float>();
  const int64_t* y = c.in[2].data<int64_t>();
  float* dx = c.out[0].data<float>();
  for (int64_t r = 0; r < rows; ++r)
    if (!Ignored(c, y[r]) && (y[r] < 0 || y[r] >= classes)) return BadLabel(c, y[r], classes);
  ParallelFor(rows, classes, [&](int64_t begin, int64_t end) {
    for (int64_t r = begin; r < end; ++r) {
      const float* row = x + r * classes;
      float* d = dx + r * classes;
      if (Ignored(c, y[r])) {
        std::fill(d, d + classes, 0.f);
        continue;
      }
      const float m = MaxOf(row, classes);
      for (int64_t j = 0; j < classes; ++j) d[j] = Exp(row[j] - m);
      const float inv = scale / SumOf(classes, [&](int64_t j) { return d[j]; });
      for (int64_t j = 0; j < classes; ++j) d[j] *= inv;
      d[y[r]] -= scale;
    }
  });
  return Status::Ok();
}

Status Mse(const KernelCtx& c) {
  const float* p = c.in[0].data<float>();
  const float* t = c.in[1].data<float>();
  int64_t n = c.in[0].numel();
  double total = 0;
  for (int64_t i = 0; i < n; ++i) total += static_cast<double>((p[i] - t[i]) * (p[i] - t[i]));
  c.out[0].data<float>()[0] = static_cast<float>(total / static_cast<double>(CountOf(c, n)));
  return Status::Ok();
}

Status MseGrad(const KernelCtx& c) {
  const float* p = c.in[1].data<float>();
  const float* t = c.in[2].data<float>();
  int64_t n = c.in[1].numel();
  const float scale = 2.f * c.in[0].data<float>()[0] / static_cast<float>(CountOf(c, n));
  float* d = c.out[0].data<float>();
  for (int64_t i = 0; i < n; ++i) d[i] = scale * (p[i] - t[i]);
  return Status::Ok();
}

}  // namespace fr::cpu
