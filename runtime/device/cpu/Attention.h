//===- Attention.h - Tiled fp32 attention for the CPU device ----*- C++ -*-===//
//
// The CPU device's attention: the semantics of attentionForward and
// attentionBackward in Kernels.h (the float64-checked reference), computed
// tile by tile after device/AttentionTiles.h. Per segment and head, each
// block of kQueryBlock queries meets only its non-empty key tiles, as one
// panel [queries x keys] through BLAS (no S x S matrix: memory grows
// linearly in the sequence); the mask is a per-row cut of the keys, applied
// only where a tile is partial; softmax in float with a vectorised exp. A
// fixed order of every sum: bitwise reproducible run to run.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
#define MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H

#include <cstdint>

namespace mimo::kernels {

void tiledAttentionForward(const float *q, const float *k, const float *v,
                           float *o, float *lse, const int64_t *qpos,
                           const int64_t *qseg, const int64_t *kpos,
                           const int64_t *kseg, int64_t Tq, int64_t Tk,
                           int64_t heads, int64_t d, bool causal);

void tiledAttentionBackward(const float *q, const float *k, const float *v,
                            const float *o, const float *lse, const float *dout,
                            float *dq, float *dk, float *dv,
                            const int64_t *qpos, const int64_t *qseg,
                            const int64_t *kpos, const int64_t *kseg,
                            int64_t Tq, int64_t Tk, int64_t heads, int64_t d,
                            bool causal);

} // namespace mimo::kernels

#endif // MIMO_RUNTIME_DEVICE_CPU_ATTENTION_H
