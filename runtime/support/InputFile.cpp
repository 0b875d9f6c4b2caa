//===- InputFile.cpp - Reading an input file that may be hostile ----------===//

#include "runtime/support/InputFile.h"

#include <algorithm>
#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#if defined(__GLIBC__)
#include <malloc.h>
#endif
#include <sys/stat.h>
#include <unistd.h>

namespace mimo {

namespace {

/// Opens `path` for reading without blocking (a FIFO's open waits for a
/// writer otherwise) and checks it is a regular file: the descriptor, or
/// -1 with `error` set.
int openRegular(const std::string &path, const std::string &what,
                std::string &error, int64_t *size) {
  int fd = ::open(path.c_str(), O_RDONLY | O_NONBLOCK | O_NOCTTY | O_CLOEXEC);
  if (fd < 0) {
    error = path + ": error: cannot open " + what + ": " +
            std::strerror(errno) + "; check the path";
    return -1;
  }
  struct stat st{};
  if (::fstat(fd, &st) != 0 || !S_ISREG(st.st_mode)) {
    const char *kind = S_ISFIFO(st.st_mode)   ? "a FIFO"
                       : S_ISDIR(st.st_mode)  ? "a directory"
                       : S_ISCHR(st.st_mode)  ? "a character device"
                       : S_ISBLK(st.st_mode)  ? "a block device"
                       : S_ISSOCK(st.st_mode) ? "a socket"
                                              : "not a regular file";
    error = path + ": error: " + what + " is " + kind +
            ", not a regular file; give the file itself (save what a pipe "
            "or device produces to a file first)";
    ::close(fd);
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  if (size)
    *size = static_cast<int64_t>(st.st_size);
  return fd;
}

std::string bytesText(int64_t bytes) {
  char text[48];
  if (bytes >= (int64_t(1) << 20))
    std::snprintf(text, sizeof text, "%.1f MiB",
                  static_cast<double>(bytes) / double(1 << 20));
  else
    std::snprintf(text, sizeof text, "%lld bytes",
                  static_cast<long long>(bytes));
  return text;
}

} // namespace

std::string inputFileProblem(const std::string &path, const std::string &what) {
  std::string error;
  int fd = openRegular(path, what, error, nullptr);
  if (fd >= 0)
    ::close(fd);
  return error;
}

std::optional<std::string> readInputFile(const std::string &path,
                                         int64_t maxBytes,
                                         const std::string &what,
                                         std::string &error) {
  int64_t size = 0;
  int fd = openRegular(path, what, error, &size);
  if (fd < 0)
    return std::nullopt;
  if (size > maxBytes) {
    ::close(fd);
    error = path + ": error: " + what + " is " + bytesText(size) +
            ", more than the " + bytesText(maxBytes) +
            " such a file can be; is it the right file?";
    return std::nullopt;
  }
  std::string text;
  // The size may change while it is read: never past the limit.
  text.resize(static_cast<size_t>(size));
  size_t got = 0;
  for (;;) {
    if (got == text.size()) {
      if (static_cast<int64_t>(text.size()) >= maxBytes + 1)
        break;
      text.resize(std::min<size_t>(text.size() + 65536,
                                   static_cast<size_t>(maxBytes + 1)));
    }
    ssize_t n = ::read(fd, text.data() + got, text.size() - got);
    if (n < 0 && errno == EINTR)
      continue;
    if (n < 0) {
      error =
          path + ": error: cannot read " + what + ": " + std::strerror(errno);
      ::close(fd);
      return std::nullopt;
    }
    if (n == 0)
      break;
    got += static_cast<size_t>(n);
  }
  ::close(fd);
  text.resize(got);
  if (static_cast<int64_t>(got) > maxBytes) {
    error = path + ": error: " + what + " grew past " + bytesText(maxBytes) +
            " while it was read";
    return std::nullopt;
  }
  return text;
}

void releaseFreedMemory() {
#if defined(__GLIBC__)
  malloc_trim(0);
#endif
}

} // namespace mimo
