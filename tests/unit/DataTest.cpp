//===- DataTest.cpp - Synthetic data and lane views (docs/data.md) -----===//

#include "runtime/data/Data.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/data/IndexedData.h"
#include "tests/unit/TestModels.h"

#include "runtime/support/MappedFile.h"

#include <gtest/gtest.h>

#include <cstdlib>
#include <filesystem>
#include <fstream>

using namespace mimo;
using namespace mimo::exec;

namespace {

ModelConfig configOf(const nlohmann::json &model) {
  return test::requireConfig(parseModelConfig(model.dump(), "model.json"));
}

TEST(DataTest, SyntheticMicrobatchIsAPureFunctionOfStepAndIndex) {
  ModelConfig config = configOf(test::baseModel());
  std::vector<std::string> errors;
  auto a = makeDataSource(config, "", "plan.json", errors);
  auto b = makeDataSource(config, "", "plan.json", errors);
  ASSERT_TRUE(a && b);
  Microbatch x = a->get(2, 1), y = b->get(2, 1), z = a->get(2, 2);
  ASSERT_EQ(x.samples.size(), 8u);
  for (size_t i = 0; i < 8; ++i) {
    EXPECT_EQ(x.samples[i].ids, y.samples[i].ids);
    EXPECT_EQ(x.samples[i].features, y.samples[i].features);
  }
  bool differs = false;
  for (size_t i = 0; i < 8; ++i)
    differs |= x.samples[i].ids != z.samples[i].ids;
  EXPECT_TRUE(differs);
}

TEST(DataTest, ModalityCountsMatchSpecialTokensAndRanges) {
  ModelConfig config = configOf(test::baseModel()); // images [0, 24], 25 %
  std::vector<std::string> errors;
  auto data = makeDataSource(config, "", "plan.json", errors);
  int textOnly = 0, samples = 0;
  for (int64_t mb = 0; mb < 16; ++mb)
    for (const Sample &s : data->get(0, mb).samples) {
      ++samples;
      int64_t count = 0;
      for (int64_t id : s.ids) {
        EXPECT_GE(id, 0);
        EXPECT_LT(id, 1024);
        count += id == 1000;
      }
      EXPECT_EQ(count, s.counts[0]);
      EXPECT_LE(count, 24);
      EXPECT_EQ(static_cast<int64_t>(s.features[0].size()), count * 48);
      textOnly += count == 0;
    }
  // A quarter of the samples are text-only (plus draws of 0 tokens).
  EXPECT_GT(textOnly, samples / 8);
  EXPECT_LT(textOnly, samples / 2);
}

TEST(DataTest, LossMaskSkipsModalityTokensAndTheLastPosition) {
  std::vector<EncoderInfo> encoders = {{"images", 9, 2}};
  Sample s;
  s.ids = {1, 9, 9, 4, 5, 0, 0};
  s.length = 5; // positions 5, 6 are padding
  std::vector<bool> masked;
  for (int64_t p = 0; p < 7; ++p)
    masked.push_back(lossMasked(s, encoders, p));
  // 0 -> label 9 (modality), 1, 2 are modality, 3 -> 5 ok, 4 is last.
  EXPECT_EQ(masked,
            (std::vector<bool>{true, true, true, false, true, true, true}));
}

TEST(DataTest, LanguageLaneRowsAreSampleMajor) {
  std::vector<EncoderInfo> encoders = {{"images", 9, 1}};
  Microbatch mb;
  for (int b = 0; b < 2; ++b) {
    Sample s;
    s.ids = b == 0 ? std::vector<int64_t>{1, 9, 9, 2}
                   : std::vector<int64_t>{9, 3, 4, 5};
    s.length = 4;
    s.counts = {b == 0 ? 2 : 1};
    s.features = {std::vector<float>(static_cast<size_t>(s.counts[0]))};
    mb.samples.push_back(s);
  }
  LanguageLane lane = languageLane(mb, encoders, 0, 2, false, 1);
  EXPECT_EQ(lane.seq, 4);
  EXPECT_EQ(lane.batch, 2);
  EXPECT_EQ(lane.modalityRows[0], 3);
  // token = position * batch + b; sample 0's rows first, in token order.
  EXPECT_EQ(lane.modalityRow[0][1 * 2 + 0], 0);
  EXPECT_EQ(lane.modalityRow[0][2 * 2 + 0], 1);
  EXPECT_EQ(lane.modalityRow[0][0 * 2 + 1], 2);
  EXPECT_EQ(lane.modalityRow[0][3 * 2 + 1], -1);
  EXPECT_EQ(lane.segments[0 * 2 + 1], 1);
  // Packed: one row, each sample padded to a multiple of 4, positions
  // restart per sample, padding has its own segment and no loss.
  mb.samples[1].length = 3;
  mb.samples[1].ids.resize(3);
  LanguageLane packed = languageLane(mb, encoders, 0, 2, true, 4);
  EXPECT_EQ(packed.cuSeqlens, (std::vector<int64_t>{0, 4, 8}));
  EXPECT_EQ(packed.batch, 1);
  EXPECT_EQ(packed.positions[5], 1);
  EXPECT_EQ(packed.modalityRow[0][4], 2);
  EXPECT_LT(packed.segments[7], 0);
  EXPECT_EQ(packed.mask[7], 0.0f);
}

/// A language-only model of vocabulary 1000 reading `source`.
nlohmann::json textModel(const std::string &source, const std::string &path) {
  nlohmann::json model = test::baseModel();
  model["modules"] = nlohmann::json::array({model["modules"][1]});
  model["modules"][0]["parallel"] = {{"tp", 1}};
  model["batch"]["micro_batch_size"] = 2;
  model["batch"]["num_microbatches"] = 2;
  model["batch"]["seq_length"] = 8;
  model["data"] = {{"source", source}, {"path", path}};
  return model;
}

std::string tempDir() {
  std::string dir = (std::filesystem::temp_directory_path() /
                     ("mimo-data-test-" + std::to_string(::getpid())))
                        .string();
  std::filesystem::create_directories(dir);
  return dir;
}

TEST(IndexedData, SamplesAreConsecutiveWindowsOfTheTokenStream) {
  std::string dir = tempDir();
  // Three sequences, 13 tokens in all: the stream is 0..12 (+ 100).
  std::vector<std::vector<int64_t>> sequences = {
      {100, 101, 102, 103, 104}, {105, 106}, {107, 108, 109, 110, 111, 112}};
  for (int code : {8, 4}) { // uint16, int32
    SCOPED_TRACE(code);
    std::string prefix = dir + "/corpus" + std::to_string(code), error;
    ASSERT_TRUE(writeIndexedDataset(prefix, sequences, code, error)) << error;
    IndexedDataset dataset;
    ASSERT_TRUE(readIndexedDataset(prefix, dataset, error)) << error;
    EXPECT_EQ(dataset.totalTokens, 13);
    EXPECT_EQ(dataset.documents, (std::vector<int64_t>{0, 1, 2, 3}));
    ModelConfig config = configOf(textModel("indexed", prefix));
    std::vector<std::string> errors;
    auto source = makeDataSource(config, "", "plan.json", errors);
    ASSERT_TRUE(source) << (errors.empty() ? "" : errors[0]);
    // Step 0: samples 0 and 1 (mb 0), 2 and 3 (mb 1); 8 tokens each.
    Microbatch first = source->get(0, 0), second = source->get(0, 1);
    EXPECT_EQ(first.samples[0].ids,
              (std::vector<int64_t>{100, 101, 102, 103, 104, 105, 106, 107}));
    // Sample 1 starts at stream token 8 and wraps after token 12.
    EXPECT_EQ(first.samples[1].ids,
              (std::vector<int64_t>{108, 109, 110, 111, 112, 100, 101, 102}));
    EXPECT_EQ(second.samples[0].ids[0], 100 + (16 % 13));
    EXPECT_EQ(first.samples[0].length, 8);
  }
  std::filesystem::remove_all(dir);
}

TEST(IndexedData, BadFilesAreNamedAndTokensOutsideTheVocabularyRefused) {
  std::string dir = tempDir(), error;
  IndexedDataset dataset;
  EXPECT_FALSE(readIndexedDataset(dir + "/absent", dataset, error));
  EXPECT_NE(error.find("absent.idx: error: cannot open"), std::string::npos);
  std::string prefix = dir + "/small";
  ASSERT_TRUE(writeIndexedDataset(prefix, {{1, 2, 3}, {4, 5000}}, 8, error));
  { // a truncated .bin: the index points past its end
    std::ofstream bin(prefix + ".bin", std::ios::binary | std::ios::trunc);
    bin << "xy";
  }
  EXPECT_FALSE(readIndexedDataset(prefix, dataset, error));
  EXPECT_NE(error.find("lies outside"), std::string::npos) << error;
  ASSERT_TRUE(writeIndexedDataset(prefix, {{1, 2, 3}, {4, 5000}}, 8, error));
  { // a foreign header
    std::fstream idx(prefix + ".idx",
                     std::ios::binary | std::ios::in | std::ios::out);
    idx.write("NOTANIDX!", 9);
  }
  EXPECT_FALSE(readIndexedDataset(prefix, dataset, error));
  EXPECT_NE(error.find("expected the header MMIDIDX"), std::string::npos)
      << error;
  ASSERT_TRUE(writeIndexedDataset(prefix, {{1, 2, 3}, {4, 5000}}, 8, error));
  ModelConfig config = configOf(textModel("indexed", prefix));
  std::vector<std::string> errors;
  auto source = makeDataSource(config, "", "plan.json", errors);
  ASSERT_TRUE(source);
  EXPECT_THROW(source->get(0, 0), std::runtime_error); // 5000 >= vocab 1024
  std::filesystem::remove_all(dir);
}

TEST(IndexedData, HeldOutWindowsDoNotDependOnTheTrainingShuffle) {
  // Round 3: with data.shuffle on, held-out indexed windows were cut as
  // whole windows (floor(T / L)) instead of docs/data.md's file order
  // (window k = tokens [kL, (k+1)L) mod T).
  std::string dir = tempDir(), error;
  std::string prefix = dir + "/heldout";
  std::vector<int64_t> tokens(13);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int64_t>(100 + i);
  ASSERT_TRUE(writeIndexedDataset(prefix, {tokens}, 8, error)) << error;
  std::vector<std::vector<int64_t>> read;
  for (bool shuffle : {false, true}) {
    nlohmann::json model = textModel("indexed", prefix);
    model["data"]["eval_path"] = prefix;
    model["data"]["shuffle"] = shuffle;
    model["train"]["eval_every"] = 1;
    ModelConfig config = configOf(model);
    std::vector<std::string> errors;
    auto eval =
        makeDataSource(config, "", "plan.json", errors, DataSplit::Eval);
    ASSERT_TRUE(eval) << (errors.empty() ? "" : errors[0]);
    std::vector<int64_t> ids;
    // Held-out batch 1: samples 4..7, windows past floor(13 / 8) = 1.
    for (int64_t mb = 0; mb < 2; ++mb)
      for (const Sample &sample : eval->get(1, mb).samples)
        ids.insert(ids.end(), sample.ids.begin(), sample.ids.end());
    read.push_back(ids);
  }
  EXPECT_EQ(read[0], read[1]);
  // File order: sample 4 is window 4, tokens [32, 40) mod 13.
  EXPECT_EQ(read[0][0], 100 + 32 % 13);
  std::filesystem::remove_all(dir);
}

TEST(IndexedData, ADtypeCodeThatDoesNotMatchTheDataIsRefused) {
  // Round 3: uint16 tokens under an index whose code says uint8 trained on
  // garbage (each pointer must follow the last sequence's bytes).
  std::string dir = tempDir(), error;
  std::string prefix = dir + "/tokens";
  ASSERT_TRUE(writeIndexedDataset(prefix, {{1, 2, 3}, {4, 5}}, 8, error));
  { // the dtype code is the byte after the magic and the version
    std::fstream idx(prefix + ".idx",
                     std::ios::binary | std::ios::in | std::ios::out);
    idx.seekp(9 + 8);
    const char uint8Code = 1;
    idx.write(&uint8Code, 1);
  }
  IndexedDataset dataset;
  EXPECT_FALSE(readIndexedDataset(prefix, dataset, error));
  EXPECT_NE(error.find("dtype code"), std::string::npos) << error;
  // One sequence: its end is not the .bin's.
  ASSERT_TRUE(writeIndexedDataset(prefix, {{1, 2, 3, 4}}, 4, error));
  {
    std::fstream idx(prefix + ".idx",
                     std::ios::binary | std::ios::in | std::ios::out);
    idx.seekp(9 + 8);
    const char uint16Code = 8;
    idx.write(&uint16Code, 1);
  }
  EXPECT_FALSE(readIndexedDataset(prefix, dataset, error));
  EXPECT_NE(error.find("end at byte 8"), std::string::npos) << error;
  std::filesystem::remove_all(dir);
}

TEST(IndexedData, ADanglingMaskLinkIsAnErrorNotNoMask) {
  std::string dir = tempDir(), error;
  std::string prefix = dir + "/masked";
  ASSERT_TRUE(
      writeIndexedDataset(prefix, {{1, 2, 3, 4, 5, 6, 7, 8}}, 8, error));
  std::filesystem::create_symlink(dir + "/gone.mask", prefix + ".mask");
  ModelConfig config = configOf(textModel("indexed", prefix));
  std::vector<std::string> errors;
  auto source = makeDataSource(config, "", "plan.json", errors);
  EXPECT_FALSE(source);
  ASSERT_FALSE(errors.empty());
  EXPECT_NE(errors[0].find("does not exist"), std::string::npos) << errors[0];
  std::filesystem::remove_all(dir);
}

TEST(IndexedData, TokensTruncatedWhileMappedAreAnErrorNotACrash) {
  // Round 3: `truncate -s 0 train.bin` during a run killed it with SIGBUS.
  std::string dir = tempDir(), error;
  std::string prefix = dir + "/shrinking";
  std::vector<int64_t> tokens(20000);
  for (size_t i = 0; i < tokens.size(); ++i)
    tokens[i] = static_cast<int64_t>(i % 1000);
  ASSERT_TRUE(writeIndexedDataset(prefix, {tokens}, 8, error));
  ModelConfig config = configOf(textModel("indexed", prefix));
  std::vector<std::string> errors;
  auto source = makeDataSource(config, "", "plan.json", errors);
  ASSERT_TRUE(source) << (errors.empty() ? "" : errors[0]);
  EXPECT_NO_THROW(source->get(0, 0));
  std::filesystem::resize_file(prefix + ".bin", 0);
  // Windows far into the (mapped, now empty) file: zeros would be read.
  try {
    source->get(1000, 0);
    FAIL() << "read a truncated file";
  } catch (const std::runtime_error &e) {
    EXPECT_NE(std::string(e.what()).find("shrank while it was being read"),
              std::string::npos)
        << e.what();
  }
  std::filesystem::remove_all(dir);
}

TEST(MappedFile, AShrinkWithinTheLastPageOrARewriteIsSeen) {
  std::string dir = tempDir(), error;
  const std::string path = dir + "/bytes";
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(100, 'x');
  }
  MappedFile map;
  ASSERT_TRUE(map.open(path, "the bytes", error)) << error;
  EXPECT_FALSE(map.damaged());
  std::filesystem::resize_file(path, 64); // no SIGBUS: the same page
  EXPECT_TRUE(map.damaged());
  EXPECT_THROW(map.checkIntact(), std::runtime_error);
  // Pages past the new end read as zeros instead of killing the process.
  {
    std::ofstream out(path, std::ios::binary);
    out << std::string(3 * 4096, 'y');
  }
  MappedFile big;
  ASSERT_TRUE(big.open(path, "the bytes", error)) << error;
  std::filesystem::resize_file(path, 0);
  EXPECT_EQ(big.bytes()[2 * 4096 + 5], 0);
  EXPECT_TRUE(big.damaged());
  std::filesystem::remove_all(dir);
}

TEST(DataPaths, ResolvedAgainstTheModelDirectoryAndChecked) {
  std::string dir = tempDir();
  // Each temporary stream is flushed and closed at the end of its line.
  std::ofstream(dir + "/train.jsonl") << "{\"input_ids\": [1, 2, 3]}\n";
  std::ofstream(dir + "/broken.jsonl") << "not json\n";
  ModelConfig good = configOf(textModel("jsonl", "train.jsonl"));
  EXPECT_TRUE(resolveDataPaths(good, dir).empty());
  EXPECT_EQ(good.data.path, dir + "/train.jsonl"); // absolute, resolved
  ModelConfig broken = configOf(textModel("jsonl", "broken.jsonl"));
  std::vector<Diagnostic> problems = resolveDataPaths(broken, dir);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_EQ(problems[0].pointer, "/data/path");
  EXPECT_NE(problems[0].message.find("broken.jsonl:1: error: expected one "
                                     "JSON object per line"),
            std::string::npos)
      << problems[0].message;
  ModelConfig missing = configOf(textModel("indexed", "nowhere"));
  problems = resolveDataPaths(missing, dir);
  ASSERT_EQ(problems.size(), 1u);
  EXPECT_NE(problems[0].message.find("tried '" + dir + "/nowhere.idx'"),
            std::string::npos)
      << problems[0].message;
  std::filesystem::remove_all(dir);
}

} // namespace
