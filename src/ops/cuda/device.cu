// The CUDA backend: device memory from cudaMalloc (the register pool above it keeps blocks for
// reuse, so a training step allocates nothing after the first), non-blocking streams, events, and
// copies by the driver's unified addressing (cudaMemcpyDefault finds each side's memory).
#include <cuda_runtime.h>

#include <atomic>
#include <cstdlib>
#include <cstring>
#include <mutex>

#include "ops/cuda/common.cuh"

namespace fr::cuda {
namespace {

std::atomic<int> g_ordinal{-1};
DataError* g_error = nullptr;  // set once by SelectDevice

void Check(cudaError_t e, const char* what) { FR_CHECK(e == cudaSuccess, std::string(what) + ": " + ErrorString(e)); }

class CudaEvent final : public Event {
 public:
  CudaEvent(cudaStream_t s, bool timed) {
    MakeCurrent();
    Check(cudaEventCreateWithFlags(&event_, timed ? cudaEventDefault : cudaEventDisableTiming), "cudaEventCreate");
    Check(cudaEventRecord(event_, s), "cudaEventRecord");
  }
  ~CudaEvent() override { cudaEventDestroy(event_); }
  CudaEvent(const CudaEvent&) = delete;
  CudaEvent& operator=(const CudaEvent&) = delete;
  // The progress and data threads may query first: make the rank's GPU current, or CUDA would make
  // a context on GPU 0 for them.
  bool Done() const override {
    MakeCurrent();
    const cudaError_t e = cudaEventQuery(event_);
    if (e == cudaErrorNotReady) return false;
    Check(e, "cudaEventQuery");
    return true;
  }
  void Wait() const override {
    MakeCurrent();
    Check(cudaEventSynchronize(event_), "cudaEventSynchronize");
  }
  cudaEvent_t handle() const { return event_; }
  double MillisSince(const Event& start) const override {
    const auto* s = dynamic_cast<const CudaEvent*>(&start);
    float ms = 0;
    MakeCurrent();
    if (!s || cudaEventElapsedTime(&ms, s->event_, event_) != cudaSuccess) {
      cudaGetLastError();  // an untimed event, or one not yet done: no time, not an error
      return -1;
    }
    return ms;
  }

 private:
  cudaEvent_t event_ = nullptr;
};

class CudaBackend final : public Backend {
 public:
  DeviceType type() const override { return DeviceType::kCuda; }
  DeviceType kernels() const override { return DeviceType::kCuda; }
  bool host_visible() const override { return false; }
  void* Allocate(size_t bytes, int) override {
    MakeCurrent();
    void* p = nullptr;
    if (cudaMalloc(&p, bytes ? bytes : 1) != cudaSuccess) {
      cudaGetLastError();  // an allocation failure is not sticky: clear it, report null
      return nullptr;
    }
    // Zero-filled, as every backend's memory; on a stream of its own, so it is done before the
    // memory is handed out whatever stream uses it next.
    Check(cudaMemsetAsync(p, 0, bytes, Zeroing()), "cudaMemsetAsync");
    Check(cudaStreamSynchronize(Zeroing()), "cudaStreamSynchronize");
    Count(static_cast<int64_t>(bytes));
    return p;
  }
  void Free(void* p, size_t bytes, int) override {
    MakeCurrent();
    cudaFree(p);  // waits for the device's work that may still use it
    Count(-static_cast<int64_t>(bytes));
  }
  // Pinned (page-locked) and portable: a copy from it is a DMA the copy stream runs while the
  // host goes on; from pageable memory, the driver would stage it on the calling thread.
  void* AllocateHost(size_t bytes) override {
    MakeCurrent();
    void* p = nullptr;
    if (cudaHostAlloc(&p, bytes ? bytes : 1, cudaHostAllocPortable) != cudaSuccess) {
      cudaGetLastError();
      return nullptr;
    }
    std::memset(p, 0, bytes);
    return p;
  }
  void FreeHost(void* p, size_t) override {
    MakeCurrent();
    cudaFreeHost(p);
  }
  std::unique_ptr<DeviceStream> NewStream(int) override { return std::make_unique<CudaStream>(); }
  void ZeroNow(void* p, size_t bytes, int) override {
    MakeCurrent();
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Check(cudaMemset(p, 0, bytes), "cudaMemset");
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }
  double FreeBytes(int) const override {
    MakeCurrent();
    size_t free = 0, total = 0;
    if (cudaMemGetInfo(&free, &total) != cudaSuccess) {
      cudaGetLastError();
      return -1;
    }
    return static_cast<double>(free);
  }
  Status TakeDataError(DeviceStream& s) override { return ReadDataError(s); }
  // Outside the actors (setup, save): everything queued on the device first, then the copy.
  void CopyNow(void* dst, const void* src, size_t bytes, int) override {
    MakeCurrent();
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
    Check(cudaMemcpy(dst, src, bytes, cudaMemcpyDefault), "cudaMemcpy");
    // From pageable host memory, and device to device, cudaMemcpy may return before the data lands;
    // the streams are non-blocking, so nothing else would order later kernels after it.
    Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  }

 private:
  cudaStream_t Zeroing() {
    std::call_once(once_, [this] { Check(cudaStreamCreateWithFlags(&zeroing_, cudaStreamNonBlocking), "cudaStreamCreate"); });
    return zeroing_;
  }
  std::once_flag once_;
  cudaStream_t zeroing_ = nullptr;
};

}  // namespace

std::string ErrorString(cudaError_t e) { return std::string(cudaGetErrorName(e)) + ": " + cudaGetErrorString(e); }

int Ordinal() { return g_ordinal.load(std::memory_order_relaxed); }

void MakeCurrent() {
  thread_local int current = -1;
  const int want = Ordinal();
  if (current == want) return;
  FR_CHECK(want >= 0, "the CUDA backend is used before its device was selected");
  Check(cudaSetDevice(want), "cudaSetDevice");
  current = want;
}

CudaStream::CudaStream() {
  MakeCurrent();
  Check(cudaStreamCreateWithFlags(&stream_, cudaStreamNonBlocking), "cudaStreamCreate");
}

CudaStream::~CudaStream() {
  MakeCurrent();
  cudaStreamSynchronize(stream_);
  cudaStreamDestroy(stream_);
}

void CudaStream::Copy(void* dst, const void* src, size_t bytes) {
  if (!bytes) return;
  MakeCurrent();
  Check(cudaMemcpyAsync(dst, src, bytes, cudaMemcpyDefault, stream_), "cudaMemcpyAsync");
}

void CudaStream::Wait(const std::shared_ptr<Event>& e) {
  const auto* cuda = dynamic_cast<const CudaEvent*>(e.get());
  if (!cuda) return e->Wait();  // the host's: done when recorded
  MakeCurrent();
  Check(cudaStreamWaitEvent(stream_, cuda->handle(), 0), "cudaStreamWaitEvent");
}

std::shared_ptr<Event> CudaStream::Record() { return std::make_shared<CudaEvent>(stream_, false); }

std::shared_ptr<Event> CudaStream::RecordTimed() { return std::make_shared<CudaEvent>(stream_, true); }

DataError* DataErrorWord() { return g_error; }

Status ReadDataError(DeviceStream& stream) {
  MakeCurrent();
  CudaStream& s = static_cast<CudaStream&>(stream);
  DataError e{};
  Check(cudaMemcpyAsync(&e, g_error, sizeof e, cudaMemcpyDeviceToHost, s.handle()), "cudaMemcpyAsync");
  Check(cudaStreamSynchronize(s.handle()), "cudaStreamSynchronize");
  if (e.kind <= 0) return Status::Ok();  // -1: a kernel is writing it; the next read sees it whole
  Check(cudaMemsetAsync(g_error, 0, sizeof e, s.handle()), "cudaMemsetAsync");
  Check(cudaStreamSynchronize(s.handle()), "cudaStreamSynchronize");
  switch (e.kind) {
    case 2: return Status::Invalid("[data] label " + std::to_string(e.value) + " is outside [0, " + std::to_string(e.bound) + ")");
    case 3: return Status::Invalid("[ops] integer division by zero");
    case 4: return Status::Invalid("[ops] a Cast met a float outside its integer type's range");
    case 5: return Status::Invalid("[ops] a ScatterND index tuple repeats, which leaves its result undefined without reduction");
    default:
      return Status::Invalid("[ops] index " + std::to_string(e.value) + " is out of range [" + std::to_string(-e.bound) + ", " +
                             std::to_string(e.bound) + ")");
  }
}

Result<GpuInfo> DescribeGpu() {
  MakeCurrent();
  cudaDeviceProp p{};
  const cudaError_t e = cudaGetDeviceProperties(&p, Ordinal());
  if (e != cudaSuccess) return Status::Runtime("[cuda] cudaGetDeviceProperties: " + ErrorString(e));
  return GpuInfo{p.name, static_cast<double>(p.totalGlobalMem)};
}

int CountDevices() {
  int n = 0;
  if (cudaGetDeviceCount(&n) != cudaSuccess) {
    cudaGetLastError();
    return 0;
  }
  return n;
}

Result<int> SelectDevice(int local_rank) {
  static std::mutex mu;
  std::lock_guard<std::mutex> lock(mu);
  if (Ordinal() >= 0) return Ordinal();
  int n = 0;
  const cudaError_t e = cudaGetDeviceCount(&n);
  if (e != cudaSuccess || n == 0) {
    cudaGetLastError();
    const char* visible = std::getenv("CUDA_VISIBLE_DEVICES");
    return Status::Runtime(std::string("[cuda] no GPU is visible to this process") +
                           (visible ? std::string(" (CUDA_VISIBLE_DEVICES=") + visible + ")" : std::string()) +
                           (e != cudaSuccess ? ": " + ErrorString(e) : std::string()));
  }
  const int ordinal = (local_rank < 0 ? 0 : local_rank) % n;
  const cudaError_t set = cudaSetDevice(ordinal);
  if (set != cudaSuccess) return Status::Runtime("[cuda] cannot use GPU " + std::to_string(ordinal) + ": " + ErrorString(set));
  g_ordinal.store(ordinal, std::memory_order_relaxed);
  // Kernels' stream-ordered scratch (common.cuh) comes from the device's default pool; by default
  // it hands freed memory back to the driver at every synchronisation, so each step would map it
  // anew. Kept instead, the scratch of the first step serves every later one.
  cudaMemPool_t pool = nullptr;
  if (cudaDeviceGetDefaultMemPool(&pool, ordinal) == cudaSuccess) {
    uint64_t keep = UINT64_MAX;
    Check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep), "cudaMemPoolSetAttribute");
  } else {
    cudaGetLastError();
  }
  void* word = nullptr;
  const cudaError_t alloc = cudaMalloc(&word, sizeof(DataError));
  if (alloc != cudaSuccess) return Status::Runtime("[cuda] GPU " + std::to_string(ordinal) + ": " + ErrorString(alloc));
  Check(cudaMemset(word, 0, sizeof(DataError)), "cudaMemset");
  Check(cudaDeviceSynchronize(), "cudaDeviceSynchronize");
  g_error = static_cast<DataError*>(word);
  RegisterBackend(std::make_unique<CudaBackend>());
  return ordinal;
}

}  // namespace fr::cuda
