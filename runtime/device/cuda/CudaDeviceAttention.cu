//===- CudaDeviceAttention.cu - CUDA flash attention ----------------------===//
//
// The fp32 block programs of FlashBodies.h, and bf16 attention on the
// tensor cores (FlashMma.h) where the head dimension, this GPU's limits and
// the buffers' alignment allow it.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDeviceImpl.cuh"

namespace mimo::device::cuda::detail {

void CudaDevice::attentionForward(const float *q, const float *k,
                                  const float *v, float *o, float *lse,
                                  const tiles::PlanView &plan, int64_t heads,
                                  int64_t d) {
  fp32AttentionForward(flash::shapeOf(plan, heads, d), q, k, v, o, lse);
}

void CudaDevice::attentionBackward(const float *q, const float *k,
                                   const float *v, const float *o,
                                   const float *lse, const float *dout,
                                   float *dq, float *dk, float *dv,
                                   const tiles::PlanView &plan, int64_t heads,
                                   int64_t d) {
  fp32AttentionBackward(flash::shapeOf(plan, heads, d), q, k, v, o, lse, dout,
                        dq, dk, dv);
}

void CudaDevice::attentionForwardBf16(const uint16_t *q, const uint16_t *k,
                                      const uint16_t *v, uint16_t *o,
                                      float *lse, const tiles::PlanView &plan,
                                      int64_t heads, int64_t d) {
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

void CudaDevice::attentionBackwardBf16(const uint16_t *q, const uint16_t *k,
                                       const uint16_t *v, const uint16_t *o,
                                       const float *lse, const uint16_t *dout,
                                       float *dq, float *dk, float *dv,
                                       const tiles::PlanView &plan,
                                       int64_t heads, int64_t d) {
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

/// The fp32 programs of FlashBodies.h (with the bf16 rounding when
/// shape.bf16 is set).
void CudaDevice::fp32AttentionForward(const flash::Shape &shape, const float *q,
                                      const float *k, const float *v, float *o,
                                      float *lse) {
  checkAttention(shape.d);
  flash::withHeadDim(shape.d, [&](auto dim) {
    launchBlocks("attention_forward",
                 flash::Forward<dim.value>{{shape, false}, q, k, v, o, lse},
                 shape.heads);
  });
}

void CudaDevice::fp32AttentionBackward(const flash::Shape &shape,
                                       const float *q, const float *k,
                                       const float *v, const float *o,
                                       const float *lse, const float *dout,
                                       float *dq, float *dk, float *dv) {
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
bool CudaDevice::tensorCores(const flash::Shape &shape,
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

void CudaDevice::checkMma(const MmaLaunch &launched) {
  if (launched.kernel)
    lastKernel = launched.kernel;
  if (launched.error != cudaSuccess)
    throw DeviceError(
        "CUDA error in kernel " +
        std::string(launched.kernel ? launched.kernel : "attention") + " on " +
        label + ": " + errorText(launched.error));
}

/// Attention at head dimension d fits this GPU's limits (both ways).
void CudaDevice::checkAttention(int64_t d) const {
  const std::string problem = flash::attentionProblem(d, sharedOptIn);
  if (!problem.empty())
    throw DeviceError(problem + " (" + label + ")");
}

} // namespace mimo::device::cuda::detail
