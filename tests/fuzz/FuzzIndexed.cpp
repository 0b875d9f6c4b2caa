//===- FuzzIndexed.cpp - Megatron's indexed dataset reader ----------------===//
//
// The input is split into PREFIX.idx and PREFIX.bin (the first byte, times
// the size over 256, is where the .idx ends); readIndexedDataset returns
// the dataset or an error naming the file.

#include "FuzzInput.h"

#include "runtime/data/IndexedData.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  using namespace mimo::exec;
  if (size == 0)
    return 0;
  size_t split = 1 + (size - 1) * data[0] / 256;
  std::string_view bytes(reinterpret_cast<const char *>(data), size);
  fuzz::TempFile idx(bytes.substr(1, split - 1), ".idx");
  std::string prefix = idx.path.substr(0, idx.path.size() - 4);
  std::ofstream(prefix + ".bin", std::ios::binary)
      .write(bytes.data() + split, static_cast<std::streamsize>(size - split));
  IndexedDataset dataset;
  std::string error;
  bool ok = readIndexedDataset(prefix, dataset, error);
  std::remove((prefix + ".bin").c_str());
  fuzz::require(ok == error.empty(), "either a dataset or an error");
  return 0;
}
