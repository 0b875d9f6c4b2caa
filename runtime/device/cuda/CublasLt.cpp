//===- CublasLt.cpp - cuBLASLt, loaded when the first GPU needs it --------===//

#include "runtime/device/cuda/CublasLt.h"

#include "runtime/device/Device.h"

#include "runtime/support/SharedLibrary.h"

#include <mutex>
#include <string>

namespace mimo::device::cuda {

namespace {

struct Loaded {
  CublasLtApi api{};
  std::string error;
};

Loaded load() {
  Loaded out;
  void *library = openSharedLibrary(
      {"libcublasLt.so.13", "libcublasLt.so"}, "cuBLASLt",
      "install the CUDA toolkit's libcublasLt or add its directory to "
      "LD_LIBRARY_PATH",
      out.error);
  if (!library)
    return out;
  auto bind = [&](auto &slot, const char *symbol) {
    bindSymbol(library, slot, symbol, "cuBLASLt", out.error);
  };
  CublasLtApi &a = out.api;
  bind(a.create, "cublasLtCreate");
  bind(a.destroy, "cublasLtDestroy");
  bind(a.matmul, "cublasLtMatmul");
  bind(a.heuristic, "cublasLtMatmulAlgoGetHeuristic");
  bind(a.descCreate, "cublasLtMatmulDescCreate");
  bind(a.descDestroy, "cublasLtMatmulDescDestroy");
  bind(a.descSetAttribute, "cublasLtMatmulDescSetAttribute");
  bind(a.preferenceCreate, "cublasLtMatmulPreferenceCreate");
  bind(a.preferenceDestroy, "cublasLtMatmulPreferenceDestroy");
  bind(a.preferenceSetAttribute, "cublasLtMatmulPreferenceSetAttribute");
  bind(a.layoutCreate, "cublasLtMatrixLayoutCreate");
  bind(a.layoutDestroy, "cublasLtMatrixLayoutDestroy");
  bind(a.statusName, "cublasLtGetStatusName");
  bind(a.statusString, "cublasLtGetStatusString");
  return out;
}

} // namespace

const CublasLtApi &cublasLt() {
  static const Loaded loaded = load();
  if (!loaded.error.empty())
    throw DeviceError(loaded.error);
  return loaded.api;
}

} // namespace mimo::device::cuda
