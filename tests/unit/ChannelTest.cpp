//===- ChannelTest.cpp - Collectives beside the compute, gradient buckets -===//
//
// comm/Channel.h: collectives posted on a rank's channel complete in the
// background, bit-identical to the blocking ones, while the rank's main
// communicator keeps exchanging with the same peers (tags of their own);
// failures and timeouts reach wait() as CommError, never a hang.
// exec/GradBuckets.h: the bucket plan (contiguous whole parameters, the
// prefix left out, later layers first) and the reduction posting buckets in
// planned order as the backward reports parameters.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Channel.h"
#include "runtime/comm/OperationClock.h"
#include "runtime/device/Devices.h"
#include "runtime/device/Tensor.h"
#include "runtime/exec/GradBuckets.h"
#include "runtime/exec/OptimizerShards.h"
#include "runtime/exec/RankExecutor.h"
#include "runtime/model/RingAttention.h"

#include <gtest/gtest.h>

#include <functional>
#include <set>
#include <thread>

using namespace mimo;
using namespace mimo::comm;

namespace {

using Seconds = std::chrono::duration<double>;

/// Runs `body(rank, main comm, channel)` on every rank of a world of `n`,
/// one thread each; returns each rank's error text ("" when it returned).
std::vector<std::string> runWithChannels(
    int64_t n,
    const std::function<void(int64_t, Comm &, Channel &, device::Device &)>
        &body,
    Seconds timeout = Seconds(30)) {
  std::shared_ptr<LocalWorld> world = makeLocalWorld(n);
  std::vector<std::string> errors(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      std::unique_ptr<device::Device> dev =
          device::makeDevice(device::DeviceKind::Cpu, r);
      device::setCurrentDevice(dev.get());
      std::unique_ptr<Comm> comm = makeLocalComm(world, r);
      comm->setTimeout(timeout);
      comm->setDevice(dev.get());
      std::unique_ptr<Comm> side = makeLocalComm(world, r);
      side->setTimeout(timeout);
      side->setTagChannel(1);
      try {
        Channel channel(std::move(side),
                        device::makeDevice(device::DeviceKind::Cpu, r));
        body(r, *comm, channel, *dev);
      } catch (const std::exception &e) {
        errors[static_cast<size_t>(r)] = e.what();
        comm->fail(e.what());
      }
      device::setCurrentDevice(nullptr);
    });
  for (std::thread &t : threads)
    t.join();
  return errors;
}

TEST(Channel, AllReduceBesideMainMessagesToTheSamePeers) {
  constexpr int64_t n = 3, count = 1000;
  std::vector<std::vector<float>> results(n);
  std::vector<std::string> errors = runWithChannels(
      n, [&](int64_t r, Comm &comm, Channel &channel, device::Device &) {
        std::vector<float> data(count);
        for (int64_t i = 0; i < count; ++i)
          data[static_cast<size_t>(i)] = 0.1f * float(r + 1) + float(i);
        std::vector<int64_t> world = {0, 1, 2};
        // Posted, then the main communicator runs its own collectives and
        // messages over the same group while the channel works.
        std::vector<std::shared_ptr<Request>> requests;
        for (int64_t k = 0; k < 4; ++k)
          requests.push_back(channel.allReduceSum(world, data.data() + k * 250,
                                                  250, nullptr, "bucket"));
        for (int round = 0; round < 20; ++round) {
          float token = float(r * 100 + round);
          comm.allReduceSum(world, &token, 1);
          EXPECT_EQ(token, float(300 + 3 * round));
          int64_t next = (r + 1) % n, prev = (r + n - 1) % n;
          float out = float(r), in = -1;
          std::vector<P2POp> ops = {{true, next, 5, &out, sizeof(float)},
                                    {false, prev, 5, &in, sizeof(float)}};
          comm.exchange(ops);
          EXPECT_EQ(in, float(prev));
        }
        device::Device &host = device::hostDevice();
        for (auto &request : requests)
          request->wait(host);
        EXPECT_TRUE(requests.back()->done());
        results[static_cast<size_t>(r)] = data;
      });
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  for (int64_t i = 0; i < count; ++i) {
    // The blocking collective's order: ((p0 + p1) + p2).
    float expected = (0.1f + float(i)) + (0.2f + float(i));
    expected = expected + (0.3f + float(i));
    for (int64_t r = 0; r < n; ++r)
      ASSERT_EQ(results[static_cast<size_t>(r)][static_cast<size_t>(i)],
                expected)
          << "rank " << r << " value " << i;
  }
}

TEST(Channel, AMissingPeerTimesOutAndLaterRequestsFailToo) {
  std::vector<std::string> errors = runWithChannels(
      2,
      [&](int64_t r, Comm &, Channel &channel, device::Device &dev) {
        if (r == 1)
          return; // never posts
        float a = 1, b = 2;
        auto first =
            channel.allReduceSum({0, 1}, &a, 1, nullptr, "step 1, bucket 1");
        auto second =
            channel.allReduceSum({0, 1}, &b, 1, nullptr, "step 1, bucket 2");
        EXPECT_THROW(first->wait(dev), CommError);
        try {
          second->wait(dev);
          ADD_FAILURE() << "the second request did not fail";
        } catch (const CommError &e) {
          EXPECT_NE(std::string(e.what()).find("timed out"), std::string::npos)
              << e.what();
          EXPECT_NE(std::string(e.what()).find("bucket 1"), std::string::npos)
              << e.what();
        }
        // waitAll waits for both, then rethrows the first failure.
        EXPECT_THROW(waitAll({first, second}, dev), CommError);
        EXPECT_TRUE(first->done() && second->done());
        throw CommError("done");
      },
      Seconds(0.3));
  EXPECT_EQ(errors[0], "done");
}

TEST(Channel, AFailedWorldReleasesAWaitingRequest) {
  auto start = std::chrono::steady_clock::now();
  std::vector<std::string> errors = runWithChannels(
      2, [&](int64_t r, Comm &comm, Channel &channel, device::Device &dev) {
        if (r == 1) {
          std::this_thread::sleep_for(std::chrono::milliseconds(100));
          comm.fail("rank 1 failed on purpose");
          return;
        }
        float a = 1;
        channel.allReduceSum({0, 1}, &a, 1, nullptr, "bucket")->wait(dev);
      });
  EXPECT_NE(errors[0].find("rank 1 failed on purpose"), std::string::npos)
      << errors[0];
  EXPECT_LT(Seconds(std::chrono::steady_clock::now() - start).count(), 10.0);
}

/// Ring attention (model/RingAttention.h) over a CP group of two whose
/// attention fails once the first transfer is posted on the channel (as a
/// GPU kernel refusing its head dimension does). The exception leaves only
/// after the transfer is done: rank 1 posts 200 ms late, so rank 0 waits
/// that long. Before, the unwinding freed the receive buffers the channel
/// was about to fill (a crash on the GPU check, a use after free here).
void ringFailsWithATransferInFlight(bool backward) {
  std::vector<double> seconds(2);
  std::vector<std::string> errors = runWithChannels(
      2, [&](int64_t r, Comm &comm, Channel &channel, device::Device &dev) {
        if (r == 1)
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
        exec::Ring ring;
        ring.dev = &dev;
        ring.comm = &comm;
        ring.channel = &channel;
        ring.group = {0, 1};
        ring.own = r;
        // No key-value group: the device refuses the attention call.
        ring.heads = 1;
        ring.kvHeads = 0;
        ring.headDim = 4;
        std::vector<exec::AttentionPlan> blocks;
        for (int i = 0; i < 2; ++i)
          blocks.push_back(
              exec::ops::attentionPlan({2, 3}, {0, 0}, {0, 1}, {0, 0}, true));
        device::Tensor q = device::Tensor::zeros(8),
                       k = device::Tensor::zeros(8),
                       v = device::Tensor::zeros(8), o, lse, dq, dk, dv;
        auto start = std::chrono::steady_clock::now();
        try {
          if (backward) {
            device::Tensor out = device::Tensor::zeros(8),
                           l = device::Tensor::zeros(2);
            exec::ringAttentionBackward(ring, blocks, q, k, v, out, l, out, 2,
                                        dq, dk, dv);
          } else {
            exec::ringAttentionForward(ring, blocks, q, k, v, 2, o, lse);
          }
        } catch (...) {
          seconds[static_cast<size_t>(r)] =
              Seconds(std::chrono::steady_clock::now() - start).count();
          throw;
        }
      });
  for (const std::string &error : errors)
    EXPECT_NE(error.find("key-value groups"), std::string::npos) << error;
  EXPECT_GE(seconds[0], 0.15) << "rank 0 left before its transfer was done";
}

TEST(RingAttention, AFailureWaitsForTheTransferInFlight) {
  ringFailsWithATransferInFlight(false);
}

TEST(RingAttention, ABackwardFailureWaitsForTheTransferInFlight) {
  ringFailsWithATransferInFlight(true);
}

/// exec/RankExecutor.h tagOf: the interleaved schedule's chunks give the
/// same module's pipeline messages tags of their own, and every message tag
/// stays below the collectives' (comm/Comm.h kCollectiveTagBase).
TEST(Tags, ChunksAreDistinctAndBelowTheCollectives) {
  std::set<int64_t> tags;
  for (int64_t chunk = 0; chunk < kMaxVirtualStages; ++chunk)
    for (int64_t index : {int64_t(0), kMaxModules - 1})
      for (int64_t mb : {int64_t(0), kMaxMicrobatches - 1}) {
        const int64_t tag = exec::tagOf(exec::kRing, index, mb, chunk);
        EXPECT_LT(tag, kCollectiveTagBase);
        EXPECT_TRUE(tags.insert(tag).second) << chunk << " " << index;
      }
  EXPECT_THROW(exec::tagOf(exec::kAct, kMaxModules, 0), std::runtime_error);
  EXPECT_THROW(exec::tagOf(exec::kAct, 0, 0, kMaxVirtualStages),
               std::runtime_error);
}

TEST(Channel, TagChannelsOutOfRangeAreRefused) {
  std::shared_ptr<LocalWorld> world = makeLocalWorld(1);
  std::unique_ptr<Comm> comm = makeLocalComm(world, 0);
  EXPECT_THROW(comm->setTagChannel(-1), CommError);
  EXPECT_THROW(comm->setTagChannel(kMaxTagChannels), CommError);
  comm->setTagChannel(kMaxTagChannels - 1);
  EXPECT_EQ(comm->getTagChannel(), kMaxTagChannels - 1);
}

TEST(GradBuckets, ContiguousWholeParametersLaterLayersFirst) {
  using exec::ParamSlot;
  // Declaration order: a prefix parameter, then two regions.
  std::vector<ParamSlot> slots = {
      {0, 64, 0},     // 0: TP-partial prefix: never bucketed
      {64, 128, 1},   // 1: replicated, layer 0
      {128, 192, 1},  // 2: replicated, layer 1
      {192, 320, 2},  // 3: sharded, layer 0
      {320, 448, 2},  // 4: sharded, layer 1
      {448, 1024, 2}, // 5: sharded, head
  };
  std::vector<exec::GradBucket> buckets = exec::planGradBuckets(slots, 64, 128);
  ASSERT_EQ(buckets.size(), 4u);
  // The head alone (>= 128 values), layer 1's sharded, layer 0's sharded,
  // then the replicated region as one (two 64-value parameters).
  EXPECT_EQ(buckets[0].begin, 448);
  EXPECT_EQ(buckets[0].end, 1024);
  EXPECT_EQ(buckets[1].begin, 320);
  EXPECT_EQ(buckets[2].begin, 192);
  EXPECT_EQ(buckets[3].begin, 64);
  EXPECT_EQ(buckets[3].end, 192);
  EXPECT_EQ(buckets[3].params, (std::vector<size_t>{2, 1}));
  // Every bucketed value once.
  int64_t covered = 0;
  for (const auto &b : buckets)
    covered += b.end - b.begin;
  EXPECT_EQ(covered, 1024 - 64);
  // One bucket per region when they are large; none when turned off.
  EXPECT_EQ(exec::planGradBuckets(slots, 64, 1 << 20).size(), 2u);
  EXPECT_TRUE(exec::planGradBuckets(slots, 64, 0).empty());
  EXPECT_EQ(exec::planGradBuckets(slots, 0, 1 << 20).size(), 3u);
}

TEST(GradBuckets, ExpertsHaveBucketsOfTheirOwnGroup) {
  // Expert parallelism: the experts' region (group 1, the edp group) is
  // never in a bucket with the dense parameters, however large the
  // buckets.
  std::vector<exec::ParamSlot> slots = {
      {0, 64, 2, 0}, {64, 128, 3, 1}, {128, 192, 3, 1}, {192, 256, 2, 0}};
  std::vector<exec::GradBucket> buckets =
      exec::planGradBuckets(slots, 0, 1 << 20);
  ASSERT_EQ(buckets.size(), 3u);
  for (const exec::GradBucket &b : buckets) {
    const bool experts = b.begin >= 64 && b.end <= 192;
    EXPECT_EQ(b.group, experts ? 1u : 0u) << b.begin;
    if (experts) {
      EXPECT_EQ(b.end - b.begin, 128);
    }
  }
}

TEST(GradBuckets, PostedInPlannedOrderAsTheBackwardReports) {
  using exec::ParamSlot;
  std::vector<ParamSlot> slots = {{0, 4, 2}, {4, 8, 2}, {8, 12, 2}};
  std::vector<std::vector<float>> results(2);
  std::vector<size_t> early(2);
  std::vector<std::string> errors = runWithChannels(
      2, [&](int64_t r, Comm &, Channel &channel, device::Device &dev) {
        std::vector<float> grads(12);
        for (size_t i = 0; i < grads.size(); ++i)
          grads[i] = float(r + 1) * float(i);
        exec::BucketedReduction reduction(exec::planGradBuckets(slots, 0, 4), 3,
                                          2, channel, {{0, 1}}, grads.data(),
                                          "m");
        ASSERT_EQ(reduction.bucketCount(), 3u);
        // Two microbatches; parameter 0 (the earliest layer) finishes last.
        reduction.gradsDone({2, 1, 0}, dev);
        reduction.gradsDone({2}, dev); // bucket of 2 complete: posted
        EXPECT_EQ(reduction.postedEarly(), 1u);
        reduction.gradsDone({0}, dev); // complete, but waits for 1's bucket
        EXPECT_EQ(reduction.postedEarly(), 1u);
        reduction.gradsDone({1}, dev);
        EXPECT_EQ(reduction.postedEarly(), 3u);
        auto spans = reduction.finish(dev, 0);
        EXPECT_EQ(spans.size(), 3u);
        EXPECT_EQ(spans[0].name, "grad bucket 1/3 m");
        early[static_cast<size_t>(r)] = reduction.postedEarly();
        results[static_cast<size_t>(r)] = grads;
        reduction.startStep(1);
        EXPECT_EQ(reduction.postedEarly(), 0u);
      });
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  for (size_t i = 0; i < 12; ++i) {
    EXPECT_EQ(results[0][i], 3.0f * float(i));
    EXPECT_EQ(results[1][i], 3.0f * float(i));
  }
}

/// exec/OptimizerShards.h: each range cut into one piece per member, equal
/// where it divides; a member's moments packed in range order; AdamW's
/// runs cut at the pieces' edges.
TEST(OptimizerShards, PiecesCoverEachRangeOnce) {
  using exec::OptimizerRun;
  using exec::ShardRange;
  EXPECT_EQ(exec::pieceCounts({0, 128}, 4),
            (std::vector<int64_t>{32, 32, 32, 32}));
  EXPECT_EQ(exec::pieceCounts({64, 71}, 3), (std::vector<int64_t>{2, 2, 3}));
  EXPECT_EQ(exec::pieceCounts({0, 2}, 3), (std::vector<int64_t>{0, 1, 1}));
  // Buckets [64, 192) and [192, 256), then the prefix [0, 64); decay on
  // [0, 100) and [164, 256), none on [100, 164).
  std::vector<ShardRange> ranges = {{64, 192}, {192, 256}, {0, 64}};
  std::vector<OptimizerRun> runs = {
      {0, 100, true}, {100, 164, false}, {164, 256, true}};
  int64_t total = 0;
  std::vector<int> owner(256, -1);
  for (int64_t k = 0; k < 2; ++k) {
    exec::OptimizerShards shards(ranges, 256, 2, k, runs);
    total += shards.size();
    EXPECT_EQ(shards.size(), 128);
    int64_t at = 0;
    for (size_t i = 0; i < ranges.size(); ++i) {
      const auto &p = shards.piece(i);
      EXPECT_EQ(p.begin, exec::pieceStart(ranges[i], 2, k));
      EXPECT_EQ(p.at, at);
      at += p.end - p.begin;
      for (int64_t v = p.begin; v < p.end; ++v) {
        EXPECT_EQ(owner[static_cast<size_t>(v)], -1) << v;
        owner[static_cast<size_t>(v)] = static_cast<int>(k);
      }
    }
    // The runs: inside one piece, with the setting of the run they cut.
    for (const auto &run : shards.runs()) {
      EXPECT_LT(run.begin, run.end);
      EXPECT_EQ(run.decay, run.begin < 100 || run.begin >= 164) << run.begin;
    }
  }
  EXPECT_EQ(total, 256);
  for (int o : owner)
    EXPECT_NE(o, -1);
  // Member 0 holds [64, 128), [192, 224) and [0, 32): its runs.
  exec::OptimizerShards first(ranges, 256, 2, 0, runs);
  ASSERT_EQ(first.runs().size(), 4u);
  EXPECT_EQ(first.runs()[0].begin, 64);
  EXPECT_EQ(first.runs()[0].end, 100);
  EXPECT_EQ(first.runs()[1].begin, 100);
  EXPECT_EQ(first.runs()[1].end, 128);
  EXPECT_FALSE(first.runs()[1].decay);
  EXPECT_EQ(first.runs()[2].begin, 192);
  EXPECT_EQ(first.runs()[2].at, 64);
  EXPECT_EQ(first.runs()[3].begin, 0);
  EXPECT_EQ(first.runs()[3].end, 32);
  EXPECT_EQ(first.runs()[3].at, 96);
  EXPECT_THROW(exec::OptimizerShards(ranges, 256, 2, 2, runs),
               std::logic_error);
  // Ranges that leave a gap, or end short of the values.
  EXPECT_THROW(exec::OptimizerShards({{0, 64}, {128, 256}}, 256, 2, 0, runs),
               std::logic_error);
  EXPECT_THROW(exec::OptimizerShards(ranges, 320, 2, 0, runs),
               std::logic_error);
}

/// Expert parallelism: the dense range over the DP x CP group (4 members
/// here), the experts' over their edp group (2): member (own 3, edp own 1)
/// holds the last quarter of the one and the second half of the other.
TEST(OptimizerShards, EachRangeIsCutOverItsOwnGroup) {
  using exec::ShardGroup;
  using exec::ShardRange;
  std::vector<exec::OptimizerRun> runs = {{0, 192, true}};
  std::vector<ShardRange> ranges = {{0, 128, 0}, {128, 192, 1}};
  exec::OptimizerShards shards(ranges, 192, {ShardGroup{4, 3}, {2, 1}}, runs);
  EXPECT_EQ(shards.members(0), 4);
  EXPECT_EQ(shards.members(1), 2);
  EXPECT_EQ(shards.piece(0).begin, 96);
  EXPECT_EQ(shards.piece(0).end, 128);
  EXPECT_EQ(shards.piece(1).begin, 160);
  EXPECT_EQ(shards.piece(1).end, 192);
  EXPECT_EQ(shards.piece(1).at, 32);
  EXPECT_EQ(shards.size(), 64);
  ASSERT_EQ(shards.runs().size(), 2u);
  EXPECT_EQ(shards.runs()[1].begin, 160);
  EXPECT_EQ(shards.runs()[1].at, 32);
  // A range of a group that is not given, a member outside its group.
  EXPECT_THROW(exec::OptimizerShards({{0, 128, 0}, {128, 192, 2}}, 192,
                                     {ShardGroup{4, 3}, {2, 1}}, runs),
               std::logic_error);
  EXPECT_THROW(
      exec::OptimizerShards(ranges, 192, {ShardGroup{4, 3}, {2, 2}}, runs),
      std::logic_error);
}

/// The distributed optimizer's buckets: each member gets the sum of its
/// piece of every bucket (the rest of its buffer left as it was).
TEST(GradBuckets, ScatteredEachMemberSumsItsPieces) {
  using exec::ParamSlot;
  std::vector<ParamSlot> slots = {{0, 4, 2}, {4, 8, 2}, {8, 12, 2}};
  std::vector<std::vector<float>> results(2);
  std::vector<std::string> errors = runWithChannels(
      2, [&](int64_t r, Comm &, Channel &channel, device::Device &dev) {
        std::vector<float> grads(12);
        for (size_t i = 0; i < grads.size(); ++i)
          grads[i] = float(r + 1) * float(i);
        exec::BucketedReduction reduction(exec::planGradBuckets(slots, 0, 4), 3,
                                          1, channel, {{0, 1}}, grads.data(),
                                          "m");
        reduction.scatterTo({r});
        reduction.gradsDone({2, 1, 0}, dev);
        reduction.finish(dev, 0);
        results[static_cast<size_t>(r)] = grads;
      });
  for (const std::string &e : errors)
    EXPECT_EQ(e, "");
  // Buckets of 4 values: member 0 owns the first two of each, 1 the rest.
  for (size_t i = 0; i < 12; ++i) {
    const size_t owner = (i % 4) < 2 ? 0 : 1;
    EXPECT_EQ(results[owner][i], 3.0f * float(i)) << i;
    EXPECT_EQ(results[1 - owner][i], float(2 - owner) * float(i)) << i;
  }
}

} // namespace

/// The nccl watchdog's clock (comm/OperationClock.h): an operation's
/// timeout runs from the end of the one before it, not from when it was
/// enqueued behind a long queue; one that never ends runs out of it.
TEST(OperationClock, AnOperationIsTimedFromItsPredecessorsEnd) {
  using mimo::comm::OperationClock;
  using Clock = std::chrono::steady_clock;
  using std::chrono::seconds;
  const Clock::time_point t0{};
  OperationClock<int> clock; // events: 1 ended, 0 not yet
  std::vector<int> ended = {0, 0, 0};
  auto done = [&](const int &id) {
    return ended[static_cast<size_t>(id)] != 0;
  };
  clock.post(0, "first", t0);
  clock.post(1, "second", t0);
  clock.post(2, "third", t0);
  // The first runs 50 s of a 60 s limit: not overdue.
  EXPECT_EQ(clock.overdue(t0 + seconds(50), seconds(60)), nullptr);
  ended[0] = 1;
  clock.drop(done, t0 + seconds(50));
  EXPECT_EQ(clock.front().what, "second");
  // Enqueued 100 s ago, started 50 s ago: not overdue.
  EXPECT_EQ(clock.overdue(t0 + seconds(100), seconds(60)), nullptr);
  // Never ends: overdue 60 s after the first ended.
  const auto *late = clock.overdue(t0 + seconds(111), seconds(60));
  ASSERT_NE(late, nullptr);
  EXPECT_EQ(late->what, "second");
  ended[1] = ended[2] = 1;
  clock.drop(done, t0 + seconds(112));
  EXPECT_TRUE(clock.empty());
}
