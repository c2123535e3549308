// A collective group on a device: the ranks of one collective id, each driving its own device, with
// a stream of the group's own. NCCL implements it for CUDA (ops/cuda/nccl.cpp); MPI on a thread per
// group implements it for host memory (actor/group_makers.cpp), so that the device communicator's
// logic (actor/device_comm.cpp: packing parts, padding uneven ones, buckets) runs in CI without a
// GPU. Buffers are flat: what lies where in a tensor is the communicator's business.
//
// Every call queues work on the group's stream, to run in call order, asynchronously to the host;
// a buffer stays untouched by the caller until an event recorded after the work is done. The
// collectives follow NCCL's semantics: every member calls them in the same order.
//
// Thread-safety: one thread at a time (the communicator's callers are serialised).
#pragma once

#include <array>
#include <cstddef>
#include <memory>
#include <string>
#include <vector>

#include "base/device.h"
#include "base/dtype.h"
#include "base/status.h"

namespace fr {

enum class GroupReduce : uint8_t { kSum, kMax, kMin };

// What the members of a group share to find each other (NCCL's unique id: 128 bytes), made by
// member 0 and sent to the others.
using GroupId = std::array<char, 128>;

class CollectiveGroup {
 public:
  virtual ~CollectiveGroup() = default;
  virtual int members() const = 0;
  virtual int index() const = 0;  // this member's, in [0, members)
  // Later work on the group's stream waits for what is queued on `s` now.
  virtual void After(DeviceStream& s) = 0;
  // `height` rows of `width` bytes, `spitch` apart in src and `dpitch` apart in dst.
  virtual void Copy2D(void* dst, size_t dpitch, const void* src, size_t spitch, size_t width, size_t height) = 0;
  virtual void Zero(void* p, size_t bytes) = 0;
  // `count` elements from every member, reduced into each member's `out` (may be `in`).
  virtual Status AllReduce(const void* in, void* out, size_t count, DType t, GroupReduce op) = 0;
  // Member j's `count` elements land at out + j·count (in may lie there already, at this member's).
  virtual Status AllGather(const void* in, void* out, size_t count, DType t) = 0;
  // Reduces members' `in` (members·count elements); this member's j-th `count` block into `out`.
  virtual Status ReduceScatter(const void* in, void* out, size_t count, DType t, GroupReduce op) = 0;
  // Point to point within the group, all at once (NCCL's grouped send/recv): to member j goes
  // send[j] (count elements), from member j comes recv[j]. A count of 0 moves nothing.
  struct Part {
    const void* send = nullptr;
    void* recv = nullptr;
    size_t send_count = 0, recv_count = 0;
  };
  virtual Status Exchange(const std::vector<Part>& parts, DType t) = 0;
  // Done once everything queued before it is.
  virtual std::shared_ptr<Event> Record() = 0;
  // An error the group met while running what was queued (a peer gone, a network failure); Ok
  // while there is none.
  virtual Status Error() = 0;
  // Stops the group's work where it is, so that the process can exit; the group is unusable after.
  // Any thread, also while another queues work on the group.
  virtual void Abort() = 0;
};

}  // namespace fr
