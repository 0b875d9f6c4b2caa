//===- Model.h - Encoder and language-model pipeline stages ----*- C++ -*-===//
//
// docs/model.md: the encoder (patch embedding, pre-norm transformer layers with
// per-sample attention, projection MLP) and the language model (vocab-
// parallel embedding, pre-norm causal layers with RMSNorm, RoPE and SwiGLU,
// final norm, vocab-parallel head and cross-entropy), each as the part one
// rank holds: its pipeline stage's layers, Megatron-style tensor-parallel
// shards (column-parallel QKV / gate / up, row-parallel output / down),
// sequence parallelism (all-gather / reduce-scatter around the TP regions)
// and context parallelism (attention over the keys and values of every CP
// rank, with the global positions each one holds).
//
// Defined in Model.cpp (a stage's flat parameter buffers), TransformerLayer.h
// (the layer both modules stack), EncoderStage.cpp and LanguageStage.cpp.
//
// Parameters are pure functions of (seed, module, name, global index), so
// every layout starts from the same model as the single-rank reference.
// A stage's parameters, gradients and AdamW moments live in four flat
// buffers (each Param holds views into them), so gradient reduction, the
// norm, clipping and the optimizer are one call per buffer. Everything a
// kernel reads (index arrays included) lives on the rank's device; only
// the step's loss and norm scalars come back to the host.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_MODEL_H
#define MIMO_RUNTIME_MODEL_MODEL_H

#include "runtime/comm/Channel.h"
#include "runtime/comm/Comm.h"
#include "runtime/config/ModelConfig.h"
#include "runtime/config/Parameters.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/data/Data.h"
#include "runtime/device/Device.h"
#include "runtime/device/Tensor.h"
#include "runtime/family/Moe.h"
#include "runtime/model/WeightGrads.h"
#include "runtime/plan/Plan.h"

#include <cmath>
#include <functional>
#include <map>
#include <memory>
#include <string>
#include <vector>

namespace mimo::exec {

using device::Device;
using device::Tensor;

struct Param {
  /// "module.name", the logical name (the same in every layout).
  std::string name;
  /// This rank's block [rowBegin, rowEnd) x [colBegin, colEnd) of the
  /// global [globalRows, globalCols] parameter.
  int64_t rowBegin = 0, rowEnd = 0, colBegin = 0, colEnd = 0;
  int64_t globalRows = 0, globalCols = 0;
  /// Views of the stage's flat buffers. `work` is what the forward and
  /// backward compute with: `value` itself in fp32, its bf16-rounded copy
  /// in bf16 (the master weights and AdamW stay fp32).
  Tensor value, work, grad, m, v;
  /// Where its values lie in the flat buffers: [flatBegin, flatEnd), the
  /// end padded to the next parameter's start.
  int64_t flatBegin = 0, flatEnd = 0;
  /// Identical on every TP rank of the module (counted once in the norm).
  bool replicatedOverTp = false;
  /// Its gradient is a partial sum over the TP group (ParamSpec): summed
  /// over TP before the DP x CP reduction.
  bool partialOverTp = false;
  /// An expert apart (StageContext::expertsApart: expert parallelism, or
  /// experts cut over fewer TP ranks than the rest): its gradient summed
  /// over the expert-data-parallel group, not DP x CP.
  bool expert = false;
  /// Never updated (the module's `freeze`): no moments (m and v empty), its
  /// gradient a view of scratch that every frozen parameter shares and
  /// nothing reads.
  bool frozen = false;
  int64_t size() const { return (rowEnd - rowBegin) * (colEnd - colBegin); }
  /// The working values as a GEMM operand: fp32, or bf16 bits.
  device::Bf16Operand weight() const {
    if (work.dtype() == device::DType::BF16)
      return device::Bf16Operand(work.data<uint16_t>());
    return device::Bf16Operand(work.data());
  }
};

/// A stage's parameters in one allocation per role, laid out in five
/// groups: [replicated and TP-partial | other replicated | TP-sharded |
/// experts | frozen], so the TP-partial gradients are a prefix (summed
/// over TP), the sharded ones follow (each TP rank's own share of the
/// norm), the experts under expert parallelism from `experts` (summed over
/// the expert-data-parallel group; `experts` = `trainable` without) and
/// the trainable ones end at `trainable`. `grads`, `m` and `v` cover
/// [0, trainable) only (grads plus the frozen parameters' shared scratch;
/// m and v empty under the distributed optimizer).
struct FlatParams {
  Tensor values, grads, m, v;
  /// bf16 only: the working weights, `values` rounded to bfloat16 and
  /// held as bf16.
  Tensor working;
  int64_t tpPartial = 0, replicated = 0, experts = 0, trainable = 0, total = 0;
};

/// A rank's place in one module's grid, with the groups it computes with.
struct StageContext {
  comm::Comm *comm = nullptr;
  Device *dev = nullptr;
  uint64_t seed = 0;
  int64_t tp = 1, tpRank = 0, cp = 1, cpRank = 0, pp = 1, ppRank = 0;
  bool sequenceParallel = false;
  /// precision "bf16": working weights and stored activations rounded to
  /// bfloat16 (fp32 arithmetic, fp32 master weights, gradients and AdamW).
  bool bf16 = false;
  /// The last language stage's head and loss run in chunks of rows with at
  /// most this many bytes of fp32 logits (cost/MemoryPlan.h).
  int64_t logitChunkBytes = kLogitChunkBytes;
  /// Under bf16 the head's gradients run over groups of chunks whose bf16
  /// logit gradients hold at most this many bytes (cost/MemoryPlan.h).
  int64_t headGradientBytes = kHeadGradientBytes;
  /// The module's distributed optimizer shards the AdamW moments
  /// (exec/OptimizerShards.h): the stage keeps none (FlatParams m and v,
  /// each Param's m and v empty).
  bool shardedMoments = false;
  /// docs/model-json.md `cp_comm` "ring" with cp > 1 (model/RingAttention.h):
  /// keys and values pass around the CP group, as messages of `ringTag`,
  /// on `ringChannel` when the rank has one (null: blocking).
  bool ringCp = false;
  int64_t ringTag = 0;
  comm::Channel *ringChannel = nullptr;
  /// Zero bubble (model/WeightGrads.h): where the layers' weight-gradient
  /// GEMMs go while it defers; null, or not deferring: they run at once.
  DeferredWeightGrads *weightGrads = nullptr;
  std::vector<int64_t> tpGroup, cpGroup;
  /// The module's DP x CP group holding this rank (a sparse layer sums its
  /// routing statistics over it: the global microbatch's) and the step's
  /// microbatches (the aux loss is their mean).
  std::vector<int64_t> dpcpGroup;
  int64_t microbatches = 1;
  /// Expert parallelism (plan/Plan.h expertGroups): this rank holds expert
  /// block `epRank` of `ep`, each cut over `etp` of the TP ranks
  /// (family/Moe.h ExpertTp; 0: tp); its sparse layers exchange rows over
  /// `epGroup` as messages of `moeTag`; with `expertsApart` its experts'
  /// gradients are summed over `edpGroup`, not DP x CP.
  int64_t ep = 1, etp = 0, epRank = 0, moeTag = 0;
  bool expertsApart = false;
  ExpertTp expertTp() const { return ExpertTp::of(tp, etp, tpRank); }
  std::vector<int64_t> epGroup, edpGroup;
  /// The TP x CP group (ascending) and each member's (tp, cp) coordinates.
  std::vector<int64_t> tpcpGroup;
  std::vector<std::pair<int64_t, int64_t>> tpcpCoords;
};

class TransformerLayer;
struct LayerCache;
struct LayerMeta;

/// Which positions of a lane's sequence one rank holds.
struct LaneTokens {
  /// Token indices (position * batch + b) of this rank's CP shard, in the
  /// order it stores them, and of its SP slice (= cp without SP).
  std::vector<int64_t> cp, local;
  /// Every CP rank's shard, concatenated in CP-rank order (the keys).
  std::vector<int64_t> keys;
};

class Stage {
public:
  virtual ~Stage();
  std::vector<Param> &params() { return parameters; }
  FlatParams &flat() { return flatParams; }
  bool isFirst() const { return ctx.ppRank == 0; }
  bool isLast() const { return ctx.ppRank == ctx.pp - 1; }
  const StageContext &context() const { return ctx; }
  /// bf16: the working weights from the master weights (after they change:
  /// the optimizer step, a checkpoint load).
  void refreshWorking();
  /// A parameter's working values in fp32, for the kernels that take fp32
  /// weights (norms, biases: vectors): a view in fp32, an unpacked copy in
  /// bf16.
  Tensor vectorOf(const Param &p) const;
  /// bf16: `t` rounded to bfloat16 in place, as the GPU stores it.
  void store(Tensor &t) const {
    if (ctx.bf16 && t.size() > 0)
      ctx.dev->roundTo(device::DType::BF16, t.data(), t.size());
  }
  /// Forgets what forwards saved for their backwards (after an evaluation,
  /// which runs no backward).
  virtual void dropCaches() = 0;
  /// Called as a microbatch's backward finishes accumulating the
  /// gradients of parameters (indices into params()): every parameter once
  /// per microbatch, in backward order (what bucketed gradient reduction
  /// starts from). Null: nobody listens.
  using GradsDone = std::function<void(const std::vector<size_t> &)>;
  void onGradsDone(GradsDone hook) { gradsDoneHook = std::move(hook); }
  /// Ring CP's transfers on `channel` (StageContext::ringChannel).
  void useRingChannel(comm::Channel *channel) { ctx.ringChannel = channel; }
  /// Zero bubble (model/WeightGrads.h): from now on a backward run between
  /// deferWeightGrads(mb) and stopDeferring() makes input gradients only,
  /// and weightBackward(mb) makes the weight gradients it left.
  void splitBackward() { ctx.weightGrads = &deferredGrads; }
  bool splitsBackward() const { return ctx.weightGrads != nullptr; }
  void deferWeightGrads(int64_t mb) { deferredGrads.begin(mb); }
  void stopDeferring() { deferredGrads.end(); }
  void weightBackward(int64_t mb) {
    for (const std::vector<size_t> &params : deferredGrads.run(mb))
      gradsDone(params);
  }
  /// Microbatches whose weight gradients wait (0 after a step).
  size_t waitingWeightGrads() const { return deferredGrads.waiting(); }
  /// Forgets what a step that failed midway left deferred.
  void dropWeightGrads() { deferredGrads.clear(); }
  /// The sparse layers' aux and z losses (docs/model.md "Mixture of
  /// experts") of this stage's forwards since the last call, weighted and
  /// divided by the step's microbatches; reset.
  double takeAuxLoss() {
    const double out = auxLoss;
    auxLoss = 0;
    return out;
  }

protected:
  explicit Stage(StageContext ctx);
  /// Creates this rank's block of each parameter (config/Parameters.h), its
  /// initial values a pure function of (seed, module, name, global index),
  /// in flat buffers (finalizeParameters).
  void buildParameters(const std::vector<ParamSpec> &specs,
                       const ModuleConfig &module);
  /// The index of parameter `local` of this stage's module.
  size_t indexOf(const std::string &local) const;
  /// Allocates the flat buffers, uploads the initial values and points
  /// every Param at its views (after the last parameter).
  void finalizeParameters();
  /// dst row dstRows[i] = src row srcRows[i] (host row maps, uploaded).
  void copyRows(Tensor &dst, const std::vector<int64_t> &dstRows,
                const Tensor &src, const std::vector<int64_t> &srcRows,
                int64_t cols);
  /// Where a weight GEMM accumulates `p`'s gradient: null when `p` is
  /// frozen (the GEMM is skipped).
  static float *weightGrad(Param &p) {
    return p.frozen ? nullptr : p.grad.data();
  }
  /// Tells the listener (onGradsDone) that `params` are accumulated.
  void gradsDone(const std::vector<size_t> &params) {
    if (deferredGrads.deferring())
      deferredGrads.notice(params); // told after the weight gradients
    else if (gradsDoneHook)
      gradsDoneHook(params);
  }
  /// Runs layers [end-1 .. 0]'s backward over `dx`, telling the listener
  /// after each layer.
  Tensor layersBackward(std::vector<LayerCache> &caches, Tensor dx,
                        const LayerMeta &meta);
  StageContext ctx;
  std::vector<Param> parameters;
  std::vector<std::vector<float>> initialValues; // until finalized
  FlatParams flatParams;
  std::vector<std::unique_ptr<TransformerLayer>> layers;
  /// Where the sparse layers' forwards add their losses (takeAuxLoss).
  double auxLoss = 0;

private:
  GradsDone gradsDoneHook;
  DeferredWeightGrads deferredGrads;
};

class EncoderStage final : public Stage {
public:
  EncoderStage(const ModuleConfig &module, int64_t outputHidden,
               StageContext ctx);
  ~EncoderStage() override;
  /// First stage: input = features [rows, feature_dim]; otherwise the
  /// previous stage's [rows, hidden]. Returns [rows, hidden], or the
  /// projection [rows, output_hidden] on the last stage.
  Tensor forward(int64_t mb, const Tensor &input,
                 const std::vector<int64_t> &segment, int64_t rows);
  /// Returns the gradient of the stage input (empty on the first stage).
  Tensor backward(int64_t mb, const Tensor &gradOutput);
  int64_t hidden() const { return hiddenSize; }
  int64_t outputHidden() const { return outHidden; }
  void dropCaches() override;

private:
  /// First stage: its lowest layers whose backward is skipped (they and
  /// everything under them, the patch embedding, are frozen).
  int64_t frozenBelow = 0;
  int64_t featureDim, hiddenSize, outHidden;
  float normEps;
  int64_t maxPositions;
  std::string moduleName;
  device::Gelu projectorGelu; // projector_activation
  /// Parameter indices; kNone where the architecture has none.
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t patchW = kNone, patchB = kNone, classToken = kNone, positions = kNone,
         preW = kNone, preB = kNone, finalW = kNone, finalB = kNone,
         proj1W = kNone, proj1B = kNone, proj2W = kNone, proj2B = kNone;
  /// What the first stage holds below its layers.
  std::vector<size_t> bottomParams() const;
  /// LayerNorm of the module (pre_norm, final_norm) of `x` [rows, hidden],
  /// stored; keeps its input and statistics for the backward.
  Tensor layerNorm(Tensor x, size_t w, size_t b, Tensor &in, Tensor &mean,
                   Tensor &rstd, int64_t rows);
  Tensor layerNormBackward(const Tensor &dy, size_t w, size_t b,
                           const Tensor &in, const Tensor &mean,
                           const Tensor &rstd, int64_t rows);
  struct Cache;
  std::map<int64_t, std::unique_ptr<Cache>> caches;
};

class LanguageStage final : public Stage {
public:
  LanguageStage(const ModuleConfig &module, const ShardTopology &shard,
                StageContext ctx);
  ~LanguageStage() override;
  LaneTokens tokensOf(const LanguageLane &lane, int64_t cpRank,
                      int64_t tpRank) const;
  /// Rows of this rank's stage input/output for `lane`.
  int64_t localTokens(const LanguageLane &lane) const;
  int64_t hidden() const { return hiddenSize; }
  void dropCaches() override;
  /// First stage: the input embeddings of this rank's shard: text rows from
  /// the vocab-parallel embedding, modality rows (`modality[e]`, the lane's
  /// rows of encoder e, or null when absent) at their special tokens, then
  /// CP zigzag and SP slice (docs/data.md, docs/plan.md).
  Tensor shard(int64_t mb, const LanguageLane &lane,
               const std::vector<const Tensor *> &modality);
  /// Runs this stage. On the last stage adds this rank's share of
  /// Σ mask·CE / N to the device double `lossSum[0]` (when given) and
  /// returns nothing; there, unless `evaluating`, it also computes the
  /// loss's gradient through the head (the weight's and the output's, for
  /// backward()), chunk by chunk with the loss.
  Tensor forward(int64_t mb, const LanguageLane &lane, Tensor input,
                 double invN, Tensor *lossSum, bool evaluating = false);
  /// Returns the gradient of the stage input (this rank's shard).
  Tensor backward(int64_t mb, const Tensor *gradOutput);
  /// First stage: whether the input gradient must be gathered over the
  /// TP x CP group before the embedding backward.
  bool needsUnshard() const;
  /// First stage: gathers the input gradient of the whole lane (when
  /// needsUnshard), accumulates the embedding gradient of this rank's CP
  /// positions and vocab shard, and returns the gradient of every encoder's
  /// lane rows.
  std::vector<Tensor> inputBackward(int64_t mb, const LanguageLane &lane,
                                    const Tensor &gradInput, size_t encoders);

private:
  int64_t hiddenSize, vocab, vocabLocal;
  float normEps; // the final norm's (model.json norm_eps)
  /// RoPE's frequencies and head dimension: a micro-batch's rotation table
  /// (LayerMeta::ropeTable) is built once from them.
  device::RopeSpec rope;
  int64_t headDim = 0;
  ShardTopology shardTopology;
  size_t embedding = 0, finalNorm = 0, head = 0;
  bool tied = false; // tie_embeddings: head == embedding
  struct Cache;
  std::map<int64_t, std::unique_ptr<Cache>> caches;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_MODEL_MODEL_H
