//===- CudaDeviceElementwise.cu - Per-index CUDA kernels ------------------===//
//
// Copies, bf16 packing, scaling, residuals, activations, RoPE, embeddings
// and AdamW: each a per-index body of KernelBodies.h in a grid-stride loop.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/cuda/CudaDeviceImpl.cuh"

namespace mimo::device::cuda::detail {

void CudaDevice::copyRows(float *dst, const int64_t *dstRows, const float *src,
                          const int64_t *srcRows, int64_t count, int64_t cols) {
  launch("copy_rows",
         b::CopyRows<float>{dst, dstRows, src, srcRows, count, cols});
}

void CudaDevice::gatherRows(DType type, void *dst, const void *src,
                            const int64_t *rows, const float *weights,
                            int64_t count, int64_t cols) {
  if (type == DType::BF16)
    launch("gather_rows_bf16",
           b::GatherRows<uint16_t>{static_cast<uint16_t *>(dst),
                                   static_cast<const uint16_t *>(src), rows,
                                   nullptr, count, cols});
  else
    launch("gather_rows", b::GatherRows<float>{static_cast<float *>(dst),
                                               static_cast<const float *>(src),
                                               rows, weights, count, cols});
}

void CudaDevice::scatterAddRows(float *dst, const int64_t *rows,
                                const float *src, const float *weights,
                                int64_t count, int64_t cols) {
  launch("scatter_add_rows",
         b::ScatterAddRows{dst, rows, src, weights, count, cols});
}

void CudaDevice::rowDots(const float *a, const int64_t *rows, const float *b,
                         int64_t count, int64_t cols, float *out) {
  launch("row_dots", b::RowDots{a, rows, b, out, count, cols});
}

void CudaDevice::packBf16(const float *x, uint16_t *out, int64_t n) {
  launch("pack_bf16", b::ToBf16BitsWide{x, out, n});
}

void CudaDevice::unpackBf16(const uint16_t *in, float *out, int64_t n) {
  launch("unpack_bf16", b::FromBf16BitsWide{in, out, n});
}

void CudaDevice::roundToBf16(float *data, int64_t n) {
  launch("round_bf16", b::RoundBf16{data, n});
}

void CudaDevice::scale(float *data, float alpha, int64_t n) {
  launch("scale", b::Scale<float>{data, alpha, n});
}

void CudaDevice::axpy(int64_t n, float alpha, const float *x, float *y) {
  launch("axpy", b::Axpy<float>{alpha, x, y, n});
}

void CudaDevice::residualBf16(const float *x, const float *branch, float *out,
                              int64_t n) {
  launch("residual_bf16", b::ResidualBf16<float>{x, branch, out, n});
}

void CudaDevice::residualBf16(const float *x, const uint16_t *branch,
                              float *out, int64_t n) {
  launch("residual_bf16_in", b::ResidualBf16<uint16_t>{x, branch, out, n});
}

void CudaDevice::add(DType type, void *out, const void *a, const void *bb,
                     int64_t n) {
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

void CudaDevice::maximum(float *out, const float *a, const float *bb,
                         int64_t n) {
  launch("maximum", b::Maximum<float>{out, a, bb, n});
}

void CudaDevice::addBias(float *y, const float *bias, int64_t rows,
                         int64_t cols) {
  launch("add_bias", b::AddBias<float>{y, bias, rows, cols});
}

void CudaDevice::geluForwardF32(const float *x, float *y, int64_t n,
                                Gelu kind) {
  launch("gelu_forward", b::GeluForward<float>{x, y, n, kind});
}

void CudaDevice::geluBackwardF32(const float *x, const float *dy, float *dx,
                                 int64_t n, Gelu kind) {
  launch("gelu_backward", b::GeluBackward<float>{x, dy, dx, n, kind});
}

void CudaDevice::swigluForwardF32(const float *g, const float *u, float *y,
                                  int64_t n) {
  launch("swiglu_forward", b::SwigluForward<float>{g, u, y, n});
}

void CudaDevice::geluForwardBf16(const float *x, uint16_t *y, int64_t n,
                                 Gelu kind) {
  launch("gelu_forward_bf16", b::GeluForward<float, uint16_t>{x, y, n, kind});
}

void CudaDevice::swigluForwardBf16(const float *g, const float *u, uint16_t *y,
                                   int64_t n) {
  launch("swiglu_forward_bf16", b::SwigluForward<float, uint16_t>{g, u, y, n});
}

void CudaDevice::geluForwardBf16(const uint16_t *x, uint16_t *y, int64_t n,
                                 Gelu kind) {
  launch("gelu_forward_bf16_in",
         b::GeluForward<float, uint16_t, uint16_t>{x, y, n, kind});
}

void CudaDevice::swigluForwardBf16(const uint16_t *g, const uint16_t *u,
                                   uint16_t *y, int64_t n) {
  launch("swiglu_forward_bf16_in",
         b::SwigluForward<float, uint16_t, uint16_t>{g, u, y, n});
}

void CudaDevice::swigluBackwardF32(const float *g, const float *u,
                                   const float *dy, float *dg, float *du,
                                   int64_t n) {
  launch("swiglu_backward", b::SwigluBackward<float>{g, u, dy, dg, du, n});
}

void CudaDevice::ropeTable(const int64_t *positions, int64_t tokens,
                           int64_t dim, const RopeSpec &spec, double *table) {
  launch("rope_table", b::RopeTable{positions, table, tokens, dim, spec});
}

void CudaDevice::rope(const float *x, DType out, void *y, const double *table,
                      int64_t tokens, int64_t heads, int64_t dim,
                      bool inverse) {
  if (out == DType::BF16)
    launch("rope_bf16_out",
           b::Rope<float, uint16_t>{x, static_cast<uint16_t *>(y), table,
                                    tokens, heads, dim, inverse});
  else if (dim / 2 > 0 || y != x)
    launch("rope", b::Rope<float>{x, static_cast<float *>(y), table, tokens,
                                  heads, dim, inverse});
}

void CudaDevice::repeatKv(DType type, const void *x, void *y, int64_t rows,
                          int64_t groups, int64_t repeat, int64_t dim) {
  if (type == DType::BF16)
    launch("repeat_kv_bf16",
           b::RepeatKv<uint16_t>{static_cast<const uint16_t *>(x),
                                 static_cast<uint16_t *>(y), rows, groups,
                                 repeat, dim});
  else
    launch("repeat_kv", b::RepeatKv<float>{static_cast<const float *>(x),
                                           static_cast<float *>(y), rows,
                                           groups, repeat, dim});
}

void CudaDevice::sumKvGroups(const float *dy, float *y, int64_t rows,
                             int64_t groups, int64_t repeat, int64_t dim) {
  launch("sum_kv_groups", b::SumKvGroups{dy, y, rows, groups, repeat, dim});
}

void CudaDevice::attentionMerge(float *o, float *lse, const float *ob,
                                const float *lseb, int64_t rows, int64_t heads,
                                int64_t d) {
  launch("attention_merge",
         b::AttentionMerge{o, lse, ob, lseb, rows, heads, d});
}

void CudaDevice::geluBackwardBf16(const uint16_t *x, const float *dy,
                                  uint16_t *dx, int64_t n, Gelu kind) {
  launch("gelu_backward_bf16",
         b::GeluBackward<float, uint16_t, uint16_t>{x, dy, dx, n, kind});
}

void CudaDevice::swigluBackwardBf16(const uint16_t *g, const uint16_t *u,
                                    const float *dy, uint16_t *dg, uint16_t *du,
                                    int64_t n) {
  launch("swiglu_backward_bf16",
         b::SwigluBackward<float, uint16_t, uint16_t>{g, u, dy, dg, du, n});
}

void CudaDevice::embeddingForwardF32(const int64_t *ids, int64_t n,
                                     const float *table, int64_t vb, int64_t ve,
                                     int64_t hidden, float *out) {
  launch("embedding_forward",
         b::EmbeddingForward<float>{ids, table, out, n, vb, ve, hidden});
}

void CudaDevice::embeddingForwardBf16(const int64_t *ids, int64_t n,
                                      const uint16_t *table, int64_t vb,
                                      int64_t ve, int64_t hidden, float *out) {
  launch("embedding_forward_bf16", b::EmbeddingForward<float, uint16_t>{
                                       ids, table, out, n, vb, ve, hidden});
}

void CudaDevice::embeddingBackward(const TokenGroupsView &groups,
                                   const float *dout, int64_t hidden,
                                   float *dtable) {
  launch("embedding_backward",
         b::EmbeddingBackwardGroups<float>{groups, dout, dtable, hidden});
}

void CudaDevice::adamw(float *p, const float *g, float *m, float *v, int64_t n,
                       const AdamWStep &s) {
  launch("adamw", b::AdamW<float>{p, g, m, v, n, s.lr, s.beta1, s.beta2, s.eps,
                                  s.weightDecay, s.biasCorrection1(),
                                  s.biasCorrection2(), s.gradScale});
}

} // namespace mimo::device::cuda::detail
