// Collective groups on MPI over host memory (comm.h: HostGroups): a thread per group runs what is
// queued on it in order, as a device stream would, with MPI's blocking collectives on a
// communicator of the group's own. Groups of different collective ids need no common order across
// ranks. NCCL's, each on a stream of its own and connected when made (ops/cuda/nccl.cpp Connect),
// are meant to need none either; that is unverified on several GPUs.
#include <mpi.h>

#include <climits>
#include <condition_variable>
#include <cstring>
#include <deque>
#include <functional>
#include <mutex>
#include <thread>

#include "actor/comm.h"
#include "actor/mpi_util.h"

namespace fr::actor {
namespace {

MPI_Op MpiOp(GroupReduce r) {
  switch (r) {
    case GroupReduce::kSum: return MPI_SUM;
    case GroupReduce::kMax: return MPI_MAX;
    case GroupReduce::kMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// Done once the group's thread has run everything queued before it.
class QueueEvent final : public Event {
 public:
  bool Done() const override {
    std::lock_guard<std::mutex> lock(mu_);
    return done_;
  }
  void Wait() const override {
    std::unique_lock<std::mutex> lock(mu_);
    cv_.wait(lock, [this] { return done_; });
  }
  void Set() {
    std::lock_guard<std::mutex> lock(mu_);
    done_ = true;
    cv_.notify_all();
  }

 private:
  mutable std::mutex mu_;
  mutable std::condition_variable cv_;
  bool done_ = false;
};

class HostGroup final : public CollectiveGroup {
 public:
  HostGroup(MPI_Comm comm, int members, int index) : comm_(comm), members_(members), index_(index) {
    worker_ = std::thread([this] { Work(); });
  }
  ~HostGroup() override {
    {
      std::lock_guard<std::mutex> lock(mu_);
      stop_ = true;
      cv_.notify_all();
    }
    if (worker_.joinable()) worker_.join();
    if (!aborted_) MPI_Comm_free(&comm_);
  }

  int members() const override { return members_; }
  int index() const override { return index_; }
  void After(DeviceStream& s) override {
    std::shared_ptr<Event> e = s.Record();
    Queue([e] { e->Wait(); });
  }
  void Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) override {
    Queue([=] {
      for (size_t r = 0; r < height; ++r)
        std::memcpy(static_cast<char*>(dst) + r * dpitch, static_cast<const char*>(src) + r * spitch, width);
    });
  }
  void Zero(void* p, size_t bytes) override {
    Queue([=] { std::memset(p, 0, bytes); });
  }
  Status AllReduce(const void* in, void* out, size_t count, DType t, GroupReduce op) override {
    RETURN_IF_ERROR(Fits(count));
    Queue([=, this] {
      Check(MPI_Allreduce(in == out ? MPI_IN_PLACE : in, out, static_cast<int>(count), MpiTypeOf(t), MpiOp(op), comm_),
            "MPI_Allreduce");
    });
    return Status::Ok();
  }
  Status AllGather(const void* in, void* out, size_t count, DType t) override {
    RETURN_IF_ERROR(Fits(count));
    const bool in_place = in == static_cast<const char*>(out) + static_cast<size_t>(index_) * count * SizeOf(t);
    Queue([=, this] {
      const int n = static_cast<int>(count);
      Check(MPI_Allgather(in_place ? MPI_IN_PLACE : in, n, MpiTypeOf(t), out, n, MpiTypeOf(t), comm_), "MPI_Allgather");
    });
    return Status::Ok();
  }
  Status ReduceScatter(const void* in, void* out, size_t count, DType t, GroupReduce op) override {
    RETURN_IF_ERROR(Fits(count));
    Queue([=, this] {
      Check(MPI_Reduce_scatter_block(in, out, static_cast<int>(count), MpiTypeOf(t), MpiOp(op), comm_),
            "MPI_Reduce_scatter_block");
    });
    return Status::Ok();
  }
  Status Exchange(const std::vector<Part>& parts, DType t) override {
    for (const Part& p : parts) {
      RETURN_IF_ERROR(Fits(p.send_count));
      RETURN_IF_ERROR(Fits(p.recv_count));
    }
    Queue([=, this] {
      std::vector<MPI_Request> reqs;
      for (size_t j = 0; j < parts.size(); ++j) {
        const Part& p = parts[j];
        MPI_Request r = MPI_REQUEST_NULL;
        if (p.recv_count) {
          Check(MPI_Irecv(p.recv, static_cast<int>(p.recv_count), MpiTypeOf(t), static_cast<int>(j), 0, comm_, &r), "MPI_Irecv");
          reqs.push_back(r);
        }
        if (p.send_count) {
          Check(MPI_Isend(p.send, static_cast<int>(p.send_count), MpiTypeOf(t), static_cast<int>(j), 0, comm_, &r), "MPI_Isend");
          reqs.push_back(r);
        }
      }
      Check(MPI_Waitall(static_cast<int>(reqs.size()), reqs.data(), MPI_STATUSES_IGNORE), "MPI_Waitall");
    });
    return Status::Ok();
  }
  std::shared_ptr<Event> Record() override {
    auto e = std::make_shared<QueueEvent>();
    Queue([e] { e->Set(); });
    return e;
  }
  Status Error() override {
    std::lock_guard<std::mutex> lock(mu_);
    return error_;
  }
  // The thread may be inside MPI, waiting on a member that is gone: left to the process's exit.
  void Abort() override {
    std::lock_guard<std::mutex> lock(mu_);
    aborted_ = stop_ = true;
    cv_.notify_all();
    if (worker_.joinable()) worker_.detach();
  }

 private:
  static Status Fits(size_t count) {
    if (count > static_cast<size_t>(INT_MAX)) return Status::Runtime("a message of " + std::to_string(count) + " elements is too large for MPI");
    return Status::Ok();
  }
  void Check(int rc, const char* call) {
    if (rc == MPI_SUCCESS) return;
    std::lock_guard<std::mutex> lock(mu_);
    if (error_.ok()) error_ = Status::Runtime(std::string(call) + " failed (MPI error " + std::to_string(rc) + ")");
  }
  void Queue(std::function<void()> f) {
    std::lock_guard<std::mutex> lock(mu_);
    queue_.push_back(std::move(f));
    cv_.notify_all();
  }
  void Work() {
    for (;;) {
      std::function<void()> f;
      {
        std::unique_lock<std::mutex> lock(mu_);
        cv_.wait(lock, [this] { return stop_ || !queue_.empty(); });
        if (aborted_ || queue_.empty()) return;  // stopped: what was queued ran first
        f = std::move(queue_.front());
        queue_.pop_front();
      }
      f();
    }
  }

  MPI_Comm comm_;
  const int members_, index_;
  std::mutex mu_;
  std::condition_variable cv_;
  std::deque<std::function<void()>> queue_;
  bool stop_ = false, aborted_ = false;
  Status error_;
  std::thread worker_;
};

class HostGroupMaker final : public GroupMaker {
 public:
  Result<std::unique_ptr<CollectiveGroup>> Make(const std::vector<int>& ranks, int index) override {
    MPI_Group all = MPI_GROUP_NULL, mine = MPI_GROUP_NULL;
    MPI_Comm c = MPI_COMM_NULL;
    int rc = MPI_Comm_group(world_.get(), &all);
    if (rc == MPI_SUCCESS) rc = MPI_Group_incl(all, static_cast<int>(ranks.size()), ranks.data(), &mine);
    if (rc == MPI_SUCCESS) rc = MPI_Comm_create_group(world_.get(), mine, 0, &c);
    if (mine != MPI_GROUP_NULL) MPI_Group_free(&mine);
    if (all != MPI_GROUP_NULL) MPI_Group_free(&all);
    if (rc != MPI_SUCCESS) return Status::Runtime("MPI_Comm_create_group failed (MPI error " + std::to_string(rc) + ")");
    MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
    return std::unique_ptr<CollectiveGroup>(new HostGroup(c, static_cast<int>(ranks.size()), index));
  }

 private:
  WorldDup world_;
};

}  // namespace

std::unique_ptr<GroupMaker> HostGroups() { return std::make_unique<HostGroupMaker>(); }

}  // namespace fr::actor
