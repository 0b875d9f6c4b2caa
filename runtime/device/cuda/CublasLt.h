//===- CublasLt.h - cuBLASLt, loaded when the first GPU needs it -*- C++
//-*-===//
//
// libcublasLt is half a gigabyte; linking it makes every start of mimo-run
// (CPU runs and --help included) map and relocate it, about 150 MB of
// resident memory. So the CUDA device opens it with dlopen on first use
// and calls it through this table; builds and runs without a GPU never
// touch it.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUBLASLT_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUBLASLT_H

#include <cublasLt.h>

namespace mimo::device::cuda {

struct CublasLtApi {
  decltype(&cublasLtCreate) create;
  decltype(&cublasLtDestroy) destroy;
  decltype(&cublasLtMatmul) matmul;
  decltype(&cublasLtMatmulAlgoGetHeuristic) heuristic;
  decltype(&cublasLtMatmulDescCreate) descCreate;
  decltype(&cublasLtMatmulDescDestroy) descDestroy;
  decltype(&cublasLtMatmulDescSetAttribute) descSetAttribute;
  decltype(&cublasLtMatmulPreferenceCreate) preferenceCreate;
  decltype(&cublasLtMatmulPreferenceDestroy) preferenceDestroy;
  decltype(&cublasLtMatmulPreferenceSetAttribute) preferenceSetAttribute;
  decltype(&cublasLtMatrixLayoutCreate) layoutCreate;
  decltype(&cublasLtMatrixLayoutDestroy) layoutDestroy;
  decltype(&cublasLtGetStatusName) statusName;
  decltype(&cublasLtGetStatusString) statusString;
};

/// The loaded library (once per process); DeviceError naming the library
/// and what was missing when it cannot be loaded.
const CublasLtApi &cublasLt();

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUBLASLT_H
