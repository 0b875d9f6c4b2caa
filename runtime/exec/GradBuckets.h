//===- GradBuckets.h - Gradient reduction in buckets ------------*- C++ -*-===//
//
// docs/gpu.md (overlap). A stage's flat gradient buffer is cut into buckets:
// contiguous ranges of whole parameters of about `bucketValues` values,
// listed in the order the backward finishes them (the last layers first).
// During the step's backward each microbatch tells which parameters it has
// accumulated (Stage::onGradsDone); once a bucket's parameters have all
// microbatches in, its DP x CP all-reduce is posted on the module's
// channel and runs while the backward goes on. The ReduceGrads instruction
// then posts what is left (the TP-partial prefix after its TP sum) and
// waits for all of it. Under expert parallelism the experts' buckets are
// summed over the members holding the same experts (the edp group)
// instead: a bucket holds one group's parameters.
//
// Every member of the group posts the same buckets in the same order (the
// planned order, never the order they happen to become ready: a bucket
// waits for the ones before it), so the channel's collectives match. The
// sums are element-wise in group order either way, so the result is bit-
// identical to one all-reduce of the whole buffer.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_EXEC_GRADBUCKETS_H
#define MIMO_RUNTIME_EXEC_GRADBUCKETS_H

#include "runtime/comm/Channel.h"
#include "runtime/exec/OptimizerShards.h"

#include <cstdint>
#include <memory>
#include <string>
#include <utility>
#include <vector>

namespace mimo::exec {

/// One parameter's place in the flat buffer, in declaration order.
struct ParamSlot {
  int64_t begin = 0, end = 0;
  /// Which contiguous group of the flat layout it belongs to; buckets never
  /// span two.
  int region = 0;
  /// The group its gradient is summed over (an index of the reduction's
  /// groups: 0 the module's DP x CP group, 1 the experts' edp group); one
  /// region has one.
  size_t group = 0;
};

struct GradBucket {
  /// The values [begin, end) of the flat buffer.
  int64_t begin = 0, end = 0;
  /// The parameters in it (indices into the slots).
  std::vector<size_t> params;
  /// Its parameters' group (ParamSlot::group).
  size_t group = 0;
};

/// The buckets of the parameters whose slots start at or after `from` (the
/// TP-partial prefix before it is reduced after its TP sum instead): each
/// region cut from its end into ranges of at least `bucketValues` values
/// (whole parameters), then ordered by when the backward finishes them (a
/// bucket is finished with its earliest-declared parameter: later layers'
/// buckets first). Empty when bucketValues <= 0.
std::vector<GradBucket> planGradBuckets(const std::vector<ParamSlot> &slots,
                                        int64_t from, int64_t bucketValues);

/// One module's bucketed reduction on one rank, step after step.
class BucketedReduction {
public:
  /// `microbatches`: backwards this rank runs per step (each parameter is
  /// reported that many times); `groups`: the ranks each bucket's group
  /// holds (GradBucket::group; the first also sums the prefix); `grads`:
  /// the flat gradient buffer.
  BucketedReduction(std::vector<GradBucket> buckets, size_t params,
                    int64_t microbatches, comm::Channel &channel,
                    std::vector<std::vector<int64_t>> groups, float *grads,
                    std::string module);

  /// Reduce-scatters each range instead of all-reducing it (the
  /// distributed optimizer, exec/OptimizerShards.h): this rank, member
  /// `own[g]` of group g, gets the sum of its piece only.
  void scatterTo(std::vector<int64_t> own) { scatterOwn = std::move(own); }
  /// train.grad_reduce_dtype "bf16": each range rounded to bf16 before it
  /// is posted, all-reduced by Comm::allReduceSumBf16 (the caller rounds
  /// the sums after finish).
  void reduceInBf16() { bf16 = true; }
  /// The ranges it reduces, in order, with their groups: the buckets, then
  /// [0, prefix) (group 0).
  std::vector<ShardRange> ranges(int64_t prefix) const;

  /// Forgets the last step's counts (nothing may be in flight).
  void startStep(int64_t step);
  /// `params` have one more microbatch accumulated: posts the buckets that
  /// are complete, in planned order. `dev`: the poster's device.
  void gradsDone(const std::vector<size_t> &params, device::Device &dev);

  /// A finished collective, for the trace.
  struct Span {
    std::string name;
    std::chrono::steady_clock::time_point start, end;
    int64_t bytes = 0;
    /// Posted before the instruction that waits for it (by the backward,
    /// or a send posted ahead).
    bool ahead = false;
  };
  /// Posts every bucket not yet posted, then [0, prefix) (already summed
  /// over TP), waits for all of them and returns their spans.
  std::vector<Span> finish(device::Device &dev, int64_t prefix);

  size_t bucketCount() const { return buckets.size(); }
  /// Buckets posted by the backward (before finish) in the last step.
  size_t postedEarly() const { return early; }

private:
  void post(size_t bucket, device::Device &dev, bool ahead);
  std::shared_ptr<comm::Request> reduce(const ShardRange &range,
                                        device::Device &dev, std::string what);

  std::vector<GradBucket> buckets;
  /// For each parameter, the buckets holding it (one).
  std::vector<size_t> bucketOf;
  std::vector<int64_t> counts;
  /// Parameters of each bucket still missing microbatches.
  std::vector<size_t> missing;
  int64_t microbatches;
  comm::Channel &channel;
  std::vector<std::vector<int64_t>> groups;
  float *grads;
  std::string module;
  int64_t step = 0;
  size_t next = 0, early = 0;
  std::vector<int64_t> scatterOwn; // empty: all-reduce
  bool bf16 = false;
  struct Posted {
    std::string name;
    int64_t bytes;
    std::shared_ptr<comm::Request> request;
    bool ahead;
  };
  std::vector<Posted> posted;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_EXEC_GRADBUCKETS_H
