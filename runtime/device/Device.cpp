//===- Device.cpp - The ops by element type, onto a device's kernels ------===//
//
// Device.h: each op takes its buffers' element types; here, once for every
// device, the types choose the kernel. A combination no precision uses is
// a DeviceError naming the op and the types.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/Device.h"

namespace mimo::device {

namespace {

[[noreturn]] void unsupported(const char *op, const std::string &types) {
  throw DeviceError(std::string("Device::") + op + ": no kernel takes " +
                    types);
}

bool bf16(DType type) { return type == DType::BF16; }
bool f32(DType type) { return type == DType::F32; }

} // namespace

void Device::convert(DType from, const void *x, DType to, void *y, int64_t n) {
  if (f32(from) && bf16(to))
    packBf16(static_cast<const float *>(x), static_cast<uint16_t *>(y), n);
  else if (bf16(from) && f32(to))
    unpackBf16(static_cast<const uint16_t *>(x), static_cast<float *>(y), n);
  else if (from == to && (f32(from) || bf16(from)))
    copy(y, x, n * sizeOf(from));
  else
    unsupported("convert", std::string(nameOf(from)) + " to " + nameOf(to));
}

void Device::roundTo(DType type, float *data, int64_t n) {
  if (bf16(type))
    roundToBf16(data, n);
  else if (!f32(type))
    unsupported("roundTo", nameOf(type));
}

void Device::residual(DType stored, const float *x, DType branchType,
                      const void *branch, float *out, int64_t n) {
  if (f32(stored) && f32(branchType))
    add(DType::F32, out, x, branch, n);
  else if (bf16(stored) && f32(branchType))
    residualBf16(x, static_cast<const float *>(branch), out, n);
  else if (bf16(stored) && bf16(branchType))
    residualBf16(x, static_cast<const uint16_t *>(branch), out, n);
  else
    unsupported("residual", std::string(nameOf(branchType)) +
                                " branches stored as " + nameOf(stored));
}

void Device::gemm(DType math, bool transA, bool transB, int64_t M, int64_t N,
                  int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
                  float beta, DType cType, void *C) {
  if (f32(math) && f32(cType) && !A.bits && !B.bits)
    gemmF32(transA, transB, M, N, K, alpha, A.f32, B.f32, beta,
            static_cast<float *>(C));
  else if (bf16(math) && f32(cType))
    gemmBf16(transA, transB, M, N, K, alpha, A, B, beta,
             static_cast<float *>(C));
  else if (bf16(math) && bf16(cType) && beta == 0.0f)
    gemmBf16Out(transA, transB, M, N, K, alpha, A, B,
                static_cast<uint16_t *>(C));
  else
    unsupported("gemm", std::string(nameOf(math)) + " math with " +
                            ((A.bits || B.bits) ? "bf16 operands, " : "") +
                            nameOf(cType) + " C and beta " +
                            std::to_string(beta));
}

void Device::rmsnormForward(const float *x, const float *w, DType yType,
                            void *y, float *rstd, int64_t rows, int64_t cols,
                            float eps) {
  if (f32(yType))
    rmsnormForwardF32(x, w, static_cast<float *>(y), rstd, rows, cols, eps);
  else if (bf16(yType))
    rmsnormForwardBf16(x, w, static_cast<uint16_t *>(y), rstd, rows, cols, eps);
  else
    unsupported("rmsnormForward", nameOf(yType));
}

void Device::layernormForward(const float *x, const float *w, const float *b,
                              DType yType, void *y, float *mean, float *rstd,
                              int64_t rows, int64_t cols, float eps) {
  if (f32(yType))
    layernormForwardF32(x, w, b, static_cast<float *>(y), mean, rstd, rows,
                        cols, eps);
  else if (bf16(yType))
    layernormForwardBf16(x, w, b, static_cast<uint16_t *>(y), mean, rstd, rows,
                         cols, eps);
  else
    unsupported("layernormForward", nameOf(yType));
}

void Device::rmsnormBackward(DType xType, const void *x, const float *w,
                             const float *rstd, const float *dy, float *dx,
                             float *dw, int64_t rows, int64_t cols) {
  if (f32(xType))
    rmsnormBackwardF32(static_cast<const float *>(x), w, rstd, dy, dx, dw, rows,
                       cols);
  else if (bf16(xType))
    rmsnormBackwardAddBf16(static_cast<const uint16_t *>(x), w, rstd, dy, dx,
                           dw, rows, cols);
  else
    unsupported("rmsnormBackward", nameOf(xType));
}

void Device::layernormBackward(DType xType, const void *x, const float *w,
                               const float *mean, const float *rstd,
                               const float *dy, float *dx, float *dw, float *db,
                               int64_t rows, int64_t cols) {
  if (f32(xType))
    layernormBackwardF32(static_cast<const float *>(x), w, mean, rstd, dy, dx,
                         dw, db, rows, cols);
  else if (bf16(xType))
    layernormBackwardAddBf16(static_cast<const uint16_t *>(x), w, mean, rstd,
                             dy, dx, dw, db, rows, cols);
  else
    unsupported("layernormBackward", nameOf(xType));
}

void Device::geluForward(DType xType, const void *x, DType yType, void *y,
                         int64_t n, Gelu kind) {
  if (f32(xType) && f32(yType))
    geluForwardF32(static_cast<const float *>(x), static_cast<float *>(y), n,
                   kind);
  else if (f32(xType) && bf16(yType))
    geluForwardBf16(static_cast<const float *>(x), static_cast<uint16_t *>(y),
                    n, kind);
  else if (bf16(xType) && bf16(yType))
    geluForwardBf16(static_cast<const uint16_t *>(x),
                    static_cast<uint16_t *>(y), n, kind);
  else
    unsupported("geluForward",
                std::string(nameOf(xType)) + " to " + nameOf(yType));
}

void Device::swigluForward(DType xType, const void *gate, const void *up,
                           DType yType, void *y, int64_t n) {
  if (f32(xType) && f32(yType))
    swigluForwardF32(static_cast<const float *>(gate),
                     static_cast<const float *>(up), static_cast<float *>(y),
                     n);
  else if (f32(xType) && bf16(yType))
    swigluForwardBf16(static_cast<const float *>(gate),
                      static_cast<const float *>(up),
                      static_cast<uint16_t *>(y), n);
  else if (bf16(xType) && bf16(yType))
    swigluForwardBf16(static_cast<const uint16_t *>(gate),
                      static_cast<const uint16_t *>(up),
                      static_cast<uint16_t *>(y), n);
  else
    unsupported("swigluForward",
                std::string(nameOf(xType)) + " to " + nameOf(yType));
}

void Device::geluBackward(DType type, const void *x, const float *dy, void *dx,
                          int64_t n, Gelu kind) {
  if (f32(type))
    geluBackwardF32(static_cast<const float *>(x), dy, static_cast<float *>(dx),
                    n, kind);
  else if (bf16(type))
    geluBackwardBf16(static_cast<const uint16_t *>(x), dy,
                     static_cast<uint16_t *>(dx), n, kind);
  else
    unsupported("geluBackward", nameOf(type));
}

void Device::swigluBackward(DType type, const void *gate, const void *up,
                            const float *dy, void *dgate, void *dup,
                            int64_t n) {
  if (f32(type))
    swigluBackwardF32(
        static_cast<const float *>(gate), static_cast<const float *>(up), dy,
        static_cast<float *>(dgate), static_cast<float *>(dup), n);
  else if (bf16(type))
    swigluBackwardBf16(
        static_cast<const uint16_t *>(gate), static_cast<const uint16_t *>(up),
        dy, static_cast<uint16_t *>(dgate), static_cast<uint16_t *>(dup), n);
  else
    unsupported("swigluBackward", nameOf(type));
}

void Device::embeddingForward(const int64_t *ids, int64_t n, DType tableType,
                              const void *table, int64_t vocabBegin,
                              int64_t vocabEnd, int64_t hidden, float *out) {
  if (f32(tableType))
    embeddingForwardF32(ids, n, static_cast<const float *>(table), vocabBegin,
                        vocabEnd, hidden, out);
  else if (bf16(tableType))
    embeddingForwardBf16(ids, n, static_cast<const uint16_t *>(table),
                         vocabBegin, vocabEnd, hidden, out);
  else
    unsupported("embeddingForward", nameOf(tableType));
}

void Device::crossEntropyRowMax(DType type, const void *logits, int64_t n,
                                int64_t vocabLocal, float *rowMax) {
  if (f32(type))
    crossEntropyRowMaxF32(static_cast<const float *>(logits), n, vocabLocal,
                          rowMax);
  else if (bf16(type))
    crossEntropyRowMaxBf16(static_cast<const uint16_t *>(logits), n, vocabLocal,
                           rowMax);
  else
    unsupported("crossEntropyRowMax", nameOf(type));
}

void Device::crossEntropySums(DType type, const void *logits,
                              const int64_t *targets, int64_t n,
                              int64_t vocabLocal, int64_t vocabBegin,
                              const float *globalMax, float *sumExp,
                              float *targetLogit) {
  if (f32(type))
    crossEntropySumsF32(static_cast<const float *>(logits), targets, n,
                        vocabLocal, vocabBegin, globalMax, sumExp, targetLogit);
  else if (bf16(type))
    crossEntropySumsBf16(static_cast<const uint16_t *>(logits), targets, n,
                         vocabLocal, vocabBegin, globalMax, sumExp,
                         targetLogit);
  else
    unsupported("crossEntropySums", nameOf(type));
}

void Device::crossEntropyBackward(DType type, const void *logits,
                                  const int64_t *targets, int64_t n,
                                  int64_t vocabLocal, int64_t vocabBegin,
                                  const float *globalMax,
                                  const float *globalSumExp, const float *scale,
                                  void *dlogits) {
  if (f32(type))
    crossEntropyBackwardF32(static_cast<const float *>(logits), targets, n,
                            vocabLocal, vocabBegin, globalMax, globalSumExp,
                            scale, static_cast<float *>(dlogits));
  else if (bf16(type))
    crossEntropyBackwardBf16(static_cast<const uint16_t *>(logits), targets, n,
                             vocabLocal, vocabBegin, globalMax, globalSumExp,
                             scale, static_cast<uint16_t *>(dlogits));
  else
    unsupported("crossEntropyBackward", nameOf(type));
}

} // namespace mimo::device
