//===- CudnnAttention.h - Attention through cuDNN's graph API ---*- C++ -*-===//
//
// The `cudnn` attention backend (docs/gpu.md "Attention backends"): bf16
// attention of a plan with a DenseMask (AttentionTiles.h: equal sequences,
// causal from the top left or full) as cuDNN's fused flash attention. The
// graphs are the ones cuDNN's engines recognise (its frontend builds the
// same): scores = scale (Q K^T), the causal mask (row >= column), a softmax
// whose statistics are max + ln(sum) (natural-log log-sum-exp of the
// scaled scores: mimo's lse), O = P V; the backward recomputes P from the
// statistics, takes D = rowsum(dO O), and writes dQ directly from its
// GEMM (the deterministic algorithm: no atomic accumulation, so two runs
// are bitwise identical). Grouped-query attention is native: K and V keep
// their groups, dK and dV are reduced over each group's heads by cuDNN.
//
// Plans are built once per shape (finalizing one compiles kernels) and
// kept. Only host code: the CUDA device (CudaDeviceAttention.cu) hands it
// pointers, a stream and workspace; a test hands it a fake CudnnApi.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H
#define MIMO_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H

#include "runtime/device/Device.h"
#include "runtime/device/cuda/Cudnn.h"

#include <array>
#include <cstdint>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <string>
#include <tuple>

namespace mimo::device::cuda {

/// One cuDNN attention graph's shape: the key of the plan cache. Element
/// strides [batch, head, sequence, dim] of q (and o, dO, dQ) and of k (v,
/// dK, dV), as the [tokens, heads, d] buffers of a DenseMask lay them out.
struct CudnnAttentionShape {
  int64_t batch = 0, heads = 0, kvHeads = 0, seqQ = 0, seqK = 0, headDim = 0;
  std::array<int64_t, 4> q{}, k{};
  bool causal = false;
  auto key() const {
    return std::tie(batch, heads, kvHeads, seqQ, seqK, headDim, q, k, causal);
  }
  bool operator<(const CudnnAttentionShape &o) const { return key() < o.key(); }
  bool operator==(const CudnnAttentionShape &o) const {
    return key() == o.key();
  }
};

/// The shape cuDNN runs `a` as (forward, or backward when `backward`), or
/// nullopt with `why` set: not bf16, no DenseMask, a head dimension cuDNN's
/// fused attention does not take (a multiple of 8 up to 128; 256 on
/// Hopper, `computeMajor` >= 9), a cuDNN version whose graph differs (the
/// backward before 9.16 wants keys in whole tiles of 128).
std::optional<CudnnAttentionShape>
cudnnAttentionShape(const AttentionArgs &a, size_t version, int computeMajor,
                    bool backward, std::string *why);

/// A cuDNN failure: the call, its status and cuDNN's own last message.
class CudnnError : public DeviceError {
public:
  using DeviceError::DeviceError;
};

/// Device buffers of one forward: q, k, v and o as the shape's strides lay
/// them out (bf16), stats [batch, heads, seqQ] fp32.
struct CudnnForwardBuffers {
  const void *q = nullptr, *k = nullptr, *v = nullptr;
  void *o = nullptr;
  float *stats = nullptr;
};
/// ... of one backward: the forward's buffers, dO; dQ, dK and dV written
/// as bf16 in q's and k's layouts.
struct CudnnBackwardBuffers {
  const void *q = nullptr, *k = nullptr, *v = nullptr, *o = nullptr,
             *dout = nullptr;
  const float *stats = nullptr;
  void *dq = nullptr, *dk = nullptr, *dv = nullptr;
};

/// Device workspace of `bytes` (> 0), valid for the work the call enqueues
/// on its stream.
using CudnnWorkspace = std::function<void *(int64_t bytes)>;

class CudnnAttention {
public:
  /// Over `api` (the loaded library, or a test's) of `version`, on a
  /// handle made by the caller for the current GPU (not owned).
  CudnnAttention(const CudnnApi &api, size_t version, cudnnHandle_t handle);
  ~CudnnAttention();
  CudnnAttention(const CudnnAttention &) = delete;
  CudnnAttention &operator=(const CudnnAttention &) = delete;

  /// Enqueues the forward on `stream` (the plan built first if new).
  void forward(const CudnnAttentionShape &shape, const CudnnForwardBuffers &b,
               cudaStream_t stream, const CudnnWorkspace &workspace);
  void backward(const CudnnAttentionShape &shape, const CudnnBackwardBuffers &b,
                cudaStream_t stream, const CudnnWorkspace &workspace);

  /// Plans built so far (both directions).
  int64_t plansBuilt() const {
    return static_cast<int64_t>(forwardPlans.size() + backwardPlans.size());
  }

  struct Graph; // descriptors of one built plan (CudnnAttention.cpp)

private:
  const Graph &plan(const CudnnAttentionShape &shape, bool backward);
  void run(const Graph &graph, const std::map<int64_t, void *> &pointers,
           cudaStream_t stream, const CudnnWorkspace &workspace);

  const CudnnApi &api;
  size_t version;
  cudnnHandle_t handle;
  std::map<CudnnAttentionShape, std::unique_ptr<Graph>> forwardPlans,
      backwardPlans;
};

} // namespace mimo::device::cuda

#endif // MIMO_RUNTIME_DEVICE_CUDA_CUDNNATTENTION_H
