//===- CudaDeviceAttention.cu - CUDA flash attention ----------------------===//
//
// The fp32 block programs of FlashBodies.h, and bf16 attention on the
// tensor cores (FlashMma.h) where the head dimension, this GPU's limits and
// the buffers' alignment allow it.
//
//===----------------------------------------------------------------------===//

#include "runtime/device/GroupedAttention.h"
#include "runtime/device/cuda/CudaDeviceImpl.cuh"

#include <cstdio>

namespace mimo::device::cuda::detail {

void CudaDevice::attentionForward(const AttentionArgs &args, void *o,
                                  float *lse) {
  PerHeadKeys::checked(args);
  if (auto shape = cudnnShapeFor(args, false, {args.q, args.k, args.v, o}))
    if (cudnnForward(*shape, args, o, lse))
      return;
  const PerHeadKeys keys(*this, args);
  mimoAttentionForward(keys.args(), o, lse);
}

void CudaDevice::attentionBackward(const AttentionArgs &args, const void *o,
                                   const float *lse, const void *dout,
                                   float *dq, float *dk, float *dv) {
  PerHeadKeys::checked(args);
  if (auto shape = cudnnShapeFor(args, true, {args.q, args.k, args.v, o, dout}))
    if (cudnnBackward(*shape, args, o, lse, dout, dq, dk, dv))
      return;
  const PerHeadKeys keys(*this, args);
  PerHeadKeyGrads grads(*this, args, dk, dv);
  mimoAttentionBackward(keys.args(), o, lse, dout, dq, grads.dk(), grads.dv());
  grads.finish();
}

std::string CudaDevice::attentionBackendName(const AttentionArgs &a) {
  return cudnnShapeFor(a, false, {}) ? "cudnn" : "mimo";
}

std::optional<CudnnAttentionShape>
CudaDevice::cudnnShapeFor(const AttentionArgs &a, bool backward,
                          std::initializer_list<const void *> buffers) {
  if (attentionChoice == AttentionChoice::Mimo)
    return std::nullopt;
  const CudnnLibrary &library = cudnnLibrary();
  if (!library.problem.empty()) {
    if (attentionChoice == AttentionChoice::Cudnn)
      throw DeviceError("--attention cudnn: " + library.problem);
    return std::nullopt;
  }
  std::optional<CudnnAttentionShape> shape =
      cudnnAttentionShape(a, library.version, computeMajor, backward, nullptr);
  if (!shape || cudnnRefused[backward ? 1 : 0].count(*shape))
    return std::nullopt;
  for (const void *p : buffers)
    if (reinterpret_cast<uintptr_t>(p) % 16 != 0)
      return std::nullopt;
  return shape;
}

CudnnAttention &CudaDevice::cudnn() {
  if (!cudnnGraphs) {
    const CudnnLibrary &library = cudnnLibrary();
    activate();
    cudnnStatus_t status = library.api.create(&cudnnHandle);
    if (status != CUDNN_STATUS_SUCCESS) {
      cudnnHandle = nullptr;
      throw CudnnError("cuDNN attention: cudnnCreate on " + label + ": " +
                       library.api.errorString(status));
    }
    cudnnGraphs = std::make_unique<CudnnAttention>(library.api, library.version,
                                                   cudnnHandle);
  }
  return *cudnnGraphs;
}

void CudaDevice::refuseCudnn(const CudnnAttentionShape &shape, bool backward,
                             const std::string &why) {
  cudnnRefused[backward ? 1 : 0].insert(shape);
  static std::mutex said;
  std::lock_guard<std::mutex> lock(said);
  std::fprintf(stderr,
               "mimo-run: attention: %s; mimo's kernels run this shape (set "
               "--attention mimo to skip cuDNN)\n",
               why.c_str());
}

bool CudaDevice::cudnnForward(const CudnnAttentionShape &shape,
                              const AttentionArgs &a, void *o, float *lse) {
  const tiles::DenseMask &m = a.plan.dense;
  try {
    activate();
    std::vector<Tensor> spaces;
    auto workspace = [&](int64_t bytes) {
      spaces.push_back(scratch((bytes + 3) / 4));
      return spaces.back().raw();
    };
    // One sequence: cuDNN's [1, heads, S] statistics are mimo's lse.
    Tensor stats = m.batch > 1 ? scratch(m.batch * a.heads * m.seqQ) : Tensor();
    CudnnForwardBuffers buffers{a.q, a.k, a.v, o,
                                m.batch > 1 ? stats.data() : lse};
    {
      Timed timed(*this, "attention_forward_cudnn");
      cudnn().forward(shape, buffers, stream, workspace);
      lastKernel = "attention_forward_cudnn";
    }
    if (m.batch > 1)
      launch("attention_stats_to_lse",
             b::AttentionStatsLayout{lse, stats.data(), m.batch, a.heads,
                                     m.seqQ, a.plan.Tq, m.qStrideBatch,
                                     m.qStrideSeq, true});
    return true;
  } catch (const CudnnError &e) {
    if (attentionChoice == AttentionChoice::Cudnn)
      throw;
    refuseCudnn(shape, false, e.what());
    return false;
  }
}

bool CudaDevice::cudnnBackward(const CudnnAttentionShape &shape,
                               const AttentionArgs &a, const void *o,
                               const float *lse, const void *dout, float *dq,
                               float *dk, float *dv) {
  const tiles::DenseMask &m = a.plan.dense;
  try {
    activate();
    std::vector<Tensor> spaces;
    auto workspace = [&](int64_t bytes) {
      spaces.push_back(scratch((bytes + 3) / 4));
      return spaces.back().raw();
    };
    Tensor stats = m.batch > 1 ? scratch(m.batch * a.heads * m.seqQ) : Tensor();
    if (m.batch > 1)
      launch("attention_lse_to_stats",
             b::AttentionStatsLayout{const_cast<float *>(lse), stats.data(),
                                     m.batch, a.heads, m.seqQ, a.plan.Tq,
                                     m.qStrideBatch, m.qStrideSeq, false});
    // cuDNN writes bf16 gradients; mimo's are fp32.
    const int64_t nq = a.plan.Tq * a.heads * a.headDim;
    const int64_t nk = a.plan.Tk * a.kvHeads * a.headDim;
    Tensor dQ = Tensor::empty(*this, nq, DType::BF16),
           dK = Tensor::empty(*this, nk, DType::BF16),
           dV = Tensor::empty(*this, nk, DType::BF16);
    CudnnBackwardBuffers buffers{
        a.q,      a.k,      a.v,     o, dout, m.batch > 1 ? stats.data() : lse,
        dQ.raw(), dK.raw(), dV.raw()};
    {
      Timed timed(*this, "attention_backward_cudnn");
      cudnn().backward(shape, buffers, stream, workspace);
      lastKernel = "attention_backward_cudnn";
    }
    unpackBf16(dQ.data<uint16_t>(), dq, nq);
    unpackBf16(dK.data<uint16_t>(), dk, nk);
    unpackBf16(dV.data<uint16_t>(), dv, nk);
    return true;
  } catch (const CudnnError &e) {
    if (attentionChoice == AttentionChoice::Cudnn)
      throw;
    refuseCudnn(shape, true, e.what());
    return false;
  }
}

void CudaDevice::mimoAttentionForward(const AttentionArgs &a, void *out,
                                      float *lse) {
  const tiles::PlanView &plan = a.plan;
  const int64_t heads = a.heads, d = a.headDim;
  if (a.dtype != DType::BF16) {
    fp32AttentionForward(
        flash::shapeOf(plan, heads, d), static_cast<const float *>(a.q),
        static_cast<const float *>(a.k), static_cast<const float *>(a.v),
        static_cast<float *>(out), lse);
    return;
  }
  const auto *q = static_cast<const uint16_t *>(a.q);
  const auto *k = static_cast<const uint16_t *>(a.k);
  const auto *v = static_cast<const uint16_t *>(a.v);
  auto *o = static_cast<uint16_t *>(out);
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

void CudaDevice::mimoAttentionBackward(const AttentionArgs &a, const void *out,
                                       const float *lse, const void *dO,
                                       float *dq, float *dk, float *dv) {
  const tiles::PlanView &plan = a.plan;
  const int64_t heads = a.heads, d = a.headDim;
  if (a.dtype != DType::BF16) {
    fp32AttentionBackward(
        flash::shapeOf(plan, heads, d), static_cast<const float *>(a.q),
        static_cast<const float *>(a.k), static_cast<const float *>(a.v),
        static_cast<const float *>(out), lse, static_cast<const float *>(dO),
        dq, dk, dv);
    return;
  }
  const auto *q = static_cast<const uint16_t *>(a.q);
  const auto *k = static_cast<const uint16_t *>(a.k);
  const auto *v = static_cast<const uint16_t *>(a.v);
  const auto *o = static_cast<const uint16_t *>(out);
  const auto *dout = static_cast<const uint16_t *>(dO);
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
               O = unpacked(o, nq), dOut = unpacked(dout, nq);
  fp32AttentionBackward(shape, Q.data(), K.data(), V.data(), O.data(), lse,
                        dOut.data(), dq, dk, dv);
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
