//===- Device.h - The device-neutral kernel interface ----------*- C++ -*-===//
//
// The model and the executor compute only through this interface, over
// buffers the device allocates, so a CUDA device plugs in without touching
// them. The CPU device (cpu/CpuDevice.cpp) runs the fp32 reference kernels of
// cpu/Kernels.h; semantics of every call are documented there.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_DEVICE_H
#define MIMO_RUNTIME_EXEC_DEVICE_H

#include <cstdint>
#include <memory>
#include <string>

namespace mimo::exec {

class Device {
public:
  virtual ~Device() = default;
  virtual const char *name() const = 0;

  // Memory: buffers of fp32 values in the device's memory.
  virtual float *allocate(int64_t n) = 0;
  virtual void release(float *data) = 0;
  virtual void fill(float *data, float value, int64_t n) = 0;
  virtual void copy(float *dst, const float *src, int64_t n) = 0;
  virtual void upload(float *dst, const float *host, int64_t n) = 0;
  virtual void download(float *host, const float *src, int64_t n) = 0;
  /// dst row dstRows[i] = src row srcRows[i] (rows of `cols` values); the
  /// index arrays are host memory.
  virtual void copyRows(float *dst, const int64_t *dstRows, const float *src,
                        const int64_t *srcRows, int64_t count,
                        int64_t cols) = 0;
  virtual void scale(float *data, float alpha, int64_t n) = 0;
  /// y[rows, cols] += b (each row); db += column sums of dy.
  virtual void addBias(float *y, const float *b, int64_t rows,
                       int64_t cols) = 0;
  virtual void biasBackward(const float *dy, float *db, int64_t rows,
                            int64_t cols) = 0;

  // Kernels. Index and position arrays (ids, positions, segments, targets)
  // are host memory; a device copies what it needs.

  virtual void gemm(bool transA, bool transB, int64_t M, int64_t N, int64_t K,
                    float alpha, const float *A, const float *B, float beta,
                    float *C) = 0;
  virtual void rmsnormForward(const float *x, const float *w, float *y,
                              float *rstd, int64_t rows, int64_t cols) = 0;
  virtual void rmsnormBackward(const float *x, const float *w,
                               const float *rstd, const float *dy, float *dx,
                               float *dw, int64_t rows, int64_t cols) = 0;
  virtual void layernormForward(const float *x, const float *w, const float *b,
                                float *y, float *mean, float *rstd,
                                int64_t rows, int64_t cols) = 0;
  virtual void layernormBackward(const float *x, const float *w,
                                 const float *mean, const float *rstd,
                                 const float *dy, float *dx, float *dw,
                                 float *db, int64_t rows, int64_t cols) = 0;
  virtual void geluForward(const float *x, float *y, int64_t n) = 0;
  virtual void geluBackward(const float *x, const float *dy, float *dx,
                            int64_t n) = 0;
  virtual void swigluForward(const float *gate, const float *up, float *y,
                             int64_t n) = 0;
  virtual void swigluBackward(const float *gate, const float *up,
                              const float *dy, float *dgate, float *dup,
                              int64_t n) = 0;
  virtual void rope(float *x, const int64_t *positions, int64_t tokens,
                    int64_t heads, int64_t dim, bool inverse) = 0;
  virtual void attentionForward(const float *q, const float *k, const float *v,
                                float *o, float *lse, const int64_t *qpos,
                                const int64_t *qseg, const int64_t *kpos,
                                const int64_t *kseg, int64_t Tq, int64_t Tk,
                                int64_t heads, int64_t d, bool causal) = 0;
  virtual void attentionBackward(const float *q, const float *k, const float *v,
                                 const float *o, const float *lse,
                                 const float *dout, float *dq, float *dk,
                                 float *dv, const int64_t *qpos,
                                 const int64_t *qseg, const int64_t *kpos,
                                 const int64_t *kseg, int64_t Tq, int64_t Tk,
                                 int64_t heads, int64_t d, bool causal) = 0;
  virtual void embeddingForward(const int64_t *ids, int64_t n,
                                const float *table, int64_t vocabBegin,
                                int64_t vocabEnd, int64_t hidden,
                                float *out) = 0;
  virtual void embeddingBackward(const int64_t *ids, int64_t n,
                                 const float *dout, int64_t vocabBegin,
                                 int64_t vocabEnd, int64_t hidden,
                                 float *dtable) = 0;
  virtual void crossEntropyRowMax(const float *logits, int64_t n,
                                  int64_t vocabLocal, float *rowMax) = 0;
  virtual void crossEntropySums(const float *logits, const int64_t *targets,
                                int64_t n, int64_t vocabLocal,
                                int64_t vocabBegin, const float *globalMax,
                                float *sumExp, float *targetLogit) = 0;
  virtual void crossEntropyLoss(const float *globalMax,
                                const float *globalSumExp,
                                const float *globalTargetLogit, int64_t n,
                                float *loss) = 0;
  virtual void crossEntropyBackward(const float *logits, const int64_t *targets,
                                    int64_t n, int64_t vocabLocal,
                                    int64_t vocabBegin, const float *globalMax,
                                    const float *globalSumExp,
                                    const float *scale, float *dlogits) = 0;
  virtual void adamw(float *param, const float *grad, float *m, float *v,
                     int64_t n, double lr, double beta1, double beta2,
                     double eps, double weightDecay, int64_t step) = 0;
  virtual double sumSquares(const float *x, int64_t n) = 0;
  virtual void axpy(int64_t n, float alpha, const float *x, float *y) = 0;
};

/// The fp32 CPU device (BLAS limited to one thread per process thread).
std::unique_ptr<Device> makeCpuDevice();

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_DEVICE_H
