// The device communicator on NCCL's groups (actor::WithDeviceGroups over actor::NcclGroups) with
// one rank per communicator, on a visible GPU: the path every CUDA collective takes, NCCL's calls,
// the packing on the device and the events included, with results checked exactly. Skipped where
// no GPU is visible (every development machine): tools/gpu_check.sh runs it on a lent GPU. The
// same logic over several ranks runs in CI over MPI's host groups (mpi_comm_test, device_comm_N).
#include <gtest/gtest.h>
#include <mpi.h>

#include <cstdlib>
#include <memory>
#include <vector>

#include "actor/comm.h"
#include "actor/world.h"
#include "ops/cuda/backend.h"

namespace fr::actor {
namespace {

using boxing::Op;
using boxing::Task;

const Device kGpu{DeviceType::kCuda, 0};

Tensor OnGpu(const Tensor& host) {
  Tensor d(host.dtype(), host.shape(), kGpu);
  d.CopyFrom(host);
  return d;
}

Tensor Iota(const Shape& s, float from) {
  Tensor t(DType::kF32, s);
  for (int64_t e = 0; e < t.numel(); ++e) t.data<float>()[e] = from + static_cast<float>(e);
  return t;
}

class Nccl : public ::testing::Test {
 protected:
  static void SetUpTestSuite() {
    Result<int> gpu = cuda::InitDevice(0);
    if (!gpu.ok()) {
      why_ = gpu.status().message();
      return;
    }
    // With a GPU, a failure from here on fails every case with its reason (an ASSERT here would
    // mark them skipped, as if there were no GPU).
    Result<std::unique_ptr<Communicator>> mpi = MpiWorld(nullptr, nullptr);  // a singleton world
    if (!mpi.ok()) {
      broken_ = "MPI: " + mpi.status().message();
      return;
    }
    comm_ = WithDeviceGroups(std::move(*mpi), NcclGroups(), DeviceType::kCuda).release();
    if (Status s = comm_->Prepare({{0}, {0}}); !s.ok()) broken_ = "Prepare: " + s.message();
  }
  static void TearDownTestSuite() {
    delete comm_;  // finalises MPI
    comm_ = nullptr;
  }
  void SetUp() override {
    if (!broken_.empty()) FAIL() << broken_;
    if (!comm_) GTEST_SKIP() << "no CUDA device to test: " << why_;
  }
  // Runs `t` to completion; the outputs, on the host.
  static std::vector<Tensor> Run(const Task& t, const std::vector<Tensor>& in, const std::vector<Tensor>& out) {
    Result<CommHandle> h = comm_->Start(t, in, out);
    EXPECT_TRUE(h.ok()) << h.status().message();
    if (!h.ok()) return {};
    for (bool done = false; !done;) {
      Result<std::vector<CommHandle>> got = comm_->Poll();
      EXPECT_TRUE(got.ok()) << got.status().message();
      if (!got.ok()) return {};
      for (CommHandle c : *got) done = done || c.id == h->id;
    }
    std::vector<Tensor> host;
    for (const Tensor& y : out) host.push_back(y.ToHost());
    return host;
  }
  static void ExpectEqual(const Tensor& got, const Tensor& want) {
    ASSERT_EQ(got.numel(), want.numel());
    for (int64_t e = 0; e < got.numel(); ++e) ASSERT_EQ(got.data<float>()[e], want.data<float>()[e]) << "element " << e;
  }
  static inline Communicator* comm_ = nullptr;
  static inline std::string why_;
  static inline std::string broken_;  // with a GPU: why the communicator could not be made
};

TEST_F(Nccl, AllReduceOneTensorAndBuckets) {
  Task t{.op = Op::kAllReduce, .rank = 0, .in = {0}, .out = 1, .group = {0}, .collective = 0};
  const Tensor x = Iota(Shape{5, 3}, 1);
  std::vector<Tensor> got = Run(t, {OnGpu(x)}, {Tensor(DType::kF32, x.shape(), kGpu)});
  ASSERT_EQ(got.size(), 1u);
  ExpectEqual(got[0], x);
  // A bucket packed into the scratch buffer, and one laid out as the runtime lays buckets out.
  const Tensor a = Iota(Shape{7}, 10), b = Iota(Shape{2, 2}, 100);
  got = Run(t, {OnGpu(a), OnGpu(b)}, {Tensor(DType::kF32, a.shape(), kGpu), Tensor(DType::kF32, b.shape(), kGpu)});
  ASSERT_EQ(got.size(), 2u);
  ExpectEqual(got[0], a);
  ExpectEqual(got[1], b);
  auto in = std::make_shared<Storage>(128, kGpu), out = std::make_shared<Storage>(128, kGpu);
  Tensor ia(DType::kF32, a.shape(), in, 0), ib(DType::kF32, b.shape(), in, 64);
  ia.CopyFrom(a);
  ib.CopyFrom(b);
  got = Run(t, {ia, ib}, {Tensor(DType::kF32, a.shape(), out, 0), Tensor(DType::kF32, b.shape(), out, 64)});
  ASSERT_EQ(got.size(), 2u);
  ExpectEqual(got[0], a);
  ExpectEqual(got[1], b);
}

TEST_F(Nccl, GatherScatterAndAllToAllAlongAnInnerAxis) {
  const Tensor x = Iota(Shape{4, 6}, 1);
  Task gather{.op = Op::kAllGather, .rank = 0, .in = {0}, .out = 1, .group = {0}, .concat_axis = 1, .collective = 1};
  std::vector<Tensor> got = Run(gather, {OnGpu(x)}, {Tensor(DType::kF32, x.shape(), kGpu)});
  ASSERT_EQ(got.size(), 1u);
  ExpectEqual(got[0], x);
  Task scatter{.op = Op::kReduceScatter, .rank = 0, .in = {0}, .out = 1, .group = {0}, .split_axis = 1, .collective = 1};
  got = Run(scatter, {OnGpu(x)}, {Tensor(DType::kF32, x.shape(), kGpu)});
  ASSERT_EQ(got.size(), 1u);
  ExpectEqual(got[0], x);
  Task a2a{.op = Op::kAllToAll, .rank = 0, .in = {0}, .out = 1, .group = {0}, .concat_axis = 0, .split_axis = 1,
           .collective = 1};
  got = Run(a2a, {OnGpu(x)}, {Tensor(DType::kF32, x.shape(), kGpu)});
  ASSERT_EQ(got.size(), 1u);
  ExpectEqual(got[0], x);
}

TEST_F(Nccl, AGroupNotPreparedIsAnError) {
  Task t{.op = Op::kAllReduce, .rank = 0, .in = {0}, .out = 1, .group = {0}, .collective = 5};
  Result<CommHandle> h = comm_->Start(t, {Tensor(DType::kF32, Shape{2}, kGpu)}, {Tensor(DType::kF32, Shape{2}, kGpu)});
  ASSERT_FALSE(h.ok());
  EXPECT_NE(h.status().message().find("group not prepared"), std::string::npos) << h.status().message();
}

}  // namespace
}  // namespace fr::actor
