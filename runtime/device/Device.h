//===- Device.h - The device interface --------------------------*- C++ -*-===//
//
// docs/gpu.md. The model, the executor and the communicators compute, copy and
// order work only through this interface, over buffers the device
// allocates: `cpu/` runs the fp32 reference kernels of cpu/Kernels.h on the
// host, `cuda/` runs CUDA kernels and cuBLASLt on a GPU. The semantics of
// every kernel are documented once, in cpu/Kernels.h. The ops take their
// buffers' element types as parameters (DType: fp32, or bf16 bits under
// precision "bf16"); Device.cpp maps each combination onto the kernel of
// those types, the protected members a device implements.
//
// Ordering: every call is enqueued on the device's one stream and returns
// at once (the CPU device simply runs it). `record()` marks the point the
// stream has reached; `wait(e)` makes later work of this device wait for
// `e`, possibly recorded by another device (another rank's stream), which
// is how ranks sharing a GPU hand buffers to each other without a host
// synchronisation. Only download() and synchronize() wait on the host.
//
// Pointers passed to kernels are this device's memory (index arrays
// included); `host` pointers are host memory.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_DEVICE_H
#define MIMO_RUNTIME_DEVICE_DEVICE_H

#include "runtime/device/Activation.h"
#include "runtime/device/AttentionTiles.h"
#include "runtime/device/DType.h"
#include "runtime/device/RopeSpec.h"
#include "runtime/device/TokenGroups.h"

#include <cmath>
#include <cstdint>
#include <memory>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimo::device {

enum class DeviceKind { Cpu, Cuda };

/// A point in a device's stream of work (opaque; see Device::record).
class Event {
public:
  virtual ~Event() = default;
  /// Whether the work before it has finished, asked without waiting (from
  /// any thread; DeviceError when the device reports a fault).
  virtual bool reached() const { return true; }
};
using EventPtr = std::shared_ptr<Event>;

/// A device failure: an allocation that does not fit, a CUDA error (naming
/// the kernel or call), a shape a kernel cannot take.
class DeviceError : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// One AdamW step (decoupled weight decay, bias correction): with
/// g = grad * gradScale (the clipping coefficient),
/// m = b1 m + (1-b1) g; v = b2 v + (1-b2) g^2;
/// p -= lr * (m / bc1 / (sqrt(v / bc2) + eps) + weightDecay * p),
/// bc1 = 1 - b1^step, bc2 = 1 - b2^step (step >= 1).
struct AdamWStep {
  double lr = 0, beta1 = 0.9, beta2 = 0.999, eps = 1e-8, weightDecay = 0;
  int64_t step = 1;
  double gradScale = 1;
  double biasCorrection1() const {
    return 1.0 - std::pow(beta1, static_cast<double>(step));
  }
  double biasCorrection2() const {
    return 1.0 - std::pow(beta2, static_cast<double>(step));
  }
};

/// An operand of a bf16 GEMM or lookup: fp32 values (rounded to bf16 where
/// read) or bfloat16 bits (a bf16 buffer, e.g. precision "bf16"'s working
/// weights). Exactly one is set.
struct Bf16Operand {
  const float *f32 = nullptr;
  const uint16_t *bits = nullptr;
  Bf16Operand(const float *values) : f32(values) {}
  Bf16Operand(const uint16_t *bf16) : bits(bf16) {}
};

/// One kernel, GEMM or copy a device ran, timed on the device itself
/// (Device::timeKernels): its start, in seconds after timing began, and its
/// duration.
struct KernelSpan {
  std::string name;
  double startSeconds = 0, seconds = 0;
};

/// Which attention a CUDA device runs (mimo-run --attention, docs/gpu.md
/// "Attention backends"): cuDNN's fused attention where it loads and takes
/// the call, else mimo's kernels (Auto); cuDNN required, mimo's kernels
/// only for the calls it cannot express (Cudnn); mimo's kernels always
/// (Mimo). The CPU runs mimo's under every choice.
enum class AttentionChoice { Auto, Cudnn, Mimo };

/// The inputs of one attention call (Device::attentionForward): q [Tq,
/// heads, d], k and v [Tk, kvHeads, d] (kvHeads divides heads), all of
/// `dtype` (F32, or BF16 bits), under the mask of `plan`.
struct AttentionArgs {
  DType dtype = DType::F32;
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  tiles::PlanView plan;
  int64_t heads = 0, kvHeads = 0, headDim = 0;
  int64_t repeat() const { return kvHeads > 0 ? heads / kvHeads : 1; }
};

class Device {
public:
  virtual ~Device() = default;
  virtual DeviceKind kind() const = 0;
  /// "cpu", "cuda:0 (NVIDIA H100 80GB HBM3)".
  virtual std::string name() const = 0;

  //===--- Memory ---------------------------------------------------------===//
  /// `bytes` of uninitialised memory (never null; DeviceError when it does
  /// not fit). Released in stream order: work already enqueued that reads
  /// the buffer finishes first.
  virtual void *allocate(int64_t bytes) = 0;
  virtual void release(void *data) = 0;
  virtual void fillZero(void *data, int64_t bytes) = 0;
  virtual void fill(float *data, float value, int64_t n) = 0;
  /// Copies between buffers of devices of this kind (this one's or
  /// another's, e.g. another rank's GPU), in this device's stream order.
  virtual void copy(void *dst, const void *src, int64_t bytes) = 0;
  /// From host memory; `host` may be reused as soon as this returns.
  virtual void upload(void *dst, const void *host, int64_t bytes) = 0;
  /// To host memory; waits for the stream and the copy.
  virtual void download(void *host, const void *src, int64_t bytes) = 0;

  //===--- Ordering -------------------------------------------------------===//
  /// The point this device's stream has reached (null: nothing pending).
  virtual EventPtr record() = 0;
  /// Later work of this device waits for `event` (null: nothing to wait).
  virtual void wait(const EventPtr &event) = 0;
  /// Waits on the host until every enqueued call has finished; reports any
  /// asynchronous error.
  virtual void synchronize() = 0;
  /// The most bytes this device had allocated at once since the last
  /// resetPeakBytes() (-1: not tracked).
  virtual int64_t peakBytes() const { return -1; }
  virtual void resetPeakBytes() {}
  /// Times every kernel, GEMM and copy from now on on the device itself
  /// (false: stops): the CUDA device records an event pair around each
  /// launch, after waiting for its stream, so that timing begins when this
  /// returns. False where the device does not time (the CPU: its calls take
  /// the host's time, which a trace shows already).
  virtual bool timeKernels(bool on) {
    (void)on;
    return false;
  }
  /// The calls timed since the last take, in launch order; waits for the
  /// stream.
  virtual std::vector<KernelSpan> takeKernelSpans() { return {}; }
  /// The stream libraries enqueue their work on beside this device's
  /// kernels (a cudaStream_t for NCCL); null for the CPU.
  virtual void *nativeStream() { return nullptr; }

  //===--- Data movement and reductions -----------------------------------===//
  /// dst row dstRows[i] = src row srcRows[i] (rows of `cols` values).
  virtual void copyRows(float *dst, const int64_t *dstRows, const float *src,
                        const int64_t *srcRows, int64_t count,
                        int64_t cols) = 0;
  /// Expert dispatch and combine (model/MoeMlp.h; KernelBodies.h
  /// GatherRows, ScatterAddRows, RowDots): dst row i = src row rows[i],
  /// times weights[i] when given (`type` F32; BF16 bits take none) ...
  virtual void gatherRows(DType type, void *dst, const void *src,
                          const int64_t *rows, const float *weights,
                          int64_t count, int64_t cols) = 0;
  /// ... dst row rows[i] += weights[i] (null: 1) · src row i, the rows
  /// distinct ...
  virtual void scatterAddRows(float *dst, const int64_t *rows, const float *src,
                              const float *weights, int64_t count,
                              int64_t cols) = 0;
  /// ... and out[i] = a row rows[i] · b row i (in double).
  virtual void rowDots(const float *a, const int64_t *rows, const float *b,
                       int64_t count, int64_t cols, float *out) = 0;
  virtual void scale(float *data, float alpha, int64_t n) = 0;
  /// n values of x, of `from`, into y as `to`: F32 to BF16 rounds to
  /// nearest even (device/KernelBodies.h; the top 16 bits: half the bytes,
  /// how precision "bf16" keeps activations between a forward and its
  /// backward), BF16 to F32 is exact; one type to itself copies.
  void convert(DType from, const void *x, DType to, void *y, int64_t n);
  /// Rounds values to `type` in place, kept as floats: BF16 rounds to
  /// nearest even (what precision "bf16" stores); F32 leaves them.
  void roundTo(DType type, float *data, int64_t n);
  /// y += alpha * x.
  virtual void axpy(int64_t n, float alpha, const float *x, float *y) = 0;
  /// out = a + b elementwise (f32 or f64; out may alias a or b).
  virtual void add(DType type, void *out, const void *a, const void *b,
                   int64_t n) = 0;
  /// out = x + branch as precision `stored` keeps a residual: F32 the sum;
  /// BF16 the branch rounded to bf16 as stored and the sum rounded as
  /// stored, in one pass (the bits of roundTo(branch), add, roundTo). The
  /// branch is of `branchType`: F32, or (under BF16) bf16 bits, a GEMM's
  /// bf16 output; out may alias x.
  void residual(DType stored, const float *x, DType branchType,
                const void *branch, float *out, int64_t n);
  /// out = max(a, b) elementwise; a NaN in either wins, a's first.
  virtual void maximum(float *out, const float *a, const float *b,
                       int64_t n) = 0;
  /// *acc += sum of x^2, in double, in an order fixed by n alone
  /// (bitwise reproducible run to run). acc is device memory.
  virtual void sumSquaresInto(const float *x, int64_t n, double *acc) = 0;
  /// *acc += factor * sum of values[i] over i with mask[i] != 0 (double).
  virtual void maskedSumInto(const float *values, const float *mask, int64_t n,
                             double factor, double *acc) = 0;
  /// y[rows, cols] += b (each row); db += column sums of dy.
  virtual void addBias(float *y, const float *b, int64_t rows,
                       int64_t cols) = 0;
  virtual void biasBackward(const float *dy, float *db, int64_t rows,
                            int64_t cols) = 0;

  //===--- Kernels (semantics in cpu/Kernels.h) ---------------------------===//
  // The element types are parameters: each op takes the types a precision
  // gives its buffers and runs the kernel of those types (the protected
  // members below, which a device implements; Device.cpp chooses). A
  // combination no precision uses is a DeviceError naming it.

  /// C = alpha op(A) op(B) + beta C, computed in `math`: F32 (A and B fp32)
  /// or BF16: A and B rounded to bfloat16 (ties to even), products summed
  /// in fp32, what tensor cores compute from bf16 operands (the GEMMs of
  /// precision "bf16", docs/gpu.md; A and B are any floats or bf16 bits).
  /// C is fp32 (`cType` F32), or under BF16 with beta 0 bf16 bits (BF16:
  /// the fp32 sums rounded as convert rounds, in one pass). The CPU runs
  /// its fp32 GEMM on rounded (or unpacked) copies; the GPU converts fp32
  /// operands to bf16 and runs cuBLASLt's bf16 GEMM (bf16 output there).
  void gemm(DType math, bool transA, bool transB, int64_t M, int64_t N,
            int64_t K, float alpha, Bf16Operand A, Bf16Operand B, float beta,
            DType cType, void *C);
  /// The norms' forwards take the module's ε (model.json `norm_eps`) and
  /// write y as `yType`: F32, or BF16 bits (the bits of the fp32 op
  /// converted, in one pass: what a bf16 GEMM reads next and the backward
  /// keeps). Their backwards need no ε (they read the forward's
  /// statistics).
  void rmsnormForward(const float *x, const float *w, DType yType, void *y,
                      float *rstd, int64_t rows, int64_t cols, float eps);
  void layernormForward(const float *x, const float *w, const float *b,
                        DType yType, void *y, float *mean, float *rstd,
                        int64_t rows, int64_t cols, float eps);
  /// x of `xType`: F32 (the input gradient written to dx), or BF16 bits as
  /// a bf16 layer keeps its inputs (the gradient added into dx: the bits
  /// of the op into scratch followed by axpy with 1, in one pass); dw (and
  /// db) accumulated.
  void rmsnormBackward(DType xType, const void *x, const float *w,
                       const float *rstd, const float *dy, float *dx, float *dw,
                       int64_t rows, int64_t cols);
  void layernormBackward(DType xType, const void *x, const float *w,
                         const float *mean, const float *rstd, const float *dy,
                         float *dx, float *dw, float *db, int64_t rows,
                         int64_t cols);
  /// GELU of `kind` (Activation.h: the tanh form, exact, QuickGELU) and
  /// SwiGLU, reading x (gate and up) of `xType` and writing y as `yType`:
  /// F32 to F32; F32 or BF16 to BF16 (the bits of the fp32 op on the
  /// values, converted, in one pass: precision "bf16", where the GEMM
  /// outputs they read are bf16 bits).
  void geluForward(DType xType, const void *x, DType yType, void *y, int64_t n,
                   Gelu kind);
  void swigluForward(DType xType, const void *gate, const void *up, DType yType,
                     void *y, int64_t n);
  /// Their backwards: the forward's inputs and the gradients written of
  /// one `type` (BF16: the MLP's gate and up as their GEMMs write them,
  /// the gradients the bits of the fp32 op converted, read only by bf16
  /// GEMMs, which round them so anyway); dy fp32.
  void geluBackward(DType type, const void *x, const float *dy, void *dx,
                    int64_t n, Gelu kind);
  void swigluBackward(DType type, const void *gate, const void *up,
                      const float *dy, void *dgate, void *dup, int64_t n);
  /// RoPE's rotation table (docs/model.md) of `tokens` positions, each
  /// pair's frequency from `spec` (device/RopeSpec.h: rope_theta,
  /// rope_scaling): table [tokens, dim / 2, 2] doubles, the cosine and sine
  /// of each (token, pair)'s angle (KernelBodies.h RopeTable). A
  /// micro-batch's tokens build it once; every layer's rope reads it.
  virtual void ropeTable(const int64_t *positions, int64_t tokens, int64_t dim,
                         const RopeSpec &spec, double *table) = 0;
  /// RoPE of x [tokens, heads, dim] by `table` (inverse: the rotation
  /// back) written to y as `out`: F32 (y may be x: in place) or BF16 (the
  /// bits of the fp32 rotation, one pass: precision "bf16"'s q and k as
  /// attention reads them; inverse: dq and dk as their GEMMs read them).
  virtual void rope(const float *x, DType out, void *y, const double *table,
                    int64_t tokens, int64_t heads, int64_t dim,
                    bool inverse) = 0;
  /// Grouped-query attention (model.json `num_query_groups`): x [rows,
  /// groups, dim] with each group's head repeated `repeat` times into y
  /// [rows, groups x repeat, dim] (query head h reads group h / repeat), as
  /// attention reads keys and values; `type` F32 or BF16 (bits copied).
  virtual void repeatKv(DType type, const void *x, void *y, int64_t rows,
                        int64_t groups, int64_t repeat, int64_t dim) = 0;
  /// Its adjoint: y [rows, groups, dim] = the sum over each group's
  /// `repeat` heads of dy [rows, groups x repeat, dim], in head order.
  virtual void sumKvGroups(const float *dy, float *y, int64_t rows,
                           int64_t groups, int64_t repeat, int64_t dim) = 0;
  /// Attention (docs/model.md) of q [Tq, heads, d] over k, v [Tk, kvHeads,
  /// d] under the mask of `a.plan` (AttentionTiles.h: built on the host
  /// from the positions and segments the reference takes, its packed array
  /// in this device's memory): o [Tq, heads, d] of a.dtype, lse [heads, Tq]
  /// fp32. Grouped-query attention is native: query head h reads key and
  /// value group h / (heads / kvHeads). Under F32 everything is fp32; under
  /// BF16 (precision "bf16", as a tensor-core kernel runs it) q, k, v, o and
  /// dout are bf16 buffers (o the fp32 result rounded, as packBf16 rounds);
  /// scores, softmax, lse and D = rowsum(dout o) are fp32; the
  /// probabilities P are rounded to bf16 where they multiply v (o) and dout
  /// (dv), and dS = P (dP - D) where it multiplies k (dq) and q (dk), the
  /// softmax scale applied after. mimo's kernels compute exactly that
  /// (device/FlashMmaBodies.h on the tensor cores at head dimensions 32,
  /// 64, 96 and 128, the fp32 programs with the same rounding at others;
  /// the CPU emulates the rounding); a fused-attention library (cuDNN,
  /// attentionBackendName()) rounds in its own places, within the bf16
  /// rule of docs/gpu.md.
  virtual void attentionForward(const AttentionArgs &a, void *o,
                                float *lse) = 0;
  /// Its backward from dout (a.dtype): dq [Tq, heads, d], dk and dv [Tk,
  /// kvHeads, d] (each group's gradient the sum over its heads), fp32,
  /// written, not accumulated.
  virtual void attentionBackward(const AttentionArgs &a, const void *o,
                                 const float *lse, const void *dout, float *dq,
                                 float *dk, float *dv) = 0;
  /// The attention this device runs for `a` ("mimo", or the library's name,
  /// e.g. "cudnn"), as the next attentionForward/Backward of such a call
  /// will.
  virtual std::string attentionBackendName(const AttentionArgs &a) {
    (void)a;
    return "mimo";
  }
  /// Ring attention's merge (KernelBodies.h AttentionMerge): (o, lse) of
  /// some key blocks and (ob, lseb) of another, the same queries, give
  /// those of both in (o, lse). o, ob [rows, heads, d]; lse [heads, rows].
  virtual void attentionMerge(float *o, float *lse, const float *ob,
                              const float *lseb, int64_t rows, int64_t heads,
                              int64_t d) = 0;
  /// Rows `ids` of the vocabulary shard [vocabBegin, vocabEnd) of a table
  /// of `tableType` (F32, or BF16 bits, the rows converted) into out
  /// [n, hidden] fp32 (zeros for ids outside the shard).
  void embeddingForward(const int64_t *ids, int64_t n, DType tableType,
                        const void *table, int64_t vocabBegin, int64_t vocabEnd,
                        int64_t hidden, float *out);
  /// dtable[rows[g]] += dout[t] for the tokens t of each group, in order
  /// (TokenGroups.h: the tokens grouped by shard row on the host; the view's
  /// arrays on this device).
  virtual void embeddingBackward(const TokenGroupsView &groups,
                                 const float *dout, int64_t hidden,
                                 float *dtable) = 0;
  /// The vocabulary-parallel cross entropy's steps over logits of `type`
  /// (F32, or BF16 bits: precision "bf16", where the head's GEMM writes
  /// them so; the bits of the fp32 ops on the values), the backward
  /// writing dlogits of the same type (BF16: read only by the head's bf16
  /// GEMMs, which round them so anyway).
  void crossEntropyRowMax(DType type, const void *logits, int64_t n,
                          int64_t vocabLocal, float *rowMax);
  void crossEntropySums(DType type, const void *logits, const int64_t *targets,
                        int64_t n, int64_t vocabLocal, int64_t vocabBegin,
                        const float *globalMax, float *sumExp,
                        float *targetLogit);
  virtual void crossEntropyLoss(const float *globalMax,
                                const float *globalSumExp,
                                const float *globalTargetLogit, int64_t n,
                                float *loss) = 0;
  void crossEntropyBackward(DType type, const void *logits,
                            const int64_t *targets, int64_t n,
                            int64_t vocabLocal, int64_t vocabBegin,
                            const float *globalMax, const float *globalSumExp,
                            const float *scale, void *dlogits);
  virtual void adamw(float *param, const float *grad, float *m, float *v,
                     int64_t n, const AdamWStep &step) = 0;

protected:
  //===--- The kernels by element type (what a device implements) ---------===//
  // The ops above choose among them (Device.cpp); each is documented there
  // by what it computes.
  virtual void packBf16(const float *x, uint16_t *out, int64_t n) = 0;
  virtual void unpackBf16(const uint16_t *in, float *out, int64_t n) = 0;
  virtual void roundToBf16(float *data, int64_t n) = 0;
  virtual void residualBf16(const float *x, const float *branch, float *out,
                            int64_t n) = 0;
  virtual void residualBf16(const float *x, const uint16_t *branch, float *out,
                            int64_t n) = 0;
  virtual void gemmF32(bool transA, bool transB, int64_t M, int64_t N,
                       int64_t K, float alpha, const float *A, const float *B,
                       float beta, float *C) = 0;
  virtual void gemmBf16(bool transA, bool transB, int64_t M, int64_t N,
                        int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
                        float beta, float *C) = 0;
  virtual void gemmBf16Out(bool transA, bool transB, int64_t M, int64_t N,
                           int64_t K, float alpha, Bf16Operand A, Bf16Operand B,
                           uint16_t *C) = 0;
  virtual void rmsnormForwardF32(const float *x, const float *w, float *y,
                                 float *rstd, int64_t rows, int64_t cols,
                                 float eps) = 0;
  virtual void rmsnormForwardBf16(const float *x, const float *w, uint16_t *y,
                                  float *rstd, int64_t rows, int64_t cols,
                                  float eps) = 0;
  virtual void layernormForwardF32(const float *x, const float *w,
                                   const float *b, float *y, float *mean,
                                   float *rstd, int64_t rows, int64_t cols,
                                   float eps) = 0;
  virtual void layernormForwardBf16(const float *x, const float *w,
                                    const float *b, uint16_t *y, float *mean,
                                    float *rstd, int64_t rows, int64_t cols,
                                    float eps) = 0;
  virtual void rmsnormBackwardF32(const float *x, const float *w,
                                  const float *rstd, const float *dy, float *dx,
                                  float *dw, int64_t rows, int64_t cols) = 0;
  virtual void rmsnormBackwardAddBf16(const uint16_t *x, const float *w,
                                      const float *rstd, const float *dy,
                                      float *dx, float *dw, int64_t rows,
                                      int64_t cols) = 0;
  virtual void layernormBackwardF32(const float *x, const float *w,
                                    const float *mean, const float *rstd,
                                    const float *dy, float *dx, float *dw,
                                    float *db, int64_t rows, int64_t cols) = 0;
  virtual void layernormBackwardAddBf16(const uint16_t *x, const float *w,
                                        const float *mean, const float *rstd,
                                        const float *dy, float *dx, float *dw,
                                        float *db, int64_t rows,
                                        int64_t cols) = 0;
  virtual void geluForwardF32(const float *x, float *y, int64_t n,
                              Gelu kind) = 0;
  virtual void geluForwardBf16(const float *x, uint16_t *y, int64_t n,
                               Gelu kind) = 0;
  virtual void geluForwardBf16(const uint16_t *x, uint16_t *y, int64_t n,
                               Gelu kind) = 0;
  virtual void swigluForwardF32(const float *gate, const float *up, float *y,
                                int64_t n) = 0;
  virtual void swigluForwardBf16(const float *gate, const float *up,
                                 uint16_t *y, int64_t n) = 0;
  virtual void swigluForwardBf16(const uint16_t *gate, const uint16_t *up,
                                 uint16_t *y, int64_t n) = 0;
  virtual void geluBackwardF32(const float *x, const float *dy, float *dx,
                               int64_t n, Gelu kind) = 0;
  virtual void geluBackwardBf16(const uint16_t *x, const float *dy,
                                uint16_t *dx, int64_t n, Gelu kind) = 0;
  virtual void swigluBackwardF32(const float *gate, const float *up,
                                 const float *dy, float *dgate, float *dup,
                                 int64_t n) = 0;
  virtual void swigluBackwardBf16(const uint16_t *gate, const uint16_t *up,
                                  const float *dy, uint16_t *dgate,
                                  uint16_t *dup, int64_t n) = 0;
  virtual void embeddingForwardF32(const int64_t *ids, int64_t n,
                                   const float *table, int64_t vocabBegin,
                                   int64_t vocabEnd, int64_t hidden,
                                   float *out) = 0;
  virtual void embeddingForwardBf16(const int64_t *ids, int64_t n,
                                    const uint16_t *table, int64_t vocabBegin,
                                    int64_t vocabEnd, int64_t hidden,
                                    float *out) = 0;
  virtual void crossEntropyRowMaxF32(const float *logits, int64_t n,
                                     int64_t vocabLocal, float *rowMax) = 0;
  virtual void crossEntropyRowMaxBf16(const uint16_t *logits, int64_t n,
                                      int64_t vocabLocal, float *rowMax) = 0;
  virtual void crossEntropySumsF32(const float *logits, const int64_t *targets,
                                   int64_t n, int64_t vocabLocal,
                                   int64_t vocabBegin, const float *globalMax,
                                   float *sumExp, float *targetLogit) = 0;
  virtual void crossEntropySumsBf16(const uint16_t *logits,
                                    const int64_t *targets, int64_t n,
                                    int64_t vocabLocal, int64_t vocabBegin,
                                    const float *globalMax, float *sumExp,
                                    float *targetLogit) = 0;
  virtual void crossEntropyBackwardF32(const float *logits,
                                       const int64_t *targets, int64_t n,
                                       int64_t vocabLocal, int64_t vocabBegin,
                                       const float *globalMax,
                                       const float *globalSumExp,
                                       const float *scale, float *dlogits) = 0;
  virtual void
  crossEntropyBackwardBf16(const uint16_t *logits, const int64_t *targets,
                           int64_t n, int64_t vocabLocal, int64_t vocabBegin,
                           const float *globalMax, const float *globalSumExp,
                           const float *scale, uint16_t *dlogits) = 0;
};

/// The fp32 CPU device; its kernels, GEMMs included, use `threads` threads
/// (the creating thread's setting; a result's bits do not depend on it).
std::unique_ptr<Device> makeCpuDevice(int threads = 1);

/// A process-wide CPU device, for host-memory users without one of their
/// own (communicators in tests and benchmarks).
Device &hostDevice();

} // namespace mimo::device

#endif // MIMO_RUNTIME_DEVICE_DEVICE_H
