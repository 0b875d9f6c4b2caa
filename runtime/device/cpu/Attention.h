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
// bf16 (precision "bf16"): the CUDA device's tensor-core rounding
// (FlashMmaBodies.h) emulated: q, k, v and dO rounded to bf16, P rounded
// where it multiplies V and dO, dS = P (dP - D) rounded where it multiplies
// K and Q with the scale applied after.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
#define MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H

#include "runtime/device/AttentionTiles.h"

#include <cstdint>

namespace mimo::kernels {

void tiledAttentionForward(const float *q, const float *k, const float *v,
                           float *o, float *lse,
                           const device::tiles::PlanView &plan, int64_t heads,
                           int64_t d, bool bf16 = false);

void tiledAttentionBackward(const float *q, const float *k, const float *v,
                            const float *o, const float *lse, const float *dout,
                            float *dq, float *dk, float *dv,
                            const device::tiles::PlanView &plan, int64_t heads,
                            int64_t d, bool bf16 = false);

} // namespace mimo::kernels

#endif // MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
