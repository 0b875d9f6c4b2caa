//===- SimulateTest.cpp - Cost model, timed simulation and tune -----------===//

#include "TestModels.h"
#include "tests/e2e/Layouts.h"

#include "codegen/SimulateReport.h"
#include "codegen/Tune.h"
#include "runtime/config/Flops.h"
#include "runtime/cost/CostModel.h"
#include "runtime/cost/MemoryPlan.h"
#include "runtime/cost/Simulate.h"
#include "runtime/schedule/Formulas.h"

#include <gtest/gtest.h>

#include <set>

using namespace mimo;
using namespace mimo::test;
using json = nlohmann::json;

namespace {

/// A profile with flat rates: a GEMM of any size at 1 TFLOP/s, no
/// elementwise, kernel or link costs, `cores` cores per device.
DeviceProfile flatProfile(int64_t cores, std::string kind = "cuda") {
  DeviceProfile p;
  p.device = "test";
  p.kind = kind;
  p.cores = cores;
  p.peakTflops = 1;
  p.gemm = {{1, 1}};
  p.attentionForward = {{1, 1}};
  p.attentionBackward = {{1, 1}};
  p.memoryGBs = 1e12;
  p.kernelOverheadUs = 0;
  p.link = {0, 1e12};
  return p;
}

ClusterConfig freeLinks(int64_t devicesPerNode, int64_t nodes) {
  ClusterConfig c;
  c.name = "test";
  c.devicesPerNode = devicesPerNode;
  c.nodes = nodes;
  c.sameDevice = c.sameNode = c.crossNode = {0, 1e12};
  return c;
}

/// A language-only model of `pp` stages and `microbatches` microbatches on
/// pp ranks; the head's share kept small so that stages cost about the same.
ModelConfig pipelineModel(int64_t pp, int64_t microbatches) {
  json model = baseModel();
  model["modules"].erase(0);
  model["data"].erase("tokens_per_sample");
  model["data"]["text_only_fraction"] = 1.0;
  model["batch"]["num_microbatches"] = microbatches;
  json &lm = model["modules"][0];
  lm["arch"]["num_layers"] = 4 * pp;
  lm["arch"]["vocab_size"] = 64;
  lm["parallel"] = {{"tp", 1}, {"pp", pp}, {"dp", 1}, {"rank_offset", 0}};
  return requireConfig(parseModelConfig(model.dump(), "pipeline.json"));
}

/// The simulated step of `config` at flat rates on one core, free links.
double flatStepSeconds(const ModelConfig &config) {
  Plan plan = requirePlan(config);
  CostModel costs(plan.topology, plan.config, flatProfile(1), freeLinks(8, 0));
  Simulation sim =
      simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
  EXPECT_TRUE(sim.problem.empty()) << sim.problem;
  return sim.stepSeconds;
}

} // namespace

TEST(CostModel, RatesInterpolateInLogSizeAndClamp) {
  std::vector<RatePoint> points = {{16, 1}, {64, 3}, {256, 4}};
  EXPECT_DOUBLE_EQ(rateAt(points, 4), 1);
  EXPECT_DOUBLE_EQ(rateAt(points, 16), 1);
  EXPECT_DOUBLE_EQ(rateAt(points, 32), 2); // halfway in log(size)
  EXPECT_DOUBLE_EQ(rateAt(points, 128), 3.5);
  EXPECT_DOUBLE_EQ(rateAt(points, 4096), 4);
  EXPECT_DOUBLE_EQ(rateAt({}, 10), 0);
}

TEST(CostModel, GemmSecondsCountTwoFlopsPerMultiplyAdd) {
  DeviceProfile p = flatProfile(1);
  EXPECT_DOUBLE_EQ(gemmSeconds(p, 1000, 1000, 1000), 2e9 / 1e12);
}

TEST(CostModel, ProfilesRoundTripAndBadOnesNameTheirPointer) {
  DeviceProfile p = *builtinProfile("h100");
  p.computeScale = 1.25;
  std::vector<Diagnostic> errors;
  std::optional<DeviceProfile> back =
      parseProfile(json::parse(profileToJson(p).dump()), errors);
  ASSERT_TRUE(back) << (errors.empty() ? "" : errors[0].message);
  EXPECT_EQ(back->device, p.device);
  EXPECT_DOUBLE_EQ(back->computeScale, 1.25);
  EXPECT_EQ(back->gemm.size(), p.gemm.size());
  EXPECT_FALSE(back->measured);

  json bad = json::parse(profileToJson(p).dump());
  bad["gemm_tflops"][1] = {8, 1}; // sizes must ascend
  bad["memory_gbs"] = -1;
  bad["cores_"] = 2;
  errors.clear();
  EXPECT_FALSE(parseProfile(bad, errors));
  std::vector<std::string> pointers;
  for (const Diagnostic &d : errors)
    pointers.push_back(d.pointer);
  EXPECT_NE(std::find(pointers.begin(), pointers.end(), "/gemm_tflops/1"),
            pointers.end());
  EXPECT_NE(std::find(pointers.begin(), pointers.end(), "/memory_gbs"),
            pointers.end());
  EXPECT_NE(std::find(pointers.begin(), pointers.end(), "/cores_"),
            pointers.end());
}

/// Precision "bf16" takes the profile's bf16 GEMM and attention rates and
/// peak: the
/// same layout simulates faster on a GPU profile, its MFU against the bf16
/// peak; a profile without them keeps the fp32 ones.
TEST(CostModel, Bf16ModelsUseTheBf16GemmRatesAndPeak) {
  DeviceProfile h100 = *builtinProfile("h100");
  ASSERT_FALSE(h100.gemmBf16.empty());
  std::vector<Diagnostic> errors;
  std::optional<DeviceProfile> back =
      parseProfile(json::parse(profileToJson(h100).dump()), errors);
  ASSERT_TRUE(back);
  EXPECT_EQ(back->gemmBf16.size(), h100.gemmBf16.size());
  EXPECT_DOUBLE_EQ(back->peakTflopsBf16, h100.peakTflopsBf16);
  DeviceProfile bf16 = forPrecision(h100, "bf16");
  EXPECT_DOUBLE_EQ(bf16.peakTflops, 989.4);
  EXPECT_GT(gemmSeconds(h100, 4096, 4096, 4096),
            5 * gemmSeconds(bf16, 4096, 4096, 4096));
  // bf16 attention (tensor cores on a GPU) replaces the fp32 rates too.
  ASSERT_FALSE(h100.attentionBf16Forward.empty());
  EXPECT_EQ(back->attentionBf16Forward.size(),
            h100.attentionBf16Forward.size());
  EXPECT_EQ(back->attentionBf16Backward.size(),
            h100.attentionBf16Backward.size());
  EXPECT_DOUBLE_EQ(bf16.attentionForward.back().tflops,
                   h100.attentionBf16Forward.back().tflops);
  EXPECT_DOUBLE_EQ(bf16.attentionBackward.back().tflops,
                   h100.attentionBf16Backward.back().tflops);
  DeviceProfile cpu = *builtinProfile("cpu");
  EXPECT_EQ(forPrecision(cpu, "bf16").gemm.size(), cpu.gemm.size());
  EXPECT_EQ(forPrecision(cpu, "bf16").attentionForward.size(),
            cpu.attentionForward.size());
  EXPECT_FALSE(profileToJson(cpu).contains("attention_bf16_tflops"));

  ModelConfig model = pipelineModel(2, 4);
  Plan fp32 = requirePlan(model);
  model.precision = "bf16";
  Plan half = requirePlan(model);
  auto step = [&](const Plan &plan) {
    CostModel costs(plan.topology, plan.config, h100, freeLinks(8, 0));
    EXPECT_DOUBLE_EQ(costs.deviceProfile().peakTflops,
                     plan.config.precision == "bf16" ? 989.4 : 67.0);
    Simulation sim =
        simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
    EXPECT_TRUE(sim.problem.empty()) << sim.problem;
    return sim.stepSeconds;
  };
  EXPECT_LT(step(half), step(fp32));
}

/// The layer's elementwise bytes per token: bf16 buffers move less than
/// fp32 ones although the backward packs its GEMMs' operands; at the ~1B
/// benchmark model's widths (H 2048, F 5632) the bf16 forward moves about
/// 200 KB a token, the backward about 344 KB.
/// A "linear" projector is fc1 alone: the encoder's last stage costs one
/// [rows, O] x [O, O] GEMM less, forward and backward.
TEST(CostModel, ALinearProjectorHasNoSecondGemm) {
  nlohmann::json json = nlohmann::json::parse(readExample("vlm-fan-in.json"));
  ModelConfig mlp = requireConfig(parseModelConfig(json.dump(), "m.json"));
  json["modules"][0]["arch"]["projector"] = "linear";
  ModelConfig linear = requireConfig(parseModelConfig(json.dump(), "m.json"));
  DeviceProfile p = flatProfile(1);
  const double O = linear.language().hiddenSize;
  for (bool backward : {false, true}) {
    StageShape shape = stageShape(linear, linear.modules[0], 0,
                                  linear.batch.microBatchSize, 0, false);
    const double rows = shape.rows;
    const double fc2 = (backward ? 2 : 1) * gemmSeconds(p, rows, O, O);
    EXPECT_NEAR(stageWork(mlp.modules[0], shape, backward, p, O).compute -
                    stageWork(linear.modules[0], shape, backward, p, O).compute,
                fc2 * p.computeScale, 1e-12)
        << (backward ? "backward" : "forward");
  }
}

/// Experts whole on each TP rank (etp 1): their gradients are summed over
/// the TP ranks too, which reduce_grads pays for even without DP (the
/// language model of vlm-fan-in is TP2 x PP2 at dp 1: nothing else to sum).
TEST(CostModel, ExpertsCutOverFewerTpRanksSumOverThem) {
  nlohmann::json json = nlohmann::json::parse(readExample("vlm-fan-in.json"));
  json["modules"][1]["arch"]["moe"] = {{"num_experts", 4}, {"top_k", 2}};
  auto reduceSeconds = [&](const nlohmann::json &model) {
    Plan plan =
        requirePlan(requireConfig(parseModelConfig(model.dump(), "moe.json")));
    ClusterConfig cluster = freeLinks(8, 0);
    cluster.sameNode.latencyUs = 1000;
    CostModel costs(plan.topology, plan.config, flatProfile(1), cluster);
    Instr in;
    in.op = InstrOp::ReduceGrads;
    in.index = 1;
    return costs.work(4, in).comm;
  };
  EXPECT_EQ(reduceSeconds(json), 0);
  json["modules"][1]["parallel"]["etp"] = 1;
  EXPECT_GE(reduceSeconds(json), 1000e-6);
}

TEST(CostModel, LayerElementwiseBytesFollowTheLayersBuffers) {
  const double H = 2048, F = 5632;
  EXPECT_DOUBLE_EQ(layerElementwiseBytes(H, H, F, true, true, false),
                   48 * H + 22 * H + 10 * F);
  EXPECT_NEAR(layerElementwiseBytes(H, H, F, true, true, false), 199680, 1);
  EXPECT_NEAR(layerElementwiseBytes(H, H, F, true, true, true), 344064, 1);
  for (bool language : {true, false})
    for (bool backward : {false, true}) {
      EXPECT_LT(layerElementwiseBytes(H, H, F, language, true, backward),
                layerElementwiseBytes(H, H, F, language, false, backward));
      EXPECT_GT(
          layerElementwiseBytes(H, H, F, language, true, backward),
          layerElementwiseBytes(H, H / 2, F / 2, language, true, backward));
    }
  EXPECT_LT(layerElementwiseBytes(H, H, F, false, true, false),
            layerElementwiseBytes(H, H, F, true, true, false))
      << "no RoPE, one MLP input";
}

TEST(CostModel, ClustersPlaceRanksOnDevicesAndNodes) {
  Plan plan = requirePlan(requireConfig(
      parseModelConfig(readExample("vlm-fan-in.json"), "vlm-fan-in.json")));
  CostModel costs(plan.topology, plan.config, flatProfile(1), freeLinks(2, 0));
  EXPECT_EQ(costs.deviceOf(5), 5); // one rank per device
  EXPECT_EQ(costs.nodeOf(5), 2);
  CostModel shared(plan.topology, plan.config, flatProfile(4, "cpu"),
                   freeLinks(1, 1));
  EXPECT_EQ(shared.deviceOf(7), 0);
  EXPECT_DOUBLE_EQ(shared.threadsOf(7), 1); // 4 cores over 8 ranks
}

TEST(CostModel, OnACpuCollectivesAreCoreTimeElsewhereLinkTime) {
  LinkCost link{10, 2}; // 10 us, 2 GB/s
  DeviceProfile gpu = flatProfile(1), cpu = flatProfile(2, "cpu");
  // 4 members: latency x log2 4, 3 pieces of 1 MB.
  Work onGpu = exchangeWork(gpu, link, 4, 1e6);
  EXPECT_DOUBLE_EQ(onGpu.compute, 0);
  EXPECT_DOUBLE_EQ(onGpu.comm, 20e-6 + 3e6 / 2e9);
  Work onCpu = exchangeWork(cpu, link, 4, 1e6);
  EXPECT_DOUBLE_EQ(onCpu.compute, 3e6 / 2e9);
  EXPECT_DOUBLE_EQ(onCpu.comm, 20e-6);
  cpu.collectiveGBs = 1; // the calibrated all-reduce rate wins on a CPU
  EXPECT_DOUBLE_EQ(exchangeWork(cpu, link, 4, 1e6).compute, 3e6 / 1e9);
  EXPECT_DOUBLE_EQ(exchangeWork(cpu, link, 1, 1e6).compute, 0);
  // A CPU's wake-ups wait for a core: latency x ranks per core.
  EXPECT_DOUBLE_EQ(sharedDeviceLink(cpu, link, 8).latencyUs, 40);
  EXPECT_DOUBLE_EQ(sharedDeviceLink(cpu, link, 2).latencyUs, 10);
  EXPECT_DOUBLE_EQ(sharedDeviceLink(gpu, link, 8).latencyUs, 10);
}

TEST(CostModel, DevicesAndThreadsFollowTheCluster) {
  ClusterConfig perRank = freeLinks(8, 0), host = freeLinks(1, 1);
  EXPECT_EQ(perRank.devices(20), 20);
  EXPECT_EQ(host.devices(20), 1);
  EXPECT_EQ(freeLinks(8, 2).devices(20), 16);
  EXPECT_EQ(threadsPerRank(16, 4), 4);
  EXPECT_EQ(threadsPerRank(2, 8), 1);
  EXPECT_EQ(threadsPerRank(2, 0), 2);
}

TEST(CostModel, PackedRowsHoldOnlyTheirSamplesTokens) {
  json model = baseModel();
  model["batch"]["packing"] = true;
  ModelConfig packed =
      requireConfig(parseModelConfig(model.dump(), "packed.json"));
  // Synthetic packed samples are uniform over [S/4, S] = [32, 128].
  TokenMoments length = expectedSampleLength(packed);
  EXPECT_DOUBLE_EQ(length.mean, 80);
  EXPECT_DOUBLE_EQ(length.square, uniformMoments(32, 128).square);
  model["batch"]["packing"] = false;
  ModelConfig padded =
      requireConfig(parseModelConfig(model.dump(), "padded.json"));
  EXPECT_DOUBLE_EQ(expectedSampleLength(padded).mean, 128);
  // So a packed language stage computes on fewer rows.
  const ModuleConfig &lm = packed.language();
  EXPECT_LT(stageShape(packed, lm, 0, 8, 0, false).rows,
            stageShape(padded, padded.language(), 0, 8, 0, false).rows);
}

TEST(Simulate, MessagesOnTheCriticalPathCostTheirLink) {
  // Two stages, one microbatch: the activation and its gradient cross the
  // link one after the other on the critical path.
  Plan plan = requirePlan(pipelineModel(2, 1));
  auto step = [&](double latencyUs) {
    ClusterConfig cluster = freeLinks(8, 0);
    cluster.sameNode.latencyUs = latencyUs;
    CostModel costs(plan.topology, plan.config, flatProfile(1), cluster);
    return simulateStep(plan.topology, plan.programs, plan.rankProgram, costs)
        .stepSeconds;
  };
  EXPECT_GE(step(1000) - step(0), 2 * 1000e-6 * (1 - 1e-9));
}

TEST(Simulate, PostedSendsLetTheirRankGoOn) {
  // Zero bubble across modules (docs/plan.md "Posted messages"): a posted
  // send's rank starts its next instruction when it posts it; the first
  // stage's bridge gradients of microbatch 0 reach the last stage's ranks
  // only after their pipeline, long after the first stage went on.
  std::optional<Plan> plan;
  for (const test::Layout &layout : test::equivalenceLayouts())
    if (layout.name == "ZeroBubbleAcrossModulesPp4")
      plan = requirePlan(
          requireConfig(validateModelConfig(layout.model, "model.json")));
  ASSERT_TRUE(plan);
  CostModel costs(plan->topology, plan->config, flatProfile(1),
                  freeLinks(8, 0));
  Simulation sim =
      simulateStep(plan->topology, plan->programs, plan->rankProgram, costs);
  ASSERT_TRUE(sim.problem.empty()) << sim.problem;
  auto find = [&](int64_t rank, InstrOp op, int32_t mb) {
    const std::vector<Instr> &stream =
        plan->programs[plan->rankProgram[rank]].instrs;
    for (size_t i = 0; i < stream.size(); ++i)
      if (stream[i].op == op && stream[i].mb == mb)
        return sim.entry(rank, static_cast<int32_t>(i));
    ADD_FAILURE() << "rank " << rank << " has no such instruction";
    return sim.entry(rank, 0);
  };
  int posted = 0;
  double wentOn = 0;
  for (int64_t rank = 0; rank < plan->topology.worldSize; ++rank) {
    const std::vector<Instr> &stream =
        plan->programs[plan->rankProgram[rank]].instrs;
    for (size_t i = 0; i + 1 < stream.size(); ++i) {
      if (!postedSend(stream[i]))
        continue;
      ++posted;
      const size_t e = sim.entry(rank, static_cast<int32_t>(i));
      EXPECT_DOUBLE_EQ(sim.postOf(e + 1, stream), sim.instrs[e].ready)
          << "rank " << rank << " instruction " << i;
      if (rank == 0 && stream[i].op == InstrOp::BridgeSendGrad &&
          stream[i].mb == 0)
        wentOn = sim.postOf(e + 1, stream);
    }
  }
  EXPECT_GT(posted, 0);
  ASSERT_GT(wentOn, 0);
  const int64_t last = plan->topology.worldSize - 1; // the last stage
  EXPECT_GT(sim.instrs[find(last, InstrOp::BridgeRecvGrad, 0)].end, wentOn);
}

TEST(Simulate, EqualStagesGiveTheOneFOneBBubble) {
  for (auto [pp, m] : {std::pair<int64_t, int64_t>{4, 8}, {2, 4}, {4, 4}}) {
    Plan plan = requirePlan(pipelineModel(pp, m));
    CostModel costs(plan.topology, plan.config, flatProfile(1),
                    freeLinks(8, 0));
    Simulation sim =
        simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
    ASSERT_TRUE(sim.problem.empty()) << sim.problem;
    // (P - 1) / (M + P - 1) of every rank's time idles; the head and the
    // optimizer make stages a little unequal.
    EXPECT_NEAR(sim.idleShare(), pipelineBubble(pp, m), 0.05)
        << "pp " << pp << " microbatches " << m;
    // The critical path ends at the step's end and runs back to time 0.
    ASSERT_FALSE(sim.criticalPath.empty());
    EXPECT_DOUBLE_EQ(sim.instrs[sim.criticalPath.back()].end, sim.stepSeconds);
    size_t front = sim.criticalPath.front();
    EXPECT_DOUBLE_EQ(
        sim.postOf(front,
                   plan.programs[plan.rankProgram[sim.rankOf(front)]].instrs),
        0);
  }
}

/// pipeline_layers: with a head as costly as a few layers, the last stage
/// of an even split is the slowest; moving layers off it shortens the step,
/// and tune finds such a split by itself.
TEST(Simulate, UnevenStagesBalanceAHeavyHead) {
  auto model = [](std::vector<int64_t> split) {
    ModelConfig config = pipelineModel(2, 8);
    config.modules[0].vocabSize = 8192; // the head: ~3 layers' work
    config.modules[0].pipelineLayers = std::move(split);
    return config;
  };
  auto step = [&](std::vector<int64_t> split) {
    return flatStepSeconds(model(std::move(split)));
  };
  double even = step({});
  EXPECT_DOUBLE_EQ(step({4, 4}), even);
  double best = even;
  int64_t bestFirst = 4;
  for (int64_t first = 1; first < 8; ++first)
    if (double t = step({first, 8 - first}); t < best)
      best = t, bestFirst = first;
  EXPECT_LT(best, 0.9 * even);
  EXPECT_GT(bestFirst, 4); // the head's stage takes fewer layers

  TuneOptions options;
  options.worldSize = 2;
  options.profile = flatProfile(1);
  options.cluster = freeLinks(8, 0);
  options.simulate = 0;
  TuneResult result = tuneLayouts(model({}), options);
  ASSERT_FALSE(result.ranked.empty()) << result.problem;
  bool uneven = false;
  for (const TuneCandidate &c : result.ranked) {
    const ModuleConfig &lm = c.config.language();
    if (lm.parallel.pp != 2)
      continue;
    ASSERT_EQ(lm.pipelineLayers.size(), 2u) << c.summary;
    EXPECT_GT(lm.pipelineLayers[0], lm.pipelineLayers[1]) << c.summary;
    EXPECT_NE(c.summary.find("pp2 ("), std::string::npos) << c.summary;
    requirePlan(c.config);
    uneven = true;
  }
  EXPECT_TRUE(uneven);
}

/// Recomputation costs time in the simulation (docs/model.md): full runs
/// each layer's forward again in its backward, selective its activation.
TEST(Simulate, RecomputationLengthensTheStep) {
  auto step = [](const char *mode) {
    ModelConfig config = pipelineModel(2, 4);
    config.modules[0].recompute = mode;
    return flatStepSeconds(config);
  };
  double none = step("none"), selective = step("selective"),
         full = step("full");
  EXPECT_GT(selective, none);
  // A layer's backward is about twice its forward: full adds about a half.
  EXPECT_GT(full, 1.2 * none);
  EXPECT_LT(full, 1.6 * none);
}

/// The simulated step of `config` on a built-in profile ("cpu", "h100").
static double builtinStepSeconds(const ModelConfig &config,
                                 const char *profile) {
  Plan plan = requirePlan(config);
  const DeviceProfile device = *builtinProfile(profile);
  CostModel costs(plan.topology, plan.config, device, defaultCluster(device));
  Simulation sim =
      simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
  EXPECT_TRUE(sim.problem.empty()) << sim.problem;
  return sim.stepSeconds;
}

/// docs/tune.md: ring CP moves as many blocks as all_gather, twice in the
/// backward; a GPU hides them behind the attention of the block in hand,
/// the CPU (which copies with its cores) does not.
TEST(Simulate, RingCpHidesItsTransfersOnAGpu) {
  json model = json::parse(readExample("lm-cp2-sp.json"));
  model["batch"]["seq_length"] = 4096;
  auto step = [&](const char *comm, const char *profile) {
    model["modules"][1]["parallel"]["cp_comm"] = comm;
    return builtinStepSeconds(
        requireConfig(parseModelConfig(model.dump(), "cp.json")), profile);
  };
  EXPECT_LT(step("ring", "h100"), step("all_gather", "h100"));
  EXPECT_GT(step("ring", "cpu"), step("all_gather", "cpu"));
}

/// docs/model.md Distributed optimizer: a reduce-scatter of a piece at
/// reduce_grads and an all-gather of one after the update, instead of the
/// all-reduce of the whole buffer; a large all-reduce over more than two
/// members is itself a reduce-scatter and an all-gather
/// (Comm::allReduceSum), so the two move the same in all, the sharded one
/// half of it at the optimizer step.
/// train.grad_reduce_dtype "bf16": the nccl all-reduce moves half the
/// bytes on a GPU; a CPU's backends move fp32 (docs/model.md).
TEST(CostModel, Bf16GradientReductionHalvesTheBytesOnAGpu) {
  json model = json::parse(readExample("vlm-fan-out.json")); // language dp4
  auto bytes = [&](const std::string &dtype, const std::string &profile) {
    model["train"]["grad_reduce_dtype"] = dtype;
    Plan plan =
        requirePlan(requireConfig(parseModelConfig(model.dump(), "dp.json")));
    const DeviceProfile device = *builtinProfile(profile);
    CostModel costs(plan.topology, plan.config, device, defaultCluster(device));
    double total = 0;
    for (const Instr &in : plan.programs[plan.rankProgram[4]].instrs)
      if (in.op == InstrOp::ReduceGrads)
        total += costs.work(4, in).bytes;
    return total;
  };
  EXPECT_GT(bytes("fp32", "h100"), 0);
  EXPECT_DOUBLE_EQ(bytes("bf16", "h100"), bytes("fp32", "h100") / 2);
  EXPECT_DOUBLE_EQ(bytes("bf16", "cpu"), bytes("fp32", "cpu"));
}

TEST(CostModel, TheDistributedOptimizerScattersAndGathersPieces) {
  json model = json::parse(readExample("vlm-fan-out.json")); // language dp4
  auto comm = [&](bool sharded, InstrOp op) {
    for (json &module : model["modules"])
      module["distributed_optimizer"] = sharded;
    Plan plan =
        requirePlan(requireConfig(parseModelConfig(model.dump(), "dp.json")));
    const DeviceProfile device = *builtinProfile("h100");
    // Two ranks a GPU: no gradient buckets beside the backward (below).
    ClusterConfig cluster = defaultCluster(device);
    cluster.nodes = 1;
    cluster.devicesPerNode = plan.topology.worldSize / 2;
    CostModel costs(plan.topology, plan.config, device, cluster);
    const int64_t rank = 4; // a language rank
    double seconds = 0;
    for (const Instr &in : plan.programs[plan.rankProgram[rank]].instrs)
      if (in.op == op)
        seconds += costs.work(rank, in).comm;
    return seconds;
  };
  const double reduce = comm(false, InstrOp::ReduceGrads),
               scatter = comm(true, InstrOp::ReduceGrads),
               step = comm(false, InstrOp::OptimizerStep),
               gather = comm(true, InstrOp::OptimizerStep);
  EXPECT_LT(scatter, reduce);
  EXPECT_GT(gather, step);
  EXPECT_NEAR(scatter + gather, reduce + step, 1e-6 * (reduce + step));
}

/// docs/gpu.md overlap: where every rank has a GPU of its own, the
/// gradient buckets are reduced on a channel as the last backward finishes
/// them, and reduce_grads waits only for what that backward could not hide
/// (at least the last bucket); ranks sharing GPUs (overlap off by default)
/// or a CPU wait for all of it.
TEST(CostModel, GradientBucketsHideBehindTheLastBackwardOnAGpu) {
  json model = json::parse(readExample("vlm-fan-out.json")); // language dp4
  json &arch = model["modules"][1]["arch"];
  arch["hidden_size"] = 1024; // ~64 M parameters: several 25 MiB buckets
  arch["ffn_hidden_size"] = 4096;
  arch["num_heads"] = 8;
  model["batch"]["seq_length"] = 2048; // a backward long enough to hide in
  auto reduceComm = [&](const char *profile, bool ownDevices) {
    Plan plan =
        requirePlan(requireConfig(parseModelConfig(model.dump(), "dp.json")));
    const DeviceProfile device = *builtinProfile(profile);
    ClusterConfig cluster = defaultCluster(device);
    cluster.sameDevice = cluster.crossNode = cluster.sameNode;
    cluster.nodes = 1;
    cluster.devicesPerNode = plan.topology.worldSize / (ownDevices ? 1 : 2);
    CostModel costs(plan.topology, plan.config, device, cluster);
    const size_t language = plan.topology.languageIndex();
    EXPECT_EQ(costs.bucketsOverlap(language),
              ownDevices && std::string(profile) != "cpu");
    double seconds = 0;
    for (const Instr &in : plan.programs[plan.rankProgram[4]].instrs)
      if (in.op == InstrOp::ReduceGrads)
        seconds += costs.work(4, in).comm;
    return seconds;
  };
  const double hidden = reduceComm("h100", true),
               whole = reduceComm("h100", false);
  EXPECT_LT(hidden, whole);
  EXPECT_GT(hidden, whole / 16); // ~11 buckets: the last one stays
  EXPECT_DOUBLE_EQ(reduceComm("cpu", true), reduceComm("cpu", false));
}

namespace {

/// A language model over pp 4 (ranks 4-7) behind vlm-fan-in's encoder, 4
/// microbatches (the layouts' ZeroBubble/InterleavedLanguagePp4With4
/// Microbatches).
json languagePp4(int64_t layers) {
  json model = json::parse(readExample("vlm-fan-in.json"));
  model["batch"]["num_microbatches"] = 4;
  model["modules"][1]["parallel"] = {
      {"tp", 1}, {"pp", 4}, {"dp", 1}, {"rank_offset", 4}};
  model["modules"][1]["arch"]["hidden_size"] = 512;
  model["modules"][1]["arch"]["ffn_hidden_size"] = 2048;
  model["modules"][1]["arch"]["num_layers"] = layers;
  return model;
}

/// `model`'s simulated step and idle share on `profile`, and the compute
/// its last rank (7) is busy with.
std::tuple<double, double, double> simulatedStep(const json &model,
                                                 const char *profile) {
  Plan plan =
      requirePlan(requireConfig(parseModelConfig(model.dump(), "m.json")));
  const DeviceProfile device = *builtinProfile(profile);
  CostModel costs(plan.topology, plan.config, device, defaultCluster(device));
  Simulation sim =
      simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
  EXPECT_TRUE(sim.problem.empty()) << sim.problem;
  const int64_t last = 7;
  double busy = 0;
  for (const Instr &in : plan.programs[plan.rankProgram[last]].instrs)
    busy += costs.work(last, in).compute;
  return {sim.stepSeconds, sim.idleShare(), busy};
}

} // namespace

/// docs/plan.md Zero bubble: on a language pp4 with 4 microbatches the
/// split backward's weight gradients fill the cool-down: a shorter step and
/// less idle time than 1F1B's on every profile, the backward's time moved,
/// not lost.
TEST(Simulate, ZeroBubbleFillsTheCoolDown) {
  json model = languagePp4(4);
  json zeroBubble = model;
  zeroBubble["batch"]["schedule"] = "zero_bubble";
  for (const char *profile : {"cpu", "h100"}) {
    SCOPED_TRACE(profile);
    auto [oneStep, oneIdle, oneBusy] = simulatedStep(model, profile);
    auto [zbStep, zbIdle, zbBusy] = simulatedStep(zeroBubble, profile);
    EXPECT_LT(zbStep, 0.95 * oneStep);
    EXPECT_LT(zbIdle, oneIdle);
    EXPECT_NEAR(zbBusy, oneBusy, 1e-9 * oneBusy);
  }
}

/// Zero bubble stays ahead of 1F1B with many microbatches on balanced
/// stages (8 layers as [3, 2, 2, 1]: the head's stage takes one): sends
/// block until matched, and weight gradients run between a stage's
/// gradient send and its next receive held the stage before back each
/// steady slot; at M = 16 on the h100 profile that schedule was 6% slower
/// than 1F1B (docs/plan.md Zero bubble).
TEST(Simulate, ZeroBubbleStaysAheadWithManyMicrobatches) {
  for (int64_t microbatches : {8, 16, 32}) {
    json model = languagePp4(8);
    model["modules"][1]["pipeline_layers"] = {3, 2, 2, 1};
    model["batch"]["num_microbatches"] = microbatches;
    json zeroBubble = model;
    zeroBubble["batch"]["schedule"] = "zero_bubble";
    for (const char *profile : {"cpu", "h100"}) {
      SCOPED_TRACE(std::string(profile) + ", M " +
                   std::to_string(microbatches));
      // (The idle share is mostly the encoder's ranks'.)
      const auto one = simulatedStep(model, profile);
      const auto zb = simulatedStep(zeroBubble, profile);
      EXPECT_LT(std::get<0>(zb), 0.99 * std::get<0>(one));
      EXPECT_NEAR(std::get<2>(zb), std::get<2>(one), 1e-9 * std::get<2>(one));
    }
  }
}

/// The interleaved schedule (8 layers, two chunks a stage): the chunks cost
/// what the stage costs (the same busy time on the last stage), and the
/// step and the idle share shrink toward (P - 1) / (vM + P - 1) from
/// 1F1B's (P - 1) / (M + P - 1).
TEST(Simulate, InterleavedShrinksTheBubble) {
  json model = languagePp4(8);
  json interleaved = model;
  interleaved["batch"]["schedule"] = "interleaved";
  interleaved["modules"][1]["parallel"]["virtual_stages"] = 2;
  for (const char *profile : {"cpu", "h100"}) {
    SCOPED_TRACE(profile);
    auto [oneStep, oneIdle, oneBusy] = simulatedStep(model, profile);
    auto [ilStep, ilIdle, ilBusy] = simulatedStep(interleaved, profile);
    EXPECT_LT(ilStep, 0.95 * oneStep);
    EXPECT_LT(ilIdle, oneIdle);
    EXPECT_NEAR(ilBusy, oneBusy, 1e-6 * oneBusy);
  }
}

TEST(Simulate, RanksOnOneDeviceShareItsCores) {
  Plan plan = requirePlan(requireConfig(
      parseModelConfig(readExample("vlm-fan-in.json"), "vlm-fan-in.json")));
  auto step = [&](int64_t cores, ClusterConfig cluster) {
    CostModel costs(plan.topology, plan.config, flatProfile(cores), cluster);
    Simulation sim =
        simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
    EXPECT_TRUE(sim.problem.empty()) << sim.problem;
    return sim;
  };
  Simulation own = step(1, freeLinks(8, 0));    // one device per rank
  Simulation shared = step(1, freeLinks(1, 1)); // all on one core
  // One core does every rank's work: the step is at least the sum of it.
  double work = 0;
  CostModel costs(plan.topology, plan.config, flatProfile(1), freeLinks(1, 1));
  for (int64_t r = 0; r < plan.topology.worldSize; ++r)
    for (const Instr &in : plan.programs[plan.rankProgram[r]].instrs)
      work += costs.work(r, in).compute;
  EXPECT_GE(shared.stepSeconds, work * (1 - 1e-9));
  EXPECT_LT(own.stepSeconds, shared.stepSeconds);
  // Eight cores on the one device give every rank its own core back.
  Simulation wide = step(8, freeLinks(1, 1));
  EXPECT_NEAR(wide.stepSeconds, own.stepSeconds, 1e-9 * own.stepSeconds);
}

TEST(Simulate, ReportAndTraceNameTheCriticalPath) {
  Plan plan = requirePlan(requireConfig(
      parseModelConfig(readExample("vlm-fan-in.json"), "vlm-fan-in.json")));
  CostModel costs(plan.topology, plan.config, *builtinProfile("cpu"),
                  defaultCluster(*builtinProfile("cpu")));
  Simulation sim =
      simulateStep(plan.topology, plan.programs, plan.rankProgram, costs);
  json report = json::parse(simulationJson(plan, sim, costs).dump());
  EXPECT_GT(report["step_seconds"].get<double>(), 0);
  EXPECT_EQ(report["ranks"].size(), 8u);
  EXPECT_FALSE(report["critical_path"].empty());
  EXPECT_EQ(report["critical_path"].back()["last"], "optimizer_step");
  json trace = json::parse(
      simulationTrace(sim, plan.topology, plan.programs, plan.rankProgram)
          .dump());
  size_t critical = 0;
  std::set<int64_t> processes;
  for (const json &e : trace["traceEvents"]) {
    critical += e.value("cat", "") == "critical";
    if (e["ph"] == "X") { // mimo-run's layout: a process per rank
      processes.insert(e["pid"].get<int64_t>());
      EXPECT_EQ(e["tid"], 0);
    }
  }
  EXPECT_EQ(critical, sim.criticalPath.size());
  EXPECT_EQ(processes.size(), 8u);
  std::string text = renderSimulationText(report);
  EXPECT_NE(text.find("predicted step"), std::string::npos);
  EXPECT_NE(text.find("is an estimate"), std::string::npos);
}

static ModelConfig fanIn() {
  return requireConfig(
      parseModelConfig(readExample("vlm-fan-in.json"), "vlm-fan-in.json"));
}

/// tune on `world` ranks with the built-in H100 profile.
static TuneOptions h100Tune(int64_t world) {
  TuneOptions options;
  options.worldSize = world;
  options.profile = *builtinProfile("h100");
  options.cluster = defaultCluster(options.profile);
  return options;
}

TEST(Tune, BestLayoutIsValidFitsAndIsFastestOfThoseSimulated) {
  ModelConfig model = fanIn();
  TuneOptions options = h100Tune(4);
  options.simulate = 0; // every valid layout
  TuneResult result = tuneLayouts(model, options);
  ASSERT_FALSE(result.ranked.empty()) << result.problem;
  EXPECT_EQ(static_cast<int64_t>(result.ranked.size()), result.simulated);
  EXPECT_EQ(result.simulated + result.overMemory, result.valid);
  for (size_t i = 1; i < result.ranked.size(); ++i)
    EXPECT_LE(result.ranked[i - 1].stepSeconds, result.ranked[i].stepSeconds);
  // Both placements are searched, and the global batch is kept.
  bool colocated = false, separate = false;
  for (const TuneCandidate &c : result.ranked) {
    colocated |= c.summary.rfind("colocated", 0) == 0;
    separate |= c.summary.rfind("non-colocated", 0) == 0;
    EXPECT_EQ(c.config.batch.microBatchSize * c.config.batch.numMicrobatches,
              model.batch.microBatchSize * model.batch.numMicrobatches);
  }
  EXPECT_TRUE(colocated && separate);
  // The best is a model that plans on 4 ranks, within the memory limit.
  const TuneCandidate &best = result.ranked.front();
  Plan plan = requirePlan(best.config);
  EXPECT_EQ(plan.topology.worldSize, 4);
  for (const RankMemory &r : memoryPlan(plan.topology, plan.config))
    EXPECT_LE(static_cast<double>(r.totalBytes), result.memoryLimit);
  // A limit below every layout's memory leaves none, and says why.
  options.memoryBytes = 1024;
  TuneResult none = tuneLayouts(model, options);
  EXPECT_TRUE(none.ranked.empty());
  EXPECT_NE(none.problem.find("none fits"), std::string::npos);
}

/// --memory below every layout's peak without recomputation: tune finds
/// layouts that fit with it (docs/tune.md), and only such.
TEST(Tune, RecomputationFitsWhatNothingElseDoes) {
  // The model shards its optimizer itself: recomputation is what is left.
  ModelConfig model = fanIn();
  for (ModuleConfig &m : model.modules)
    m.distributedOptimizer = true;
  TuneOptions options = h100Tune(4);
  options.simulate = 0;
  TuneResult all = tuneLayouts(model, options);
  ASSERT_FALSE(all.ranked.empty()) << all.problem;
  int64_t least = all.ranked.front().peakBytes;
  for (const TuneCandidate &c : all.ranked) {
    least = std::min(least, c.peakBytes);
    EXPECT_EQ(c.config.language().recompute, "none") << c.summary;
  }
  options.memoryBytes = static_cast<double>(least) - 1;
  TuneResult tight = tuneLayouts(model, options);
  ASSERT_FALSE(tight.ranked.empty()) << tight.problem;
  for (const TuneCandidate &c : tight.ranked) {
    EXPECT_NE(c.config.language().recompute, "none") << c.summary;
    EXPECT_NE(c.summary.find("; recompute "), std::string::npos) << c.summary;
    EXPECT_LT(c.peakBytes, least);
    Plan plan = requirePlan(c.config);
    for (const RankMemory &r : memoryPlan(plan.topology, plan.config))
      EXPECT_LE(static_cast<double>(r.totalBytes), options.memoryBytes);
    // Full recomputation of the fewest layers that fit: one fewer does not.
    const ModuleConfig &lm = c.config.language();
    if (lm.recompute == "full" && lm.recomputeLayers > 0) {
      ModelConfig fewer = c.config;
      for (ModuleConfig &m : fewer.modules)
        m.recomputeLayers -= 1;
      Plan less = requirePlan(fewer);
      int64_t peak = 0;
      for (const RankMemory &r : memoryPlan(less.topology, less.config))
        peak = std::max(peak, r.totalBytes);
      EXPECT_GT(static_cast<double>(peak), options.memoryBytes) << c.summary;
    }
  }
  // A model that sets its own recomputation keeps it: nothing is searched.
  ModelConfig fixed = model;
  for (ModuleConfig &m : fixed.modules)
    m.recompute = "selective";
  for (const TuneCandidate &c : tuneLayouts(fixed, options).ranked)
    EXPECT_EQ(c.config.language().recompute, "selective") << c.summary;
}

/// docs/tune.md: over `--memory`, tune shards the optimizer state first
/// (it costs no compute), and recomputes only what that does not fit.
/// docs/tune.md: a pipelined layout is simulated under zero bubble too,
/// and the faster schedule is kept (summary "; zero bubble"); a layout
/// without a pipeline never is; a model that names the schedule keeps it.
TEST(Tune, ZeroBubbleIsTriedOnEveryPipeline) {
  nlohmann::json json = nlohmann::json::parse(readExample("vlm-fan-in.json"));
  ModelConfig model = requireConfig(parseModelConfig(json.dump(), "m.json"));
  TuneOptions options = h100Tune(8);
  options.simulate = 0;
  TuneResult all = tuneLayouts(model, options);
  ASSERT_FALSE(all.ranked.empty()) << all.problem;
  int zeroBubble = 0;
  for (const TuneCandidate &c : all.ranked) {
    Plan plan = requirePlan(c.config);
    const bool split = c.config.batch.schedule->splitsBackward();
    EXPECT_EQ(split, c.summary.find("; zero bubble") != std::string::npos);
    if (plan.topology.totalStages == 1) {
      EXPECT_FALSE(split) << c.summary;
    }
    if (!split)
      continue;
    ++zeroBubble;
    // Faster than the same layout under 1F1B.
    ModelConfig plain = c.config;
    plain.batch.schedule = &defaultSchedule();
    Plan other = requirePlan(plain);
    const DeviceProfile &device = options.profile;
    CostModel costs(other.topology, other.config, device, options.cluster);
    EXPECT_LT(c.stepSeconds, simulateStep(other.topology, other.programs,
                                          other.rankProgram, costs)
                                 .stepSeconds)
        << c.summary;
  }
  EXPECT_GT(zeroBubble, 0);
  json["batch"]["schedule"] = "zero_bubble";
  TuneResult named = tuneLayouts(
      requireConfig(parseModelConfig(json.dump(), "m.json")), options);
  for (const TuneCandidate &c : named.ranked)
    EXPECT_TRUE(c.config.batch.schedule->splitsBackward()) << c.summary;
  // A model that names 1F1B keeps it too.
  json["batch"]["schedule"] = "1f1b";
  TuneResult oneFOneB = tuneLayouts(
      requireConfig(parseModelConfig(json.dump(), "m.json")), options);
  ASSERT_FALSE(oneFOneB.ranked.empty()) << oneFOneB.problem;
  for (const TuneCandidate &c : oneFOneB.ranked)
    EXPECT_FALSE(c.config.batch.schedule->splitsBackward()) << c.summary;
}

TEST(Tune, InterleavedIsTriedWhereTheLayersAllow) {
  // 8 language layers, 4 microbatches: pp 2 and 4 can take two chunks.
  nlohmann::json json = nlohmann::json::parse(readExample("vlm-fan-in.json"));
  json["modules"][1]["arch"]["num_layers"] = 8;
  ModelConfig model = requireConfig(parseModelConfig(json.dump(), "m.json"));
  TuneOptions options = h100Tune(8);
  options.simulate = 0;
  TuneResult all = tuneLayouts(model, options);
  ASSERT_FALSE(all.ranked.empty()) << all.problem;
  int interleaved = 0;
  for (const TuneCandidate &c : all.ranked) {
    if (!c.config.batch.schedule->chunked())
      continue;
    ++interleaved;
    const ModuleConfig &lm = c.config.language();
    EXPECT_EQ(lm.parallel.virtualStages, 2) << c.summary;
    EXPECT_EQ(lm.numLayers % (2 * lm.parallel.pp), 0) << c.summary;
    EXPECT_NE(c.summary.find("; interleaved (2 virtual stages)"),
              std::string::npos)
        << c.summary;
    // Faster than the same layout under 1F1B.
    ModelConfig plain = c.config;
    plain.batch.schedule = &defaultSchedule();
    plain.modules[plain.languageIndex()].parallel.virtualStages = 1;
    Plan other = requirePlan(plain);
    CostModel costs(other.topology, other.config, options.profile,
                    options.cluster);
    EXPECT_LT(c.stepSeconds, simulateStep(other.topology, other.programs,
                                          other.rankProgram, costs)
                                 .stepSeconds)
        << c.summary;
  }
  EXPECT_GT(interleaved, 0);
}

/// A sparse language model (docs/tune.md): every ep dividing DP x CP and
/// the experts is searched, each such layout plans, and its experts count
/// once in ep ranks' memory.
TEST(Tune, ExpertParallelismIsSearched) {
  nlohmann::json json = nlohmann::json::parse(readExample("moe-vlm.json"));
  ModelConfig model = requireConfig(parseModelConfig(json.dump(), "moe.json"));
  TuneOptions options = h100Tune(10);
  options.simulate = 0;
  TuneResult all = tuneLayouts(model, options);
  ASSERT_FALSE(all.ranked.empty()) << all.problem;
  int found = 0;
  for (const TuneCandidate &c : all.ranked) {
    const ParallelConfig &p = c.config.language().parallel;
    if (p.ep == 1)
      continue;
    ++found;
    EXPECT_EQ((p.dp * p.cp) % p.ep, 0) << c.summary;
    EXPECT_NE(c.summary.find(" ep" + std::to_string(p.ep)), std::string::npos)
        << c.summary;
    if (found > 3)
      continue;
    // The same layout without ep keeps more per rank.
    ModelConfig whole = c.config;
    whole.modules[whole.languageIndex()].parallel.ep = 1;
    Plan split = requirePlan(c.config), plain = requirePlan(whole);
    int64_t a = 0, b = 0;
    for (const RankMemory &r : memoryPlan(split.topology, split.config))
      a = std::max(a, r.paramBytes);
    for (const RankMemory &r : memoryPlan(plain.topology, plain.config))
      b = std::max(b, r.paramBytes);
    EXPECT_LT(a, b) << c.summary;
  }
  EXPECT_GT(found, 0);
  // The estimate prices the exchanges: a layout with ep is slower than the
  // same layout without (the experts' FLOPs are the same).
  int paired = 0;
  for (const TuneCandidate &c : all.ranked) {
    const int64_t ep = c.config.language().parallel.ep;
    if (ep == 1)
      continue;
    const std::string plain = [&] {
      std::string text = c.summary;
      text.erase(text.find(" ep" + std::to_string(ep)),
                 3 + std::to_string(ep).size());
      return text;
    }();
    for (const TuneCandidate &d : all.ranked)
      if (d.summary == plain) {
        ++paired;
        EXPECT_GT(c.estimateSeconds, d.estimateSeconds) << c.summary;
      }
  }
  EXPECT_GT(paired, 0);
  // Whole experts on each TP rank (etp 1) are searched beside ep: a TP
  // rank sends its share of the rows alone, but holds more weights and
  // sums the experts' gradients over TP too, so its estimate differs from
  // the same layout's with the experts cut over TP (here, with few rows a
  // step, the longer optimizer tail outweighs the exchanges saved).
  auto paramBytes = [](const ModelConfig &config) {
    Plan plan = requirePlan(config);
    int64_t most = 0;
    for (const RankMemory &r : memoryPlan(plan.topology, plan.config))
      most = std::max(most, r.paramBytes);
    return most;
  };
  int whole = 0;
  for (const TuneCandidate &c : all.ranked) {
    const ParallelConfig &p = c.config.language().parallel;
    if (p.etp == 0)
      continue;
    EXPECT_EQ(p.etp, 1) << c.summary;
    EXPECT_GT(p.ep, 1) << c.summary;
    EXPECT_GT(p.tp, 1) << c.summary;
    std::string cut = c.summary;
    cut.erase(cut.find(" etp1"), 5);
    for (const TuneCandidate &d : all.ranked)
      if (d.summary == cut) {
        ++whole;
        EXPECT_NE(c.estimateSeconds, d.estimateSeconds) << c.summary;
        if (whole <= 3) {
          EXPECT_GT(paramBytes(c.config), paramBytes(d.config)) << c.summary;
        }
      }
  }
  EXPECT_GT(whole, 0);
  // With the distributed optimizer too (the experts' moments cut over
  // their edp group).
  json["modules"][1]["distributed_optimizer"] = true;
  model = requireConfig(parseModelConfig(json.dump(), "moe.json"));
  all = tuneLayouts(model, options);
  EXPECT_TRUE(std::any_of(all.ranked.begin(), all.ranked.end(),
                          [](const TuneCandidate &c) {
                            return c.config.language().parallel.ep > 1 &&
                                   c.config.language().distributedOptimizer;
                          }));
}

TEST(Tune, TheDistributedOptimizerFitsBeforeRecomputation) {
  // Weights outweigh activations: a wide vocabulary, short sequences.
  nlohmann::json json = nlohmann::json::parse(readExample("vlm-fan-in.json"));
  json["modules"][1]["arch"]["vocab_size"] = 16384;
  json["batch"]["seq_length"] = 32;
  ModelConfig model = requireConfig(parseModelConfig(json.dump(), "wide.json"));
  TuneOptions options = h100Tune(4);
  options.simulate = 0;
  TuneResult all = tuneLayouts(model, options);
  ASSERT_FALSE(all.ranked.empty()) << all.problem;
  auto peakOf = [](const ModelConfig &config) {
    Plan plan = requirePlan(config);
    int64_t peak = 0;
    for (const RankMemory &r : memoryPlan(plan.topology, plan.config))
      peak = std::max(peak, r.totalBytes);
    return static_cast<double>(peak);
  };
  auto sharded = [](ModelConfig config) {
    for (ModuleConfig &m : config.modules)
      m.distributedOptimizer = true;
    return config;
  };
  // The layout that sharding saves the most; a limit between its peaks.
  const TuneCandidate *chosen = nullptr;
  double saved = 0, limit = 0;
  for (const TuneCandidate &c : all.ranked) {
    EXPECT_FALSE(c.config.language().distributedOptimizer) << c.summary;
    double plain = peakOf(c.config), less = peakOf(sharded(c.config));
    if (plain - less > saved) {
      chosen = &c;
      saved = plain - less;
      limit = less + saved / 2;
    }
  }
  ASSERT_NE(chosen, nullptr) << "sharding saves nothing in any layout";
  options.memoryBytes = limit;
  TuneResult tight = tuneLayouts(model, options);
  bool found = false;
  for (const TuneCandidate &c : tight.ranked) {
    EXPECT_LE(peakOf(c.config), limit) << c.summary;
    if (c.summary == chosen->summary + "; distributed optimizer") {
      found = true;
      EXPECT_TRUE(c.config.language().distributedOptimizer);
      EXPECT_EQ(c.config.language().recompute, "none");
    }
    // Recomputation only where sharding alone does not fit.
    if (c.config.language().recompute != "none") {
      ModelConfig plain = sharded(c.config);
      for (ModuleConfig &m : plain.modules) {
        m.recompute = "none";
        m.recomputeLayers = -1;
      }
      EXPECT_GT(peakOf(plain), limit) << c.summary;
    }
  }
  EXPECT_TRUE(found) << chosen->summary << " does not fit by sharding";
}

TEST(Tune, OneModuleHasOnePlacement) {
  TuneOptions options = h100Tune(4);
  options.simulate = 0;
  TuneResult result = tuneLayouts(pipelineModel(2, 4), options);
  ASSERT_FALSE(result.ranked.empty()) << result.problem;
  std::set<std::string> seen;
  for (const TuneCandidate &c : result.ranked) {
    EXPECT_TRUE(seen.insert(c.summary).second) << "twice: " << c.summary;
    EXPECT_EQ(c.summary.rfind("language tp", 0), 0u) << c.summary;
  }
}

TEST(Tune, ImpossibleWorldsSayWhy) {
  ModelConfig model = requireConfig(
      parseModelConfig(readExample("vlm-fan-in.json"), "vlm-fan-in.json"));
  TuneOptions options;
  options.worldSize = 1024; // more ranks than the global batch of 32 allows
  options.profile = *builtinProfile("cpu");
  options.cluster = defaultCluster(options.profile);
  TuneResult result = tuneLayouts(model, options);
  EXPECT_TRUE(result.ranked.empty());
  EXPECT_NE(result.problem.find("divisibility"), std::string::npos);
}

TEST(CostModel, FrozenWeightsMakeNoWeightGradientsAndATowerNoBackward) {
  // The same model trained whole, with its vision tower's body frozen
  // (no backward there) and with its language model frozen too (input
  // gradients only): each backward costs less, forwards the same.
  auto plan = [](const std::string &encoderFreeze, bool languageFrozen) {
    nlohmann::json m = nlohmann::json::parse(readExample("vlm-fan-in.json"));
    if (!encoderFreeze.empty())
      m["modules"][0]["freeze"] = {encoderFreeze, "layers"};
    if (languageFrozen)
      m["modules"][1]["freeze"] = true;
    return requirePlan(requireConfig(parseModelConfig(m.dump(), "m.json")));
  };
  Plan full = plan("", false), body = plan("patch", false),
       both = plan("patch", true);
  auto work = [](const Plan &p, int64_t rank, InstrOp op) {
    CostModel costs(p.topology, p.config, flatProfile(1), freeLinks(8, 0));
    for (const Instr &in : p.programs[p.rankProgram[rank]].instrs)
      if (in.op == op)
        return costs.work(rank, in).compute;
    return -1.0;
  };
  // Rank 0: an images rank; rank 4: the language first stage.
  EXPECT_EQ(work(body, 0, InstrOp::Forward), work(full, 0, InstrOp::Forward));
  EXPECT_LT(work(body, 0, InstrOp::Backward),
            0.5 * work(full, 0, InstrOp::Backward));
  EXPECT_EQ(work(body, 4, InstrOp::Backward), work(full, 4, InstrOp::Backward));
  EXPECT_LT(work(both, 4, InstrOp::Backward), work(full, 4, InstrOp::Backward));
  EXPECT_GT(work(both, 4, InstrOp::Backward), work(full, 4, InstrOp::Forward));
}
