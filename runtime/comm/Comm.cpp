//===- Comm.cpp - Point-to-point wrappers and generic collectives --------===//
//
// Every collective is built on Comm::exchange (a batch of point-to-point
// messages posted together), so all backends share one implementation:
// each member sends what the others need straight to them and reduces what
// it receives in group order (group[0] first). Since every member applies
// the same operations in the same order, results are bit-identical on all
// members. Staging buffers and reductions live on the communicator's
// device, so the same code serves host and GPU memory.
//
//===----------------------------------------------------------------------===//

#include "runtime/comm/Comm.h"

#include "runtime/device/Tensor.h"
#include "runtime/support/Limits.h"

#include <algorithm>
#include <cmath>
#include <functional>
#include <limits>
#include <type_traits>

namespace mimo::comm {

namespace {

static_assert(kCollectiveTagBase + kMaxTagChannels * kCollectiveTagSpan <=
                  int64_t(std::numeric_limits<int32_t>::max()) + 1,
              "collective tags must stay below 2^31");

std::string groupText(const std::vector<int64_t> &group) {
  std::string text = "{";
  for (size_t i = 0; i < group.size(); ++i)
    text += (i ? "," : "") + std::to_string(group[i]);
  return text + "}";
}

/// Byte count of `count` elements of `T`, as exchange() takes it.
template <typename T> int64_t bytesOf(int64_t count) {
  return count * static_cast<int64_t>(sizeof(T));
}

/// Offsets of the pieces of `counts` (prefix sums).
std::vector<int64_t> offsetsOf(const std::vector<int64_t> &counts) {
  std::vector<int64_t> offsets(counts.size(), 0);
  for (size_t i = 1; i < counts.size(); ++i)
    offsets[i] = offsets[i - 1] + counts[i - 1];
  return offsets;
}

} // namespace

void canonicalOrder(std::vector<P2POp> &ops) {
  std::stable_sort(ops.begin(), ops.end(), [](const P2POp &a, const P2POp &b) {
    return a.peer != b.peer ? a.peer < b.peer : a.tag < b.tag;
  });
}

void Comm::send(int64_t peer, int64_t tag, const void *data, int64_t bytes) {
  std::vector<P2POp> ops(1);
  ops[0] = {true, peer, tag, const_cast<void *>(data), bytes};
  exchange(ops);
}

void Comm::recv(int64_t peer, int64_t tag, void *data, int64_t bytes) {
  std::vector<P2POp> ops(1);
  ops[0] = {false, peer, tag, data, bytes};
  exchange(ops);
}

std::string agreeOnRankZero(
    Comm &comm, const std::string &mine,
    const std::function<std::string(const std::vector<std::string> &)>
        &decide) {
  Comm &host = comm.hostComm();
  const int64_t size = host.size(), self = host.rank();
  if (size <= 1)
    return decide({mine.substr(0, kAgreeText - 1)}).substr(0, kAgreeText - 1);
  constexpr int64_t kTag = 11;
  std::vector<char> verdict(kAgreeText, '\0');
  if (self == 0) {
    std::vector<std::string> texts(static_cast<size_t>(size));
    texts[0] = mine.substr(0, kAgreeText - 1);
    std::string other(kAgreeText, '\0');
    for (int64_t r = 1; r < size; ++r) {
      host.recv(r, kTag, other.data(), static_cast<int64_t>(kAgreeText));
      texts[static_cast<size_t>(r)] = other.c_str();
    }
    std::string answer = decide(texts).substr(0, kAgreeText - 1);
    std::copy(answer.begin(), answer.end(), verdict.begin());
  } else {
    std::string text = mine.substr(0, kAgreeText - 1);
    text.resize(kAgreeText, '\0');
    host.send(0, kTag, text.data(), static_cast<int64_t>(kAgreeText));
  }
  std::vector<int64_t> all(static_cast<size_t>(size));
  for (int64_t r = 0; r < size; ++r)
    all[static_cast<size_t>(r)] = r;
  host.broadcast(all, 0, verdict.data(), static_cast<int64_t>(kAgreeText));
  return verdict.data();
}

std::string firstProblem(Comm &comm, const std::string &mine) {
  return agreeOnRankZero(comm, mine, [](const std::vector<std::string> &all) {
    for (size_t r = 0; r < all.size(); ++r)
      if (!all[r].empty())
        return r == 0 ? all[r] : "rank " + std::to_string(r) + ": " + all[r];
    return std::string();
  });
}

void Comm::usageError(const std::string &message) {
  std::string full = "rank " + std::to_string(rank()) + ": " + message;
  if (!context.empty())
    full += " in " + context;
  noteError(full);
  throw CommError(full);
}

void Comm::prepareGroups(
    const std::vector<std::vector<std::vector<int64_t>>> &families) {
  prepared.clear();
  for (const auto &family : families)
    prepared.insert(prepared.end(), family.begin(), family.end());
  std::sort(prepared.begin(), prepared.end());
  createGroups(families);
}

void Comm::warmUp(const std::vector<int64_t> &peers) {
  device::Device &dev = device();
  // Two bytes per peer (what it sends, what it receives): each its own
  // allocation, as the run's buffers are.
  constexpr int64_t kTag = kCollectiveTagBase - 1;
  std::vector<device::Tensor> buffers;
  std::vector<P2POp> ops;
  for (int64_t peer : peers) {
    if (peer == rank())
      continue;
    device::Tensor out = device::Tensor::empty(dev, 1);
    device::Tensor in = device::Tensor::empty(dev, 1);
    float mark = static_cast<float>(rank());
    dev.upload(out.data(), &mark, sizeof mark);
    ops.push_back({true, peer, kTag, out.data(), int64_t(sizeof(float))});
    ops.push_back({false, peer, kTag, in.data(), int64_t(sizeof(float))});
    buffers.push_back(std::move(out));
    buffers.push_back(std::move(in));
  }
  if (!ops.empty())
    exchange(ops);
  for (const P2POp &op : ops) {
    if (op.isSend)
      continue;
    float got = -1;
    dev.download(&got, op.data, sizeof got);
    if (got != static_cast<float>(op.peer))
      usageError("warming the connection with rank " + std::to_string(op.peer) +
                 " delivered a wrong value");
  }
  const std::vector<int64_t> *last = nullptr;
  for (const std::vector<int64_t> &group : prepared) {
    if (group.size() < 2 || (last && *last == group) ||
        !std::binary_search(group.begin(), group.end(), rank()))
      continue;
    last = &group;
    device::Tensor one = device::Tensor::empty(dev, 1);
    float value = 1.0f;
    dev.upload(one.data(), &value, sizeof value);
    allReduceSum(group, one.data(), 1);
    dev.download(&value, one.data(), sizeof value);
    if (value != static_cast<float>(group.size()))
      usageError("warming the communicator of group " + groupText(group) +
                 " gave " + std::to_string(value) + " for its size");
  }
  dev.synchronize();
}

size_t Comm::checkGroup(const std::vector<int64_t> &group, const char *what) {
  int64_t self = rank();
  int64_t world = size();
  size_t own = group.size();
  for (size_t i = 0; i < group.size(); ++i) {
    if (group[i] < 0 || group[i] >= world)
      usageError(std::string(what) + " over group " + groupText(group) +
                 ": rank " + std::to_string(group[i]) +
                 " is outside the world of " + std::to_string(world));
    if (i > 0 && group[i] <= group[i - 1])
      usageError(std::string(what) + " over group " + groupText(group) +
                 ": members must be ascending and distinct");
    if (group[i] == self)
      own = i;
  }
  if (own == group.size())
    usageError(std::string(what) + " over group " + groupText(group) +
               ": this rank is not a member");
  if (strictGroups && group.size() > 1 &&
      !std::binary_search(prepared.begin(), prepared.end(), group))
    usageError(std::string(what) + " over group " + groupText(group) +
               ", which is not one of the prepared communicator groups");
  return own;
}

void Comm::checkCounts(const std::vector<int64_t> &group,
                       const std::vector<int64_t> &counts, const char *what) {
  if (counts.size() != group.size())
    usageError(std::string(what) + " over group " + groupText(group) + ": " +
               std::to_string(counts.size()) + " counts for " +
               std::to_string(group.size()) + " members");
  for (int64_t c : counts)
    if (c < 0)
      usageError(std::string(what) + " over group " + groupText(group) +
                 ": negative count " + std::to_string(c));
}

void Comm::setTagChannel(int64_t channel) {
  if (channel < 0 || channel >= kMaxTagChannels)
    throw CommError("tag channel " + std::to_string(channel) +
                    " is outside 0.." + std::to_string(kMaxTagChannels - 1));
  tagChannel = channel;
}

int64_t Comm::collectiveTag(const std::vector<int64_t> &group) {
  int64_t *counter = nullptr;
  for (auto &entry : collectiveCounters)
    if (entry.first == group)
      counter = &entry.second;
  if (!counter)
    counter = &collectiveCounters.emplace_back(group, 0).second;
  int64_t tag = kCollectiveTagBase + tagChannel * kCollectiveTagSpan + *counter;
  *counter = (*counter + 1) % kCollectiveTagSpan; // wraps modulo 2^20
  if (tag >= (int64_t(1) << 31))
    usageError("collective tag " + std::to_string(tag) +
               " does not fit in 31 bits");
  return tag;
}

void Comm::reduceInOrder(device::DType type, void *out,
                         const std::vector<const void *> &pieces, int64_t count,
                         bool max) {
  device::Device &dev = device();
  if (count == 0)
    return;
  // Accumulate in a buffer of its own: `out` may be one of the pieces.
  device::Tensor acc = device::Tensor::empty(dev, count, type);
  for (size_t i = 1; i < pieces.size(); ++i) {
    const void *left = i == 1 ? pieces[0] : acc.raw();
    if (max)
      dev.maximum(acc.data(), static_cast<const float *>(left),
                  static_cast<const float *>(pieces[i]), count);
    else
      dev.add(type, acc.raw(), left, pieces[i], count);
  }
  dev.copy(out, acc.raw(), acc.bytes());
}

template <typename T>
void Comm::allReduce(const std::vector<int64_t> &group, T *data, int64_t count,
                     bool max, const char *what) {
  size_t own = checkGroup(group, what);
  if (count < 0)
    usageError(std::string(what) + ": negative count " + std::to_string(count));
  size_t n = group.size();
  if (n == 1)
    return;
  constexpr device::DType type = device::DTypeOf<T>::value;
  if (nativeAllReduce(group, type, data, count, max))
    return;
  // A large fp32 sum over more than two members: a reduce-scatter and an
  // all-gather, each member reducing its share of the buffer (in group
  // order: the same bits) and sending 2 (n - 1) / n of it, not n - 1
  // whole copies (ranks sharing a GPU, the mpi backend).
  if constexpr (std::is_same_v<T, float>) {
    if (!max && n > 2 && count >= kSplitAllReduce * static_cast<int64_t>(n)) {
      std::vector<int64_t> counts(n, count / static_cast<int64_t>(n));
      for (size_t i = 0; i < static_cast<size_t>(count) % n; ++i)
        ++counts[i];
      device::Tensor share = device::Tensor::empty(device(), counts[own]);
      reduceScatterV(group, data, counts, share.data());
      allGatherV(group, share.data(), counts, data);
      return;
    }
  }
  // count == 0 still exchanges (empty) messages: a member that disagrees
  // about the count gets a size mismatch instead of a hang.
  int64_t tag = collectiveTag(group);
  // received: every other member's buffer, in group order.
  device::Tensor received = device::Tensor::empty(
      device(), count * static_cast<int64_t>(n - 1), type);
  std::vector<const void *> piece(n);
  std::vector<P2POp> ops;
  ops.reserve(2 * (n - 1));
  size_t slot = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i == own) {
      piece[i] = data;
      continue;
    }
    T *into = received.template data<T>() + slot++ * static_cast<size_t>(count);
    piece[i] = into;
    ops.push_back({true, group[i], tag, data, bytesOf<T>(count)});
    ops.push_back({false, group[i], tag, into, bytesOf<T>(count)});
  }
  exchange(ops);
  reduceInOrder(type, data, piece, count, max);
}

void Comm::allReduceSum(const std::vector<int64_t> &group, float *data,
                        int64_t count) {
  allReduce(group, data, count, false, "allReduceSum");
}

void Comm::allReduceSum(const std::vector<int64_t> &group, double *data,
                        int64_t count) {
  allReduce(group, data, count, false, "allReduceSum");
}

void Comm::allReduceSumBf16(const std::vector<int64_t> &group, float *data,
                            int64_t count) {
  checkGroup(group, "allReduceSum");
  if (group.size() > 1 && count > 0 && nativeAllReduceBf16(group, data, count))
    return;
  allReduce(group, data, count, false, "allReduceSum");
}

void Comm::allReduceMax(const std::vector<int64_t> &group, float *data,
                        int64_t count) {
  allReduce(group, data, count, true, "allReduceMax");
}

void Comm::allGatherV(const std::vector<int64_t> &group, const float *in,
                      const std::vector<int64_t> &counts, float *out) {
  allGatherValues(group, device::DType::F32, in, counts, out);
}

void Comm::allGatherV(const std::vector<int64_t> &group, const uint16_t *in,
                      const std::vector<int64_t> &counts, uint16_t *out) {
  allGatherValues(group, device::DType::BF16, in, counts, out);
}

void Comm::allGatherValues(const std::vector<int64_t> &group,
                           device::DType type, const void *in,
                           const std::vector<int64_t> &counts, void *out) {
  size_t own = checkGroup(group, "allGatherV");
  checkCounts(group, counts, "allGatherV");
  size_t n = group.size();
  bool equal = std::all_of(counts.begin(), counts.end(),
                           [&](int64_t c) { return c == counts[0]; });
  if (n > 1 && equal && nativeAllGather(group, type, in, counts[0], out))
    return;
  if (n > 1 && !equal && nativeCollectives(group)) {
    // Every piece padded to the widest (the pads never leave the
    // scratch), one native gather, then each piece to its place.
    const int64_t size = device::sizeOf(type);
    const int64_t widest = *std::max_element(counts.begin(), counts.end());
    device::Device &dev = device();
    device::Tensor piece = device::Tensor::empty(dev, widest, type);
    device::Tensor all =
        device::Tensor::empty(dev, widest * static_cast<int64_t>(n), type);
    dev.fillZero(piece.raw(), piece.bytes());
    if (counts[own] > 0)
      dev.copy(piece.raw(), in, counts[own] * size);
    if (!nativeAllGather(group, type, piece.raw(), widest, all.raw()))
      usageError("allGatherV: the backend's gather does not serve group " +
                 groupText(group));
    std::vector<int64_t> offsets = offsetsOf(counts);
    auto *bytes = static_cast<unsigned char *>(out);
    const auto *gathered = static_cast<const unsigned char *>(all.raw());
    for (size_t i = 0; i < n; ++i)
      if (counts[i] > 0)
        dev.copy(bytes + offsets[i] * size,
                 gathered + static_cast<int64_t>(i) * widest * size,
                 counts[i] * size);
    ++padded;
    return;
  }
  allGatherByMessages(group, type, in, counts, out);
}

void Comm::allGatherByMessages(const std::vector<int64_t> &group,
                               device::DType type, const void *in,
                               const std::vector<int64_t> &counts, void *out) {
  size_t own = checkGroup(group, "allGatherV");
  size_t n = group.size();
  const int64_t size = device::sizeOf(type);
  std::vector<int64_t> offsets = offsetsOf(counts);
  auto *bytes = static_cast<unsigned char *>(out);
  if (n > 1) {
    int64_t tag = collectiveTag(group);
    std::vector<P2POp> ops;
    ops.reserve(2 * (n - 1));
    for (size_t i = 0; i < n; ++i) {
      if (i == own)
        continue;
      ops.push_back(
          {true, group[i], tag, const_cast<void *>(in), counts[own] * size});
      ops.push_back(
          {false, group[i], tag, bytes + offsets[i] * size, counts[i] * size});
    }
    exchange(ops);
  }
  // After the exchange: `in` may be this rank's slot of `out` itself.
  if (counts[own] > 0 && bytes + offsets[own] * size != in)
    device().copy(bytes + offsets[own] * size, in, counts[own] * size);
}

void Comm::reduceScatterV(const std::vector<int64_t> &group, const float *in,
                          const std::vector<int64_t> &counts, float *out) {
  size_t own = checkGroup(group, "reduceScatterV");
  checkCounts(group, counts, "reduceScatterV");
  size_t n = group.size();
  std::vector<int64_t> offsets = offsetsOf(counts);
  int64_t mine = counts[own];
  if (n == 1) {
    if (mine > 0 && out != in)
      device().copy(out, in, bytesOf<float>(mine));
    return;
  }
  bool equal = std::all_of(counts.begin(), counts.end(),
                           [&](int64_t c) { return c == counts[0]; });
  if (equal && nativeReduceScatter(group, in, mine, out))
    return;
  if (!equal && nativeCollectives(group)) {
    // Every member's pieces padded to the widest (zeros), one native
    // reduce-scatter, this member's piece out of its padded sum.
    const int64_t widest = *std::max_element(counts.begin(), counts.end());
    device::Device &dev = device();
    device::Tensor all = device::Tensor::empty(
        dev, widest * static_cast<int64_t>(n), device::DType::F32);
    device::Tensor sum = device::Tensor::empty(dev, widest, device::DType::F32);
    dev.fillZero(all.raw(), all.bytes());
    for (size_t i = 0; i < n; ++i)
      if (counts[i] > 0)
        dev.copy(all.data() + static_cast<int64_t>(i) * widest, in + offsets[i],
                 bytesOf<float>(counts[i]));
    if (!nativeReduceScatter(group, all.data(), widest, sum.data()))
      usageError("reduceScatterV: the backend's reduce-scatter does not "
                 "serve group " +
                 groupText(group));
    if (mine > 0)
      dev.copy(out, sum.data(), bytesOf<float>(mine));
    ++padded;
    return;
  }
  reduceScatterByMessages(group, in, counts, out);
}

void Comm::reduceScatterByMessages(const std::vector<int64_t> &group,
                                   const float *in,
                                   const std::vector<int64_t> &counts,
                                   float *out) {
  size_t own = checkGroup(group, "reduceScatterV");
  size_t n = group.size();
  std::vector<int64_t> offsets = offsetsOf(counts);
  int64_t mine = counts[own];
  int64_t tag = collectiveTag(group);
  device::Tensor received = device::Tensor::empty(
      device(), mine * static_cast<int64_t>(n - 1), device::DType::F32);
  std::vector<const void *> piece(n);
  std::vector<P2POp> ops;
  ops.reserve(2 * (n - 1));
  size_t slot = 0;
  for (size_t i = 0; i < n; ++i) {
    if (i == own) {
      piece[i] = in + offsets[own];
      continue;
    }
    float *into = received.data() + slot++ * static_cast<size_t>(mine);
    piece[i] = into;
    ops.push_back({true, group[i], tag, const_cast<float *>(in + offsets[i]),
                   bytesOf<float>(counts[i])});
    ops.push_back({false, group[i], tag, into, bytesOf<float>(mine)});
  }
  exchange(ops);
  reduceInOrder(device::DType::F32, out, piece, mine, false);
}

void Comm::broadcast(const std::vector<int64_t> &group, int64_t root,
                     void *data, int64_t bytes) {
  size_t own = checkGroup(group, "broadcast");
  size_t rootIndex = group.size();
  for (size_t i = 0; i < group.size(); ++i)
    if (group[i] == root)
      rootIndex = i;
  if (rootIndex == group.size())
    usageError("broadcast over group " + groupText(group) + ": root " +
               std::to_string(root) + " is not a member");
  if (bytes < 0)
    usageError("broadcast: negative size " + std::to_string(bytes));
  if (group.size() == 1)
    return;
  if (nativeBroadcast(group, rootIndex, data, bytes))
    return;
  int64_t tag = collectiveTag(group);
  std::vector<P2POp> ops;
  if (own == rootIndex) {
    ops.reserve(group.size() - 1);
    for (int64_t member : group)
      if (member != root)
        ops.push_back({true, member, tag, data, bytes});
  } else {
    ops.push_back({false, root, tag, data, bytes});
  }
  if (strictGroups) {
    // NCCL's broadcast is a collective every member enters: emulating it,
    // each pair of members also meets (empty messages), so a plan that
    // needs a member to leave before another arrives fails here too.
    int64_t self = rank();
    for (int64_t member : group)
      if (member != self) {
        ops.push_back({true, member, tag, nullptr, 0});
        ops.push_back({false, member, tag, nullptr, 0});
      }
  }
  exchange(ops);
}

} // namespace mimo::comm
