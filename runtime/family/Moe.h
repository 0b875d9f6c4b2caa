//===- Moe.h - Mixture of experts: the arch, names, routing -----*- C++ -*-===//
//
// docs/model-json.md `arch.moe` and docs/model.md "Mixture of experts": the
// one place that says which layers are sparse, what their parameters are
// called and how big they are, and how a token is routed (scores, top-k,
// weights, the load-balancing and z losses and their gradients). The
// parser, the families' parameter lists, the FLOPs, the memory plan, the
// model and the Hugging Face reader and writer all ask here; the Python
// twin (tests/twin_moe.py) computes the same from transformers' formulas.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_MOE_H
#define MIMO_RUNTIME_FAMILY_MOE_H

#include <cstdint>
#include <string>
#include <vector>

namespace mimo {

/// `arch.moe.router`.
struct MoeRouter {
  /// "softmax" (false) or "sigmoid" (true) scores.
  bool sigmoid = false;
  /// The top-k weights divided by their sum.
  bool normTopk = true;
  double auxLossCoef = 0.01, zLossCoef = 0;
};

/// `arch.moe`: every sparse layer's MLP is `experts` SwiGLU experts of
/// width `expertFfn`, each token going to its `topK` best, plus a shared
/// expert of width `sharedFfn` (0: none), gated by sigmoid(x · g) when
/// `sharedGate`.
struct MoeConfig {
  int64_t experts = 0, topK = 0, expertFfn = 0, sharedFfn = 0;
  bool sharedGate = true;
  /// The sparse layers, ascending (empty with allLayers).
  bool allLayers = true;
  std::vector<int64_t> layers;
  MoeRouter router;

  bool sparse(int64_t layer) const;
  /// The sparse layers of [0, numLayers).
  int64_t sparseLayers(int64_t numLayers) const;
  /// The multiply-adds one token meets in a sparse layer's MLP of width
  /// `hidden`: the router, its top_k experts, the shared expert and its
  /// gate (the active parameters; a FLOP count is twice this).
  double activeMacs(int64_t hidden) const;
};

/// Expert tensor parallelism (`parallel.etp`, a divisor of tp): each
/// expert is cut over etp TP ranks as the dense MLP is over tp, and the
/// rows of a microbatch are shared among the tp / etp ranks holding the
/// same cut. TP rank `tpRank` holds cut `slice` of every expert and runs
/// them on share `share` of `shares`: rows [rowBegin, rowEnd) of n. An
/// etp of 0 is tp (the default: cut as the dense MLP).
struct ExpertTp {
  int64_t etp = 1, slice = 0, share = 0, shares = 1;
  static ExpertTp of(int64_t tp, int64_t etp, int64_t tpRank) {
    etp = etp > 0 ? etp : tp;
    return {etp, tpRank % etp, tpRank / etp, tp / etp};
  }
  int64_t rowBegin(int64_t n) const { return share * n / shares; }
  int64_t rowEnd(int64_t n) const { return (share + 1) * n / shares; }
};

/// Whether a sparse module's experts are kept apart from its other
/// parameters, their gradients summed over their own expert-data-parallel
/// group (plan/Plan.h expertGroups) instead of DP x CP: split over ep > 1,
/// or cut over etp < tp TP ranks.
inline bool expertsApart(int64_t ep, int64_t etp, int64_t tp) {
  return ep > 1 || etp < tp;
}
/// The members of that group: the dp x cp / ep members at each of the
/// tp / etp TP ranks holding the same cut.
inline int64_t expertDataParallel(int64_t dpcp, int64_t ep, int64_t etp,
                                  int64_t tp) {
  return dpcp / ep * (tp / etp);
}

//===--- parameter names (within a layer's "layers.N." prefix) -----------===//

/// "router" [hidden, experts]: the router's weight (HF: mlp.gate).
inline const char *kMoeRouter = "router";
/// "experts.J.gate", ".up" [hidden, expertFfn] and ".down" [expertFfn,
/// hidden]: expert J's SwiGLU.
std::string moeExpertName(int64_t expert, const std::string &linear);
/// The expert parameter `local` ("layers.3.experts.5.up") belongs to (5),
/// or -1 for any other parameter.
int64_t moeExpertOf(const std::string &local);
/// "shared.gate", ".up", ".down": the shared expert; "shared_gate"
/// [hidden, 1] its sigmoid gate.
std::string moeSharedName(const std::string &linear);
inline const char *kMoeSharedGate = "shared_gate";

//===--- routing ---------------------------------------------------------===//

/// One token's route: its experts (the top-k by score, best first, ties to
/// the lower index) and their combine weights.
struct MoeRoute {
  std::vector<int32_t> experts;
  std::vector<float> weights;
};

/// What routing a microbatch's rows gives: each row's route, the router
/// probabilities (softmax; sigmoid scores normalised over the experts) and
/// the log-sum-exp of the logits, kept for the backward.
struct MoeRouting {
  int64_t rows = 0, experts = 0, topK = 0;
  std::vector<int32_t> choice; // [rows, topK]
  std::vector<float> weight;   // [rows, topK]
  std::vector<double> score;   // [rows, experts]: softmax or sigmoid
  std::vector<double> prob;    // [rows, experts]: the aux loss's P
  std::vector<double> lse;     // [rows]
  std::vector<float> logit;    // [rows, experts]: the z loss's softmax
};

/// Routes `rows` rows of router logits [rows, experts] (fp32).
MoeRouting routeTokens(const MoeConfig &moe, const float *logits, int64_t rows,
                       int64_t experts);

/// The statistics the losses need, summed over the real rows (`real[i]`:
/// a sample's token, not padding) of one rank; the all-reduce over the
/// microbatch's ranks sums them: [count_e (routed slots), sum of P_e, sum
/// of lse^2, real rows], 2·experts + 2 values.
std::vector<double> moeStatistics(const MoeRouting &routing,
                                  const std::vector<uint8_t> &real);

/// aux = experts · Σ_e f_e · P_e with f_e = count_e / (topK · N) and P_e =
/// sum P_e / N, and z = sum lse^2 / N, from the summed statistics (0 when
/// N is 0).
struct MoeLosses {
  double aux = 0, z = 0;
};
MoeLosses moeLosses(const MoeConfig &moe, const std::vector<double> &stats);

/// d(objective)/d(logits) [rows, experts] of this rank's rows: from the
/// combine weights' gradients `dweight` [rows, topK] (the experts'
/// outputs against the output's gradient), plus `auxScale` times the aux
/// loss's and `zScale` times the z loss's gradient (the microbatch's
/// statistics `stats`; padding rows take no loss gradient).
std::vector<float> moeRouterBackward(const MoeConfig &moe,
                                     const MoeRouting &routing,
                                     const std::vector<float> &dweight,
                                     const std::vector<uint8_t> &real,
                                     const std::vector<double> &stats,
                                     double auxScale, double zScale);

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_MOE_H
