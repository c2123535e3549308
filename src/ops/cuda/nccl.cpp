// NCCL's collective groups (base/collective.h) for the device communicator (actor/device_comm.cpp):
// one NCCL communicator per group, made from a unique id that member 0 makes and the actor layer
// sends to the others over MPI, so that Open MPI still launches and bootstraps the job. Each group
// queues on a CUDA stream of its own, which waits for the inputs' stream by an event.
#include <cuda_runtime_api.h>
#include <nccl.h>

#include <cstdlib>
#include <cstring>
#include <memory>
#include <mutex>
#include <string>

#include "ops/cuda/device.h"

namespace fr::cuda {
namespace {

Status NcclStatus(ncclResult_t r, const char* call) {
  if (r == ncclSuccess) return Status::Ok();
  return Status::Runtime(std::string("[nccl] ") + call + ": " + ncclGetErrorString(r) +
                         (r == ncclInvalidUsage ? " (two ranks on one GPU? NCCL needs a GPU per rank)" : ""));
}

Status CudaStatus(cudaError_t e, const char* call) {
  if (e == cudaSuccess) return Status::Ok();
  return Status::Runtime(std::string("[cuda] ") + call + ": " + ErrorString(e));
}

ncclDataType_t NcclType(DType t) {
  switch (t) {
    case DType::kF32: return ncclFloat32;
    case DType::kI64: return ncclInt64;
    case DType::kI32: return ncclInt32;
    case DType::kBool:
    case DType::kU8: return ncclUint8;
  }
  return ncclUint8;
}

ncclRedOp_t NcclOp(GroupReduce r) {
  switch (r) {
    case GroupReduce::kSum: return ncclSum;
    case GroupReduce::kMax: return ncclMax;
    case GroupReduce::kMin: return ncclMin;
  }
  return ncclSum;
}

class NcclGroup final : public CollectiveGroup {
 public:
  NcclGroup(ncclComm_t comm, int members, int index) : comm_(comm), members_(members), index_(index) {}
  ~NcclGroup() override {
    if (comm_) {
      MakeCurrent();
      stream_.Synchronize();
      ncclCommDestroy(comm_);
    }
  }
  int members() const override { return members_; }
  int index() const override { return index_; }
  void After(DeviceStream& s) override {
    MakeCurrent();
    cudaEvent_t e = nullptr;
    // One event per wait: a cached one recorded again while a wait on it is queued is legal in
    // CUDA, but a fresh one keeps each wait's meaning plain; events are cheap.
    if (cudaEventCreateWithFlags(&e, cudaEventDisableTiming) != cudaSuccess) {
      Note(CudaStatus(cudaGetLastError(), "cudaEventCreate"));
      return;
    }
    Note(CudaStatus(cudaEventRecord(e, static_cast<CudaStream&>(s).handle()), "cudaEventRecord"));
    Note(CudaStatus(cudaStreamWaitEvent(stream_.handle(), e, 0), "cudaStreamWaitEvent"));
    cudaEventDestroy(e);  // released once the wait is done
  }
  void Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) override {
    MakeCurrent();
    Note(CudaStatus(cudaMemcpy2DAsync(dst, dpitch, src, spitch, width, height, cudaMemcpyDeviceToDevice, stream_.handle()),
                    "cudaMemcpy2DAsync"));
  }
  void Zero(void* p, size_t bytes) override {
    MakeCurrent();
    Note(CudaStatus(cudaMemsetAsync(p, 0, bytes, stream_.handle()), "cudaMemsetAsync"));
  }
  Status AllReduce(const void* in, void* out, size_t count, DType t, GroupReduce op) override {
    MakeCurrent();
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return Aborted();
    return NcclStatus(ncclAllReduce(in, out, count, NcclType(t), NcclOp(op), comm_, stream_.handle()), "ncclAllReduce");
  }
  Status AllGather(const void* in, void* out, size_t count, DType t) override {
    MakeCurrent();
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return Aborted();
    return NcclStatus(ncclAllGather(in, out, count, NcclType(t), comm_, stream_.handle()), "ncclAllGather");
  }
  Status ReduceScatter(const void* in, void* out, size_t count, DType t, GroupReduce op) override {
    MakeCurrent();
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return Aborted();
    return NcclStatus(ncclReduceScatter(in, out, count, NcclType(t), NcclOp(op), comm_, stream_.handle()), "ncclReduceScatter");
  }
  Status Exchange(const std::vector<Part>& parts, DType t) override {
    MakeCurrent();
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return Aborted();
    const size_t es = SizeOf(t);
    RETURN_IF_ERROR(NcclStatus(ncclGroupStart(), "ncclGroupStart"));
    Status s;
    for (size_t j = 0; j < parts.size() && s.ok(); ++j) {
      const Part& p = parts[j];
      if (static_cast<int>(j) == index_) {  // this member's own part: a copy, not a message to itself
        if (p.send_count) s = CudaStatus(cudaMemcpyAsync(p.recv, p.send, p.send_count * es, cudaMemcpyDeviceToDevice, stream_.handle()),
                                         "cudaMemcpyAsync");
        continue;
      }
      if (p.send_count) s = NcclStatus(ncclSend(p.send, p.send_count, NcclType(t), static_cast<int>(j), comm_, stream_.handle()), "ncclSend");
      if (s.ok() && p.recv_count)
        s = NcclStatus(ncclRecv(p.recv, p.recv_count, NcclType(t), static_cast<int>(j), comm_, stream_.handle()), "ncclRecv");
    }
    const Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
    return s.ok() ? end : s;
  }
  std::shared_ptr<Event> Record() override { return stream_.Record(); }
  Status Error() override {
    if (!error_.ok()) return error_;
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return Aborted();
    ncclResult_t async = ncclSuccess;
    const ncclResult_t r = ncclCommGetAsyncError(comm_, &async);
    if (r != ncclSuccess) return NcclStatus(r, "ncclCommGetAsyncError");
    return NcclStatus(async, "a collective");
  }
  // Connects this member to every other, for the collectives and for send/recv, by one tiny
  // operation of each kind. NCCL connects on first use otherwise, a blocking exchange with the
  // peers inside whatever call comes first; the runtime starts different groups' first
  // operations in different orders on different ranks, and those exchanges would wait on each
  // other. Groups are made in plan order on every rank, so these run in one order everywhere.
  Status Connect() {
    MakeCurrent();
    void* buf = nullptr;
    const size_t bytes = 2 * static_cast<size_t>(members_);
    RETURN_IF_ERROR(CudaStatus(cudaMalloc(&buf, bytes), "cudaMalloc"));
    char* b = static_cast<char*>(buf);
    Status s = CudaStatus(cudaMemset(buf, 0, bytes), "cudaMemset");
    if (s.ok()) s = NcclStatus(ncclAllReduce(b, b, 1, ncclUint8, ncclSum, comm_, stream_.handle()), "ncclAllReduce");
    if (s.ok() && members_ > 1) {
      s = NcclStatus(ncclGroupStart(), "ncclGroupStart");
      for (int j = 0; j < members_ && s.ok(); ++j) {
        if (j == index_) continue;
        s = NcclStatus(ncclSend(b + j, 1, ncclUint8, j, comm_, stream_.handle()), "ncclSend");
        if (s.ok()) s = NcclStatus(ncclRecv(b + members_ + j, 1, ncclUint8, j, comm_, stream_.handle()), "ncclRecv");
      }
      const Status end = NcclStatus(ncclGroupEnd(), "ncclGroupEnd");
      if (s.ok()) s = end;
    }
    if (s.ok()) s = CudaStatus(cudaStreamSynchronize(stream_.handle()), "cudaStreamSynchronize");
    cudaFree(buf);
    return s;
  }
  // From any thread, also while another queues on the group (the lock) or NCCL's kernels wait for
  // a peer that is gone (the abort ends them).
  void Abort() override {
    MakeCurrent();
    std::lock_guard<std::mutex> lock(mu_);
    if (!comm_) return;
    ncclCommAbort(comm_);
    comm_ = nullptr;
  }

 private:
  void Note(const Status& s) {
    if (!s.ok() && error_.ok()) error_ = s;
  }

  static Status Aborted() { return Status::Runtime("[nccl] the communicator was aborted"); }

  std::mutex mu_;  // comm_, which Abort may end from another thread
  ncclComm_t comm_;
  const int members_, index_;
  CudaStream stream_;
  Status error_;  // the first CUDA call of a queued copy or wait that failed
};

}  // namespace

Status MakeNcclId(GroupId* id) {
  ncclUniqueId u;
  RETURN_IF_ERROR(NcclStatus(ncclGetUniqueId(&u), "ncclGetUniqueId"));
  static_assert(sizeof u == sizeof(GroupId));
  std::memcpy(id->data(), &u, sizeof u);
  return Status::Ok();
}

Result<std::unique_ptr<CollectiveGroup>> MakeNcclGroup(int members, const GroupId& id, int index) {
  MakeCurrent();
  ncclUniqueId u;
  std::memcpy(&u, id.data(), sizeof u);
  ncclComm_t comm = nullptr;
  // Every algorithm's connections at init, not on a collective's first use (see Connect).
  setenv("NCCL_RUNTIME_CONNECT", "0", /*overwrite=*/0);
  RETURN_IF_ERROR(NcclStatus(ncclCommInitRank(&comm, members, u, index), "ncclCommInitRank"));
  auto group = std::make_unique<NcclGroup>(comm, members, index);
  RETURN_IF_ERROR(group->Connect());
  return std::unique_ptr<CollectiveGroup>(std::move(group));
}

std::string NcclVersionString() {
  int v = 0;
  if (ncclGetVersion(&v) != ncclSuccess) return "";
  // NCCL 2.9 on: major*10000 + minor*100 + patch.
  return std::to_string(v / 10000) + "." + std::to_string(v / 100 % 100) + "." + std::to_string(v % 100);
}

std::string PciBusId() {
  MakeCurrent();
  char bus[64] = {};
  if (cudaDeviceGetPCIBusId(bus, sizeof bus, Ordinal()) != cudaSuccess) {
    cudaGetLastError();
    return "gpu" + std::to_string(Ordinal());
  }
  return bus;
}

}  // namespace fr::cuda
