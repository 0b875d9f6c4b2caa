//===- Plan.h - Per-rank programs and the plan they form -------*- C++ -*-===//
//
// The compiled form of a model (docs/architecture.md, docs/plan.md), MLIR-free
// so that the passes, codegen, the plan loader, the runtime and the tests share
// one definition:
//
//  * Topology: the module grids, the bridges between them, the 1F1B stages
//    and the sequence sharding: everything a rank needs to know who its
//    peers are.
//  * Program: one instruction stream per *role* (ranks whose streams are the
//    same up to their peers). Peers are symbolic (the next pipeline stage,
//    this lane's bridge routes, this rank's boundary group, ...) and are
//    resolved per rank by the grid formulas, so plans grow with the number
//    of distinct roles, not with the world size.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_PLAN_PLAN_H
#define MIMO_RUNTIME_PLAN_PLAN_H

#include "runtime/config/Grid.h"
#include "runtime/family/Moe.h"
#include "runtime/plan/Topology.h"
#include "runtime/schedule/PipelineSchedule.h"

#include <cstdint>
#include <optional>
#include <stdexcept>
#include <string>
#include <string_view>
#include <vector>

namespace mimo {

inline constexpr int64_t kPlanVersion = 1;

/// One module of the topology.
struct ModuleTopology {
  std::string name;
  bool isLanguage = false;
  Grid grid{Coords{1, 1, 1, 1}};
  /// The module's own hidden size, and the hidden size of what it hands
  /// on (an encoder's projection to the language hidden size).
  int64_t hidden = 0, outputHidden = 0;
  /// Encoders only.
  int64_t specialTokenId = -1;
  /// Chunks of layers per pipeline rank (parallel.virtual_stages; the
  /// interleaved schedule): virtual stage chunk x pp + stage.
  int64_t virtualStages = 1;
  /// Every parameter frozen and nothing trainable upstream
  /// (config/Parameters.h runsForwardOnly): no backward, no gradient
  /// messages, no gradient reduction.
  bool forwardOnly = false;
  /// The language model's tied embedding on more than one pipeline stage
  /// (docs/model.md): the last stage's copy and the first stage's sum
  /// their gradients (tiedEmbeddingGroups).
  bool tiedAcrossStages = false;
  /// Expert parallelism (parallel.ep; expertGroups): 1 without.
  int64_t ep = 1;
  /// The TP ranks each expert is cut over (parallel.etp; family/Moe.h
  /// ExpertTp): 0 the grid's tp, as expertTp() resolves it.
  int64_t etp = 0;
  int64_t expertTp() const { return etp > 0 ? etp : grid.size(Dim::TP); }
  /// The experts' gradients are summed over their own edp group, not
  /// DP x CP: split over ep, or cut over fewer TP ranks than the rest.
  bool expertsApart() const {
    return sparse && mimo::expertsApart(ep, expertTp(), grid.size(Dim::TP));
  }
  /// Sparse layers (arch.moe): each forward and backward meets the
  /// module's DP x CP group (the routing statistics, expert parallelism's
  /// rows), so the stage's every rank computes it together
  /// (StreamMatching.h collectiveGroup).
  bool sparse = false;
};

/// A bridge from an encoder's last stage to the language first stage
/// (docs/plan.md), or a colocated bridge (docs/plan.md).
struct BridgeTopology {
  size_t src = 0, dst = 0; // module indices
  BridgeMode mode = BridgeMode::OneToOne;
  int64_t ratio = 1;
  int64_t tensorNdim = 2, batchDim = 0;
  std::vector<int64_t> srcLeaders, dstLeaders;
  std::vector<BridgeRoute> routes;
  std::vector<std::vector<int64_t>> srcBroadcastGroups, dstBroadcastGroups;
  /// Colocated only: "fan_in", "fan_out" or "equal" (encoder dp against
  /// language dp) and the gather groups over the wide side.
  std::string direction;
  std::vector<std::vector<int64_t>> gatherGroups;
};

/// Whether `rank` (of the bridge's source grid) is its lane's source
/// leader, or (of the destination grid) its lane's destination leader.
bool isSourceLeader(const BridgeTopology &bridge, const Grid &grid,
                    int64_t rank);
bool isDestinationLeader(const BridgeTopology &bridge, const Grid &grid,
                         int64_t rank);

/// A colocated bridge's gather group holding `rank` of its wide side (the
/// side with more lanes): the ranks at its tp and cp whose lanes are the
/// `ratio` consecutive lanes that make one lane of the narrow side. The one
/// formula behind the plan's gather_groups, the verifier and the executor.
std::vector<int64_t> gatherGroup(const Grid &wide, int64_t ratio, int64_t rank);

/// Every group the executor runs collectives over, as families of disjoint
/// groups (each family partitions some ranks): the world; per module its
/// TP, CP, TP x CP (bridge broadcasts, the input-gradient gather) and
/// DP x CP (gradient reduction) groups, and with expert parallelism its
/// expert groups (expertGroups); per colocated bridge its gather
/// groups. Groups of one rank are left out, and a group already listed is
/// not listed again. Backends with communicators per group (nccl) create
/// theirs from this list, in this order, on every rank.
struct Topology;
std::vector<std::vector<std::vector<int64_t>>>
communicatorGroups(const Topology &topology);

/// What a rank's channel (comm/Channel.h) carries beside its compute.
enum class ChannelUse {
  /// The gradient buckets over DP x CP (exec/GradBuckets.h).
  Buckets,
  /// Under expert parallelism the experts' buckets, over their edp groups
  /// (expertGroups); the same channel as the module's Buckets.
  ExpertBuckets,
  /// Ring CP's transfers (model/RingAttention.h).
  Ring,
};
/// The groups one kind of channel runs over: per module and virtual stage
/// (`chunk`), its DP x CP groups for the gradient buckets (dp x cp > 1),
/// under expert parallelism its edp groups of two or more for the experts'
/// buckets, and, where `ringCp[module]`, its CP groups for the ring. A backend
/// that needs communicators of its own per channel (nccl) splits one set per
/// family, on every rank in this order, so that a channel's operations never
/// queue behind another channel's or the rank's own (NCCL runs a communicator's
/// operations in issue order).
struct ChannelFamily {
  size_t module = 0;
  int64_t chunk = 0;
  ChannelUse use = ChannelUse::Buckets;
  std::vector<std::vector<int64_t>> groups;
};
std::vector<ChannelFamily> channelFamilies(const Topology &topology,
                                           const std::vector<bool> &ringCp);
/// The index of (module, chunk, use) in `families`, or -1.
int64_t channelFamilyIndex(const std::vector<ChannelFamily> &families,
                           size_t module, int64_t chunk, ChannelUse use);

/// Expert parallelism (docs/model.md "Mixture of experts"): the module's
/// DP x CP group holding `rank` (ascending) cut into `ep` consecutive
/// members, whose experts differ (`ep`: the all-to-all group, expert block
/// `epRank`), and the members at the same place of every cut, which hold
/// the same experts (`edp`: their gradients are summed over it). With
/// experts cut over etp < tp TP ranks (family/Moe.h ExpertTp) the TP ranks
/// holding the same cut hold the same experts too: `edp` spans them, each
/// with its DP x CP members (ascending, as every group).
struct ExpertGroups {
  std::vector<int64_t> ep, edp;
  int64_t epRank = 0, edpRank = 0;
};
ExpertGroups expertGroups(const Grid &grid, int64_t ep, int64_t etp,
                          int64_t rank);
/// Every ep group of the module (`edp`: every edp group), each once.
std::vector<std::vector<int64_t>> allExpertGroups(const Grid &grid, int64_t ep,
                                                  int64_t etp, bool edp);

/// Each pair {first stage, last stage} of a module's ranks with the same
/// TP, CP and DP coordinates: the ranks that hold a tied embedding.
std::vector<std::vector<int64_t>> tiedEmbeddingGroups(const Grid &grid);

/// One pipeline stage of one module in the global 1F1B order.
struct StageTopology {
  size_t module = 0;
  int64_t pp = 0, stage = 0, warmup = 0;
  /// Zero bubble (docs/plan.md "Zero bubble"): how many
  /// microbatches' weight gradients the stage holds back behind their
  /// input gradients (zeroBubbleLag); -1: its backward stays whole.
  int64_t weightLag = -1;
};

/// How the language first stage shards its inputs (docs/plan.md).
struct ShardTopology {
  int64_t cp = 1, tp = 1;
  bool sequenceParallel = false, packing = false;
  /// Packed sequences are padded to a multiple of this (2·cp[·tp]).
  int64_t padMultiple = 1;
};

/// Instruction kinds of a rank program.
enum class InstrOp : uint8_t {
  Forward,             // module, mb: this rank's stage of the module
  Backward,            // module, mb (under zero bubble: the input
                       //   gradients only; WeightGrad makes the rest)
  WeightGrad,          // module, mb: zero bubble's deferred weight gradients
  Shard,               // module, mb: embed, place modality rows, CP/SP shard
  Unshard,             // module, mb: gather the input-embedding gradient
                       //   over the TP x CP group (adjoint of shard)
  SendAct,             // module, mb: to the next pipeline stage
  RecvAct,             // module, mb: from the previous stage
  SendGrad,            // module, mb: to the previous stage
  RecvGrad,            // module, mb: from the next stage
  BridgeSend,          // bridge, mb: source leader -> its routes' leaders
  BridgeRecv,          // bridge, mb: destination leader <- its routes
  BridgeBroadcast,     // bridge, mb: destination boundary group, leader root
  BridgeSendGrad,      // bridge, mb: destination leader -> its routes
  BridgeRecvGrad,      // bridge, mb: source leader <- its routes
  BridgeBroadcastGrad, // bridge, mb: source boundary group, leader root
  ColocatedForward,    // bridge, mb: all-gather (fan-in) or narrow
  ColocatedBackward,   // bridge, mb: narrow (fan-in) or all-gather
  ReduceGrads,         // module: sum gradients over its DP x CP group
                       //   (experts apart: over their edp group)
  OptimizerStep,       // global gradient norm (world), clip, AdamW
};
inline constexpr int kNumInstrOps =
    static_cast<int>(InstrOp::OptimizerStep) + 1; // the last kind

/// What an instruction names besides its kind.
enum class InstrOperand : uint8_t { None, Module, Bridge };

struct InstrInfo {
  const char *name;     // "send_act"
  InstrOperand operand; // module or bridge
  bool hasMicrobatch;
  bool isSend, isRecv; // point-to-point
  bool isGrad;         // backward direction
};
const InstrInfo &instrInfo(InstrOp op);
std::optional<InstrOp> parseInstrOp(std::string_view name);

struct Instr {
  InstrOp op = InstrOp::Forward;
  /// Module or bridge index (per instrInfo), else -1.
  int32_t index = -1;
  int32_t mb = -1;
  /// Posted together with the next instruction (one batch of point-to-point
  /// operations, like batch_isend_irecv); only sends and receives fuse.
  bool fused = false;
  /// The interleaved schedule (docs/plan.md "Interleaved 1F1B"): which of
  /// the rank's chunks of the module's layers (virtual stage
  /// chunk x pp + the rank's stage); 0 otherwise.
  int32_t chunk = 0;
  /// A posted bridge message (docs/plan.md "Posted messages"): a send the
  /// rank posts and goes on from (its tensors kept until it has been
  /// received, at the latest to the end of the pass); on a receive, that
  /// its message is such a send (both ends say it). Never fused.
  bool posted = false;
  bool operator==(const Instr &o) const {
    return op == o.op && index == o.index && mb == o.mb && fused == o.fused &&
           chunk == o.chunk && posted == o.posted;
  }
};

/// Whether an instruction of kind `op` may be posted: the bridges' sends
/// and receives.
inline bool postable(InstrOp op) {
  return op == InstrOp::BridgeSend || op == InstrOp::BridgeRecv ||
         op == InstrOp::BridgeSendGrad || op == InstrOp::BridgeRecvGrad;
}

/// Whether `in` is a posted send: its rank does not wait for it.
bool postedSend(const Instr &in);

/// The channel a posted message travels on under NCCL: one per sending
/// and receiving rank (a communicator of the two and a stream on each).
/// NCCL runs a communicator's operations in the order each rank issued
/// them, a CUDA stream its kernels one after another, and a send waits
/// for its receive: on one channel for all, a posted send to one rank
/// holds back the sender's posted sends to every other, and a rank's
/// posted receives queue behind its own posted sends (the verifier found
/// both deadlocking zero bubble across modules). On a channel per ordered
/// pair a message waits only for the ones the same sender posted to the
/// same receiver before it.
inline int64_t postedChannel(int64_t sender, int64_t receiver) {
  return (sender << 32) | receiver;
}

struct Program {
  /// The role's name, e.g. "language/pp0/images:dst-leader".
  std::string role;
  std::vector<Instr> instrs;
};

struct Topology {
  int64_t worldSize = 0;
  Layout layout = Layout::NonColocated;
  int64_t microbatches = 1;
  int64_t microBatchSize = 1;
  int64_t seqLength = 1;
  /// Encoders in model order, then the language module.
  std::vector<ModuleTopology> modules;
  std::vector<BridgeTopology> bridges;
  int64_t totalStages = 1;
  /// batch.schedule: what decides each stage's warm-up and weight lag
  /// (assignStages) and whether the language module runs in chunks
  /// (ModuleTopology::virtualStages). Never null.
  const PipelineSchedule *schedule = &defaultSchedule();
  std::vector<StageTopology> stages;
  ShardTopology shard;

  size_t languageIndex() const;
  /// Indices of the modules whose span holds `rank`, in module order.
  std::vector<size_t> modulesOf(int64_t rank) const;
  const StageTopology *stageOf(size_t module, int64_t pp) const;
};

/// Whether the layout is colocated with a language pp > 1: the encoders run
/// for all microbatches before the language pipeline and their outputs
/// travel over leader routes (docs/plan.md).
bool colocatedPipeline(const Topology &topology);

/// The role of `rank`: its modules, their pipeline stages and its part in
/// each bridge. Ranks with the same role run the same program.
std::string roleOf(const Topology &topology, int64_t rank);

/// Builds the bridges' derived fields from grids (docs/plan.md): mode,
/// ratio, leaders, routes, broadcast and gather groups. Fails with `error`
/// when the lanes do not divide.
std::optional<BridgeTopology> makeBridge(const Topology &topology, size_t src,
                                         size_t dst, std::string *error);

/// The language first stage's sharding (docs/plan.md, docs/data.md).
ShardTopology makeShard(int64_t cp, int64_t tp, bool sequenceParallel,
                        bool packing);

/// The 1F1B stages of every module (docs/plan.md).
void assignStages(Topology &topology);

/// Samples [begin, end) that data-parallel lane `lane` of `lanes` takes.
std::pair<int64_t, int64_t> laneSamples(int64_t batch, int64_t lanes,
                                        int64_t lane);

/// One program per role (the multi-module 1F1B of docs/plan.md), and each
/// rank's program index.
struct ProgramSet {
  std::vector<Program> programs;
  std::vector<int32_t> rankProgram;
};
ProgramSet buildPrograms(const Topology &topology);

/// The forward half of a program (a held-out evaluation: docs/runtime.md):
/// every backward-direction instruction (instrInfo().isGrad) dropped, fused
/// batches re-cut so that each keeps only its forward members. Since the
/// dropped instructions are dropped on every rank, sends still meet their
/// receives (tests/unit/PlanTest.cpp verifies it for every layout).
Program forwardOnly(const Program &program);

/// Maps each rank to the program whose role it has; fails (filling `error`)
/// when a role has no program or two programs share a role.
std::optional<std::vector<int32_t>>
assignPrograms(const Topology &topology, const std::vector<Program> &programs,
               std::string *error);

/// The peers of a point-to-point instruction on `rank`, in posting order,
/// or the members of a collective's group (ascending). Empty for local
/// instructions. Fails when the instruction does not apply to the rank.
/// A few ranks held inline (a message's peer, a bridge's leaders), more on
/// the heap: resolving an instruction's peers, which the verifier does
/// for every instruction of every rank, allocates nothing in the common
/// case.
class PeerRanks {
public:
  static constexpr size_t kInline = 4;
  void push_back(int64_t rank) {
    if (count < kInline)
      local[count] = rank;
    else {
      if (count == kInline)
        heap.assign(local, local + kInline);
      heap.push_back(rank);
    }
    ++count;
  }
  size_t size() const { return count; }
  bool empty() const { return count == 0; }
  const int64_t *begin() const {
    return count <= kInline ? local : heap.data();
  }
  const int64_t *end() const { return begin() + count; }
  int64_t operator[](size_t i) const { return begin()[i]; }
  int64_t at(size_t i) const {
    if (i >= count)
      throw std::out_of_range("peer " + std::to_string(i) + " of " +
                              std::to_string(count));
    return begin()[i];
  }

private:
  int64_t local[kInline] = {};
  size_t count = 0;
  std::vector<int64_t> heap;
};

struct Peers {
  PeerRanks ranks;
  bool collective = false;
  /// Collectives: the root (broadcasts) or -1.
  int64_t root = -1;
};
std::optional<Peers> resolvePeers(const Topology &topology, int64_t rank,
                                  const Instr &instr, std::string *error);

/// Every (sender, receiver) pair of ranks with a posted message between
/// them in `programs` (sender != receiver), ascending: the channels the
/// nccl backend opens before the first step.
std::vector<std::pair<int64_t, int64_t>>
postedChannels(const Topology &topology, const std::vector<Program> &programs,
               const std::vector<int32_t> &rankProgram);

/// The channels in rounds where each rank belongs to one channel at most
/// (a greedy edge colouring, the same on every rank): round k gives each
/// rank the index of its channel in `channels`, or -1. NCCL splits a
/// communicator off the world once per round.
std::vector<std::vector<int64_t>>
channelRounds(const std::vector<std::pair<int64_t, int64_t>> &channels,
              int64_t worldSize);

/// The chunk of the sending end of a pipeline message (both ends derive
/// the same, which keys the message): a receive's own chunk, except where
/// the interleaved pipeline wraps from its last stage to its first
/// (activations of chunk c arrive as chunk c + 1; gradients of chunk c + 1
/// as chunk c).
int32_t senderChunk(const Topology &topology, int64_t rank, const Instr &in);

/// The ranks `rank` exchanges point-to-point messages with in `program`
/// (ascending, each once; the relation is symmetric): the connections a
/// backend that connects lazily opens before the first step.
std::vector<int64_t> messagePeers(const Topology &topology,
                                  const Program &program, int64_t rank);

/// What a point-to-point message carries, as the sender and the receiver
/// each derive it: the samples of the microbatch it covers and its layout.
struct ShapeRule {
  std::string what; // "images tokens", "language hidden"
  int64_t sampleBegin = 0, sampleEnd = 0;
  int64_t hidden = 0;
  /// Sequence positions per sample (hidden states), 0 for token lists whose
  /// rows are the modality-token counts of the samples (split sizes).
  int64_t sequence = 0;
  bool operator==(const ShapeRule &o) const {
    return what == o.what && sampleBegin == o.sampleBegin &&
           sampleEnd == o.sampleEnd && hidden == o.hidden &&
           sequence == o.sequence;
  }
  std::string str() const;
};
/// The shape rule of the message between `rank` and `peer` of a
/// point-to-point instruction.
ShapeRule shapeRule(const Topology &topology, int64_t rank, int64_t peer,
                    const Instr &instr);

/// "recv_act language mb 0"
std::string describeInstr(const Topology &topology, const Instr &instr);

/// A verification failure: what went wrong and the (rank, program,
/// instruction) places involved.
struct PlanProblem {
  std::string message;
  struct Place {
    int64_t rank;
    int32_t program;
    int32_t instr;
  };
  std::vector<Place> places;
};

/// docs/plan.md / mimo-verify-plan: every instruction applies to its rank,
/// every send has exactly one matching receive (same peer, microbatch and
/// shape rule), collectives agree, and simulating every rank's stream with
/// blocking sends and receives (fused ones posted together) runs to the end:
/// no deadlock. Returns the problems found (at most `limit`). Where the
/// data-parallel replicas are symmetric (plan/Symmetry.h) it checks one
/// representative of each orbit, which stands for all of them; with
/// `symmetry` false, every rank.
std::vector<PlanProblem> verifyPrograms(const Topology &topology,
                                        const std::vector<Program> &programs,
                                        const std::vector<int32_t> &rankProgram,
                                        size_t limit = 8, bool symmetry = true);

/// The dataflow of every rank's stream against the schedule the topology
/// compiles to (`compiled`, from buildPrograms): a rank runs exactly the
/// instructions of its compiled program, none missing and none twice; the
/// instructions of one microbatch keep their compiled order (a tensor is
/// received before it is used, a forward precedes its backward), and the
/// gradient reduction and the optimizer step keep their place after all of
/// them. Streams may interleave microbatches differently. Checked when a
/// plan file is loaded, since plans are files users and tools edit.
std::vector<PlanProblem> checkDataflow(const Topology &topology,
                                       const ProgramSet &compiled,
                                       const std::vector<Program> &programs,
                                       const std::vector<int32_t> &rankProgram,
                                       size_t limit = 8);

} // namespace mimo

#endif // MIMO_RUNTIME_PLAN_PLAN_H
