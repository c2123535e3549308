// Actor messages. A req says "slot S of regst R is ready for you"; an ack gives it back to the
// producer. Messages are small, trivially copyable values: they cross threads by copy and, in the
// multi-rank runtime, ranks as bytes.
#pragma once

#include <cstdint>
#include <type_traits>

namespace fr::actor {

// kStart: try to act. kCommDone: the actor's data movement finished (the runtime's progress
// engine found it done, on whichever thread polled).
enum class MsgKind : uint8_t { kStart, kReq, kAck, kCommDone, kStop };

struct Msg {
  MsgKind kind = MsgKind::kReq;
  int32_t dst = 0;    // actor (task) id
  int32_t src = 0;    // actor (task) id of the sender
  int32_t regst = 0;
  int32_t slot = 0;
};
static_assert(std::is_trivially_copyable_v<Msg>, "actor messages must be trivially copyable");

}  // namespace fr::actor
