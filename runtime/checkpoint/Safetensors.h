//===- Safetensors.h - The safetensors file format ------------*- C++ -*-===//
//
// docs/checkpoints.md checkpoint files, in the format standard readers load:
//   8 bytes   little-endian u64 N, the header's length
//   N bytes   a JSON object: "__metadata__" (string -> string) and, per
//             tensor, {"dtype", "shape", "data_offsets": [begin, end]},
//             offsets relative to the data, which follows the header
//   the data  every tensor's bytes, little-endian, row-major
// The writer pads the header with spaces to a multiple of 8 bytes (so the
// data is 8-byte aligned) and lays tensors out in the order given. The
// reader checks everything a corrupt or hostile file could get wrong
// before a byte of data is read: sizes, nesting, dtypes, shapes, offsets
// that tile the data exactly, a file that is long enough.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_SAFETENSORS_H
#define MIMO_RUNTIME_CHECKPOINT_SAFETENSORS_H

#include <cstdint>
#include <map>
#include <optional>
#include <string>
#include <string_view>
#include <vector>

namespace mimo::safetensors {

struct TensorEntry {
  std::string name;
  std::string dtype = "F32";
  std::vector<int64_t> shape;
  /// Byte range within the data.
  int64_t begin = 0, end = 0;
};

struct Header {
  std::vector<TensorEntry> tensors; // in data order
  std::map<std::string, std::string> metadata;
  /// Where the data starts in the file (8 + N), and its length.
  int64_t dataOffset = 0, dataBytes = 0;
  const TensorEntry *find(const std::string &name) const;
};

/// Bytes per element of a safetensors dtype name (0 if unknown).
int64_t dtypeSize(const std::string &dtype);

/// The header bytes (length prefix included) of a file holding `tensors`
/// (their name, dtype and shape; offsets are assigned here, in order) and
/// `metadata`; `header` gets the offsets.
std::string encodeHeader(Header &header);

/// Reads and checks the header of the file at `path`; on failure returns
/// nullopt with `error` ("PATH: error: ...") naming the problem and, where
/// one is at fault, the tensor.
std::optional<Header> readHeader(const std::string &path, std::string &error);

/// Validates header JSON `text` of a file whose data section (after the
/// header) holds `dataBytes`; errors name `path`.
std::optional<Header> parseHeader(std::string_view text, int64_t dataBytes,
                                  const std::string &path, std::string &error);

} // namespace mimo::safetensors

#endif // MIMO_RUNTIME_CHECKPOINT_SAFETENSORS_H
