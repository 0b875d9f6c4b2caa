//===- Simulate.cpp - A predicted step of every rank's stream -------------===//

#include "runtime/cost/Simulate.h"

#include "runtime/plan/StreamMatching.h"

#include <algorithm>
#include <unordered_map>

namespace mimo {

double Simulation::idleShare() const {
  if (stepSeconds <= 0 || busySeconds.empty())
    return 0;
  double busy = 0;
  for (double b : busySeconds)
    busy += b;
  return 1.0 - busy / (stepSeconds * static_cast<double>(busySeconds.size()));
}

int64_t Simulation::rankOf(size_t entry) const {
  return static_cast<int64_t>(
             std::upper_bound(firstEntry.begin(), firstEntry.end(), entry) -
             firstEntry.begin()) -
         1;
}

int32_t Simulation::instrOf(size_t entry) const {
  return static_cast<int32_t>(entry -
                              firstEntry[static_cast<size_t>(rankOf(entry))]);
}

double Simulation::postOf(size_t entry,
                          const std::vector<Instr> &stream) const {
  size_t base = firstEntry[static_cast<size_t>(rankOf(entry))];
  // A run is a fused batch: the instructions up to one not fused.
  auto runStart = [&](size_t i) {
    while (i > 0 && stream[i - 1].fused)
      --i;
    return i;
  };
  size_t start = runStart(entry - base);
  if (start == 0)
    return 0;
  double post = 0;
  for (size_t i = runStart(start - 1); i < start; ++i)
    post = std::max(post, instrs[base + i].end);
  return post;
}

namespace {

/// Where the turn of `symmetry` takes each device of the cluster: a
/// device's ranks all turn onto one device, no two devices onto the same,
/// and nodes likewise (then every link, device share and thread count is
/// the same after the turn). Empty when the cluster does not turn so.
std::vector<int64_t> deviceTurn(const CostModel &costs,
                                const ReplicaSymmetry &symmetry,
                                int64_t world) {
  const auto devices =
      static_cast<size_t>(costs.clusterConfig().devices(world));
  std::vector<int64_t> next(devices, -1), back(devices, -1);
  std::vector<int64_t> nextNode(devices, -1), backNode(devices, -1);
  auto maps = [](std::vector<int64_t> &to, std::vector<int64_t> &from,
                 int64_t a, int64_t b) {
    auto &x = to[static_cast<size_t>(a)];
    if (x >= 0)
      return x == b;
    if (from[static_cast<size_t>(b)] >= 0)
      return false;
    x = b;
    from[static_cast<size_t>(b)] = a;
    return true;
  };
  for (int64_t r = 0; r < world; ++r) {
    const int64_t t = symmetry.turn(r, 1);
    if (!maps(next, back, costs.deviceOf(r), costs.deviceOf(t)) ||
        !maps(nextNode, backNode, costs.nodeOf(r), costs.nodeOf(t)))
      return {};
  }
  return next;
}

/// A min-heap of four children a node (the least by `operator>` on top):
/// half the levels of a binary heap, and a node's children share cache
/// lines, which matters when it holds an event per rank.
template <typename T> class MinHeap4 {
public:
  bool empty() const { return items.empty(); }
  size_t size() const { return items.size(); }
  const T &top() const { return items.front(); }
  void push(const T &item) {
    size_t i = items.size();
    items.push_back(item);
    while (i > 0) {
      size_t parent = (i - 1) / 4;
      if (!(items[parent] > item))
        break;
      items[i] = items[parent];
      i = parent;
    }
    items[i] = item;
  }
  void pop() {
    T last = items.back();
    items.pop_back();
    if (items.empty())
      return;
    size_t i = 0, n = items.size();
    for (;;) {
      size_t first = 4 * i + 1;
      if (first >= n)
        break;
      size_t least = first;
      for (size_t c = first + 1; c < std::min(first + 4, n); ++c)
        if (items[least] > items[c])
          least = c;
      if (!(last > items[least]))
        break;
      items[i] = items[least];
      i = least;
    }
    items[i] = last;
  }

private:
  std::vector<T> items;
};

class TimedSimulator {
public:
  TimedSimulator(const Topology &topology, const std::vector<Program> &programs,
                 const std::vector<int32_t> &rankProgram,
                 const CostModel &costs, bool useSymmetry)
      : topology(topology), programs(programs), rankProgram(rankProgram),
        costs(costs), result(topology) {
    // The order found is the last candidate tried: its devices' turn is
    // the one kept.
    if (useSymmetry)
      result.symmetry = findReplicaSymmetry(
          topology, rankProgram, [&](const ReplicaSymmetry &candidate) {
            turnOfDevices = deviceTurn(costs, candidate, topology.worldSize);
            return !turnOfDevices.empty();
          });
  }

  Simulation run() {
    size_t world = static_cast<size_t>(topology.worldSize);
    const ReplicaSymmetry &symmetry = result.symmetry;
    reps = symmetry.representatives();
    std::vector<bool> represents(world, symmetry.trivial());
    for (int64_t r : reps)
      represents[static_cast<size_t>(r)] = true;
    shareDevices();
    ranks.assign(world, {});
    // Every representative's instruction runs once: one entry each, laid
    // out rank by rank.
    result.firstEntry.resize(world + 1);
    result.firstEntry[0] = 0;
    for (size_t r = 0; r < world; ++r)
      result.firstEntry[r + 1] =
          result.firstEntry[r] +
          (represents[r] ? streamOf(static_cast<int64_t>(r)).size() : 0);
    result.instrs.assign(result.firstEntry[world], SimulatedInstr{});
    // About a message end or two waits per rank at a time: grown once.
    posted.symmetry = &symmetry;
    posted.sends.reserve(reps.size());
    posted.recvs.reserve(reps.size());
    result.busySeconds.assign(world, 0);
    result.finishSeconds.assign(world, 0);
    for (int64_t r : reps)
      push(0, Event::Post, r, 0);
    while (!events.empty()) {
      Event e = events.top();
      events.pop();
      now = e.time;
      switch (e.kind()) {
      case Event::Post:
        post(e.rank);
        break;
      case Event::Done:
        done(e.rank, static_cast<size_t>(e.payload));
        break;
      case Event::Compute:
        computeDone(e.rank, e.payload);
        break;
      }
    }
    size_t finished = 0;
    for (int64_t r : reps)
      finished += ranks[static_cast<size_t>(r)].finished;
    if (finished != reps.size()) {
      result.problem = std::to_string((reps.size() - finished) *
                                      static_cast<size_t>(symmetry.order())) +
                       " of " + std::to_string(world) +
                       " ranks never finish their streams: the plan deadlocks "
                       "(mimoc compile's verifier reports where)";
      return std::move(result);
    }
    // Each rank as its representative ran.
    for (size_t r = 0; r < world; ++r)
      if (!represents[r]) {
        const auto of = static_cast<size_t>(
            symmetry.representativeOf(static_cast<int64_t>(r)));
        result.busySeconds[r] = result.busySeconds[of];
        result.finishSeconds[r] = result.finishSeconds[of];
      }
    for (double f : result.finishSeconds)
      result.stepSeconds = std::max(result.stepSeconds, f);
    criticalPath();
    return std::move(result);
  }

private:
  /// 32 bytes: the queue holds an event or more per rank.
  struct Event {
    enum Kind : uint8_t { Post, Done, Compute };
    double time;
    uint64_t order;   // sequence << 2 | kind: equal times in push order
    int64_t rank;     // Compute: the device
    uint64_t payload; // Done: the instruction entry; Compute: the version
    Kind kind() const { return static_cast<Kind>(order & 3); }
    bool operator>(const Event &o) const {
      return time != o.time ? time > o.time : order > o.order;
    }
  };
  struct RankState {
    int32_t pc = 0;
    int64_t outstanding = 0;
    double runPost = 0;
    int64_t last = -1;               // the entry that ended the previous run
    size_t runBegin = 0, runEnd = 0; // the entries of the running run
    bool finished = false;
  };
  /// A device's cores are shared among its running tasks: each advances at
  /// demand x share, share = min(1, cores / total demand). In the device's
  /// virtual time V (dV/dt = share) a task of `work` core-seconds and
  /// `demand` cores ends at V0 + work / demand whatever else runs, so the
  /// tasks wait in a heap by that end and an event costs O(log tasks), not
  /// a pass over every task (a CPU profile puts all ranks on one device:
  /// 2^20 ranks would be 2^40 steps).
  struct Task {
    double endV; // virtual time at which its work is done
    double demand, comm;
    /// The ranks it stands for on the device (Simulation::symmetry).
    double copies;
    int64_t rank;
    size_t entry;
    bool operator>(const Task &o) const {
      return endV != o.endV ? endV > o.endV : entry > o.entry;
    }
  };
  struct DeviceState {
    MinHeap4<Task> tasks;
    double virtualTime = 0, updated = 0, demand = 0, share = 1;
    uint64_t version = 0;
  };
  struct Waiting {
    int64_t rank;
    size_t entry;
  };

  const Topology &topology;
  const std::vector<Program> &programs;
  const std::vector<int32_t> &rankProgram;
  const CostModel &costs;
  Simulation result;
  std::vector<int64_t> reps;
  /// Under a symmetry: the device that stands for each device's orbit
  /// (empty: each itself), and the copies of a representative's task on
  /// it (order / the orbit's devices).
  std::vector<int64_t> deviceKey;
  std::vector<double> deviceCopies;
  /// Where the symmetry's turn takes each device (deviceTurn).
  std::vector<int64_t> turnOfDevices;
  std::vector<RankState> ranks;
  std::unordered_map<int64_t, DeviceState> devices;
  Rendezvous<Waiting> posted;
  MinHeap4<Event> events;
  uint64_t sequence = 0;
  double now = 0;

  /// The devices' orbits under the symmetry's turn: a representative's
  /// orbit puts order / (the device orbit's length) ranks on each device
  /// of its device's orbit, all running as it does.
  void shareDevices() {
    if (result.symmetry.trivial())
      return;
    const std::vector<int64_t> &next = turnOfDevices;
    deviceKey.assign(next.size(), -1);
    deviceCopies.assign(next.size(), 1);
    for (size_t d = 0; d < next.size(); ++d) {
      if (next[d] < 0 || deviceKey[d] >= 0)
        continue;
      int64_t least = static_cast<int64_t>(d), length = 0;
      for (auto c = static_cast<int64_t>(d);;) {
        least = std::min(least, c);
        ++length;
        c = next[static_cast<size_t>(c)];
        if (c == static_cast<int64_t>(d))
          break;
      }
      const double copies = static_cast<double>(result.symmetry.order()) /
                            static_cast<double>(length);
      for (auto c = static_cast<int64_t>(d);;) {
        deviceKey[static_cast<size_t>(c)] = least;
        deviceCopies[static_cast<size_t>(c)] = copies;
        c = next[static_cast<size_t>(c)];
        if (c == static_cast<int64_t>(d))
          break;
      }
    }
  }

  void push(double time, Event::Kind kind, int64_t rank, uint64_t payload) {
    events.push({time, sequence++ << 2 | kind, rank, payload});
  }

  const std::vector<Instr> &streamOf(int64_t rank) const {
    return programs[static_cast<size_t>(rankProgram[rank])].instrs;
  }

  /// Marks `entry` ready at `now`, made ready by `cause`.
  void ready(size_t entry, int64_t cause) {
    SimulatedInstr &s = result.instrs[entry];
    if (now > s.ready || s.cause < 0) {
      s.ready = now;
      s.cause = cause;
    }
  }

  void post(int64_t rank) {
    RankState &st = ranks[static_cast<size_t>(rank)];
    const std::vector<Instr> &stream = streamOf(rank);
    if (static_cast<size_t>(st.pc) >= stream.size()) {
      st.finished = true;
      result.finishSeconds[static_cast<size_t>(rank)] = now;
      return;
    }
    int32_t end = st.pc;
    while (stream[end].fused && static_cast<size_t>(end + 1) < stream.size())
      ++end;
    ++end;
    const size_t base = result.firstEntry[static_cast<size_t>(rank)];
    st.runBegin = base + static_cast<size_t>(st.pc);
    st.runEnd = base + static_cast<size_t>(end);
    st.runPost = now;
    // Count first: matches found while posting must not end the run early.
    std::vector<Peers> runPeers;
    for (int32_t i = st.pc; i < end; ++i) {
      runPeers.push_back(*resolvePeers(topology, rank, stream[i], nullptr));
      const Peers &peers = runPeers.back();
      st.outstanding +=
          peers.ranks.empty() || peers.collective || postedSend(stream[i])
              ? 1
              : static_cast<int64_t>(peers.ranks.size());
    }
    for (int32_t i = st.pc; i < end; ++i) {
      const Instr &in = stream[i];
      size_t entry = base + static_cast<size_t>(i);
      result.instrs[entry] = {now, now, -1};
      const InstrInfo &info = instrInfo(in.op);
      const Peers &peers = runPeers[static_cast<size_t>(i - st.pc)];
      if (peers.collective) {
        if (auto members = posted.arrive(topology, rank, in, {rank, entry}))
          for (const Waiting &w : *members) {
            ready(w.entry, st.last);
            start(w.rank, w.entry);
          }
        continue;
      }
      if (!info.isSend && !info.isRecv) {
        ready(entry, st.last);
        start(rank, entry);
        continue;
      }
      // A posted send completes for its rank at once; its message moves
      // when the receive is there (the receive waits for it).
      const bool postedHere = postedSend(in);
      for (int64_t peer : peers.ranks) {
        std::optional<Waiting> met =
            posted.message(topology, rank, peer, in, {rank, entry});
        if (!met)
          continue;
        Waiting other = *met;
        double end = now + costs.messageSeconds(rank, peer, in);
        // Each end is done when the message is; a posted send was done
        // for its rank when posted.
        auto arrive = [&](int64_t who, size_t e) {
          ready(e, st.last);
          push(end, Event::Done, who, e);
        };
        const size_t otherInstr =
            other.entry - result.firstEntry[static_cast<size_t>(other.rank)];
        if (!postedHere)
          arrive(rank, entry);
        if (!postedSend(streamOf(other.rank)[otherInstr]))
          arrive(other.rank, other.entry);
      }
      if (postedHere) {
        ready(entry, st.last);
        push(now, Event::Done, rank, entry);
      }
    }
    st.pc = end;
  }

  /// Starts the work of a ready instruction.
  void start(int64_t rank, size_t entry) {
    size_t instr = entry - result.firstEntry[static_cast<size_t>(rank)];
    Work w = costs.work(rank, streamOf(rank)[instr]);
    if (w.compute <= 0) {
      push(now + w.comm, Event::Done, rank, entry);
      return;
    }
    int64_t device = costs.deviceOf(rank);
    double copies = 1;
    if (!deviceKey.empty()) {
      copies = deviceCopies[static_cast<size_t>(device)];
      device = deviceKey[static_cast<size_t>(device)];
    }
    DeviceState &d = devices[device];
    advance(d);
    const double demand = costs.threadsOf(rank);
    d.tasks.push({d.virtualTime + w.compute / demand, demand, w.comm, copies,
                  rank, entry});
    d.demand += demand * copies;
    reschedule(device, d);
  }

  /// Brings the device's virtual time up to `now`.
  void advance(DeviceState &d) {
    double elapsed = now - d.updated;
    if (elapsed > 0)
      d.virtualTime += d.share * elapsed;
    d.updated = now;
  }

  /// Shares the device's cores among its tasks and schedules the next end.
  void reschedule(int64_t device, DeviceState &d) {
    ++d.version;
    if (d.tasks.empty()) {
      d.demand = 0; // no drift from adding and removing
      return;
    }
    d.share = std::min(1.0, static_cast<double>(costs.deviceProfile().cores) /
                                d.demand);
    double next = std::max(0.0, d.tasks.top().endV - d.virtualTime) / d.share;
    push(now + next, Event::Compute, device, d.version);
  }

  void computeDone(int64_t device, uint64_t version) {
    DeviceState &d = devices[device];
    if (version != d.version)
      return; // superseded by a later change of the device's tasks
    advance(d);
    // Done: the work left (endV - V) x demand core-seconds is rounding.
    while (!d.tasks.empty()) {
      const Task &t = d.tasks.top();
      if ((t.endV - d.virtualTime) * t.demand >
          1e-12 + 1e-9 * t.demand * d.share)
        break;
      push(now + t.comm, Event::Done, t.rank, t.entry);
      d.demand -= t.demand * t.copies;
      d.tasks.pop();
    }
    reschedule(device, d);
  }

  void done(int64_t rank, size_t entry) {
    SimulatedInstr &s = result.instrs[entry];
    s.end = std::max(s.end, now);
    RankState &st = ranks[static_cast<size_t>(rank)];
    if (--st.outstanding > 0)
      return;
    // The run ends: it worked from its last arrival to now.
    double readyAt = st.runPost;
    size_t last = st.runBegin;
    for (size_t e = st.runBegin; e < st.runEnd; ++e) {
      readyAt = std::max(readyAt, result.instrs[e].ready);
      if (result.instrs[e].end >= result.instrs[last].end)
        last = e;
    }
    result.busySeconds[static_cast<size_t>(rank)] += now - readyAt;
    st.last = static_cast<int64_t>(last);
    post(rank);
  }

  void criticalPath() {
    if (result.instrs.empty())
      return;
    size_t last = 0;
    for (size_t i = 0; i < result.instrs.size(); ++i)
      if (result.instrs[i].end > result.instrs[last].end)
        last = i;
    std::vector<size_t> path;
    for (int64_t at = static_cast<int64_t>(last); at >= 0;
         at = result.instrs[static_cast<size_t>(at)].cause) {
      path.push_back(static_cast<size_t>(at));
      if (path.size() > result.instrs.size())
        break; // never: causes point back in time
    }
    std::reverse(path.begin(), path.end());
    result.criticalPath = std::move(path);
  }
};

} // namespace

Simulation simulateStep(const Topology &topology,
                        const std::vector<Program> &programs,
                        const std::vector<int32_t> &rankProgram,
                        const CostModel &costs, bool symmetry) {
  return TimedSimulator(topology, programs, rankProgram, costs, symmetry).run();
}

nlohmann::ordered_json
simulationTrace(const Simulation &sim, const Topology &topology,
                const std::vector<Program> &programs,
                const std::vector<int32_t> &rankProgram) {
  // mimo-run --trace's layout: a process per rank, its instructions on
  // thread 0 ("compute"; mimo-run's overlapped communication is thread 1).
  nlohmann::ordered_json events = nlohmann::ordered_json::array();
  for (int64_t r = 0; r < topology.worldSize; ++r) {
    events.push_back(
        {{"name", "process_name"},
         {"ph", "M"},
         {"pid", r},
         {"args",
          {{"name", "rank " + std::to_string(r) + " " +
                        programs[static_cast<size_t>(rankProgram[r])].role}}}});
    events.push_back({{"name", "thread_name"},
                      {"ph", "M"},
                      {"pid", r},
                      {"tid", 0},
                      {"args", {{"name", "compute"}}}});
  }
  std::vector<bool> critical(sim.instrs.size(), false);
  for (size_t i : sim.criticalPath)
    critical[i] = true;
  // Every rank's track, each as its representative ran (the critical path
  // on the representative's).
  for (int64_t rank = 0; rank < topology.worldSize; ++rank) {
    const std::vector<Instr> &stream =
        programs[static_cast<size_t>(rankProgram[rank])].instrs;
    for (size_t k = 0; k < stream.size(); ++k) {
      const auto instr = static_cast<int32_t>(k);
      const size_t i = sim.entry(rank, instr);
      const bool onPath = critical[i] && sim.rankOf(i) == rank;
      const SimulatedInstr &s = sim.instrs[i];
      const double post = sim.postOf(i, stream);
      if (s.ready > post)
        events.push_back({{"name", "wait"},
                          {"cat", "wait"},
                          {"ph", "X"},
                          {"pid", rank},
                          {"tid", 0},
                          {"ts", post * 1e6},
                          {"dur", (s.ready - post) * 1e6}});
      events.push_back(
          {{"name", describeInstr(topology, stream[k])},
           {"cat", onPath ? "critical" : "instruction"},
           {"ph", "X"},
           {"pid", rank},
           {"tid", 0},
           {"ts", s.ready * 1e6},
           {"dur", (s.end - s.ready) * 1e6},
           {"args", {{"instruction", instr}, {"critical_path", onPath}}}});
    }
  }
  return {{"traceEvents", events},
          {"displayTimeUnit", "ms"},
          {"otherData",
           {{"predicted_step_seconds", sim.stepSeconds},
            {"generator", "mimoc simulate"}}}};
}

} // namespace mimo
