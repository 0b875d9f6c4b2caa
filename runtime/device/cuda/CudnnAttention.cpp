//===- CudnnAttention.cpp - Attention through cuDNN's graph API -----------===//

#include "runtime/device/cuda/CudnnAttention.h"

#include <cmath>
#include <limits>
#include <vector>

namespace mimo::device::cuda {

namespace {

// The graphs' non-virtual tensors (the variant pack's uids); virtual ones
// are numbered from kFirstVirtual.
constexpr int64_t kQ = 1, kK = 2, kV = 3, kO = 4, kStats = 5, kScale = 6,
                  kNegInf = 7, kDOut = 8, kDQ = 9, kDK = 10, kDV = 11,
                  kOne = 12, kSoftmaxSum = 13, kFirstVirtual = 100;

// Deprecated in cuDNN 9.19's header, still read by 9.0 (and harmless).
constexpr auto kGraphHandle = static_cast<cudnnBackendAttributeName_t>(800);
constexpr auto kPlanHandle = static_cast<cudnnBackendAttributeName_t>(400);

/// Workspace regions start on this boundary.
constexpr int64_t kAlign = 256;

int64_t aligned(int64_t bytes) {
  return (bytes + kAlign - 1) / kAlign * kAlign;
}

using Dims = std::array<int64_t, 4>;

Dims contiguous(const Dims &d) {
  return {d[1] * d[2] * d[3], d[2] * d[3], d[3], 1};
}

/// Creates, sets and finalizes descriptors, keeping each for the graph's
/// life; every status checked.
class Builder {
public:
  Builder(const CudnnApi &api, std::vector<cudnnBackendDescriptor_t> &keep)
      : api(api), keep(keep) {}

  void check(cudnnStatus_t status, const std::string &what) const {
    if (status == CUDNN_STATUS_SUCCESS)
      return;
    std::string message =
        "cuDNN attention: " + what + ": " +
        (api.errorString ? api.errorString(status) : std::to_string(status));
    if (api.lastErrorString) {
      char last[1024] = {};
      api.lastErrorString(last, sizeof(last));
      if (last[0])
        message += " (" + std::string(last) + ")";
    }
    throw CudnnError(message);
  }
  cudnnBackendDescriptor_t create(cudnnBackendDescriptorType_t type,
                                  const char *what) {
    cudnnBackendDescriptor_t d = nullptr;
    check(api.createDescriptor(type, &d), std::string("creating ") + what);
    keep.push_back(d);
    return d;
  }
  template <typename T>
  void set(cudnnBackendDescriptor_t d, cudnnBackendAttributeName_t name,
           cudnnBackendAttributeType_t type, const T *values, int64_t count,
           const char *what) {
    check(api.setAttribute(d, name, type, count, values),
          std::string("setting ") + what);
  }
  void finalize(cudnnBackendDescriptor_t d, const std::string &what) {
    check(api.finalize(d), "finalizing " + what);
  }

  /// A tensor; `uid` 0: the next virtual one.
  cudnnBackendDescriptor_t tensor(int64_t uid, cudnnDataType_t type,
                                  const Dims &dims, const Dims &strides,
                                  bool isVirtual, bool byValue = false) {
    if (uid == 0)
      uid = nextVirtual++;
    cudnnBackendDescriptor_t t =
        create(CUDNN_BACKEND_TENSOR_DESCRIPTOR, "a tensor");
    const int64_t alignment = 16;
    const bool yes = true;
    set(t, CUDNN_ATTR_TENSOR_DATA_TYPE, CUDNN_TYPE_DATA_TYPE, &type, 1,
        "a tensor's type");
    set(t, CUDNN_ATTR_TENSOR_DIMENSIONS, CUDNN_TYPE_INT64, dims.data(), 4,
        "a tensor's dimensions");
    set(t, CUDNN_ATTR_TENSOR_STRIDES, CUDNN_TYPE_INT64, strides.data(), 4,
        "a tensor's strides");
    set(t, CUDNN_ATTR_TENSOR_UNIQUE_ID, CUDNN_TYPE_INT64, &uid, 1,
        "a tensor's id");
    set(t, CUDNN_ATTR_TENSOR_BYTE_ALIGNMENT, CUDNN_TYPE_INT64, &alignment, 1,
        "a tensor's alignment");
    if (isVirtual)
      set(t, CUDNN_ATTR_TENSOR_IS_VIRTUAL, CUDNN_TYPE_BOOLEAN, &yes, 1,
          "a tensor virtual");
    if (byValue)
      set(t, CUDNN_ATTR_TENSOR_IS_BY_VALUE, CUDNN_TYPE_BOOLEAN, &yes, 1,
          "a scalar by value");
    finalize(t, "tensor " + std::to_string(uid));
    return t;
  }
  /// A virtual tensor, contiguous.
  cudnnBackendDescriptor_t inner(cudnnDataType_t type, const Dims &dims) {
    return tensor(0, type, dims, contiguous(dims), true);
  }
  /// A by-value fp32 scalar (the variant pack points it at host memory).
  cudnnBackendDescriptor_t scalar(int64_t uid) {
    return tensor(uid, CUDNN_DATA_FLOAT, {1, 1, 1, 1}, {1, 1, 1, 1}, false,
                  true);
  }

  void pointwise(cudnnPointwiseMode_t mode, cudnnDataType_t precision,
                 cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t b,
                 cudnnBackendDescriptor_t t, cudnnBackendDescriptor_t y,
                 int64_t axis = -1) {
    cudnnBackendDescriptor_t pw =
        create(CUDNN_BACKEND_POINTWISE_DESCRIPTOR, "a pointwise op");
    set(pw, CUDNN_ATTR_POINTWISE_MODE, CUDNN_TYPE_POINTWISE_MODE, &mode, 1,
        "a pointwise mode");
    set(pw, CUDNN_ATTR_POINTWISE_MATH_PREC, CUDNN_TYPE_DATA_TYPE, &precision, 1,
        "a pointwise precision");
    if (axis >= 0)
      set(pw, CUDNN_ATTR_POINTWISE_AXIS, CUDNN_TYPE_INT64, &axis, 1,
          "an index axis");
    finalize(pw, "a pointwise op");
    cudnnBackendDescriptor_t op = create(
        CUDNN_BACKEND_OPERATION_POINTWISE_DESCRIPTOR, "a pointwise operation");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_PW_DESCRIPTOR,
        CUDNN_TYPE_BACKEND_DESCRIPTOR, &pw, 1, "a pointwise op");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &x, 1, "a pointwise input");
    if (b)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_BDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, &b, 1, "a pointwise input");
    if (t)
      set(op, CUDNN_ATTR_OPERATION_POINTWISE_TDESC,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, &t, 1, "a pointwise mask");
    set(op, CUDNN_ATTR_OPERATION_POINTWISE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &y, 1, "a pointwise output");
    finalize(op, "a pointwise operation");
    ops.push_back(op);
  }
  void matmul(cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
              cudnnBackendDescriptor_t c) {
    cudnnBackendDescriptor_t mm =
        create(CUDNN_BACKEND_MATMUL_DESCRIPTOR, "a matmul");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(mm, CUDNN_ATTR_MATMUL_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute, 1,
        "a matmul's compute type");
    finalize(mm, "a matmul");
    cudnnBackendDescriptor_t op =
        create(CUDNN_BACKEND_OPERATION_MATMUL_DESCRIPTOR, "a matmul operation");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_ADESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &a, 1, "a matmul input");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_BDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &b, 1, "a matmul input");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_CDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &c, 1, "a matmul output");
    set(op, CUDNN_ATTR_OPERATION_MATMUL_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &mm, 1, "a matmul");
    finalize(op, "a matmul operation");
    ops.push_back(op);
  }
  void reduction(cudnnReduceTensorOp_t kind, cudnnBackendDescriptor_t x,
                 cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t r =
        create(CUDNN_BACKEND_REDUCTION_DESCRIPTOR, "a reduction");
    const cudnnDataType_t compute = CUDNN_DATA_FLOAT;
    set(r, CUDNN_ATTR_REDUCTION_OPERATOR, CUDNN_TYPE_REDUCTION_OPERATOR_TYPE,
        &kind, 1, "a reduction operator");
    set(r, CUDNN_ATTR_REDUCTION_COMP_TYPE, CUDNN_TYPE_DATA_TYPE, &compute, 1,
        "a reduction's compute type");
    finalize(r, "a reduction");
    cudnnBackendDescriptor_t op = create(
        CUDNN_BACKEND_OPERATION_REDUCTION_DESCRIPTOR, "a reduction operation");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &x, 1, "a reduction input");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &y, 1, "a reduction output");
    set(op, CUDNN_ATTR_OPERATION_REDUCTION_DESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &r, 1, "a reduction");
    finalize(op, "a reduction operation");
    ops.push_back(op);
  }
  void reshape(cudnnBackendDescriptor_t x, cudnnBackendDescriptor_t y) {
    cudnnBackendDescriptor_t op = create(
        CUDNN_BACKEND_OPERATION_RESHAPE_DESCRIPTOR, "a reshape operation");
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_XDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &x, 1, "a reshape input");
    set(op, CUDNN_ATTR_OPERATION_RESHAPE_YDESC, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        &y, 1, "a reshape output");
    finalize(op, "a reshape operation");
    ops.push_back(op);
  }

  /// The causal mask on scores s ([b, h, sq, skv], fp32): column <= row
  /// kept, the rest -inf (negInf).
  cudnnBackendDescriptor_t causal(cudnnBackendDescriptor_t s, const Dims &dims,
                                  cudnnBackendDescriptor_t negInf) {
    cudnnBackendDescriptor_t row = inner(CUDNN_DATA_INT32, dims);
    cudnnBackendDescriptor_t column = inner(CUDNN_DATA_INT32, dims);
    cudnnBackendDescriptor_t keep = inner(CUDNN_DATA_BOOLEAN, dims);
    cudnnBackendDescriptor_t masked = inner(CUDNN_DATA_FLOAT, dims);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr,
              row, 2);
    pointwise(CUDNN_POINTWISE_GEN_INDEX, CUDNN_DATA_INT32, s, nullptr, nullptr,
              column, 3);
    pointwise(CUDNN_POINTWISE_CMP_GE, CUDNN_DATA_BOOLEAN, row, column, nullptr,
              keep);
    pointwise(CUDNN_POINTWISE_BINARY_SELECT, CUDNN_DATA_FLOAT, s, negInf, keep,
              masked);
    return masked;
  }

  const CudnnApi &api;
  std::vector<cudnnBackendDescriptor_t> &keep;
  std::vector<cudnnBackendDescriptor_t> ops;
  int64_t nextVirtual = kFirstVirtual;
};

/// The K^T (or V^T) view of a [b, h, s, d] tensor: dims [b, h, d, s].
Dims transposedDims(const Dims &d) { return {d[0], d[1], d[3], d[2]}; }
Dims transposedStrides(const Dims &s) { return {s[0], s[1], s[3], s[2]}; }

} // namespace

struct CudnnAttention::Graph {
  std::vector<cudnnBackendDescriptor_t> keep;
  cudnnBackendDescriptor_t plan = nullptr;
  int64_t planWorkspace = 0;
  /// softmax_sum's bytes (the backward's scratch, at the workspace's start).
  int64_t scratchBytes = 0;
  bool backward = false;
};

std::optional<CudnnAttentionShape>
cudnnAttentionShape(const AttentionArgs &a, size_t version, int computeMajor,
                    bool backward, std::string *why) {
  auto refuse = [&](const std::string &reason) {
    if (why)
      *why = reason;
    return std::nullopt;
  };
  if (a.dtype != DType::BF16)
    return refuse("cuDNN's fused attention is bf16 (this model is fp32)");
  const tiles::DenseMask &m = a.plan.dense;
  if (!m.dense())
    return refuse("the mask is not equal sequences with a top-left causal or "
                  "a full mask (packed samples, padding, CP halves)");
  const int64_t d = a.headDim, maxD = computeMajor >= 9 ? 256 : 128;
  if (d % 8 != 0 || d > maxD)
    return refuse("head dimension " + std::to_string(d) +
                  " (cuDNN takes multiples of 8 up to " + std::to_string(maxD) +
                  " on this GPU)");
  if (a.kvHeads <= 0 || a.heads % a.kvHeads != 0)
    return refuse("the key-value groups do not divide the heads");
  if (version == 91000 || version == 91001)
    return refuse("cuDNN 9.10.0 and 9.10.1 have a faulty bf16 attention "
                  "(install another)");
  if (backward && version < 91600 && m.seqK % 128 != 0)
    return refuse("before cuDNN 9.16 its backward takes keys in whole tiles "
                  "of 128 (" +
                  std::to_string(m.seqK) + " keys a sequence)");
  if (backward && m.seqQ == 1 && m.seqK == 1)
    return refuse("cuDNN's backward refuses sequences of one token");
  CudnnAttentionShape s;
  s.batch = m.batch;
  s.heads = a.heads;
  s.kvHeads = a.kvHeads;
  s.seqQ = m.seqQ;
  s.seqK = m.seqK;
  s.headDim = d;
  s.causal = m.causal;
  // [tokens, heads, d]: token = b * strideBatch + s * strideSeq.
  s.q = {m.qStrideBatch * a.heads * d, d, m.qStrideSeq * a.heads * d, 1};
  s.k = {m.kStrideBatch * a.kvHeads * d, d, m.kStrideSeq * a.kvHeads * d, 1};
  return s;
}

CudnnAttention::CudnnAttention(const CudnnApi &api, size_t version,
                               cudnnHandle_t handle)
    : api(api), version(version), handle(handle) {}

CudnnAttention::~CudnnAttention() {
  for (auto *plans : {&forwardPlans, &backwardPlans})
    for (auto &entry : *plans)
      for (auto it = entry.second->keep.rbegin();
           it != entry.second->keep.rend(); ++it)
        api.destroyDescriptor(*it);
}

const CudnnAttention::Graph &CudnnAttention::plan(const CudnnAttentionShape &s,
                                                  bool backward) {
  auto &plans = backward ? backwardPlans : forwardPlans;
  auto found = plans.find(s);
  if (found != plans.end())
    return *found->second;
  auto graph = std::make_unique<Graph>();
  graph->backward = backward;
  // A failure part-way destroys what was made.
  struct Release {
    const CudnnApi &api;
    Graph *graph;
    ~Release() {
      if (!graph)
        return;
      for (auto it = graph->keep.rbegin(); it != graph->keep.rend(); ++it)
        api.destroyDescriptor(*it);
    }
  } release{api, graph.get()};
  Builder g(api, graph->keep);
  const cudnnDataType_t F = CUDNN_DATA_FLOAT, BF = CUDNN_DATA_BFLOAT16;
  const Dims qDims = {s.batch, s.heads, s.seqQ, s.headDim};
  const Dims kDims = {s.batch, s.kvHeads, s.seqK, s.headDim};
  const Dims scoreDims = {s.batch, s.heads, s.seqQ, s.seqK};
  const Dims rows = {s.batch, s.heads, s.seqQ, 1};
  const Dims rowStrides = {s.heads * s.seqQ, s.seqQ, 1, 1};
  const Dims qStrides = {s.q[0], s.q[1], s.q[2], s.q[3]};
  const Dims kStrides = {s.k[0], s.k[1], s.k[2], s.k[3]};
  auto Q = g.tensor(kQ, BF, qDims, qStrides, false);
  auto Kt = g.tensor(kK, BF, transposedDims(kDims), transposedStrides(kStrides),
                     false);
  auto O = g.tensor(kO, BF, qDims, qStrides, false);
  auto stats = g.tensor(kStats, F, rows, rowStrides, false);
  auto scale = g.scalar(kScale), negInf = g.scalar(kNegInf);
  // Scores: scale (Q K^T) (masked after).
  auto scores = [&] {
    auto raw = g.inner(F, scoreDims), scaled = g.inner(F, scoreDims);
    g.matmul(Q, Kt, raw);
    g.pointwise(CUDNN_POINTWISE_MUL, F, raw, scale, nullptr, scaled);
    return scaled;
  };
  // The ops in the order cuDNN's frontend emits them.
  if (!backward) {
    auto V = g.tensor(kV, BF, kDims, kStrides, false);
    auto scaled = scores();
    auto masked = s.causal ? g.causal(scaled, scoreDims, negInf) : scaled;
    // Softmax with its statistics: max + ln(sum exp(s - max)).
    auto max = g.inner(F, rows), shifted = g.inner(F, scoreDims),
         e = g.inner(F, scoreDims), sum = g.inner(F, rows),
         logSum = g.inner(F, rows);
    g.reduction(CUDNN_REDUCE_TENSOR_MAX, masked, max);
    g.pointwise(CUDNN_POINTWISE_SUB, F, masked, max, nullptr, shifted);
    g.pointwise(CUDNN_POINTWISE_EXP, F, shifted, nullptr, nullptr, e);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, e, sum);
    g.pointwise(CUDNN_POINTWISE_LOG, F, sum, nullptr, nullptr, logSum);
    g.pointwise(CUDNN_POINTWISE_ADD, F, max, logSum, nullptr, stats);
    // P, as the second GEMM reads it: bf16.
    auto P = g.inner(BF, scoreDims);
    g.pointwise(CUDNN_POINTWISE_DIV, F, e, sum, nullptr, P);
    g.matmul(P, V, O);
  } else {
    auto Vt = g.tensor(kV, BF, transposedDims(kDims),
                       transposedStrides(kStrides), false);
    auto dO = g.tensor(kDOut, BF, qDims, qStrides, false);
    auto dQ = g.tensor(kDQ, BF, qDims, qStrides, false);
    auto dK = g.tensor(kDK, BF, kDims, kStrides, false);
    auto dV = g.tensor(kDV, BF, kDims, kStrides, false);
    auto one = g.scalar(kOne);
    auto softmaxSum = g.tensor(kSoftmaxSum, F, rows, rowStrides, false);
    // D = rowsum(dO o).
    auto product = g.inner(F, qDims), rowSum = g.inner(F, rows);
    g.pointwise(CUDNN_POINTWISE_MUL, F, dO, O, nullptr, product);
    g.reduction(CUDNN_REDUCE_TENSOR_ADD, product, rowSum);
    g.pointwise(CUDNN_POINTWISE_MUL, F, rowSum, one, nullptr, softmaxSum);
    // P = exp(scores - stats), masked.
    auto scaled = scores();
    auto centred = g.inner(F, scoreDims);
    g.pointwise(CUDNN_POINTWISE_SUB, F, scaled, stats, nullptr, centred);
    auto masked = s.causal ? g.causal(centred, scoreDims, negInf) : centred;
    auto P = g.inner(F, scoreDims);
    g.pointwise(CUDNN_POINTWISE_EXP, F, masked, nullptr, nullptr, P);
    const Dims transposed = {s.batch, s.heads, s.seqK, s.seqQ};
    const Dims transposedView = {s.heads * s.seqQ * s.seqK, s.seqQ * s.seqK, 1,
                                 s.seqK};
    const Dims fullHeads = {s.batch, s.heads, s.seqK, s.headDim};
    const bool grouped = s.kvHeads < s.heads;
    // The gradient of the keys or values, summed over each group's heads
    // under grouped-query attention.
    auto perGroup = [&](cudnnBackendDescriptor_t a, cudnnBackendDescriptor_t b,
                        cudnnBackendDescriptor_t out) {
      if (!grouped) {
        g.matmul(a, b, out);
        return;
      }
      auto perHead = g.inner(BF, fullHeads);
      g.matmul(a, b, perHead);
      g.reduction(CUDNN_REDUCE_TENSOR_ADD, perHead, out);
    };
    // dV = P^T dO.
    auto Pt = g.tensor(0, BF, transposed, transposedView, true);
    g.reshape(P, Pt);
    perGroup(Pt, dO, dV);
    // dS = scale P (dO V^T - D).
    auto dP = g.inner(F, scoreDims), centredDP = g.inner(F, scoreDims),
         unscaled = g.inner(F, scoreDims), dS = g.inner(F, scoreDims);
    g.matmul(dO, Vt, dP);
    g.pointwise(CUDNN_POINTWISE_SUB, F, dP, softmaxSum, nullptr, centredDP);
    g.pointwise(CUDNN_POINTWISE_MUL, F, centredDP, P, nullptr, unscaled);
    g.pointwise(CUDNN_POINTWISE_MUL, F, unscaled, scale, nullptr, dS);
    // dK = dS^T Q.
    auto dSt = g.tensor(0, BF, transposed, transposedView, true);
    g.reshape(dS, dSt);
    perGroup(dSt, Q, dK);
    // dQ = dS K, written by its GEMM (the deterministic algorithm).
    auto Kr = g.tensor(0, BF, kDims, kStrides, true);
    g.reshape(Kt, Kr);
    g.matmul(dS, Kr, dQ);
    graph->scratchBytes = aligned(s.batch * s.heads * s.seqQ * 4);
  }

  // The operation graph, its engines by heuristics (mode A, then the
  // fallback list), the first configuration that finalizes.
  cudnnBackendDescriptor_t ops =
      g.create(CUDNN_BACKEND_OPERATIONGRAPH_DESCRIPTOR, "the operation graph");
  g.set(ops, CUDNN_ATTR_OPERATIONGRAPH_OPS, CUDNN_TYPE_BACKEND_DESCRIPTOR,
        g.ops.data(), static_cast<int64_t>(g.ops.size()), "the graph's ops");
  g.set(ops, kGraphHandle, CUDNN_TYPE_HANDLE, &handle, 1, "the graph's handle");
  g.finalize(ops, std::string("the ") + (backward ? "backward" : "forward") +
                      " attention graph");
  std::string refusals;
  for (cudnnBackendHeurMode_t mode :
       {CUDNN_HEUR_MODE_A, CUDNN_HEUR_MODE_FALLBACK}) {
    cudnnBackendDescriptor_t heuristics =
        g.create(CUDNN_BACKEND_ENGINEHEUR_DESCRIPTOR, "heuristics");
    g.set(heuristics, CUDNN_ATTR_ENGINEHEUR_OPERATION_GRAPH,
          CUDNN_TYPE_BACKEND_DESCRIPTOR, &ops, 1, "the heuristics' graph");
    g.set(heuristics, CUDNN_ATTR_ENGINEHEUR_MODE, CUDNN_TYPE_HEUR_MODE, &mode,
          1, "the heuristics' mode");
    if (api.finalize(heuristics) != CUDNN_STATUS_SUCCESS)
      continue;
    int64_t count = 0;
    g.check(api.getAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                             CUDNN_TYPE_BACKEND_DESCRIPTOR, 0, &count, nullptr),
            "counting engine configurations");
    std::vector<cudnnBackendDescriptor_t> configs;
    for (int64_t i = 0; i < count; ++i)
      configs.push_back(
          g.create(CUDNN_BACKEND_ENGINECFG_DESCRIPTOR, "an engine config"));
    int64_t got = 0;
    if (count > 0)
      g.check(api.getAttribute(heuristics, CUDNN_ATTR_ENGINEHEUR_RESULTS,
                               CUDNN_TYPE_BACKEND_DESCRIPTOR, count, &got,
                               configs.data()),
              "reading engine configurations");
    for (int64_t i = 0; i < got && !graph->plan; ++i) {
      cudnnBackendDescriptor_t plan =
          g.create(CUDNN_BACKEND_EXECUTION_PLAN_DESCRIPTOR, "a plan");
      g.set(plan, kPlanHandle, CUDNN_TYPE_HANDLE, &handle, 1,
            "the plan's handle");
      g.set(plan, CUDNN_ATTR_EXECUTION_PLAN_ENGINE_CONFIG,
            CUDNN_TYPE_BACKEND_DESCRIPTOR, &configs[static_cast<size_t>(i)], 1,
            "the plan's engine");
      const cudnnStatus_t status = api.finalize(plan);
      if (status == CUDNN_STATUS_SUCCESS) {
        graph->plan = plan;
        break;
      }
      if (refusals.empty() && api.lastErrorString) {
        char last[512] = {};
        api.lastErrorString(last, sizeof(last));
        refusals = last;
      }
    }
    if (graph->plan)
      break;
  }
  if (!graph->plan)
    throw CudnnError(
        std::string("cuDNN attention: no engine runs this ") +
        (backward ? "backward" : "forward") + " graph (" +
        std::to_string(s.batch) + " x " + std::to_string(s.seqQ) +
        " queries, " + std::to_string(s.seqK) + " keys, " +
        std::to_string(s.heads) + "/" + std::to_string(s.kvHeads) +
        " heads of " + std::to_string(s.headDim) +
        (s.causal ? ", causal" : "") + ")" +
        (refusals.empty() ? "" : ": " + refusals) +
        "; cuDNN compiles its attention kernels with NVRTC: libnvrtc must be "
        "loadable (LD_LIBRARY_PATH)");
  int64_t count = 0;
  g.check(api.getAttribute(graph->plan,
                           CUDNN_ATTR_EXECUTION_PLAN_WORKSPACE_SIZE,
                           CUDNN_TYPE_INT64, 1, &count, &graph->planWorkspace),
          "reading the plan's workspace size");
  release.graph = nullptr;
  return *(plans[s] = std::move(graph));
}

void CudnnAttention::run(const Graph &graph,
                         const std::map<int64_t, void *> &pointers,
                         cudaStream_t stream, const CudnnWorkspace &workspace) {
  std::vector<cudnnBackendDescriptor_t> none;
  Builder g(api, none);
  g.check(api.setStream(handle, stream), "setting the stream");
  std::vector<int64_t> uids;
  std::vector<void *> data;
  for (const auto &entry : pointers) {
    uids.push_back(entry.first);
    data.push_back(entry.second);
  }
  const int64_t total = graph.scratchBytes + aligned(graph.planWorkspace);
  char *space = total > 0 ? static_cast<char *>(workspace(total)) : nullptr;
  if (graph.scratchBytes > 0) {
    uids.push_back(kSoftmaxSum);
    data.push_back(space);
  }
  void *planSpace =
      graph.planWorkspace > 0 ? space + graph.scratchBytes : nullptr;
  cudnnBackendDescriptor_t pack = nullptr;
  g.check(api.createDescriptor(CUDNN_BACKEND_VARIANT_PACK_DESCRIPTOR, &pack),
          "creating a variant pack");
  struct Destroy {
    const CudnnApi &api;
    cudnnBackendDescriptor_t pack;
    ~Destroy() { api.destroyDescriptor(pack); }
  } destroy{api, pack};
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_UNIQUE_IDS, CUDNN_TYPE_INT64, uids.data(),
        static_cast<int64_t>(uids.size()), "the variant pack's ids");
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_DATA_POINTERS, CUDNN_TYPE_VOID_PTR,
        data.data(), static_cast<int64_t>(data.size()),
        "the variant pack's pointers");
  g.set(pack, CUDNN_ATTR_VARIANT_PACK_WORKSPACE, CUDNN_TYPE_VOID_PTR,
        &planSpace, 1, "the variant pack's workspace");
  g.finalize(pack, "the variant pack");
  g.check(api.execute(handle, graph.plan, pack),
          std::string("running the ") +
              (graph.backward ? "backward" : "forward"));
}

void CudnnAttention::forward(const CudnnAttentionShape &s,
                             const CudnnForwardBuffers &b, cudaStream_t stream,
                             const CudnnWorkspace &workspace) {
  const Graph &graph = plan(s, false);
  // By-value scalars: host memory, read when the call is enqueued.
  float scale = 1.0f / std::sqrt(static_cast<float>(s.headDim));
  float negInf = version >= 91000 ? -std::numeric_limits<float>::infinity()
                                  : std::numeric_limits<float>::lowest();
  run(graph,
      {{kQ, const_cast<void *>(b.q)},
       {kK, const_cast<void *>(b.k)},
       {kV, const_cast<void *>(b.v)},
       {kO, b.o},
       {kStats, b.stats},
       {kScale, &scale},
       {kNegInf, &negInf}},
      stream, workspace);
}

void CudnnAttention::backward(const CudnnAttentionShape &s,
                              const CudnnBackwardBuffers &b,
                              cudaStream_t stream,
                              const CudnnWorkspace &workspace) {
  const Graph &graph = plan(s, true);
  float scale = 1.0f / std::sqrt(static_cast<float>(s.headDim));
  float negInf = version >= 91000 ? -std::numeric_limits<float>::infinity()
                                  : std::numeric_limits<float>::lowest();
  float one = 1.0f;
  run(graph,
      {{kQ, const_cast<void *>(b.q)},
       {kK, const_cast<void *>(b.k)},
       {kV, const_cast<void *>(b.v)},
       {kO, const_cast<void *>(b.o)},
       {kStats, const_cast<float *>(b.stats)},
       {kDOut, const_cast<void *>(b.dout)},
       {kDQ, b.dq},
       {kDK, b.dk},
       {kDV, b.dv},
       {kScale, &scale},
       {kNegInf, &negInf},
       {kOne, &one}},
      stream, workspace);
}

} // namespace mimo::device::cuda
