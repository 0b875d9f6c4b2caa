//===- CudaGemm.cpp - Row-major fp32 GEMM through cuBLASLt ----------------===//

#include "runtime/device/cuda/CudaGemm.h"

#include "runtime/device/cuda/CublasLt.h"
#include "runtime/device/cuda/CudaCheck.h"

namespace mimo::device::cuda {

CublasLtGemm::CublasLtGemm(cudaStream_t stream) : stream(stream) {
  check(cublasLt().create(&handle), "cublasLtCreate");
  check(cudaMallocAsync(&workspace, kWorkspaceBytes, stream),
        "cudaMallocAsync of the cuBLASLt workspace");
}

CublasLtGemm::~CublasLtGemm() {
  for (auto &entry : shapes) {
    Shape &s = entry.second;
    cublasLt().layoutDestroy(s.a);
    cublasLt().layoutDestroy(s.b);
    cublasLt().layoutDestroy(s.c);
    cublasLt().descDestroy(s.op);
  }
  if (workspace)
    cudaFreeAsync(workspace, stream);
  if (handle)
    cublasLt().destroy(handle);
}

namespace {

/// The largest power of two up to 256 that divides the address: cuBLASLt
/// assumes 256-byte-aligned operands unless told otherwise, and views into
/// flat buffers can start anywhere.
uint32_t alignmentOf(const void *pointer) {
  uintptr_t address = reinterpret_cast<uintptr_t>(pointer);
  uintptr_t lowest = address & (~address + 1);
  return static_cast<uint32_t>(lowest == 0 || lowest > 256 ? 256 : lowest);
}

} // namespace

CublasLtGemm::Shape &CublasLtGemm::shapeOf(bool transA, bool transB, int64_t M,
                                           int64_t N, int64_t K,
                                           uint32_t alignA, uint32_t alignB,
                                           uint32_t alignC, bool bf16,
                                           bool bf16Out) {
  auto key = std::make_tuple(transA, transB, M, N, K, alignA, alignB, alignC,
                             bf16, bf16Out);
  auto it = shapes.find(key);
  if (it != shapes.end())
    return it->second;
  // Row-major X[r, c] is column-major X^T with leading dimension c. So
  // C^T (N x M, ld N) = op'(B') op'(A'), with B' = B's storage as stored:
  // [N, K] (ld N) untransposed or [K, N] (ld K) transposed; likewise A'.
  Shape s;
  std::string what = "planning a " + std::to_string(M) + "x" +
                     std::to_string(N) + "x" + std::to_string(K) +
                     (bf16 ? " bf16" : "") + (bf16Out ? " (bf16 out)" : "") +
                     " GEMM";
  check(cublasLt().descCreate(&s.op, CUBLAS_COMPUTE_32F, CUDA_R_32F), what);
  cublasOperation_t opB = transB ? CUBLAS_OP_T : CUBLAS_OP_N;
  cublasOperation_t opA = transA ? CUBLAS_OP_T : CUBLAS_OP_N;
  check(cublasLt().descSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSA, &opB,
                                    sizeof(opB)),
        what);
  check(cublasLt().descSetAttribute(s.op, CUBLASLT_MATMUL_DESC_TRANSB, &opA,
                                    sizeof(opA)),
        what);
  // Operands in fp32, or bf16 (precision "bf16"); the accumulation fp32
  // either way, C fp32 or (bf16Out) bf16.
  cudaDataType_t operand = bf16 ? CUDA_R_16BF : CUDA_R_32F;
  if (transB)
    check(cublasLt().layoutCreate(&s.a, operand, K, N, K), what);
  else
    check(cublasLt().layoutCreate(&s.a, operand, N, K, N), what);
  if (transA)
    check(cublasLt().layoutCreate(&s.b, operand, M, K, M), what);
  else
    check(cublasLt().layoutCreate(&s.b, operand, K, M, K), what);
  check(cublasLt().layoutCreate(&s.c, bf16Out ? CUDA_R_16BF : CUDA_R_32F, N, M,
                                N),
        what);
  cublasLtMatmulPreference_t preference = nullptr;
  check(cublasLt().preferenceCreate(&preference), what);
  size_t bytes = kWorkspaceBytes;
  cublasStatus_t status = cublasLt().preferenceSetAttribute(
      preference, CUBLASLT_MATMUL_PREF_MAX_WORKSPACE_BYTES, &bytes,
      sizeof(bytes));
  // cuBLASLt's A is our B and its B our A (see above).
  const std::pair<cublasLtMatmulPreferenceAttributes_t, uint32_t> alignments[] =
      {{CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_A_BYTES, alignB},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_B_BYTES, alignA},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_C_BYTES, alignC},
       {CUBLASLT_MATMUL_PREF_MIN_ALIGNMENT_D_BYTES, alignC}};
  for (const auto &[attribute, value] : alignments)
    if (status == CUBLAS_STATUS_SUCCESS)
      status = cublasLt().preferenceSetAttribute(preference, attribute, &value,
                                                 sizeof(value));
  cublasLtMatmulHeuristicResult_t result{};
  int found = 0;
  if (status == CUBLAS_STATUS_SUCCESS)
    status = cublasLt().heuristic(handle, s.op, s.a, s.b, s.c, s.c, preference,
                                  1, &result, &found);
  cublasLt().preferenceDestroy(preference);
  if (status == CUBLAS_STATUS_SUCCESS && found == 0)
    status = CUBLAS_STATUS_NOT_SUPPORTED;
  if (status != CUBLAS_STATUS_SUCCESS) {
    cublasLt().layoutDestroy(s.a);
    cublasLt().layoutDestroy(s.b);
    cublasLt().layoutDestroy(s.c);
    cublasLt().descDestroy(s.op);
    check(status, what + " (no algorithm)");
  }
  s.algo = result.algo;
  return shapes.emplace(key, s).first->second;
}

void CublasLtGemm::run(bool transA, bool transB, int64_t M, int64_t N,
                       int64_t K, float alpha, const void *A, const void *B,
                       float beta, void *C, bool bf16, bool bf16Out) {
  Shape &s = shapeOf(transA, transB, M, N, K, alignmentOf(A), alignmentOf(B),
                     alignmentOf(C), bf16, bf16Out);
  cublasStatus_t status =
      cublasLt().matmul(handle, s.op, &alpha, B, s.a, A, s.b, &beta, C, s.c, C,
                        s.c, &s.algo, workspace, kWorkspaceBytes, stream);
  if (status != CUBLAS_STATUS_SUCCESS)
    check(status, "cublasLtMatmul (" + std::to_string(M) + "x" +
                      std::to_string(N) + "x" + std::to_string(K) + ")");
}

} // namespace mimo::device::cuda
