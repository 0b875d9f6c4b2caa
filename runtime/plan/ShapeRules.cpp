//===- ShapeRules.cpp - The divisibility rules of a layout ----------------===//

#include "runtime/plan/ShapeRules.h"

#include "runtime/plan/Topology.h"

namespace mimo {

std::string describeModule(const std::string &name, bool language) {
  return (language ? "language module '" : "encoder '") + name + "'";
}

std::string divisibleRule(const std::string &module,
                          const std::string &quantity, int64_t value,
                          const std::string &dim, int64_t size) {
  if (size > 0 && value % size == 0)
    return "";
  return quantity + " " + std::to_string(value) + " of " + module +
         " is not divisible by " + dim + " " + std::to_string(size) +
         "; use a " + dim + " that divides " + std::to_string(value) +
         " or change arch." + quantity;
}

std::string microBatchRule(const std::string &module, int64_t microBatchSize,
                           int64_t dp) {
  if (dp > 0 && microBatchSize % dp == 0)
    return "";
  return "micro_batch_size " + std::to_string(microBatchSize) +
         " is not divisible by dp " + std::to_string(dp) + " of " + module +
         "; use a micro_batch_size that is a multiple of " +
         std::to_string(dp) +
         " (it is the global micro-batch, shared by the data-parallel lanes)";
}

std::string encoderCpRule(const std::string &module, int64_t cp) {
  if (cp == 1)
    return "";
  return module +
         " must have cp 1 (context parallelism applies to the language "
         "module only), found cp " +
         std::to_string(cp) + "; remove cp or set it to 1";
}

std::string sequenceShardRule(const std::string &module, int64_t seqLength,
                              int64_t cp, int64_t tp, bool sequenceParallel) {
  int64_t factor = sequenceShardFactor(cp, tp, sequenceParallel);
  if (seqLength % factor == 0)
    return "";
  std::string why =
      cp > 1 && sequenceParallel ? "2*cp*tp with cp " + std::to_string(cp) +
                                       " and tp " + std::to_string(tp)
      : cp > 1 ? "2*cp with cp " + std::to_string(cp)
               : "tp " + std::to_string(tp) + " with sequence parallelism";
  int64_t next = (seqLength / factor + 1) * factor;
  return "seq_length " + std::to_string(seqLength) + " is not divisible by " +
         std::to_string(factor) + " (" + why +
         ") for the sequence sharding of " + module + "; use a multiple of " +
         std::to_string(factor) + " such as " + std::to_string(next);
}

std::string denseMaskRule(const std::string &module, int64_t cp) {
  if (cp <= 1)
    return "";
  return "attention_mask \"dense\" cannot be used with cp " +
         std::to_string(cp) + " of " + module +
         " (context parallelism shards the sequence in zigzag chunks); use "
         "\"causal\" or packing, or set cp to 1";
}

} // namespace mimo
