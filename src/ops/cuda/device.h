// The CUDA backend of base/device.h: device memory, streams and events on one GPU per rank.
// Plain C++ (no device code), so host code and tests may include it.
//
// Each rank drives one GPU: SelectDevice (the module's InitDevice, ops/cuda/backend.h) picks it
// from the rank's local index and registers the backend, whose device index 0 is that GPU. The runtime's threads each make it current before
// they touch it (CUDA's current device is per thread): every entry point here does.
#pragma once

#include <cuda_runtime_api.h>

#include <memory>
#include <string>

#include "base/collective.h"
#include "base/device.h"
#include "base/status.h"
#include "ops/cuda/backend.h"

namespace fr::cuda {

// "cudaErrorMemoryAllocation: out of memory" (the name and CUDA's own words).
std::string ErrorString(cudaError_t e);

// The GPU this process drives (its CUDA ordinal), made current on the calling thread.
int Ordinal();
void MakeCurrent();

// A CUDA stream, created non-blocking (it does not wait for the legacy default stream).
class CudaStream final : public DeviceStream {
 public:
  CudaStream();
  ~CudaStream() override;
  CudaStream(const CudaStream&) = delete;
  CudaStream& operator=(const CudaStream&) = delete;
  void Copy(void* dst, const void* src, size_t bytes) override;
  void Wait(const std::shared_ptr<Event>& e) override;
  std::shared_ptr<Event> Record() override;
  std::shared_ptr<Event> RecordTimed() override;
  cudaStream_t handle() const { return stream_; }

 private:
  cudaStream_t stream_ = nullptr;
};

// The module's side of ops/cuda/backend.h's VisibleDevices, InitDevice, NcclNewId,
// NcclMakeGroup, NcclVersion, GpuKey, StartKernelTrace and TakeKernelTrace (names of their own: flowrun exports the loader's, which
// would interpose on the module's of the same name), and the backend's TakeDataError.
int CountDevices();
Result<int> SelectDevice(int local_rank);
Status ReadDataError(DeviceStream& s);
Status MakeNcclId(GroupId* id);
Result<std::unique_ptr<CollectiveGroup>> MakeNcclGroup(int members, const GroupId& id, int index);
std::string NcclVersionString();
std::string PciBusId();
Result<GpuInfo> DescribeGpu();
Result<double> TimeSgemm(int n, bool tf32, int reps);
Status CuptiStart();                             // ops/cuda/cupti.cpp
Result<std::vector<KernelSpan>> CuptiTake();

}  // namespace fr::cuda
