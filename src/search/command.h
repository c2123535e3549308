// The `flowrun search` command line (main.cpp registers it).
#pragma once

#include <cstdint>
#include <string>
#include <vector>

namespace fr::search {

struct SearchArgs {
  std::string config;
  std::vector<std::string> set;         // --set key=value overrides
  int ranks = 0;                        // --ranks; 0: parallel.ranks or the cluster's devices
  int top = 10;                         // rows of the table
  std::string out = "best.yaml";        // the best candidate as a runnable config; empty: none
  bool explain = false;                 // the winner against the runner-up
  std::vector<int64_t> micro_batches;   // --micro-batches; empty: powers of two that divide
  std::string mesh;                     // --mesh AxB or N: each stage's device mesh; empty: any
  int validate = 0;                     // run the top K candidates on this machine
  int validate_steps = 12;              // steps per validation run
  int validate_warm = 4;                // steps left out of the measured median
  int validate_repeats = 3;             // rounds over all validated candidates, interleaved
};

// Returns the process exit code.
int RunSearch(const SearchArgs& a);

}  // namespace fr::search
