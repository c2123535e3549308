// BatchNormalization's running statistics (ir::Graph::Running) as training updates them. A rank
// receives every micro-batch's statistic from a stat-sink task (Runtime::on_stat) and folds it
// into the running average in micro-batch order, as PyTorch updates its buffers at each forward.
// Rank 0 receives every statistic: `save:` and checkpoints write its averages. The ranks of a
// statistic's stage receive it too: an evaluation there normalizes with their averages.
#pragma once

#include <map>
#include <mutex>
#include <string>
#include <vector>

#include "base/tensor.h"
#include "graph/graph.h"

namespace fr {

class RunningStats {
 public:
  explicit RunningStats(const ir::Graph& g);
  // running = momentum * running + (1 - momentum) * unbias * x, for the statistic made by value
  // `stat`; called on a runtime thread.
  void Take(ir::ValueId stat, const Tensor& x);
  // Initializer name -> its float32 value now.
  std::map<std::string, Tensor> Values() const;
  // Initializer name -> its shape and value now, as kept (double): what a checkpoint holds.
  std::map<std::string, std::pair<Shape, std::vector<double>>> Exact() const;
  // Sets the running average of initializer `name` (from a checkpoint); false when there is none
  // of that many values.
  bool Restore(const std::string& name, const std::vector<double>& value);

 private:
  struct Stat {
    std::string initializer;
    Shape shape;
    double momentum = 0, unbias = 1;
    std::vector<double> value;
  };
  std::map<ir::ValueId, Stat> stats_;
  mutable std::mutex mu_;
};

}  // namespace fr
