//===- CompileErrorsTest.cpp - docs/limits.md model errors, end to end ----===//
//
// One case per model-side error of docs/limits.md: a mutation of the fan-in
// example, compiled by the same driver as mimoc, must fail with a diagnostic at
// the expected JSON pointer that says what was expected and how to fix it.
//
//===----------------------------------------------------------------------===//

#include "TestModels.h"

#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include <gtest/gtest.h>

using namespace mimo;
using json = nlohmann::json;

namespace {

/// A model.json edit: set (or, with a null value, erase) `pointer`.
struct Edit {
  std::string pointer;
  json value;
};

struct ErrorCase {
  const char *name;
  std::vector<Edit> edits;
  const char *expectedPointer;
  const char *expectedMessage;
  const char *expectedNotePointer = nullptr;
};

CompileResult compileEdited(const std::vector<Edit> &edits,
                            std::string raw = {}) {
  json document = test::baseModel();
  for (const Edit &edit : edits) {
    json::json_pointer pointer(edit.pointer);
    if (edit.value.is_null())
      document[pointer.parent_pointer()].erase(pointer.back());
    else
      document[pointer] = edit.value;
  }
  static mlir::MLIRContext *context = new mlir::MLIRContext();
  return compileModel(*context, "model.json",
                      raw.empty() ? document.dump(2) : raw);
}

class CompileErrorTest : public testing::TestWithParam<ErrorCase> {};

TEST_P(CompileErrorTest, FailsAtPointerWithFix) {
  const ErrorCase &c = GetParam();
  CompileResult result = compileEdited(c.edits);
  ASSERT_FALSE(result.succeeded());
  ASSERT_FALSE(result.module);
  ASSERT_FALSE(result.diagnostics.empty());
  const Diagnostic &first = result.diagnostics.front();
  EXPECT_FALSE(first.note);
  EXPECT_EQ(first.pointer, c.expectedPointer) << first.message;
  EXPECT_NE(first.message.find(c.expectedMessage), std::string::npos)
      << first.message;
  if (c.expectedNotePointer) {
    ASSERT_GE(result.diagnostics.size(), 2u);
    EXPECT_TRUE(result.diagnostics[1].note);
    EXPECT_EQ(result.diagnostics[1].pointer, c.expectedNotePointer);
  }
  std::string line = formatDiagnostic("model.json", first);
  EXPECT_EQ(
      line.rfind(std::string("model.json: ") + c.expectedPointer + ": error: ",
                 0),
      0u)
      << line;
}

INSTANTIATE_TEST_SUITE_P(
    Spec9, CompileErrorTest,
    testing::Values(
        ErrorCase{"missing_data_file_lists_every_path_tried",
                  {{"/data", {{"source", "jsonl"}, {"path", "missing.jsonl"}}}},
                  "/data/path",
                  "cannot find the jsonl file 'missing.jsonl' (tried "},
        ErrorCase{"training_file_checked_before_the_eval_file",
                  {{"/data",
                    {{"source", "jsonl"},
                     {"path", "x.jsonl"},
                     {"eval_path", "nowhere.jsonl"}}}},
                  "/data/path",
                  "cannot find the jsonl file 'x.jsonl'"},
        ErrorCase{"unknown_key_with_suggestion",
                  {{"/batch/micro_batch", 8}},
                  "/batch/micro_batch",
                  "did you mean 'micro_batch_size'?"},
        ErrorCase{"missing_key",
                  {{"/batch/seq_length", nullptr}},
                  "/batch/seq_length",
                  "missing required key 'seq_length'"},
        ErrorCase{"wrong_type",
                  {{"/modules/1/parallel/tp", "2"}},
                  "/modules/1/parallel/tp",
                  "expected a positive integer <= 1048576 (tensor-parallel "
                  "size), found the string \"2\""},
        ErrorCase{"non_positive_size",
                  {{"/modules/0/parallel/dp", 0}},
                  "/modules/0/parallel/dp",
                  "expected a positive integer <= 1048576 (data-parallel "
                  "size), found 0; use 1 or more"},
        ErrorCase{"span_overlap",
                  {{"/modules/1/parallel/rank_offset", 2}},
                  "/modules/1/parallel/rank_offset",
                  "spans ranks [2, 6), which overlaps encoder 'images' at "
                  "ranks [0, 4)",
                  "/modules/0/parallel/rank_offset"},
        ErrorCase{"span_gap",
                  {{"/modules/1/parallel/rank_offset", 6}},
                  "/modules/1/parallel/rank_offset",
                  "no module holds ranks [4, 6)",
                  "/modules/0/parallel/rank_offset"},
        ErrorCase{"gap_at_rank_zero",
                  {{"/modules/0/parallel/rank_offset", 8}},
                  "/modules/1/parallel/rank_offset",
                  "no module holds ranks [0, 4)"},
        ErrorCase{"world_size_mismatch",
                  {{"/world_size", 16}},
                  "/world_size",
                  "world_size 16 does not match the 8 ranks"},
        ErrorCase{"missing_language",
                  {{"/modules/1/kind", "encoder"},
                   {"/modules/1/special_token_id", 1001},
                   {"/modules/1/arch", json{{"feature_dim", 8},
                                            {"hidden_size", 64},
                                            {"num_layers", 2},
                                            {"num_heads", 4},
                                            {"ffn_hidden_size", 128}}},
                   {"/modules/1/parallel/sequence_parallel", nullptr}},
                  "/modules",
                  "expected exactly one module of kind \"language\", found "
                  "none"},
        ErrorCase{"duplicate_language",
                  {{"/modules/2", json{{"name", "language2"},
                                       {"kind", "language"},
                                       {"arch",
                                        {{"vocab_size", 64},
                                         {"hidden_size", 64},
                                         {"num_layers", 2},
                                         {"num_heads", 4},
                                         {"ffn_hidden_size", 128}}}}}},
                  "/modules/2/kind",
                  "found a second one ('language2'"},
        ErrorCase{"duplicate_special_token_id",
                  {{"/modules/2", json{{"name", "audio"},
                                       {"kind", "encoder"},
                                       {"special_token_id", 1000},
                                       {"arch",
                                        {{"feature_dim", 8},
                                         {"hidden_size", 64},
                                         {"num_layers", 2},
                                         {"num_heads", 4},
                                         {"ffn_hidden_size", 128}}},
                                       {"parallel", {{"rank_offset", 8}}}}}},
                  "/modules/2/special_token_id",
                  "which encoder 'images' also uses"},
        ErrorCase{"heads_not_divisible_by_tp",
                  {{"/modules/1/parallel/tp", 8},
                   {"/modules/0/parallel/dp", 16},
                   {"/batch/micro_batch_size", 16},
                   {"/modules/1/arch/vocab_size", 1024},
                   {"/modules/1/arch/ffn_hidden_size", 512}},
                  "/modules/1/parallel/tp",
                  "num_heads 4 of language module 'language' is not divisible "
                  "by tp 8"},
        ErrorCase{"ffn_not_divisible_by_tp",
                  {{"/modules/1/arch/ffn_hidden_size", 511}},
                  "/modules/1/parallel/tp",
                  "ffn_hidden_size 511 of language module 'language' is not "
                  "divisible by tp 2"},
        ErrorCase{"vocab_not_divisible_by_tp",
                  {{"/modules/1/arch/vocab_size", 1025}},
                  "/modules/1/parallel/tp",
                  "vocab_size 1025 of language module 'language' is not "
                  "divisible by tp 2"},
        ErrorCase{"layers_not_divisible_by_pp",
                  {{"/modules/1/arch/num_layers", 3}},
                  "/modules/1/parallel/pp",
                  "num_layers 3 of language module 'language' is not "
                  "divisible by pp 2"},
        ErrorCase{"encoder_heads_not_divisible_by_tp",
                  {{"/modules/0/parallel/tp", 8},
                   {"/modules/0/parallel/dp", 1},
                   {"/modules/0/arch/ffn_hidden_size", 256},
                   {"/modules/1/parallel/rank_offset", 8}},
                  "/modules/0/parallel/tp",
                  "num_heads 4 of encoder 'images' is not divisible by tp 8"},
        ErrorCase{"micro_batch_not_divisible_by_dp",
                  {{"/batch/micro_batch_size", 6}},
                  "/modules/0/parallel/dp",
                  "micro_batch_size 6 is not divisible by dp 4 of encoder "
                  "'images'; use a micro_batch_size that is a multiple of 4",
                  "/batch/micro_batch_size"},
        ErrorCase{"bridge_lanes_do_not_divide",
                  {{"/modules/0/parallel/dp", 3},
                   {"/modules/1/parallel/dp", 2},
                   {"/modules/1/parallel/rank_offset", 3},
                   {"/batch/micro_batch_size", 6}},
                  "/modules/0/parallel/dp",
                  "data-parallel lanes of encoder 'images' (dp 3) and language "
                  "module 'language' (dp 2) must divide one another",
                  "/modules/1/parallel/dp"},
        ErrorCase{"sequence_not_divisible_for_cp_sp",
                  {{"/modules/1/parallel/cp", 2},
                   {"/modules/0/parallel/dp", 8},
                   {"/modules/1/parallel/rank_offset", 8},
                   {"/batch/seq_length", 100}},
                  "/batch/seq_length",
                  "seq_length 100 is not divisible by 8 (2*cp*tp with cp 2 "
                  "and tp 2)",
                  "/modules/1/parallel"},
        ErrorCase{"sequence_not_divisible_for_sp",
                  {{"/batch/seq_length", 127}},
                  "/batch/seq_length",
                  "seq_length 127 is not divisible by 2 (tp 2 with sequence "
                  "parallelism)"},
        ErrorCase{"dense_mask_with_cp",
                  {{"/modules/1/parallel/cp", 2},
                   {"/modules/0/parallel/dp", 8},
                   {"/modules/1/parallel/rank_offset", 8},
                   {"/batch/attention_mask", "dense"}},
                  "/batch/attention_mask",
                  "attention_mask \"dense\" cannot be used with cp 2",
                  "/modules/1/parallel/cp"},
        ErrorCase{
            "encoder_cp",
            {{"/modules/0/parallel/cp", 2}, {"/modules/0/parallel/dp", 2}},
            "/modules/0/parallel/cp",
            "encoder 'images' must have cp 1"},
        ErrorCase{"colocated_encoder_pp",
                  {{"/modules/0/parallel", {{"tp", 2}, {"pp", 2}, {"dp", 1}}},
                   {"/modules/1/parallel/rank_offset", 0}},
                  "/modules/0/parallel/pp",
                  "encoder 'images' must have pp 1 in a colocated layout"}),
    [](const testing::TestParamInfo<ErrorCase> &info) {
      return std::string(info.param.name);
    });

TEST(CompileErrorTest, SyntaxErrorHasLineColumn) {
  CompileResult result = compileEdited({}, "{\n  \"version\": 1,\n  oops\n}");
  ASSERT_EQ(result.diagnostics.size(), 1u);
  EXPECT_TRUE(result.diagnostics[0].syntax);
  EXPECT_EQ(result.diagnostics[0].position.line, 3);
  EXPECT_EQ(formatDiagnostic("model.json", result.diagnostics[0])
                .rfind("model.json:3:3: error: invalid JSON", 0),
            0u);
}

TEST(CompileErrorTest, ValidModelCompiles) {
  CompileResult result = compileEdited({});
  ASSERT_TRUE(result.succeeded());
  EXPECT_TRUE(result.config);
}

} // namespace
