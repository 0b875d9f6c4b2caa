//===- RankExecutor.h - One rank's interpreter of its program --*- C++ -*-===//
//
// Internal to runtime/exec (Executor.cpp starts the ranks): a RankExecutor
// runs its rank's instruction stream step after step. Its definitions are
// split by concern: RankExecutor.cpp (steps, evaluation, the state of a
// step), RankInstructions.cpp (what each instruction does),
// RankCheckpoint.cpp (saving and loading).
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_RANKEXECUTOR_H
#define MIMO_RUNTIME_EXEC_RANKEXECUTOR_H

#include "runtime/exec/Executor.h"
#include "runtime/exec/GradBuckets.h"
#include "runtime/exec/OptimizerShards.h"
#include "runtime/exec/ParamGroups.h"
#include "runtime/model/Model.h"
#include "runtime/support/Limits.h"

#include <atomic>
#include <chrono>
#include <functional>
#include <map>
#include <memory>
#include <optional>
#include <stdexcept>
#include <string>
#include <vector>

namespace mimo::exec {

using Clock = std::chrono::steady_clock;
using Key = std::pair<size_t, int64_t>; // (module or bridge, microbatch)

/// Message tags: kind, module/bridge, microbatch.
/// kRing: ring CP's keys, values and their gradients (model/RingAttention.h).
enum TagKind : int64_t {
  kAct = 1,
  kGrad = 2,
  kBridge = 3,
  kBridgeGrad = 4,
  kRing = 5,
  kMoe = 6 // a sparse layer's rows over its ep group (model/MoeMlp.h)
};
/// `chunk`: the sending chunk of the interleaved schedule's pipeline
/// messages (plan/Plan.h senderChunk), 3 bits beside the module's 7. Every
/// tag stays below comm/Comm.h's kCollectiveTagBase (2^28).
inline int64_t tagOf(TagKind kind, int64_t index, int64_t mb,
                     int64_t chunk = 0) {
  static_assert(kMaxModules <= 128 && kMaxVirtualStages <= 8 &&
                    kMaxMicrobatches <= 16384,
                "the limits must fit the tag's 7 + 3 and 14 bits");
  if (index >= kMaxModules || mb >= kMaxMicrobatches ||
      chunk >= kMaxVirtualStages)
    throw std::runtime_error("too many modules or microbatches for the tags");
  return (static_cast<int64_t>(kind) << 24) | (((chunk << 7) | index) << 14) |
         mb;
}

/// A failure of this rank's own work (not a communication failure caused
/// by another rank).
class RankFailure : public std::runtime_error {
public:
  using std::runtime_error::runtime_error;
};

/// A step whose loss or gradient norm is not finite (docs/runtime.md
/// "Failures"): every rank stops with the same text, which names the step
/// and the first non-finite gradient; rank 0 (`reporter`) reports it.
class NonFiniteStep : public RankFailure {
public:
  NonFiniteStep(const std::string &what, bool reporter)
      : RankFailure(what), reporter(reporter) {}
  bool reporter;
};

struct ModuleState {
  size_t index = 0;
  /// The interleaved schedule: which of the rank's chunks of the module's
  /// layers this is (0 otherwise), and its place among the rank's states
  /// (RankExecutor::slotOf; the module's index for chunk 0).
  int32_t chunk = 0;
  size_t slot = 0;
  const ModuleTopology *topo = nullptr;
  const ModuleConfig *config = nullptr;
  Coords coords;
  std::unique_ptr<EncoderStage> encoder;
  std::unique_ptr<LanguageStage> language;
  Stage *stage = nullptr;
  std::vector<int64_t> dpcpGroup;
  /// Expert parallelism (plan/Plan.h expertGroups; ep 1: the DP x CP
  /// group's every member in `edp`, and under etp < tp the TP ranks
  /// holding the same cut with theirs).
  ExpertGroups experts;
  /// A tied embedding across pipeline stages (docs/model.md), on its first
  /// and last stage: the pair that sums its gradient, and where the
  /// gradient lies in the flat buffer; `tiedCopy` on the last stage, whose
  /// copy the gradient norm and the checkpoint leave out.
  std::vector<int64_t> tiedGroup;
  int64_t tiedBegin = 0, tiedEnd = 0;
  bool tiedCopy = false;
  int64_t laneBegin = 0, laneEnd = 0;
  /// Bucketed DP x CP gradient reduction overlapped with the backward
  /// (null: one all-reduce at ReduceGrads). Declared after the stage, so
  /// destroyed before the gradients it writes.
  std::unique_ptr<comm::Channel> channel;
  std::unique_ptr<BucketedReduction> reduction;
  /// Ring CP's transfers, overlapped with the attention (null: blocking).
  std::unique_ptr<comm::Channel> ringChannel;
  /// What AdamW updates and how, and what stays frozen.
  ParamGroups groups;
  /// The distributed optimizer (exec/OptimizerShards.h): this member's
  /// pieces and their AdamW moments (null: the moments are whole, in the
  /// stage's flat buffers).
  std::unique_ptr<OptimizerShards> shards;
  /// The ranks of each group the shards' ranges are cut over (ShardRange::
  /// group: the DP x CP group, then the experts' edp group).
  std::vector<std::vector<int64_t>> shardGroups;
  Tensor shardM, shardV;
  /// Under bf16 the fp32 master weights are sharded too: this member's
  /// pieces (shardValues, the layout of shardM) and the frozen parameters'
  /// (frozenValues, [trainable, total) of the flat layout, which every
  /// Param::value of a frozen parameter views); the stage's flat values
  /// are gone and the trainable parameters' `value` views empty.
  Tensor shardValues, frozenValues;
  bool shardedMasters() const { return !shardValues.empty(); }
};

/// The distributed optimizer's state made whole for a checkpoint
/// (RankExecutor::wholeState): empty where the module keeps it whole.
struct WholeState {
  Tensor m, v, masters;
};

/// Makes the rank's channel (comm/Channel.h) with tag range `tagChannel`,
/// serving channel `families` (indices of channelFamiliesOf; none for the
/// send channel), or null: that channel runs blocking instead.
using ChannelFactory = std::function<std::unique_ptr<comm::Channel>(
    int64_t tagChannel, const std::vector<size_t> &families)>;

/// The plan's channel families (plan/Plan.h channelFamilies), the language
/// module's CP a ring where its config says so.
std::vector<ChannelFamily> channelFamiliesOf(const Plan &plan);

/// Where a rank is, for a watchdog on another thread: the instruction it
/// runs (null between instructions) and when it started it.
struct RankProgress {
  std::atomic<const Instr *> instr{nullptr};
  std::atomic<int64_t> step{0}, index{0};
  std::atomic<int64_t> sinceNs{0}; // Clock's time since epoch
};

/// How a rank runs beyond what its plan says: how communication overlaps
/// the compute, and the rows of logits its head computes at once.

struct RankOptions {
  /// Gradient bucket size (0: one all-reduce at ReduceGrads).
  int64_t bucketBytes = 0;
  /// Batches of sends only (pipeline and bridge sends) are posted on a
  /// channel and the rank goes on computing; they are waited for at the
  /// end of the pass.
  bool sendsAhead = false;
  /// Ring CP's transfers run on a channel of their own, during the
  /// attention of the block before (model/RingAttention.h).
  bool ringAhead = false;
  /// Null where the backend has no channels (mpi): no overlap.
  ChannelFactory channels;
  /// The most bytes of fp32 logits the last language stage holds at once
  /// (cost/MemoryPlan.h logitChunkRows).
  int64_t logitChunkBytes = kLogitChunkBytes;
  /// Under bf16 the head's gradient GEMMs' group (headGradientRows).
  int64_t headGradientBytes = kHeadGradientBytes;
  /// A step whose loss or gradient norm is not finite is skipped (no
  /// update, its gradients dropped) instead of stopping the run.
  bool skipNonFinite = false;
  /// Kept up to date at each instruction's start and end, when set.
  RankProgress *progress = nullptr;
  /// The process's stop-signal count (RunOptions::stopRequests), or null.
  const std::atomic<int> *stopRequests = nullptr;
  /// The modules' starting weights (`init`), by module name, opened once
  /// per process; unused when resuming.
  std::map<std::string, std::shared_ptr<const ModuleWeights>> inits;
};

/// The tag channel of a rank's send channel (its messages carry their own
/// tags; it runs no collectives).
inline constexpr int64_t kSendChannel = 0;

class RankExecutor {
public:
  RankExecutor(const Plan &plan, int64_t rank, comm::Comm &comm, Device &dev,
               const DataSource &data, const DataSource *evalData,
               Clock::time_point origin, const RankOptions &overlap = {});

  /// One training step (0-based `step`).
  StepMetrics runStep(int64_t step, bool trace,
                      std::vector<TraceEvent> &events);

  /// The loss of held-out batch `index` (the forward half of the program on
  /// the eval data; nothing is updated).
  double evaluate(int64_t index, bool trace, std::vector<TraceEvent> &events);

  /// Runs one pass of `prog` over batch `step` of the active data.
  void run(const Program &prog, int64_t step, bool trace,
           std::vector<TraceEvent> &events);

  /// The parameters this rank holds and which of their blocks it writes to
  /// a checkpoint (one writer per block).
  HeldParams heldParams();

  /// Restores parameters and moments from a checkpoint (any layout's).
  void load(const Checkpoint &checkpoint);
  /// Each held module's starting weights from `inits` (docs/model-json.md
  /// `init`); optimizer state stays fresh.
  void loadInits(
      const std::map<std::string, std::shared_ptr<const ModuleWeights>> &inits);

  /// docs/checkpoints.md: every rank writes its blocks into step-N.tmp; rank 0
  /// makes the files before and the checkpoint complete after (atomic).
  void save(const std::string &dir, int64_t step, int64_t killDuringSave);

  /// Every rank waits for every other.
  void barrier();

  std::string where() const;
  /// Whether every rank ends after the step just run (a stop signal).
  bool stopRequested() const { return stepStop; }

private:
  double micros() const;

  std::unique_ptr<ModuleState> makeModule(size_t m, int32_t chunk,
                                          const RankOptions &options);
  /// A module's chunk's place among the rank's states (the module's index
  /// for chunk 0), and that of a module instruction.
  size_t slotOf(size_t module, int32_t chunk) const {
    return module + static_cast<size_t>(chunk) * topo.modules.size();
  }
  size_t slotOf(const Instr &in) const {
    return instrInfo(in.op).operand == InstrOperand::Module
               ? slotOf(static_cast<size_t>(in.index), in.chunk)
               : static_cast<size_t>(in.index);
  }
  /// Gives module `m` its channel and buckets (when the setup allows and
  /// its DP x CP group has more than one rank).
  void setUpOverlap(ModuleState &m, const RankOptions &overlap);
  /// Gives module `m` its optimizer shards (after setUpOverlap: the
  /// buckets are its ranges) when its optimizer is distributed.
  void setUpShards(ModuleState &m);
  /// Under the distributed optimizer: `buffer` (a flat buffer of the
  /// module's) made whole over each range overlapping [begin, end), each
  /// member's piece gathered from it.
  void gatherPieces(ModuleState &m, float *buffer, int64_t begin, int64_t end);
  /// Sharded masters after the update: each member's pieces rounded into
  /// the working weights, which are then gathered.
  void gatherWorking(ModuleState &m);
  /// A whole fp32 buffer of the trainable values from this member's
  /// `pieces` (the shards' layout): gathered from every member when
  /// `gather`, else zeros.
  Tensor wholeOf(ModuleState &m, const Tensor &pieces, bool gather);
  /// This member's pieces of the whole buffer `whole` into `pieces`.
  void keepPieces(ModuleState &m, const Tensor &whole, Tensor &pieces);
  /// Under the distributed optimizer, for a checkpoint or an init: the
  /// module's whole AdamW moments (when `moments`) and, when sharded, its
  /// whole fp32 masters, every Param's m, v and value a view of them;
  /// gathered from the members' pieces when `gather` (a save), else zeros
  /// (a load, then keepWhole).
  WholeState wholeState(ModuleState &m, bool gather, bool moments);
  /// Drops the whole state; after a load (`read`) each member first keeps
  /// its pieces of it and makes its working weights from the masters.
  void keepWhole(ModuleState &m, WholeState &whole, bool read);

  ModuleState &module(size_t m);

  void resetStep();

  /// Model FLOPs of this step's global batch (config/Flops.h).
  double batchFlops();

  const Microbatch &batch(int64_t mb);

  const LanguageLane &lane(const ModuleState &lm, int64_t mb);

  /// Whether this rank's output of encoder `m` leaves it: every rank's in
  /// a colocated bridge, a source leader's otherwise (its TP/CP peers hold
  /// copies and send nothing).
  bool handsOn(size_t m) const;
  /// Whether this rank returns bridge `b`'s gradient (the adjoint).
  bool takesBack(size_t b) const;

  /// Rows of encoder `m`'s tokens in samples [begin, end) of microbatch mb.
  int64_t rows(size_t m, int64_t mb, int64_t begin, int64_t end);

  Tensor take(std::map<Key, Tensor> &from, Key key, const char *what);

  /// The bytes of each point-to-point piece of a bridge between source
  /// lane `s` and destination lane `d`: the samples both cover.
  struct Piece {
    int64_t srcOffset, dstOffset, rows;
  };
  Piece piece(const BridgeTopology &bridge, int64_t mb, int64_t s, int64_t d);

  int64_t laneRowsOf(size_t encoder, const Grid &grid, int64_t lane,
                     int64_t mb);

  /// Values of a pipeline message of module m (both stages agree).
  int64_t activationSize(ModuleState &m, int64_t mb);

  Peers peersOf(const Instr &in);

  /// A message of all of `t`'s bytes (a view, for a piece of a tensor).
  static comm::P2POp op(bool send, int64_t peer, int64_t tag, const Tensor &t);

  /// The trace arguments of an instruction: its microbatch and, for sends
  /// and receives, the peers and bytes each way.
  std::string traceArgs(const Instr &in) const;

  /// Posts the point-to-point instructions [first, last] together.
  void exchange(const std::vector<Instr> &instrs, size_t first, size_t last);

  /// Waits for the sends posted ahead (their spans go to the trace) and
  /// the posted sends.
  void awaitSends();

  void execute(const Instr &in);

  void forward(ModuleState &m, int64_t mb);

  void backward(ModuleState &m, int64_t mb);

  void shard(ModuleState &lm, int64_t mb);

  void inputBackward(ModuleState &lm, int64_t mb, const Tensor &grad);

  /// docs/plan.md: all-gather over the gather group (fan-in forward, fan-out
  /// backward), narrow to this rank's lane (the other way), or identity.
  void colocated(const BridgeTopology &bridge, Key key, bool forward);

  /// The TP sum of TP-partial gradients (a prefix of the flat buffer),
  /// then the DP x CP sum of all of them: one collective each.
  void reduceGrads(ModuleState &m);

  /// Global gradient norm and loss (one all-reduce of two doubles on the
  /// device, one download), clipping folded into AdamW, one AdamW launch
  /// per module.
  void optimizerStep();

  const Plan &plan;
  const Topology &topo;
  int64_t rank;
  comm::Comm &comm;
  Device &dev;
  const DataSource &data;
  /// Held-out data (null without evaluations) and the one being read.
  const DataSource *evalData, *active;
  bool evaluating = false;
  /// The program's forward half, for evaluations.
  Program evalProgram;
  Clock::time_point origin;
  std::vector<EncoderInfo> encoders;
  std::vector<int64_t> world;
  std::vector<std::unique_ptr<ModuleState>> modules;
  const Program *program = nullptr;

  /// currentInstr while writing a checkpoint.
  static constexpr int64_t kSaving = -2;
  int64_t stepIndex = 0, currentInstr = -1;
  std::map<int64_t, Microbatch> batches;
  std::map<int64_t, LanguageLane> lanes;
  std::map<Key, Tensor> actIn, actOut, gradIn, gradOut, encOut, encGrad,
      bridgeIn, bridgeGrad;
  Tensor stepScalars, lossScalar;
  /// A stop was requested on some rank by this step's optimizer step.
  bool stepStop = false;
  /// The last exchange's messages (for the trace).
  std::vector<comm::P2POp> exchanged;
  /// Collectives the channels finished since the last trace event.
  std::vector<BucketedReduction::Span> channelSpans;
  /// Sends posted ahead and the tensors they read (kept alive until they
  /// are done). Declared before the channel, so destroyed after it.
  struct InFlight {
    std::shared_ptr<comm::Request> request;
    std::vector<Tensor> buffers;
    std::string name;
    int64_t bytes = 0;
  };
  std::vector<InFlight> inFlight;
  /// Posted sends (docs/plan.md "Posted messages") and the tensors they
  /// read; the handle goes first (it withdraws what was never received).
  struct PostedFlight {
    std::vector<Tensor> buffers;
    std::unique_ptr<comm::PostedSends> sends;
  };
  std::vector<PostedFlight> postedInFlight;
  std::unique_ptr<comm::Channel> sendChannel;
  double invN = 0, stepLoss = 0, stepNorm = 0, stepFlops = 0, stepAux = 0;
  /// The last step's loss or norm was not finite and it was skipped.
  bool stepSkipped = false;
  bool skipNonFinite = false;
  RankProgress *progress = nullptr;
  const std::atomic<int> *stopRequests = nullptr;
  /// MIMO_TEST_HANG's rank and step (tests).
  std::optional<std::pair<int64_t, int64_t>> hang;
  std::string firstNonFiniteGradient();
  [[noreturn]] void stopOnNonFinite();
  /// The largest rank's peak device memory in the step (-1: untracked).
  int64_t stepPeakBytes = -1, stepPeakRank = -1, stepTargets = 0;
  std::vector<int64_t> stepRankPeaks;
  /// Host seconds of this rank's compute instructions this step, and every
  /// rank's (gathered with the loss).
  double stepComputeSeconds = 0;
  std::vector<double> stepRankCompute;
  int64_t stepTokens = 0;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_RANKEXECUTOR_H
