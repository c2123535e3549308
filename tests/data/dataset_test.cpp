// Datasets and the order rule (DESIGN.md §5): tokens windows and targets, npy rows, synthetic
// determinism, sequential and shuffled sample order, micro-batch slicing.
#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <set>

#include "data/dataset.h"

namespace fr::data {
namespace {

std::string TempFile(const std::string& name, const std::string& bytes) {
  auto dir = std::filesystem::temp_directory_path() / "flowrun_dataset_test";
  std::filesystem::create_directories(dir);
  std::string path = (dir / name).string();
  std::ofstream(path, std::ios::binary) << bytes;
  return path;
}

std::string U16(const std::vector<uint16_t>& toks) {
  std::string s;
  for (uint16_t t : toks) {
    s += static_cast<char>(t & 0xff);
    s += static_cast<char>(t >> 8);
  }
  return s;
}

TrainConfig Train(int64_t global, int64_t micro) {
  TrainConfig t;
  t.steps = 10;
  t.global_batch = global;
  t.micro_batch = micro;
  t.seed = 5;
  return t;
}

TEST(Data, TokensWindowsAndTargets) {
  std::vector<uint16_t> toks;
  for (uint16_t i = 0; i < 23; ++i) toks.push_back(static_cast<uint16_t>(1000 + i));
  DataConfig cfg;
  cfg.format = DataConfig::Format::kTokens;
  cfg.train = TempFile("t.u16", U16(toks));
  cfg.seq_len = 5;
  auto ds = OpenDataset(cfg, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  EXPECT_EQ((*ds)->size(), 4);  // (23 - 1) / 5 full windows
  EXPECT_EQ((*ds)->fields().at("tokens").sample, Shape{5});
  // Step 1, global batch 3, micro-batch 1 of size... use the loader: sample b of step s is window
  // (s * 3 + b) mod 4.
  Loader loader(**ds, {{"idx", "tokens"}, {"targets", "targets"}}, cfg, Train(3, 3));
  Tensor t(DType::kI64, Shape{3, 5}), y(DType::kI64, Shape{3, 5});
  ASSERT_TRUE(loader.Fill("idx", 1, 0, t).ok());
  ASSERT_TRUE(loader.Fill("targets", 1, 0, y).ok());
  const int64_t windows[3] = {3, 0, 1};  // (3, 4, 5) mod 4
  for (int b = 0; b < 3; ++b) {
    for (int i = 0; i < 5; ++i) {
      EXPECT_EQ(t.data<int64_t>()[b * 5 + i], 1000 + windows[b] * 5 + i);
      EXPECT_EQ(y.data<int64_t>()[b * 5 + i], 1000 + windows[b] * 5 + i + 1);
    }
  }
}

TEST(Data, TokensTooShortAndOddBytes) {
  DataConfig cfg;
  cfg.format = DataConfig::Format::kTokens;
  cfg.seq_len = 8;
  cfg.train = TempFile("short.u16", U16({1, 2, 3}));
  auto ds = OpenDataset(cfg, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("fewer than one window"), std::string::npos) << ds.status().message();
  cfg.train = TempFile("odd.u16", std::string(5, 'x'));
  ds = OpenDataset(cfg, 0);
  ASSERT_FALSE(ds.ok());
  EXPECT_NE(ds.status().message().find("odd byte count"), std::string::npos) << ds.status().message();
}

TEST(Data, MicroBatchesAreConsecutiveRuns) {
  DataConfig cfg;
  cfg.format = DataConfig::Format::kNpy;
  cfg.npy = {{"x", "data/mlp_x.npy"}, {"y", "data/mlp_y.npy"}};
  auto ds = OpenDataset(cfg, 0);
  ASSERT_TRUE(ds.ok()) << ds.status().message();
  ASSERT_EQ((*ds)->size(), 4096);
  Loader loader(**ds, {{"x", "x"}}, cfg, Train(32, 8));
  Tensor whole(DType::kF32, Shape{1, 64}), micro(DType::kF32, Shape{8, 64});
  // Micro-batch 2 of step 130 holds global samples 16..23 of that step: rows (130*32 + b) mod 4096.
  ASSERT_TRUE(loader.Fill("x", 130, 2, micro).ok());
  for (int i = 0; i < 8; ++i) {
    int64_t row = (130 * 32 + 16 + i) % 4096;
    EXPECT_EQ(loader.SampleIndex(130, 16 + i), row);
    (*ds)->CopySample("x", row, whole.raw());
    for (int j = 0; j < 64; ++j) ASSERT_EQ(micro.data<float>()[i * 64 + j], whole.data<float>()[j]);
  }
}

TEST(Data, ShuffleIsASeededPermutationPerEpoch) {
  DataConfig cfg;
  cfg.format = DataConfig::Format::kSynthetic;
  cfg.order = DataConfig::Order::kShuffle;
  cfg.samples = 12;
  cfg.synthetic["x"] = SyntheticField{{3}, SyntheticField::DType::kF32, 0};
  auto ds = OpenDataset(cfg, 5);
  ASSERT_TRUE(ds.ok());
  Loader a(**ds, {{"x", "x"}}, cfg, Train(4, 4)), b(**ds, {{"x", "x"}}, cfg, Train(4, 4));
  std::set<int64_t> epoch0, epoch1;
  std::vector<int64_t> order0;
  for (int s = 0; s < 3; ++s)
    for (int i = 0; i < 4; ++i) {
      epoch0.insert(a.SampleIndex(s, i));
      order0.push_back(a.SampleIndex(s, i));
      EXPECT_EQ(a.SampleIndex(s, i), b.SampleIndex(s, i)) << "same seed, same order";
    }
  for (int s = 3; s < 6; ++s)
    for (int i = 0; i < 4; ++i) epoch1.insert(a.SampleIndex(s, i));
  EXPECT_EQ(epoch0.size(), 12u) << "an epoch visits every sample once";
  EXPECT_EQ(epoch1.size(), 12u);
  std::vector<int64_t> sequential(12);
  for (int i = 0; i < 12; ++i) sequential[static_cast<size_t>(i)] = i;
  EXPECT_NE(order0, sequential);
}

TEST(Data, SyntheticIsDeterministicAndInRange) {
  DataConfig cfg;
  cfg.format = DataConfig::Format::kSynthetic;
  cfg.samples = 100;
  cfg.synthetic["x"] = SyntheticField{{4}, SyntheticField::DType::kF32, 0};
  cfg.synthetic["y"] = SyntheticField{{}, SyntheticField::DType::kI64, 7};
  auto d1 = OpenDataset(cfg, 3), d2 = OpenDataset(cfg, 3), d3 = OpenDataset(cfg, 4);
  ASSERT_TRUE(d1.ok() && d2.ok() && d3.ok());
  float x1[4], x2[4], x3[4];
  (*d1)->CopySample("x", 42, x1);
  (*d2)->CopySample("x", 42, x2);
  (*d3)->CopySample("x", 42, x3);
  for (int i = 0; i < 4; ++i) EXPECT_EQ(x1[i], x2[i]);
  EXPECT_NE(x1[0], x3[0]) << "another seed gives other data";
  double sum = 0, sq = 0;
  for (int w = 0; w < 100; ++w) {
    int64_t y;
    (*d1)->CopySample("y", w, &y);
    EXPECT_GE(y, 0);
    EXPECT_LT(y, 7);
    float x[4];
    (*d1)->CopySample("x", w, x);
    for (float v : x) {
      sum += v;
      sq += v * v;
    }
  }
  EXPECT_NEAR(sum / 400, 0.0, 0.2) << "standard normal mean";
  EXPECT_NEAR(sq / 400, 1.0, 0.25) << "standard normal variance";
}

// A version-1 .npy file with this header dict (padded as numpy pads it) and data.
std::string Npy(const std::string& dict, const std::string& data) {
  std::string h = dict;
  while ((10 + h.size() + 1) % 64) h += ' ';
  h += '\n';
  std::string out = std::string("\x93NUMPY\x01\x00", 8);
  out += static_cast<char>(h.size() & 0xff);
  out += static_cast<char>(h.size() >> 8);
  return out + h + data;
}

std::string Floats(int n) { return std::string(static_cast<size_t>(n) * 4, '\0'); }

TEST(Data, NpyHeadersAsNumpyWritesThem) {
  for (const std::string dict : {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), }",
                                 "{\"descr\": \"<f4\", \"fortran_order\": False, \"shape\": (2, 3)}",
                                 "{'shape': (2, 3), 'fortran_order': False, 'descr': '<f4'}"}) {
    auto a = ParseNpy(Npy(dict, Floats(6)), "data.x", "x.npy");
    ASSERT_TRUE(a.ok()) << dict << ": " << a.status().message();
    EXPECT_EQ(a->shape, (std::vector<int64_t>{2, 3}));
    EXPECT_EQ(a->dtype, DType::kF32);
  }
  auto one = ParseNpy(Npy("{'descr': '<i8', 'fortran_order': False, 'shape': (4,), }", std::string(32, '\0')), "data.y", "y.npy");
  ASSERT_TRUE(one.ok()) << one.status().message();
  EXPECT_EQ(one->shape, std::vector<int64_t>{4});
}

// Headers a lenient reader misreads: these were accepted and read in the wrong order or type.
TEST(Data, NpyHeadersThatAreRefused) {
  struct Case {
    std::string dict, why;
  } cases[] = {
      {"{\"descr\": \"<f4\", \"fortran_order\": True, \"shape\": (2, 3)}", "Fortran order is not supported"},
      {"{'descr': '<f4', 'fortran_order': True, 'shape': (2, 3), }", "Fortran order is not supported"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'descr': '<i8'}", "repeats the key 'descr'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (6)}", "header shape (6) is not a tuple"},
      {"{'descr': '<f4', 'shape': (2, 3)}", "has no fortran_order"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3), 'extra': 1}", "unknown key 'extra'"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, 3)} trailing", "bytes after its dict"},
      {"{'descr': '<f4', 'fortran_order': 0, 'shape': (2, 3)}", "fortran_order is not True or False"},
      {"{'descr': '<f4', 'fortran_order': False, 'shape': (2, -3)}", "header shape (2, -3) is not a tuple"},
  };
  for (const Case& c : cases) {
    auto a = ParseNpy(Npy(c.dict, Floats(6)), "data.x", "x.npy");
    ASSERT_FALSE(a.ok()) << c.dict;
    EXPECT_NE(a.status().message().find("[data] data.x: 'x.npy': "), std::string::npos) << a.status().message();
    EXPECT_NE(a.status().message().find(c.why), std::string::npos) << c.dict << " -> " << a.status().message();
  }
}

// A synthetic set may be 2^40 samples long: read sequentially, nothing visits them all; a shuffle
// would keep a permutation of 8 TiB, which is refused up front.
TEST(Data, HugeSyntheticSets) {
  DataConfig cfg;
  cfg.format = DataConfig::Format::kSynthetic;
  cfg.samples = int64_t{1} << 40;
  cfg.synthetic["y"] = SyntheticField{{}, SyntheticField::DType::kI64, 7};
  auto d = OpenDataset(cfg, 3);
  ASSERT_TRUE(d.ok()) << d.status().message();
  EXPECT_EQ((*d)->KnownRange("y"), std::make_pair(int64_t{0}, int64_t{7}));
  cfg.order = DataConfig::Order::kShuffle;
  auto shuffled = OpenDataset(cfg, 3);
  ASSERT_FALSE(shuffled.ok());
  EXPECT_NE(shuffled.status().message().find("data.order: shuffle over 1099511627776 samples"), std::string::npos)
      << shuffled.status().message();
}

}  // namespace
}  // namespace fr::data
