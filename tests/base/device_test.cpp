// The device backends (base/device.h): memory through the backend, counted; copies on a stream
// in queue order, finished when an event recorded after them is done.
#include <gtest/gtest.h>

#include <cstring>
#include <vector>

#include "base/device.h"
#include "base/tensor.h"

namespace fr {
namespace {

TEST(Device, EveryTypeHasABackendOrSaysSo) {
  EXPECT_NE(BackendOf(DeviceType::kCpu), nullptr);
  EXPECT_NE(BackendOf(DeviceType::kSim), nullptr);
  EXPECT_EQ(BackendOf(DeviceType::kSim)->kernels(), DeviceType::kCpu);
  EXPECT_EQ(BackendOf(DeviceType::kCuda), nullptr);  // until the CUDA backend registers itself
  EXPECT_EQ(ToString(Device{}), "cpu");
  EXPECT_EQ(ToString(Device{DeviceType::kSim, 1}), "sim:1");
}

TEST(Device, TensorsTakeTheirDevicesMemoryZeroed) {
  Backend& sim = *BackendOf(DeviceType::kSim);
  const int64_t live = sim.live_bytes(), made = sim.allocations();
  {
    Tensor t(DType::kF32, Shape{3, 5}, Device{DeviceType::kSim, 0});
    EXPECT_EQ(t.device(), (Device{DeviceType::kSim, 0}));
    EXPECT_EQ(sim.live_bytes(), live + 60);
    EXPECT_EQ(sim.allocations(), made + 1);
    const Tensor host = t.ToHost();
    EXPECT_EQ(host.device(), Device{});
    for (float v : host.span<float>()) EXPECT_EQ(v, 0.0f);
  }
  EXPECT_EQ(sim.live_bytes(), live);
}

TEST(Device, CopiesAcrossDevicesKeepTheData) {
  Tensor host(DType::kI32, Shape{1000});
  for (int i = 0; i < 1000; ++i) host.data<int32_t>()[i] = i * 7;
  Tensor there(DType::kI32, Shape{1000}, Device{DeviceType::kSim, 0});
  there.CopyFrom(host);
  const Tensor back = there.ToHost();
  EXPECT_FALSE(back.SharesStorageWith(there));
  EXPECT_EQ(std::memcmp(back.raw(), host.raw(), host.bytes()), 0);
}

// A sim stream runs its copies on a thread of its own, in queue order: a chain of copies, each
// reading what the one before wrote, ends with the first buffer's data once the event is done.
TEST(Device, SimStreamRunsCopiesInOrder) {
  Backend& sim = *BackendOf(DeviceType::kSim);
  auto stream = sim.NewStream(0);
  constexpr int kBuffers = 64;
  constexpr size_t kBytes = 1 << 16;
  std::vector<std::vector<char>> buf(kBuffers, std::vector<char>(kBytes, 0));
  for (size_t i = 0; i < kBytes; ++i) buf[0][i] = static_cast<char>(i * 31 + 7);
  for (int round = 0; round < 20; ++round) {
    for (int b = 1; b < kBuffers; ++b) std::memset(buf[static_cast<size_t>(b)].data(), 0, kBytes);
    for (int b = 1; b < kBuffers; ++b) stream->Copy(buf[static_cast<size_t>(b)].data(), buf[static_cast<size_t>(b - 1)].data(), kBytes);
    auto done = stream->Record();
    done->Wait();
    EXPECT_TRUE(done->Done());
    ASSERT_EQ(std::memcmp(buf[kBuffers - 1].data(), buf[0].data(), kBytes), 0) << "round " << round;
  }
  auto idle = stream->Record();  // nothing queued since: done at once
  EXPECT_TRUE(idle->Done());
}

}  // namespace
}  // namespace fr
