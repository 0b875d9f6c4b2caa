//===- DataFormatTest.cpp - The same samples from jsonl and binary files --===//
//
// docs/data.md: the same samples written as jsonl (features as text, a
// loss_mask per line) and as an indexed dataset with binary feature rows
// and a mask file train bit for bit alike, in a distributed layout, and
// shuffled alike.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/FeatureFile.h"
#include "runtime/data/IndexedData.h"
#include "runtime/exec/Executor.h"
#include "tests/e2e/Layouts.h"
#include "tests/e2e/SameTraining.h"

#include <gtest/gtest.h>

#include <cstdio>
#include <filesystem>
#include <fstream>
#include <random>

using namespace mimo;
using nlohmann::json;

namespace {

TEST(DataFormats, JsonlAndBinaryFeaturesTrainBitForBitAlike) {
  json model = test::example("vlm-fan-in.json");
  model["batch"]["seq_length"] = 32;
  const int64_t image = model["modules"][0]["special_token_id"];
  const int64_t dim = model["modules"][0]["arch"]["feature_dim"];
  std::string pattern =
      (std::filesystem::temp_directory_path() / "mimo-formats-XXXXXX").string();
  const std::string dir = ::mkdtemp(pattern.data());
  // 40 samples: ids, a run of 0-6 image tokens, a masked prompt.
  std::mt19937 rng(7);
  std::vector<std::vector<int64_t>> ids;
  std::vector<std::vector<float>> rows;
  std::vector<uint8_t> mask;
  std::ofstream jsonl(dir + "/train.jsonl");
  for (int i = 0; i < 40; ++i) {
    const int64_t length = 8 + rng() % 25, count = rng() % 7;
    std::vector<int64_t> s;
    for (int64_t t = 0; t < length; ++t)
      s.push_back(static_cast<int64_t>(rng() % 999));
    const int64_t at = 1 + rng() % (length - count - 1);
    for (int64_t t = 0; t < count; ++t)
      s[static_cast<size_t>(at + t)] = image;
    std::vector<float> r;
    json features = json::array();
    for (int64_t k = 0; k < count; ++k) {
      json row = json::array();
      for (int64_t c = 0; c < dim; ++c) {
        float v = std::uniform_real_distribution<float>(-1, 1)(rng);
        r.push_back(v);
        char text[32];
        std::snprintf(text, sizeof text, "%.9g", double(v));
        row.push_back(json::parse(text));
      }
      features.push_back(row);
    }
    json m = json::array();
    const int64_t prompt = rng() % (length / 2);
    for (int64_t t = 0; t < length; ++t) {
      mask.push_back(t >= prompt);
      m.push_back(t >= prompt ? 1 : 0);
    }
    json line = {{"input_ids", s}, {"loss_mask", m}};
    if (count)
      line["images"] = {{"features", features}};
    jsonl << line.dump() << "\n";
    ids.push_back(s);
    rows.push_back(r);
  }
  jsonl.close();
  std::string error;
  ASSERT_TRUE(exec::writeIndexedDataset(dir + "/train", ids, 8, error))
      << error;
  ASSERT_TRUE(exec::writeFeatureFile(dir + "/train.images.feat", false, dim,
                                     rows, error))
      << error;
  ASSERT_TRUE(exec::writeMaskFile(dir + "/train.mask", mask, error)) << error;

  for (bool shuffle : {false, true}) {
    SCOPED_TRACE(shuffle ? "shuffled" : "in file order");
    json fromJsonl = model, fromBinary = model;
    fromJsonl["data"] = {{"source", "jsonl"},
                         {"path", dir + "/train.jsonl"},
                         {"shuffle", shuffle}};
    fromBinary["data"] = {
        {"source", "indexed"}, {"path", dir + "/train"}, {"shuffle", shuffle}};
    test::expectSameTraining(test::planOf(fromJsonl), test::planOf(fromBinary));
  }
  std::filesystem::remove_all(dir);
}

} // namespace
