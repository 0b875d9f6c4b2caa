//===- CudaDeviceReductions.cu - CUDA norms, losses and sums --------------===//
//
// RMSNorm and LayerNorm, cross-entropy, bias gradients and the step's scalar
// sums. Sums are two launches: a fixed number of blocks each reducing its
// stride in a fixed tree, then one thread adding the blocks in order; no
// atomics, so a run is bitwise reproducible.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDeviceImpl.cuh"

namespace mimo::device::cuda::detail {

namespace {

/// Block partial sums of w(i) * x[i]^2 (squares) or of x[i] where
/// mask[i] != 0 (masked), in a fixed tree.
__global__ void blockSums(const float *x, const float *mask, int64_t n,
                          bool squares, double *partials) {
  __shared__ double shared[kReduceThreads];
  double acc = 0.0;
  int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride) {
    double v = static_cast<double>(x[i]);
    if (squares)
      acc += v * v;
    else if (mask[i] != 0.0f)
      acc += v;
  }
  shared[threadIdx.x] = acc;
  __syncthreads();
  for (int width = blockDim.x / 2; width > 0; width /= 2) {
    if (static_cast<int>(threadIdx.x) < width)
      shared[threadIdx.x] += shared[threadIdx.x + width];
    __syncthreads();
  }
  if (threadIdx.x == 0)
    partials[blockIdx.x] = shared[0];
}

/// *acc += factor * (partials[0] + partials[1] + ...), in order.
__global__ void finishSums(const double *partials, int count, double factor,
                           double *acc) {
  if (threadIdx.x != 0 || blockIdx.x != 0)
    return;
  double total = 0.0;
  for (int i = 0; i < count; ++i)
    total += partials[i];
  *acc += total * factor;
}

} // namespace

void CudaDevice::sumSquaresInto(const float *x, int64_t n, double *acc) {
  reduce("sum_squares", x, nullptr, n, true, 1.0, acc);
}

void CudaDevice::maskedSumInto(const float *values, const float *mask,
                               int64_t n, double factor, double *acc) {
  reduce("masked_sum", values, mask, n, false, factor, acc);
}

void CudaDevice::biasBackward(const float *dy, float *db, int64_t rows,
                              int64_t cols) {
  columnSums("bias_backward_partials", "bias_backward_add",
             b::BiasTerms<float>{dy, cols}, rows, cols, db);
}

void CudaDevice::rmsnormForwardF32(const float *x, const float *w, float *y,
                                   float *rstd, int64_t rows, int64_t cols,
                                   float eps) {
  launchRows("rmsnorm_forward",
             rowwise::RmsnormForward<float>{x, w, y, rstd, rows, cols, eps});
}

void CudaDevice::rmsnormBackwardF32(const float *x, const float *w,
                                    const float *rstd, const float *dy,
                                    float *dx, float *dw, int64_t rows,
                                    int64_t cols) {
  // The weight gradient first: it reads x and dy, which dx may alias.
  columnSums("rmsnorm_backward_weight_partials", "rmsnorm_backward_weight_add",
             b::RmsnormWeightTerms<float>{x, rstd, dy, cols}, rows, cols, dw);
  launchRows("rmsnorm_backward",
             rowwise::RmsnormBackward<float>{x, w, rstd, dy, dx, rows, cols});
}

void CudaDevice::rmsnormBackwardAddBf16(const uint16_t *x, const float *w,
                                        const float *rstd, const float *dy,
                                        float *dx, float *dw, int64_t rows,
                                        int64_t cols) {
  columnSums("rmsnorm_backward_weight_partials_bf16",
             "rmsnorm_backward_weight_add_bf16",
             b::RmsnormWeightTerms<float, uint16_t>{x, rstd, dy, cols}, rows,
             cols, dw);
  launchRows("rmsnorm_backward_add_bf16",
             rowwise::RmsnormBackward<float, uint16_t, true>{x, w, rstd, dy, dx,
                                                             rows, cols});
}

void CudaDevice::layernormBackwardAddBf16(const uint16_t *x, const float *w,
                                          const float *mean, const float *rstd,
                                          const float *dy, float *dx, float *dw,
                                          float *db, int64_t rows,
                                          int64_t cols) {
  columnSums("layernorm_backward_params_partials_bf16",
             "layernorm_backward_params_add_bf16",
             b::LayernormParamTerms<float, uint16_t>{x, mean, rstd, dy, cols},
             rows, cols, dw, db);
  launchRows("layernorm_backward_add_bf16",
             rowwise::LayernormBackward<float, uint16_t, true>{
                 x, w, mean, rstd, dy, dx, rows, cols});
}

void CudaDevice::layernormForwardF32(const float *x, const float *w,
                                     const float *bias, float *y, float *mean,
                                     float *rstd, int64_t rows, int64_t cols,
                                     float eps) {
  launchRows("layernorm_forward",
             rowwise::LayernormForward<float>{x, w, bias, y, mean, rstd, rows,
                                              cols, eps});
}

void CudaDevice::layernormBackwardF32(const float *x, const float *w,
                                      const float *mean, const float *rstd,
                                      const float *dy, float *dx, float *dw,
                                      float *db, int64_t rows, int64_t cols) {
  columnSums("layernorm_backward_params_partials",
             "layernorm_backward_params_add",
             b::LayernormParamTerms<float>{x, mean, rstd, dy, cols}, rows, cols,
             dw, db);
  launchRows("layernorm_backward", rowwise::LayernormBackward<float>{
                                       x, w, mean, rstd, dy, dx, rows, cols});
}

void CudaDevice::rmsnormForwardBf16(const float *x, const float *w, uint16_t *y,
                                    float *rstd, int64_t rows, int64_t cols,
                                    float eps) {
  launchRows("rmsnorm_forward_bf16", rowwise::RmsnormForward<float, uint16_t>{
                                         x, w, y, rstd, rows, cols, eps});
}

void CudaDevice::layernormForwardBf16(const float *x, const float *w,
                                      const float *bias, uint16_t *y,
                                      float *mean, float *rstd, int64_t rows,
                                      int64_t cols, float eps) {
  launchRows("layernorm_forward_bf16",
             rowwise::LayernormForward<float, uint16_t>{x, w, bias, y, mean,
                                                        rstd, rows, cols, eps});
}

void CudaDevice::crossEntropyRowMaxF32(const float *logits, int64_t n,
                                       int64_t vl, float *rowMax) {
  launchRows("cross_entropy_row_max",
             rowwise::CrossEntropyRowMax<float>{logits, rowMax, n, vl});
}

void CudaDevice::crossEntropySumsF32(const float *logits,
                                     const int64_t *targets, int64_t n,
                                     int64_t vl, int64_t vb, const float *gmax,
                                     float *sumExp, float *targetLogit) {
  launchRows("cross_entropy_sums",
             rowwise::CrossEntropySums<float>{logits, targets, gmax, sumExp,
                                              targetLogit, n, vl, vb});
}

void CudaDevice::crossEntropyLoss(const float *gmax, const float *gsum,
                                  const float *gtarget, int64_t n,
                                  float *loss) {
  launch("cross_entropy_loss",
         b::CrossEntropyLoss<float>{gmax, gsum, gtarget, loss, n});
}

void CudaDevice::crossEntropyBackwardF32(const float *logits,
                                         const int64_t *targets, int64_t n,
                                         int64_t vl, int64_t vb,
                                         const float *gmax, const float *gsum,
                                         const float *scaleRows,
                                         float *dlogits) {
  launch("cross_entropy_backward",
         b::CrossEntropyBackward<float>{logits, targets, gmax, gsum, scaleRows,
                                        dlogits, n, vl, vb});
}

void CudaDevice::crossEntropyRowMaxBf16(const uint16_t *logits, int64_t n,
                                        int64_t vl, float *rowMax) {
  launchRows(
      "cross_entropy_row_max_bf16",
      rowwise::CrossEntropyRowMax<float, uint16_t>{logits, rowMax, n, vl});
}

void CudaDevice::crossEntropySumsBf16(const uint16_t *logits,
                                      const int64_t *targets, int64_t n,
                                      int64_t vl, int64_t vb, const float *gmax,
                                      float *sumExp, float *targetLogit) {
  launchRows("cross_entropy_sums_bf16",
             rowwise::CrossEntropySums<float, uint16_t>{
                 logits, targets, gmax, sumExp, targetLogit, n, vl, vb});
}

void CudaDevice::crossEntropyBackwardBf16(const uint16_t *logits,
                                          const int64_t *targets, int64_t n,
                                          int64_t vl, int64_t vb,
                                          const float *gmax, const float *gsum,
                                          const float *scaleRows,
                                          uint16_t *dlogits) {
  launch("cross_entropy_backward_bf16",
         b::CrossEntropyBackward<float, uint16_t, uint16_t>{
             logits, targets, gmax, gsum, scaleRows, dlogits, n, vl, vb});
}

void CudaDevice::reduce(const char *name, const float *x, const float *mask,
                        int64_t n, bool squares, double factor, double *acc) {
  if (n <= 0)
    return;
  activate();
  Timed timed(*this, name);
  int blocks = static_cast<int>(std::min<int64_t>(
      kReduceBlocks, (n + kReduceThreads - 1) / kReduceThreads));
  blockSums<<<blocks, kReduceThreads, 0, stream>>>(x, mask, n, squares,
                                                   partials);
  finishSums<<<1, 1, 0, stream>>>(partials, blocks, factor, acc);
  lastKernel = name;
  cudaError_t error = cudaGetLastError();
  if (error != cudaSuccess)
    throw DeviceError("CUDA error in kernel " + std::string(name) + " on " +
                      label + ": " + errorText(error));
}

} // namespace mimo::device::cuda::detail
