//===- FuzzFeatureFile.cpp - Binary feature rows and loss masks -----------===//
//
// Any bytes as a PREFIX.<encoder>.feat file (docs/data.md, binary
// features) of 4-value rows for 3 sequences, as a PREFIX.mask of 16
// tokens, and as a PREFIX.<encoder>.items of 6 rows: opening each returns
// the file or an error naming it; reading every sequence's rows (every
// mask byte, the items of rows [0, 2) and [2, 6)) returns values or throws
// a located error, never reads outside the file.

#include "FuzzInput.h"

#include "runtime/data/FeatureFile.h"

#include <stdexcept>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo::exec;
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  mimo::fuzz::TempFile file(bytes, ".feat");
  std::string error;
  std::unique_ptr<FeatureFile> features =
      FeatureFile::open(file.path, 4, 3, error);
  mimo::fuzz::require((features != nullptr) == error.empty(),
                      "either the rows or an error");
  if (features)
    for (int64_t s = 0; s < 3; ++s) {
      std::vector<float> rows;
      try {
        features->read(s, rows);
        mimo::fuzz::require(static_cast<int64_t>(rows.size()) ==
                                features->rowsOf(s) * 4,
                            "whole rows");
      } catch (const std::runtime_error &) {
      }
    }
  error.clear();
  std::unique_ptr<MaskFile> mask = MaskFile::open(file.path, 16, error);
  mimo::fuzz::require((mask != nullptr) == error.empty(),
                      "either the mask or an error");
  if (mask)
    for (int64_t t = 0; t < 16; ++t) {
      try {
        (void)mask->target(t);
      } catch (const std::runtime_error &) {
      }
    }
  error.clear();
  std::unique_ptr<ItemFile> items = ItemFile::open(file.path, 6, error);
  mimo::fuzz::require((items != nullptr) == error.empty(),
                      "either the items or an error");
  if (items)
    for (auto [begin, end] : {std::pair{0, 2}, std::pair{2, 6}}) {
      std::vector<int64_t> counts;
      try {
        items->items(begin, end, counts);
        int64_t sum = 0;
        for (int64_t n : counts)
          sum += n;
        mimo::fuzz::require(sum == end - begin, "every row in an item");
      } catch (const std::runtime_error &) {
      }
    }
  return 0;
}
