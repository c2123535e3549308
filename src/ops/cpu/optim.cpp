// CPU kernels for accumulation, gradient-norm clipping and the optimizers, following PyTorch's
// single-tensor SGD and AdamW step by step so that losses match to float32 rounding.
#include <cmath>

#include "base/schedule.h"
#include "ops/cpu/kernels.h"
#include "ops/cpu/parallel.h"
#include "ops/cpu/vmath.h"

namespace fr::cpu {
namespace {

// The clip coefficient input, if the node has one; 1 otherwise.
float CoefOf(const KernelCtx& c) { return c.in.size() > 2 && c.in[2].defined() ? c.in[2].data<float>()[0] : 1.f; }

}  // namespace

Status Accumulate(const KernelCtx& c) {
  if (c.micro == 0) {
    c.out[0].CopyFrom(c.in[0]);
    return Status::Ok();
  }
  const float* g = c.in[0].data<float>();
  float* acc = c.out[0].data<float>();
  ParallelFor(c.in[0].numel(), 1, [&](int64_t begin, int64_t end) {
    for (int64_t i = begin; i < end; ++i) acc[i] += g[i];
  });
  return Status::Ok();
}

Status SquareSum(const KernelCtx& c) {
  const float* x = c.in[0].data<float>();
  const double s = SumOf<double>(c.in[0].numel(), [x](int64_t i) { return static_cast<double>(x[i]) * x[i]; });
  c.out[0].data<float>()[0] = static_cast<float>(s);
  return Status::Ok();
}

Status AddN(const KernelCtx& c) {
  double s = 0;
  for (const Tensor& t : c.in) s += t.data<float>()[0];
  c.out[0].data<float>()[0] = static_cast<float>(s);
  return Status::Ok();
}

Status ClipCoef(const KernelCtx& c) {
  const double norm = std::sqrt(static_cast<double>(c.in[0].data<float>()[0]));
  const double max_norm = c.node.attrs.Float("max_norm");
  c.out[0].data<float>()[0] = static_cast<float>(std::min(1.0, max_norm / (norm + 1e-6)));
  return Status::Ok();
}

Status SgdUpdate(const KernelCtx& c) {
  const ir::Attrs& a = c.node.attrs;
  const float lr = static_cast<float>(ScheduleOf(a).At(c.step));
  const float mu = static_cast<float>(a.Float("momentum")), wd = static_cast<float>(a.Float("weight_decay"));
  const bool nesterov = a.Int("nesterov") != 0;
  const float coef = CoefOf(c);
  float* w = c.in[0].data<float>();
  const float* g = c.in[1].data<float>();
  float* buf = mu > 0 ? c.out[0].data<float>() : nullptr;
  for (int64_t i = 0, n = c.in[0].numel(); i < n; ++i) {
    float d = g[i] * coef + wd * w[i];
    if (buf) {
      buf[i] = c.step == 0 ? d : mu * buf[i] + d;
      d = nesterov ? d + mu * buf[i] : buf[i];
    }
    w[i] -= lr * d;
  }
  return Status::Ok();
}

Status AdamWUpdate(const KernelCtx& c) {
  const ir::Attrs& a = c.node.attrs;
  const double lr = ScheduleOf(a).At(c.step);
  const double b1 = a.Float("beta1"), b2 = a.Float("beta2");
  const float eps = static_cast<float>(a.Float("eps")), coef = CoefOf(c);
  const double t = static_cast<double>(c.step + 1);
  const float decay = static_cast<float>(1.0 - lr * a.Float("weight_decay"));
  const float step_size = static_cast<float>(lr / (1.0 - std::pow(b1, t)));
  const float bc2_sqrt = static_cast<float>(std::sqrt(1.0 - std::pow(b2, t)));
  const float fb1 = static_cast<float>(b1), fb2 = static_cast<float>(b2);
  float* w = c.in[0].data<float>();
  const float* g = c.in[1].data<float>();
  float* m = c.out[0].data<float>();
  float* v = c.out[1].data<float>();
  for (int64_t i = 0, n = c.in[0].numel(); i < n; ++i) {
    const float gi = g[i] * coef;
    w[i] *= decay;
    m[i] = m[i] * fb1 + gi * (1.f - fb1);
    v[i] = v[i] * fb2 + gi * gi * (1.f - fb2);
    const float denom = std::sqrt(v[i]) / bc2_sqrt + eps;
    w[i] -= step_size * (m[i] / denom);
  }
  return Status::Ok();
}

}  // namespace fr::cpu
