//===- CudaDeviceImpl.cuh - The CUDA device's class ------------*- CUDA -*-===//
//
// Private to device/cuda: the CudaDevice class, its launch helpers and the
// generic kernels they launch (a grid-stride loop over indices, a block per
// row, a block per (tile, head)). Its operations are defined by op family:
// CudaDevice.cu (memory, copies, ordering, kernel timing), CudaDeviceGemm.cu
// (cuBLASLt GEMMs), CudaDeviceElementwise.cu (per-index kernels),
// CudaDeviceReductions.cu (norms, cross-entropy, sums: fixed trees, no
// atomics), CudaDeviceAttention.cu (flash attention, fp32 and tensor-core
// bf16).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_CUH
#define MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_CUH

#include "runtime/device/FlashBodies.h"
#include "runtime/device/FlashMmaBodies.h"
#include "runtime/device/KernelBodies.h"
#include "runtime/device/OncePerDevice.h"
#include "runtime/device/RowBodies.h"
#include "runtime/device/Tensor.h"
#include "runtime/device/cuda/CudaCheck.h"
#include "runtime/device/cuda/CudaDevice.h"
#include "runtime/device/cuda/CudaGemm.h"
#include "runtime/device/cuda/Cudnn.h"
#include "runtime/device/cuda/CudnnAttention.h"
#include "runtime/device/cuda/FlashMma.h"

#include <cuda_runtime.h>

#include <algorithm>
#include <cstdint>
#include <initializer_list>
#include <memory>
#include <mutex>
#include <optional>
#include <set>
#include <string>
#include <type_traits>
#include <unordered_map>
#include <vector>

namespace mimo::device::cuda::detail {

namespace b = mimo::device::bodies;

inline constexpr int kReduceThreads = 256;
inline constexpr int kReduceBlocks = 256;

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
  CudaDevice(int ordinal, AttentionChoice attention)
      : ordinal(ordinal), multiGpu(cudaStatus().devices > 1),
        attentionChoice(attention) {
    activate();
    cudaDeviceProp props{};
    check(cudaGetDeviceProperties(&props, ordinal), "cudaGetDeviceProperties");
    computeMajor = props.major;
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
    cudnnGraphs.reset();
    if (cudnnHandle)
      cudnnLibrary().api.destroy(cudnnHandle);
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

  void *allocate(int64_t bytes) override;
  int64_t peakBytes() const override;
  void resetPeakBytes() override;
  void release(void *data) override;
  void fillZero(void *data, int64_t bytes) override;
  void fill(float *data, float value, int64_t n) override;
  void copy(void *dst, const void *src, int64_t bytes) override;
  void upload(void *dst, const void *host, int64_t bytes) override;
  void download(void *host, const void *src, int64_t bytes) override;

  //===--- Ordering -------------------------------------------------------===//

  EventPtr record() override;
  void *nativeStream() override { return stream; }
  void wait(const EventPtr &event) override;
  bool timeKernels(bool on) override;
  std::vector<KernelSpan> takeKernelSpans() override;
  void synchronize() override;

  //===--- Data movement and reductions -----------------------------------===//

  void copyRows(float *dst, const int64_t *dstRows, const float *src,
                const int64_t *srcRows, int64_t count, int64_t cols) override;
  void gatherRows(DType type, void *dst, const void *src, const int64_t *rows,
                  const float *weights, int64_t count, int64_t cols) override;
  void scatterAddRows(float *dst, const int64_t *rows, const float *src,
                      const float *weights, int64_t count,
                      int64_t cols) override;
  void rowDots(const float *a, const int64_t *rows, const float *b,
               int64_t count, int64_t cols, float *out) override;
  void packBf16(const float *x, uint16_t *out, int64_t n) override;
  void unpackBf16(const uint16_t *in, float *out, int64_t n) override;
  void roundToBf16(float *data, int64_t n) override;
  void scale(float *data, float alpha, int64_t n) override;
  void axpy(int64_t n, float alpha, const float *x, float *y) override;
  void residualBf16(const float *x, const float *branch, float *out,
                    int64_t n) override;
  void residualBf16(const float *x, const uint16_t *branch, float *out,
                    int64_t n) override;
  void add(DType type, void *out, const void *a, const void *bb,
           int64_t n) override;
  void maximum(float *out, const float *a, const float *bb, int64_t n) override;
  void sumSquaresInto(const float *x, int64_t n, double *acc) override;
  void maskedSumInto(const float *values, const float *mask, int64_t n,
                     double factor, double *acc) override;
  void addBias(float *y, const float *bias, int64_t rows,
               int64_t cols) override;
  void biasBackward(const float *dy, float *db, int64_t rows,
                    int64_t cols) override;

  //===--- Kernels --------------------------------------------------------===//

  void gemmF32(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               const float *A, const float *B, float beta, float *C) override;
  void gemmBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
                Bf16Operand A, Bf16Operand B, float beta, float *C) override;
  void gemmBf16Out(bool ta, bool tb, int64_t M, int64_t N, int64_t K,
                   float alpha, Bf16Operand A, Bf16Operand B,
                   uint16_t *C) override;
  /// fp32 operands in bf16 (stream-ordered scratch; bf16 ones as they are),
  /// then cuBLASLt's bf16 GEMM with fp32 accumulation into fp32 C, or bf16
  /// C (bf16Out).
  void runBf16(bool ta, bool tb, int64_t M, int64_t N, int64_t K, float alpha,
               Bf16Operand A, Bf16Operand B, float beta, void *C, bool bf16Out);
  /// n values rounded to bf16, in new stream-ordered scratch.
  uint16_t *toBf16(const float *x, int64_t n);
  void rmsnormForwardF32(const float *x, const float *w, float *y, float *rstd,
                         int64_t rows, int64_t cols, float eps) override;
  void rmsnormBackwardF32(const float *x, const float *w, const float *rstd,
                          const float *dy, float *dx, float *dw, int64_t rows,
                          int64_t cols) override;
  void rmsnormBackwardAddBf16(const uint16_t *x, const float *w,
                              const float *rstd, const float *dy, float *dx,
                              float *dw, int64_t rows, int64_t cols) override;
  void layernormBackwardAddBf16(const uint16_t *x, const float *w,
                                const float *mean, const float *rstd,
                                const float *dy, float *dx, float *dw,
                                float *db, int64_t rows, int64_t cols) override;
  void layernormForwardF32(const float *x, const float *w, const float *bias,
                           float *y, float *mean, float *rstd, int64_t rows,
                           int64_t cols, float eps) override;
  void layernormBackwardF32(const float *x, const float *w, const float *mean,
                            const float *rstd, const float *dy, float *dx,
                            float *dw, float *db, int64_t rows,
                            int64_t cols) override;
  void geluForwardF32(const float *x, float *y, int64_t n, Gelu kind) override;
  void geluBackwardF32(const float *x, const float *dy, float *dx, int64_t n,
                       Gelu kind) override;
  void swigluForwardF32(const float *g, const float *u, float *y,
                        int64_t n) override;
  void rmsnormForwardBf16(const float *x, const float *w, uint16_t *y,
                          float *rstd, int64_t rows, int64_t cols,
                          float eps) override;
  void layernormForwardBf16(const float *x, const float *w, const float *bias,
                            uint16_t *y, float *mean, float *rstd, int64_t rows,
                            int64_t cols, float eps) override;
  void geluForwardBf16(const float *x, uint16_t *y, int64_t n,
                       Gelu kind) override;
  void swigluForwardBf16(const float *g, const float *u, uint16_t *y,
                         int64_t n) override;
  void geluForwardBf16(const uint16_t *x, uint16_t *y, int64_t n,
                       Gelu kind) override;
  void swigluForwardBf16(const uint16_t *g, const uint16_t *u, uint16_t *y,
                         int64_t n) override;
  void swigluBackwardF32(const float *g, const float *u, const float *dy,
                         float *dg, float *du, int64_t n) override;
  void ropeTable(const int64_t *positions, int64_t tokens, int64_t dim,
                 const RopeSpec &spec, double *table) override;
  void rope(const float *x, DType out, void *y, const double *table,
            int64_t tokens, int64_t heads, int64_t dim, bool inverse) override;
  void repeatKv(DType type, const void *x, void *y, int64_t rows,
                int64_t groups, int64_t repeat, int64_t dim) override;
  void attentionMerge(float *o, float *lse, const float *ob, const float *lseb,
                      int64_t rows, int64_t heads, int64_t d) override;
  void sumKvGroups(const float *dy, float *y, int64_t rows, int64_t groups,
                   int64_t repeat, int64_t dim) override;
  void geluBackwardBf16(const uint16_t *x, const float *dy, uint16_t *dx,
                        int64_t n, Gelu kind) override;
  void swigluBackwardBf16(const uint16_t *g, const uint16_t *u, const float *dy,
                          uint16_t *dg, uint16_t *du, int64_t n) override;
  void attentionForward(const AttentionArgs &a, void *o, float *lse) override;
  void attentionBackward(const AttentionArgs &a, const void *o,
                         const float *lse, const void *dout, float *dq,
                         float *dk, float *dv) override;
  std::string attentionBackendName(const AttentionArgs &a) override;
  void embeddingForwardF32(const int64_t *ids, int64_t n, const float *table,
                           int64_t vb, int64_t ve, int64_t hidden,
                           float *out) override;
  void embeddingForwardBf16(const int64_t *ids, int64_t n,
                            const uint16_t *table, int64_t vb, int64_t ve,
                            int64_t hidden, float *out) override;
  void embeddingBackward(const TokenGroupsView &groups, const float *dout,
                         int64_t hidden, float *dtable) override;
  void crossEntropyRowMaxF32(const float *logits, int64_t n, int64_t vl,
                             float *rowMax) override;
  void crossEntropySumsF32(const float *logits, const int64_t *targets,
                           int64_t n, int64_t vl, int64_t vb, const float *gmax,
                           float *sumExp, float *targetLogit) override;
  void crossEntropyLoss(const float *gmax, const float *gsum,
                        const float *gtarget, int64_t n, float *loss) override;
  void crossEntropyBackwardF32(const float *logits, const int64_t *targets,
                               int64_t n, int64_t vl, int64_t vb,
                               const float *gmax, const float *gsum,
                               const float *scaleRows, float *dlogits) override;
  void crossEntropyRowMaxBf16(const uint16_t *logits, int64_t n, int64_t vl,
                              float *rowMax) override;
  void crossEntropySumsBf16(const uint16_t *logits, const int64_t *targets,
                            int64_t n, int64_t vl, int64_t vb,
                            const float *gmax, float *sumExp,
                            float *targetLogit) override;
  void crossEntropyBackwardBf16(const uint16_t *logits, const int64_t *targets,
                                int64_t n, int64_t vl, int64_t vb,
                                const float *gmax, const float *gsum,
                                const float *scaleRows,
                                uint16_t *dlogits) override;
  void adamw(float *p, const float *g, float *m, float *v, int64_t n,
             const AdamWStep &s) override;

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
              bool squares, double factor, double *acc);

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

  /// The cuDNN graph shape of `a` when cuDNN runs it: the choice allows it,
  /// the library is loaded (--attention cudnn without it: DeviceError),
  /// cuDNN takes the call (cudnnAttentionShape), every buffer is 16-byte
  /// aligned, and no earlier call of the shape failed to build under auto.
  std::optional<CudnnAttentionShape>
  cudnnShapeFor(const AttentionArgs &a, bool backward,
                std::initializer_list<const void *> buffers);
  /// Runs a call on cuDNN; false when its graph cannot be built under
  /// --attention auto (said once per shape; mimo's kernels take it).
  bool cudnnForward(const CudnnAttentionShape &shape, const AttentionArgs &a,
                    void *o, float *lse);
  bool cudnnBackward(const CudnnAttentionShape &shape, const AttentionArgs &a,
                     const void *o, const float *lse, const void *dout,
                     float *dq, float *dk, float *dv);
  /// The device's cuDNN graphs (its handle made on first use).
  CudnnAttention &cudnn();
  /// Under auto: a shape whose graph cuDNN refused, kept out from now on.
  void refuseCudnn(const CudnnAttentionShape &shape, bool backward,
                   const std::string &why);

  /// mimo's kernels (one key head per query head): the tensor cores under
  /// bf16 where tensorCores() says so, else the fp32 programs.
  void mimoAttentionForward(const AttentionArgs &a, void *o, float *lse);
  void mimoAttentionBackward(const AttentionArgs &a, const void *o,
                             const float *lse, const void *dout, float *dq,
                             float *dk, float *dv);
  /// The fp32 programs of FlashBodies.h (with the bf16 rounding when
  /// shape.bf16 is set).
  void fp32AttentionForward(const flash::Shape &shape, const float *q,
                            const float *k, const float *v, float *o,
                            float *lse);
  void fp32AttentionBackward(const flash::Shape &shape, const float *q,
                             const float *k, const float *v, const float *o,
                             const float *lse, const float *dout, float *dq,
                             float *dk, float *dv);

  /// Whether bf16 attention of this shape runs on the tensor cores: a head
  /// dimension FlashMmaBodies.h takes, within this GPU's limits, and every
  /// buffer 16-byte aligned (its rows move 16 bytes at a time).
  bool tensorCores(const flash::Shape &shape,
                   std::initializer_list<const void *> buffers);
  void checkMma(const MmaLaunch &launched);

  /// Attention at head dimension d fits this GPU's limits (both ways).
  void checkAttention(int64_t d) const;

  int ordinal;
  bool multiGpu;
  AttentionChoice attentionChoice;
  int computeMajor = 0;
  cudnnHandle_t cudnnHandle = nullptr;
  std::unique_ptr<CudnnAttention> cudnnGraphs;
  std::set<CudnnAttentionShape> cudnnRefused[2]; // forward, backward
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

} // namespace mimo::device::cuda::detail

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDADEVICEIMPL_CUH
