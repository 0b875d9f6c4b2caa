//===- InterleavedOrder.cpp - Interleaved 1F1B, in lockstep ---------------===//

#include "runtime/schedule/InterleavedOrder.h"

#include <algorithm>
#include <set>
#include <stdexcept>
#include <tuple>

namespace mimo {

int32_t interleavedChunk(int64_t k, int64_t stages, int64_t chunks,
                         bool forward) {
  const int64_t chunk = (k % (stages * chunks)) / stages;
  return static_cast<int32_t>(forward ? chunk : chunks - 1 - chunk);
}

int32_t interleavedMicrobatch(int64_t k, int64_t stages, int64_t chunks) {
  return static_cast<int32_t>((k / (stages * chunks)) * stages + k % stages);
}

std::vector<std::vector<InterleavedStep>>
interleavedSteps(int64_t stages, int64_t chunks, int64_t microbatches) {
  const int64_t P = stages, v = chunks, total = microbatches * chunks;
  // Each stage's order of work.
  std::vector<std::vector<ChunkWork>> order(static_cast<size_t>(P));
  for (int64_t p = 0; p < P; ++p) {
    const int64_t warmup = std::min(2 * (P - p - 1) + (v - 1) * P, total);
    auto forward = [&](int64_t k) {
      return ChunkWork{ChunkWork::Forward, interleavedChunk(k, P, v, true),
                       interleavedMicrobatch(k, P, v)};
    };
    auto backward = [&](int64_t k) {
      return ChunkWork{ChunkWork::Backward, interleavedChunk(k, P, v, false),
                       interleavedMicrobatch(k, P, v)};
    };
    std::vector<ChunkWork> &o = order[static_cast<size_t>(p)];
    for (int64_t k = 0; k < warmup; ++k)
      o.push_back(forward(k));
    for (int64_t k = 0; k + warmup < total; ++k) {
      o.push_back(forward(warmup + k));
      o.push_back(backward(k));
    }
    for (int64_t k = total - warmup; k < total; ++k)
      o.push_back(backward(k));
  }
  auto firstVirtual = [&](int64_t p, int32_t chunk) {
    return p == 0 && chunk == 0;
  };
  auto lastVirtual = [&](int64_t p, int32_t chunk) {
    return p == P - 1 && chunk == v - 1;
  };
  // What each stage has received (kind, chunk, microbatch), by the end of
  // the step before.
  std::vector<std::set<std::tuple<int, int32_t, int32_t>>> have(
      static_cast<size_t>(P));
  std::vector<size_t> next(static_cast<size_t>(P), 0);
  std::vector<std::vector<InterleavedStep>> steps(static_cast<size_t>(P));
  auto unfinished = [&] {
    for (int64_t p = 0; p < P; ++p)
      if (next[static_cast<size_t>(p)] < order[static_cast<size_t>(p)].size())
        return true;
    return false;
  };
  while (unfinished()) {
    std::vector<std::vector<ChunkWork>> sent(static_cast<size_t>(P));
    std::vector<InterleavedStep> step(static_cast<size_t>(P));
    bool ran = false;
    for (int64_t p = 0; p < P; ++p) {
      const std::vector<ChunkWork> &o = order[static_cast<size_t>(p)];
      size_t &at = next[static_cast<size_t>(p)];
      std::vector<ChunkWork> &work = step[static_cast<size_t>(p)].work;
      while (at < o.size() && work.size() < 2) {
        const ChunkWork w = o[at];
        const bool isForward = w.kind == ChunkWork::Forward;
        if (!work.empty() && work.back().kind == w.kind)
          break; // one forward and one backward a step
        const bool local =
            isForward ? firstVirtual(p, w.chunk) : lastVirtual(p, w.chunk);
        const int input = isForward ? ChunkWork::RecvAct : ChunkWork::RecvGrad;
        if (!local &&
            !have[static_cast<size_t>(p)].count({input, w.chunk, w.mb}))
          break; // its input has not arrived
        work.push_back(w);
        ++at;
        ran = true;
        if (isForward && !lastVirtual(p, w.chunk))
          sent[static_cast<size_t>(p)].push_back(
              {ChunkWork::SendAct, w.chunk, w.mb});
        if (!isForward && !firstVirtual(p, w.chunk))
          sent[static_cast<size_t>(p)].push_back(
              {ChunkWork::SendGrad, w.chunk, w.mb});
      }
    }
    if (!ran)
      throw std::logic_error("interleaved schedule: no stage can run");
    for (int64_t p = 0; p < P; ++p) {
      std::vector<ChunkWork> &messages = step[static_cast<size_t>(p)].messages;
      messages = sent[static_cast<size_t>(p)];
      const int64_t prev = (p + P - 1) % P, nextStage = (p + 1) % P;
      // Activations from the stage before (the last stage's chunk c feeds
      // the first stage's chunk c + 1), gradients from the stage after.
      for (const ChunkWork &s : sent[static_cast<size_t>(prev)])
        if (s.kind == ChunkWork::SendAct)
          messages.push_back(
              {ChunkWork::RecvAct, s.chunk + (prev == P - 1 ? 1 : 0), s.mb});
      for (const ChunkWork &s : sent[static_cast<size_t>(nextStage)])
        if (s.kind == ChunkWork::SendGrad)
          messages.push_back(
              {ChunkWork::RecvGrad, s.chunk - (nextStage == 0 ? 1 : 0), s.mb});
      for (const ChunkWork &m : messages)
        if (m.kind == ChunkWork::RecvAct || m.kind == ChunkWork::RecvGrad)
          have[static_cast<size_t>(p)].insert({m.kind, m.chunk, m.mb});
      steps[static_cast<size_t>(p)].push_back(
          std::move(step[static_cast<size_t>(p)]));
    }
  }
  return steps;
}

std::vector<int64_t> interleavedHeld(int64_t stages, int64_t chunks,
                                     int64_t microbatches, int64_t stage) {
  std::vector<int64_t> held(static_cast<size_t>(chunks), 0),
      most(static_cast<size_t>(chunks), 0);
  const std::vector<std::vector<InterleavedStep>> steps =
      interleavedSteps(stages, chunks, microbatches);
  for (const InterleavedStep &step : steps[static_cast<size_t>(stage)])
    for (const ChunkWork &w : step.work) {
      int64_t &n = held[static_cast<size_t>(w.chunk)];
      n += w.kind == ChunkWork::Forward ? 1 : -1;
      most[static_cast<size_t>(w.chunk)] =
          std::max(most[static_cast<size_t>(w.chunk)], n);
    }
  return most;
}

} // namespace mimo
