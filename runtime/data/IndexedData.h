//===- IndexedData.h - Megatron's mmap indexed dataset ---------*- C++ -*-===//
//
// docs/runtime.md `data.source: "indexed"`: text from PREFIX.bin and PREFIX.idx
// as Megatron's preprocess_data.py writes them (docs/data.md has the layout):
//   .idx  "MMIDIDX\0\0", u64 version 1, u8 dtype code, u64 sequence count
//         S, u64 document-index count D, i32 lengths[S], i64 byte
//         pointers[S], i64 document indices[D] (then, multimodal, i8
//         modes[S]); little-endian.
//   .bin  the tokens of every sequence, back to back, in that dtype.
// With data.samples "sequences" (the default with encoders) each sequence
// is a sample, with its rows of PREFIX.<encoder>.feat; else mimo reads the
// tokens as one stream (sequences in index order) and cuts
// it into samples of seq_length tokens: in file order, sample k is stream
// tokens [k · L, (k + 1) · L) (mod the stream's length: an epoch is as
// many samples as the stream has tokens, so the windows wrap around);
// with data.shuffle, the stream's whole windows (data/Order.h permutes
// them).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DATA_INDEXEDDATA_H
#define MIMO_RUNTIME_DATA_INDEXEDDATA_H

#include "runtime/data/Data.h"
#include "runtime/data/FeatureFile.h"

#include <cstdint>
#include <memory>
#include <optional>
#include <string>
#include <vector>

namespace mimo::exec {

/// The index of one dataset, validated against its .bin file.
struct IndexedDataset {
  int dtypeCode = 0;      // Megatron's code: 1 u8, 3 i16, 4 i32, 5 i64, 8 u16
  int64_t tokenBytes = 0; // bytes per token
  std::vector<int32_t> lengths;
  std::vector<int64_t> pointers;
  std::vector<int64_t> documents;
  int64_t totalTokens = 0;
  std::string binPath, idxPath;
};

/// What may sit beside an indexed dataset (data/FeatureFile.h): the loss
/// mask PREFIX.mask (optional), each encoder's PREFIX.<encoder>.feat
/// (required with encoders, in model order) and PREFIX.<encoder>.items
/// (optional).
struct IndexedExtras {
  std::unique_ptr<MaskFile> mask;
  std::vector<std::unique_ptr<FeatureFile>> features;
  /// Per encoder: PREFIX.<encoder>.items, or null (one item a sequence).
  std::vector<std::unique_ptr<ItemFile>> items;
};
std::optional<IndexedExtras> openIndexedExtras(const ModelConfig &config,
                                               const std::string &prefix,
                                               const IndexedDataset &dataset,
                                               std::string &error);

/// Reads and checks PREFIX.idx against PREFIX.bin; on failure returns
/// false with `error` naming the file and what is wrong.
bool readIndexedDataset(const std::string &prefix, IndexedDataset &out,
                        std::string &error);

/// Writes PREFIX.bin and PREFIX.idx the way Megatron does (one document
/// per sequence; dtype code 8 = uint16 or 4 = int32): for tests and tools.
bool writeIndexedDataset(const std::string &prefix,
                         const std::vector<std::vector<int64_t>> &sequences,
                         int dtypeCode, std::string &error);

/// The samples of an indexed dataset (paths tried as written, then
/// relative to `baseDir`): windows of seq_length tokens of the stream.
std::unique_ptr<Dataset>
loadIndexed(const ModelConfig &config, const std::string &written,
            const std::string &pointer, const std::string &baseDir,
            const std::string &planFile, std::vector<std::string> &errors);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_DATA_INDEXEDDATA_H
