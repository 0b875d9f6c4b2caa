//===- SharedFolder.cpp - Every rank sees the same --save folder ----------===//
//
// docs/checkpoints.md: a checkpoint is written by every rank into one
// folder, so the folder must be the same on every node. Rank 0 writes a
// file with a random number into it; after a barrier every rank reads it
// back; ranks that do not see that number are named.
//
//===----------------------------------------------------------------------===//

#include "runtime/exec/Executor.h"

#include <cstdlib>
#include <filesystem>
#include <fstream>
#include <random>

namespace mimo::exec {

namespace fs = std::filesystem;

std::string sharedFolderProblem(comm::Comm &comm, const std::string &dir) {
  const int64_t n = comm.size(), rank = comm.rank();
  std::vector<int64_t> world(static_cast<size_t>(n));
  for (int64_t r = 0; r < n; ++r)
    world[static_cast<size_t>(r)] = r;
  const fs::path marker = fs::path(dir) / ".mimo-shared-folder-check";
  // [rank 0's number (broadcast), then one slot per rank: seen it]
  std::vector<double> values(static_cast<size_t>(n + 1), 0.0);
  if (rank == 0) {
    std::error_code ec;
    fs::create_directories(dir, ec);
    std::random_device device;
    const double number =
        static_cast<double>((uint64_t(device()) << 20) ^ device()) + 1;
    std::ofstream(marker) << static_cast<uint64_t>(number) << "\n";
    values[0] = number;
  }
  comm.allReduceSum(world, values.data(), 1); // the number, and a barrier
  fs::path path = marker;
  // Tests: this rank looks at a folder of its own, as on an unshared disk.
  if (const char *other = std::getenv("MIMO_TEST_UNSHARED_RANK");
      other && std::atoll(other) == rank)
    path += ".elsewhere";
  uint64_t seen = 0;
  std::ifstream(path) >> seen;
  std::vector<double> flags(static_cast<size_t>(n), 0.0);
  flags[static_cast<size_t>(rank)] =
      static_cast<double>(seen) == values[0] ? 1.0 : 0.0;
  comm.allReduceSum(world, flags.data(), n);
  if (rank == 0) {
    std::error_code ec;
    fs::remove(marker, ec);
  }
  std::string missing;
  int64_t count = 0;
  for (int64_t r = 0; r < n; ++r)
    if (flags[static_cast<size_t>(r)] != 1.0) {
      if (count < 8)
        missing += (missing.empty() ? "" : ", ") + std::to_string(r);
      ++count;
    }
  if (count == 0)
    return "";
  return "mimo-run: error: --save " + dir + ": rank" +
         (count == 1 ? " " : "s ") + missing + (count > 8 ? ", ..." : "") +
         (count == 1 ? " does" : " do") +
         " not see the file rank 0 wrote there: this folder is not the same "
         "on every node. Checkpoints need one folder every rank shares (a "
         "network filesystem): give a --save path on one";
}

} // namespace mimo::exec
