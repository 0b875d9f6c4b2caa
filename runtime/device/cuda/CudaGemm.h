//===- CudaGemm.h - Row-major fp32 GEMM through cuBLASLt --------*- C++ -*-===//
//
// C[M,N] = alpha op(A) op(B) + beta C with the semantics of cpu/Kernels.h
// gemm, as cuBLASLt's column-major C^T = op(B)^T op(A)^T. Compute type
// CUBLAS_COMPUTE_32F: fp32 accumulation with TF32 off (docs/gpu.md). One
// handle and workspace per device (rank); the heuristic's choice is kept
// per shape, so a shape is planned once.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDAGEMM_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUDAGEMM_H

#include <cublasLt.h>
#include <cuda_runtime_api.h>

#include <cstdint>
#include <map>
#include <tuple>

namespace mimo::device::cuda {

class CublasLtGemm {
public:
  explicit CublasLtGemm(cudaStream_t stream);
  ~CublasLtGemm();
  CublasLtGemm(const CublasLtGemm &) = delete;
  CublasLtGemm &operator=(const CublasLtGemm &) = delete;

  /// M, N > 0 and K > 0 (the caller handles empty products). A and B are
  /// fp32, or bf16 (uint16 bits) when `bf16`; C is fp32, or with `bf16Out`
  /// (bf16 operands only) bf16 bits, the fp32 sums rounded.
  void run(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
           float alpha, const void *A, const void *B, float beta, void *C,
           bool bf16, bool bf16Out = false);

  static constexpr size_t kWorkspaceBytes = size_t(32) << 20;

private:
  struct Shape {
    cublasLtMatmulDesc_t op = nullptr;
    cublasLtMatrixLayout_t a = nullptr, b = nullptr, c = nullptr;
    cublasLtMatmulAlgo_t algo{};
  };
  /// The plan of a shape and its operands' alignments (bytes).
  Shape &shapeOf(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                 uint32_t alignA, uint32_t alignB, uint32_t alignC, bool bf16,
                 bool bf16Out);

  cudaStream_t stream;
  cublasLtHandle_t handle = nullptr;
  void *workspace = nullptr;
  std::map<std::tuple<bool, bool, int64_t, int64_t, int64_t, uint32_t, uint32_t,
                      uint32_t, bool, bool>,
           Shape>
      shapes;
};

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDAGEMM_H
