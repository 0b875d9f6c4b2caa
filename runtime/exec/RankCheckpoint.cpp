//===- RankCheckpoint.cpp - A rank saves and loads its parameters ---------===//

#include "runtime/exec/RankExecutor.h"

#include "runtime/config/Flops.h"
#include "runtime/config/LearningRate.h"
#include "runtime/config/Parameters.h"
#include "runtime/device/Devices.h"
#include "runtime/support/Limits.h"

#include <nlohmann/json.hpp>

#include <algorithm>
#include <cmath>
#include <cstring>
#include <set>

namespace mimo::exec {

/// The parameters this rank holds and which of their blocks it writes to
/// a checkpoint (one writer per block).
HeldParams RankExecutor::heldParams() {
  HeldParams held;
  for (auto &m : modules)
    if (m)
      for (Param &p : m->stage->params()) {
        const std::string local = p.name.substr(m->config->name.size() + 1);
        if (!checkpointed(*m->config, local))
          continue; // a LoRA base: from the init again
        held.params.push_back(&p);
        // A tied embedding's copy on the last stage: the first stage writes.
        const bool copy = tiedCopy(*m->config, local, m->coords.pp);
        // An expert under expert parallelism: the first member holding it.
        const bool writer = p.expert ? m->experts.edpRank == 0
                                     : m->coords.dp == 0 && m->coords.cp == 0;
        held.owned.push_back(
            writer && (!p.replicatedOverTp || m->coords.tp == 0) && !copy);
      }
  return held;
}

WholeState RankExecutor::wholeState(ModuleState &m, bool gather, bool moments) {
  WholeState whole;
  if (!m.shards)
    return whole;
  if (moments) {
    whole.m = wholeOf(m, m.shardM, gather);
    whole.v = wholeOf(m, m.shardV, gather);
  }
  if (m.shardedMasters())
    whole.masters = wholeOf(m, m.shardValues, gather);
  for (Param &p : m.stage->params()) {
    if (p.frozen)
      continue; // no moments; its master is whole already
    if (moments) {
      p.m = whole.m.view(p.flatBegin, p.size());
      p.v = whole.v.view(p.flatBegin, p.size());
    }
    if (m.shardedMasters())
      p.value = whole.masters.view(p.flatBegin, p.size());
  }
  return whole;
}

void RankExecutor::keepWhole(ModuleState &m, WholeState &whole, bool read) {
  if (!m.shards)
    return;
  FlatParams &f = m.stage->flat();
  if (read && !whole.m.empty()) {
    keepPieces(m, whole.m, m.shardM);
    keepPieces(m, whole.v, m.shardV);
  }
  if (read && !whole.masters.empty()) {
    keepPieces(m, whole.masters, m.shardValues);
    // Every member read the whole masters: each makes its working weights.
    if (f.trainable > 0)
      dev.convert(device::DType::F32, whole.masters.data(), device::DType::BF16,
                  f.working.data<uint16_t>(), f.trainable);
    if (f.total > f.trainable)
      dev.convert(device::DType::F32, m.frozenValues.data(),
                  device::DType::BF16, f.working.data<uint16_t>() + f.trainable,
                  f.total - f.trainable);
  }
  for (Param &p : m.stage->params())
    if (!p.frozen) {
      p.m = Tensor();
      p.v = Tensor();
      if (m.shardedMasters())
        p.value = Tensor();
    }
  dev.synchronize(); // the copies are done before the whole ones go
  whole = WholeState();
}

/// Restores parameters and moments from a checkpoint (any layout's). Under
/// the distributed optimizer each member reads the whole moments (and bf16
/// masters) and keeps its pieces.
void RankExecutor::load(const Checkpoint &checkpoint) {
  std::map<size_t, WholeState> whole;
  for (auto &m : modules)
    if (m)
      whole[m->index] = wholeState(*m, false, true);
  readCheckpointShards(checkpoint, heldParams());
  for (auto &m : modules)
    if (m) {
      keepWhole(*m, whole[m->index], true);
      if (!m->shardedMasters())
        m->stage->refreshWorking();
    }
  dev.synchronize();
}

void RankExecutor::loadInits(
    const std::map<std::string, std::shared_ptr<const ModuleWeights>> &inits) {
  for (auto &m : modules) {
    if (!m)
      continue;
    auto it = inits.find(m->config->name);
    if (it == inits.end() || !it->second)
      continue;
    std::vector<Param *> params;
    for (Param &p : m->stage->params())
      params.push_back(&p);
    WholeState whole = wholeState(*m, false, false);
    readModuleWeights(*it->second, params);
    keepWhole(*m, whole, true);
    if (!m->shardedMasters())
      m->stage->refreshWorking();
  }
  dev.synchronize();
}

/// docs/checkpoints.md: every rank writes its blocks into step-N.tmp; rank 0
/// makes the files before and the checkpoint complete after (atomic).
void RankExecutor::save(const std::string &dir, int64_t step,
                        int64_t killDuringSave) {
  CheckpointFiles files = checkpointFiles(plan.config);
  currentInstr = kSaving;
  stepIndex = step - 1;
  barrier();
  if (rank == 0)
    beginCheckpoint(dir, step, files);
  barrier();
  {
    // The distributed optimizer: the members gather the whole state, which
    // the writers write as if it were their own.
    std::map<size_t, WholeState> whole;
    for (auto &m : modules)
      if (m)
        whole[m->index] = wholeState(*m, true, true);
    writeCheckpointShards(dir, step, files, heldParams());
    for (auto &m : modules)
      if (m)
        keepWhole(*m, whole[m->index], false);
  }
  barrier();
  if (rank == 0) {
    if (step == killDuringSave)
      std::_Exit(9); // as if killed: step-N.tmp stays incomplete
    nlohmann::json modules = toJson(plan.config)["modules"];
    nlohmann::json layout = {{"world_size", topo.worldSize},
                             {"modules", nlohmann::json::array()}};
    for (const nlohmann::json &m : modules)
      layout["modules"].push_back(
          {{"name", m["name"]}, {"parallel", m["parallel"]}});
    finishCheckpoint(dir, step, plan.config, layout);
  }
  barrier();
}

} // namespace mimo::exec
