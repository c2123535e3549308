// The MPI Communicator (comm.h) for CPU tensors: every movement is one nonblocking MPI call.
// Collectives run on one communicator per group, created in Prepare; sends and receives run on a
// duplicate of the world communicator, so a plan's tags never meet anyone else's messages.
#include <mpi.h>

#include <algorithm>
#include <array>
#include <atomic>
#include <climits>
#include <new>
#include <cstdio>
#include <cstdlib>
#include <cstring>
#include <map>
#include <memory>
#include <set>
#include <string>
#include <thread>
#include <unordered_map>
#include <utility>
#include <vector>

#include "actor/comm.h"
#include "actor/movement.h"
#include "actor/mpi_util.h"

namespace fr::actor {

namespace {


using boxing::Op;
using boxing::Task;

// Copies part j of the p parts of a tensor along an axis to `staging` as that part's tensor,
// row-major (pack), or back (unpack). Returns the part's bytes.
size_t MovePart(char* tensor, const AxisView& v, int p, int j, size_t es, char* staging, bool pack) {
  const sbp::Range r = sbp::SplitRange(v.dim, p, j);
  const size_t run = static_cast<size_t>(r.size() * v.inner) * es;
  for (int64_t o = 0; o < v.outer; ++o) {
    char* t = tensor + static_cast<size_t>((o * v.dim + r.begin) * v.inner) * es;
    char* s = staging + static_cast<size_t>(o) * run;
    if (pack) {
      std::memcpy(s, t, run);
    } else {
      std::memcpy(t, s, run);
    }
  }
  return run * static_cast<size_t>(v.outer);
}

// All p parts, one after another.
void Move(char* tensor, const AxisView& v, int p, size_t es, char* staging, bool pack) {
  size_t at = 0;
  for (int j = 0; j < p; ++j) at += MovePart(tensor, v, p, j, es, staging + at, pack);
}

// A bucket's layout by member: member 0's part of every tensor (parts along `axis`, in tensor
// order), then member 1's, and so on. Packs the tensors into `staging` or unpacks them from it.
void MoveByMember(const std::vector<Tensor>& ts, int axis, int p, char* staging, bool pack) {
  size_t at = 0;
  for (int j = 0; j < p; ++j)
    for (const Tensor& t : ts)
      at += MovePart(static_cast<char*>(t.raw()), Around(t.shape(), axis), p, j, SizeOf(t.dtype()), staging + at, pack);
}

// Element counts and displacements of the p parts along an axis, as MPI wants them (int).
struct Counts {
  std::vector<int> n, displ;
};

Counts PartCounts(const AxisView& v, int p) {
  Counts c;
  int at = 0;
  for (int j = 0; j < p; ++j) {
    c.n.push_back(static_cast<int>(v.outer * sbp::SplitRange(v.dim, p, j).size() * v.inner));
    c.displ.push_back(at);
    at += c.n.back();
  }
  return c;
}

// The same for a bucket laid out by member (MoveByMember): member j's parts of every tensor.
Counts MemberCounts(const std::vector<Tensor>& ts, int axis, int p) {
  Counts c{std::vector<int>(static_cast<size_t>(p), 0), {}};
  for (const Tensor& t : ts) {
    const Counts one = PartCounts(Around(t.shape(), axis), p);
    for (int j = 0; j < p; ++j) c.n[static_cast<size_t>(j)] += one.n[static_cast<size_t>(j)];
  }
  int at = 0;
  for (int n : c.n) {
    c.displ.push_back(at);
    at += n;
  }
  return c;
}

std::string MpiError(int rc) {
  char text[MPI_MAX_ERROR_STRING];
  int len = 0;
  if (MPI_Error_string(rc, text, &len) != MPI_SUCCESS) return "MPI error " + std::to_string(rc);
  return std::string(text, static_cast<size_t>(len));
}

MPI_Op OpOf(sbp::Reduce r) {
  switch (r) {
    case sbp::Reduce::kSum: return MPI_SUM;
    case sbp::Reduce::kMax: return MPI_MAX;
    case sbp::Reduce::kMin: return MPI_MIN;
  }
  return MPI_OP_NULL;
}

// A staging buffer: bytes left uninitialised (a pack or MPI writes them all before anything reads
// them), kept when shrunk. The communicator reuses them across movements: a fresh, zero-filled
// vector per gradient bucket spent most of starting it faulting in new pages.
class Stage {
 public:
  Stage() = default;
  Stage(Stage&& o) noexcept { *this = std::move(o); }
  Stage& operator=(Stage&& o) noexcept {
    data_ = std::move(o.data_);
    capacity_ = std::exchange(o.capacity_, 0);
    size_ = std::exchange(o.size_, 0);
    return *this;
  }
  void resize(size_t n) {
    if (n > capacity_) {
      data_.reset(new char[n]);
      capacity_ = n;
    }
    size_ = n;
  }
  char* data() { return data_.get(); }
  bool empty() const { return size_ == 0; }

 private:
  std::unique_ptr<char[]> data_;
  size_t capacity_ = 0, size_ = 0;
};

// A sum all-reduce of float32 among ranks of one node, through a window of memory they share:
// each member copies its inputs into its own slot (at boxing::BucketOffsets) and says so, then
// every member sums all slots, in member order (the same bits on every member), into its outputs
// and says so; a member copies into its slot for the next act once every member has read the
// last. Inputs that lie in the slot already (the slot is the collective's Communicator::InputBuffer)
// are not copied: their writer waits for the readers instead (AwaitInputBuffer). Starting takes at most one copy and
// completing one pass over the slots, where Open MPI's nonblocking all-reduce builds a schedule
// and advances it only inside the progress passes the rank makes between its acts.
struct SharedReduce {
  static constexpr size_t kHeader = 128;  // two counters, each on its own cache line
  static_assert(std::atomic<int64_t>::is_always_lock_free);
  // A member's slot for acts of up to `bytes`, whole cache lines.
  static int64_t SlotBytes(int64_t bytes) { return (bytes + 63) / 64 * 64; }
  MPI_Comm node = MPI_COMM_NULL;
  MPI_Win win = MPI_WIN_NULL;
  int64_t capacity = 0;                   // bytes of a member's slot
  int k = 0;                              // this member's index
  std::vector<char*> base;                // per member: its counters, then its slot
  std::vector<int> ranks;                 // per member: its global rank, for errors
  int64_t acts = 0;                       // acts started here
  std::atomic<int64_t>& arrived(size_t j) { return *reinterpret_cast<std::atomic<int64_t>*>(base[j]); }
  std::atomic<int64_t>& read(size_t j) { return *reinterpret_cast<std::atomic<int64_t>*>(base[j] + 64); }
  float* slot(size_t j) { return reinterpret_cast<float*>(base[j] + kHeader); }
  // Whether every member's counter has reached n.
  bool AllArrived(int64_t n) { return AllAt(&SharedReduce::arrived, n); }
  bool AllRead(int64_t n) { return AllAt(&SharedReduce::read, n); }

 private:
  bool AllAt(std::atomic<int64_t>& (SharedReduce::*counter)(size_t), int64_t n) {
    for (size_t j = 0; j < base.size(); ++j)
      if ((this->*counter)(j).load(std::memory_order_acquire) < n) return false;
    return true;
  }
};

// One movement in flight: its request and everything MPI reads or writes until it completes.
struct Pending {
  MPI_Request req = MPI_REQUEST_NULL;
  Task task;                         // for errors and the completion step
  std::vector<Tensor> in;            // kept alive: MPI reads them
  std::vector<Tensor> out;           // kept alive: MPI writes them, or unpack does
  Stage send_stage;                  // packed input parts, when they are not contiguous
  Stage recv_stage;                  // received parts, unpacked into `out` on completion
  AxisView unpack;                   // `out` around the concat axis, when recv_stage is used
  int parts = 0;
  bool bucket = false;               // recv_stage holds every output, one after another
  bool gathered = false;             // recv_stage holds each member's part of every output in turn
  SharedReduce* shared = nullptr;    // an all-reduce through shared memory (no request)
  int64_t act = 0;                   // its act
  std::vector<int64_t> at;           // each input's offset in a slot (boxing::BucketOffsets)
  bool in_place = false;             // every input lies in this member's slot at its offset
  bool written = false;              // this member's slot holds its inputs
  bool reduced = false;              // its outputs hold the sums
};

class MpiCommunicator final : public Communicator {
 public:
  MpiCommunicator(MPI_Comm data, MPI_Comm setup, MPI_Comm notices, bool owns_mpi, int tag_ub)
      : data_(data), setup_(setup), notices_(notices), owns_mpi_(owns_mpi), tag_ub_(tag_ub) {
    MPI_Comm_rank(data_, &rank_);
    MPI_Comm_size(data_, &size_);
  }
  ~MpiCommunicator() override;

  int rank() const override { return rank_; }
  int size() const override { return size_; }
  Status Prepare(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& input_bytes) override;
  Result<CommHandle> Start(const Task& t, std::vector<Tensor> in, std::vector<Tensor> out, DeviceStream* after) override;
  Result<std::vector<CommHandle>> Poll() override;
  std::shared_ptr<Storage> InputBuffer(int collective, int64_t bytes) override;
  Status AwaitInputBuffer(int collective) override;
  void Cancel() override { cancelled_.store(true, std::memory_order_release); }
  int in_flight() const override { return static_cast<int>(pending_.size()); }
  int64_t buffered_acts() const override { return buffered_acts_; }
  Status BeginNotices(int64_t run) override;
  Status Notify(const StepNotice& mine) override;
  Result<std::vector<int>> PollNotices(StepNotice* merged) override;
  // Not MPI_Abort: where several ranks abort at once (a scheduler signals every rank, every rank
  // fails the same check), Open MPI 4.1's mpirun can crash relaying their abort messages and exit
  // 139 instead of the code. A rank that exits without MPI_Finalize makes mpirun stop the job all
  // the same, and mpirun exits with that rank's code.
  [[noreturn]] void Abort(int code) override {
    std::fflush(nullptr);
    std::_Exit(code);
  }

 private:
  Status Fail(const std::string& what, const std::string& why) const { return MovementError(rank_, what, why); }
  Status Mpi(int rc, const char* call, const std::string& what) const {
    return rc == MPI_SUCCESS ? Status::Ok() : Fail(what, std::string(call) + ": " + MpiError(rc));
  }
  Status CheckTensors(const Task& t, const std::vector<Tensor>& in, const std::vector<Tensor>& out) const;
  Status StartCollective(Pending& p, MPI_Comm comm, int k);
  // Each collective op's start: staging where its parts are not contiguous, then the nonblocking call.
  Status StartAllReduce(Pending& p, MPI_Comm comm);
  Status StartAllGather(Pending& p, MPI_Comm comm, int k);
  Status StartReduceScatter(Pending& p, MPI_Comm comm, int k);
  Status StartAllToAll(Pending& p, MPI_Comm comm);
  Status PrepareShared(int id, MPI_Comm group, int64_t bytes);
  // The global rank of each member of `c`, in its rank order.
  Status GlobalRanks(MPI_Comm c, std::vector<int>* ranks, const std::string& what) const;
  void FreeShared(int id);
  // Advances an all-reduce through shared memory; true once its outputs hold the sums.
  bool AdvanceShared(Pending& p);
  // Completes a movement MPI reported done: checks a receive's length, unpacks staged parts.
  Status Complete(Pending& p, const MPI_Status& st);

  MPI_Comm data_;   // sends and receives
  MPI_Comm setup_;  // parent of the group communicators
  MPI_Comm notices_;  // the notices that end a run
  bool owns_mpi_;
  int tag_ub_;
  int rank_ = 0, size_ = 0;
  // One communicator per collective id this rank takes part in (with its group), so collectives of
  // different tasks never have to start in the same order on every rank: each task's acts do.
  std::map<int, std::pair<std::vector<int>, MPI_Comm>> comms_;
  std::map<int, SharedReduce> shared_;  // by collective id, where Prepare set one up
  bool shared_unavailable_ = false;      // a window could not be made: said once
  std::atomic<bool> cancelled_{false};   // Cancel: waits on other ranks fail
  int64_t buffered_acts_ = 0;
  std::unordered_map<int, Pending> pending_;
  int next_id_ = 0;
  // Staging buffers of completed movements, for the next ones (Stage).
  std::vector<Stage> spare_stages_;
  // Poll's scratch, kept to avoid allocating per pass.
  std::vector<int> poll_ids_, poll_index_;
  std::vector<MPI_Request> poll_reqs_;
  std::vector<MPI_Status> poll_status_;
  // This run's notices: {last_step, stopping} from each rank and to each, by rank.
  int notice_tag_ = 0;
  std::vector<std::array<int64_t, 2>> notice_in_;
  std::array<int64_t, 2> notice_out_{};
  std::vector<MPI_Request> notice_recv_, notice_send_;
  bool notified_ = false;
};

MpiCommunicator::~MpiCommunicator() {
  int finalized = 0;
  MPI_Finalized(&finalized);
  if (finalized) return;
  if (!pending_.empty()) {
    std::fprintf(stderr, "[actor] rank %d: communicator destroyed with %zu movements in flight\n", rank_,
                 pending_.size());
    std::fflush(stderr);
    MPI_Abort(MPI_COMM_WORLD, 1);
  }
  while (!shared_.empty()) FreeShared(shared_.begin()->first);
  for (auto& [id, gc] : comms_) MPI_Comm_free(&gc.second);
  for (MPI_Request& r : notice_recv_) {  // a failed run's, whose peers never sent theirs
    if (r == MPI_REQUEST_NULL) continue;
    MPI_Cancel(&r);
    MPI_Request_free(&r);
  }
  MPI_Comm_free(&data_);
  MPI_Comm_free(&setup_);
  MPI_Comm_free(&notices_);
  if (owns_mpi_) MPI_Finalize();
}

Status MpiCommunicator::BeginNotices(int64_t run) {
  const std::string what = "the notices that end run " + std::to_string(run);
  for (MPI_Request r : notice_recv_)
    if (r != MPI_REQUEST_NULL) return Fail(what, "the last run's notices are still in flight");
  notice_tag_ = static_cast<int>(run % (static_cast<int64_t>(tag_ub_) + 1));
  notice_in_.assign(static_cast<size_t>(size_), {-1, 0});
  notice_recv_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  notice_send_.assign(static_cast<size_t>(size_), MPI_REQUEST_NULL);
  notified_ = false;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    RETURN_IF_ERROR(Mpi(MPI_Irecv(notice_in_[static_cast<size_t>(r)].data(), 2, MPI_INT64_T, r, notice_tag_, notices_,
                                  &notice_recv_[static_cast<size_t>(r)]),
                        "MPI_Irecv", what));
  }
  return Status::Ok();
}

Status MpiCommunicator::Notify(const StepNotice& mine) {
  notice_out_ = {mine.last_step, mine.stopping ? 1 : 0};
  notice_in_[static_cast<size_t>(rank_)] = notice_out_;
  notified_ = true;
  for (int r = 0; r < size_; ++r) {
    if (r == rank_) continue;
    RETURN_IF_ERROR(Mpi(MPI_Isend(notice_out_.data(), 2, MPI_INT64_T, r, notice_tag_, notices_, &notice_send_[static_cast<size_t>(r)]),
                        "MPI_Isend", "the notice that ends this rank's run"));
  }
  return Status::Ok();
}

Result<std::vector<int>> MpiCommunicator::PollNotices(StepNotice* merged) {
  std::vector<int> missing;
  for (int r = 0; r < size_; ++r) {
    const auto i = static_cast<size_t>(r);
    int done = 1;
    if (notice_recv_[i] != MPI_REQUEST_NULL)
      RETURN_IF_ERROR(Mpi(MPI_Test(&notice_recv_[i], &done, MPI_STATUS_IGNORE), "MPI_Test", "rank " + std::to_string(r) + "'s notice"));
    if (done && notice_send_[i] != MPI_REQUEST_NULL)
      RETURN_IF_ERROR(Mpi(MPI_Test(&notice_send_[i], &done, MPI_STATUS_IGNORE), "MPI_Test", "the notice to rank " + std::to_string(r)));
    if (r == rank_ && !notified_) done = 0;
    if (!done) {
      missing.push_back(r);
      continue;
    }
    merged->last_step = std::max(merged->last_step, notice_in_[i][0]);
    merged->stopping = merged->stopping || notice_in_[i][1] != 0;
  }
  return missing;
}

Status MpiCommunicator::GlobalRanks(MPI_Comm c, std::vector<int>* ranks, const std::string& what) const {
  int n = 0;
  MPI_Comm_size(c, &n);
  std::vector<int> local(static_cast<size_t>(n));
  for (int j = 0; j < n; ++j) local[static_cast<size_t>(j)] = j;
  ranks->assign(static_cast<size_t>(n), -1);
  MPI_Group from = MPI_GROUP_NULL, world = MPI_GROUP_NULL;
  Status s = Mpi(MPI_Comm_group(c, &from), "MPI_Comm_group", what);
  if (s.ok()) s = Mpi(MPI_Comm_group(setup_, &world), "MPI_Comm_group", what);
  if (s.ok()) s = Mpi(MPI_Group_translate_ranks(from, n, local.data(), world, ranks->data()), "MPI_Group_translate_ranks", what);
  if (from != MPI_GROUP_NULL) MPI_Group_free(&from);
  if (world != MPI_GROUP_NULL) MPI_Group_free(&world);
  return s;
}

Status MpiCommunicator::PrepareShared(int id, MPI_Comm group, int64_t bytes) {
  const std::string what = "prepare shared memory for collective " + std::to_string(id);
  int members = 0, on_node = 0;
  MPI_Comm node = MPI_COMM_NULL;
  RETURN_IF_ERROR(Mpi(MPI_Comm_size(group, &members), "MPI_Comm_size", what));
  RETURN_IF_ERROR(Mpi(MPI_Comm_split_type(group, MPI_COMM_TYPE_SHARED, 0, MPI_INFO_NULL, &node), "MPI_Comm_split_type", what));
  MPI_Comm_size(node, &on_node);
  int all_here = on_node == members, everywhere = 0;  // the members agree: some may share a node, others not
  Status s = Mpi(MPI_Allreduce(&all_here, &everywhere, 1, MPI_INT, MPI_LAND, group), "MPI_Allreduce", what);
  if (!s.ok() || !everywhere) {
    MPI_Comm_free(&node);
    return s;
  }
  SharedReduce r;
  r.node = node;
  r.capacity = SharedReduce::SlotBytes(bytes);
  MPI_Comm_rank(node, &r.k);
  char* mine = nullptr;
  const int made = MPI_Win_allocate_shared(static_cast<MPI_Aint>(SharedReduce::kHeader + static_cast<size_t>(r.capacity)), 1,
                                           MPI_INFO_NULL, node, &mine, &r.win) == MPI_SUCCESS;
  // Where Open MPI cannot make the window (no shared-memory one-sided component, say), the
  // collective goes through MPI as it would off one node: every member fails alike, and says so
  // once. A window made on some members only cannot be freed without the others: an error.
  int made_on = 0;  // members that made their part
  RETURN_IF_ERROR(Mpi(MPI_Allreduce(&made, &made_on, 1, MPI_INT, MPI_SUM, node), "MPI_Allreduce", what));
  if (made_on < on_node) {
    MPI_Comm_free(&node);
    if (made_on > 0) return Fail(what, "MPI_Win_allocate_shared failed on some members of the node only");
    if (!shared_unavailable_ && rank_ == 0) {
      std::fprintf(stderr, "[actor] rank 0: no shared-memory window for all-reduces (MPI_Win_allocate_shared failed); they go through MPI\n");
      std::fflush(stderr);
    }
    shared_unavailable_ = true;
    return Status::Ok();
  }
  new (mine) std::atomic<int64_t>(0);
  new (mine + 64) std::atomic<int64_t>(0);
  for (int j = 0; j < on_node && s.ok(); ++j) {
    MPI_Aint size = 0;
    int unit = 0;
    char* at = nullptr;
    s = Mpi(MPI_Win_shared_query(r.win, j, &size, &unit, &at), "MPI_Win_shared_query", what);
    r.base.push_back(at);
  }
  if (s.ok()) s = GlobalRanks(node, &r.ranks, what);
  if (s.ok()) s = Mpi(MPI_Barrier(node), "MPI_Barrier", what);  // every member's counters are zero
  shared_[id] = std::move(r);
  if (!s.ok()) FreeShared(id);
  return s;
}

std::shared_ptr<Storage> MpiCommunicator::InputBuffer(int collective, int64_t bytes) {
  auto it = shared_.find(collective);
  if (it == shared_.end() || bytes > it->second.capacity) return nullptr;
  char* slot = reinterpret_cast<char*>(it->second.slot(static_cast<size_t>(it->second.k)));
  std::memset(slot, 0, static_cast<size_t>(bytes));
  // The window is freed with the communicator (FreeShared), not by the storage.
  return std::make_shared<Storage>(slot, static_cast<size_t>(bytes), std::shared_ptr<const void>(slot, [](const void*) {}));
}

Status MpiCommunicator::AwaitInputBuffer(int collective) {
  auto it = shared_.find(collective);
  if (it == shared_.end()) return Status::Ok();
  SharedReduce& r = it->second;
  while (!r.AllRead(r.acts)) {
    if (cancelled_.load(std::memory_order_acquire)) {
      std::string late;
      for (size_t j = 0; j < r.base.size(); ++j)
        if (r.read(j).load(std::memory_order_acquire) < r.acts) late += (late.empty() ? "" : ",") + std::to_string(r.ranks[j]);
      return Fail("shared-memory all-reduce of collective " + std::to_string(collective),
                  "cancelled while rank(s) " + late + " had not read this rank's inputs");
    }
    for (auto& [id, p] : pending_)
      if (p.shared) AdvanceShared(p);  // Poll reports those that complete
    std::this_thread::yield();           // a member sharing this core may be the reader
  }
  return Status::Ok();
}

void MpiCommunicator::FreeShared(int id) {
  auto it = shared_.find(id);
  if (it == shared_.end()) return;
  MPI_Win_free(&it->second.win);
  MPI_Comm_free(&it->second.node);
  shared_.erase(it);
}

Status MpiCommunicator::Prepare(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& input_bytes) {
  for (const std::vector<int>& g : groups) {
    std::set<int> seen(g.begin(), g.end());
    if (g.empty() || seen.size() != g.size() || *seen.begin() < 0 || *seen.rbegin() >= size_)
      return Fail("prepare group " + GroupString(g),
                  "a group needs distinct ranks of the world (size " + std::to_string(size_) + ")");
  }
  MPI_Group world;
  RETURN_IF_ERROR(Mpi(MPI_Comm_group(setup_, &world), "MPI_Comm_group", "prepare"));
  Status s;
  for (size_t i = 0; i < groups.size() && s.ok(); ++i) {
    const std::vector<int>& g = groups[i];
    const int id = static_cast<int>(i);
    const int64_t bytes = i < input_bytes.size() ? input_bytes[i] : 0;
    auto have = comms_.find(id);
    auto was = shared_.find(id);
    const int64_t had = was == shared_.end() ? 0 : was->second.capacity;
    if (have != comms_.end() && have->second.first == g && had == SharedReduce::SlotBytes(bytes)) continue;  // prepared before
    FreeShared(id);
    if (have != comms_.end()) {
      MPI_Comm_free(&have->second.second);
      comms_.erase(have);
    }
    if (std::find(g.begin(), g.end(), rank_) == g.end()) continue;
    const std::string what = "prepare group " + GroupString(g);
    MPI_Group sub;
    s = Mpi(MPI_Group_incl(world, static_cast<int>(g.size()), g.data(), &sub), "MPI_Group_incl", what);
    if (!s.ok()) break;
    // Members create their groups in list order; the tag only has to be a valid one.
    MPI_Comm c = MPI_COMM_NULL;
    s = Mpi(MPI_Comm_create_group(setup_, sub, static_cast<int>(i % 32768), &c), "MPI_Comm_create_group", what);
    MPI_Group_free(&sub);
    if (s.ok()) s = Mpi(MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN), "MPI_Comm_set_errhandler", what);
    if (c != MPI_COMM_NULL) comms_.emplace(id, std::make_pair(g, c));
    if (s.ok() && bytes > 0 && g.size() > 1) s = PrepareShared(id, c, bytes);
  }
  MPI_Group_free(&world);
  return s;
}

// The checks every communicator makes (movement.h), then MPI's own: host memory, and counts and
// tags that fit its ints.
Status MpiCommunicator::CheckTensors(const Task& t, const std::vector<Tensor>& in, const std::vector<Tensor>& out) const {
  RETURN_IF_ERROR(CheckMovement(t, rank_, size_, in, out));
  const std::string what = Describe(t);
  int64_t total = 0;
  for (const std::vector<Tensor>* side : {&in, &out}) {
    for (const Tensor& x : *side) {
      if (!HostVisible(x)) return Fail(what, "the MPI communicator moves host memory only");
      if (x.numel() > INT_MAX) return Fail(what, "a tensor of " + x.shape().ToString() + " is too large for MPI");
      if (side == &in) total += x.numel();
    }
  }
  if (total > INT_MAX) return Fail(what, "a bucket of " + std::to_string(total) + " elements is too large for MPI");
  if ((t.op == Op::kSend || t.op == Op::kRecv) && t.tag > tag_ub_)
    return Fail(what, "tag outside [0, " + std::to_string(tag_ub_) + "]");
  return Status::Ok();
}

Status MpiCommunicator::StartCollective(Pending& p, MPI_Comm comm, int k) {
  const Task& t = p.task;
  const std::string what = Describe(t);
  const Tensor& x = p.in[0];
  const bool reduces = t.op == Op::kAllReduce || t.op == Op::kReduceScatter;
  if (reduces && x.dtype() != DType::kF32 && x.dtype() != DType::kI64 && x.dtype() != DType::kI32)
    return Fail(what, "no reduction for " + std::string(Name(x.dtype())));
  switch (t.op) {
    case Op::kAllReduce: return StartAllReduce(p, comm);
    case Op::kAllGather: return StartAllGather(p, comm, k);
    case Op::kReduceScatter: return StartReduceScatter(p, comm, k);
    case Op::kAllToAll: return StartAllToAll(p, comm);
    default: return Fail(what, "not a collective");
  }
}

Status MpiCommunicator::StartAllReduce(Pending& p, MPI_Comm comm) {
  const Task& t = p.task;
  const std::string what = Describe(p.task);
  const Tensor& x = p.in[0];
  const Tensor& y = p.out.empty() ? p.in[0] : p.out[0];
  const MPI_Datatype type = MpiTypeOf(p.in[0].dtype());
  const size_t es = SizeOf(p.in[0].dtype());
  if (p.in.size() > 1 && LaidOutAlike(p.in, p.out)) {  // a bucket the runtime laid out end to end
    // One copy of the span, then in place: Open MPI's non-blocking all-reduce from one buffer
    // into another is much slower than in place.
    const char* begin = static_cast<const char*>(p.in.front().raw());
    const size_t span = static_cast<size_t>(static_cast<const char*>(p.in.back().raw()) - begin) + p.in.back().bytes();
    std::memcpy(p.out.front().raw(), begin, span);
    return Mpi(MPI_Iallreduce(MPI_IN_PLACE, p.out.front().raw(), static_cast<int>(span / es), type, OpOf(t.reduce), comm, &p.req),
               "MPI_Iallreduce", what);
  }
  if (p.in.size() > 1) {  // a bucket: one reduction over the inputs packed end to end
    size_t at = 0;
    for (const Tensor& i : p.in) at += i.bytes();
    p.recv_stage.resize(at);
    at = 0;
    for (const Tensor& i : p.in) {
      std::memcpy(p.recv_stage.data() + at, i.raw(), i.bytes());
      at += i.bytes();
    }
    p.bucket = true;
    return Mpi(MPI_Iallreduce(MPI_IN_PLACE, p.recv_stage.data(), static_cast<int>(at / es), type, OpOf(t.reduce), comm,
                              &p.req),
               "MPI_Iallreduce", what);
  }
  // In place, as for a bucket above.
  if (x.raw() != y.raw()) std::memcpy(y.raw(), x.raw(), y.bytes());
  return Mpi(MPI_Iallreduce(MPI_IN_PLACE, y.raw(), static_cast<int>(y.numel()), type, OpOf(t.reduce), comm, &p.req),
             "MPI_Iallreduce", what);
}

Status MpiCommunicator::StartAllGather(Pending& p, MPI_Comm comm, int k) {
  const Task& t = p.task;
  const std::string what = Describe(p.task);
  const int parts = static_cast<int>(p.task.group.size());
  const Tensor& x = p.in[0];
  const Tensor& y = p.out.empty() ? p.in[0] : p.out[0];
  const MPI_Datatype type = MpiTypeOf(p.in[0].dtype());
  const size_t es = SizeOf(p.in[0].dtype());
  if (p.in.size() > 1) {  // a bucket laid out by member (MoveByMember), unpacked on completion
    const Counts c = MemberCounts(p.out, t.concat_axis, parts);
    p.recv_stage.resize(static_cast<size_t>(c.displ.back() + c.n.back()) * es);
    size_t at = static_cast<size_t>(c.displ[static_cast<size_t>(k)]) * es;  // this member's parts, in place
    for (const Tensor& i : p.in) {
      std::memcpy(p.recv_stage.data() + at, i.raw(), i.bytes());
      at += i.bytes();
    }
    p.parts = parts;
    p.gathered = true;
    return Mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, p.recv_stage.data(), c.n.data(), c.displ.data(), type,
                               comm, &p.req),
               "MPI_Iallgatherv", what);
  }
  const AxisView v = Around(y.shape(), t.concat_axis);
  const Counts c = PartCounts(v, parts);
  void* recv = y.raw();
  if (v.outer > 1) {
    p.recv_stage.resize(y.bytes());
    p.unpack = v;
    p.parts = parts;
    recv = p.recv_stage.data();
  }
  // In place too, this rank's part copied to where it belongs first.
  std::memcpy(static_cast<char*>(recv) + static_cast<size_t>(c.displ[static_cast<size_t>(k)]) * es, x.raw(),
              static_cast<size_t>(c.n[static_cast<size_t>(k)]) * es);
  return Mpi(MPI_Iallgatherv(MPI_IN_PLACE, 0, MPI_DATATYPE_NULL, recv, c.n.data(), c.displ.data(), type, comm, &p.req),
             "MPI_Iallgatherv", what);
}

Status MpiCommunicator::StartReduceScatter(Pending& p, MPI_Comm comm, int k) {
  const Task& t = p.task;
  const std::string what = Describe(p.task);
  const int parts = static_cast<int>(p.task.group.size());
  const Tensor& x = p.in[0];
  const Tensor& y = p.out.empty() ? p.in[0] : p.out[0];
  const MPI_Datatype type = MpiTypeOf(p.in[0].dtype());
  const size_t es = SizeOf(p.in[0].dtype());
  if (p.in.size() > 1) {  // a bucket: packed by member, so member j gets part j of every gradient
    const Counts c = MemberCounts(p.in, t.split_axis, parts);
    p.send_stage.resize(static_cast<size_t>(c.displ.back() + c.n.back()) * es);
    MoveByMember(p.in, t.split_axis, parts, p.send_stage.data(), true);
    p.recv_stage.resize(static_cast<size_t>(c.n[static_cast<size_t>(k)]) * es);
    p.bucket = true;  // this member's parts, one after another: the outputs end to end
    return Mpi(MPI_Ireduce_scatter(p.send_stage.data(), p.recv_stage.data(), c.n.data(), type, OpOf(t.reduce), comm,
                                   &p.req),
               "MPI_Ireduce_scatter", what);
  }
  const AxisView v = Around(x.shape(), t.split_axis);
  const Counts c = PartCounts(v, parts);
  const void* send = x.raw();
  if (v.outer > 1) {
    p.send_stage.resize(x.bytes());
    Move(static_cast<char*>(x.raw()), v, parts, es, p.send_stage.data(), true);
    send = p.send_stage.data();
  }
  return Mpi(MPI_Ireduce_scatter(send, y.raw(), c.n.data(), type, OpOf(t.reduce), comm, &p.req),
             "MPI_Ireduce_scatter", what);
}

Status MpiCommunicator::StartAllToAll(Pending& p, MPI_Comm comm) {
  const Task& t = p.task;
  const std::string what = Describe(p.task);
  const int parts = static_cast<int>(p.task.group.size());
  const Tensor& x = p.in[0];
  const Tensor& y = p.out.empty() ? p.in[0] : p.out[0];
  const MPI_Datatype type = MpiTypeOf(p.in[0].dtype());
  const size_t es = SizeOf(p.in[0].dtype());
  // To member j goes part j of x along split_axis; from member j comes part j of y along
  // concat_axis.
  const AxisView vs = Around(x.shape(), t.split_axis), vr = Around(y.shape(), t.concat_axis);
  const Counts cs = PartCounts(vs, parts), cr = PartCounts(vr, parts);
  const void* send = x.raw();
  void* recv = y.raw();
  if (vs.outer > 1) {
    p.send_stage.resize(x.bytes());
    Move(static_cast<char*>(x.raw()), vs, parts, es, p.send_stage.data(), true);
    send = p.send_stage.data();
  }
  if (vr.outer > 1) {
    p.recv_stage.resize(y.bytes());
    p.unpack = vr;
    p.parts = parts;
    recv = p.recv_stage.data();
  }
  return Mpi(MPI_Ialltoallv(send, cs.n.data(), cs.displ.data(), type, recv, cr.n.data(), cr.displ.data(), type,
                            comm, &p.req),
             "MPI_Ialltoallv", what);
}

Result<CommHandle> MpiCommunicator::Start(const Task& t, std::vector<Tensor> in, std::vector<Tensor> out, DeviceStream* after) {
  RETURN_IF_ERROR(CheckTensors(t, in, out));
  if (after) after->Synchronize();  // MPI reads host pointers at once: what produced the inputs must be done
  Pending p;
  for (Stage* stage : {&p.send_stage, &p.recv_stage}) {
    if (spare_stages_.empty()) break;
    *stage = std::move(spare_stages_.back());
    spare_stages_.pop_back();
    stage->resize(0);
  }
  p.task = t;
  p.in = std::move(in);
  p.out = std::move(out);
  const std::string what = Describe(t);
  if (t.op == Op::kSend) {
    const Tensor& x = p.in[0];
    const int n = static_cast<int>(x.numel());
    RETURN_IF_ERROR(Mpi(MPI_Isend(x.raw(), n, MpiTypeOf(x.dtype()), t.peer, t.tag, data_, &p.req), "MPI_Isend", what));
  } else if (t.op == Op::kRecv) {
    const Tensor& y = p.out[0];
    const int n = static_cast<int>(y.numel());
    RETURN_IF_ERROR(Mpi(MPI_Irecv(y.raw(), n, MpiTypeOf(y.dtype()), t.peer, t.tag, data_, &p.req), "MPI_Irecv", what));
  } else {
    auto it = comms_.find(t.collective);
    if (it == comms_.end() || it->second.first != t.group)
      return Fail(what, "group not prepared (Prepare it on every rank first)");
    const int k = static_cast<int>(std::find(t.group.begin(), t.group.end(), rank_) - t.group.begin());
    auto sh = shared_.find(t.collective);
    int64_t end = 0;
    if (sh != shared_.end() && t.op == Op::kAllReduce && t.reduce == sbp::Reduce::kSum && p.in[0].dtype() == DType::kF32) {
      std::vector<int64_t> bytes;
      for (const Tensor& x : p.in) bytes.push_back(x.bytes());
      p.at = boxing::BucketOffsets(bytes, &end);
    }
    if (!p.at.empty() && end <= sh->second.capacity) {
      SharedReduce& r = sh->second;
      const char* slot = reinterpret_cast<const char*>(r.slot(static_cast<size_t>(r.k)));
      for (const Tensor& y : p.out) {
        const auto* o = static_cast<const char*>(y.raw());
        if (o + y.bytes() > slot && o < slot + r.capacity)
          return Fail(what, "an output lies in this member's shared-memory slot, which the other members read");
      }
      p.in_place = true;
      for (size_t i = 0; i < p.in.size(); ++i) p.in_place = p.in_place && p.in[i].raw() == slot + p.at[i];
      p.shared = &r;
      p.act = r.acts++;
      ++buffered_acts_;
      AdvanceShared(p);
    } else {
      RETURN_IF_ERROR(StartCollective(p, it->second.second, k));
    }
  }
  const int id = next_id_++;
  pending_.emplace(id, std::move(p));  // moving keeps the staging buffers where MPI sees them
  return CommHandle{id};
}

Status MpiCommunicator::Complete(Pending& p, const MPI_Status& st) {
  if (p.task.op == Op::kRecv) {
    int got = 0;
    MPI_Get_count(&st, MpiTypeOf(p.out[0].dtype()), &got);
    if (got != p.out[0].numel())
      return Fail(Describe(p.task),
                  "received " + std::to_string(got) + " elements, expected " + std::to_string(p.out[0].numel()));
  }
  if (p.bucket) {
    size_t at = 0;
    for (const Tensor& o : p.out) {
      std::memcpy(o.raw(), p.recv_stage.data() + at, o.bytes());
      at += o.bytes();
    }
  } else if (p.gathered) {
    MoveByMember(p.out, p.task.concat_axis, p.parts, p.recv_stage.data(), false);
  } else if (!p.recv_stage.empty()) {
    Move(static_cast<char*>(p.out[0].raw()), p.unpack, p.parts, SizeOf(p.out[0].dtype()), p.recv_stage.data(), false);
  }
  return Status::Ok();
}

bool MpiCommunicator::AdvanceShared(Pending& p) {
  if (p.reduced) return true;
  SharedReduce& r = *p.shared;
  const size_t members = r.base.size();
  if (!p.written) {
    if (!p.in_place) {  // every member has read the last act's slots: copy this one's in
      if (!r.AllRead(p.act)) return false;
      char* slot = reinterpret_cast<char*>(r.slot(static_cast<size_t>(r.k)));
      for (size_t i = 0; i < p.in.size(); ++i)
        if (p.in[i].raw() != slot + p.at[i]) std::memcpy(slot + p.at[i], p.in[i].raw(), p.in[i].bytes());
    }
    r.arrived(static_cast<size_t>(r.k)).store(p.act + 1, std::memory_order_release);
    p.written = true;
  }
  if (!r.AllArrived(p.act + 1)) return false;
  for (size_t i = 0; i < p.out.size(); ++i) {
    float* out = p.out[i].data<float>();
    const int64_t n = p.out[i].numel(), at = p.at[i] / static_cast<int64_t>(sizeof(float));
    // In member order, the first two in one pass: (s0 + s1) + s2 + ...
    const float* first = r.slot(0) + at;
    const float* second = r.slot(1) + at;
    for (int64_t e = 0; e < n; ++e) out[e] = first[e] + second[e];
    for (size_t j = 2; j < members; ++j) {
      const float* part = r.slot(j) + at;
      for (int64_t e = 0; e < n; ++e) out[e] += part[e];
    }
  }
  r.read(static_cast<size_t>(r.k)).store(p.act + 1, std::memory_order_release);
  p.reduced = true;
  return true;
}

Result<std::vector<CommHandle>> MpiCommunicator::Poll() {
  std::vector<CommHandle> done;
  if (pending_.empty()) return done;
  poll_ids_.clear();
  poll_reqs_.clear();
  for (auto it = pending_.begin(); it != pending_.end();) {
    if (!it->second.shared) {
      ++it;
      continue;
    }
    if (AdvanceShared(it->second)) {
      done.push_back(CommHandle{it->first});
      it = pending_.erase(it);
    } else {
      ++it;
    }
  }
  for (auto& [id, p] : pending_) {
    if (p.shared) continue;
    poll_ids_.push_back(id);
    poll_reqs_.push_back(p.req);
  }
  if (poll_reqs_.empty()) return done;
  const int n = static_cast<int>(poll_reqs_.size());
  poll_index_.resize(poll_reqs_.size());
  poll_status_.resize(poll_reqs_.size());
  // When nothing has finished, Open MPI's Testsome drives progress and returns without looking
  // again, so a movement that progress pass finished (a receive whose data it just copied) is seen
  // only at the next poll, a back-off later: look twice.
  int count = 0;
  int rc = MPI_Testsome(n, poll_reqs_.data(), &count, poll_index_.data(), poll_status_.data());
  if (rc == MPI_SUCCESS && (count == 0 || count == MPI_UNDEFINED))
    rc = MPI_Testsome(n, poll_reqs_.data(), &count, poll_index_.data(), poll_status_.data());
  if (rc != MPI_SUCCESS) {  // name a movement that failed; the buffers of all stay alive
    for (size_t i = 0; i < static_cast<size_t>(std::max(count, 0)); ++i) {
      const MPI_Status& st = poll_status_[i];
      if (st.MPI_ERROR == MPI_SUCCESS) continue;
      const Pending& p = pending_.at(poll_ids_[static_cast<size_t>(poll_index_[i])]);
      return Mpi(st.MPI_ERROR, "MPI_Testsome", Describe(p.task));
    }
    return Mpi(rc, "MPI_Testsome", "poll");
  }
  if (count == MPI_UNDEFINED) count = 0;
  Status first;
  for (size_t i = 0; i < static_cast<size_t>(count); ++i) {
    const int id = poll_ids_[static_cast<size_t>(poll_index_[i])];
    auto it = pending_.find(id);
    Status s = Complete(it->second, poll_status_[i]);
    for (Stage* stage : {&it->second.send_stage, &it->second.recv_stage})
      if (stage->data() != nullptr) spare_stages_.push_back(std::move(*stage));
    pending_.erase(it);
    if (!s.ok() && first.ok()) first = s;
    done.push_back(CommHandle{id});
  }
  RETURN_IF_ERROR(first);
  return done;
}

}  // namespace

Result<std::unique_ptr<Communicator>> MpiWorld(int* argc, char*** argv) {
  int inited = 0;
  MPI_Initialized(&inited);
  bool owns = false;
  if (!inited) {
    // The runtime never blocks in MPI: it tests its requests between acts and sleeps on its own
    // terms when idle (Stream). Open MPI yields the core inside every such test that finds nothing
    // when ranks oversubscribe the cores, which handed the core to another rank between acts
    // (docs/config.md). A user's own setting wins.
    ::setenv("OMPI_MCA_mpi_yield_when_idle", "0", 0);
    int provided = 0;
    if (MPI_Init_thread(argc, argv, MPI_THREAD_MULTIPLE, &provided) != MPI_SUCCESS)
      return Status::Runtime("[actor] MPI_Init_thread failed");
    owns = true;
  }
  int level = 0;
  MPI_Query_thread(&level);
  if (level < MPI_THREAD_MULTIPLE)
    return Status::Runtime("[actor] MPI runs at thread level " + std::to_string(level) +
                           "; flowrun needs MPI_THREAD_MULTIPLE (the runtime calls MPI from several threads)");
  MPI_Comm data = MPI_COMM_NULL, setup = MPI_COMM_NULL, notices = MPI_COMM_NULL;
  int rc = MPI_Comm_dup(MPI_COMM_WORLD, &data);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &setup);
  if (rc == MPI_SUCCESS) rc = MPI_Comm_dup(MPI_COMM_WORLD, &notices);
  for (MPI_Comm c : {data, setup, notices})
    if (rc == MPI_SUCCESS) rc = MPI_Comm_set_errhandler(c, MPI_ERRORS_RETURN);
  if (rc != MPI_SUCCESS) return Status::Runtime("[actor] duplicating MPI_COMM_WORLD: " + MpiError(rc));
  int* ub = nullptr;
  int found = 0;
  MPI_Comm_get_attr(data, MPI_TAG_UB, &ub, &found);
  return std::unique_ptr<Communicator>(new MpiCommunicator(data, setup, notices, owns, found && ub ? *ub : 32767));
}

}  // namespace fr::actor
