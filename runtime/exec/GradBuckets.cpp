//===- GradBuckets.cpp - Data-parallel gradient reduction in buckets ------===//

#include "runtime/exec/GradBuckets.h"

#include <algorithm>
#include <limits>
#include <stdexcept>

namespace mimo::exec {

namespace {
constexpr size_t kNoBucket = std::numeric_limits<size_t>::max();
} // namespace

std::vector<GradBucket> planGradBuckets(const std::vector<ParamSlot> &slots,
                                        int64_t from, int64_t bucketValues) {
  std::vector<GradBucket> buckets;
  if (bucketValues <= 0)
    return buckets;
  std::vector<size_t> order;
  for (size_t i = 0; i < slots.size(); ++i)
    if (slots[i].begin >= from && slots[i].end > slots[i].begin)
      order.push_back(i);
  // From the end of the buffer: the backward finishes the last layers
  // first.
  std::sort(order.begin(), order.end(), [&](size_t a, size_t b) {
    return slots[a].begin > slots[b].begin;
  });
  int region = 0;
  for (size_t i : order) {
    const ParamSlot &slot = slots[i];
    bool extend = !buckets.empty() && region == slot.region &&
                  slot.end == buckets.back().begin &&
                  buckets.back().end - buckets.back().begin < bucketValues;
    if (!extend) {
      buckets.push_back({slot.begin, slot.end, {}, slot.group});
      region = slot.region;
    }
    buckets.back().begin = slot.begin;
    buckets.back().params.push_back(i);
  }
  // A bucket is complete once its earliest-declared parameter is: those
  // with later parameters come first.
  auto firstParam = [](const GradBucket &b) {
    return *std::min_element(b.params.begin(), b.params.end());
  };
  std::stable_sort(buckets.begin(), buckets.end(),
                   [&](const GradBucket &a, const GradBucket &b) {
                     size_t fa = firstParam(a), fb = firstParam(b);
                     if (fa != fb)
                       return fa > fb;
                     return a.begin > b.begin;
                   });
  return buckets;
}

BucketedReduction::BucketedReduction(std::vector<GradBucket> bucketsIn,
                                     size_t params, int64_t microbatches,
                                     comm::Channel &channel,
                                     std::vector<std::vector<int64_t>> groups,
                                     float *grads, std::string module)
    : buckets(std::move(bucketsIn)), bucketOf(params, kNoBucket),
      counts(params, 0), microbatches(microbatches), channel(channel),
      groups(std::move(groups)), grads(grads), module(std::move(module)) {
  if (this->groups.empty())
    throw std::logic_error("gradient buckets of " + this->module +
                           " without a group");
  for (size_t b = 0; b < buckets.size(); ++b) {
    if (buckets[b].group >= this->groups.size())
      throw std::logic_error("gradient buckets: bucket " + std::to_string(b) +
                             " of group " + std::to_string(buckets[b].group) +
                             ", and there are " +
                             std::to_string(this->groups.size()));
    for (size_t p : buckets[b].params) {
      if (p >= params || bucketOf[p] != kNoBucket)
        throw std::logic_error("gradient buckets: parameter " +
                               std::to_string(p) +
                               " is out of range or in "
                               "two buckets");
      bucketOf[p] = b;
    }
  }
  startStep(0);
}

void BucketedReduction::startStep(int64_t stepIndex) {
  if (!posted.empty())
    throw std::logic_error("gradient buckets of " + module +
                           " are still in flight at a new step");
  step = stepIndex;
  std::fill(counts.begin(), counts.end(), 0);
  missing.assign(buckets.size(), 0);
  for (size_t b = 0; b < buckets.size(); ++b)
    missing[b] = buckets[b].params.size();
  next = 0;
  early = 0;
}

void BucketedReduction::gradsDone(const std::vector<size_t> &params,
                                  device::Device &dev) {
  for (size_t p : params) {
    if (p >= bucketOf.size() || bucketOf[p] == kNoBucket)
      continue;
    if (++counts[p] == microbatches)
      --missing[bucketOf[p]];
  }
  while (next < buckets.size() && missing[next] == 0) {
    post(next++, dev, true);
    ++early;
  }
}

void BucketedReduction::post(size_t b, device::Device &dev, bool ahead) {
  const GradBucket &bucket = buckets[b];
  std::string name = "grad bucket " + std::to_string(b + 1) + "/" +
                     std::to_string(buckets.size()) + " " + module;
  posted.push_back(
      {name, (bucket.end - bucket.begin) * static_cast<int64_t>(sizeof(float)),
       reduce({bucket.begin, bucket.end, bucket.group}, dev,
              "step " + std::to_string(step + 1) + ", " + name),
       ahead});
}

std::shared_ptr<comm::Request>
BucketedReduction::reduce(const ShardRange &range, device::Device &dev,
                          std::string what) {
  const std::vector<int64_t> &group = groups[range.group];
  const int64_t begin = range.begin, end = range.end;
  if (bf16)
    dev.roundTo(device::DType::BF16, grads + begin, end - begin);
  if (scatterOwn.empty() && bf16)
    return channel.allReduceSumBf16(group, grads + begin, end - begin,
                                    dev.record(), std::move(what));
  if (scatterOwn.empty())
    return channel.allReduceSum(group, grads + begin, end - begin, dev.record(),
                                std::move(what));
  const int64_t members = static_cast<int64_t>(group.size());
  return channel.reduceScatterV(
      group, grads + begin, pieceCounts(range, members),
      grads + pieceStart(range, members, scatterOwn.at(range.group)),
      dev.record(), std::move(what));
}

std::vector<ShardRange> BucketedReduction::ranges(int64_t prefix) const {
  std::vector<ShardRange> list;
  for (const GradBucket &b : buckets)
    list.push_back({b.begin, b.end, b.group});
  if (prefix > 0)
    list.push_back({0, prefix, 0});
  return list;
}

std::vector<BucketedReduction::Span>
BucketedReduction::finish(device::Device &dev, int64_t prefix) {
  while (next < buckets.size())
    post(next++, dev, false);
  if (prefix > 0) {
    std::string name = "grad prefix " + module;
    posted.push_back({name, prefix * static_cast<int64_t>(sizeof(float)),
                      reduce({0, prefix, 0}, dev,
                             "step " + std::to_string(step + 1) + ", " + name +
                                 " (TP-partial gradients)"),
                      false});
  }
  std::vector<Posted> waiting = std::move(posted);
  posted.clear();
  std::vector<std::shared_ptr<comm::Request>> requests;
  for (const Posted &p : waiting)
    requests.push_back(p.request);
  comm::waitAll(requests, dev); // none may still write the gradients
  std::vector<Span> spans;
  for (const Posted &p : waiting)
    spans.push_back(
        {p.name, p.request->started, p.request->finished, p.bytes, p.ahead});
  return spans;
}

} // namespace mimo::exec
