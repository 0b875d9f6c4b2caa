//===- Roles.cpp - Topology queries, rank roles and 1F1B stages -----------===//

#include "runtime/plan/Plan.h"

#include "runtime/family/Moe.h"

#include "runtime/schedule/Formulas.h"

#include <algorithm>
#include <cassert>
#include <functional>
#include <map>
#include <set>
#include <tuple>
#include <unordered_map>

namespace mimo {

//===----------------------------------------------------------------------===//
// Topology
//===----------------------------------------------------------------------===//

size_t Topology::languageIndex() const {
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].isLanguage)
      return i;
  return modules.size();
}

std::vector<size_t> Topology::modulesOf(int64_t rank) const {
  std::vector<size_t> result;
  for (size_t i = 0; i < modules.size(); ++i)
    if (modules[i].grid.contains(rank))
      result.push_back(i);
  return result;
}

const StageTopology *Topology::stageOf(size_t module, int64_t pp) const {
  for (const StageTopology &stage : stages)
    if (stage.module == module && stage.pp == pp)
      return &stage;
  return nullptr;
}

std::vector<std::vector<std::vector<int64_t>>>
communicatorGroups(const Topology &topology) {
  std::vector<std::vector<std::vector<int64_t>>> families;
  std::set<std::vector<int64_t>> listed;
  auto add = [&](const std::vector<std::vector<int64_t>> &groups) {
    std::vector<std::vector<int64_t>> family;
    for (const std::vector<int64_t> &group : groups)
      if (group.size() > 1 && listed.insert(group).second)
        family.push_back(group);
    if (!family.empty())
      families.push_back(std::move(family));
  };
  std::vector<int64_t> world(static_cast<size_t>(topology.worldSize));
  for (int64_t r = 0; r < topology.worldSize; ++r)
    world[static_cast<size_t>(r)] = r;
  add({world});
  for (const ModuleTopology &m : topology.modules)
    for (std::vector<Dim> dims : std::vector<std::vector<Dim>>{
             {Dim::TP}, {Dim::CP}, {Dim::TP, Dim::CP}, {Dim::DP, Dim::CP}})
      add(m.grid.groups(dims));
  for (const ModuleTopology &m : topology.modules)
    if (m.expertsApart()) {
      add(allExpertGroups(m.grid, m.ep, m.expertTp(), /*edp=*/false));
      add(allExpertGroups(m.grid, m.ep, m.expertTp(), /*edp=*/true));
    }
  for (const BridgeTopology &bridge : topology.bridges)
    add(bridge.gatherGroups);
  for (const ModuleTopology &m : topology.modules)
    if (m.tiedAcrossStages)
      add(tiedEmbeddingGroups(m.grid));
  return families;
}

std::vector<ChannelFamily> channelFamilies(const Topology &topology,
                                           const std::vector<bool> &ringCp) {
  std::vector<ChannelFamily> families;
  for (size_t mi = 0; mi < topology.modules.size(); ++mi) {
    const ModuleTopology &m = topology.modules[mi];
    const bool ring =
        mi < ringCp.size() && ringCp[mi] && m.grid.size(Dim::CP) > 1;
    const int64_t lanes = m.grid.size(Dim::DP) * m.grid.size(Dim::CP);
    const bool buckets = lanes > 1;
    // The experts' buckets, over their edp groups (beside DP x CP's).
    const int64_t edpSize =
        expertDataParallel(lanes, m.ep, m.expertTp(), m.grid.size(Dim::TP));
    const std::vector<std::vector<int64_t>> edp =
        buckets && m.expertsApart() && edpSize > 1
            ? allExpertGroups(m.grid, m.ep, m.expertTp(), /*edp=*/true)
            : std::vector<std::vector<int64_t>>();
    for (int64_t chunk = 0; chunk < std::max<int64_t>(1, m.virtualStages);
         ++chunk) {
      if (ring)
        families.push_back(
            {mi, chunk, ChannelUse::Ring, m.grid.groups({Dim::CP})});
      if (buckets)
        families.push_back({mi, chunk, ChannelUse::Buckets,
                            m.grid.groups({Dim::DP, Dim::CP})});
      if (!edp.empty())
        families.push_back({mi, chunk, ChannelUse::ExpertBuckets, edp});
    }
  }
  return families;
}

int64_t channelFamilyIndex(const std::vector<ChannelFamily> &families,
                           size_t module, int64_t chunk, ChannelUse use) {
  for (size_t f = 0; f < families.size(); ++f)
    if (families[f].module == module && families[f].chunk == chunk &&
        families[f].use == use)
      return static_cast<int64_t>(f);
  return -1;
}

std::vector<std::vector<int64_t>> allExpertGroups(const Grid &grid, int64_t ep,
                                                  int64_t etp, bool edp) {
  std::vector<std::vector<int64_t>> groups;
  for (int64_t rank = grid.rankOffset(); rank < grid.endRank(); ++rank) {
    ExpertGroups g = expertGroups(grid, ep, etp, rank);
    if ((edp ? g.edpRank : g.epRank) == 0) // each once, at its first member
      groups.push_back(edp ? g.edp : g.ep);
  }
  return groups;
}

ExpertGroups expertGroups(const Grid &grid, int64_t ep, int64_t etp,
                          int64_t rank) {
  const std::vector<int64_t> dpcp = grid.groupOf(rank, {Dim::DP, Dim::CP});
  const auto own = static_cast<int64_t>(
      std::find(dpcp.begin(), dpcp.end(), rank) - dpcp.begin());
  ExpertGroups g;
  ep = std::max<int64_t>(ep, 1);
  g.epRank = own % ep;
  for (int64_t i = 0; i < static_cast<int64_t>(dpcp.size()); ++i)
    if (i / ep == own / ep)
      g.ep.push_back(dpcp[static_cast<size_t>(i)]);
  // The TP ranks holding the same cut of the experts (ours alone when
  // they are cut over every TP rank), each with its DP x CP members at
  // our place in the cut into ep (the same places in every TP rank's
  // group: its members differ from ours by the TP coordinate alone).
  const Coords at = grid.coordsOf(rank);
  const int64_t tp = grid.size(Dim::TP);
  const ExpertTp cut = ExpertTp::of(tp, etp, at.tp);
  for (int64_t t = cut.slice; t < tp; t += cut.etp) {
    Coords peer = at;
    peer.tp = t;
    const std::vector<int64_t> members =
        grid.groupOf(grid.rankOf(peer), {Dim::DP, Dim::CP});
    for (int64_t i = g.epRank; i < static_cast<int64_t>(members.size());
         i += ep)
      g.edp.push_back(members[static_cast<size_t>(i)]);
  }
  std::sort(g.edp.begin(), g.edp.end()); // a group's members ascend
  g.edpRank = static_cast<int64_t>(std::find(g.edp.begin(), g.edp.end(), rank) -
                                   g.edp.begin());
  return g;
}

std::vector<std::vector<int64_t>> tiedEmbeddingGroups(const Grid &grid) {
  std::vector<std::vector<int64_t>> pairs;
  for (const std::vector<int64_t> &stages : grid.groups({Dim::PP}))
    if (stages.size() > 1)
      pairs.push_back({stages.front(), stages.back()});
  return pairs;
}

std::pair<int64_t, int64_t> laneSamples(int64_t batch, int64_t lanes,
                                        int64_t lane) {
  int64_t per = batch / lanes;
  return {lane * per, (lane + 1) * per};
}

bool isSourceLeader(const BridgeTopology &bridge, const Grid &grid,
                    int64_t rank) {
  Coords c = grid.coordsOf(rank);
  return c.pp == grid.size(Dim::PP) - 1 &&
         bridge.srcLeaders[static_cast<size_t>(c.dp)] == rank;
}

bool isDestinationLeader(const BridgeTopology &bridge, const Grid &grid,
                         int64_t rank) {
  Coords c = grid.coordsOf(rank);
  return c.pp == 0 && bridge.dstLeaders[static_cast<size_t>(c.dp)] == rank;
}

std::vector<int64_t> gatherGroup(const Grid &wide, int64_t ratio,
                                 int64_t rank) {
  Coords c = wide.coordsOf(rank);
  std::vector<int64_t> group;
  for (int64_t w = c.dp / ratio * ratio; w < (c.dp / ratio + 1) * ratio; ++w)
    group.push_back(wide.rankOf({c.tp, c.cp, w, c.pp}));
  return group;
}

bool colocatedPipeline(const Topology &topology) {
  return topology.layout == Layout::Colocated &&
         topology.modules[topology.languageIndex()].grid.size(Dim::PP) > 1;
}

std::string roleOf(const Topology &topology, int64_t rank) {
  if (topology.layout == Layout::Colocated) {
    const Grid &lm = topology.modules[topology.languageIndex()].grid;
    int64_t pp = lm.coordsOf(rank).pp;
    std::string role = "colocated/pp" + std::to_string(pp);
    if (colocatedPipeline(topology))
      for (const BridgeTopology &bridge : topology.bridges) {
        const ModuleTopology &src = topology.modules[bridge.src];
        if (isSourceLeader(bridge, src.grid, rank))
          role += "/" + src.name + ":src-leader";
        if (pp == 0 && isDestinationLeader(bridge, lm, rank))
          role += "/" + src.name + ":dst-leader";
      }
    return role;
  }
  std::vector<size_t> modules = topology.modulesOf(rank);
  if (modules.empty())
    return "idle";
  size_t m = modules.front();
  const ModuleTopology &module = topology.modules[m];
  Coords c = module.grid.coordsOf(rank);
  std::string role = module.name + "/pp" + std::to_string(c.pp);
  for (const BridgeTopology &bridge : topology.bridges) {
    if (bridge.dst == m && c.pp == 0)
      role += "/" + topology.modules[bridge.src].name +
              (isDestinationLeader(bridge, module.grid, rank) ? ":dst-leader"
                                                              : ":dst-member");
    if (bridge.src == m && c.pp == module.grid.size(Dim::PP) - 1)
      role += "/" + topology.modules[bridge.dst].name +
              (isSourceLeader(bridge, module.grid, rank) ? ":src-leader"
                                                         : ":src-member");
  }
  return role;
}

std::optional<BridgeTopology> makeBridge(const Topology &topology, size_t src,
                                         size_t dst, std::string *error) {
  const Grid &s = topology.modules[src].grid;
  const Grid &d = topology.modules[dst].grid;
  // A colocated language module with pp > 1 holds its first stage on 1/pp
  // of the ranks: the encoder output travels to it over leader routes like
  // a non-colocated bridge (docs/plan.md).
  bool colocated =
      topology.layout == Layout::Colocated && !colocatedPipeline(topology);
  auto relation = relateLanes(s.size(Dim::DP), d.size(Dim::DP), colocated);
  auto fail = [&](std::string why) -> std::optional<BridgeTopology> {
    if (error)
      *error = std::move(why);
    return std::nullopt;
  };
  if (!relation)
    return fail("the data-parallel lanes of '" + topology.modules[src].name +
                "' (dp = " + std::to_string(s.size(Dim::DP)) + ") and '" +
                topology.modules[dst].name + "' (dp = " +
                std::to_string(d.size(Dim::DP)) + ") must divide one another");
  BridgeTopology bridge;
  bridge.src = src;
  bridge.dst = dst;
  bridge.mode = relation->mode;
  bridge.ratio = relation->ratio;
  bridge.tensorNdim = 2; // encoders hand on sample-major [N, H] token lists
  bridge.batchDim = 0;
  if (!colocated) {
    if (topology.layout == Layout::Colocated && s.size(Dim::PP) != 1)
      return fail("a colocated encoder runs once per step before the "
                  "language pipeline and needs pp = 1, found pp = " +
                  std::to_string(s.size(Dim::PP)));
    bridge.srcLeaders = sourceLeaders(s);
    bridge.dstLeaders = destinationLeaders(d);
    bridge.routes = bridgeRoutes(bridge.srcLeaders, bridge.dstLeaders);
    bridge.srcBroadcastGroups = boundaryGroups(s, /*isSource=*/true);
    bridge.dstBroadcastGroups = boundaryGroups(d, /*isSource=*/false);
    return bridge;
  }
  // Colocated (docs/plan.md): the wide side's ranks gather over groups of
  // `scale` consecutive lanes that share a TP index.
  if (s.size(Dim::PP) != 1 || d.size(Dim::PP) != 1)
    return fail("a colocated bridge runs inside the language first stage and "
                "needs pp = 1 on both sides, found encoder pp = " +
                std::to_string(s.size(Dim::PP)) +
                " and language pp = " + std::to_string(d.size(Dim::PP)));
  int64_t sdp = s.size(Dim::DP), ddp = d.size(Dim::DP);
  bridge.direction = sdp > ddp ? "fan_in" : sdp < ddp ? "fan_out" : "equal";
  int64_t scale = bridge.ratio;
  // Every rank must find its language lane's samples among its gather group.
  for (int64_t rank = s.rankOffset(); rank < s.endRank(); ++rank) {
    int64_t e = s.laneOf(rank), l = d.laneOf(rank);
    bool nests = sdp > ddp   ? l == e / scale
                 : sdp < ddp ? e == l / scale
                             : e == l;
    if (!nests)
      return fail("colocated grids must nest: rank " + std::to_string(rank) +
                  " is in encoder lane " + std::to_string(e) + " of " +
                  std::to_string(sdp) + " but language lane " +
                  std::to_string(l) + " of " + std::to_string(ddp) +
                  "; use the same order in both modules");
  }
  if (bridge.direction != "equal") {
    const Grid &wide = sdp > ddp ? s : d;
    int64_t narrow = std::min(sdp, ddp);
    for (int64_t iter = 0; iter < narrow; ++iter)
      for (int64_t t = 0; t < wide.size(Dim::TP); ++t)
        for (int64_t cp = 0; cp < wide.size(Dim::CP); ++cp)
          bridge.gatherGroups.push_back(
              gatherGroup(wide, scale, wide.rankOf({t, cp, iter * scale, 0})));
  }
  return bridge;
}

ShardTopology makeShard(int64_t cp, int64_t tp, bool sequenceParallel,
                        bool packing) {
  return {cp, tp, sequenceParallel, packing,
          sequenceShardFactor(cp, tp, sequenceParallel)};
}

void assignStages(Topology &topology) {
  std::vector<int64_t> encoderPp;
  size_t lm = topology.languageIndex();
  for (size_t i = 0; i < topology.modules.size(); ++i)
    if (i != lm)
      encoderPp.push_back(topology.modules[i].grid.size(Dim::PP));
  bool colocated = topology.layout == Layout::Colocated;
  int64_t lmPp = topology.modules[lm].grid.size(Dim::PP);
  topology.totalStages = totalStages(encoderPp, lmPp, colocated);
  topology.stages.clear();
  for (size_t i = 0; i < topology.modules.size(); ++i) {
    int64_t pp = topology.modules[i].grid.size(Dim::PP);
    for (int64_t p = 0; p < pp; ++p) {
      int64_t stage = i == lm ? languageStage(encoderPp, p, colocated)
                              : (colocated ? 0 : p);
      StageTopology s;
      s.module = i;
      s.pp = p;
      s.stage = stage;
      StageSlot slot;
      slot.totalStages = topology.totalStages;
      slot.stage = stage;
      slot.microbatches = topology.microbatches;
      slot.isLanguage = i == lm;
      slot.pipelined = !colocated || (i == lm && lmPp > 1);
      s.warmup = topology.schedule->warmup(slot);
      s.weightLag = topology.schedule->weightLag(slot);
      topology.stages.push_back(s);
    }
  }
}

} // namespace mimo
