// `flowrun env` end to end: it re-launches itself under mpirun, measures, and writes a cluster:
// section that a config accepts; bad rank counts give exit 2 and a message. Runs the binary named by
// FLOWRUN_BIN (tests/meson.build sets it) from the repository root.
#include <gtest/gtest.h>
#include <sys/stat.h>
#include <unistd.h>
#include <sys/wait.h>
#include <unistd.h>

#include <cstdio>
#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <sstream>
#include <string>
#include <vector>

#include "base/affinity.h"
#include "config/config.h"
#include "flowrun_cmd.h"

namespace {

namespace fs = std::filesystem;

using fr::testing::Flowrun;
using fr::testing::Output;

std::string Read(const std::string& path) {
  std::ifstream f(path, std::ios::binary);
  std::stringstream s;
  s << f.rdbuf();
  return s.str();
}

std::string TempPath(const std::string& name) {
  return (fs::temp_directory_path() / ("flowrun_env_" + std::to_string(::getpid()) + "_" + name)).string();
}

// Which CPUs each local rank of an unbound job takes (flowrun train and env pin them so).
TEST(Affinity, RankCores) {
  using fr::RankCores;
  using V = std::vector<int>;
  // More ranks than cores: one each, round-robin, so neighbouring ranks land on different cores.
  EXPECT_EQ(RankCores(0, 4, {0, 1}), V({0}));
  EXPECT_EQ(RankCores(1, 4, {0, 1}), V({1}));
  EXPECT_EQ(RankCores(2, 4, {0, 1}), V({0}));
  EXPECT_EQ(RankCores(3, 4, {0, 1}), V({1}));
  EXPECT_EQ(RankCores(4, 5, {2, 5}), V({2}));
  // At least as many cores: a run each, the remainder spread, every core used once.
  EXPECT_EQ(RankCores(0, 2, {0, 1, 2, 3}), V({0, 1}));
  EXPECT_EQ(RankCores(1, 2, {0, 1, 2, 3}), V({2, 3}));
  V all;
  for (int r = 0; r < 3; ++r)
    for (int c : RankCores(r, 3, {4, 5, 6, 7})) all.push_back(c);
  EXPECT_EQ(all, V({4, 5, 6, 7}));
  EXPECT_EQ(RankCores(1, 3, {4, 5, 6, 7}).size(), 1u);
  // Nothing sensible to do.
  EXPECT_TRUE(RankCores(0, 2, {}).empty());
  EXPECT_TRUE(RankCores(2, 2, {0, 1}).empty());
}

TEST(Env, WritesClusterSection_1n2d) {
  const std::string out = TempPath("cluster.yaml");
  Output r = Flowrun({"env", "--ranks", "2", "--out", out});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("[env] wrote the cluster: section to " + out), std::string::npos) << r.out;
  const std::string section = Read(out);
  fs::remove(out);
  ASSERT_NE(section.find("cluster:"), std::string::npos) << section;

  // A config without a cluster: section of its own.
  auto cfg = fr::ParseConfig(Read("configs/mlp_ln_gelu.yaml") + section, "configs/mlp_ln_gelu.yaml + " + out);
  ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << section;
  const fr::ClusterConfig& c = cfg->cluster;
  EXPECT_TRUE(c.given);
  EXPECT_EQ(c.nodes, 1);
  EXPECT_EQ(c.devices_per_node, 2);
  EXPECT_GT(c.memory_gib, 0);
  EXPECT_GT(c.flops, 1e8) << section;
  EXPECT_GT(c.bandwidth_intra, 1e6) << section;
  EXPECT_EQ(c.bandwidth_inter, c.bandwidth_intra);
  EXPECT_GT(c.latency_intra, 0) << section;
  EXPECT_LT(c.latency_intra, 1) << section;
  EXPECT_EQ(c.latency_inter, c.latency_intra);
  EXPECT_GT(c.p2p_latency, 0) << section;
  // The all-reduce through shared memory (both ranks share this machine): a latency under a
  // second and a bandwidth, as the reader requires both > 0.
  EXPECT_GT(c.shared_latency, 0) << section;
  EXPECT_LT(c.shared_latency, 1) << section;
  EXPECT_GT(c.shared_bandwidth, 1e6) << section;
  // A message to a rank that waited briefly, then to one that waited long: the latter is
  // p2p_latency (the reader checks that the waits increase).
  ASSERT_EQ(c.p2p_wake.size(), 2u) << section;
  EXPECT_GT(c.p2p_wake[0].first, 0) << section;
  EXPECT_GE(c.p2p_wake[0].second, 0) << section;
  EXPECT_EQ(c.p2p_wake[1].second, c.p2p_latency) << section;
  // flowrun's Add and Gelu kernels per element: well under a microsecond, Gelu (erf per element)
  // dearer than Add.
  EXPECT_GT(c.stream_element, 0) << section;
  EXPECT_LT(c.stream_element, 1e-6) << section;
  EXPECT_GT(c.special_element, c.stream_element) << section;
  EXPECT_LT(c.special_element, 1e-6) << section;
  // One figure per count of busy ranks, the last (all busy, what `flops` measured) 1; the config
  // reader checks the rest (>= 1, not increasing).
  ASSERT_EQ(c.busy_speedup.size(), 2u) << section;
  EXPECT_EQ(c.busy_speedup[1], 1.0) << section;
  EXPECT_EQ(c.measured.rfind("flowrun env: 2 ranks on ", 0), 0u) << c.measured;
}

// An odd rank count: the message figures pair ranks up, and the one left over must still take
// part in every barrier (it once waited at one the others never reached).
TEST(Env, OddRankCount_1n3d) {
  const std::string out = TempPath("cluster3.yaml");
  Output r = Flowrun({"env", "--ranks", "3", "--out", out});
  ASSERT_EQ(r.code, 0) << r.out;
  const std::string section = Read(out);
  fs::remove(out);
  auto cfg = fr::ParseConfig(Read("configs/mlp_ln_gelu.yaml") + section, "env --ranks 3");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << section;
  EXPECT_EQ(cfg->cluster.devices_per_node, 3);
  EXPECT_EQ(cfg->cluster.busy_speedup.size(), 3u) << section;
}

// --repeats R: R rounds of every measurement, each figure written its median; the section says so.
TEST(Env, RepeatsWriteMedians_1n2d) {
  const std::string out = TempPath("cluster_r2.yaml");
  Output r = Flowrun({"env", "--ranks", "2", "--repeats", "2", "--out", out});
  ASSERT_EQ(r.code, 0) << r.out;
  EXPECT_NE(r.out.find("each figure the median of 2 rounds"), std::string::npos) << r.out;
  const std::string section = Read(out);
  fs::remove(out);
  auto cfg = fr::ParseConfig(Read("configs/mlp_ln_gelu.yaml") + section, "env --repeats 2");
  ASSERT_TRUE(cfg.ok()) << cfg.status().message() << "\n" << section;
  EXPECT_NE(cfg->cluster.measured.find("median of 2 rounds"), std::string::npos) << cfg->cluster.measured;
  ASSERT_EQ(cfg->cluster.busy_speedup.size(), 2u) << section;
  EXPECT_GE(cfg->cluster.busy_speedup[0], cfg->cluster.busy_speedup[1]) << section;
  EXPECT_EQ(cfg->cluster.busy_speedup[1], 1.0) << section;
  EXPECT_GT(cfg->cluster.flops, 1e8) << section;

  Output bad = Flowrun({"env", "--repeats", "0"});
  EXPECT_EQ(bad.code, 2) << bad.out;
  EXPECT_NE(bad.out.find("--repeats: Value 0 not in range 1 to 100"), std::string::npos) << bad.out;
}

TEST(Env, OneRankIsRefused) {
  Output r = Flowrun({"env", "--ranks", "1"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[env] --ranks must be at least 2"), std::string::npos) << r.out;
}

// --device cuda measures each rank's GPU: a section from cuBLAS and the all-reduce path where a GPU
// is visible, else exit 1 naming why on every rank's behalf (CI has none); --tf32 is for GPUs only.
TEST(Env, DeviceCuda) {
  Output r = Flowrun({"env", "--device", "cuda"});
  if (r.code == 0) {
    EXPECT_NE(r.out.find("flops: "), std::string::npos) << r.out;
    EXPECT_NE(r.out.find("cuBLAS SGEMM"), std::string::npos) << r.out;
  } else {
    EXPECT_EQ(r.code, 1) << r.out;
    EXPECT_NE(r.out.find("[env] --device cuda: [cuda] "), std::string::npos) << r.out;
  }
  Output tf32 = Flowrun({"env", "--tf32"});
  EXPECT_EQ(tf32.code, 2) << tf32.out;
  EXPECT_NE(tf32.out.find("[env] --tf32 is for GPU GEMMs: give --device cuda too"), std::string::npos) << tf32.out;
}

// Under a user's own mpirun the world size must be what --ranks says.
TEST(Env, WorldSizeMismatch_1n3d) {
  Output r = Flowrun({"env", "--ranks", "2"}, "mpirun --oversubscribe --allow-run-as-root -n 3 ");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[env] the job has 3 rank(s) but --ranks is 2"), std::string::npos) << r.out;
}

// --out is checked before any rank starts (base/output_check.h): a folder that cannot be made (a
// regular file stands in the way) and a FIFO are refused, and nothing is measured.
TEST(Env, UnwritableOut) {
  Output r = Flowrun({"env", "--out", "/etc/hostname/cluster.yaml"});
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[env] --out: cannot create a file in '/etc/hostname'"), std::string::npos) << r.out;
  const std::string fifo = "/tmp/flowrun_env_fifo_" + std::to_string(::getpid());
  ASSERT_EQ(::mkfifo(fifo.c_str(), 0600), 0);
  r = Flowrun({"env", "--out", fifo});
  ::unlink(fifo.c_str());
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("is not a regular file"), std::string::npos) << r.out;
}

TEST(Env, NoMpirun) {
  Output r = Flowrun({"env"}, "PATH=/nonexistent_flowrun_dir ");
  EXPECT_EQ(r.code, 2) << r.out;
  EXPECT_NE(r.out.find("[env] mpirun not found"), std::string::npos) << r.out;
}

}  // namespace
