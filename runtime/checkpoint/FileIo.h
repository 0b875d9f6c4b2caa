//===- FileIo.h - Positioned file reads and writes --------------*- C++ -*-===//
//
// An open file descriptor with whole pread/pwrite (retried on EINTR and
// short counts), shared by the checkpoint writer and reader
// (Checkpoint.cpp) and the Hugging Face exporter (HfExport.cpp). Failures
// throw std::runtime_error naming the file and the system's reason.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_CHECKPOINT_FILEIO_H
#define MIMO_RUNTIME_CHECKPOINT_FILEIO_H

#include <cerrno>
#include <cstdint>
#include <cstring>
#include <stdexcept>
#include <string>

#include <fcntl.h>
#include <unistd.h>

namespace mimo::exec {

[[noreturn]] inline void systemError(const std::string &what,
                                     const std::string &path) {
  throw std::runtime_error("checkpoint: cannot " + what + " '" + path +
                           "': " + std::strerror(errno));
}

/// An open file descriptor, closed on scope exit.
class File {
public:
  File(const std::string &path, int flags) : path(path) {
    fd = ::open(path.c_str(), flags, 0644);
    if (fd < 0)
      systemError("open", path);
  }
  ~File() {
    if (fd >= 0)
      ::close(fd);
  }
  File(const File &) = delete;
  File &operator=(const File &) = delete;
  void writeAt(const void *data, int64_t bytes, int64_t offset) {
    const char *p = static_cast<const char *>(data);
    while (bytes > 0) {
      ssize_t n = ::pwrite(fd, p, static_cast<size_t>(bytes), offset);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        systemError("write", path);
      p += n;
      bytes -= n;
      offset += n;
    }
  }
  void readAt(void *data, int64_t bytes, int64_t offset) {
    char *p = static_cast<char *>(data);
    while (bytes > 0) {
      ssize_t n = ::pread(fd, p, static_cast<size_t>(bytes), offset);
      if (n < 0 && errno == EINTR)
        continue;
      if (n <= 0)
        systemError("read", path);
      p += n;
      bytes -= n;
      offset += n;
    }
  }
  void sync() {
    if (::fsync(fd) != 0)
      systemError("sync", path);
  }
  void resize(int64_t bytes) {
    if (::ftruncate(fd, bytes) != 0)
      systemError("size", path);
  }

  const std::string &name() const { return path; }

private:
  std::string path;
  int fd = -1;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_CHECKPOINT_FILEIO_H
