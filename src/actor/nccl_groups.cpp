// NCCL's collective groups (world.h: NcclGroups): the unique id travels over MPI from member 0,
// then every member joins the NCCL communicator on its GPU (ops/cuda/backend.h).
#include <mpi.h>

#include <cstring>

#include "actor/mpi_util.h"
#include "actor/world.h"
#include "ops/cuda/backend.h"

namespace fr::actor {
namespace {

class NcclGroupMaker final : public GroupMaker {
 public:
  Result<std::unique_ptr<CollectiveGroup>> Make(const std::vector<int>& ranks, int index) override {
    // The id, then a byte saying whether member 0 made one: a member never waits on a group whose
    // id could not be made.
    char message[sizeof(GroupId) + 1] = {};
    GroupId id{};
    Status made;
    if (index == 0) {
      made = cuda::NcclNewId(&id);
      std::memcpy(message, id.data(), id.size());
      message[sizeof(GroupId)] = made.ok() ? 1 : 0;
      for (size_t j = 1; j < ranks.size(); ++j)
        if (MPI_Send(message, sizeof message, MPI_CHAR, ranks[j], 0, ids_.get()) != MPI_SUCCESS)
          return Status::Runtime("sending NCCL's unique id to rank " + std::to_string(ranks[j]) + " failed");
      RETURN_IF_ERROR(made);
    } else {
      if (MPI_Recv(message, sizeof message, MPI_CHAR, ranks[0], 0, ids_.get(), MPI_STATUS_IGNORE) != MPI_SUCCESS)
        return Status::Runtime("receiving NCCL's unique id from rank " + std::to_string(ranks[0]) + " failed");
      if (!message[sizeof(GroupId)]) return Status::Runtime("rank " + std::to_string(ranks[0]) + " could not make NCCL's unique id");
      std::memcpy(id.data(), message, id.size());
    }
    return cuda::NcclMakeGroup(static_cast<int>(ranks.size()), id, index);
  }

 private:
  WorldDup ids_;  // the unique ids travel here
};

}  // namespace

std::unique_ptr<GroupMaker> NcclGroups() { return std::make_unique<NcclGroupMaker>(); }

}  // namespace fr::actor
