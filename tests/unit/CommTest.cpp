//===- CommTest.cpp - The local backend and the generic collectives -------===//
//
// Runs every rank of a local world as a thread: point-to-point messages,
// batches posted together, every collective over the world and over
// concurrent sub-groups, and the failure model (fail(), timeouts, size
// mismatches release every waiting rank with CommError).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"
#include "runtime/support/Limits.h"

#include <gtest/gtest.h>

#include <atomic>
#include <cmath>
#include <cstring>
#include <functional>
#include <thread>

using namespace mimo::comm;

namespace {

using Clock = std::chrono::steady_clock;
using Seconds = std::chrono::duration<double>;

/// What one rank's body did.
struct Outcome {
  bool threw = false;
  std::string what;
  /// When it returned or threw.
  Clock::time_point end;
};

/// Runs `body` on every rank of a fresh world of `n` ranks (one thread
/// each, each with `timeout`) and returns each rank's outcome.
std::vector<Outcome> runRanks(int64_t n,
                              const std::function<void(Comm &)> &body,
                              Seconds timeout = Seconds(30),
                              std::shared_ptr<LocalWorld> *worldOut = nullptr,
                              Matching matching = Matching::ByTag) {
  std::shared_ptr<LocalWorld> world = makeLocalWorld(n, matching);
  std::vector<Outcome> outcomes(static_cast<size_t>(n));
  std::vector<std::thread> threads;
  for (int64_t r = 0; r < n; ++r)
    threads.emplace_back([&, r] {
      Outcome &o = outcomes[static_cast<size_t>(r)];
      std::unique_ptr<Comm> comm = makeLocalComm(world, r);
      comm->setTimeout(timeout);
      try {
        body(*comm);
      } catch (const CommError &e) {
        o.threw = true;
        o.what = e.what();
      } catch (const std::exception &e) {
        o.threw = true;
        o.what = std::string("unexpected non-CommError: ") + e.what();
      }
      o.end = Clock::now();
    });
  for (std::thread &t : threads)
    t.join();
  if (worldOut)
    *worldOut = world;
  return outcomes;
}

void expectAllOk(const std::vector<Outcome> &outcomes) {
  for (size_t r = 0; r < outcomes.size(); ++r)
    EXPECT_FALSE(outcomes[r].threw) << "rank " << r << ": " << outcomes[r].what;
}

unsigned char pattern(int64_t src, int64_t dst, int64_t tag, int64_t i) {
  return static_cast<unsigned char>(src * 131 + dst * 31 + tag * 7 + i * 13 +
                                    (i >> 8));
}

std::vector<unsigned char> message(int64_t src, int64_t dst, int64_t tag,
                                   int64_t bytes) {
  std::vector<unsigned char> m(static_cast<size_t>(bytes));
  for (int64_t i = 0; i < bytes; ++i)
    m[static_cast<size_t>(i)] = pattern(src, dst, tag, i);
  return m;
}

std::vector<int64_t> range(int64_t n) {
  std::vector<int64_t> all;
  for (int64_t i = 0; i < n; ++i)
    all.push_back(i);
  return all;
}

/// Rank r's contribution to a reduction: element k, with magnitudes spread
/// so that the summation order shows in the bits.
template <typename T> T value(int64_t r, int64_t k, int64_t salt = 0) {
  double sign = (r + k) % 3 == 0 ? -1.0 : 1.0;
  return static_cast<T>(sign * (std::pow(10.0, double((r * 7 + k) % 9) - 4) +
                                0.1 * double(r + 1) + 1e-3 * double(k) +
                                double(salt)));
}

template <typename T>
std::vector<T> groupOrderSum(const std::vector<int64_t> &group, int64_t count,
                             int64_t salt = 0) {
  std::vector<T> sum(static_cast<size_t>(count));
  for (int64_t k = 0; k < count; ++k) {
    T acc = value<T>(group[0], k, salt);
    for (size_t i = 1; i < group.size(); ++i)
      acc += value<T>(group[i], k, salt);
    sum[static_cast<size_t>(k)] = acc;
  }
  return sum;
}

template <typename T>
bool sameBits(const std::vector<T> &a, const std::vector<T> &b) {
  return a.size() == b.size() &&
         (a.empty() ||
          std::memcmp(a.data(), b.data(), a.size() * sizeof(T)) == 0);
}

class LocalCommTest : public ::testing::TestWithParam<int64_t> {
protected:
  int64_t n() const { return GetParam(); }
};

TEST_P(LocalCommTest, PointToPointAllPairsAndSizes) {
  const std::vector<int64_t> sizes = {0, 1, 7, 4096, (1 << 20) + 3};
  std::atomic<int> checked{0};
  auto outcomes = runRanks(n(), [&](Comm &c) {
    EXPECT_EQ(c.size(), n());
    EXPECT_STREQ(c.backendName(), "local");
    // The executor asks capabilities, not names: local ranks are threads
    // of one process and move device memory.
    EXPECT_TRUE(c.capabilities().ranksShareProcess);
    EXPECT_FALSE(c.capabilities().hostMemoryOnly);
    EXPECT_FALSE(c.capabilities().connectsLazily);
    int64_t me = c.rank();
    // Pairs in one global order: the lower rank sends first, the higher
    // receives first, so blocking send/recv never deadlock.
    for (int64_t a = 0; a < n(); ++a)
      for (int64_t b = a + 1; b < n(); ++b) {
        if (me != a && me != b)
          continue;
        int64_t peer = me == a ? b : a;
        for (size_t s = 0; s < sizes.size(); ++s) {
          int64_t tag = static_cast<int64_t>(s);
          std::vector<unsigned char> out = message(me, peer, tag, sizes[s]);
          std::vector<unsigned char> in(out.size(), 0xEE);
          if (me == a) {
            c.send(peer, tag, out.data(), sizes[s]);
            c.recv(peer, tag, in.data(), sizes[s]);
          } else {
            c.recv(peer, tag, in.data(), sizes[s]);
            c.send(peer, tag, out.data(), sizes[s]);
          }
          EXPECT_TRUE(in == message(peer, me, tag, sizes[s]))
              << me << " from " << peer << " size " << sizes[s];
          ++checked;
        }
      }
    // A message to oneself in one batch.
    std::vector<unsigned char> out = message(me, me, 9, 1000), in(1000, 0);
    std::vector<P2POp> ops = {{false, me, 9, in.data(), 1000},
                              {true, me, 9, out.data(), 1000}};
    c.exchange(ops);
    EXPECT_TRUE(in == out);
  });
  expectAllOk(outcomes);
  EXPECT_EQ(checked.load(), n() * (n() - 1) * static_cast<int>(sizes.size()));
}

TEST_P(LocalCommTest, SameTagMessagesArriveInOrder) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank(), next = (me + 1) % n(), prev = (me + n() - 1) % n();
    std::vector<int32_t> first(64, 100 + int32_t(me)),
        second(64, 200 + int32_t(me));
    std::vector<int32_t> a(64, 0), b(64, 0), x(64, 0), y(64, 0);
    // Two sends with one tag in one batch; the receiver takes them in one
    // batch too (receives listed before the sends).
    std::vector<P2POp> ops = {{false, prev, 5, a.data(), 256},
                              {false, prev, 5, b.data(), 256},
                              {true, next, 5, first.data(), 256},
                              {true, next, 5, second.data(), 256}};
    c.exchange(ops);
    EXPECT_EQ(a[0], 100 + prev);
    EXPECT_EQ(b[63], 200 + prev);
    // Again between neighbours (rank r sends to r + 1, in chain order),
    // received with two separate recv() calls.
    if (me > 0) {
      c.recv(me - 1, 6, x.data(), 256);
      c.recv(me - 1, 6, y.data(), 256);
      EXPECT_EQ(x[5], 100 + me - 1);
      EXPECT_EQ(y[5], 200 + me - 1);
    }
    if (me + 1 < n()) {
      std::vector<P2POp> sends = {{true, me + 1, 6, first.data(), 256},
                                  {true, me + 1, 6, second.data(), 256}};
      c.exchange(sends);
    }
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, ExchangeRingAndAllToAllInOneBatch) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank(), next = (me + 1) % n(), prev = (me + n() - 1) % n();
    for (int iter = 0; iter < 20; ++iter) {
      // Receives listed first: blocking sends in this order would deadlock.
      int64_t bytes = 1 + 977 * iter;
      auto toNext = message(me, next, 1, bytes),
           toPrev = message(me, prev, 2, bytes);
      std::vector<unsigned char> fromPrev(bytes), fromNext(bytes);
      std::vector<P2POp> ops = {{false, prev, 1, fromPrev.data(), bytes},
                                {false, next, 2, fromNext.data(), bytes},
                                {true, next, 1, toNext.data(), bytes},
                                {true, prev, 2, toPrev.data(), bytes}};
      c.exchange(ops);
      EXPECT_TRUE(fromPrev == message(prev, me, 1, bytes));
      EXPECT_TRUE(fromNext == message(next, me, 2, bytes));
    }
    // All to all, oneself included, sizes depending on the pair (some 0).
    for (int iter = 0; iter < 5; ++iter) {
      std::vector<std::vector<unsigned char>> out(n()), in(n());
      std::vector<P2POp> ops;
      for (int64_t p = 0; p < n(); ++p) {
        int64_t sendBytes = ((me + 2 * p + iter) % 4) * 1000;
        int64_t recvBytes = ((p + 2 * me + iter) % 4) * 1000;
        out[p] = message(me, p, 3, sendBytes);
        in[p].assign(recvBytes, 0);
        ops.push_back({false, p, 3, in[p].data(), recvBytes});
      }
      for (int64_t p = n() - 1; p >= 0; --p)
        ops.push_back({true, p, 3, out[p].data(), int64_t(out[p].size())});
      c.exchange(ops);
      for (int64_t p = 0; p < n(); ++p)
        EXPECT_TRUE(in[p] == message(p, me, 3, int64_t(in[p].size())));
    }
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, AllReduceSumIsBitIdenticalGroupOrderSum) {
  std::vector<std::vector<float>> floats(n());
  std::vector<std::vector<double>> doubles(n());
  // Past kSplitAllReduce a member: more than two members reduce-scatter
  // and all-gather (shares of unequal size), with the same bits.
  const int64_t count = mimo::kSplitAllReduce * std::max<int64_t>(n(), 1) + 3;
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    std::vector<float> f(count);
    std::vector<double> d(count);
    for (int64_t k = 0; k < count; ++k) {
      f[k] = value<float>(me, k);
      d[k] = value<double>(me, k);
    }
    c.allReduceSum(range(n()), f.data(), count);
    c.allReduceSum(range(n()), d.data(), count);
    float one = float(me + 1);
    c.allReduceSum(range(n()), &one, 1);
    EXPECT_EQ(one, float(n() * (n() + 1) / 2));
    c.allReduceSum(range(n()), static_cast<float *>(nullptr), 0);
    floats[me] = f;
    doubles[me] = d;
  });
  expectAllOk(outcomes);
  auto f = groupOrderSum<float>(range(n()), count);
  auto d = groupOrderSum<double>(range(n()), count);
  for (int64_t r = 0; r < n(); ++r) {
    EXPECT_TRUE(sameBits(floats[r], f)) << "rank " << r;
    EXPECT_TRUE(sameBits(doubles[r], d)) << "rank " << r;
    EXPECT_TRUE(sameBits(floats[r], floats[0]));
  }
  // And below it, each member's whole buffer to every other.
  std::vector<std::vector<float>> small(n());
  const int64_t few = 1003;
  expectAllOk(runRanks(n(), [&](Comm &c) {
    std::vector<float> x(few);
    for (int64_t k = 0; k < few; ++k)
      x[k] = value<float>(c.rank(), k);
    c.allReduceSum(range(n()), x.data(), few);
    small[c.rank()] = x;
  }));
  for (int64_t r = 0; r < n(); ++r)
    EXPECT_TRUE(sameBits(small[r], groupOrderSum<float>(range(n()), few)));
}

TEST_P(LocalCommTest, AllReduceMax) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    std::vector<float> x(100);
    for (int64_t k = 0; k < 100; ++k)
      x[k] = value<float>(me, k);
    c.allReduceMax(range(n()), x.data(), 100);
    for (int64_t k = 0; k < 100; ++k) {
      float expected = value<float>(0, k);
      for (int64_t r = 1; r < n(); ++r)
        expected = std::max(expected, value<float>(r, k));
      EXPECT_EQ(x[k], expected) << k;
    }
    // A NaN anywhere wins.
    float y[2] = {float(me), me == n() - 1 ? std::nanf("") : -1.0f};
    c.allReduceMax(range(n()), y, 2);
    EXPECT_EQ(y[0], float(n() - 1));
    EXPECT_TRUE(std::isnan(y[1]));
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, AllGatherVWithUnequalCounts) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    std::vector<int64_t> counts;
    for (int64_t i = 0; i < n(); ++i)
      counts.push_back((i * 3) % 5); // rank 0 contributes nothing
    int64_t total = 0;
    for (int64_t k : counts)
      total += k;
    std::vector<float> in(counts[me]);
    for (int64_t k = 0; k < counts[me]; ++k)
      in[k] = float(me * 100 + k);
    std::vector<float> out(total + 1, -7.0f); // one guard element
    c.allGatherV(range(n()), in.data(), counts, out.data());
    int64_t at = 0;
    for (int64_t i = 0; i < n(); ++i)
      for (int64_t k = 0; k < counts[i]; ++k)
        EXPECT_EQ(out[at++], float(i * 100 + k));
    EXPECT_EQ(out[total], -7.0f);
    // In place: `in` is this rank's slot of `out`.
    std::vector<int64_t> equal(n(), 3);
    std::vector<float> buf(3 * n(), 0.0f);
    for (int64_t k = 0; k < 3; ++k)
      buf[3 * me + k] = float(me + k);
    c.allGatherV(range(n()), buf.data() + 3 * me, equal, buf.data());
    for (int64_t i = 0; i < n(); ++i)
      EXPECT_EQ(buf[3 * i + 2], float(i + 2));
  });
  expectAllOk(outcomes);
}

/// bf16 bits (precision "bf16"'s keys and values under CP): counts in
/// values, an odd count, two bytes each, no neighbour overwritten.
TEST_P(LocalCommTest, AllGatherVOfBf16Bits) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    std::vector<int64_t> counts;
    for (int64_t i = 0; i < n(); ++i)
      counts.push_back(i % 2 ? 3 : 1);
    int64_t total = 0;
    for (int64_t k : counts)
      total += k;
    std::vector<uint16_t> in(counts[me]);
    for (int64_t k = 0; k < counts[me]; ++k)
      in[k] = static_cast<uint16_t>(0x3f80 + me * 16 + k);
    std::vector<uint16_t> out(total + 1, 0xdead); // one guard value
    c.allGatherV(range(n()), in.data(), counts, out.data());
    int64_t at = 0;
    for (int64_t i = 0; i < n(); ++i)
      for (int64_t k = 0; k < counts[i]; ++k)
        EXPECT_EQ(out[at++], 0x3f80 + i * 16 + k);
    EXPECT_EQ(out[total], 0xdead);
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, ReduceScatterV) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    std::vector<int64_t> counts, offsets;
    int64_t total = 0;
    for (int64_t i = 0; i < n(); ++i) {
      counts.push_back(i == 1 ? 0 : 50 + 7 * i);
      offsets.push_back(total);
      total += counts.back();
    }
    std::vector<float> in(total);
    for (int64_t k = 0; k < total; ++k)
      in[k] = value<float>(me, k);
    std::vector<float> out(counts[me] + 1, -9.0f);
    c.reduceScatterV(range(n()), in.data(), counts, out.data());
    for (int64_t k = 0; k < counts[me]; ++k) {
      float acc = value<float>(0, offsets[me] + k);
      for (int64_t r = 1; r < n(); ++r)
        acc += value<float>(r, offsets[me] + k);
      EXPECT_EQ(std::memcmp(&acc, &out[k], sizeof acc), 0) << k;
    }
    EXPECT_EQ(out[counts[me]], -9.0f);
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, BroadcastFromNonZeroRoot) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    int64_t root = n() - 1;
    std::vector<unsigned char> data(100000, 0);
    if (me == root)
      data = message(root, 0, 0, 100000);
    c.broadcast(range(n()), root, data.data(), 100000);
    EXPECT_TRUE(data == message(root, 0, 0, 100000));
    c.broadcast(range(n()), root / 2, nullptr, 0);
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, ConcurrentSubGroupsAndManyCollectivesInARow) {
  auto outcomes = runRanks(n(), [&](Comm &c) {
    int64_t me = c.rank();
    // Evens and odds, e.g. {0,2} and {1,3}, at the same time.
    std::vector<int64_t> mine;
    for (int64_t i = me % 2; i < n(); i += 2)
      mine.push_back(i);
    std::vector<int64_t> world = range(n());
    for (int iter = 0; iter < 30; ++iter) {
      int64_t count = 1 + (iter * 37) % 300;
      std::vector<float> x(count), w(count);
      for (int64_t k = 0; k < count; ++k) {
        x[k] = value<float>(me, k, iter);
        w[k] = value<float>(me, k, iter + 1);
      }
      c.allReduceSum(mine, x.data(), count);
      EXPECT_TRUE(sameBits(x, groupOrderSum<float>(mine, count, iter)));
      c.allReduceSum(world, w.data(), count);
      EXPECT_TRUE(sameBits(w, groupOrderSum<float>(world, count, iter + 1)));
      // A gather over the sub-group, then a broadcast with a moving root.
      std::vector<int64_t> counts(mine.size(), 2);
      float in[2] = {float(me), float(iter)};
      std::vector<float> out(2 * mine.size());
      c.allGatherV(mine, in, counts, out.data());
      for (size_t i = 0; i < mine.size(); ++i) {
        EXPECT_EQ(out[2 * i], float(mine[i]));
        EXPECT_EQ(out[2 * i + 1], float(iter));
      }
      int64_t root = iter % n();
      int64_t token = me == root ? 1000 + iter : -1;
      c.broadcast(world, root, &token, sizeof token);
      EXPECT_EQ(token, 1000 + iter);
    }
  });
  expectAllOk(outcomes);
}

TEST_P(LocalCommTest, RankOutsideTheGroupIsCommError) {
  std::shared_ptr<LocalWorld> world;
  auto outcomes = runRanks(
      n(),
      [&](Comm &c) {
        if (c.rank() != 0)
          return;
        float x = 1;
        std::vector<int64_t> others;
        for (int64_t i = 1; i < n(); ++i)
          others.push_back(i);
        c.allReduceSum(others, &x, 1);
      },
      Seconds(30), &world);
  ASSERT_TRUE(outcomes[0].threw);
  EXPECT_NE(outcomes[0].what.find("not a member"), std::string::npos)
      << outcomes[0].what;
  EXPECT_NE(localWorldFailure(*world).find("not a member"), std::string::npos);
}

INSTANTIATE_TEST_SUITE_P(Ranks, LocalCommTest, ::testing::Values(1, 2, 3, 4, 8),
                         [](const ::testing::TestParamInfo<int64_t> &info) {
                           return "n" + std::to_string(info.param);
                         });

TEST(LocalCommFailure, FailReleasesEveryWaitingRank) {
  std::shared_ptr<LocalWorld> world;
  Clock::time_point failedAt;
  auto outcomes = runRanks(
      4,
      [&](Comm &c) {
        int64_t me = c.rank();
        char byte = 0;
        if (me == 2) {
          std::this_thread::sleep_for(std::chrono::milliseconds(200));
          failedAt = Clock::now();
          c.fail("rank 2 failed: boom");
          return;
        }
        if (me == 0)
          c.send(2, 1, &byte, 1); // a sender whose receiver dies
        else if (me == 1)
          c.recv(2, 1, &byte, 1);
        else
          c.recv(0, 77, &byte, 1); // waits on a live rank that never sends
      },
      Seconds(30), &world);
  EXPECT_FALSE(outcomes[2].threw);
  for (int r : {0, 1, 3}) {
    ASSERT_TRUE(outcomes[r].threw) << r;
    EXPECT_EQ(outcomes[r].what, "rank 2 failed: boom");
    EXPECT_LT(Seconds(outcomes[r].end - failedAt).count(), 1.0) << r;
  }
  EXPECT_EQ(localWorldFailure(*world), "rank 2 failed: boom");
}

TEST(LocalCommFailure, FirstFailureWinsAndLaterCallsThrow) {
  std::shared_ptr<LocalWorld> world;
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        if (c.rank() == 0)
          c.fail("rank 0 failed: first");
        else {
          std::this_thread::sleep_for(std::chrono::milliseconds(50));
          c.fail("rank 1 failed: second");
        }
        float x = 1;
        c.allReduceSum({0, 1}, &x, 1);
      },
      Seconds(30), &world);
  EXPECT_EQ(localWorldFailure(*world), "rank 0 failed: first");
  for (const Outcome &o : outcomes) {
    EXPECT_TRUE(o.threw);
    EXPECT_EQ(o.what, "rank 0 failed: first");
  }
}

TEST(LocalCommFailure, TimeoutNamesPeerAndContextAndReleasesOthers) {
  std::shared_ptr<LocalWorld> world;
  Clock::time_point start = Clock::now();
  auto outcomes = runRanks(
      3,
      [&](Comm &c) {
        char byte = 0;
        if (c.rank() == 0) {
          c.setTimeout(Seconds(0.3));
          c.setContext("instruction 12 (recv_act language mb 0)");
          c.recv(1, 4, &byte, 1); // rank 1 never sends
        } else {
          c.recv(0, 4, &byte, 1); // blocked on rank 0, 30 s timeout
        }
      },
      Seconds(30), &world);
  ASSERT_TRUE(outcomes[0].threw);
  const std::string &what = outcomes[0].what;
  EXPECT_NE(what.find("rank 0 timed out after 0.3 s waiting for rank 1 in "
                      "instruction 12 (recv_act language mb 0)"),
            std::string::npos)
      << what;
  double took = Seconds(outcomes[0].end - start).count();
  EXPECT_GE(took, 0.29);
  EXPECT_LT(took, 1.3);
  for (int r : {1, 2}) {
    ASSERT_TRUE(outcomes[r].threw);
    EXPECT_EQ(outcomes[r].what, what);
    EXPECT_LT(Seconds(outcomes[r].end - outcomes[0].end).count(), 1.0);
  }
  EXPECT_EQ(localWorldFailure(*world), what);
}

/// Each send waits for its receive (as NCCL's may): two ranks that each
/// send before they receive, in separate batches, wait for each other, and
/// the timeout names the cycle with what each waits for and where.
TEST(LocalCommFailure, SendsBeforeReceivesNameTheirCycle) {
  std::shared_ptr<LocalWorld> world;
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        std::vector<char> buffer(64, 'x');
        const int64_t peer = 1 - c.rank();
        c.setTimeout(Seconds(c.rank() == 0 ? 0.3 : 30));
        c.setContext("instruction " + std::to_string(7 + c.rank()) +
                     " (send_act)");
        c.send(peer, 5, buffer.data(), 64);
        c.recv(peer, 5, buffer.data(), 64);
      },
      Seconds(30), &world);
  ASSERT_TRUE(outcomes[0].threw);
  const std::string &what = outcomes[0].what;
  EXPECT_NE(what.find("the ranks wait for each other in a cycle: rank 0 "
                      "waits for rank 1 (its receive of 64 bytes with tag 5 "
                      "in instruction 7 (send_act)); rank 1 waits for rank 0 "
                      "(its receive of 64 bytes with tag 5 in instruction 8 "
                      "(send_act))"),
            std::string::npos)
      << what;
  ASSERT_TRUE(outcomes[1].threw);
  EXPECT_EQ(outcomes[1].what, what);
}

TEST(LocalCommFailure, UnconsumedSendTimesOut) {
  std::shared_ptr<LocalWorld> world;
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        std::vector<char> big(1 << 16, 'x');
        if (c.rank() == 0) {
          c.setTimeout(Seconds(0.3));
          c.setContext("bridge out");
          c.send(1, 3, big.data(), int64_t(big.size()));
        } else {
          // Receives another tag: the send above is never consumed.
          c.recv(0, 99, big.data(), 1);
        }
      },
      Seconds(30), &world);
  ASSERT_TRUE(outcomes[0].threw);
  EXPECT_NE(outcomes[0].what.find("timed out after 0.3 s waiting for rank 1 "
                                  "in bridge out"),
            std::string::npos)
      << outcomes[0].what;
  ASSERT_TRUE(outcomes[1].threw);
  EXPECT_EQ(outcomes[1].what, outcomes[0].what);
}

TEST(LocalCommFailure, SizeMismatchNamesBothSizes) {
  std::shared_ptr<LocalWorld> world;
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        std::vector<char> buffer(24, 0);
        if (c.rank() == 0)
          c.send(1, 8, buffer.data(), 24);
        else
          c.recv(0, 8, buffer.data(), 16);
      },
      Seconds(30), &world);
  ASSERT_TRUE(outcomes[1].threw);
  const std::string &what = outcomes[1].what;
  EXPECT_NE(what.find("expected 16 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("sent 24 bytes"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 0"), std::string::npos) << what;
  EXPECT_NE(what.find("rank 1"), std::string::npos) << what;
  EXPECT_NE(what.find("tag 8"), std::string::npos) << what;
  // The sender is released too (its receiver failed the world).
  ASSERT_TRUE(outcomes[0].threw);
  EXPECT_EQ(outcomes[0].what, what);
}

TEST(LocalCommFailure, BadPeerIsCommError) {
  auto outcomes = runRanks(2, [&](Comm &c) {
    if (c.rank() == 0) {
      char byte = 0;
      c.send(5, 0, &byte, 1);
    }
  });
  ASSERT_TRUE(outcomes[0].threw);
  EXPECT_NE(outcomes[0].what.find("outside the world"), std::string::npos);
  EXPECT_THROW(makeLocalComm(makeLocalWorld(2), 2), CommError);
}

/// NCCL's pairing (Matching::InPostingOrder): a batch posted in any order
/// pairs by canonical order; a receive meeting another tag first fails,
/// naming both tags.
TEST(LocalCommInPostingOrder, BatchesPairCanonicallyAndMisorderFails) {
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        std::vector<unsigned char> a = message(0, 1, 9, 40),
                                   b = message(0, 1, 3, 24);
        if (c.rank() == 0) {
          std::vector<P2POp> ops = {{true, 1, 9, a.data(), 40},
                                    {true, 1, 3, b.data(), 24}};
          c.exchange(ops);
        } else {
          std::vector<unsigned char> x(24), y(40);
          std::vector<P2POp> ops = {{false, 0, 3, x.data(), 24},
                                    {false, 0, 9, y.data(), 40}};
          c.exchange(ops);
          EXPECT_EQ(x, b);
          EXPECT_EQ(y, a);
        }
      },
      Seconds(30), nullptr, Matching::InPostingOrder);
  expectAllOk(outcomes);

  outcomes = runRanks(
      2,
      [&](Comm &c) {
        char byte = 0;
        if (c.rank() == 0) {
          c.send(1, 5, &byte, 1);
          c.send(1, 6, &byte, 1);
        } else {
          c.recv(0, 6, &byte, 1);
          c.recv(0, 5, &byte, 1);
        }
      },
      Seconds(30), nullptr, Matching::InPostingOrder);
  ASSERT_TRUE(outcomes[1].threw);
  EXPECT_NE(outcomes[1].what.find("posted a receive with tag 6 from rank 0 "
                                  "where rank 0 posted tag 5"),
            std::string::npos)
      << outcomes[1].what;
  EXPECT_NE(outcomes[1].what.find("NCCL"), std::string::npos);
  EXPECT_TRUE(outcomes[0].threw); // released, not hung
}

/// Emulating NCCL (collectives over prepared groups only), a broadcast is
/// a collective every member enters: a member leaves it only once every
/// other member has arrived, here the late rank 2.
TEST(LocalCommInPostingOrder, BroadcastWaitsForEveryMember) {
  std::vector<double> seconds(3, 0);
  auto outcomes = runRanks(
      3,
      [&](Comm &c) {
        c.prepareGroups({{{0, 1, 2}}});
        c.requirePreparedGroups(true);
        if (c.rank() == 2)
          std::this_thread::sleep_for(std::chrono::milliseconds(300));
        float value = c.rank() == 0 ? 7.0f : 0.0f;
        auto start = Clock::now();
        c.broadcast({0, 1, 2}, 0, &value, sizeof(value));
        seconds[static_cast<size_t>(c.rank())] =
            Seconds(Clock::now() - start).count();
        EXPECT_EQ(value, 7.0f);
      },
      Seconds(30), nullptr, Matching::InPostingOrder);
  expectAllOk(outcomes);
  EXPECT_GE(seconds[1], 0.25) << "rank 1 left before rank 2 arrived";

  // A collective over a group that was not prepared is refused (and fails
  // the world, releasing the other member).
  outcomes = runRanks(
      2,
      [&](Comm &c) {
        c.prepareGroups({{{0, 1}}});
        c.requirePreparedGroups(true);
        float one = 1;
        if (c.rank() == 0)
          c.allReduceSum({0}, &one, 1); // one rank: nothing to prepare
        std::vector<int64_t> world = {0, 1};
        c.allReduceSum(world, &one, 1);
        c.allReduceMax({c.rank()}, &one, 1); // one rank, too
        c.prepareGroups({});
        c.allReduceSum(world, &one, 1);
      },
      Seconds(30), nullptr, Matching::InPostingOrder);
  for (const Outcome &o : outcomes) {
    ASSERT_TRUE(o.threw);
    EXPECT_NE(o.what.find("not one of the prepared communicator groups"),
              std::string::npos)
        << o.what;
  }
}

} // namespace

/// Posted messages (docs/plan.md "Posted messages"): rank 0 posts a message
/// to every rank, itself included, and goes on: it then exchanges with
/// rank 1 while the others have not received yet, and waits last. The
/// receivers take theirs in reverse rank order, after an ordinary message
/// from rank 0 in the same pairing lane; both ways of pairing.
TEST(LocalCommPosted, SendsGoOnAndMeetTheirReceivesLater) {
  for (Matching matching : {Matching::ByTag, Matching::InPostingOrder}) {
    SCOPED_TRACE(matching == Matching::ByTag ? "by tag" : "in posting order");
    constexpr int64_t n = 4, bytes = 1 << 12, kTag = 7;
    std::atomic<int> received{0};
    auto outcomes = runRanks(
        n,
        [&](Comm &c) {
          const int64_t r = c.rank();
          std::vector<unsigned char> in(bytes);
          if (r == 0) {
            std::vector<std::vector<unsigned char>> out;
            std::vector<P2POp> ops;
            for (int64_t dst = 0; dst < n; ++dst)
              out.push_back(message(0, dst, kTag, bytes));
            for (int64_t dst = 0; dst < n; ++dst)
              ops.push_back({true, dst, kTag, out[size_t(dst)].data(), bytes});
            std::unique_ptr<PostedSends> posted = c.postSends(ops);
            // Nobody has received: posting did not wait.
            EXPECT_EQ(received.load(), 0);
            // Ordinary messages go on beside the posted ones.
            for (int64_t dst = 1; dst < n; ++dst) {
              unsigned char one = static_cast<unsigned char>(dst);
              c.send(dst, kTag + 1, &one, 1);
            }
            std::vector<P2POp> self = {{false, 0, kTag, in.data(), bytes}};
            c.receivePosted(self);
            EXPECT_EQ(in, message(0, 0, kTag, bytes));
            // done() turns true once every receiver has its message.
            for (int i = 0; i < 10000 && !posted->done(); ++i)
              std::this_thread::sleep_for(std::chrono::milliseconds(1));
            EXPECT_TRUE(posted->done());
            posted->wait();
            return;
          }
          unsigned char one = 0;
          c.recv(0, kTag + 1, &one, 1);
          EXPECT_EQ(one, static_cast<unsigned char>(r));
          // Later ranks receive first.
          std::this_thread::sleep_for(std::chrono::milliseconds(20 * (n - r)));
          std::vector<P2POp> ops = {{false, 0, kTag, in.data(), bytes}};
          c.receivePosted(ops);
          EXPECT_EQ(in, message(0, r, kTag, bytes));
          ++received;
        },
        Seconds(30), nullptr, matching);
    expectAllOk(outcomes);
  }
}

/// A posted message nobody receives times out in the wait, naming the
/// peer; the receiver of one never posted times out too.
TEST(LocalCommPosted, UnreceivedPostedSendTimesOut) {
  auto outcomes = runRanks(
      2,
      [&](Comm &c) {
        unsigned char byte = 1;
        if (c.rank() == 0) {
          std::unique_ptr<PostedSends> posted =
              c.postSends({{true, 1, 3, &byte, 1}});
          posted->wait();
        } else {
          std::vector<P2POp> ops = {{false, 0, 4, &byte, 1}};
          c.receivePosted(ops);
        }
      },
      Seconds(0.3));
  ASSERT_TRUE(outcomes[0].threw || outcomes[1].threw);
  for (const Outcome &o : outcomes) {
    if (o.threw) {
      EXPECT_NE(o.what.find("timed out"), std::string::npos) << o.what;
    }
  }
}

/// Gathers and reduce-scatters of unequal pieces over a group with native
/// collectives (the nccl backend's communicators; the local backend
/// matching in posting order stands in) pad each piece to the widest and
/// take the native collective, not messages over the world: the same
/// values, no neighbour overwritten, in place too.
TEST(LocalCommInPostingOrder, UnequalPiecesPadOntoTheNativeCollectives) {
  for (Matching matching : {Matching::InPostingOrder, Matching::ByTag}) {
    const int64_t n = 3;
    auto outcomes = runRanks(
        n,
        [&](Comm &c) {
          const int64_t me = c.rank();
          const std::vector<int64_t> counts = {5, 0, 3}, offsets = {0, 5, 5};
          // allGatherV of floats, then in place.
          std::vector<float> in(counts[me]);
          for (int64_t k = 0; k < counts[me]; ++k)
            in[k] = float(me * 100 + k);
          std::vector<float> out(9, -7.0f);
          c.allGatherV(range(n), in.data(), counts, out.data());
          for (int64_t i = 0; i < n; ++i)
            for (int64_t k = 0; k < counts[i]; ++k)
              EXPECT_EQ(out[offsets[i] + k], float(i * 100 + k));
          EXPECT_EQ(out[8], -7.0f);
          std::vector<float> same(8, 0.0f);
          for (int64_t k = 0; k < counts[me]; ++k)
            same[offsets[me] + k] = float(me + k);
          c.allGatherV(range(n), same.data() + offsets[me], counts,
                       same.data());
          EXPECT_EQ(same[7], 4.0f); // rank 2's last
          // bf16 bits.
          std::vector<uint16_t> bits(counts[me], uint16_t(0x3f80 + me));
          std::vector<uint16_t> gathered(9, 0xffff);
          c.allGatherV(range(n), bits.data(), counts, gathered.data());
          EXPECT_EQ(gathered[0], 0x3f80);
          EXPECT_EQ(gathered[7], 0x3f82);
          EXPECT_EQ(gathered[8], 0xffff);
          // reduceScatterV: the pieces' sums in group order.
          std::vector<float> values(8);
          for (int64_t k = 0; k < 8; ++k)
            values[k] = value<float>(me, k);
          std::vector<float> piece(counts[me] + 1, -9.0f);
          c.reduceScatterV(range(n), values.data(), counts, piece.data());
          for (int64_t k = 0; k < counts[me]; ++k) {
            float acc = value<float>(0, offsets[me] + k);
            for (int64_t r = 1; r < n; ++r)
              acc += value<float>(r, offsets[me] + k);
            EXPECT_EQ(std::memcmp(&acc, &piece[k], sizeof acc), 0) << k;
          }
          EXPECT_EQ(piece[counts[me]], -9.0f);
          EXPECT_EQ(c.paddedCollectives(),
                    matching == Matching::InPostingOrder ? 4 : 0);
        },
        Seconds(30), nullptr, matching);
    expectAllOk(outcomes);
  }
}
