//===- Verify.cpp - Simulating every rank's stream ------------------------===//

#include "runtime/plan/Plan.h"

#include "runtime/plan/StreamMatching.h"
#include "runtime/schedule/Formulas.h"

#include <algorithm>
#include <cassert>
#include <deque>
#include <functional>
#include <map>
#include <tuple>
#include <unordered_map>

namespace mimo {

//===----------------------------------------------------------------------===//
// Verification
//===----------------------------------------------------------------------===//

namespace {

struct Posting {
  int64_t rank;
  int32_t instr;
};

class Verifier {
public:
  Verifier(const Topology &topology, const std::vector<Program> &programs,
           const std::vector<int32_t> &rankProgram, size_t limit,
           bool useSymmetry)
      : topology(topology), programs(programs), rankProgram(rankProgram),
        limit(limit), useSymmetry(useSymmetry), symmetry(topology) {}

  std::vector<PlanProblem> run() {
    if (!checkPrograms())
      return problems;
    // One representative per orbit of the replicas' turn stands for all
    // (Symmetry.h); without one, each rank is its own.
    if (useSymmetry)
      symmetry = findReplicaSymmetry(topology, rankProgram);
    reps = symmetry.representatives();
    if (!checkStructure())
      return problems;
    if (!matchMessages())
      return problems;
    simulate();
    if (problems.empty())
      simulateNccl();
    return problems;
  }

private:
  const Topology &topology;
  const std::vector<Program> &programs;
  const std::vector<int32_t> &rankProgram;
  size_t limit;
  bool useSymmetry;
  ReplicaSymmetry symmetry;
  std::vector<int64_t> reps; // the ranks run, ascending
  std::vector<PlanProblem> problems;

  bool full() const { return problems.size() >= limit; }

  const std::vector<Instr> &streamOf(int64_t rank) const {
    return programs[static_cast<size_t>(rankProgram[rank])].instrs;
  }
  PlanProblem::Place place(int64_t rank, int32_t instr) const {
    return {rank, rankProgram[rank], instr};
  }
  std::string where(int64_t rank, int32_t instr) const {
    return "rank " + std::to_string(rank) + " (instruction " +
           std::to_string(instr) + ": " +
           describeInstr(topology, streamOf(rank)[instr]) + ")";
  }
  void problem(std::string message, std::vector<PlanProblem::Place> places) {
    if (!full())
      problems.push_back({std::move(message), std::move(places)});
  }

  /// Every rank has a program.
  bool checkPrograms() {
    if (rankProgram.size() != static_cast<size_t>(topology.worldSize)) {
      problem("the plan maps " + std::to_string(rankProgram.size()) +
                  " ranks to programs, but the world has " +
                  std::to_string(topology.worldSize),
              {});
      return false;
    }
    for (int64_t rank = 0; rank < topology.worldSize && !full(); ++rank) {
      int32_t p = rankProgram[rank];
      if (p < 0 || static_cast<size_t>(p) >= programs.size())
        problem("rank " + std::to_string(rank) + " has no program", {});
    }
    return problems.empty();
  }

  /// Every instruction applies to its rank.
  bool checkStructure() {
    std::vector<bool> checked(programs.size(), false);
    for (size_t k = 0; k < reps.size() && !full(); ++k) {
      const int64_t rank = reps[k];
      int32_t p = rankProgram[rank];
      const std::vector<Instr> &stream = programs[p].instrs;
      for (size_t i = 0; i < stream.size() && !full(); ++i) {
        const Instr &in = stream[i];
        const InstrInfo &info = instrInfo(in.op);
        std::string error;
        if (!resolvePeers(topology, rank, in, &error)) {
          problem(where(rank, int32_t(i)) + " does not apply: " + error,
                  {place(rank, int32_t(i))});
          continue;
        }
        if (checked[p])
          continue;
        if (in.posted && !postable(in.op))
          problem(where(rank, int32_t(i)) +
                      " is posted, but only a bridge's sends and receives "
                      "can be",
                  {place(rank, int32_t(i))});
        else if (in.posted && in.fused)
          problem(where(rank, int32_t(i)) +
                      " is posted and fused: a posted message goes alone",
                  {place(rank, int32_t(i))});
        else if (in.fused && !(info.isSend || info.isRecv))
          problem("only sends and receives can be posted together; " +
                      where(rank, int32_t(i)) + " is not one",
                  {place(rank, int32_t(i))});
        else if (in.fused && i + 1 == stream.size())
          problem(where(rank, int32_t(i)) +
                      " is posted together with an instruction that does "
                      "not exist",
                  {place(rank, int32_t(i))});
        else if (in.fused && !(instrInfo(stream[i + 1].op).isSend ||
                               instrInfo(stream[i + 1].op).isRecv))
          problem(where(rank, int32_t(i)) +
                      " is posted together with the next instruction, " +
                      describeInstr(topology, stream[i + 1]) +
                      ", which is not a send or receive",
                  {place(rank, int32_t(i))});
      }
      checked[p] = true;
    }
    return problems.empty();
  }

  /// Each send meets exactly one receive with the same shape rule. The
  /// ranks are read in order; a message's send is only on its `from` rank
  /// and its receive only on its `to`, so it is settled when the later of
  /// the two is read: the earlier end waits in that rank's list. Memory
  /// follows the messages in flight across the sweep (the longest distance
  /// between a message's ranks), not the world: 2^20 ranks held every
  /// message at once, gigabytes, in one hash map.
  bool matchMessages() {
    // Each end's count and its first two postings (what a report names):
    // no allocation per message.
    struct Postings {
      Posting first[2];
      uint32_t count = 0;
      size_t size() const { return count; }
      bool empty() const { return count == 0; }
      const Posting &operator[](size_t i) const { return first[i]; }
      void push_back(const Posting &p) {
        if (count < 2)
          first[count] = p;
        ++count;
      }
    };
    struct Ends {
      Postings sends, recvs;
    };
    // Messages that are wrong, kept (by value) for a report in key order.
    std::vector<std::pair<MessageKey, Ends>> bad;
    // Whether a message with both ends read is right.
    auto right = [&](const MessageKey &key, const Ends &ends) {
      if (ends.sends.size() != 1 || ends.recvs.size() != 1)
        return false;
      // Both ends derive the shape from one topology, so they agree by
      // construction; what can go wrong is a route joining lanes that
      // share no samples: the message would carry nothing. (The key names
      // the ranks; the postings, under a symmetry, representatives.)
      const Posting &s = ends.sends[0], &r = ends.recvs[0];
      ShapeRule sent =
          shapeRule(topology, key.from, key.to, streamOf(s.rank)[s.instr]);
      return sent.sampleEnd > sent.sampleBegin &&
             streamOf(s.rank)[s.instr].posted ==
                 streamOf(r.rank)[r.instr].posted;
    };
    // One end of a message as a rank's stream names it.
    struct End {
      MessageKey key;
      bool send;
      Posting posting;
    };
    auto keyOrder = [](const MessageKey &a, const MessageKey &b) {
      return std::tie(a.from, a.to, a.mb, a.grad, a.channel) <
             std::tie(b.from, b.to, b.mb, b.grad, b.channel);
    };
    // Ends whose other end is on a later rank, waiting for that rank.
    std::unordered_map<int64_t, std::vector<End>> waiting;
    std::vector<End> here; // the ends settled at this rank
    auto settle = [&](std::vector<End> &ends) {
      std::stable_sort(
          ends.begin(), ends.end(),
          [&](const End &a, const End &b) { return keyOrder(a.key, b.key); });
      for (size_t i = 0; i < ends.size();) {
        Ends both;
        size_t j = i;
        for (; j < ends.size() && ends[j].key == ends[i].key; ++j)
          (ends[j].send ? both.sends : both.recvs).push_back(ends[j].posting);
        if (!right(ends[i].key, both))
          bad.push_back({ends[i].key, both});
        i = j;
      }
    };
    for (const int64_t rank : reps) {
      here.clear();
      if (auto it = waiting.find(rank); it != waiting.end()) {
        here = std::move(it->second);
        waiting.erase(it);
      }
      const std::vector<Instr> &stream = streamOf(rank);
      for (size_t i = 0; i < stream.size(); ++i) {
        const InstrInfo &info = instrInfo(stream[i].op);
        if (!info.isSend && !info.isRecv)
          continue;
        Peers peers = *resolvePeers(topology, rank, stream[i], nullptr);
        for (int64_t peer : peers.ranks) {
          End end{messageKey(topology, rank, peer, stream[i], &symmetry),
                  info.isSend,
                  {rank, int32_t(i)}};
          const int64_t other = symmetry.representativeOf(peer);
          (other > rank ? waiting[other] : here).push_back(end);
        }
      }
      settle(here);
    }
    // What still waits had one end only (its peer never named it).
    for (auto &entry : waiting)
      settle(entry.second);
    waiting.clear();
    std::sort(bad.begin(), bad.end(), [](const auto &a, const auto &b) {
      return std::tie(a.first.from, a.first.to, a.first.mb, a.first.grad,
                      a.first.channel) < std::tie(b.first.from, b.first.to,
                                                  b.first.mb, b.first.grad,
                                                  b.first.channel);
    });
    for (const auto &[key, ends] : bad) {
      if (full())
        break;
      std::string what = std::string(key.grad ? "gradient" : "activation") +
                         " of microbatch " + std::to_string(key.mb) +
                         " from rank " + std::to_string(key.from) +
                         " to rank " + std::to_string(key.to);
      if (ends.sends.empty()) {
        const Posting &r = ends.recvs[0];
        problem(where(r.rank, r.instr) + " receives the " + what +
                    ", but rank " + std::to_string(key.from) +
                    " never sends it",
                {place(r.rank, r.instr)});
      } else if (ends.recvs.empty()) {
        const Posting &s = ends.sends[0];
        problem(where(s.rank, s.instr) + " sends the " + what + ", but rank " +
                    std::to_string(key.to) + " never receives it",
                {place(s.rank, s.instr)});
      } else if (ends.sends.size() > 1 || ends.recvs.size() > 1) {
        const Postings &twice = ends.sends.size() > 1 ? ends.sends : ends.recvs;
        problem("the " + what + " is " +
                    (ends.sends.size() > 1 ? "sent" : "received") + " " +
                    std::to_string(twice.size()) +
                    " times: " + where(twice[0].rank, twice[0].instr) +
                    " and " + where(twice[1].rank, twice[1].instr),
                {place(twice[0].rank, twice[0].instr),
                 place(twice[1].rank, twice[1].instr)});
      } else if (streamOf(ends.sends[0].rank)[ends.sends[0].instr].posted !=
                 streamOf(ends.recvs[0].rank)[ends.recvs[0].instr].posted) {
        const Posting &s = ends.sends[0], &r = ends.recvs[0];
        bool sendPosted = streamOf(s.rank)[s.instr].posted;
        problem(where(s.rank, s.instr) + (sendPosted ? " posts" : " sends") +
                    " the " + what + " and " + where(r.rank, r.instr) +
                    " receives it as a " +
                    (sendPosted ? "blocking" : "posted") +
                    " message: both ends of a message say whether it is "
                    "posted",
                {place(s.rank, s.instr), place(r.rank, r.instr)});
      } else {
        const Posting &s = ends.sends[0], &r = ends.recvs[0];
        problem(
            where(s.rank, s.instr) + " sends " +
                shapeRule(topology, key.from, key.to, streamOf(s.rank)[s.instr])
                    .str() +
                " to " + where(r.rank, r.instr) +
                ": their lanes share no samples",
            {place(s.rank, s.instr), place(r.rank, r.instr)});
      }
    }
    return problems.empty();
  }

  CollectiveGroup collectiveGroup(int64_t rank, const Instr &in) const {
    return mimo::collectiveGroup(topology, rank, in);
  }

  /// Runs every stream with blocking point-to-point operations (a fused
  /// run is posted at once and completes when all of it has matched),
  /// posted sends that complete for their rank at once (their receive
  /// still waits for them) and collectives that complete when the whole
  /// group has arrived.
  void simulate() {
    struct State {
      int32_t pc = 0, end = 0, pending = 0;
      bool posted = false;
    };
    std::vector<State> state(static_cast<size_t>(topology.worldSize));
    std::vector<std::pair<int32_t, Peers>> ops; // one batch's, reused
    Rendezvous<Posting> posted;
    posted.symmetry = &symmetry;
    std::vector<int64_t> ready(reps.rbegin(), reps.rend());
    auto release = [&](int64_t rank) {
      if (--state[rank].pending == 0)
        ready.push_back(rank);
    };
    size_t finished = 0;
    while (!ready.empty()) {
      int64_t rank = ready.back();
      ready.pop_back();
      State &s = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      while (s.pending == 0) {
        if (s.posted) {
          s.pc = s.end;
          s.posted = false;
        }
        if (static_cast<size_t>(s.pc) >= stream.size()) {
          ++finished;
          break;
        }
        s.end = s.pc;
        while (stream[s.end].fused)
          ++s.end;
        ++s.end;
        s.posted = true;
        // Count everything first so that matches found while posting
        // cannot release this rank early.
        ops.clear();
        for (int32_t i = s.pc; i < s.end; ++i) {
          Peers peers = *resolvePeers(topology, rank, stream[i], nullptr);
          if (!postedSend(stream[i]))
            s.pending += peers.collective ? 1 : int32_t(peers.ranks.size());
          ops.emplace_back(i, std::move(peers));
        }
        ++s.pending;
        for (auto &[i, peers] : ops) {
          const Instr &in = stream[i];
          if (peers.collective) {
            if (auto members = posted.arrive(topology, rank, in, {rank, i})) {
              for (const Posting &p : *members)
                if (p.rank != rank)
                  release(p.rank);
                else
                  --s.pending;
            }
            continue;
          }
          for (int64_t peer : peers.ranks) {
            std::optional<Posting> met =
                posted.message(topology, rank, peer, in, {rank, i});
            if (!met)
              continue;
            // A posted send's rank does not wait for it.
            int64_t other = met->rank;
            if (!postedSend(in))
              --s.pending;
            if (postedSend(streamOf(other)[met->instr]))
              continue;
            if (other != rank)
              release(other);
            else
              --s.pending;
          }
        }
        --s.pending;
      }
    }
    if (finished == reps.size())
      return;
    reportDeadlock(state, posted);
  }

  /// The plan again under NCCL's rules (docs/plan.md "Verification"):
  /// the blocking messages, each rendezvous (a send completes when its
  /// receive is posted too) on the world communicator in program order,
  /// and the collectives as simulate() runs them; the posted messages
  /// (bridge sends and receives marked posted) on channels of their own,
  /// one per sender and receiver (postedChannel: a communicator and a
  /// stream), whose operations run in the order they were issued: each
  /// channel's posted operations on a rank form a queue, and a posted
  /// message completes only when its send and its receive head their
  /// ranks' queues. A posted send does not stop its rank; a posted
  /// receive does until it completes; a rank's pass ends when its queues
  /// are empty.
  void simulateNccl() {
    struct Queued {
      int32_t instr;
      int64_t peer; // its representative
      MessageKey key;
      bool send;
    };
    // A channel's queue on one of its ranks: the channel (as the
    // message's key names its ends) and whether the rank sends on it.
    // Under a symmetry a representative holds, for a channel to a rank of
    // its own orbit, both the sender's queue and the receiver's.
    using Lane = std::pair<int64_t, bool>;
    struct State {
      int32_t pc = 0, end = 0, pending = 0;
      bool posted = false, draining = false;
      /// Posted operations not yet completed, by lane.
      std::map<Lane, std::deque<Queued>> queues;
      bool idle() const {
        for (const auto &entry : queues)
          if (!entry.second.empty())
            return false;
        return true;
      }
    };
    std::vector<State> state(static_cast<size_t>(topology.worldSize));
    std::vector<std::pair<int32_t, Peers>> ops;
    Rendezvous<Posting> posted;
    posted.symmetry = &symmetry;
    std::vector<std::pair<int64_t, Lane>> heads; // (rank, queue)
    std::vector<int64_t> ready(reps.rbegin(), reps.rend());
    auto release = [&](int64_t rank) {
      if (--state[rank].pending == 0)
        ready.push_back(rank);
    };
    // Completes posted messages whose two ends head their queues, from the
    // queues of `heads` on.
    auto matchHeads = [&] {
      while (!heads.empty()) {
        const auto [rank, lane] = heads.back();
        heads.pop_back();
        State &a = state[rank];
        std::deque<Queued> &mine = a.queues[lane];
        if (mine.empty()) {
          if (a.draining && a.idle()) {
            a.draining = false;
            release(rank);
          }
          continue;
        }
        const Queued x = mine.front();
        const Lane other{lane.first, !lane.second};
        std::deque<Queued> &theirs = state[x.peer].queues[other];
        if (theirs.empty() || !(theirs.front().key == x.key) ||
            theirs.front().send == x.send)
          continue;
        const Queued y = theirs.front();
        mine.pop_front();
        theirs.pop_front();
        if (!x.send)
          release(rank);
        if (!y.send)
          release(x.peer);
        heads.push_back({rank, lane});
        heads.push_back({x.peer, other});
      }
    };
    size_t finished = 0;
    while (!ready.empty()) {
      int64_t rank = ready.back();
      ready.pop_back();
      State &s = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      while (s.pending == 0) {
        if (s.posted) {
          s.pc = s.end;
          s.posted = false;
        }
        if (static_cast<size_t>(s.pc) >= stream.size()) {
          if (!s.idle() && !s.draining && s.pc >= 0) {
            // The pass's end waits for its posted operations.
            s.draining = true;
            ++s.pending;
            continue;
          }
          if (s.pc >= 0) {
            ++finished;
            s.pc = -1; // counted
          }
          break;
        }
        s.end = s.pc;
        while (stream[s.end].fused)
          ++s.end;
        ++s.end;
        s.posted = true;
        ops.clear();
        for (int32_t i = s.pc; i < s.end; ++i) {
          Peers peers = *resolvePeers(topology, rank, stream[i], nullptr);
          if (stream[i].posted) {
            // Into the posted queue; a receive holds its rank until done.
            // A message to the rank itself is a copy on the rank, outside
            // the communicator (its send comes first in the stream).
            const bool send = instrInfo(stream[i].op).isSend;
            for (int64_t peer : peers.ranks) {
              if (peer == rank)
                continue;
              const MessageKey key =
                  messageKey(topology, rank, peer, stream[i], &symmetry);
              const Lane lane{postedChannel(key.from, key.to), send};
              s.queues[lane].push_back(
                  {i, symmetry.representativeOf(peer), key, send});
              if (!send)
                ++s.pending;
              heads.push_back({rank, lane});
            }
            continue;
          }
          s.pending += peers.collective ? 1 : int32_t(peers.ranks.size());
          ops.emplace_back(i, std::move(peers));
        }
        ++s.pending;
        for (auto &[i, peers] : ops) {
          const Instr &in = stream[i];
          if (peers.collective) {
            if (auto members = posted.arrive(topology, rank, in, {rank, i})) {
              for (const Posting &p : *members) {
                if (p.rank != rank)
                  release(p.rank);
                else
                  --s.pending;
              }
            }
            continue;
          }
          for (int64_t peer : peers.ranks) {
            std::optional<Posting> met =
                posted.message(topology, rank, peer, in, {rank, i});
            if (!met)
              continue;
            --s.pending;
            if (met->rank != rank)
              release(met->rank);
            else
              --s.pending;
          }
        }
        // Matched while this batch still holds the rank: its own releases
        // cannot hand it to `ready` while it runs.
        matchHeads();
        --s.pending;
      }
    }
    if (finished == reps.size())
      return;
    // A cycle of waits: a rank held by a blocking operation waits for its
    // peer (or a missing member); one held by its posted queue waits for
    // the peer of the queue's first operation.
    auto waitsFor = [&](int64_t rank) -> std::pair<int64_t, std::string> {
      const State &st = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      // A queue holding a receive (or the pass's end) holds the rank.
      for (const auto &[lane, queue] : st.queues) {
        if (queue.empty())
          continue;
        bool holds = st.draining;
        for (const Queued &q : queue)
          holds |= !q.send;
        if (holds)
          return {queue.front().peer,
                  "its posted queue's first operation, instruction " +
                      std::to_string(queue.front().instr) + " (" +
                      describeInstr(topology, stream[queue.front().instr]) +
                      ")"};
      }
      for (int32_t i = st.pc; i >= 0 && i < st.end; ++i) {
        const Instr &in = stream[i];
        if (in.posted)
          continue;
        Peers peers = *resolvePeers(topology, rank, in, nullptr);
        const std::string what = "instruction " + std::to_string(i) + " (" +
                                 describeInstr(topology, in) + ")";
        if (peers.collective) {
          // The smallest member that has not arrived.
          const std::vector<Posting> *members =
              posted.arrived(topology, rank, in);
          if (!members)
            continue;
          std::vector<int64_t> arrived;
          for (const Posting &p : *members)
            arrived.push_back(p.rank);
          std::sort(arrived.begin(), arrived.end());
          for (int64_t member = collectiveGroup(rank, in).first;
               member < topology.worldSize; ++member)
            if (symmetry.isRepresentative(member) &&
                !std::binary_search(arrived.begin(), arrived.end(), member) &&
                sameGroup(rank, member, in))
              return {member, what};
          continue;
        }
        for (int64_t peer : peers.ranks)
          if (posted.waiting(topology, rank, peer, in))
            return {symmetry.representativeOf(peer), what};
      }
      return {-1, "the end of its pass"};
    };
    int64_t start = -1;
    for (size_t k = 0; k < reps.size() && start < 0; ++k)
      if (state[reps[k]].pc >= 0)
        start = reps[k];
    std::map<int64_t, size_t> seen;
    std::vector<std::pair<int64_t, std::string>> path;
    int64_t rank = start;
    while (rank >= 0 && !seen.count(rank)) {
      seen[rank] = path.size();
      auto [next, what] = waitsFor(rank);
      path.push_back({rank, what});
      rank = next;
    }
    std::string message = "the plan deadlocks under NCCL's rules (a send "
                          "waits for its receive; a communicator's "
                          "operations run in the order each rank issued "
                          "them, posted ones included): ";
    std::vector<PlanProblem::Place> places;
    const size_t from = rank >= 0 && seen.count(rank) ? seen[rank] : 0;
    for (size_t i = from; i < path.size(); ++i) {
      const int64_t next =
          i + 1 < path.size() ? path[i + 1].first : (rank >= 0 ? rank : -1);
      message += (i == from ? "" : ", ") + std::string("rank ") +
                 std::to_string(path[i].first) + " waits at " + path[i].second +
                 (next >= 0 ? " for rank " + std::to_string(next) : "");
      places.push_back(
          place(path[i].first, std::max<int32_t>(0, state[path[i].first].pc)));
    }
    problem(message, places);
  }

  template <typename StateVec>
  void reportDeadlock(const StateVec &state,
                      const Rendezvous<Posting> &posted) {
    // What each blocked rank waits for: the first operation of its posted
    // run that has not completed.
    auto waitsFor = [&](int64_t rank) -> std::pair<int64_t, int32_t> {
      const auto &s = state[rank];
      const std::vector<Instr> &stream = streamOf(rank);
      for (int32_t i = s.pc; i < s.end; ++i) {
        const Instr &in = stream[i];
        if (postedSend(in))
          continue;
        Peers peers = *resolvePeers(topology, rank, in, nullptr);
        if (peers.collective) {
          const std::vector<Posting> *members =
              posted.arrived(topology, rank, in);
          if (!members)
            continue;
          int64_t group = collectiveGroup(rank, in).first;
          // The smallest member that has not arrived.
          std::vector<int64_t> arrived;
          for (const Posting &p : *members)
            arrived.push_back(p.rank);
          std::sort(arrived.begin(), arrived.end());
          for (int64_t member = group; member < topology.worldSize; ++member)
            if (symmetry.isRepresentative(member) &&
                !std::binary_search(arrived.begin(), arrived.end(), member) &&
                sameGroup(rank, member, in))
              return {member, i};
          continue;
        }
        for (int64_t peer : peers.ranks)
          if (posted.waiting(topology, rank, peer, in))
            return {symmetry.representativeOf(peer), i};
      }
      return {-1, s.pc};
    };
    int64_t start = -1;
    for (const int64_t rank : reps)
      if (static_cast<size_t>(state[rank].pc) < streamOf(rank).size()) {
        start = rank;
        break;
      }
    // Follow the waits-for edges until a rank repeats: that is the cycle.
    std::vector<int64_t> path;
    std::map<int64_t, size_t> seen;
    int64_t rank = start;
    std::vector<int32_t> instrs;
    while (rank >= 0 && !seen.count(rank)) {
      seen[rank] = path.size();
      path.push_back(rank);
      if (static_cast<size_t>(state[rank].pc) >= streamOf(rank).size()) {
        instrs.push_back(-1);
        break;
      }
      auto [next, instr] = waitsFor(rank);
      instrs.push_back(instr);
      rank = next;
    }
    std::vector<PlanProblem::Place> places;
    size_t from = rank >= 0 && seen.count(rank) ? seen[rank] : 0;
    bool finishedPeer = instrs.back() < 0;
    size_t last = finishedPeer ? path.size() - 1 : path.size();
    std::string message = "the plan deadlocks: ";
    for (size_t i = finishedPeer ? 0 : from; i < last; ++i) {
      int64_t next = i + 1 < path.size() ? path[i + 1] : rank;
      message += (places.empty() ? "" : ", ") + std::string("rank ") +
                 std::to_string(path[i]) + " waits at instruction " +
                 std::to_string(instrs[i]) + " (" +
                 describeInstr(topology, streamOf(path[i])[instrs[i]]) +
                 ") for rank " + std::to_string(next);
      places.push_back(place(path[i], instrs[i]));
    }
    if (finishedPeer) {
      message += ", which has already finished its program";
    } else {
      // Each representative blocked stands for its orbit.
      size_t stuck = 0;
      for (const int64_t r : reps)
        stuck += static_cast<size_t>(state[r].pc) < streamOf(r).size();
      stuck *= static_cast<size_t>(symmetry.order());
      message += " (" + std::to_string(stuck) + " of " +
                 std::to_string(topology.worldSize) + " ranks are blocked)";
    }
    problem(message, places);
  }

  /// Whether `member` takes part in the collective `rank` is blocked in.
  bool sameGroup(int64_t rank, int64_t member, const Instr &in) const {
    return resolvePeers(topology, member, in, nullptr) &&
           collectiveGroup(member, in) == collectiveGroup(rank, in);
  }
};

} // namespace

std::vector<PlanProblem> verifyPrograms(const Topology &topology,
                                        const std::vector<Program> &programs,
                                        const std::vector<int32_t> &rankProgram,
                                        size_t limit, bool symmetry) {
  return Verifier(topology, programs, rankProgram, limit, symmetry).run();
}

std::vector<PlanProblem> checkDataflow(const Topology &topology,
                                       const ProgramSet &compiled,
                                       const std::vector<Program> &programs,
                                       const std::vector<int32_t> &rankProgram,
                                       size_t limit) {
  std::vector<PlanProblem> problems;
  auto key = [](const Instr &in) {
    return std::make_tuple(static_cast<int>(in.op), in.index, in.mb, in.chunk);
  };
  using Key = decltype(key(Instr{}));
  // Each program is checked once, as seen by its first rank.
  std::vector<bool> checked(programs.size(), false);
  for (size_t rank = 0; rank < rankProgram.size() && problems.size() < limit;
       ++rank) {
    int32_t p = rankProgram[rank];
    if (p < 0 || static_cast<size_t>(p) >= programs.size() || checked[p] ||
        rank >= compiled.rankProgram.size())
      continue;
    checked[p] = true;
    const std::vector<Instr> &stream = programs[p].instrs;
    const std::vector<Instr> &want =
        compiled.programs[compiled.rankProgram[rank]].instrs;
    auto problem = [&](int32_t instr, std::string message) {
      if (problems.size() < limit)
        problems.push_back({"rank " + std::to_string(rank) + " (role '" +
                                programs[p].role + "') " + message,
                            {{int64_t(rank), p, instr}}});
    };
    // Position of every instruction in the compiled program.
    std::map<Key, int32_t> position;
    for (size_t i = 0; i < want.size(); ++i)
      position.emplace(key(want[i]), int32_t(i));
    std::map<Key, int32_t> seen;
    bool complete = true;
    for (size_t i = 0; i < stream.size(); ++i) {
      auto at = position.find(key(stream[i]));
      if (at == position.end()) {
        problem(int32_t(i), "runs " + describeInstr(topology, stream[i]) +
                                ", which its compiled schedule does not have");
        complete = false;
      } else if (!seen.emplace(at->first, int32_t(i)).second) {
        problem(int32_t(i), "runs " + describeInstr(topology, stream[i]) +
                                " twice (instructions " +
                                std::to_string(seen[at->first]) + " and " +
                                std::to_string(i) + ")");
        complete = false;
      }
    }
    for (const Instr &in : want)
      if (!seen.count(key(in))) {
        problem(int32_t(stream.size()),
                "never runs " + describeInstr(topology, in) +
                    ", which its compiled schedule needs");
        complete = false;
      }
    if (!complete)
      continue;
    // Order: within a microbatch as compiled; an instruction without a
    // microbatch (reduce_grads, optimizer_step) after everything compiled
    // before it and before everything compiled after it.
    std::map<int32_t, std::pair<int32_t, int32_t>> lastOfMicrobatch;
    int32_t prefixMax = -1, barrier = -1;
    for (size_t i = 0; i < stream.size(); ++i) {
      const Instr &in = stream[i];
      int32_t pos = position[key(in)];
      bool ordered = true;
      std::string after;
      if (!instrInfo(in.op).hasMicrobatch) {
        ordered = prefixMax < pos && int32_t(i) == pos;
        barrier = pos;
      } else {
        auto last = lastOfMicrobatch.find(in.mb);
        if (last != lastOfMicrobatch.end() && last->second.first > pos) {
          ordered = false;
          after = describeInstr(topology, stream[last->second.second]);
        }
        lastOfMicrobatch[in.mb] = {pos, int32_t(i)};
        // Nothing compiled before a reduction or step may run after it.
        ordered = ordered && barrier < pos;
      }
      if (!ordered) {
        problem(int32_t(i),
                "runs " + describeInstr(topology, in) + " at instruction " +
                    std::to_string(i) +
                    (after.empty() ? "" : ", after " + after) +
                    ", out of the order its data needs (compiled position " +
                    std::to_string(pos) + ")");
        break;
      }
      prefixMax = std::max(prefixMax, pos);
    }
  }
  return problems;
}

} // namespace mimo
