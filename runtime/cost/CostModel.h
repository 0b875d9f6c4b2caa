//===- CostModel.h - What an instruction costs on a device -----*- C++ -*-===//
//
// The one cost model behind `mimoc simulate` and `mimoc tune`
// (docs/tune.md), on a device profile and a cluster (cost/DeviceProfile.h).
//
// An instruction's cost has two parts: `compute`, in seconds of one core of
// the device (the simulator shares a device's cores among the ranks that
// compute on it at once), and `comm`, seconds of communication that occupy
// no core (the collectives inside a stage, the gradient reduction).
// Point-to-point messages cost latency + bytes / bandwidth of their link.
//
// Work counts follow config/Flops.h (the same matrix products, split into
// their GEMMs by shape) plus the elementwise traffic and kernel launches
// of model/Model.cpp's layers, as documented in docs/tune.md.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_COST_COSTMODEL_H
#define MIMO_RUNTIME_COST_COSTMODEL_H

#include "runtime/config/ModelConfig.h"
#include "runtime/cost/DeviceProfile.h"
#include "runtime/plan/Plan.h"

#include <map>
#include <tuple>
#include <vector>

namespace mimo {

/// A link between ranks of one device when `ranksOnDevice` share it: on a
/// CPU every message wakes a thread that waits for a core, so the latency
/// grows with the ranks per core (the calibration measures 2 ranks).
LinkCost sharedDeviceLink(const DeviceProfile &profile, const LinkCost &link,
                          int64_t ranksOnDevice);

/// The cost of one instruction on one rank.
struct Work {
  /// Seconds of one core of the rank's device.
  double compute = 0;
  /// Seconds of communication inside the instruction (no core).
  double comm = 0;
  /// Bytes the rank sends in the instruction's collectives (mimoc
  /// explain's communication volume).
  double bytes = 0;
  Work &operator+=(const Work &o) {
    compute += o.compute;
    comm += o.comm;
    bytes += o.bytes;
    return *this;
  }
  Work operator*(double k) const { return {compute * k, comm * k, bytes * k}; }
};

/// An exchange over `members` ranks joined by `link`, each sending `bytes`
/// (mimo's collectives: every member sends its piece to every other):
/// latency x ceil(log2 n), plus (n - 1) x bytes over the link's bandwidth,
/// which on a CPU is the cores copying and summing (compute, at the
/// profile's calibrated all-reduce rate) and elsewhere the link (comm).
Work exchangeWork(const DeviceProfile &profile, const LinkCost &link,
                  int64_t members, double bytes);

/// Seconds of one core for a GEMM [m, k] x [k, n], attention of `flops`
/// over spans of `span` keys, moving `bytes` through memory, launching
/// `kernels` kernels.
double gemmSeconds(const DeviceProfile &profile, double m, double n, double k);
double attentionSeconds(const DeviceProfile &profile, double flops, double span,
                        bool backward);
double memorySeconds(const DeviceProfile &profile, double bytes);
double kernelSeconds(const DeviceProfile &profile, double kernels);

/// One pipeline stage of a module on one rank, as its layout shapes it.
struct StageShape {
  bool language = false, first = false, last = false;
  bool sequenceParallel = false;
  double tp = 1, cp = 1, samples = 1, layers = 1;
  /// Rows (tokens) one rank computes, the (query, key) pairs it attends
  /// and the mean span of keys per query.
  double rows = 0, pairs = 0, span = 1;
  /// precision "bf16": the layer's buffers as model/TransformerLayer.h
  /// keeps them (layerElementwiseBytes).
  bool bf16 = false;
  /// The stage's first layer (global index), for the module's `freeze`.
  int64_t firstLayer = 0;
};

/// Bytes the elementwise kernels of one transformer layer read and write
/// per token (norms, RoPE, residual adds, the MLP's activation, packing
/// to and from bf16, the GEMMs' outputs; not the GEMMs' and attention's
/// operand reads), forward or backward, counted from
/// model/TransformerLayer.h with one TP rank: fp32 values 4 bytes, bf16
/// buffers 2. H the hidden size, Hl and Fl the rank's attention and MLP
/// widths; language: RoPE and SwiGLU (the encoders: neither, GeLU).
double layerElementwiseBytes(double H, double Hl, double Fl, bool language,
                             bool bf16, bool backward);
/// `stage` of `module` (the `encoder`-th encoder, or the language module)
/// under `microBatchSize` (the global micro-batch) and its own parallel
/// settings.
StageShape stageShape(const ModelConfig &config, const ModuleConfig &module,
                      size_t encoder, int64_t microBatchSize, int64_t stage,
                      bool sequenceParallel);

/// A stage's forward or backward: compute in seconds of one core, and the
/// collectives inside it (how many, and the bytes each member sends).
struct StageWork {
  double compute = 0;
  double tpExchanges = 0, tpBytes = 0; // TP all-reduces (SP: gathers)
  double cpExchanges = 0, cpBytes = 0; // CP key/value gathers
  /// Seconds of the attention kernels (what ring CP's transfers overlap).
  double attention = 0;
  /// Backward only: seconds of the layers' weight-gradient GEMMs, part of
  /// `compute` (what zero bubble's weight_grad runs apart).
  double weightGrads = 0;
  double logitExchanges = 0, logitBytes = 0; // vocab-parallel loss
  /// Expert parallelism (model/MoeMlp.h): a sparse layer's rows to their
  /// experts' ep members and the results back, twice a pass.
  double epExchanges = 0, epBytes = 0;
};
StageWork stageWork(const ModuleConfig &module, const StageShape &shape,
                    bool backward, const DeviceProfile &profile,
                    double outputHidden);
/// A stage's CP traffic (docs/model.md Context parallelism), `each` the
/// cost of one exchange of w.cpBytes: all_gather's w.cpExchanges
/// collectives; the ring moves the same blocks (twice in the backward,
/// whose gradients travel too), hidden behind the attention of the block
/// in hand where the device overlaps (`overlapped`: a GPU's default).
Work cpExchangeWork(const StageWork &w, const Work &each, bool ring,
                    bool backward, bool overlapped);

/// Costs of a topology's instructions on a profile and cluster.
class CostModel {
public:
  CostModel(const Topology &topology, const ModelConfig &config,
            const DeviceProfile &profile, const ClusterConfig &cluster);

  /// The compute and collective cost of `instr` on `rank` (sends and
  /// receives: 0; see messageSeconds).
  Work work(int64_t rank, const Instr &instr) const;
  /// Seconds for the message of the point-to-point `instr` between `rank`
  /// and `peer` (either end gives the same).
  double messageSeconds(int64_t rank, int64_t peer, const Instr &instr) const;
  /// Bytes of that message.
  double messageBytes(int64_t rank, int64_t peer, const Instr &instr) const;

  /// The device a rank computes on, and the cores it uses alone.
  int64_t deviceOf(int64_t rank) const;
  int64_t nodeOf(int64_t rank) const;
  double threadsOf(int64_t rank) const;
  LinkCost linkBetween(int64_t a, int64_t b) const;
  /// Seconds of a collective moving `bytes` per member over `group`
  /// (ascending ranks): the exchange mimo's communicators run, every member
  /// sending its piece to the others.
  Work exchange(const std::vector<int64_t> &group, double bytes) const;
  /// A group as the cost of its collectives sees it: two members joined
  /// by its slowest link (farthestPair) and its size.
  struct GroupSpan {
    int64_t first = 0, last = 0, size = 1;
  };
  Work exchange(const GroupSpan &group, double bytes) const;
  /// Two of `members` (not empty) joined by the slowest link among them:
  /// on two nodes if any are, else on two devices, else one member twice.
  std::pair<int64_t, int64_t>
  farthestPair(const std::vector<int64_t> &members) const;

  const DeviceProfile &deviceProfile() const { return profile; }
  const ClusterConfig &clusterConfig() const { return cluster; }
  /// Whether `module`'s gradient reduction runs in buckets beside its
  /// backward (mimo-run's overlap default: a GPU for every rank; dp x cp
  /// above 1), which ReduceGrads's cost assumes.
  bool bucketsOverlap(size_t module) const;
  /// The bytes `rank` sends per step in `module`'s expert-parallel
  /// exchanges (dispatch and combine, forward and backward) under a
  /// balanced router; 0 without expert parallelism.
  double expertExchangeBytes(size_t module, int64_t rank) const;
  /// The most any rank of `module` sends so (its busiest pipeline stage).
  double expertExchangeBytes(size_t module) const;

private:
  const Topology &topology;
  const ModelConfig &config;
  DeviceProfile profile;
  ClusterConfig cluster;
  std::vector<const ModuleConfig *> moduleConfigs; // by topology module
  std::vector<size_t> encoderIndex;                // model-order encoder
  std::vector<int64_t> ranksOnDevice;
  mutable std::map<std::tuple<size_t, int64_t, bool>, StageWork> stageCache;
  mutable std::map<std::tuple<size_t, int64_t, int64_t, bool>, double>
      valuesCache;

  /// The compute of `stage` of `module`, the same on each of its ranks.
  const StageWork &stageWorkOf(size_t module, int64_t stage,
                               bool backward) const;
  /// The parameter values `rank` holds of `module`.
  double localValues(size_t module, int64_t rank,
                     bool expertsOnly = false) const;
  /// The group of `rank` over `dims` of `grid`, made once per group and
  /// shared by its members (a step of 2^20 ranks asks for every rank's
  /// DP x CP group: materialised per rank that is 2^34 ranks).
  GroupSpan group(int64_t rank, const Grid &grid,
                  std::initializer_list<Dim> dims) const;
  mutable std::map<std::tuple<const Grid *, unsigned, int64_t>, GroupSpan>
      groupCache;
};

} // namespace mimo

#endif // MIMO_RUNTIME_COST_COSTMODEL_H
