//===- CudaDevice.cu - The CUDA device -----------------------------------===//
//
// docs/gpu.md. One CudaDevice per rank: its own non-blocking stream on GPU
// `ordinal`, memory from that GPU's stream-ordered pool (cudaMallocAsync,
// kept cached: no cudaMalloc per instruction), a cuBLASLt handle for GEMMs
// and, for every other kernel, the per-index bodies of KernelBodies.h
// launched as a grid-stride loop. Nothing waits on the host except
// download() and synchronize(); other ranks' streams are ordered against
// this one with events (record/wait).
//
// Reductions into the step's scalars (sums of squares, the masked loss sum)
// are two launches: a fixed number of blocks, chosen from n alone, each
// reducing its stride in a fixed tree, then one thread adding the blocks in
// order. No atomics anywhere, so a run is bitwise reproducible.
//
// Errors: a failed launch or call throws DeviceError naming the kernel or
// call; an asynchronous fault surfaces at the next call that reports it,
// named with the last kernel launched.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/FlashBodies.h"
#include "runtime/device/FlashMmaBodies.h"
#include "runtime/device/KernelBodies.h"
#include "runtime/device/OncePerDevice.h"
#include "runtime/device/RowBodies.h"
#include "runtime/device/Tensor.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaGemm.h"
#include "runtime/device/cuda/FlashMma.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace mimo::device::cuda {

namespace b = mimo::device::bodies;

namespace {

constexpr float kNormEps = 1e-5f;
constexpr int kReduceThreads = 256;
constexpr int kReduceBlocks = 256;

/// Every index of `f` once, as a grid-stride loop.
template <typename F> __global__ void eachIndex(F f, int64_t n) {
  int64_t stride = static_cast<int64_t>(blockDim.x) * gridDim.x;
  for (int64_t i = static_cast<int64_t>(blockIdx.x) * blockDim.x + threadIdx.x;
       i < n; i += stride)
    f(i);
}

/// A row program of RowBodies.h: a block per row (grid-strided), each
/// reduction's partials combined by the tree, barriers between its steps.
template <typename Program>
__global__ void __launch_bounds__(rowwise::kRowBlock) eachRow(Program program) {
  constexpr int W = Program::kWidth;
  __shared__ double shared[W * rowwise::kRowBlock];
  const int t = static_cast<int>(threadIdx.x);
  for (int64_t r = blockIdx.x; r < program.rows(); r += gridDim.x) {
    double totals[Program::kSums * W] = {};
    for (int k = 0; k < Program::kSums; ++k) {
      double part[W];
      program.partial(k, r, t, totals, part);
      for (int w = 0; w < W; ++w)
        shared[w * rowwise::kRowBlock + t] = part[w];
      __syncthreads();
      for (int half = rowwise::kRowBlock / 2; half > 0; half /= 2) {
        rowwise::combineStep<Program>(shared, half, t);
        __syncthreads();
      }
      for (int w = 0; w < W; ++w)
        totals[k * W + w] = shared[w * rowwise::kRowBlock];
      __syncthreads(); // every thread has read the totals: shared is free
    }
    program.finish(r, t, totals);
  }
}

/// A block program of FlashBodies.h: block (blockIdx.x, head blockIdx.y),
/// one thread per row, a barrier around every chunk's load.
template <typename Program>
__global__ void __launch_bounds__(flash::kThreads) eachBlock(Program program) {
  extern __shared__ float shared[];
  const int64_t b = blockIdx.x, h = blockIdx.y;
  const int t = static_cast<int>(threadIdx.x);
  typename Program::State state;
  program.begin(b, h, t, shared, state);
  const int64_t chunks = program.chunks(b);
  for (int64_t c = 0; c < chunks; ++c) {
    __syncthreads(); // the previous chunk is consumed
    program.load(b, h, c, t, shared);
    __syncthreads();
    program.compute(b, h, c, t, shared, state);
  }
  program.finish(b, h, t, state);
}

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

class CudaEvent final : public Event {
public:
  CudaEvent() {
    check(cudaEventCreateWithFlags(&event, cudaEventDisableTiming),
          "cudaEventCreateWithFlags");
  }
  ~CudaEvent() override {
    cudaEventDestroy(event);
    (void)cudaGetLastError(); // never blame a later call for this one
  }
  bool reached() const override {
    cudaError_t state = cudaEventQuery(event);
    if (state == cudaErrorNotReady) {
      (void)cudaGetLastError();
      return false;
    }
    check(state, "cudaEventQuery");
    return true;
  }
  cudaEvent_t event = nullptr;
};

class CudaDevice final : public Device {
public:
  explicit CudaDevice(int ordinal)
      : ordinal(ordinal), multiGpu(cudaStatus().devices > 1) {
    activate();
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties");
    label = "cuda:" + std::to_string(ordinal) + " (" + props.name + ")";
    sharedOptIn = static_cast<int64_t>(props.sharedMemPerBlockOptin);
    check(cudaStreamCreateWithFlags(&stream, cudaStreamNonBlocking),
          "cudaStreamCreateWithFlags");
    // Keep freed memory in the pool instead of returning it to the driver
    // at every synchronisation: a step's allocations then come from cache.
    cudaMemPool_t pool = nullptr;
    check(cudaDeviceGetDefaultMemPool(&pool, ordinal),
          "cudaDeviceGetDefaultMemPool");
    uint64_t keep = UINT64_MAX;
    check(cudaMemPoolSetAttribute(pool, cudaMemPoolAttrReleaseThreshold, &keep),
          "cudaMemPoolSetAttribute");
    partials = static_cast<double *>(
        allocate(kReduceBlocks * static_cast<int64_t>(sizeof(double))));
    // cuBLASLt's handle and workspace come with the first GEMM (blasLt()): a
    // channel's device (communication beside the compute) never runs one.
  }

  ~CudaDevice() override {
    if (!activateQuietly())
      return; // the context is gone; nothing can be released any more
    blas.reset();
    events.clear();
    for (const TimedCall &t : timedCalls) {
      cudaEventDestroy(t.start);
      cudaEventDestroy(t.end);
    }
    for (cudaEvent_t e : spareEvents)
      cudaEventDestroy(e);
    if (anchor)
      cudaEventDestroy(anchor);
    if (partials)
      cudaFreeAsync(partials, stream);
    cudaStreamSynchronize(stream);
    cudaStreamDestroy(stream);
    (void)cudaGetLastError();
  }

  DeviceKind kind() const override { return DeviceKind::Cuda; }
  std::string name() const override { return label; }

  //===--- Memory ---------------------------------------------------------===//

  void *allocate(int64_t bytes) override {
    activate();
    void *p = nullptr;
    cudaError_t error = cudaMallocAsync(
        &p, static_cast<size_t>(std::max<int64_t>(bytes, 1)), stream);
    if (error == cudaErrorMemoryAllocation) {
      (void)cudaGetLastError();
      size_t freeBytes = 0, totalBytes = 0;
      cudaMemGetInfo(&freeBytes, &totalBytes);
      throw DeviceError("out of GPU memory on " + label + " allocating " +
                        std::to_string(bytes) + " bytes (" +
                        std::to_string(freeBytes >> 20) + " of " +
                        std::to_string(totalBytes >> 20) + " MiB free)");
    }
    checkCall(error, "cudaMallocAsync");
    std::lock_guard<std::mutex> lock(sizesMutex);
    int64_t size = std::max<int64_t>(bytes, 1);
    sizes[p] = size;
    live += size;
    peak = std::max(peak, live);
    return p;
  }
  int64_t peakBytes() const override {
    std::lock_guard<std::mutex> lock(sizesMutex);
    return peak;
  }
  void resetPeakBytes() override {
    std::lock_guard<std::mutex> lock(sizesMutex);
    peak = live;
  }
  void release(void *data) override {
    // From destructors: never throws. Stream-ordered, so work already
    // enqueued that reads `data` finishes first. A sticky error reappears
    // at the next checked call; anything else is cleared here so that it is
    // not blamed on that call.
    {
      std::lock_guard<std::mutex> lock(sizesMutex);
      auto it = sizes.find(data);
      if (it != sizes.end()) {
        live -= it->second;
        sizes.erase(it);
      }
    }
    if (!activateQuietly())
      return;
    cudaFreeAsync(data, stream);
    (void)cudaGetLastError();
  }
  void fillZero(void *data, int64_t bytes) override {
    if (bytes <= 0)
      return;
    activate();
    Timed timed(*this, "memset");
    checkCall(cudaMemsetAsync(data, 0, static_cast<size_t>(bytes), stream),
              "cudaMemsetAsync");
  }
  void fill(float *data, float value, int64_t n) override {
    launch("fill", b::Fill<float>{data, value, n});
  }
  void copy(void *dst, const void *src, int64_t bytes) override {
    if (bytes <= 0 || dst == src)
      return;
    activate();
    // Pool memory ignores peer access: between two GPUs (ranks r and r + 1
    // on a multi-GPU machine) only a peer copy works.
    Timed timed(*this, "copy");
    int dstDevice = ordinal, srcDevice = ordinal;
    if (multiGpu) {
      dstDevice = deviceOf(dst);
      srcDevice = deviceOf(src);
    }
    if (dstDevice != srcDevice && dstDevice >= 0 && srcDevice >= 0)
      checkCall(cudaMemcpyPeerAsync(dst, dstDevice, src, srcDevice,
                                    static_cast<size_t>(bytes), stream),
                "cudaMemcpyPeerAsync");
    else
      checkCall(cudaMemcpyAsync(dst, src, static_cast<size_t>(bytes),
                                cudaMemcpyDefault, stream),
                "cudaMemcpyAsync (device to device)");
  }
  void upload(void *dst, const void *host, int64_t bytes) override {
    if (bytes <= 0)
      return;
    activate();
    Timed timed(*this, "upload");
    checkCall(cudaMemcpyAsync(dst, host, static_cast<size_t>(bytes),
                              cudaMemcpyHostToDevice, stream),
              "cudaMemcpyAsync (host to device)");
  }
  void download(void *host, const void *src, int64_t bytes) override {
    if (bytes <= 0)
      return;
    activate();
    checkCall(cudaMemcpyAsync(host, src, static_cast<size_t>(bytes),
                              cudaMemcpyDeviceToHost, stream),
              "cudaMemcpyAsync (device to host)");
    checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  //===--- Ordering -------------------------------------------------------===//

  EventPtr record() override {
    activate();
    // Reuse an event nobody else holds: a wait enqueued on it has already
    // captured the point it was recorded at, so it may be recorded again.
    std::shared_ptr<CudaEvent> event;
    for (const std::shared_ptr<CudaEvent> &e : events)
      if (e.use_count() == 1) {
        event = e;
        break;
      }
    if (!event) {
      event = std::make_shared<CudaEvent>();
      events.push_back(event);
    }
    checkCall(cudaEventRecord(event->event, stream), "cudaEventRecord");
    return event;
  }
  void *nativeStream() override { return stream; }
  void wait(const EventPtr &event) override {
    if (!event)
      return;
    auto *cuda = dynamic_cast<CudaEvent *>(event.get());
    if (!cuda)
      throw DeviceError("a CUDA stream cannot wait for an event of another "
                        "kind of device");
    activate();
    checkCall(cudaStreamWaitEvent(stream, cuda->event, 0),
              "cudaStreamWaitEvent");
  }
  bool timeKernels(bool on) override {
    activate();
    if (on && !timing) {
      // Timing begins when this returns: the stream idle, the anchor event
      // recorded on it.
      checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
      if (!anchor)
        checkCall(cudaEventCreate(&anchor), "cudaEventCreate");
      checkCall(cudaEventRecord(anchor, stream), "cudaEventRecord");
    }
    timing = on;
    return true;
  }
  std::vector<KernelSpan> takeKernelSpans() override {
    std::vector<KernelSpan> spans;
    if (timedCalls.empty())
      return spans;
    activate();
    checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
    spans.reserve(timedCalls.size());
    for (TimedCall &t : timedCalls) {
      float fromAnchor = 0, length = 0;
      checkCall(cudaEventElapsedTime(&fromAnchor, anchor, t.start),
                "cudaEventElapsedTime");
      checkCall(cudaEventElapsedTime(&length, t.start, t.end),
                "cudaEventElapsedTime");
      spans.push_back({std::move(t.name), 1e-3 * fromAnchor, 1e-3 * length});
      spareEvents.push_back(t.start);
      spareEvents.push_back(t.end);
    }
    timedCalls.clear();
    return spans;
  }
  void synchronize() override {
    activate();
    checkCall(cudaStreamSynchronize(stream), "cudaStreamSynchronize");
  }

  //===--- Data movement and reductions -----------------------------------===//

  void copyRows(float *dst, const int64_t *dstRows, const float *src,
                const int64_t *srcRows, int64_t count, int64_t cols) override {
    launch("copy_rows",
           b::CopyRows<float>{dst, dstRows, src, srcRows, count, cols});
  }
  void packBf16(const float *x, uint16_t *out, int64_t n) override {
    launch("pack_bf16", b::ToBf16Bits{x, out, n});
  }
  void unpackBf16(const uint16_t *in, float *out, int64_t n) override {
    launch("unpack_bf16", b::FromBf16Bits{in, out, n});
  }
  void roundToBf16(float *data, int64_t n) override {
    launch("round_bf16", b::RoundBf16{data, n});
  }
  void scale(float *data, float alpha, int64_t n) override {
    launch("scale", b::Scale<float>{data, alpha, n});
  }
  void axpy(int64_t n, float alpha, const float *x, float *y) override {
    launch("axpy", b::Axpy<float>{alpha, x, y, n});
  }
  void residualBf16(const float *x, const float *branch, float *out,
                    int64_t n) override {
    launch("residual_bf16", b::ResidualBf16<float>{x, branch, out, n});
  }
  void residualBf16(const float *x, const uint16_t *branch, float *out,
                    int64_t n) override {
    launch("residual_bf16_in", b::ResidualBf16<uint16_t>{x, branch, out, n});
  }
  void add(DType type, void *out, const void *a, const void *bb,
           int64_t n) override {
    if (type == DType::F32)
      launch("add_f32", b::Add<float>{static_cast<float *>(out),
                                      static_cast<const float *>(a),
                                      static_cast<const float *>(bb), n});
    else if (type == DType::F64)
      launch("add_f64", b::Add<double>{static_cast<double *>(out),
                                       static_cast<const double *>(a),
                                       static_cast<const double *>(bb), n});
    else
      throw DeviceError(std::string("add of ") + nameOf(type) + " values");
  }
  void maximum(float *out, const float *a, const float *bb,
               int64_t n) override {
    launch("maximum", b::Maximum<float>{out, a, bb, n});
  }
  void sumSquaresInto(const float *x, int64_t n, double *acc) override {
    reduce("sum_squares", x, nullptr, n, true, 1.0, acc);
  }
  void maskedSumInto(const float *values, const float *mask, int64_t n,
                     double factor, double *acc) override {
    reduce("masked_sum", values, mask, n, false, factor, acc);
  }
  void addBias(float *y, const float *bias, int64_t rows,
               int64_t cols) override {
    launch("add_bias", b::AddBias<float>{y, bias, rows, cols});
  }
  void biasBackward(const float *dy, float *db, int64_t rows,
                    int64_t cols) override {
    columnSums("bias_backward_partials", "bias_backward_add",
               b::BiasTerms<float>{dy, cols}, rows, cols, db);
  }

  //===--- Kernels --------------------------------------------------------===//

  void gemm(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
            const float *A, const float *B, float beta, float *C) override {
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
  void gemmBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                Bf16Operand A, Bf16Operand B, float beta, float *C) override {
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
  void gemmBf16Out(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   float alpha, Bf16Operand A, Bf16Operand B,
                   uint16_t *C) override {
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
  void runBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               Bf16Operand A, Bf16Operand B, float beta, void *C,
               bool bf16Out) {
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
  uint16_t *toBf16(const float *x, int64_t n) {
    auto *out = static_cast<uint16_t *>(allocate(n * 2));
    try {
      launch("to_bf16", b::ToBf16Bits{x, out, n});
    } catch (...) {
      release(out);
      throw;
    }
    return out;
  }
  void rmsnormForward(const float *x, const float *w, float *y, float *rstd,
                      int64_t rows, int64_t cols) override {
    launchRows("rmsnorm_forward", rowwise::RmsnormForward<float>{
                                      x, w, y, rstd, rows, cols, kNormEps});
  }
  void rmsnormBackward(const float *x, const float *w, const float *rstd,
                       const float *dy, float *dx, float *dw, int64_t rows,
                       int64_t cols) override {
    // The weight gradient first: it reads x and dy, which dx may alias.
    columnSums("rmsnorm_backward_weight_partials",
               "rmsnorm_backward_weight_add",
               b::RmsnormWeightTerms<float>{x, rstd, dy, cols}, rows, cols, dw);
    launchRows("rmsnorm_backward",
               rowwise::RmsnormBackward<float>{x, w, rstd, dy, dx, rows, cols});
  }
  void rmsnormBackwardAddBf16(const uint16_t *x, const float *w,
                              const float *rstd, const float *dy, float *dx,
                              float *dw, int64_t rows, int64_t cols) override {
    columnSums("rmsnorm_backward_weight_partials_bf16",
               "rmsnorm_backward_weight_add_bf16",
               b::RmsnormWeightTerms<float, uint16_t>{x, rstd, dy, cols}, rows,
               cols, dw);
    launchRows("rmsnorm_backward_add_bf16",
               rowwise::RmsnormBackward<float, uint16_t, true>{x, w, rstd, dy,
                                                               dx, rows, cols});
  }
  void layernormBackwardAddBf16(const uint16_t *x, const float *w,
                                const float *mean, const float *rstd,
                                const float *dy, float *dx, float *dw,
                                float *db, int64_t rows,
                                int64_t cols) override {
    columnSums("layernorm_backward_params_partials_bf16",
               "layernorm_backward_params_add_bf16",
               b::LayernormParamTerms<float, uint16_t>{x, mean, rstd, dy, cols},
               rows, cols, dw, db);
    launchRows("layernorm_backward_add_bf16",
               rowwise::LayernormBackward<float, uint16_t, true>{
                   x, w, mean, rstd, dy, dx, rows, cols});
  }
  void layernormForward(const float *x, const float *w, const float *bias,
                        float *y, float *mean, float *rstd, int64_t rows,
                        int64_t cols) override {
    launchRows("layernorm_forward",
               rowwise::LayernormForward<float>{x, w, bias, y, mean, rstd, rows,
                                                cols, kNormEps});
  }
  void layernormBackward(const float *x, const float *w, const float *mean,
                         const float *rstd, const float *dy, float *dx,
                         float *dw, float *db, int64_t rows,
                         int64_t cols) override {
    columnSums("layernorm_backward_params_partials",
               "layernorm_backward_params_add",
               b::LayernormParamTerms<float>{x, mean, rstd, dy, cols}, rows,
               cols, dw, db);
    launchRows("layernorm_backward", rowwise::LayernormBackward<float>{
                                         x, w, mean, rstd, dy, dx, rows, cols});
  }
  void geluForward(const float *x, float *y, int64_t n) override {
    launch("gelu_forward", b::GeluForward<float>{x, y, n});
  }
  void geluBackward(const float *x, const float *dy, float *dx,
                    int64_t n) override {
    launch("gelu_backward", b::GeluBackward<float>{x, dy, dx, n});
  }
  void swigluForward(const float *g, const float *u, float *y,
                     int64_t n) override {
    launch("swiglu_forward", b::SwigluForward<float>{g, u, y, n});
  }
  void rmsnormForwardBf16(const float *x, const float *w, uint16_t *y,
                          float *rstd, int64_t rows, int64_t cols) override {
    launchRows("rmsnorm_forward_bf16",
               rowwise::RmsnormForward<float, uint16_t>{x, w, y, rstd, rows,
                                                        cols, kNormEps});
  }
  void layernormForwardBf16(const float *x, const float *w, const float *bias,
                            uint16_t *y, float *mean, float *rstd, int64_t rows,
                            int64_t cols) override {
    launchRows("layernorm_forward_bf16",
               rowwise::LayernormForward<float, uint16_t>{
                   x, w, bias, y, mean, rstd, rows, cols, kNormEps});
  }
  void geluForwardBf16(const float *x, uint16_t *y, int64_t n) override {
    launch("gelu_forward_bf16", b::GeluForward<float, uint16_t>{x, y, n});
  }
  void swigluForwardBf16(const float *g, const float *u, uint16_t *y,
                         int64_t n) override {
    launch("swiglu_forward_bf16",
           b::SwigluForward<float, uint16_t>{g, u, y, n});
  }
  void geluForwardBf16(const uint16_t *x, uint16_t *y, int64_t n) override {
    launch("gelu_forward_bf16_in",
           b::GeluForward<float, uint16_t, uint16_t>{x, y, n});
  }
  void swigluForwardBf16(const uint16_t *g, const uint16_t *u, uint16_t *y,
                         int64_t n) override {
    launch("swiglu_forward_bf16_in",
           b::SwigluForward<float, uint16_t, uint16_t>{g, u, y, n});
  }
  void swigluBackward(const float *g, const float *u, const float *dy,
                      float *dg, float *du, int64_t n) override {
    launch("swiglu_backward", b::SwigluBackward<float>{g, u, dy, dg, du, n});
  }
  void rope(float *x, const int64_t *positions, int64_t tokens, int64_t heads,
            int64_t dim, bool inverse) override {
    if (dim / 2 == 0)
      return;
    launch("rope",
           b::Rope<float>{x, x, positions, tokens, heads, dim, inverse});
  }
  void ropeBf16(const float *x, uint16_t *y, const int64_t *positions,
                int64_t tokens, int64_t heads, int64_t dim,
                bool inverse) override {
    launch("rope_bf16_out", b::Rope<float, uint16_t>{x, y, positions, tokens,
                                                     heads, dim, inverse});
  }
  void geluBackwardBf16(const uint16_t *x, const float *dy, uint16_t *dx,
                        int64_t n) override {
    launch("gelu_backward_bf16",
           b::GeluBackward<float, uint16_t, uint16_t>{x, dy, dx, n});
  }
  void swigluBackwardBf16(const uint16_t *g, const uint16_t *u, const float *dy,
                          uint16_t *dg, uint16_t *du, int64_t n) override {
    launch("swiglu_backward_bf16",
           b::SwigluBackward<float, uint16_t, uint16_t>{g, u, dy, dg, du, n});
  }
  void attentionForward(const float *q, const float *k, const float *v,
                        float *o, float *lse, const tiles::PlanView &plan,
                        int64_t heads, int64_t d) override {
    fp32AttentionForward(flash::shapeOf(plan, heads, d), q, k, v, o, lse);
  }
  void attentionBackward(const float *q, const float *k, const float *v,
                         const float *o, const float *lse, const float *dout,
                         float *dq, float *dk, float *dv,
                         const tiles::PlanView &plan, int64_t heads,
                         int64_t d) override {
    fp32AttentionBackward(flash::shapeOf(plan, heads, d), q, k, v, o, lse, dout,
                          dq, dk, dv);
  }
  void attentionForwardBf16(const uint16_t *q, const uint16_t *k,
                            const uint16_t *v, uint16_t *o, float *lse,
                            const tiles::PlanView &plan, int64_t heads,
                            int64_t d) override {
    const flash::Shape shape = flash::shapeOf(plan, heads, d, true);
    if (tensorCores(shape, {q, k, v, o})) {
      Timed timed(*this, "attention_forward_bf16_mma");
      checkMma(mmaAttentionForward(shape, q, k, v, o, lse, stream));
      return;
    }
    // The fp32 programs with the same rounding, on fp32 copies.
    const int64_t nq = plan.Tq * heads * d, nk = plan.Tk * heads * d;
    const Tensor Q = unpacked(q, nq), K = unpacked(k, nk), V = unpacked(v, nk);
    Tensor O = scratch(nq);
    fp32AttentionForward(shape, Q.data(), K.data(), V.data(), O.data(), lse);
    packBf16(O.data(), o, nq);
  }
  void attentionBackwardBf16(const uint16_t *q, const uint16_t *k,
                             const uint16_t *v, const uint16_t *o,
                             const float *lse, const uint16_t *dout, float *dq,
                             float *dk, float *dv, const tiles::PlanView &plan,
                             int64_t heads, int64_t d) override {
    const flash::Shape shape = flash::shapeOf(plan, heads, d, true);
    if (tensorCores(shape, {q, k, v, o, dout})) {
      Tensor D = scratch(heads * plan.Tq);
      launch("attention_backward_rowdot_bf16",
             flash::RowDot<uint16_t>{o, dout, D.data(), plan.Tq, heads, d});
      Timed timed(*this, "attention_backward_bf16_mma (dq, dk and dv)");
      checkMma(mmaAttentionBackward(shape, q, k, v, lse, dout, D.data(), dq, dk,
                                    dv, stream));
      return;
    }
    const int64_t nq = plan.Tq * heads * d, nk = plan.Tk * heads * d;
    const Tensor Q = unpacked(q, nq), K = unpacked(k, nk), V = unpacked(v, nk),
                 O = unpacked(o, nq), dO = unpacked(dout, nq);
    fp32AttentionBackward(shape, Q.data(), K.data(), V.data(), O.data(), lse,
                          dO.data(), dq, dk, dv);
  }
  void embeddingForward(const int64_t *ids, int64_t n, const float *table,
                        int64_t vb, int64_t ve, int64_t hidden,
                        float *out) override {
    launch("embedding_forward",
           b::EmbeddingForward<float>{ids, table, out, n, vb, ve, hidden});
  }
  void embeddingForwardBf16(const int64_t *ids, int64_t n,
                            const uint16_t *table, int64_t vb, int64_t ve,
                            int64_t hidden, float *out) override {
    launch("embedding_forward_bf16", b::EmbeddingForward<float, uint16_t>{
                                         ids, table, out, n, vb, ve, hidden});
  }
  void embeddingBackward(const TokenGroupsView &groups, const float *dout,
                         int64_t hidden, float *dtable) override {
    launch("embedding_backward",
           b::EmbeddingBackwardGroups<float>{groups, dout, dtable, hidden});
  }
  void crossEntropyRowMax(const float *logits, int64_t n, int64_t vl,
                          float *rowMax) override {
    launchRows("cross_entropy_row_max",
               rowwise::CrossEntropyRowMax<float>{logits, rowMax, n, vl});
  }
  void crossEntropySums(const float *logits, const int64_t *targets, int64_t n,
                        int64_t vl, int64_t vb, const float *gmax,
                        float *sumExp, float *targetLogit) override {
    launchRows("cross_entropy_sums",
               rowwise::CrossEntropySums<float>{logits, targets, gmax, sumExp,
                                                targetLogit, n, vl, vb});
  }
  void crossEntropyLoss(const float *gmax, const float *gsum,
                        const float *gtarget, int64_t n, float *loss) override {
    launch("cross_entropy_loss",
           b::CrossEntropyLoss<float>{gmax, gsum, gtarget, loss, n});
  }
  void crossEntropyBackward(const float *logits, const int64_t *targets,
                            int64_t n, int64_t vl, int64_t vb,
                            const float *gmax, const float *gsum,
                            const float *scaleRows, float *dlogits) override {
    launch("cross_entropy_backward",
           b::CrossEntropyBackward<float>{logits, targets, gmax, gsum,
                                          scaleRows, dlogits, n, vl, vb});
  }
  void crossEntropyRowMaxBf16(const uint16_t *logits, int64_t n, int64_t vl,
                              float *rowMax) override {
    launchRows(
        "cross_entropy_row_max_bf16",
        rowwise::CrossEntropyRowMax<float, uint16_t>{logits, rowMax, n, vl});
  }
  void crossEntropySumsBf16(const uint16_t *logits, const int64_t *targets,
                            int64_t n, int64_t vl, int64_t vb,
                            const float *gmax, float *sumExp,
                            float *targetLogit) override {
    launchRows("cross_entropy_sums_bf16",
               rowwise::CrossEntropySums<float, uint16_t>{
                   logits, targets, gmax, sumExp, targetLogit, n, vl, vb});
  }
  void crossEntropyBackwardBf16(const uint16_t *logits, const int64_t *targets,
                                int64_t n, int64_t vl, int64_t vb,
                                const float *gmax, const float *gsum,
                                const float *scaleRows,
                                uint16_t *dlogits) override {
    launch("cross_entropy_backward_bf16",
           b::CrossEntropyBackward<float, uint16_t, uint16_t>{
               logits, targets, gmax, gsum, scaleRows, dlogits, n, vl, vb});
  }
  void adamw(float *p, const float *g, float *m, float *v, int64_t n,
             const AdamWStep &s) override {
    launch("adamw", b::AdamW<float>{p, g, m, v, n, s.lr, s.beta1, s.beta2,
                                    s.eps, s.weightDecay, s.biasCorrection1(),
                                    s.biasCorrection2(), s.gradScale});
  }

private:
  /// Makes this GPU the calling thread's current one, asking the runtime
  /// which is current (a cache would miss a switch made by NCCL, cuBLASLt
  /// or a probe on this thread: GpuSelection.h).
  void activate() const {
    if (!gpu::makeCurrent(selectionApi(), ordinal))
      check(cudaSetDevice(ordinal), "cudaSetDevice");
  }
  /// The same for destructors: false (never a throw) when it fails.
  bool activateQuietly() const {
    return gpu::makeCurrent(selectionApi(), ordinal);
  }

  /// The cuBLASLt handle and its 32 MiB workspace, made at the first GEMM
  /// (after activate()).
  CublasLtGemm &blasLt() {
    if (!blas)
      blas = std::make_unique<CublasLtGemm>(stream);
    return *blas;
  }

  /// Throws DeviceError naming the call, this GPU and the last kernel
  /// launched (an asynchronous fault surfaces at a later call). The text is
  /// built only on failure.
  void checkCall(cudaError_t error, const char *call) const {
    if (error == cudaSuccess)
      return;
    (void)cudaGetLastError();
    throw DeviceError("CUDA error in " + std::string(call) + " on " + label +
                      (lastKernel
                           ? std::string(" (after kernel ") + lastKernel + ")"
                           : std::string()) +
                      ": " + errorText(error));
  }

  /// The GPU that owns `pointer` (-1 for host or unknown memory).
  static int deviceOf(const void *pointer) {
    cudaPointerAttributes attributes{};
    if (cudaPointerGetAttributes(&attributes, pointer) != cudaSuccess) {
      (void)cudaGetLastError();
      return -1;
    }
    return attributes.type == cudaMemoryTypeDevice ? attributes.device : -1;
  }

  template <typename F>
  void launch(const char *name, const F &body, int threads = 256) {
    int64_t n = body.count();
    if (n <= 0)
      return;
    activate();
    Timed timed(*this, name);
    int64_t blocks =
        std::min<int64_t>((n + threads - 1) / threads, int64_t(1) << 20);
    eachIndex<<<static_cast<unsigned>(blocks), threads, 0, stream>>>(body, n);
    lastKernel = name;
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
      throw DeviceError("CUDA error in kernel " + std::string(name) + " on " +
                        label + ": " + errorText(error));
  }

  /// Column sums of `terms` over `rows`, added to out0 (and out1): the
  /// chunks' partials in stream-ordered scratch, then summed per column.
  template <typename Terms>
  void columnSums(const char *partialsName, const char *addName,
                  const Terms &terms, int64_t rows, int64_t cols, float *out0,
                  float *out1 = nullptr) {
    if (rows <= 0 || cols <= 0)
      return;
    const int64_t chunks = b::columnChunks(rows);
    auto *chunkSums = static_cast<double *>(
        allocate(Terms::kCount * chunks * cols * int64_t(sizeof(double))));
    try {
      launch(partialsName,
             b::ColumnPartials<Terms>{terms, chunkSums, rows, cols});
      launch(addName, b::AddColumnPartials<float>{chunkSums, out0, out1, chunks,
                                                  cols, Terms::kCount});
    } catch (...) {
      release(chunkSums);
      throw;
    }
    release(chunkSums); // in stream order: after the kernels that read it
  }

  /// A row program of RowBodies.h: a block per row, up to 2^20 blocks
  /// (grid-strided past that).
  template <typename Program>
  void launchRows(const char *name, const Program &program) {
    const int64_t n = program.rows();
    if (n <= 0)
      return;
    activate();
    Timed timed(*this, name);
    const int64_t blocks = std::min<int64_t>(n, int64_t(1) << 20);
    eachRow<<<static_cast<unsigned>(blocks), rowwise::kRowBlock, 0, stream>>>(
        program);
    lastKernel = name;
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
      throw DeviceError("CUDA error in kernel " + std::string(name) + " on " +
                        label + ": " + errorText(error));
  }

  /// A block program over its blocks and `heads`, with the dynamic shared
  /// memory it asks for (past 48 KiB only by opting in).
  template <typename Program>
  void launchBlocks(const char *name, const Program &program, int64_t heads) {
    const int64_t blocks = program.blocks();
    if (blocks <= 0 || heads <= 0)
      return;
    if (heads > 65535)
      throw DeviceError(std::string(name) + ": " + std::to_string(heads) +
                        " heads exceed a grid's 65535");
    activate();
    const int64_t bytes = program.sharedFloats() * int64_t(sizeof(float));
    if (bytes > sharedOptIn)
      throw DeviceError(std::string(name) + " needs " + std::to_string(bytes) +
                        " bytes of shared memory per block, more than the " +
                        std::to_string(sharedOptIn) + " of " + label +
                        "; use more heads (a smaller head dimension)");
    // Past 48 KiB the kernel's limit is raised, once per GPU, to the GPU's
    // opt-in maximum: never lowered for a smaller head dimension while a
    // rank thread sharing this GPU launches a larger one (OncePerDevice.h).
    if (bytes > 48 * 1024)
      checkCall(
          static_cast<cudaError_t>(sharedMemoryOptIns().ensure(
              reinterpret_cast<const void *>(&eachBlock<Program>), ordinal,
              [&] {
                return static_cast<int>(cudaFuncSetAttribute(
                    eachBlock<Program>,
                    cudaFuncAttributeMaxDynamicSharedMemorySize,
                    static_cast<int>(sharedOptIn)));
              })),
          "cudaFuncSetAttribute");
    dim3 grid(static_cast<unsigned>(blocks), static_cast<unsigned>(heads));
    Timed timed(*this, name);
    eachBlock<<<grid, flash::kThreads, static_cast<size_t>(bytes), stream>>>(
        program);
    lastKernel = name;
    cudaError_t error = cudaGetLastError();
    if (error != cudaSuccess)
      throw DeviceError("CUDA error in kernel " + std::string(name) + " on " +
                        label + ": " + errorText(error));
  }

  void reduce(const char *name, const float *x, const float *mask, int64_t n,
              bool squares, double factor, double *acc) {
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

  /// n floats of stream-ordered scratch, released in stream order (after
  /// the work enqueued before) with the tensor.
  Tensor scratch(int64_t n) {
    return Tensor::empty(*this, std::max<int64_t>(n, 1));
  }
  /// n bf16 values as floats, in scratch.
  Tensor unpacked(const uint16_t *bits, int64_t n) {
    Tensor values = scratch(n);
    unpackBf16(bits, values.data(), n);
    return values;
  }

  /// The fp32 programs of FlashBodies.h (with the bf16 rounding when
  /// shape.bf16 is set).
  void fp32AttentionForward(const flash::Shape &shape, const float *q,
                            const float *k, const float *v, float *o,
                            float *lse) {
    checkAttention(shape.d);
    flash::withHeadDim(shape.d, [&](auto dim) {
      launchBlocks("attention_forward",
                   flash::Forward<dim.value>{{shape, false}, q, k, v, o, lse},
                   shape.heads);
    });
  }
  void fp32AttentionBackward(const flash::Shape &shape, const float *q,
                             const float *k, const float *v, const float *o,
                             const float *lse, const float *dout, float *dq,
                             float *dk, float *dv) {
    checkAttention(shape.d);
    Tensor D = scratch(shape.heads * shape.plan.Tq);
    launch("attention_backward_rowdot",
           flash::RowDot<float>{o, dout, D.data(), shape.plan.Tq, shape.heads,
                                shape.d});
    flash::withHeadDim(shape.d, [&](auto dim) {
      launchBlocks("attention_backward_dq",
                   flash::BackwardQuery<dim.value>{
                       {shape, false}, q, k, v, lse, dout, D.data(), dq},
                   shape.heads);
      launchBlocks("attention_backward_dkdv",
                   flash::BackwardKey<dim.value>{
                       {shape, true}, q, k, v, lse, dout, D.data(), dk, dv},
                   shape.heads);
    });
  }

  /// Whether bf16 attention of this shape runs on the tensor cores: a head
  /// dimension FlashMmaBodies.h takes, within this GPU's limits, and every
  /// buffer 16-byte aligned (its rows move 16 bytes at a time).
  bool tensorCores(const flash::Shape &shape,
                   std::initializer_list<const void *> buffers) {
    if (!flashmma::supportsHeadDim(shape.d) ||
        flashmma::sharedBytes(shape.d) > sharedOptIn)
      return false;
    for (const void *p : buffers)
      if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
        return false;
    if (shape.heads > 65535)
      throw DeviceError("attention: " + std::to_string(shape.heads) +
                        " heads exceed a grid's 65535");
    activate();
    return true;
  }
  void checkMma(const MmaLaunch &launched) {
    if (launched.kernel)
      lastKernel = launched.kernel;
    if (launched.error != cudaSuccess)
      throw DeviceError(
          "CUDA error in kernel " +
          std::string(launched.kernel ? launched.kernel : "attention") +
          " on " + label + ": " + errorText(launched.error));
  }

  /// Attention at head dimension d fits this GPU's limits (both ways).
  void checkAttention(int64_t d) const {
    const std::string problem = flash::attentionProblem(d, sharedOptIn);
    if (!problem.empty())
      throw DeviceError(problem + " (" + label + ")");
  }

  int ordinal;
  bool multiGpu;
  int64_t sharedOptIn = 48 * 1024;
  std::string label;
  cudaStream_t stream = nullptr;
  std::vector<std::shared_ptr<CudaEvent>> events;
  double *partials = nullptr;
  std::unique_ptr<CublasLtGemm> blas;
  const char *lastKernel = nullptr;

  /// Kernel timing (Device::timeKernels): an event pair around each launch,
  /// read back by takeKernelSpans; events are reused.
  struct TimedCall {
    std::string name;
    cudaEvent_t start, end;
  };
  bool timing = false;
  cudaEvent_t anchor = nullptr;
  std::vector<TimedCall> timedCalls;
  std::vector<cudaEvent_t> spareEvents;

  cudaEvent_t spareEvent() {
    if (spareEvents.empty()) {
      cudaEvent_t e;
      checkCall(cudaEventCreate(&e), "cudaEventCreate");
      return e;
    }
    cudaEvent_t e = spareEvents.back();
    spareEvents.pop_back();
    return e;
  }
  /// Times the launches of its scope while timing is on (the name made
  /// only then: `name` is a string or a function giving one). Construct
  /// after activate().
  class Timed {
  public:
    template <typename Name>
    Timed(CudaDevice &dev, const Name &name) : dev(dev), on(dev.timing) {
      if (!on)
        return;
      if constexpr (std::is_invocable_v<Name>)
        call.name = name();
      else
        call.name = name;
      call.start = dev.spareEvent();
      call.end = dev.spareEvent();
      dev.checkCall(cudaEventRecord(call.start, dev.stream), "cudaEventRecord");
    }
    ~Timed() {
      if (!on)
        return;
      // No throwing here: a failed record leaves the pair out.
      if (cudaEventRecord(call.end, dev.stream) == cudaSuccess)
        dev.timedCalls.push_back(std::move(call));
      else
        (void)cudaGetLastError();
    }
    Timed(const Timed &) = delete;
    Timed &operator=(const Timed &) = delete;

  private:
    CudaDevice &dev;
    bool on;
    TimedCall call{};
  };
  static std::string gemmName(const char *kind, bool ta, bool tb, int64_t M,
                              int64_t N, int64_t K) {
    return std::string(kind) + " " + std::to_string(M) + "x" +
           std::to_string(N) + "x" + std::to_string(K) + " " +
           (ta ? "T" : "N") + (tb ? "T" : "N");
  }
  /// Bytes allocated through this device: live now, and the most at once
  /// since resetPeakBytes().
  mutable std::mutex sizesMutex;
  std::unordered_map<void *, int64_t> sizes;
  int64_t live = 0, peak = 0;
};

} // namespace

std::unique_ptr<Device> makeDevice(int ordinal) {
  return std::make_unique<CudaDevice>(ordinal);
}

} // namespace mimo::device::cuda
