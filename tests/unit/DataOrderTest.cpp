//===- DataOrderTest.cpp - Which sample a step reads (docs/data.md) -------===//
//
// docs/data.md "Order": the permutation is a bijection, each shuffled epoch
// reads every sample once, the blend draws in proportion to the weights
// whatever sample it starts from, and the samples of a step are the same
// for every micro-batch split of the global batch, for every source.
//
//===----------------------------------------------------------------------===//

#include "runtime/config/ModelConfig.h"
#include "runtime/data/Data.h"
#include "runtime/data/IndexedData.h"
#include "runtime/data/Order.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <algorithm>
#include <filesystem>
#include <fstream>
#include <set>
#include <thread>

using namespace mimo;
using namespace mimo::exec;

namespace {

TEST(DataOrder, ThePermutationIsABijectionThatMoves) {
  for (uint64_t n : {1ull, 2ull, 3ull, 7ull, 64ull, 1000ull, 4097ull}) {
    SCOPED_TRACE(n);
    std::vector<uint64_t> image;
    for (uint64_t i = 0; i < n; ++i)
      image.push_back(permuteIndex(i, n, 42));
    std::vector<uint64_t> sorted = image;
    std::sort(sorted.begin(), sorted.end());
    for (uint64_t i = 0; i < n; ++i)
      ASSERT_EQ(sorted[i], i);
    if (n >= 64) {
      int64_t fixed = 0, same = 0;
      for (uint64_t i = 0; i < n; ++i) {
        fixed += image[i] == i;
        same += permuteIndex(i, n, 43) == image[i];
      }
      EXPECT_LT(fixed, int64_t(n / 8)) << "barely shuffled";
      EXPECT_LT(same, int64_t(n / 8)) << "another key, the same order";
    }
  }
}

TEST(DataOrder, EachEpochReadsEverySampleOnce) {
  const int64_t n = 37;
  std::vector<std::vector<int64_t>> epochs(3);
  for (int64_t k = 0; k < 3 * n; ++k) {
    EXPECT_EQ(epochSample(k, n, false, 9), k % n);
    epochs[k / n].push_back(epochSample(k, n, true, 9));
  }
  for (auto &epoch : epochs) {
    std::vector<int64_t> sorted = epoch;
    std::sort(sorted.begin(), sorted.end());
    for (int64_t i = 0; i < n; ++i)
      ASSERT_EQ(sorted[static_cast<size_t>(i)], i);
  }
  EXPECT_NE(epochs[0], epochs[1]);
  EXPECT_NE(epochs[1], epochs[2]);
}

TEST(DataOrder, TheBlendFollowsTheWeightsFromAnySample) {
  BlendOrder blend({0.5, 0.3, 0.2});
  const int64_t G = 3 * BlendOrder::kChunk + 123;
  std::vector<std::pair<size_t, int64_t>> all = blend.pick(0, G);
  std::vector<int64_t> drawn(3, 0);
  for (int64_t g = 0; g < G; ++g) {
    auto [d, k] = all[static_cast<size_t>(g)];
    ASSERT_EQ(k, drawn[d]) << "draws of a dataset are consecutive";
    ++drawn[d];
    const double w[3] = {0.5, 0.3, 0.2};
    for (size_t e = 0; e < 3; ++e)
      ASSERT_LE(std::abs(double(drawn[e]) - w[e] * double(g + 1)), 1.0 + 1e-9)
          << "sample " << g;
  }
  // A window anywhere (across the remembered chunks, from two threads at
  // once) is the same as the walk from 0.
  for (int64_t g :
       {int64_t(1), BlendOrder::kChunk - 3, 2 * BlendOrder::kChunk, G - 40}) {
    std::vector<std::pair<size_t, int64_t>> a, b;
    std::thread t([&] { a = BlendOrder({5, 3, 2}).pick(g, 40); });
    b = blend.pick(g, 40);
    t.join();
    for (size_t i = 0; i < 40; ++i) {
      EXPECT_EQ(a[i], all[static_cast<size_t>(g) + i]) << g + int64_t(i);
      EXPECT_EQ(b[i], all[static_cast<size_t>(g) + i]) << g + int64_t(i);
    }
  }
}

std::string tempDir() {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("mimo-order-test-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::create_directories(dir);
  return dir;
}

/// The ids of every sample of step `step` for a split of the global batch
/// of 8 into `microbatches` of 8 / microbatches.
std::vector<std::vector<int64_t>>
stepSamples(nlohmann::json model, int64_t microbatches, int64_t step) {
  model["batch"]["micro_batch_size"] = 8 / microbatches;
  model["batch"]["num_microbatches"] = microbatches;
  ModelConfig config =
      test::requireConfig(parseModelConfig(model.dump(), "model.json"));
  std::vector<std::string> errors;
  auto source = makeDataSource(config, "", "plan.json", errors);
  if (!source)
    throw std::runtime_error(errors.empty() ? "no source" : errors[0]);
  std::vector<std::vector<int64_t>> ids;
  for (int64_t mb = 0; mb < microbatches; ++mb)
    for (const Sample &s : source->get(step, mb).samples)
      ids.push_back(s.ids);
  return ids;
}

/// docs/data.md: the samples of a step depend on the seed, the global batch
/// and the step only; every source, shuffled or blended.
TEST(DataOrder, EveryMicroBatchSplitReadsTheSameSamples) {
  const std::string dir = tempDir();
  {
    std::ofstream a(dir + "/a.jsonl"), b(dir + "/b.jsonl");
    for (int i = 0; i < 11; ++i)
      a << "{\"input_ids\": [" << i + 1 << ", 2, 3]}\n";
    for (int i = 0; i < 5; ++i)
      b << "{\"input_ids\": [" << 500 + i << ", 7]}\n";
  }
  std::string error;
  std::vector<std::vector<int64_t>> sequences;
  for (int i = 0; i < 20; ++i)
    sequences.push_back({i, i + 1, i + 2});
  ASSERT_TRUE(writeIndexedDataset(dir + "/c", sequences, 8, error)) << error;

  nlohmann::json text = test::baseModel();
  text["modules"] = nlohmann::json::array({text["modules"][1]});
  text["modules"][0]["parallel"] = {{"tp", 1}};
  text["batch"]["seq_length"] = 8;
  std::vector<std::pair<std::string, nlohmann::json>> sources = {
      {"synthetic", test::baseModel()["data"]},
      {"jsonl", {{"source", "jsonl"}, {"path", dir + "/a.jsonl"}}},
      {"jsonl shuffled",
       {{"source", "jsonl"}, {"path", dir + "/a.jsonl"}, {"shuffle", true}}},
      {"indexed shuffled",
       {{"source", "indexed"}, {"path", dir + "/c"}, {"shuffle", true}}},
      {"blend",
       {{"source", "jsonl"},
        {"shuffle", true},
        {"blend",
         {{{"path", dir + "/a.jsonl"}, {"weight", 3}},
          {{"path", dir + "/b.jsonl"}, {"weight", 1}}}}}}};
  for (const auto &[name, data] : sources) {
    SCOPED_TRACE(name);
    nlohmann::json model = name == "synthetic" ? test::baseModel() : text;
    model["data"] = data;
    std::set<std::vector<int64_t>> seen;
    for (int64_t step : {0, 1, 5}) {
      std::vector<std::vector<int64_t>> one = stepSamples(model, 1, step);
      EXPECT_EQ(stepSamples(model, 2, step), one) << "step " << step;
      EXPECT_EQ(stepSamples(model, 8, step), one) << "step " << step;
      seen.insert(one.begin(), one.end());
    }
    if (name == "blend") { // both files drawn from
      bool a = false, b = false;
      for (const auto &ids : seen)
        (ids[0] >= 500 ? b : a) = true;
      EXPECT_TRUE(a && b);
    }
  }
  // Shuffled, the order is another than the file's, and every line of an
  // epoch (11 lines: steps 0 and 1 hold samples 0..15) comes once.
  nlohmann::json model = text;
  model["data"] = {{"source", "jsonl"}, {"path", dir + "/a.jsonl"}};
  std::vector<std::vector<int64_t>> plain = stepSamples(model, 2, 0);
  model["data"]["shuffle"] = true;
  std::vector<std::vector<int64_t>> shuffled = stepSamples(model, 2, 0);
  EXPECT_NE(plain, shuffled);
  std::vector<std::vector<int64_t>> epoch = shuffled;
  for (const auto &ids : stepSamples(model, 2, 1))
    if (epoch.size() < 11)
      epoch.push_back(ids);
  std::set<int64_t> firsts;
  for (const auto &ids : epoch)
    firsts.insert(ids[0]);
  EXPECT_EQ(firsts.size(), 11u);
  std::filesystem::remove_all(dir);
}

TEST(DataOrder, BlendAndShuffleKeysAreCheckedAndWritten) {
  nlohmann::json model = test::baseModel();
  auto problem = [&](const nlohmann::json &data) {
    nlohmann::json m = model;
    m["data"] = data;
    ParseResult parsed = parseModelConfig(m.dump(), "model.json");
    return parsed.diagnostics.empty() ? std::string()
                                      : parsed.diagnostics[0].pointer + ": " +
                                            parsed.diagnostics[0].message;
  };
  EXPECT_NE(problem({{"shuffle", true}})
                .find("/data/shuffle: expected no "
                      "shuffle for the synthetic"),
            std::string::npos);
  std::string both = problem({{"source", "jsonl"},
                              {"path", "a.jsonl"},
                              {"blend", {{{"path", "b.jsonl"}}}}});
  EXPECT_NE(both.find("/data/blend: expected path or blend, found both"),
            std::string::npos)
      << both;
  std::string weight = problem(
      {{"source", "jsonl"}, {"blend", {{{"path", "b.jsonl"}, {"weight", 0}}}}});
  EXPECT_EQ(weight.rfind("/data/blend/0/weight:", 0), 0u) << weight;
  std::string key = problem(
      {{"source", "jsonl"}, {"blend", {{{"path", "b.jsonl"}, {"w", 1}}}}});
  EXPECT_EQ(key.rfind("/data/blend/0", 0), 0u) << key;
  model["modules"] = nlohmann::json::array({model["modules"][1]});
  model["data"] = {{"source", "jsonl"},
                   {"shuffle", true},
                   {"blend",
                    {{{"path", "a.jsonl"}, {"weight", 2}},
                     {{"path", "b.jsonl"}, {"weight", 0.5}}}}};
  ModelConfig config =
      test::requireConfig(parseModelConfig(model.dump(), "model.json"));
  ASSERT_EQ(config.data.blend.size(), 2u);
  EXPECT_EQ(config.data.blend[1].weight, 0.5);
  EXPECT_TRUE(config.data.shuffle);
  nlohmann::json written = toJson(config)["data"];
  EXPECT_EQ(written["blend"][0]["path"], "a.jsonl");
  EXPECT_EQ(written["shuffle"], true);
  EXPECT_FALSE(written.contains("path"));
}

} // namespace
