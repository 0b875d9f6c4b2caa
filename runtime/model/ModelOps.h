//===- ModelOps.h - The model stages' building blocks -----------*- C++ -*-===//
//
// Internal to the model stages (Model.cpp, TransformerLayer.h,
// EncoderStage.cpp, LanguageStage.cpp): GEMMs in the stages' [in, out]
// weight layout, buffers, and the equal-piece collectives of TP, SP and CP.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_MODELOPS_H
#define MIMO_RUNTIME_MODEL_MODELOPS_H

#include "runtime/comm/Comm.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/device/Device.h"
#include "runtime/device/Tensor.h"
#include "runtime/model/WeightGrads.h"

#include <cstdint>
#include <memory>
#include <stdexcept>
#include <vector>

namespace mimo::exec::ops {

using device::Bf16Operand;

/// A stage's GEMM: with bf16 operands (fp32 accumulation) under precision
/// "bf16" (docs/gpu.md; a weight's working copy is bf16 already), fp32
/// otherwise.
inline void gemm(Device &dev, bool bf16, bool transA, bool transB, int64_t M,
                 int64_t N, int64_t K, float alpha, Bf16Operand A,
                 Bf16Operand B, float beta, float *C) {
  dev.gemm(bf16 ? device::DType::BF16 : device::DType::F32, transA, transB, M,
           N, K, alpha, A, B, beta, device::DType::F32, C);
}

/// Y[M,N] = X[M,K] · W[K,N] (+ beta Y; Y is not read when beta is 0).
inline void matmul(Device &dev, bool bf16, Bf16Operand x, Bf16Operand w,
                   float *y, int64_t M, int64_t K, int64_t N,
                   float beta = 0.0f) {
  gemm(dev, bf16, false, false, M, N, K, 1.0f, x, w, beta, y);
}

/// Y[M,N] = X[M,K] · W stored as it is kept or read next: under bf16
/// written as bf16 bits by the GEMM itself (Device::gemm with a BF16 C: the
/// rounding a store would do, without an fp32 pass), else fp32. W is
/// [K,N], or [N,K] read transposed (transW: an input gradient dY · W^T that
/// is only ever read rounded, e.g. attention's dO).
inline Tensor storedProduct(Device &dev, bool bf16, Bf16Operand x,
                            Bf16Operand w, int64_t M, int64_t K, int64_t N,
                            bool transW = false) {
  if (!bf16) {
    Tensor y = Tensor::empty(M * N);
    gemm(dev, false, false, transW, M, N, K, 1.0f, x, w, 0.0f, y.data());
    return y;
  }
  Tensor y = Tensor::empty(M * N, device::DType::BF16);
  dev.gemm(device::DType::BF16, false, transW, M, N, K, 1.0f, x, w, 0.0f,
           device::DType::BF16, y.raw());
  return y;
}

/// dX[M,K] (+)= dY[M,N] · W[K,N]^T and dW[K,N] += X^T · dY.
inline void matmulBackward(Device &dev, bool bf16, Bf16Operand x, Bf16Operand w,
                           Bf16Operand dy, float *dx, float *dw, int64_t M,
                           int64_t K, int64_t N, float dxBeta = 0.0f) {
  if (dx)
    gemm(dev, bf16, false, true, M, K, N, 1.0f, dy, w, dxBeta, dx);
  if (dw) // null for a frozen weight: no gradient to make
    gemm(dev, bf16, true, false, K, N, M, 1.0f, x, dy, 1.0f, dw);
}

/// RoPE's frequencies of a module (model.json `rope_theta`, `rope_scaling`).
inline device::RopeSpec ropeSpec(const ModuleConfig &m) {
  device::RopeSpec spec;
  spec.theta = m.ropeTheta;
  if (m.ropeScaling) {
    spec.factor = m.ropeScaling->factor;
    spec.lowFreqFactor = m.ropeScaling->lowFreqFactor;
    spec.highFreqFactor = m.ropeScaling->highFreqFactor;
    spec.originalMax = m.ropeScaling->originalMaxPositions;
  }
  return spec;
}

/// The GELU variant a model.json activation names ("gelu_tanh", "gelu",
/// "quick_gelu").
inline device::Gelu geluOf(const std::string &name) {
  return name == "gelu"         ? device::Gelu::Exact
         : name == "quick_gelu" ? device::Gelu::Quick
                                : device::Gelu::Tanh;
}

/// Buffers that are written whole before they are read, and buffers that
/// are accumulated into.
inline Tensor empty(int64_t n) { return Tensor::empty(n); }
inline Tensor zeros(int64_t n, device::DType type = device::DType::F32) {
  return Tensor::zeros(n, type);
}

/// precision "bf16": an activation kept as bfloat16 between its forward
/// and its backward (half the bytes; its values are bf16 already, so
/// nothing changes), and back in fp32 for the backward. Empty stays empty.
inline Tensor packBf16(Device &dev, const Tensor &t) {
  if (t.empty())
    return Tensor();
  Tensor out = Tensor::empty(t.size(), device::DType::BF16);
  dev.convert(device::DType::F32, t.data(), device::DType::BF16, out.raw(),
              t.size());
  return out;
}
inline Tensor unpackBf16(Device &dev, const Tensor &t) {
  if (t.empty())
    return Tensor();
  Tensor out = Tensor::empty(t.size());
  dev.convert(device::DType::BF16, t.raw(), device::DType::F32, out.data(),
              t.size());
  return out;
}

/// An activation that GEMMs read: under precision "bf16" rounded and
/// packed once where it is made (packBf16), so that every GEMM of the
/// forward reads its bits as they are and the backward's weight gradients
/// read the same bits again (no fp32 copy kept, no conversion per GEMM);
/// as it is otherwise.
inline Tensor gemmInput(Device &dev, bool bf16, Tensor t) {
  if (!bf16)
    return t;
  return packBf16(dev, t);
}
/// A tensor as a GEMM operand: its bits when packed, else its floats.
inline Bf16Operand operand(const Tensor &t) {
  if (t.dtype() == device::DType::BF16)
    return Bf16Operand(t.data<uint16_t>());
  return Bf16Operand(t.data());
}

/// dW[K,N] += X[M,K]^T dY[M,N] for a weight (dw null, frozen: nothing):
/// at once, or under zero bubble (`deferred` deferring) kept for the
/// microbatch's weight_grad instruction, with x (the forward's, never
/// written again) and a copy of dy (whose buffer the backward may go on
/// writing).
inline void weightGradient(Device &dev, bool bf16,
                           DeferredWeightGrads *deferred, const Tensor &x,
                           const Tensor &dy, float *dw, int64_t M, int64_t K,
                           int64_t N) {
  if (!dw)
    return;
  if (!deferred || !deferred->deferring()) {
    gemm(dev, bf16, true, false, K, N, M, 1.0f, operand(x), operand(dy), 1.0f,
         dw);
    return;
  }
  auto xs = std::make_shared<Tensor>(x.view(0, x.size()));
  auto dys = std::make_shared<Tensor>(dy.clone());
  deferred->defer([dev = &dev, bf16, xs, dys, dw, M, K, N] {
    gemm(*dev, bf16, true, false, K, N, M, 1.0f, operand(*xs), operand(*dys),
         1.0f, dw);
  });
}

/// Host index arrays (positions, segments, ids, row maps) on the device.
inline Tensor indices(const std::vector<int64_t> &host) {
  return Tensor::fromHost(host);
}

/// One attention call's tile plan (device/AttentionTiles.h), built on the
/// host from its tokens' positions and segments and uploaded once: every
/// layer of a micro-batch reads it.
struct AttentionPlan {
  device::tiles::Plan counts; // packed left empty: it lives in `data`
  Tensor data;
  device::tiles::PlanView view() const {
    return counts.view(data.data<int64_t>());
  }
};

inline AttentionPlan attentionPlan(const std::vector<int64_t> &qpos,
                                   const std::vector<int64_t> &qseg,
                                   const std::vector<int64_t> &kpos,
                                   const std::vector<int64_t> &kseg,
                                   bool causal) {
  AttentionPlan p;
  p.counts = device::tiles::plan(qpos.data(), qseg.data(), kpos.data(),
                                 kseg.data(), static_cast<int64_t>(qpos.size()),
                                 static_cast<int64_t>(kpos.size()), causal);
  p.data = indices(p.counts.packed);
  p.counts.packed = {};
  return p;
}

/// Equal-piece collectives over a group (identity for one member).
/// fp32 or bf16 rows (the local tensor's type).
inline Tensor gatherRows(comm::Comm &comm, const std::vector<int64_t> &group,
                         const Tensor &local) {
  if (group.size() <= 1)
    return local.clone();
  std::vector<int64_t> counts(group.size(), local.size());
  Tensor out = Tensor::empty(local.size() * static_cast<int64_t>(group.size()),
                             local.dtype());
  if (local.dtype() == device::DType::BF16)
    comm.allGatherV(group, local.data<uint16_t>(), counts,
                    out.data<uint16_t>());
  else
    comm.allGatherV(group, local.data(), counts, out.data());
  return out;
}

inline Tensor scatterRows(comm::Comm &comm, const std::vector<int64_t> &group,
                          const Tensor &full) {
  if (group.size() <= 1)
    return full.clone();
  int64_t piece = full.size() / static_cast<int64_t>(group.size());
  std::vector<int64_t> counts(group.size(), piece);
  Tensor out = empty(piece);
  comm.reduceScatterV(group, full.data(), counts, out.data());
  return out;
}

inline void reduceAll(comm::Comm &comm, const std::vector<int64_t> &group,
                      Tensor &x) {
  if (group.size() > 1)
    comm.allReduceSum(group, x.data(), static_cast<int64_t>(x.size()));
}

} // namespace mimo::exec::ops

#endif // MIMO_RUNTIME_MODEL_MODELOPS_H
