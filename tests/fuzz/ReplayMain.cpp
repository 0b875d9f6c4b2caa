//===- ReplayMain.cpp - Runs a fuzz target over files, without libFuzzer
//---===//
//
// Usage: fuzz-replay-TARGET DIR_OR_FILE...  Feeds every file to the target
// once (directories recursively, in name order) and exits 0 when none
// crashed; a crash is the test failing. Missing directories are skipped
// (a target may have found no crash yet), but at least one file must run.
//
//===----------------------------------------------------------------------===//

#include <algorithm>
#include <cstdint>
#include <cstdio>
#include <filesystem>
#include <fstream>
#include <iterator>
#include <string>
#include <vector>

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size);

int main(int argc, char **argv) {
  namespace fs = std::filesystem;
  std::vector<fs::path> files;
  for (int i = 1; i < argc; ++i) {
    std::error_code ec;
    fs::path arg = argv[i];
    if (fs::is_regular_file(arg, ec)) {
      files.push_back(arg);
    } else if (fs::is_directory(arg, ec)) {
      for (const auto &entry : fs::recursive_directory_iterator(arg, ec))
        if (entry.is_regular_file(ec) &&
            entry.path().filename().string().front() != '.')
          files.push_back(entry.path());
    }
  }
  std::sort(files.begin(), files.end());
  if (files.empty()) {
    std::fprintf(stderr, "fuzz replay: no input files in the given paths\n");
    return 1;
  }
  for (const fs::path &file : files) {
    std::ifstream in(file, std::ios::binary);
    std::string bytes((std::istreambuf_iterator<char>(in)),
                      std::istreambuf_iterator<char>());
    LLVMFuzzerTestOneInput(reinterpret_cast<const uint8_t *>(bytes.data()),
                           bytes.size());
  }
  std::printf("fuzz replay: %zu inputs, none crashed\n", files.size());
  return 0;
}
