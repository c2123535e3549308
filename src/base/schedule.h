// The learning-rate schedule, shared by the optimizer kernels and the step log. Attributes of an
// optimizer node: lr, schedule (0 constant, 1 linear, 2 cosine), warmup, min_lr, steps.
//
// lr(s), s counting from 0: warm-up s < W gives lr * (s + 1) / W; after it p = (s - W) / max(1, S - W)
// and constant gives lr, linear lr + (min_lr - lr) p, cosine min_lr + (lr - min_lr)(1 + cos(pi p)) / 2.
#pragma once

#include <algorithm>
#include <cmath>
#include <cstdint>

namespace fr {

struct Schedule {
  double lr = 0, min_lr = 0;
  int kind = 0;  // 0 constant, 1 linear, 2 cosine
  int64_t warmup = 0, steps = 1;

  double At(int64_t s) const {
    if (s < warmup) return lr * static_cast<double>(s + 1) / static_cast<double>(warmup);
    double p = static_cast<double>(s - warmup) / static_cast<double>(std::max<int64_t>(1, steps - warmup));
    if (kind == 1) return lr + (min_lr - lr) * p;
    if (kind == 2) return min_lr + 0.5 * (lr - min_lr) * (1.0 + std::cos(M_PI * p));
    return lr;
  }
};

}  // namespace fr
