//===- FuzzInput.h - Helpers shared by the fuzz targets --------*- C++ -*-===//
//
// Each target under tests/fuzz/ feeds one reader (docs/limits.md) with
// arbitrary bytes; the only acceptable outcomes are a value or a located error.
// Built two ways: with libFuzzer (scripts/fuzz.sh, clang) to search, and with
// the normal compiler against ReplayMain.cpp, so that ctest replays the seed
// corpus and every crash ever found on every machine.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_TESTS_FUZZ_FUZZINPUT_H
#define MIMO_TESTS_FUZZ_FUZZINPUT_H

#include <cstdint>
#include <cstdio>
#include <cstdlib>
#include <fstream>
#include <string>
#include <string_view>
#include <unistd.h>

namespace mimo::fuzz {

/// A file holding `bytes`, private to this process, removed when it ends.
class TempFile {
public:
  explicit TempFile(std::string_view bytes, const std::string &suffix = "") {
    static int counter = 0;
    path = "/tmp/mimo-fuzz-" + std::to_string(::getpid()) + "-" +
           std::to_string(counter++) + suffix;
    std::ofstream out(path, std::ios::binary);
    out.write(bytes.data(), static_cast<std::streamsize>(bytes.size()));
  }
  ~TempFile() { std::remove(path.c_str()); }
  TempFile(const TempFile &) = delete;
  TempFile &operator=(const TempFile &) = delete;
  std::string path;
};

/// Fails the run (as a crash would) when a reader breaks its contract.
inline void require(bool condition, const char *what) {
  if (!condition) {
    std::fprintf(stderr, "fuzz contract broken: %s\n", what);
    std::abort();
  }
}

} // namespace mimo::fuzz

#endif // MIMO_TESTS_FUZZ_FUZZINPUT_H
