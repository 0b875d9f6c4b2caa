//===- FeatureFile.h - Binary feature rows and loss masks -------*- C++ -*-===//
//
// docs/data.md "Binary features and masks": beside an indexed dataset
// PREFIX.bin/.idx,
//   PREFIX.<encoder>.feat  "MIMOFEAT", u64 version 1, u32 dtype (1 fp32,
//                          2 bf16), u32 0, u64 feature_dim, u64 sequences
//                          (the .idx's), u64 offsets[sequences + 1]
//                          (row of each sequence's first feature row;
//                          offsets[0] = 0, non-decreasing), then
//                          offsets[sequences] rows of feature_dim values;
//   PREFIX.<encoder>.items "MIMOITEM", u64 version 1, u64 rows (the
//                          .feat's), then one byte per feature row: 1
//                          where the row begins an item (an image, a
//                          tile, a frame: the encoder runs each as its own
//                          sequence), 0 where it continues one; optional,
//                          without it a sequence's rows are one item;
//   PREFIX.mask            "MIMOMASK", u64 version 1, u64 tokens (the
//                          .bin's), then one byte per token: 1 a target,
//                          0 not (docs/data.md loss_mask);
// little-endian, read through a memory map: opening checks the header,
// the sizes and the offsets (no row is read), a sample reads only its
// rows.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DATA_FEATUREFILE_H
#define MIMO_RUNTIME_DATA_FEATUREFILE_H

#include "runtime/support/MappedFile.h"

#include <cstdint>
#include <memory>
#include <string>
#include <vector>

namespace mimo::exec {

class FeatureFile {
public:
  /// Opens and checks `path` against the encoder's feature_dim and the
  /// dataset's sequence count; nullptr with `error` naming the file.
  static std::unique_ptr<FeatureFile> open(const std::string &path,
                                           int64_t featureDim,
                                           int64_t sequences,
                                           std::string &error);
  /// The rows of sequence `s`, appended to `out` as fp32.
  int64_t rowsOf(int64_t s) const;
  /// The file row of sequence `s`'s first row.
  int64_t firstRow(int64_t s) const { return static_cast<int64_t>(offset(s)); }
  /// Every sequence's rows.
  int64_t totalRows() const { return firstRow(count); }
  void read(int64_t s, std::vector<float> &out) const;
  const std::string &path() const { return file; }
  int64_t bytes() const { return map.size; }
  /// MappedFile::checkIntact of the file.
  void checkIntact() const { map.checkIntact(); }

private:
  std::string file;
  MappedFile map;
  int64_t dim = 0, count = 0, valueBytes = 4, dataOffset = 0;
  uint32_t dtype = 1;
  uint64_t offset(int64_t i) const;
};

class MaskFile {
public:
  static std::unique_ptr<MaskFile> open(const std::string &path, int64_t tokens,
                                        std::string &error);
  /// Whether stream token `t` is a target (a byte other than 0 or 1 is an
  /// error naming the file and the token).
  bool target(int64_t t) const;
  const std::string &path() const { return file; }
  void checkIntact() const { map.checkIntact(); }

private:
  std::string file;
  MappedFile map;
};

class ItemFile {
public:
  /// Opens and checks `path` against the feature file's `rows`; nullptr
  /// with `error` naming the file.
  static std::unique_ptr<ItemFile> open(const std::string &path, int64_t rows,
                                        std::string &error);
  /// The row counts of the items of file rows [begin, end), appended to
  /// `out`; a byte other than 0 or 1, or a first row that does not begin
  /// an item, is an error naming the file and the row.
  void items(int64_t begin, int64_t end, std::vector<int64_t> &out) const;
  const std::string &path() const { return file; }
  void checkIntact() const { map.checkIntact(); }

private:
  std::string file;
  MappedFile map;
};

/// Writers, for tests and tools (tools/mimo-prep writes the same bytes).
/// `rows[s]` holds sequence s's rows, feature_dim values each.
bool writeFeatureFile(const std::string &path, bool bf16, int64_t featureDim,
                      const std::vector<std::vector<float>> &rows,
                      std::string &error);
bool writeMaskFile(const std::string &path, const std::vector<uint8_t> &mask,
                   std::string &error);
/// `starts`: one byte per feature row, 1 where an item begins.
bool writeItemFile(const std::string &path, const std::vector<uint8_t> &starts,
                   std::string &error);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_DATA_FEATUREFILE_H
