//===- FeatureFileTest.cpp - Binary features and masks (docs/data.md) -----===//
//
// An indexed dataset with its encoders' feature rows (fp32, bf16) and a
// loss mask beside it: a sample per sequence, its rows and targets; every
// damaged or mismatched file named with what is wrong.
//
//===----------------------------------------------------------------------===//

#include "runtime/data/FeatureFile.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/data/Data.h"
#include "runtime/data/IndexedData.h"
#include "tests/unit/TestModels.h"

#include <gtest/gtest.h>

#include <cstring>
#include <filesystem>
#include <fstream>

using namespace mimo;
using namespace mimo::exec;

namespace {

struct TempDir {
  std::string path;
  TempDir() {
    std::string pattern =
        (std::filesystem::temp_directory_path() / "mimo-feat-XXXXXX").string();
    path = ::mkdtemp(pattern.data());
  }
  ~TempDir() { std::filesystem::remove_all(path); }
};

constexpr int64_t kImage = 1000, kDim = 48; // vlm-fan-in's encoder

/// vlm-fan-in reading the indexed dataset PREFIX (one sample per sequence).
nlohmann::json vlmModel(const std::string &prefix) {
  nlohmann::json model = test::baseModel();
  model["batch"]["micro_batch_size"] = 4;
  model["batch"]["num_microbatches"] = 1;
  model["batch"]["seq_length"] = 16;
  model["data"] = {{"source", "indexed"}, {"path", prefix}};
  return model;
}

/// Three sequences: 2 image tokens, none, 3; their rows value r + c / 64.
std::vector<std::vector<int64_t>> sequences() {
  return {{5, kImage, kImage, 6, 7},
          {8, 9, 10},
          {11, kImage, kImage, kImage, 12, 13}};
}

std::vector<std::vector<float>> rowsOf() {
  std::vector<std::vector<float>> rows;
  float r = 0;
  for (const auto &ids : sequences()) {
    rows.emplace_back();
    for (int64_t id : ids)
      if (id == kImage) {
        for (int64_t c = 0; c < kDim; ++c)
          rows.back().push_back(r + float(c) / 64);
        r += 1;
      }
  }
  return rows;
}

void writeAll(const std::string &prefix, bool bf16) {
  std::string error;
  ASSERT_TRUE(writeIndexedDataset(prefix, sequences(), 4, error)) << error;
  ASSERT_TRUE(
      writeFeatureFile(prefix + ".images.feat", bf16, kDim, rowsOf(), error))
      << error;
  std::vector<uint8_t> mask(14, 1);
  mask[0] = mask[1] = 0; // the first sequence's first two tokens
  ASSERT_TRUE(writeMaskFile(prefix + ".mask", mask, error)) << error;
}

std::unique_ptr<DataSource> sourceOf(const nlohmann::json &model,
                                     std::vector<std::string> &errors) {
  ModelConfig config =
      test::requireConfig(parseModelConfig(model.dump(), "model.json"));
  return makeDataSource(config, "", "plan.json", errors);
}

TEST(FeatureFile, ASamplePerSequenceWithItsRowsAndMask) {
  for (bool bf16 : {false, true}) {
    SCOPED_TRACE(bf16 ? "bf16" : "fp32");
    TempDir dir;
    const std::string prefix = dir.path + "/vlm";
    ASSERT_NO_FATAL_FAILURE(writeAll(prefix, bf16));
    std::vector<std::string> errors;
    auto source = sourceOf(vlmModel(prefix), errors);
    ASSERT_TRUE(source) << (errors.empty() ? "" : errors[0]);
    Microbatch mb = source->get(0, 0); // sequences 0, 1, 2, then 0 again
    ASSERT_EQ(mb.samples.size(), 4u);
    const Sample &a = mb.samples[0], &c = mb.samples[2];
    EXPECT_EQ(a.length, 5);
    EXPECT_EQ(a.ids, (std::vector<int64_t>{5, kImage, kImage, 6, 7, 0, 0, 0, 0,
                                           0, 0, 0, 0, 0, 0, 0}));
    EXPECT_EQ(a.counts, (std::vector<int64_t>{2}));
    EXPECT_EQ(c.counts, (std::vector<int64_t>{3}));
    EXPECT_EQ(mb.samples[1].counts, (std::vector<int64_t>{0}));
    EXPECT_EQ(a.target, (std::vector<uint8_t>{0, 0, 1, 1, 1}));
    EXPECT_EQ(c.target, (std::vector<uint8_t>(6, 1)));
    // Row 3 (the third sequence's second row), value 5: 3 + 5/64, exact
    // in bf16 too.
    ASSERT_EQ(c.features[0].size(), size_t(3 * kDim));
    EXPECT_EQ(c.features[0][kDim + 5], 3.0f + 5.0f / 64);
    EXPECT_EQ(mb.samples[3].ids, a.ids);
    EXPECT_TRUE(lossMasked(a,
                           encodersOf(test::requireConfig(parseModelConfig(
                               vlmModel(prefix).dump(), "m.json"))),
                           0));
  }
}

/// Bytes of `path` with `patch` written at `offset`.
void patch(const std::string &path, int64_t offset, const std::string &bytes) {
  std::fstream f(path, std::ios::binary | std::ios::in | std::ios::out);
  f.seekp(offset);
  f.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
}

std::string openError(const nlohmann::json &model) {
  std::vector<std::string> errors;
  auto source = sourceOf(model, errors);
  return source ? "" : (errors.empty() ? "?" : errors[0]);
}

TEST(FeatureFile, DamagedAndMismatchedFilesAreNamed) {
  TempDir dir;
  const std::string prefix = dir.path + "/vlm";
  const std::string feat = prefix + ".images.feat";
  auto fresh = [&] { writeAll(prefix, false); };
  auto expectError = [&](const std::string &want) {
    std::string error = openError(vlmModel(prefix));
    EXPECT_NE(error.find(want), std::string::npos) << error;
    fresh();
  };
  fresh();
  patch(feat, 0, "NOTAFEAT");
  expectError(feat + ": error: expected the header MIMOFEAT");
  patch(feat, 24, std::string("\x20\0\0\0\0\0\0\0", 8)); // dim 32
  expectError("its rows have 32 values, but the encoder's feature_dim is 48");
  patch(feat, 32, std::string("\x02\0\0\0\0\0\0\0", 8)); // 2 sequences
  expectError("rows for 2 sequences, but the index has 3");
  patch(feat, 48, std::string("\x09\0\0\0\0\0\0\0", 8)); // offsets[1] 9
  expectError("offsets[2] is below offsets[1]");
  std::filesystem::resize_file(feat, std::filesystem::file_size(feat) - 4);
  expectError("announces 5 rows of 48 values, but holds");
  patch(prefix + ".mask", 16, std::string("\x07\0\0\0\0\0\0\0", 8));
  expectError(prefix + ".mask: error: it masks 7 tokens");
  std::filesystem::remove(feat);
  expectError(feat + ": error: no feature rows for encoder 'images'");
  // At read: rows that do not match the tokens, a mask byte of 2.
  patch(feat, 48, std::string("\x01\0\0\0\0\0\0\0", 8)); // 1 row, 2 tokens
  std::vector<std::string> errors;
  auto source = sourceOf(vlmModel(prefix), errors);
  ASSERT_TRUE(source);
  try {
    source->get(0, 0);
    ADD_FAILURE() << "no error";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find(
                  "sequence 0 has 1 feature rows but 2 'images' tokens"),
              std::string::npos)
        << e.what();
  }
  fresh();
  patch(prefix + ".mask", 24 + 3, "\x02");
  source = sourceOf(vlmModel(prefix), errors);
  ASSERT_TRUE(source);
  EXPECT_THROW(source->get(0, 0), std::runtime_error);
  // Windows would cut an image's run from its rows.
  nlohmann::json windows = vlmModel(prefix);
  windows["data"]["samples"] = "windows";
  ParseResult parsed = parseModelConfig(windows.dump(), "model.json");
  ASSERT_FALSE(parsed.diagnostics.empty());
  EXPECT_EQ(parsed.diagnostics[0].pointer, "/data/samples");
}

/// PREFIX.<encoder>.items (docs/data.md): the rows of several images a
/// sequence, each its own item in the encoder's lane (its own segment);
/// without the file a sequence's rows are one item. jsonl's "items" gives
/// the same lane; bad files and values are named.
TEST(FeatureFile, ItemsSplitASequencesRowsIntoImages) {
  TempDir dir;
  const std::string prefix = dir.path + "/vlm";
  ASSERT_NO_FATAL_FAILURE(writeAll(prefix, false));
  const std::string itemsPath = prefix + ".images.items";
  std::string error;
  // Rows 0-1 (sequence 0): one item; rows 2-4 (sequence 2): 1 + 2.
  ASSERT_TRUE(writeItemFile(itemsPath, {1, 0, 1, 1, 0}, error)) << error;
  std::vector<std::string> errors;
  auto source = sourceOf(vlmModel(prefix), errors);
  ASSERT_TRUE(source) << (errors.empty() ? "" : errors[0]);
  Microbatch mb = source->get(0, 0);
  EXPECT_EQ(mb.samples[0].items[0], (std::vector<int64_t>{2}));
  EXPECT_EQ(mb.samples[2].items[0], (std::vector<int64_t>{1, 2}));
  EncoderLane lane = encoderLane(mb, 0, kDim, 0, 4);
  EXPECT_EQ(lane.rows, 7);
  EXPECT_EQ(lane.segment, (std::vector<int64_t>{0, 0, 1, 2, 2, 3, 3}));
  std::filesystem::remove(itemsPath);
  source = sourceOf(vlmModel(prefix), errors);
  ASSERT_TRUE(source);
  lane = encoderLane(source->get(0, 0), 0, kDim, 0, 4);
  EXPECT_EQ(lane.segment, (std::vector<int64_t>{0, 0, 1, 1, 1, 2, 2}));

  // Damaged: the header, the row count, a byte of 2, a sequence's first
  // row that begins no item.
  ASSERT_TRUE(writeItemFile(itemsPath, {1, 0, 1, 1}, error)) << error;
  EXPECT_NE(openError(vlmModel(prefix))
                .find(itemsPath + ": error: it marks 4 rows in 4 bytes, but "
                                  "the feature file has 5"),
            std::string::npos);
  for (const auto &[bytes, want] :
       {std::pair{std::vector<uint8_t>{1, 0, 1, 2, 0}, "row 3 has byte 2"},
        std::pair{std::vector<uint8_t>{1, 0, 0, 1, 0},
                  "row 2 has byte 0, but it is a sequence's first row"}}) {
    ASSERT_TRUE(writeItemFile(itemsPath, bytes, error)) << error;
    source = sourceOf(vlmModel(prefix), errors);
    ASSERT_TRUE(source);
    try {
      source->get(0, 0);
      ADD_FAILURE() << "no error for " << want;
    } catch (const std::runtime_error &e) {
      EXPECT_NE(std::string(e.what()).find(want), std::string::npos)
          << e.what();
    }
  }
  patch(itemsPath, 0, "NOTITEMS");
  EXPECT_NE(openError(vlmModel(prefix)).find("expected the header MIMOITEM"),
            std::string::npos);
  std::filesystem::remove(itemsPath);

  // jsonl: "items" beside "features".
  const std::string jsonl = dir.path + "/vlm.jsonl";
  auto line = [&](const std::string &items) {
    nlohmann::json rows = nlohmann::json::array();
    for (int r = 0; r < 3; ++r)
      rows.push_back(std::vector<float>(kDim, float(r)));
    std::ofstream(jsonl) << "{\"input_ids\": [11, 1000, 1000, 1000, 12], "
                            "\"images\": {\"features\": "
                         << rows.dump() << items << "}}\n";
  };
  nlohmann::json model = vlmModel(prefix);
  model["data"] = {{"source", "jsonl"}, {"path", jsonl}};
  line(", \"items\": [2, 1]");
  source = sourceOf(model, errors);
  ASSERT_TRUE(source) << (errors.empty() ? "" : errors[0]);
  lane = encoderLane(source->get(0, 0), 0, kDim, 0, 1);
  EXPECT_EQ(lane.segment, (std::vector<int64_t>{0, 0, 1}));
  for (const char *bad : {", \"items\": [2, 2]", ", \"items\": [3, 0]",
                          ", \"items\": 3", ", \"items\": [1.5, 1.5]"}) {
    SCOPED_TRACE(bad);
    line(bad);
    errors.clear();
    EXPECT_FALSE(sourceOf(model, errors));
    ASSERT_FALSE(errors.empty());
    EXPECT_NE(errors[0].find("/images/items"), std::string::npos) << errors[0];
    EXPECT_NE(errors[0].find("summing to the 3 feature rows"),
              std::string::npos)
        << errors[0];
  }
}

} // namespace
