#include "driver/running_stats.h"

namespace fr {

RunningStats::RunningStats(const ir::Graph& g) {
  for (const ir::Graph::Running& r : g.running) {
    Stat s{r.initializer, r.initial.shape(), r.momentum, r.unbias, {}};
    const float* v = r.initial.data<float>();
    s.value.assign(v, v + r.initial.numel());
    stats_.emplace(r.batch, std::move(s));
  }
}

void RunningStats::Take(ir::ValueId stat, const Tensor& x) {
  std::lock_guard<std::mutex> lock(mu_);
  auto it = stats_.find(stat);
  FR_CHECK(it != stats_.end() && static_cast<size_t>(x.numel()) == it->second.value.size(),
           "a statistic that no running average takes");
  Stat& s = it->second;
  const float* b = x.data<float>();
  for (size_t i = 0; i < s.value.size(); ++i) s.value[i] = s.momentum * s.value[i] + (1 - s.momentum) * s.unbias * b[i];
}

std::map<std::string, Tensor> RunningStats::Values() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, Tensor> out;
  for (const auto& [v, s] : stats_) {
    Tensor t(DType::kF32, s.shape);
    for (size_t i = 0; i < s.value.size(); ++i) t.data<float>()[i] = static_cast<float>(s.value[i]);
    out[s.initializer] = t;
  }
  return out;
}

std::map<std::string, std::pair<Shape, std::vector<double>>> RunningStats::Exact() const {
  std::lock_guard<std::mutex> lock(mu_);
  std::map<std::string, std::pair<Shape, std::vector<double>>> out;
  for (const auto& [v, s] : stats_) out[s.initializer] = {s.shape, s.value};
  return out;
}

bool RunningStats::Restore(const std::string& name, const std::vector<double>& value) {
  std::lock_guard<std::mutex> lock(mu_);
  for (auto& [v, s] : stats_) {
    if (s.initializer != name) continue;
    if (s.value.size() != value.size()) return false;
    s.value = value;
    return true;
  }
  return false;
}

}  // namespace fr
