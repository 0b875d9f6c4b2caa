//===- Cudnn.h - cuDNN, loaded when attention first asks for it -*- C++ -*-===//
//
// cuDNN's fused flash attention (CudnnAttention.h) goes through its graph
// API, called through this table: mimo opens libcudnn with dlopen at first
// use, as it does cuBLASLt, so builds, CPU runs and machines without cuDNN
// never need it. Where it looks (docs/gpu.md "Attention backends"):
// MIMO_CUDNN_LIBRARY (a file), the loader's own search (LD_LIBRARY_PATH,
// ld.so.cache), the CUDA toolkit's lib folders (CUDA_HOME, CUDA_PATH,
// /usr/local/cuda), then the nvidia-cudnn wheel of a Python environment
// (PyTorch's: VIRTUAL_ENV, CONDA_PREFIX, the python3 on PATH, /usr/local,
// ~/.local).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDNN_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUDNN_H

#include <cudnn_graph.h>

#include <string>
#include <vector>

namespace mimo::device::cuda {

/// The graph API's calls mimo makes (a test may fill the table with its
/// own functions: CudnnAttention builds its graphs through it).
struct CudnnApi {
  decltype(&cudnnGetVersion) getVersion = nullptr;
  decltype(&cudnnGetErrorString) errorString = nullptr;
  decltype(&cudnnGetLastErrorString) lastErrorString = nullptr;
  decltype(&cudnnCreate) create = nullptr;
  decltype(&cudnnDestroy) destroy = nullptr;
  decltype(&cudnnSetStream) setStream = nullptr;
  decltype(&cudnnBackendCreateDescriptor) createDescriptor = nullptr;
  decltype(&cudnnBackendDestroyDescriptor) destroyDescriptor = nullptr;
  decltype(&cudnnBackendSetAttribute) setAttribute = nullptr;
  decltype(&cudnnBackendGetAttribute) getAttribute = nullptr;
  decltype(&cudnnBackendFinalize) finalize = nullptr;
  decltype(&cudnnBackendExecute) execute = nullptr;
};

/// The oldest cuDNN mimo's attention graphs run on (9.0.0 as
/// cudnnGetVersion counts: major * 10000 + minor * 100 + patch).
inline constexpr size_t kCudnnMinimumVersion = 90000;

/// What loading found: the table (when `problem` is empty), the library's
/// path and version.
struct CudnnLibrary {
  CudnnApi api;
  std::string path;
  size_t version = 0;
  /// Why cuDNN cannot be used ("" when it can): not found (every place
  /// tried), a symbol missing, older than 9.0.
  std::string problem;
};

/// Loads it once per process (never throws; `problem` says why not).
const CudnnLibrary &cudnnLibrary();

/// "9.19.0" for 91900.
std::string cudnnVersionText(size_t version);

/// The places mimo tries, in order, given the environment's values (empty
/// strings where unset) and the folders of `python3` on PATH: file paths of
/// libcudnn.so.9 and bare names for the loader's own search. Exposed for
/// the tests and for docs/gpu.md.
struct CudnnSearch {
  std::string explicitLibrary, cudaHome, cudaPath, virtualEnv, condaPrefix,
      home;
  std::vector<std::string> pythonPrefixes; // e.g. /opt/conda for its python3
};
std::vector<std::string> cudnnCandidates(const CudnnSearch &search);

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDNN_H
