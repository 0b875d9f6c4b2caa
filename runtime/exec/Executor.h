//===- Executor.h - Runs every rank's instruction stream --------*- C++ -*-===//
//
// docs/runtime.md. A RankExecutor interprets one rank's program
// (the plan's 1F1B stream: forward/backward of its stages, pipeline and
// bridge sends and receives with per-sample split sizes, broadcasts, the
// colocated gather/narrow, shard/unshard, DP x CP gradient reduction and
// the optimizer step) over a communicator and a device. runLocal runs every
// rank as a thread of this process; runOnComm runs this process's rank of
// an MPI job.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_EXECUTOR_H
#define MIMO_RUNTIME_EXEC_EXECUTOR_H

#include "runtime/checkpoint/Checkpoint.h"
#include "runtime/comm/Comm.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/data/Data.h"
#include "runtime/device/Device.h"
#include "runtime/plan/PlanFile.h"

#include <atomic>
#include <functional>
#include <memory>
#include <optional>
#include <string>
#include <utility>
#include <vector>

namespace mimo::exec {

struct StepMetrics {
  int64_t step = 0; // 1-based
  double loss = 0, gradNorm = 0;
  /// The learning rate this step's update used.
  double lr = 0;
  /// Model FLOPs of the step's batch (config/Flops.h), all ranks together.
  double flops = 0;
  /// After an evaluation (train.eval_every): the held-out loss, the mean
  /// over train.eval_steps held-out batches.
  std::optional<double> evalLoss;
  /// A model with sparse layers (docs/model.md "Mixture of experts"): the
  /// step's weighted load-balancing and z losses, beside `loss` (the
  /// language model's); their sum is what the step minimised.
  std::optional<double> auxLoss;
  int64_t tokens = 0;
  double seconds = 0;
  /// The most device memory any rank held at once during the step (bytes,
  /// what its device allocated: parameters, gradients, moments,
  /// activations, buffers) and that rank; -1 when the device does not say.
  int64_t peakBytes = -1, peakRank = -1;
  /// Each rank's peak, by rank (empty when the device does not say).
  std::vector<int64_t> rankPeakBytes;
  /// Each rank's host seconds in its compute instructions (not in messages
  /// or the gradient reduction): the busiest rank is what the others wait
  /// for. On a GPU they count the launches' host time only.
  std::vector<double> rankComputeSeconds;
  /// The step's loss tokens (those not masked from the loss: N, the loss's
  /// normaliser); 0 means nothing to learn from.
  int64_t targets = 0;
  /// The loss or the gradient norm was not finite and the step was skipped
  /// (RunOptions::skipNonFinite): no update.
  bool skipped = false;
};

/// The trace's streams of a rank: its instructions, the collectives its
/// channels ran beside them (overlapped gradient buckets), and the kernels,
/// GEMMs and copies its device ran, timed on the device (a GPU: events
/// around each launch; Device::timeKernels).
inline constexpr int kComputeStream = 0, kCommStream = 1, kDeviceStream = 2;

/// One executed instruction (or, with durationUs < 0, a step's start),
/// for --trace.
struct TraceEvent {
  int64_t rank = 0;
  std::string name;
  double startUs = 0, durationUs = 0;
  /// The instruction's arguments as a JSON object ("" for none):
  /// microbatch, peer ranks, bytes sent and received.
  std::string args;
  int stream = kComputeStream;
};

struct RunOptions {
  /// Steps to run (the model's train.steps when < 0).
  int64_t steps = -1;
  /// Where every rank computes (cuda: rank r on GPU r mod visible GPUs).
  device::DeviceKind device = device::DeviceKind::Cpu;
  /// Which GPU a rank of runOnComm uses: GPU deviceIndex mod the visible
  /// GPUs (the nccl backend: its node-local rank); -1: its rank's.
  int64_t deviceIndex = -1;
  /// Which attention a GPU runs (mimo-run --attention; docs/gpu.md).
  device::AttentionChoice attention = device::AttentionChoice::Auto;
  /// CPU threads per rank (BLAS and kernels); 0: this machine's cores
  /// shared by the ranks of this process (or of this node under mpirun).
  int threads = 0;
  /// Checkpoints (docs/checkpoints.md): written to saveDir after every
  /// saveEvery-th step (0: only after the last); `resume` (checked by
  /// openCheckpoint) restores a run, which then trains the steps after its
  /// step.
  std::string saveDir;
  int64_t saveEvery = 0;
  std::shared_ptr<const Checkpoint> resume;
  /// For tests: the process dies in the middle of saving this step (after
  /// the shards are written, before the checkpoint is complete).
  int64_t killDuringSave = 0;
  double timeoutSeconds = 300;
  /// docs/gpu.md overlap: the gradient buckets below run beside the
  /// backward and ring CP's transfers beside the attention, on channels;
  /// the local backend also sends (pipeline and bridge) on a channel while
  /// the rank computes on. false: every message and collective blocks the
  /// rank until it is done. Unset: on for cuda when every rank has a GPU
  /// of its own (local: ranks sharing one are off, measured slower; nccl:
  /// always one GPU a rank); off for cpu, where the channels' work takes
  /// the same cores the ranks compute on (bench/results/overlap-cpu.md: no
  /// step gets faster). The mpi backend has no channels.
  std::optional<bool> overlap;
  /// docs/gpu.md overlap: the DP x CP gradient reduction runs in buckets of
  /// this many bytes, each posted as soon as the backward has finished its
  /// gradients, on a channel beside the compute (local and nccl). 0: one
  /// all-reduce per module at its ReduceGrads instruction.
  int64_t gradBucketBytes = kGradBucketBytes;
  /// How the local backend pairs messages: by tag, or in posting order per
  /// peer as NCCL does (comm::Matching; tests use it to check that every
  /// layout's messages pair right under the nccl backend).
  comm::Matching matching = comm::Matching::ByTag;
  /// The most bytes of fp32 logits the last language stage computes at
  /// once (its head, loss and their gradient go chunk by chunk).
  int64_t logitChunkBytes = kLogitChunkBytes;
  /// Under bf16 the most bytes of logit gradients the head's gradient
  /// GEMMs take at once (cost/MemoryPlan.h headGradientRows).
  int64_t headGradientBytes = kHeadGradientBytes;
  /// Under mpirun (mpi, nccl) with a trace asked for: a rank that fails
  /// writes its own events to this path with ".rankR" before ".json"
  /// before the job is aborted (rank 0 cannot gather them then).
  std::string failureTracePath;
  /// docs/runtime.md Preemption: how many stop signals (SIGTERM, SIGINT,
  /// SIGUSR1) the process has had. When it is above 0 on any rank at a
  /// step's optimizer step (the ranks agree through that step's
  /// all-reduce), every rank ends after that step, saving to saveDir.
  const std::atomic<int> *stopRequests = nullptr;
  /// A step whose loss or gradient norm is not finite: stop the run (exit
  /// 2 naming the step and the first non-finite gradient), or skip it (no
  /// update; mimo-run --on-nonfinite skip).
  bool skipNonFinite = false;
  /// MIMO_INJECT_FAULT=RANK:STEP (1-based step).
  std::optional<std::pair<int64_t, int64_t>> fault;
  /// Where jsonl data paths are resolved, and the plan's name in messages.
  std::string baseDir, planFile = "plan.json";
  bool collectTrace = false;
  /// Called on rank 0 after every step.
  std::function<void(const StepMetrics &)> onStep;
};

struct RunResult {
  /// 0 success, 1 invalid input (data), 2 runtime failure.
  int exitCode = 0;
  std::string error;
  /// The step after which a stop request ended the run (0: none).
  int64_t stoppedAfter = 0;
  /// Under mpirun: this rank found the error itself (each rank checks a
  /// share of the data), so it prints it too, not only rank 0.
  bool ownError = false;
  std::vector<StepMetrics> steps;
  std::vector<TraceEvent> trace;
};

/// The single-rank, no-parallelism plan of the same model (docs/runtime.md).
std::optional<Plan> referencePlan(const ModelConfig &config,
                                  std::string *error);

/// Every rank as a thread of this process (the local backend).
RunResult runLocal(const Plan &plan, const RunOptions &options);

/// This process's rank, over `comm` (the mpi backend). Metrics are known on
/// every rank; the trace is gathered on rank 0.
RunResult runOnComm(const Plan &plan, comm::Comm &comm,
                    const RunOptions &options);

/// docs/checkpoints.md: whether every rank of `comm` (host memory: the mpi
/// backend, or the nccl backend's bootstrap) sees the same folder `dir`
/// (created by rank 0 if missing): "" or the refusal naming the ranks that
/// do not. Every rank gets the same answer.
std::string sharedFolderProblem(comm::Comm &comm, const std::string &dir);

/// Parses MIMO_INJECT_FAULT ("RANK:STEP"); std::nullopt when unset, error
/// text when malformed.
std::optional<std::pair<int64_t, int64_t>> parseFault(const char *text,
                                                      std::string *error);

/// The Chrome trace (Perfetto) JSON of `events`.
std::string traceJson(const std::vector<TraceEvent> &events);

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_EXECUTOR_H
