//===- MpiCommCheck.cpp - The mpi backend under mpirun -----------------===//
//
// A standalone check (no gtest) of the mpi backend: run it as
//   mpirun -np 4 mpi_comm_check
// It exercises point-to-point messages, batches posted together, every
// collective over the world and over concurrent sub-groups, size
// mismatches and a timeout. Rank 0 prints "ok" and every rank returns 0,
// or the failures are printed and the ranks return 1 (a communication
// error tears the job down through Comm::fail).
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <cstring>
#include <string>
#include <thread>
#include <vector>

using namespace mimo::comm;

namespace {

int failures = 0;
int64_t self = 0;

void check(bool ok, const std::string &what) {
  if (ok)
    return;
  std::fprintf(stderr, "rank %lld: FAILED: %s\n", static_cast<long long>(self),
               what.c_str());
  ++failures;
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

void pointToPoint(Comm &c) {
  int64_t n = c.size(), me = c.rank();
  const std::vector<int64_t> sizes = {0, 1, 7, 4096, (1 << 20) + 3, 16 << 20};
  // Pairs in one global order; the lower rank sends first.
  for (int64_t a = 0; a < n; ++a)
    for (int64_t b = a + 1; b < n; ++b) {
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
        check(in == message(peer, me, tag, sizes[s]),
              "p2p from rank " + std::to_string(peer) + ", " +
                  std::to_string(sizes[s]) + " bytes");
      }
    }
  // Two messages with one tag arrive in order.
  int64_t next = (me + 1) % n, prev = (me + n - 1) % n;
  std::vector<int32_t> first(1000, 100 + int32_t(me)),
      second(1000, 200 + int32_t(me)), a(1000), b(1000);
  std::vector<P2POp> ops = {{false, prev, 5, a.data(), 4000},
                            {false, prev, 5, b.data(), 4000},
                            {true, next, 5, first.data(), 4000},
                            {true, next, 5, second.data(), 4000}};
  c.exchange(ops);
  check(a[999] == 100 + prev && b[0] == 200 + prev, "same-tag order");
}

void exchanges(Comm &c) {
  int64_t n = c.size(), me = c.rank();
  int64_t next = (me + 1) % n, prev = (me + n - 1) % n;
  for (int iter = 0; iter < 10; ++iter) {
    // Receives first, large messages: blocking sends would deadlock.
    int64_t bytes = 1 + 400009 * iter;
    auto toNext = message(me, next, 1, bytes),
         toPrev = message(me, prev, 2, bytes);
    std::vector<unsigned char> fromPrev(static_cast<size_t>(bytes)),
        fromNext(static_cast<size_t>(bytes));
    std::vector<P2POp> ops = {{false, prev, 1, fromPrev.data(), bytes},
                              {false, next, 2, fromNext.data(), bytes},
                              {true, next, 1, toNext.data(), bytes},
                              {true, prev, 2, toPrev.data(), bytes}};
    c.exchange(ops);
    check(fromPrev == message(prev, me, 1, bytes), "ring from prev");
    check(fromNext == message(next, me, 2, bytes), "ring from next");
  }
  // All to all, oneself included, some sizes 0.
  for (int iter = 0; iter < 4; ++iter) {
    std::vector<std::vector<unsigned char>> out(static_cast<size_t>(n)),
        in(static_cast<size_t>(n));
    std::vector<P2POp> ops;
    for (int64_t p = 0; p < n; ++p) {
      int64_t sendBytes = ((me + 2 * p + iter) % 4) * 100000;
      int64_t recvBytes = ((p + 2 * me + iter) % 4) * 100000;
      out[p] = message(me, p, 3, sendBytes);
      in[p].assign(static_cast<size_t>(recvBytes), 0);
      ops.push_back({false, p, 3, in[p].data(), recvBytes});
    }
    for (int64_t p = n - 1; p >= 0; --p)
      ops.push_back({true, p, 3, out[p].data(), int64_t(out[p].size())});
    c.exchange(ops);
    for (int64_t p = 0; p < n; ++p)
      check(in[p] == message(p, me, 3, int64_t(in[p].size())),
            "all-to-all from rank " + std::to_string(p));
  }
}

void collectives(Comm &c, const std::vector<int64_t> &group,
                 const std::string &name, int64_t salt) {
  int64_t me = c.rank();
  size_t own = static_cast<size_t>(std::find(group.begin(), group.end(), me) -
                                   group.begin());
  const int64_t count = 10007;
  std::vector<float> f(count);
  std::vector<double> d(count);
  for (int64_t k = 0; k < count; ++k) {
    f[k] = value<float>(me, k, salt);
    d[k] = value<double>(me, k, salt);
  }
  c.allReduceSum(group, f.data(), count);
  c.allReduceSum(group, d.data(), count);
  check(sameBits(f, groupOrderSum<float>(group, count, salt)),
        name + ": allReduceSum float");
  check(sameBits(d, groupOrderSum<double>(group, count, salt)),
        name + ": allReduceSum double");

  std::vector<float> x(100);
  for (int64_t k = 0; k < 100; ++k)
    x[k] = value<float>(me, k, salt);
  c.allReduceMax(group, x.data(), 100);
  bool maxOk = true;
  for (int64_t k = 0; k < 100; ++k) {
    float expected = value<float>(group[0], k, salt);
    for (int64_t r : group)
      expected = std::max(expected, value<float>(r, k, salt));
    maxOk = maxOk && x[k] == expected;
  }
  check(maxOk, name + ": allReduceMax");

  std::vector<int64_t> counts, offsets;
  int64_t total = 0;
  for (size_t i = 0; i < group.size(); ++i) {
    counts.push_back(int64_t(i * 3 + salt) % 5);
    offsets.push_back(total);
    total += counts.back();
  }
  std::vector<float> in(static_cast<size_t>(counts[own]));
  for (int64_t k = 0; k < counts[own]; ++k)
    in[k] = float(me * 100 + k);
  std::vector<float> out(static_cast<size_t>(total));
  c.allGatherV(group, in.data(), counts, out.data());
  bool gatherOk = true;
  for (size_t i = 0; i < group.size(); ++i)
    for (int64_t k = 0; k < counts[i]; ++k)
      gatherOk = gatherOk && out[offsets[i] + k] == float(group[i] * 100 + k);
  check(gatherOk, name + ": allGatherV");

  std::vector<float> full(static_cast<size_t>(total));
  for (int64_t k = 0; k < total; ++k)
    full[k] = value<float>(me, k, salt);
  std::vector<float> mine(static_cast<size_t>(counts[own]));
  c.reduceScatterV(group, full.data(), counts, mine.data());
  bool scatterOk = true;
  for (int64_t k = 0; k < counts[own]; ++k) {
    float acc = value<float>(group[0], offsets[own] + k, salt);
    for (size_t i = 1; i < group.size(); ++i)
      acc += value<float>(group[i], offsets[own] + k, salt);
    scatterOk = scatterOk && std::memcmp(&acc, &mine[k], sizeof acc) == 0;
  }
  check(scatterOk, name + ": reduceScatterV");

  int64_t root = group.back();
  std::vector<unsigned char> data(300000, 0);
  if (me == root)
    data = message(root, 0, salt, 300000);
  c.broadcast(group, root, data.data(), 300000);
  check(data == message(root, 0, salt, 300000), name + ": broadcast");
}

void mismatchAndTimeout(Comm &c) {
  if (c.size() < 2)
    return;
  int64_t me = c.rank();
  // Larger than expected: MPI_ERR_TRUNCATE on rank 1.
  if (me == 0) {
    std::vector<char> big(24, 'a');
    c.send(1, 40, big.data(), 24);
  } else if (me == 1) {
    std::vector<char> small(16, 0);
    try {
      c.recv(0, 40, small.data(), 16);
      check(false, "a larger message than expected was accepted");
    } catch (const CommError &e) {
      std::string what = e.what();
      check(what.find("expected 16 bytes") != std::string::npos &&
                what.find("rank 0") != std::string::npos,
            "truncation message: " + what);
    }
  }
  // Smaller than expected: rank 0 gets 8 of 16 bytes.
  if (me == 1) {
    std::vector<char> part(8, 'b');
    c.send(0, 41, part.data(), 8);
  } else if (me == 0) {
    std::vector<char> whole(16, 0);
    try {
      c.recv(1, 41, whole.data(), 16);
      check(false, "a smaller message than expected was accepted");
    } catch (const CommError &e) {
      std::string what = e.what();
      check(what.find("expected 16 bytes") != std::string::npos &&
                what.find("sent 8 bytes") != std::string::npos,
            "short message: " + what);
    }
  }
  // A receive nobody sends: rank 0 times out. Its receive stays posted,
  // into a buffer that lives on, and is satisfied afterwards.
  static char late[4];
  std::vector<int64_t> world = range(c.size());
  if (me == 0) {
    auto saved = c.getTimeout();
    c.setTimeout(std::chrono::duration<double>(0.3));
    c.setContext("the timeout check (this line is expected)");
    auto start = std::chrono::steady_clock::now();
    try {
      c.recv(1, 42, late, 4);
      check(false, "a receive nobody sends did not time out");
    } catch (const CommError &e) {
      std::string what = e.what();
      double took = std::chrono::duration<double>(
                        std::chrono::steady_clock::now() - start)
                        .count();
      check(what.find("timed out after 0.3 s waiting for rank 1 in the "
                      "timeout check") != std::string::npos,
            "timeout message: " + what);
      check(took >= 0.29 && took < 5, "timeout took " + std::to_string(took));
    }
    c.setTimeout(saved);
    c.setContext("");
  }
  float token = 0;
  c.allReduceSum(world, &token, 1);
  if (me == 1)
    c.send(0, 42, "late", 4);
}

} // namespace

int main() {
  std::string error;
  std::unique_ptr<Comm> comm = makeMpiComm(&error);
  if (!comm) {
    std::fprintf(stderr, "mpi_comm_check: %s\n", error.c_str());
    return 1;
  }
  Comm &c = *comm;
  self = c.rank();
  int64_t n = c.size();
  c.setTimeout(std::chrono::duration<double>(60));
  try {
    check(std::string(c.backendName()) == "mpi", "backend name");
    check(c.capabilities().hostMemoryOnly &&
              !c.capabilities().ranksShareProcess,
          "capabilities: host memory, a process per rank");
    check(launchedByMpirun(), "launchedByMpirun");
    pointToPoint(c);
    exchanges(c);
    std::vector<int64_t> world = range(n);
    collectives(c, world, "world", 0);
    // Evens and odds at the same time, then {1,3}-like pairs and the world
    // again, several times in a row.
    std::vector<int64_t> parity, pair;
    for (int64_t i = self % 2; i < n; i += 2)
      parity.push_back(i);
    for (int64_t i = self % 2; i < std::min<int64_t>(n, 4); i += 2)
      pair.push_back(i);
    for (int iter = 0; iter < 3; ++iter) {
      collectives(c, parity, "parity group", iter + 1);
      if (self < 4)
        collectives(c, pair, "pair group", iter + 2);
      collectives(c, world, "world", iter + 3);
    }
    collectives(c, {self}, "self", 7);
    mismatchAndTimeout(c);
    // Agree on the outcome.
    float bad = float(failures);
    c.allReduceSum(world, &bad, 1);
    if (self == 0)
      std::printf("%s\n", bad == 0 ? "ok" : "FAILED");
    std::fflush(stdout);
    finalizeMpi();
    return bad == 0 ? 0 : 1;
  } catch (const CommError &e) {
    c.fail(std::string("mpi_comm_check: ") + e.what());
  }
  return 1;
}
