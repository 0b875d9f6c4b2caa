//===- Tune.cpp - Searching every module's grid ---------------------------===//

#include "codegen/Tune.h"

#include "codegen/Explain.h"
#include "codegen/SimulateReport.h"
#include "runtime/config/Flops.h"
#include "runtime/config/Parameters.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/cost/Simulate.h"
#include "runtime/plan/PlanFile.h"

#include <algorithm>
#include <cmath>
#include <cstdio>
#include <functional>
#include <map>
#include <sstream>

namespace mimo {

namespace {

struct ModuleGrid {
  int64_t tp = 1, cp = 1, pp = 1, dp = 1;
  /// Expert parallelism (a sparse module): divides dp x cp and the
  /// experts.
  int64_t ep = 1;
  /// Expert tensor parallelism: 0 the experts cut over tp, 1 whole on
  /// each TP rank (searched beside ep > 1 at tp > 1).
  int64_t etp = 0;
  bool sp = false;
  /// model.json `pipeline_layers` (empty: an even split); `balanced`: the
  /// search gives each stage the layers that even out the stages' times
  /// (Estimator::cost fills `split`).
  std::vector<int64_t> split;
  bool balanced = false;
  int64_t size() const { return tp * cp * pp * dp; }
  /// Analytic seconds of one microbatch's forward and backward on one
  /// stage, the step's gradient reduction and optimizer, and the core-
  /// seconds of compute the whole module does per step.
  double stage = 0, tail = 0, work = 0;
};

std::vector<int64_t> divisors(int64_t n) {
  std::vector<int64_t> d;
  for (int64_t i = 1; i <= n; ++i)
    if (n % i == 0)
      d.push_back(i);
  return d;
}

/// The most ranks on one device (rank r on device r mod the devices).
int64_t ranksSharingADevice(const TuneOptions &options) {
  int64_t devices = options.cluster.devices(options.worldSize);
  return (options.worldSize + devices - 1) / devices;
}

/// The analytic costs of the search, from cost/CostModel.h's stage costs.
class Estimator {
public:
  Estimator(const ModelConfig &model, const TuneOptions &options)
      : model(model), options(options) {
    devices =
        std::min(options.cluster.devices(options.worldSize), options.worldSize);
    ranksPerDevice = ranksSharingADevice(options);
    double cores = static_cast<double>(options.profile.cores);
    double threads = static_cast<double>(
        threadsPerRank(options.profile.cores, ranksPerDevice));
    // Every rank busy: a device's cores shared by all its ranks.
    speed =
        threads *
        std::min(1.0, cores / (threads * static_cast<double>(ranksPerDevice)));
    for (const ModuleConfig &m : model.modules) {
      double values = 0, experts = 0;
      for (const ParamSpec &spec :
           stageParameters(m, model.language().hiddenSize, false, 1, 0)) {
        values += static_cast<double>(spec.size());
        if (spec.expert)
          experts += static_cast<double>(spec.size());
      }
      parameters.push_back(values);
      expertParameters.push_back(experts);
    }
  }

  /// An exchange over `members` ranks spanning `span` consecutive ranks,
  /// each sending `bytes`.
  Work exchange(int64_t members, int64_t span, double bytes) const {
    int64_t deviceSpan = (span + ranksPerDevice - 1) / ranksPerDevice;
    const ClusterConfig &c = options.cluster;
    LinkCost link =
        deviceSpan <= 1
            ? sharedDeviceLink(options.profile, c.sameDevice, ranksPerDevice)
        : deviceSpan <= c.devicesPerNode ? c.sameNode
                                         : c.crossNode;
    return exchangeWork(options.profile, link, members, bytes);
  }

  /// Costs `g` (a balanced grid: with the split that evens out its
  /// stages).
  void cost(size_t module, size_t encoder, ModuleGrid &g,
            int64_t microBatchSize, int64_t microbatches) const {
    ModuleConfig m = model.modules[module];
    m.parallel.tp = g.tp;
    m.parallel.etp = g.etp;
    m.parallel.cp = g.cp;
    m.parallel.pp = g.pp;
    m.parallel.dp = g.dp;
    m.parallel.ep = g.ep;
    double outputHidden = static_cast<double>(model.language().hiddenSize);
    // One microbatch's forward and backward on `stage` (with `layers`
    // layers when given): {seconds, compute seconds}.
    auto stageTime = [&](int64_t stage, int64_t layers) {
      StageShape shape =
          stageShape(model, m, encoder, microBatchSize, stage, g.sp);
      if (layers > 0)
        shape.layers = static_cast<double>(layers);
      Work total;
      for (bool backward : {false, true}) {
        StageWork w =
            stageWork(m, shape, backward, options.profile, outputHidden);
        total.compute += w.compute;
        total += exchange(g.tp, g.tp, w.tpBytes) * w.tpExchanges;
        total += cpExchangeWork(w, exchange(g.cp, g.tp * g.cp, w.cpBytes),
                                g.cp > 1 && m.parallel.cpComm == "ring",
                                backward, options.profile.kind != "cpu");
        total += exchange(g.tp, g.tp, w.logitBytes) * w.logitExchanges;
        // Expert parallelism: ep consecutive members of DP x CP.
        total += exchange(g.ep, g.tp * g.ep, w.epBytes) * w.epExchanges;
      }
      return std::pair{total.comm + total.compute / speed, total.compute};
    };
    if (g.balanced) {
      // Each stage's time is about fixed + per-layer × its layers (the
      // embedding, the head and the loss in the fixed part); one layer at a
      // time to the stage that stays fastest with it evens out the slowest.
      const int64_t layers = m.layers(), pp = g.pp;
      m.pipelineLayers.assign(static_cast<size_t>(pp), layers / pp);
      for (int64_t s = 0; s < layers % pp; ++s)
        ++m.pipelineLayers[static_cast<size_t>(s)];
      m.pipelineLayers.back() += m.numLayers - layers; // past output_layer
      std::vector<double> fixed, perLayer;
      for (int64_t s = 0; s < pp; ++s) {
        double one = stageTime(s, 1).first, two = stageTime(s, 2).first;
        perLayer.push_back(two - one);
        fixed.push_back(one - (two - one));
      }
      std::vector<int64_t> counts(static_cast<size_t>(pp), 1);
      for (int64_t left = layers - pp; left > 0; --left) {
        size_t best = 0;
        for (size_t s = 1; s < counts.size(); ++s)
          if (fixed[s] + perLayer[s] * static_cast<double>(counts[s] + 1) <
              fixed[best] +
                  perLayer[best] * static_cast<double>(counts[best] + 1))
            best = s;
        ++counts[best];
      }
      counts.back() += m.numLayers - layers;
      g.split = counts;
    }
    m.pipelineLayers = g.split;
    g.stage = 0;
    double work = 0;
    // Even stages: the first and the last are the slowest (the embedding,
    // the head); uneven ones: any may be.
    std::vector<int64_t> stages = {0, g.pp - 1};
    if (!g.split.empty()) {
      stages.clear();
      for (int64_t s = 0; s < g.pp; ++s)
        stages.push_back(s);
    }
    for (int64_t stage : stages) {
      auto [seconds, compute] = stageTime(stage, 0);
      g.stage = std::max(g.stage, seconds);
      work = std::max(work, compute);
    }
    g.work = work * static_cast<double>(g.size() * microbatches);
    // Whole experts on each TP rank (etp 1) are tp times the values, and
    // their gradients are summed over the TP ranks too.
    const double wholeExperts =
        g.etp > 0 ? expertParameters[module] * static_cast<double>(g.tp - 1)
                  : 0;
    double local = 4.0 * (parameters[module] + wholeExperts) /
                   static_cast<double>(g.tp * g.pp);
    Work reduce = exchange(g.dp * g.cp, g.size(), local);
    if (g.etp > 0)
      reduce += exchange(g.tp, g.size(),
                         4.0 * expertParameters[module] /
                             static_cast<double>(g.pp * g.ep));
    g.tail =
        reduce.comm +
        (reduce.compute + memorySeconds(options.profile, 8 * local)) / speed;
  }

  /// Costs `g`; a balanced grid becomes the faster of its even split
  /// (where pp divides the layers; on a tie, or when the balanced split
  /// comes out even) and the one that evens out its stages.
  void costBest(size_t module, size_t encoder, ModuleGrid &g,
                int64_t microBatchSize, int64_t microbatches) const {
    ModuleGrid even = g;
    even.balanced = false;
    cost(module, encoder, g, microBatchSize, microbatches);
    if (!g.balanced || model.modules[module].layers() % g.pp != 0)
      return;
    cost(module, encoder, even, microBatchSize, microbatches);
    if (even.stage <= g.stage)
      g = even;
  }

  /// The cores of every device, as busy ranks get them.
  double devicesCores() const {
    return static_cast<double>(devices) *
           static_cast<double>(options.profile.cores);
  }

private:
  const ModelConfig &model;
  const TuneOptions &options;
  int64_t devices = 1, ranksPerDevice = 1;
  double speed = 1;
  /// Each module's parameter values, and of them its experts'.
  std::vector<double> parameters, expertParameters;
};

/// Every grid of `module` within `maxSize` ranks whose dp divides
/// `microBatchSize`, under the rules of plan/ShapeRules.h.
std::vector<ModuleGrid> moduleGrids(const ModelConfig &model,
                                    const ModuleConfig &m, int64_t maxSize,
                                    int64_t microBatchSize, bool colocated,
                                    int64_t tpLimit) {
  std::vector<ModuleGrid> grids;
  bool language = m.kind == ModuleKind::Language;
  int64_t S = model.batch.seqLength;
  for (int64_t tp : divisors(m.numHeads)) {
    if (m.ffnHiddenSize % tp || (language && m.vocabSize % tp))
      continue;
    if (m.hasMoe() && (m.moe.expertFfn % tp || m.moe.sharedFfn % tp))
      continue; // the experts are cut over TP as the dense MLP
    // TP within a node (its collectives run every layer): never across
    // the links between nodes of a multi-node cluster (tpLimit: its
    // devices per node; 0: one node).
    if (tpLimit > 0 && tp > tpLimit)
      continue;
    for (int64_t cp = 1; cp <= (language ? maxSize : 1); ++cp) {
      if (cp > 1 && (S % (2 * cp) || model.batch.attentionMask == "dense"))
        continue;
      // pp dividing the layers (split evenly), and the powers of two below
      // them that do not (the layers split unevenly); a class token keeps
      // its encoder on one stage.
      // A model that names the interleaved schedule keeps it: its language
      // pipeline has pp > 1 stages, each of virtual_stages chunks of equal
      // layers (no pipeline_layers), as docs/plan.md requires.
      const int64_t chunks = language ? m.parallel.virtualStages : 1;
      for (int64_t pp = 1; pp <= std::min(m.layers(), maxSize); ++pp) {
        bool even = m.layers() % pp == 0, power = (pp & (pp - 1)) == 0;
        if ((!even && !power) ||
            ((colocated || m.classToken) && !language && pp > 1))
          continue;
        if (chunks > 1 && (pp == 1 || m.numLayers % (pp * chunks) != 0))
          continue;
        for (int64_t dp : divisors(microBatchSize)) {
          ModuleGrid g;
          g.tp = tp, g.cp = cp, g.pp = pp, g.dp = dp;
          if (g.size() > maxSize)
            continue;
          g.sp = language && tp > 1 && S % (tp * (cp > 1 ? 2 * cp : 1)) == 0;
          g.balanced = pp > 1 && chunks == 1;
          grids.push_back(g);
          // Expert parallelism over DP x CP (docs/model.md Mixture of
          // experts).
          if (m.hasMoe())
            for (int64_t ep : divisors(dp * cp))
              if (ep > 1 && m.moe.experts % ep == 0) {
                g.ep = ep;
                grids.push_back(g);
                // Whole experts on each TP rank: each sends its share
                // of the rows alone, and holds tp times the experts.
                if (tp > 1) {
                  g.etp = 1;
                  grids.push_back(g);
                  g.etp = 0;
                }
              }
        }
      }
    }
  }
  return grids;
}

struct Candidate {
  bool colocated = false;
  int64_t microbatches = 1;
  std::vector<ModuleGrid> grids;
  double estimate = 0;
};

/// The 1F1B estimate of a layout (Tune.h, step 2).
double estimate(const ModelConfig &model, const Candidate &layout,
                double cores) {
  double M = static_cast<double>(layout.microbatches);
  double slowest = 0, encoderPath = 0, encoderSum = 0, tail = 0, work = 0;
  double languageStage = 0, languagePp = 1;
  for (size_t i = 0; i < model.modules.size(); ++i) {
    const ModuleGrid &g = layout.grids[i];
    tail = std::max(tail, g.tail);
    work += g.work;
    if (model.modules[i].kind == ModuleKind::Language) {
      languageStage = g.stage;
      languagePp = static_cast<double>(g.pp);
    } else {
      encoderPath = std::max(encoderPath, static_cast<double>(g.pp) * g.stage);
      encoderSum += M * g.stage;
    }
    slowest = std::max(slowest, g.stage);
  }
  double pipeline =
      layout.colocated
          ? encoderSum + (M - 1) * languageStage + languagePp * languageStage
          : (M - 1) * slowest + encoderPath + languagePp * languageStage;
  return std::max(pipeline, work / cores) + tail;
}

ModelConfig withLayout(const ModelConfig &model, const Candidate &layout,
                       int64_t world) {
  ModelConfig config = model;
  int64_t global = model.batch.microBatchSize * model.batch.numMicrobatches;
  config.batch.numMicrobatches = layout.microbatches;
  config.batch.microBatchSize = global / layout.microbatches;
  config.worldSize = world;
  int64_t offset = 0;
  for (size_t i = 0; i < config.modules.size(); ++i) {
    const ModuleGrid &g = layout.grids[i];
    ParallelConfig &p = config.modules[i].parallel;
    p.tp = g.tp;
    p.etp = g.etp;
    p.cp = g.cp;
    p.pp = g.pp;
    p.dp = g.dp;
    p.ep = g.ep;
    p.sequenceParallel = g.sp;
    p.order = kDefaultOrder;
    config.modules[i].pipelineLayers = g.split;
    p.rankOffset = layout.colocated ? 0 : offset;
    offset += g.size();
  }
  return config;
}

std::string summarize(const ModelConfig &config, bool colocated) {
  std::ostringstream os;
  if (config.modules.size() > 1)
    os << (colocated ? "colocated: " : "non-colocated: ");
  for (size_t i = 0; i < config.modules.size(); ++i) {
    const ModuleConfig &m = config.modules[i];
    const ParallelConfig &p = m.parallel;
    os << (i ? " | " : "") << m.name << " tp" << p.tp;
    if (p.cp > 1)
      os << " cp" << p.cp;
    os << " pp" << p.pp;
    if (!m.pipelineLayers.empty()) {
      const char *plus = " (";
      for (int64_t layers : m.pipelineLayers) {
        os << plus << layers;
        plus = "+";
      }
      os << ")";
    }
    os << " dp" << p.dp << (p.ep > 1 ? " ep" + std::to_string(p.ep) : "")
       << (p.etp > 0 ? " etp" + std::to_string(p.etp) : "")
       << (p.sequenceParallel ? " sp" : "");
    if (!colocated)
      os << " [" << spanText(p.rankOffset, p.tp * p.cp * p.pp * p.dp) << "]";
  }
  os << "; " << config.batch.numMicrobatches << " x mb "
     << config.batch.microBatchSize;
  if (std::any_of(config.modules.begin(), config.modules.end(),
                  [](const ModuleConfig &m) {
                    return m.distributedOptimizer &&
                           m.parallel.dp * m.parallel.cp > 1;
                  }))
    os << "; distributed optimizer";
  if (config.batch.schedule != &defaultSchedule()) {
    os << "; " << config.batch.schedule->label();
    if (config.batch.schedule->chunked())
      os << " (" << config.language().parallel.virtualStages
         << " virtual stages)";
  }
  // The recomputation the search chose (every module alike).
  if (config.modules.front().recompute != "none")
    os << "; recompute " << config.modules.front().recompute;
  if (config.modules.front().recomputeLayers >= 0)
    os << " (" << config.modules.front().recomputeLayers
       << " layers of each stage)";
  return os.str();
}

bool lanesDivide(int64_t a, int64_t b) { return a % b == 0 || b % a == 0; }

} // namespace

namespace {

/// The search over exactly options.worldSize ranks.
TuneResult tuneWorld(const ModelConfig &model, const TuneOptions &requested) {
  // The model's precision picks the profile's GEMM rates and peak.
  TuneOptions options = requested;
  options.profile = forPrecision(requested.profile, model.precision);
  TuneResult result;
  const int64_t world = options.worldSize;
  const size_t n = model.modules.size();
  const size_t language = model.languageIndex();
  std::vector<size_t> encoderOf(n, 0);
  for (size_t i = 0, e = 0; i < n; ++i)
    if (model.modules[i].kind == ModuleKind::Encoder)
      encoderOf[i] = e++;
  Estimator estimator(model, options);
  double cores = estimator.devicesCores();
  const int64_t tpLimit =
      options.cluster.devices(world) > options.cluster.devicesPerNode
          ? options.cluster.devicesPerNode
          : 0;
  // Module spans move in steps of `step` ranks above 64 ranks.
  int64_t step = 1;
  if (world > 64)
    for (int64_t s = world / 64; s >= 1; --s)
      if (world % s == 0) {
        step = s;
        break;
      }
  const int64_t global =
      model.batch.microBatchSize * model.batch.numMicrobatches;
  std::vector<Candidate> layouts;
  for (int64_t M : divisors(global)) {
    int64_t B = global / M;
    for (bool colocated : {true, false}) {
      // One module spans every rank either way: one placement, not two.
      if (colocated && n == 1)
        continue;
      // Each module's grids, costed; non-colocated keeps the fastest per
      // (span, dp) above 64 ranks (the rest cannot beat it in a layout).
      std::vector<std::map<int64_t, std::vector<ModuleGrid>>> bySize(n);
      for (size_t i = 0; i < n; ++i) {
        for (ModuleGrid g : moduleGrids(model, model.modules[i], world, B,
                                        colocated, tpLimit)) {
          if (colocated ? g.size() != world : g.size() % step != 0)
            continue;
          estimator.costBest(i, encoderOf[i], g, B, M);
          ++result.enumerated;
          std::vector<ModuleGrid> &list = bySize[i][g.size()];
          if (world > 64 && !colocated) {
            auto same = std::find_if(list.begin(), list.end(),
                                     [&](auto &o) { return o.dp == g.dp; });
            if (same != list.end()) {
              if (g.stage < same->stage)
                *same = g;
              continue;
            }
          }
          list.push_back(g);
        }
      }
      // Combine: colocated, every module all ranks; non-colocated, spans
      // in model order summing to the world.
      Candidate layout;
      layout.colocated = colocated;
      layout.microbatches = M;
      layout.grids.resize(n);
      std::function<void(size_t, int64_t)> place = [&](size_t i, int64_t left) {
        if (i == n) {
          if (!colocated && left != 0)
            return;
          int64_t lmDp = layout.grids[language].dp;
          for (size_t k = 0; k < n; ++k)
            if (k != language && !lanesDivide(layout.grids[k].dp, lmDp))
              return;
          ++result.valid;
          layout.estimate = estimate(model, layout, cores);
          layouts.push_back(layout);
          return;
        }
        int64_t later = static_cast<int64_t>(n - i - 1) * step;
        for (const auto &[size, grids] : bySize[i]) {
          if (!colocated &&
              (size > left - later || (i + 1 == n && size != left)))
            continue;
          for (const ModuleGrid &g : grids) {
            layout.grids[i] = g;
            place(i + 1, colocated ? left : left - size);
          }
        }
      };
      place(0, world);
    }
  }
  if (layouts.empty()) {
    result.problem =
        "no layout of " + std::to_string(world) +
        " ranks fits the model's divisibility rules (heads, ffn and "
        "vocabulary by tp, layers by pp, the global batch of " +
        std::to_string(global) +
        " samples by every dp, bridge lanes dividing each other)";
    return result;
  }
  std::sort(layouts.begin(), layouts.end(),
            [](const Candidate &a, const Candidate &b) {
              return a.estimate < b.estimate;
            });
  // Simulate the best that fit in memory.
  const DeviceProfile &profile = options.profile;
  result.memoryLimit = options.memoryBytes;
  if (result.memoryLimit <= 0) {
    result.memoryLimit =
        profile.memoryBytes / static_cast<double>(ranksSharingADevice(options));
  }
  for (const Candidate &layout : layouts) {
    if (options.simulate && result.ranked.size() >= options.simulate)
      break;
    TuneCandidate c;
    c.config = withLayout(model, layout, world);
    c.summary = summarize(c.config, layout.colocated);
    c.estimateSeconds = layout.estimate;
    std::string error;
    std::optional<Plan> plan;
    if (modelShapeErrors(c.config).empty())
      plan = buildPlan(c.config, &error);
    if (!plan) {
      --result.valid; // the search's rules let through what the plan refuses
      continue;
    }
    auto peakOf = [](const Plan &p) {
      int64_t peak = 0;
      for (const RankMemory &r : memoryPlan(p.topology, p.config))
        peak = std::max(peak, r.totalBytes);
      return peak;
    };
    c.peakBytes = peakOf(*plan);
    // Over the limit, and the model leaves recomputation to the search:
    // selective, then full, on every module (docs/model.md Recomputation;
    // the simulation then counts the recomputed forwards).
    auto over = [&](int64_t peak) {
      return result.memoryLimit > 0 &&
             static_cast<double>(peak) > result.memoryLimit;
    };
    // First the distributed optimizer on every module (docs/model.md; no
    // compute, the same bytes as the all-reduce), unless the model sets it.
    bool searchSharding = std::none_of(
        model.modules.begin(), model.modules.end(),
        [](const ModuleConfig &m) { return m.distributedOptimizer; });
    if (over(c.peakBytes) && searchSharding) {
      ModelConfig sharded = c.config;
      for (ModuleConfig &m : sharded.modules)
        m.distributedOptimizer = true;
      std::optional<Plan> again = buildPlan(sharded, &error);
      if (again && peakOf(*again) < c.peakBytes) {
        c.config = std::move(sharded);
        c.summary = summarize(c.config, layout.colocated);
        c.peakBytes = peakOf(*again);
        plan = std::move(again);
      }
    }
    bool searchRecompute = std::all_of(
        model.modules.begin(), model.modules.end(),
        [](const ModuleConfig &m) { return m.recompute == "none"; });
    for (const char *mode : {"selective", "full"}) {
      if (!over(c.peakBytes) || !searchRecompute)
        break;
      ModelConfig recomputing = c.config;
      for (ModuleConfig &m : recomputing.modules)
        m.recompute = mode;
      std::optional<Plan> again = buildPlan(recomputing, &error);
      if (!again)
        break;
      int64_t peak = peakOf(*again);
      if (peak >= c.peakBytes)
        continue;
      c.config = std::move(recomputing);
      c.summary = summarize(c.config, layout.colocated);
      c.peakBytes = peak;
      plan = std::move(again);
    }
    // Full recomputation that fits: the fewest layers of each stage
    // (recompute_layers) that still fit, each recomputed layer costing a
    // forward (fewer layers kept in full cost more memory, monotonically).
    if (searchRecompute && !over(c.peakBytes) &&
        c.config.modules.front().recompute == "full") {
      int64_t most = 1;
      for (const ModuleConfig &m : c.config.modules)
        for (int64_t n : stageLayerCounts(m, m.parallel.pp))
          most = std::max(most, n);
      int64_t low = 0, high = most; // high fits (every layer), low not
      std::optional<Plan> best;
      while (high - low > 1) {
        int64_t mid = (low + high) / 2;
        ModelConfig fewer = c.config;
        for (ModuleConfig &m : fewer.modules)
          m.recomputeLayers = mid;
        std::optional<Plan> p = buildPlan(fewer, &error);
        if (p && !over(peakOf(*p))) {
          high = mid;
          best = std::move(p);
        } else {
          low = mid;
        }
      }
      if (best) {
        c.config = best->config;
        c.summary = summarize(c.config, layout.colocated);
        c.peakBytes = peakOf(*best);
        plan = std::move(best);
      }
    }
    if (over(c.peakBytes)) {
      ++result.overMemory;
      continue;
    }
    CostModel costs(plan->topology, plan->config, profile, options.cluster);
    Simulation sim =
        simulateStep(plan->topology, plan->programs, plan->rankProgram, costs);
    if (!sim.problem.empty())
      continue;
    // A pipeline, and the model leaves the schedule to the search: zero
    // bubble and, where the language pipeline's layers and microbatches
    // allow, interleaved with two virtual stages too (docs/plan.md), each
    // kept when it fits and the simulation finds it faster.
    auto trySchedule = [&](ModelConfig other) {
      std::optional<Plan> again = buildPlan(other, &error);
      if (!again || over(peakOf(*again)))
        return;
      CostModel otherCosts(again->topology, again->config, profile,
                           options.cluster);
      Simulation s = simulateStep(again->topology, again->programs,
                                  again->rankProgram, otherCosts);
      if (s.problem.empty() && s.stepSeconds < sim.stepSeconds) {
        c.config = std::move(other);
        c.summary = summarize(c.config, layout.colocated);
        c.peakBytes = peakOf(*again);
        plan = std::move(again);
        sim = std::move(s);
      }
    };
    if (plan->topology.totalStages > 1 && !model.batch.scheduleNamed) {
      const ModuleConfig &lm = c.config.language();
      TuneSlot slot;
      slot.pp = lm.parallel.pp;
      slot.numLayers = lm.numLayers;
      slot.microbatches = c.config.batch.numMicrobatches;
      slot.unevenStages = !lm.pipelineLayers.empty();
      for (const PipelineSchedule *schedule : schedules()) {
        std::optional<int64_t> chunks = schedule->tuneChunks(slot);
        if (schedule == c.config.batch.schedule || !chunks)
          continue;
        ModelConfig other = c.config;
        other.batch.schedule = schedule;
        other.modules[other.languageIndex()].parallel.virtualStages = *chunks;
        trySchedule(std::move(other));
      }
    }
    ++result.simulated;
    c.stepSeconds = sim.stepSeconds;
    c.idleShare = sim.idleShare();
    c.mfu = predictedMfu(plan->config, world, sim.stepSeconds, profile);
    result.ranked.push_back(std::move(c));
  }
  std::stable_sort(result.ranked.begin(), result.ranked.end(),
                   [](const TuneCandidate &a, const TuneCandidate &b) {
                     return a.stepSeconds < b.stepSeconds;
                   });
  if (result.ranked.empty() && result.valid == 0)
    result.problem =
        "no layout of " + std::to_string(world) +
        " ranks is valid: the module grids' sizes must tile the ranks and "
        "divide the heads, the FFN, the vocabulary, the layers and the "
        "micro-batch";
  else if (result.ranked.empty())
    result.problem = std::to_string(result.overMemory) +
                     " valid layouts were tried and none fits in " +
                     formatBytes(result.memoryLimit) +
                     " per rank; give more ranks or memory (--memory GiB)";
  result.worldSize = world;
  return result;
}

} // namespace

TuneResult tuneLayouts(const ModelConfig &model, const TuneOptions &options) {
  TuneResult all = tuneWorld(model, options);
  all.ranksAsked = options.worldSize;
  if (!all.ranked.empty() || !options.allowIdle)
    return all;
  // No layout uses every rank (240 ranks for a model whose grids want
  // powers of two): the most ranks down to three quarters that one does,
  // the rest left idle (docs/tune.md).
  TuneOptions fewer = options;
  for (int64_t w = options.worldSize - 1;
       w >= 1 && 4 * w >= 3 * options.worldSize; --w) {
    fewer.worldSize = w;
    TuneResult some = tuneWorld(model, fewer);
    if (some.ranked.empty())
      continue;
    some.ranksAsked = options.worldSize;
    return some;
  }
  all.problem += " (nor of any world from " +
                 std::to_string(options.worldSize - 1) + " down to " +
                 std::to_string((3 * options.worldSize + 3) / 4) +
                 " ranks, leaving the rest idle)";
  return all;
}

nlohmann::ordered_json tuneJson(const TuneResult &result,
                                const TuneOptions &options, size_t top) {
  nlohmann::ordered_json out;
  out["world_size"] =
      result.worldSize > 0 ? result.worldSize : options.worldSize;
  out["ranks_asked"] = options.worldSize;
  out["idle_ranks"] =
      result.worldSize > 0 ? options.worldSize - result.worldSize : 0;
  out["profile"] = {{"device", options.profile.device},
                    {"measured", options.profile.measured}};
  out["cluster"] = options.cluster.name;
  out["memory_limit_bytes"] = result.memoryLimit;
  out["enumerated"] = result.enumerated;
  out["valid"] = result.valid;
  out["over_memory"] = result.overMemory;
  out["simulated"] = result.simulated;
  if (!result.problem.empty())
    out["problem"] = result.problem;
  nlohmann::ordered_json list = nlohmann::ordered_json::array();
  for (size_t i = 0; i < result.ranked.size() && (top == 0 || i < top); ++i) {
    const TuneCandidate &c = result.ranked[i];
    list.push_back({{"summary", c.summary},
                    {"step_seconds", c.stepSeconds},
                    {"mfu", c.mfu},
                    {"idle_share", c.idleShare},
                    {"peak_bytes", c.peakBytes},
                    {"estimate_seconds", c.estimateSeconds},
                    {"model", toJson(c.config)}});
  }
  out["layouts"] = list;
  return out;
}

std::string renderTuneText(const TuneResult &result, const TuneOptions &options,
                           size_t top) {
  std::ostringstream os;
  os << "device: " << options.profile.device
     << (options.profile.measured ? " (measured)" : "") << "\n";
  if (!options.profile.measured)
    os << "  note: this profile is an estimate (" << options.profile.source
       << ")\n";
  os << "cluster: " << options.cluster.name << "\n";
  const int64_t used =
      result.worldSize > 0 ? result.worldSize : options.worldSize;
  if (used < options.worldSize)
    os << options.worldSize << " ranks: no layout uses them all; the best use "
       << used << " (" << options.worldSize - used
       << " idle: launch the plan on " << used << ")\n";
  os << used << " ranks: " << result.enumerated << " module grids costed, "
     << result.valid << " valid layouts, " << result.overMemory << " over "
     << formatBytes(result.memoryLimit) << " per rank, " << result.simulated
     << " simulated\n\n";
  if (result.ranked.empty())
    return os.str(); // mimoc reports the problem on stderr
  os << "  #  step       MFU     idle   memory/rank  layout\n";
  for (size_t i = 0; i < result.ranked.size() && (top == 0 || i < top); ++i) {
    const TuneCandidate &c = result.ranked[i];
    char line[128];
    std::snprintf(line, sizeof(line),
                  "%3zu  %8.2f ms %5.1f%%  %5.1f%%  %-11s  ", i + 1,
                  c.stepSeconds * 1e3, c.mfu * 100, c.idleShare * 100,
                  formatBytes(static_cast<double>(c.peakBytes)).c_str());
    os << line << c.summary << "\n";
  }
  return os.str();
}

} // namespace mimo
