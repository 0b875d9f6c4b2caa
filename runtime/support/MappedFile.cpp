//===- MappedFile.cpp - A read-only memory map of a whole file ------------===//

#include "runtime/support/MappedFile.h"

#include <atomic>
#include <csignal>
#include <cstring>
#include <mutex>
#include <stdexcept>

#include <fcntl.h>
#include <sys/mman.h>
#include <sys/stat.h>
#include <unistd.h>

namespace mimo {

namespace {

/// The mapped regions the SIGBUS handler knows (a fixed table: the
/// handler reads it without locks).
constexpr int kSlots = 4096;
struct Region {
  std::atomic<uintptr_t> begin{0}, end{0};
  std::atomic<bool> damaged{false};
};
Region regions[kSlots];
std::mutex registering;
long pageBytes = 4096;
struct sigaction previous;

void onSigbus(int signal, siginfo_t *info, void *context) {
  const auto address = reinterpret_cast<uintptr_t>(info->si_addr);
  for (Region &r : regions) {
    const uintptr_t begin = r.begin.load(std::memory_order_acquire);
    if (begin == 0 || address < begin ||
        address >= r.end.load(std::memory_order_acquire))
      continue;
    // Zeros over the page past the file's end: the read goes on, the
    // reader sees the mark at its next checkIntact().
    const uintptr_t page = address & ~static_cast<uintptr_t>(pageBytes - 1);
    void *mapped =
        ::mmap(reinterpret_cast<void *>(page), static_cast<size_t>(pageBytes),
               PROT_READ, MAP_PRIVATE | MAP_FIXED | MAP_ANONYMOUS, -1, 0);
    if (mapped != MAP_FAILED) {
      r.damaged.store(true, std::memory_order_release);
      return;
    }
    break;
  }
  // Not ours (or no page to map): what SIGBUS did before.
  if (previous.sa_flags & SA_SIGINFO && previous.sa_sigaction) {
    previous.sa_sigaction(signal, info, context);
    return;
  }
  if (previous.sa_handler != SIG_IGN && previous.sa_handler != SIG_DFL &&
      previous.sa_handler) {
    previous.sa_handler(signal);
    return;
  }
  ::signal(SIGBUS, SIG_DFL);
  ::raise(SIGBUS);
}

/// A slot for [begin, end), the handler installed on first use; -1 when
/// the table is full (the mapping is then unguarded).
int registerRegion(const void *data, int64_t bytes) {
  std::lock_guard<std::mutex> lock(registering);
  static bool installed = [] {
    pageBytes = ::sysconf(_SC_PAGESIZE);
    struct sigaction action = {};
    action.sa_sigaction = onSigbus;
    action.sa_flags = SA_SIGINFO | SA_NODEFER;
    sigemptyset(&action.sa_mask);
    return ::sigaction(SIGBUS, &action, &previous) == 0;
  }();
  if (!installed)
    return -1;
  for (int i = 0; i < kSlots; ++i)
    if (regions[i].begin.load() == 0) {
      regions[i].damaged.store(false);
      regions[i].end.store(reinterpret_cast<uintptr_t>(data) +
                           static_cast<uintptr_t>(bytes));
      regions[i].begin.store(reinterpret_cast<uintptr_t>(data),
                             std::memory_order_release);
      return i;
    }
  return -1;
}

} // namespace

MappedFile::~MappedFile() {
  if (slot >= 0) {
    std::lock_guard<std::mutex> lock(registering);
    regions[slot].begin.store(0, std::memory_order_release);
    regions[slot].end.store(0);
  }
  if (data)
    ::munmap(data, static_cast<size_t>(size));
  if (fd >= 0)
    ::close(fd);
}

bool MappedFile::open(const std::string &file, const std::string &what,
                      std::string &error) {
  path = file;
  error = inputFileProblem(file, what);
  if (!error.empty())
    return false;
  fd = ::open(file.c_str(), O_RDONLY | O_NONBLOCK | O_CLOEXEC);
  if (fd < 0) {
    error = file + ": error: cannot open it";
    return false;
  }
  struct stat st = {};
  if (::fstat(fd, &st) != 0) {
    ::close(fd);
    fd = -1;
    error = file + ": error: cannot read its size";
    return false;
  }
  size = st.st_size;
  modifiedNs =
      static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 + st.st_mtim.tv_nsec;
  void *p = size > 0 ? ::mmap(nullptr, static_cast<size_t>(size), PROT_READ,
                              MAP_PRIVATE, fd, 0)
                     : nullptr;
  if (p == MAP_FAILED) {
    ::close(fd);
    fd = -1;
    size = 0;
    error = file + ": error: cannot map it into memory";
    return false;
  }
  data = p;
  if (data)
    slot = registerRegion(data, size);
  return true;
}

bool MappedFile::damaged() const {
  if (slot >= 0 && regions[slot].damaged.load(std::memory_order_acquire))
    return true;
  struct stat st = {};
  if (fd < 0 || ::fstat(fd, &st) != 0)
    return false;
  return st.st_size != size ||
         static_cast<int64_t>(st.st_mtim.tv_sec) * 1000000000 +
                 st.st_mtim.tv_nsec !=
             modifiedNs;
}

void MappedFile::checkIntact() const {
  if (damaged())
    throw std::runtime_error(
        path + ": error: the file shrank while it was being read (truncated "
               "or rewritten in place by another program): what mimo read "
               "from it since is not its data. Write new data to another "
               "file and rename it over this one (a rename leaves a running "
               "reader its old file)");
}

} // namespace mimo
