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
        held.params.push_back(&p);
        // A tied embedding's copy on the last stage: the first stage writes.
        const bool copy =
            tiedCopy(*m->config, p.name.substr(m->config->name.size() + 1),
                     m->coords.pp);
        held.owned.push_back(m->coords.dp == 0 && m->coords.cp == 0 &&
                             (!p.replicatedOverTp || m->coords.tp == 0) &&
                             !copy);
      }
  return held;
}

/// Restores parameters and moments from a checkpoint (any layout's).
void RankExecutor::load(const Checkpoint &checkpoint) {
  // The distributed optimizer: each member reads the whole moments (and
  // under bf16 the whole masters) and keeps its pieces.
  std::map<size_t, std::vector<Tensor>> whole;
  std::map<size_t, Tensor> masters;
  for (auto &m : modules)
    if (m && m->shards) {
      whole[m->index] = wholeMoments(*m, false);
      if (m->shardedMasters())
        masters[m->index] = wholeMasters(*m, false);
    }
  readCheckpointShards(checkpoint, heldParams());
  for (auto &m : modules)
    if (m) {
      if (m->shards)
        keepPieces(*m, whole[m->index]);
      if (m->shardedMasters())
        keepMasters(*m, masters[m->index]);
      else
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
    Tensor masters;
    if (m->shardedMasters())
      masters = wholeMasters(*m, false);
    readModuleWeights(*it->second, params);
    if (m->shardedMasters())
      keepMasters(*m, masters);
    else
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
    // The distributed optimizer: the members gather the whole moments,
    // which the writers write as if they were their own.
    std::map<size_t, std::vector<Tensor>> whole;
    std::map<size_t, Tensor> masters;
    for (auto &m : modules)
      if (m && m->shards) {
        whole[m->index] = wholeMoments(*m, true);
        if (m->shardedMasters())
          masters[m->index] = wholeMasters(*m, true);
      }
    writeCheckpointShards(dir, step, files, heldParams());
    for (auto &m : modules)
      if (m && m->shards) {
        keepPieces(*m, whole[m->index]);
        if (m->shardedMasters())
          keepMasters(*m, masters[m->index]);
      }
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
