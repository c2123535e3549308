// The CUDA backend, as the rest of flowrun sees it. The backend itself (device memory, streams,
// cuBLAS and the kernels) is a module of its own, libflowrun_cuda.so, that flowrun loads on
// first use: a CPU run neither loads nor needs the CUDA libraries (cuBLAS alone would add 200 MB
// to every rank's resident memory and 80 ms to every start). This is the loader.
//
// The module is found at $FLOWRUN_CUDA_MODULE, else beside the flowrun binary, else in
// ../lib/flowrun/ from it (an install). flowrun exports its symbols (-rdynamic) for the module,
// which resolves them all when it is loaded.
#pragma once

#include <memory>
#include <string>
#include <vector>

#include "base/collective.h"
#include "ops/op.h"

namespace fr::cuda {

// Loads the module once; ok, or why it cannot be (not built, not found, a library missing).
Status Load();
// GPUs this process can see (CUDA_VISIBLE_DEVICES applies); 0 without the module, a driver or a
// GPU.
int VisibleDevices();
// Picks this process's GPU, the `local_rank`-th visible one modulo their count (Open MPI's local
// rank: ranks of a node spread over its GPUs, several share one where there are more ranks than
// GPUs), and registers the CUDA backend with it as device cuda:0. Returns the CUDA ordinal, or an
// error saying why there is none.
Result<int> InitDevice(int local_rank);
// TF32 tensor cores for float32 GEMMs (parallel.tf32); off by default.
void AllowTf32(bool allow);
// Op k's CUDA kernel; a kernel that fails with a clear message where there is none.
KernelFn KernelFor(OpKind k);
// Op k's CUDA group kernel (ops/op.h), null for an op without one; a kernel that fails with a
// clear message without the module.
GroupKernelFn GroupKernelFor(OpKind k);
// Whether op k has a CUDA kernel (flowrun ops lists it); false without the module.
bool HasKernel(OpKind k);

// NCCL (actor/group_makers.cpp makes its groups): a fresh unique id, made by a group's member 0
// and sent to the others; the group of `members` in which this rank is member `index`, on this
// process's GPU (InitDevice first), blocking until every member has joined; the library's version
// ("2.28.9"), empty without the module. Errors say why ("[nccl] ncclCommInitRank: ...").
Status NcclNewId(GroupId* id);
Result<std::unique_ptr<CollectiveGroup>> NcclMakeGroup(int members, const GroupId& id, int index);
std::string NcclVersion();
// This process's GPU as its PCI bus id ("0000:18:00.0"): ranks of one node with the same key share
// a GPU, which NCCL refuses. Empty without the module.
std::string GpuKey();

// flowrun env: this process's GPU, and seconds per n x n x n SGEMM on it (TF32 or not), the
// median of `reps` (InitDevice first).
struct GpuInfo {
  std::string name;
  double memory_bytes = 0;
};
Result<GpuInfo> Gpu();
Result<double> GemmSeconds(int n, bool tf32, int reps);

// --trace: what the GPU ran, each kernel, copy and memset with its start and end on the steady
// clock (the host's acts are on it too), from CUPTI (loaded on the first StartKernelTrace; an error
// saying how to get it where it is missing). Take waits for the device, then returns what ran since
// the start, and fails when CUPTI had to drop records.
struct KernelSpan {
  enum Kind : uint8_t { kKernel, kCopy };
  std::string name;     // a kernel's, demangled, without its parameters; "copy HtoD", "memset"
  double begin_us = 0, end_us = 0;
  uint32_t stream = 0;  // CUPTI's id of the CUDA stream
  Kind kind = kKernel;
  uint64_t bytes = 0;   // a copy's or memset's
};
Status StartKernelTrace();
Result<std::vector<KernelSpan>> TakeKernelTrace();

// What the module exports, as one table (flowrun_cuda_api).
struct Api {
  int version;
  int (*visible_devices)();
  Result<int> (*init_device)(int local_rank);
  void (*allow_tf32)(bool);
  KernelFn (*kernel_for)(OpKind k);  // null where op k has no CUDA kernel
  GroupKernelFn (*group_kernel_for)(OpKind k);  // null where op k has no group kernel
  Status (*nccl_new_id)(GroupId* id);
  Result<std::unique_ptr<CollectiveGroup>> (*nccl_make_group)(int members, const GroupId& id, int index);
  std::string (*nccl_version)();
  std::string (*gpu_key)();
  Result<GpuInfo> (*gpu)();
  Result<double> (*gemm_seconds)(int n, bool tf32, int reps);
  Status (*kernel_trace_start)();
  Result<std::vector<KernelSpan>> (*kernel_trace_take)();
};
inline constexpr int kApiVersion = 4;

}  // namespace fr::cuda

extern "C" const fr::cuda::Api* flowrun_cuda_api();
