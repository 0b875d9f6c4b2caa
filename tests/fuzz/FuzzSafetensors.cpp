//===- FuzzSafetensors.cpp - The checkpoint file reader -------------------===//
//
// Any bytes as a safetensors file: readHeader returns a header whose tensors
// tile the data section, or an error naming the file.

#include "FuzzInput.h"

#include "runtime/checkpoint/Safetensors.h"

extern "C" int LLVMFuzzerTestOneInput(const uint8_t *data, size_t size) {
  using namespace mimo;
  fuzz::TempFile file(
      std::string_view(reinterpret_cast<const char *>(data), size),
      ".safetensors");
  std::string error;
  std::optional<safetensors::Header> header =
      safetensors::readHeader(file.path, error);
  fuzz::require(header.has_value() == error.empty(),
                "either a header or an error");
  if (header) {
    int64_t at = 0;
    for (const safetensors::TensorEntry &t : header->tensors) {
      fuzz::require(t.begin == at && t.end >= t.begin, "tensors tile");
      at = t.end;
    }
    fuzz::require(at == header->dataBytes, "tensors cover the data");
  }
  return 0;
}
