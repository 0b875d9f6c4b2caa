//===- Attention.h - Tiled fp32 attention for the CPU device ----*- C++ -*-===//
//
// The CPU device's attention: the semantics of attentionForward and
// attentionBackward in Kernels.h (the float64-checked reference), computed
// tile by tile after the plan of device/AttentionTiles.h. Per head, each
// query block meets only the keys up to its last query's end, as one panel
// [queries x keys] through BLAS (no S x S matrix: memory grows linearly in
// the sequence); each row's mask is its end, applied where the panel runs
// past it; softmax in float with a vectorised exp. A fixed order of every
// sum: bitwise reproducible run to run.
//
// T = uint16_t (precision "bf16"): q, k, v, o and dO are bf16 buffers and
// the CUDA device's tensor-core rounding (FlashMmaBodies.h) is emulated: P
// rounded where it multiplies V and dO, dS = P (dP - D) rounded where it
// multiplies K and Q with the scale applied after; o written rounded.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
#define MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H

#include "runtime/device/AttentionTiles.h"

#include <cstdint>

namespace mimo::kernels {

/// T: float (fp32) or uint16_t (bf16 bits, Device::attentionForward under
/// BF16).
template <typename T>
void tiledAttentionForward(const T *q, const T *k, const T *v, T *o, float *lse,
                           const device::tiles::PlanView &plan, int64_t heads,
                           int64_t d);

template <typename T>
void tiledAttentionBackward(const T *q, const T *k, const T *v, const T *o,
                            const float *lse, const T *dout, float *dq,
                            float *dk, float *dv,
                            const device::tiles::PlanView &plan, int64_t heads,
                            int64_t d);

} // namespace mimo::kernels

#endif // MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
