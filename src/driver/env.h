// `flowrun env`: measures this machine and prints the `cluster:` section of a config (config.h,
// ClusterConfig) that the cost model prices plans with (DESIGN.md §4).
//
// Run plainly, it re-launches itself as `mpirun -n N --oversubscribe [--allow-run-as-root when
// root] FLOWRUN env --ranks N [--out FILE]` (FLOWRUN: this binary's resolved path) and returns
// mpirun's exit code. Under Open MPI's mpirun (OMPI_COMM_WORLD_SIZE set) all ranks measure at
// once, so an oversubscribed machine reports what each rank really gets:
//   flops      dense f32 sgemm (oneDNN), one kernel thread per rank unless OMP_NUM_THREADS is set:
//              the better of 512^3 and 256^3, median over 10 blocks of 4 that each last until the
//              slowest rank is done (ranks sharing a core report their share of it)
//   latency    median MPI_Allreduce of 8 bytes, the slowest rank's median
//   bandwidth  MPI_Allreduce of 4 MiB of f32: the bytes boxing::Price charges each rank for that
//              all-reduce (2(p-1)/p of the size) over (median time - collectives x latency), the
//              cost model's own accounting inverted
//   memory     MemTotal (/proc/meminfo) / ranks, rounded to 0.1 GiB
// With --device cuda each rank measures its GPU instead (Open MPI's local rank picks it): flops
// from cuBLAS SGEMM (TF32 with --tf32), latency and bandwidth from all-reduces of device memory
// through the path training takes (NCCL, or host copies where ranks share a GPU), memory the GPU's
// over the ranks that share it. A rank without a GPU fails with exit 1.
// Rank 0 writes the section to stdout or FILE and a summary to stderr. One machine: inter = intra.
//
// Errors ("[env] ...") give exit 2 for bad arguments (--ranks < 2, a world size other than
// --ranks, no mpirun on PATH) and 1 for failures at run time (an unreadable /proc/meminfo, an
// unwritable FILE); a failure on one rank once the measurement has begun aborts the whole job.
#pragma once

#include <string>

namespace fr {

struct EnvArgs {
  int ranks = 2;
  bool ranks_given = false;  // --ranks on the command line; under mpirun without it, the world size
  std::string out;           // empty: stdout
  int repeats = 1;           // measurement rounds; each figure written is its median over them
  bool launched = false;     // set on the re-launched ranks: never re-launch again
  std::string device = "cpu";  // "cuda": each rank's GPU (MeasuredGpu in env.cpp)
  bool tf32 = false;           // with cuda: TF32 GEMMs (parallel.tf32)
  double timeout = 0;          // seconds the ranks may take in all before they give up; 0: 300 a repeat
  double Deadline() const { return timeout > 0 ? timeout : 300.0 * repeats; }
};

// Runs the command; returns the process exit code. argc/argv go to MPI_Init (may be null).
int RunEnv(const EnvArgs& a, int* argc, char*** argv);

}  // namespace fr
