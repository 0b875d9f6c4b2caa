//===- MappedFile.h - A read-only memory map of a whole file ----*- C++ -*-===//
//
// The readers' (data/IndexedData, data/FeatureFile, jsonl data, Hugging
// Face shards) view of a file: mapped once, read through the page cache,
// nothing copied; a FIFO or a device is refused first (InputFile.h), as is
// a file that cannot be mapped.
//
// A mapped file that shrinks while it is read (truncated, or rewritten in
// place by another program) would kill the process with SIGBUS at the
// first read past its new end. Instead, a process-wide SIGBUS handler
// finds the mapping the address belongs to, maps zeros over the page and
// marks the mapping damaged: the read goes on (with zeros), and the reader
// asks checkIntact() after each record, which throws naming the file; it
// also compares the file's size and modification time with those it had
// when mapped (a shrink within the last page reads zeros without a
// SIGBUS; a rewrite of the same size changes the time). A SIGBUS outside
// every mapping keeps its default action.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H
#define MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H

#include "runtime/support/InputFile.h"

#include <cstdint>
#include <string>

namespace mimo {

class MappedFile {
public:
  MappedFile() = default;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile();
  /// Maps `path` (`what` names it in errors: "the token data"); false with
  /// `error` ("PATH: error: ...").
  bool open(const std::string &path, const std::string &what,
            std::string &error);
  const unsigned char *bytes() const {
    return static_cast<const unsigned char *>(data);
  }
  /// Whether the file changed under the mapping since it was opened: a
  /// read past its new end found zeros, or its size or modification time
  /// is not what it was.
  bool damaged() const;
  /// Throws std::runtime_error naming the file when damaged(): what was
  /// read since may not be its bytes.
  void checkIntact() const;
  int64_t size = 0;

private:
  void *data = nullptr;
  int slot = -1; // in the handler's table
  int fd = -1;   // kept open to ask its size and time
  int64_t modifiedNs = 0;
  std::string path;
};

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H
