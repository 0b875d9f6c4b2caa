//===- compile_scale.cpp - Compile time and memory against world size -----===//
//
// docs/runtime.md: a three-module plan (language TP8·CP2·PP4 with SP, an images
// encoder TP8 and an audio encoder TP4, both fanning in) compiled and
// verified for growing world sizes. Prints one row per size: the whole
// mimoc pipeline (parse, import, the eight passes including the simulating
// verifier), the plan document, the programs and the process's peak RSS,
// under each pipeline schedule (batch.schedule: 1F1B, zero bubble, and
// interleaved with two virtual stages).
//
//   compile_scale [MAX_RANKS]     (default 32768; up to 131072)
//
//===----------------------------------------------------------------------===//

#include "tools/driver/Driver.h"

#include "mlir/IR/MLIRContext.h"

#include <nlohmann/json.hpp>

#include <sys/resource.h>

#include <chrono>
#include <cstdio>
#include <cstdlib>
#include <string>

namespace {

/// World size 128·d: language 64·d ranks (dp d), images 32·d (tp8·dp4d),
/// audio 32·d (tp4·dp8d).
std::string model(int64_t d, const char *schedule) {
  auto encoder = [](const char *name, int64_t id, int64_t tp, int64_t dp,
                    int64_t offset) {
    return nlohmann::json{
        {"name", name},
        {"kind", "encoder"},
        {"special_token_id", id},
        {"arch",
         {{"feature_dim", 64},
          {"hidden_size", 256},
          {"num_layers", 2},
          {"num_heads", 8},
          {"ffn_hidden_size", 1024}}},
        {"parallel", {{"tp", tp}, {"dp", dp}, {"rank_offset", offset}}}};
  };
  nlohmann::json m = {{"version", 1},
                      {"name", "scale"},
                      {"batch",
                       {{"micro_batch_size", 8 * d},
                        {"num_microbatches", 8},
                        {"seq_length", 256},
                        {"schedule", schedule}}},
                      {"modules",
                       {encoder("images", 1000, 8, 4 * d, 0),
                        encoder("audio", 1001, 4, 8 * d, 32 * d),
                        {{"name", "language"},
                         {"kind", "language"},
                         {"arch",
                          {{"vocab_size", 4096},
                           {"hidden_size", 512},
                           {"num_layers", 8},
                           {"num_heads", 8},
                           {"ffn_hidden_size", 2048}}},
                         {"parallel",
                          {{"tp", 8},
                           {"cp", 2},
                           {"pp", 4},
                           {"dp", d},
                           {"sequence_parallel", true},
                           {"rank_offset", 64 * d}}}}}}};
  if (std::string(schedule) == "interleaved")
    m["modules"][2]["parallel"]["virtual_stages"] = 2;
  return m.dump();
}

double peakMiB() {
  rusage usage{};
  getrusage(RUSAGE_SELF, &usage);
  return usage.ru_maxrss / 1024.0;
}

} // namespace

int main(int argc, char **argv) {
  int64_t maxRanks = argc > 1 ? std::atoll(argv[1]) : 32768;
  std::printf("%8s %-11s %9s %9s %8s %10s %10s %12s\n", "ranks", "schedule",
              "compile_s", "plan_s", "programs", "plan_MiB", "peak_MiB",
              "us_per_rank");
  for (int64_t d : {8, 32, 128, 256, 1024})
    for (const char *schedule : {"1f1b", "zero_bubble", "interleaved"}) {
      int64_t ranks = 128 * d;
      if (ranks > maxRanks)
        return 0;
      std::string text = model(d, schedule);
      auto start = std::chrono::steady_clock::now();
      mlir::MLIRContext context;
      mimo::CompileResult result =
          mimo::compileModel(context, "scale.json", text);
      auto compiled = std::chrono::steady_clock::now();
      if (!result.succeeded() || !result.plan) {
        std::fprintf(stderr, "compile failed at %lld ranks: %s\n",
                     static_cast<long long>(ranks),
                     result.diagnostics.empty()
                         ? "?"
                         : result.diagnostics[0].message.c_str());
        return 1;
      }
      std::string plan = mimo::planToJson(*result.plan).dump();
      auto written = std::chrono::steady_clock::now();
      double compileS = std::chrono::duration<double>(compiled - start).count();
      double planS = std::chrono::duration<double>(written - compiled).count();
      std::printf("%8lld %-11s %9.3f %9.3f %8zu %10.1f %10.1f %12.1f\n",
                  static_cast<long long>(ranks), schedule, compileS, planS,
                  result.plan->programs.size(), plan.size() / 1048576.0,
                  peakMiB(), 1e6 * (compileS + planS) / ranks);
    }
  return 0;
}
