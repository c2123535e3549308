// Movements of tensors in device memory the host cannot address, through host copies and the
// communicator underneath (comm.h: WithHostStaging).
#include <cstdlib>
#include <map>
#include <utility>

#include "actor/comm.h"
#include "actor/movement.h"

namespace fr::actor {
namespace {

bool AllHostVisible(const std::vector<Tensor>& ts) {
  for (const Tensor& t : ts)
    if (t.defined() && !HostVisible(t)) return false;
  return true;
}

class StagingCommunicator final : public Communicator {
 public:
  explicit StagingCommunicator(std::unique_ptr<Communicator> inner) : inner_(std::move(inner)) {}

  int rank() const override { return inner_->rank(); }
  int size() const override { return inner_->size(); }
  Status Prepare(const std::vector<std::vector<int>>& groups, const std::vector<int64_t>& input_bytes) override {
    return inner_->Prepare(groups, input_bytes);
  }
  Status PrepareLinks(const std::vector<Link>& links) override { return inner_->PrepareLinks(links); }
  std::shared_ptr<Storage> InputBuffer(int collective, int64_t bytes) override { return inner_->InputBuffer(collective, bytes); }
  Status AwaitInputBuffer(int collective) override { return inner_->AwaitInputBuffer(collective); }
  int64_t buffered_acts() const override { return inner_->buffered_acts(); }
  void Cancel() override { inner_->Cancel(); }

  Result<CommHandle> Start(const boxing::Task& t, std::vector<Tensor> in, std::vector<Tensor> out,
                           DeviceStream* after) override {
    if (AllHostVisible(in) && AllHostVisible(out)) return inner_->Start(t, std::move(in), std::move(out), after);
    // The inputs' producers first (a wait on the host), then host copies of them; the outputs
    // land in host tensors and are copied to the device when the movement is done (Poll).
    if (after) after->Synchronize();
    std::vector<Tensor> host_in, host_out;
    for (const Tensor& x : in) host_in.push_back(x.defined() ? x.ToHost() : x);
    for (const Tensor& y : out) host_out.push_back(HostVisible(y) ? y : Tensor(y.dtype(), y.shape()));
    ASSIGN_OR_RETURN(CommHandle h, inner_->Start(t, std::move(host_in), host_out, nullptr));
    staged_[h.id] = Staged{std::move(out), std::move(host_out)};
    return h;
  }

  Result<std::vector<CommHandle>> Poll() override {
    ASSIGN_OR_RETURN(std::vector<CommHandle> done, inner_->Poll());
    for (const CommHandle& h : done) {
      auto it = staged_.find(h.id);
      if (it == staged_.end()) continue;
      const Staged& s = it->second;
      for (size_t i = 0; i < s.device_out.size(); ++i)
        if (!s.device_out[i].SharesStorageWith(s.host_out[i])) s.device_out[i].CopyFrom(s.host_out[i]);
      staged_.erase(it);
    }
    return done;
  }
  int in_flight() const override { return inner_->in_flight(); }

  Status BeginNotices(int64_t run) override { return inner_->BeginNotices(run); }
  Status Notify(const StepNotice& mine) override { return inner_->Notify(mine); }
  Result<std::vector<int>> PollNotices(StepNotice* merged) override { return inner_->PollNotices(merged); }
  [[noreturn]] void Abort(int code) override {
    inner_->Abort(code);
    std::abort();  // not reached: inner_'s Abort does not return either
  }

 private:
  struct Staged {
    std::vector<Tensor> device_out, host_out;  // by output index; host_out[i] is device_out[i] on the host
  };
  std::unique_ptr<Communicator> inner_;
  std::map<int, Staged> staged_;  // by handle id: movements whose outputs go back to a device
};

}  // namespace

std::unique_ptr<Communicator> WithHostStaging(std::unique_ptr<Communicator> inner) {
  return std::make_unique<StagingCommunicator>(std::move(inner));
}

}  // namespace fr::actor
