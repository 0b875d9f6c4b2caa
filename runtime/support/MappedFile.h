//===- MappedFile.h - A read-only memory map of a whole file ----*- C++ -*-===//
//
// The data readers' (data/IndexedData, data/FeatureFile) view of a file:
// mapped once, read through the page cache, nothing copied; a FIFO or a
// device is refused first (InputFile.h), as is a file that cannot be
// mapped.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H
#define MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H

#include "runtime/support/InputFile.h"

#include <cstdint>
#include <string>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mimo {

class MappedFile {
public:
  MappedFile() = default;
  MappedFile(const MappedFile &) = delete;
  MappedFile &operator=(const MappedFile &) = delete;
  ~MappedFile() {
    if (data)
      ::munmap(data, static_cast<size_t>(size));
  }
  /// Maps `path` (`what` names it in errors: "the token data"); false with
  /// `error` ("PATH: error: ...").
  bool open(const std::string &path, const std::string &what,
            std::string &error) {
    error = inputFileProblem(path, what);
    if (!error.empty())
      return false;
    int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
    if (fd < 0) {
      error = path + ": error: cannot open it";
      return false;
    }
    struct stat st = {};
    if (::fstat(fd, &st) != 0) {
      ::close(fd);
      error = path + ": error: cannot read its size";
      return false;
    }
    size = st.st_size;
    void *p = size > 0 ? ::mmap(nullptr, static_cast<size_t>(size), PROT_READ,
                                MAP_PRIVATE, fd, 0)
                       : nullptr;
    ::close(fd);
    if (p == MAP_FAILED) {
      size = 0;
      error = path + ": error: cannot map it into memory";
      return false;
    }
    data = p;
    return true;
  }
  const unsigned char *bytes() const {
    return static_cast<const unsigned char *>(data);
  }
  int64_t size = 0;

private:
  void *data = nullptr;
};

} // namespace mimo

#endif // MIMO_RUNTIME_SUPPORT_MAPPEDFILE_H
