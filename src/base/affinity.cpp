#include "base/affinity.h"

#include <sched.h>
#include <unistd.h>

#include <algorithm>
#include <cstdlib>

namespace fr {

std::vector<int> RankCores(int local_rank, int local_size, const std::vector<int>& allowed) {
  const int n = static_cast<int>(allowed.size());
  if (n == 0 || local_size < 1 || local_rank < 0 || local_rank >= local_size) return {};
  if (local_size > n) return {allowed[static_cast<size_t>(local_rank % n)]};
  std::vector<int> cores;
  for (int i = local_rank * n / local_size; i < (local_rank + 1) * n / local_size; ++i) cores.push_back(allowed[static_cast<size_t>(i)]);
  return cores;
}

namespace {

// The CPUs this process may run on, in order; empty when the mask cannot be read.
std::vector<int> AllowedCpuList() {
  cpu_set_t set;
  CPU_ZERO(&set);
  if (sched_getaffinity(0, sizeof set, &set) != 0) return {};
  std::vector<int> cpus;
  for (int c = 0; c < CPU_SETSIZE; ++c)
    if (CPU_ISSET(c, &set)) cpus.push_back(c);
  return cpus;
}

}  // namespace

int AllowedCpus() { return std::max(1, static_cast<int>(AllowedCpuList().size())); }

std::string PinUnboundRank() {
  const char* rank = std::getenv("OMPI_COMM_WORLD_LOCAL_RANK");
  const char* size = std::getenv("OMPI_COMM_WORLD_LOCAL_SIZE");
  if (!rank || !size || std::getenv("OMPI_MCA_hwloc_base_binding_policy")) return "";
  const int local_rank = std::atoi(rank), local_size = std::atoi(size);
  if (local_size < 2) return "";
  const std::vector<int> allowed = AllowedCpuList();
  if (allowed.empty() || static_cast<long>(allowed.size()) < ::sysconf(_SC_NPROCESSORS_ONLN)) return "";  // bound already
  const std::vector<int> cores = RankCores(local_rank, local_size, allowed);
  if (cores.empty()) return "";
  cpu_set_t mine;
  CPU_ZERO(&mine);
  for (int c : cores) CPU_SET(c, &mine);
  if (sched_setaffinity(0, sizeof mine, &mine) != 0) return "";
  const int n = static_cast<int>(allowed.size());
  return std::to_string(local_size) + " ranks on " + std::to_string(n) + " core(s), left unbound by mpirun: pinned " +
         (local_size > n ? "round-robin, one core each" : std::to_string(n / local_size) + "+ core(s) each") +
         " (mpirun --bind-to to choose)";
}

}  // namespace fr
