//===- OutputFile.cpp - Writing an output file without harm ---------------===//

#include "runtime/support/OutputFile.h"

#include <cerrno>
#include <cstdio>
#include <cstring>
#include <fcntl.h>
#include <filesystem>
#include <sys/stat.h>
#include <unistd.h>

namespace mimo {

namespace fs = std::filesystem;

namespace {

std::string quoted(const std::string &path) { return "'" + path + "'"; }

bool startsWith(const std::string &text, const char *prefix) {
  return text.rfind(prefix, 0) == 0;
}

/// Whether `path` or a link it leads through is in /dev or /proc (a
/// device, or another name of an open descriptor such as /dev/stdout).
bool throughDevOrProc(const std::string &path) {
  std::error_code ec;
  fs::path p = fs::absolute(path, ec);
  if (ec)
    return false;
  for (int hop = 0; hop < 40; ++hop) {
    const std::string text = p.lexically_normal().string();
    if (startsWith(text, "/dev/") || startsWith(text, "/proc/"))
      return true;
    if (!fs::is_symlink(p, ec))
      return false;
    fs::path next = fs::read_symlink(p, ec);
    if (ec)
      return false;
    p = next.is_absolute() ? next : p.parent_path() / next;
  }
  return false;
}

/// Writes all of `text` to `fd`; false on a failed write.
bool writeAll(int fd, const std::string &text) {
  const char *data = text.data();
  size_t left = text.size();
  while (left > 0) {
    ssize_t n = ::write(fd, data, left);
    if (n < 0 && errno == EINTR)
      continue;
    if (n <= 0)
      return false;
    data += n;
    left -= static_cast<size_t>(n);
  }
  return true;
}

/// Opens a non-regular output where it is. A FIFO without a reader is
/// refused at once (it would block forever otherwise).
int openInPlace(const std::string &path, std::string &problem) {
  int fd = ::open(path.c_str(),
                  O_WRONLY | O_APPEND | O_NOCTTY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    problem = path + ": error: cannot write the output: " +
              (errno == ENXIO ? std::string("it is a FIFO that nothing reads; "
                                            "start its reader first, or name "
                                            "a file")
                              : std::string(std::strerror(errno)));
    return -1;
  }
  int flags = ::fcntl(fd, F_GETFL);
  if (flags >= 0)
    (void)::fcntl(fd, F_SETFL, flags & ~O_NONBLOCK);
  return fd;
}

} // namespace

std::optional<OutputTarget> checkOutput(const std::string &path,
                                        const std::vector<std::string> &inputs,
                                        std::string &problem) {
  if (path.empty()) {
    problem = "error: an empty output path; name a file";
    return std::nullopt;
  }
  std::error_code ec;
  OutputTarget out;
  const bool special = throughDevOrProc(path);
  fs::file_status status = fs::status(path, ec); // follows links
  const bool exists = !ec && fs::exists(status);
  if (exists && fs::is_directory(status)) {
    problem = path + ": error: the output is a directory; name a file in it";
    return std::nullopt;
  }
  if (exists) {
    out.target = fs::canonical(path, ec).string();
    if (ec)
      out.target = path;
  } else {
    // A dangling link: the file it names is created.
    fs::path p = path;
    for (int hop = 0; hop < 40 && fs::is_symlink(p, ec); ++hop) {
      fs::path next = fs::read_symlink(p, ec);
      if (ec)
        break;
      p = next.is_absolute() ? next : p.parent_path() / next;
    }
    out.target = p.string();
  }
  if (special || (exists && !fs::is_regular_file(status))) {
    out.mode = OutputMode::InPlace;
    out.target = path; // opened by its own name (/dev/stdout is this one's)
    return out;
  }
  // A regular file (or a new one): its folder takes the temporary file.
  fs::path folder = fs::path(out.target).parent_path();
  if (folder.empty())
    folder = ".";
  if (!fs::is_directory(folder, ec)) {
    problem = path + ": error: the folder " + quoted(folder.string()) +
              " does not exist; create it or name another";
    return std::nullopt;
  }
  if (::access(folder.c_str(), W_OK | X_OK) != 0) {
    problem = path + ": error: the folder " + quoted(folder.string()) +
              " cannot be written (" + std::strerror(errno) +
              "); name a writable one";
    return std::nullopt;
  }
  if (exists)
    for (const std::string &input : inputs) {
      if (input.empty())
        continue;
      std::error_code same;
      if (fs::equivalent(input, out.target, same) && !same) {
        problem = path + ": error: the output is the input " + quoted(input) +
                  ", which writing it would destroy; name another file";
        return std::nullopt;
      }
    }
  return out;
}

bool writeOutput(const std::string &path, const std::string &text,
                 std::string &problem, const std::vector<std::string> &inputs) {
  std::optional<OutputTarget> out = checkOutput(path, inputs, problem);
  if (!out)
    return false;
  if (out->mode == OutputMode::InPlace) {
    std::fflush(stdout);
    int fd = openInPlace(out->target, problem);
    if (fd < 0)
      return false;
    bool ok = writeAll(fd, text);
    int saved = errno;
    ::close(fd);
    if (!ok)
      problem =
          path + ": error: cannot write the output: " + std::strerror(saved);
    return ok;
  }
  // mode: the existing file's, else what a new file gets (umask applied).
  struct stat st{};
  mode_t mode;
  if (::stat(out->target.c_str(), &st) == 0) {
    mode = st.st_mode & 07777;
  } else {
    mode_t mask = ::umask(0);
    ::umask(mask);
    mode = 0666 & ~mask;
  }
  std::string temporary = out->target + ".XXXXXX";
  int fd = ::mkstemp(temporary.data());
  if (fd < 0) {
    problem = path + ": error: cannot create a temporary file beside it: " +
              std::strerror(errno);
    return false;
  }
  bool ok = writeAll(fd, text) && ::fchmod(fd, mode) == 0 && ::fsync(fd) == 0;
  int saved = errno;
  ok = (::close(fd) == 0) && ok;
  if (ok && ::rename(temporary.c_str(), out->target.c_str()) != 0) {
    saved = errno;
    ok = false;
  }
  if (!ok) {
    ::unlink(temporary.c_str());
    problem = path +
              ": error: cannot write the output: " + std::strerror(saved) +
              " (the file is left as it was)";
  }
  return ok;
}

StreamedOutput::~StreamedOutput() {
  if (fd >= 0)
    ::close(fd);
}

bool StreamedOutput::open(const std::string &path,
                          const std::vector<std::string> &inputs,
                          std::string &problem) {
  std::optional<OutputTarget> out = checkOutput(path, inputs, problem);
  if (!out)
    return false;
  if (out->mode == OutputMode::InPlace) {
    fd = openInPlace(out->target, problem);
  } else {
    fd = ::open(out->target.c_str(), O_WRONLY | O_CREAT | O_TRUNC | O_CLOEXEC,
                0666);
    if (fd < 0)
      problem =
          path + ": error: cannot write the output: " + std::strerror(errno);
  }
  return fd >= 0;
}

bool StreamedOutput::write(const std::string &text) {
  if (fd < 0 || !good)
    return false;
  good = writeAll(fd, text);
  return good;
}

} // namespace mimo
