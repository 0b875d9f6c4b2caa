//===- CudaDeviceGemm.cu - CUDA GEMMs through cuBLASLt --------------------===//
//
// fp32 GEMMs (TF32 off) and bf16 GEMMs with fp32 accumulation, their fp32
// operands rounded to bf16 in stream-ordered scratch first.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDeviceImpl.cuh"

namespace mimo::device::cuda::detail {

void CudaDevice::gemmF32(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, const float *A, const float *B,
                         float beta, float *C) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // C = beta C, not read when beta is 0
    if (beta == 0.0f)
      fillZero(C, M * N * static_cast<int64_t>(sizeof(float)));
    else
      scale(C, beta, M * N);
    return;
  }
  activate();
  lastKernel = "gemm";
  Timed timed(*this, [&] { return gemmName("gemm", ta, tb, M, N, K); });
  blasLt().run(ta, tb, M, N, K, alpha, A, B, beta, C, false);
}

void CudaDevice::gemmBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                          float alpha, Bf16Operand A, Bf16Operand B, float beta,
                          float *C) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // C = beta C; C unread when beta is 0
    if (beta == 0.0f)
      fill(C, 0.0f, M * N);
    else
      scale(C, beta, M * N);
    return;
  }
  runBf16(ta, tb, M, N, K, alpha, A, B, beta, C, false);
}

void CudaDevice::gemmBf16Out(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                             float alpha, Bf16Operand A, Bf16Operand B,
                             uint16_t *C) {
  if (M <= 0 || N <= 0)
    return;
  if (K <= 0) { // the rounded zero sums
    fillZero(C, M * N * int64_t(sizeof(uint16_t)));
    return;
  }
  runBf16(ta, tb, M, N, K, alpha, A, B, 0.0f, C, true);
}

/// fp32 operands in bf16 (stream-ordered scratch; bf16 ones as they are),
/// then cuBLASLt's bf16 GEMM with fp32 accumulation into fp32 C, or bf16
/// C (bf16Out).
void CudaDevice::runBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                         float alpha, Bf16Operand A, Bf16Operand B, float beta,
                         void *C, bool bf16Out) {
  uint16_t *a16 = nullptr, *b16 = nullptr;
  try {
    const uint16_t *a = A.bits ? A.bits : (a16 = toBf16(A.f32, M * K));
    const uint16_t *bb = B.bits ? B.bits : (b16 = toBf16(B.f32, K * N));
    activate();
    lastKernel = bf16Out ? "gemm_bf16_out" : "gemm_bf16";
    Timed timed(*this, [&] { return gemmName(lastKernel, ta, tb, M, N, K); });
    blasLt().run(ta, tb, M, N, K, alpha, a, bb, beta, C, true, bf16Out);
  } catch (...) {
    if (a16)
      release(a16);
    if (b16)
      release(b16);
    throw;
  }
  if (a16)
    release(a16);
  if (b16)
    release(b16);
}

/// n values rounded to bf16, in new stream-ordered scratch.
uint16_t *CudaDevice::toBf16(const float *x, int64_t n) {
  auto *out = static_cast<uint16_t *>(allocate(n * 2));
  try {
    launch("to_bf16", b::ToBf16BitsWide{x, out, n});
  } catch (...) {
    release(out);
    throw;
  }
  return out;
}

} // namespace mimo::device::cuda::detail
