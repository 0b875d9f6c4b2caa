//===- MoeMlp.h - A sparse layer's MLP: router, experts, shared -*- C++ -*-===//
//
// Internal to the model stages: the MLP of a sparse layer of the language
// model or an encoder (docs/model.md "Mixture of experts", family/Moe.h),
// in place of the dense MLP after the layer's second norm. Every rank of
// the module holds every expert (ep 1), each cut over TP as the dense
// MLP; every TP rank routes every row it computes (the router is whole),
// so the routes agree across TP by construction.
//
// Expert tensor parallelism (etp < tp; family/Moe.h ExpertTp): each
// expert is cut over etp TP ranks only, and the tp / etp TP ranks holding
// the same cut each run the experts on their own share of the rows (a
// contiguous range of them), y's other rows and their combine weights'
// gradients zero there: the TP sums after make them whole, as they do
// the cut's partial sums. The experts' weight gradients are then partial
// over those TP ranks too (summed over the edp group, which spans them).
//
// Forward: logits = h · W_router (fp32), routed on the host (family/Moe.h
// routeTokens: a few values a row), the microbatch's routing statistics
// summed over the module's DP x CP group (the aux loss's f and P cover the
// whole global microbatch, whatever the layout), each expert's rows
// gathered, its SwiGLU run as the dense MLP's GEMMs, and the outputs added
// into y with their weights (y partial over TP, as the dense down
// projection's). The shared expert runs on every row, times sigmoid(h·g).
//
// Backward: each combine weight's gradient dy·o (a partial dot over TP,
// summed), the router's logits' gradient on the host (moeRouterBackward,
// the aux and z losses' included), then the experts' SwiGLU backward as
// the dense MLP's. The router's and the shared gate's input gradients are
// added on TP rank 0 alone: they are whole on every TP rank, and dh is
// summed over TP after.
//
// Expert parallelism (ep > 1; plan/Plan.h expertGroups): the rank holds
// experts [epRank·E/ep, (epRank+1)·E/ep). Each expert's rows go to the ep
// member holding it and its outputs come back, by point-to-point messages
// over the ep group whose sizes every member learns first (the counts of
// rows per expert, exchanged before the rows); in the backward the output
// gradients go and the input gradients come back the same way. A member
// runs each of its experts over the rows of every member at once, in ep
// order.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_MODEL_MOEMLP_H
#define MIMO_RUNTIME_MODEL_MOEMLP_H

#include "runtime/family/Moe.h"
#include "runtime/model/Model.h"

#include <functional>
#include <string>
#include <vector>

namespace mimo::exec {

/// What a sparse layer's forward keeps for its backward.
struct MoeCache {
  MoeRouting routing;
  std::vector<double> stats;
  std::vector<uint8_t> real;
  /// Per expert: its rows (host and device), their weights, and its
  /// SwiGLU's input, gate, up, activation and (fp32) output.
  struct Expert {
    /// Every row routed to it, ascending; of them the rank computes
    /// [ownBegin, ownEnd) (all but with experts cut over etp < tp TP
    /// ranks: its TP rank's share of the rows; family/Moe.h ExpertTp),
    /// which `deviceRows`, `weights` and the rest hold.
    std::vector<int64_t> rows;
    int64_t ownBegin = 0, ownEnd = 0;
    int64_t owned() const { return ownEnd - ownBegin; }
    Tensor deviceRows, weights, x, g, u, s, out;
  };
  std::vector<Expert> experts;
  /// Expert parallelism: the outputs each ep member sent back (experts'
  /// `out` view them); per local expert the rows each member sent
  /// (from[member][j]) and the SwiGLU's input, gate, up and activation over
  /// all of them (`local`).
  std::vector<Tensor> returned;
  std::vector<std::vector<int64_t>> from;
  std::vector<Expert> local;
  /// The shared expert (rows 0..n-1): its gate's sigmoid (also on the
  /// host), its SwiGLU (`shared`: g, u, s and out; its input is h).
  Tensor identity, sharedGate;
  std::vector<float> gate;
  Expert shared;
};

/// The parameters of one sparse layer, indices into the stage's list.
struct MoeParams {
  size_t router = 0;
  /// The rank's experts [first, first + gate.size()) (all without expert
  /// parallelism).
  int64_t first = 0;
  std::vector<size_t> gate, up, down;
  static constexpr size_t kNone = static_cast<size_t>(-1);
  size_t sharedGate = kNone, sharedW1 = kNone, sharedW3 = kNone,
         sharedW2 = kNone;

  /// The layer `prefix` ("layers.3.")'s, found by name through `indexOf`;
  /// of its experts the `ep` block `epRank`.
  static MoeParams of(const MoeConfig &moe, const std::string &prefix,
                      const std::function<size_t(const std::string &)> &indexOf,
                      int64_t ep = 1, int64_t epRank = 0);
  std::vector<size_t> all() const;
};

class MoeMlp {
public:
  MoeMlp(std::vector<Param> &params, const MoeConfig &moe, MoeParams indices,
         int64_t hidden, const StageContext &ctx);

  /// y [rows, hidden] fp32, partial over TP, of the normed input `h` (all
  /// the rank's rows, as the GEMMs read them); `real[i]`: row i is a
  /// sample's token. Adds the microbatch's weighted aux and z losses to
  /// `*auxLoss` (null: a recomputation, counted already).
  Tensor forward(MoeCache &c, const Tensor &h, int64_t rows,
                 const std::vector<uint8_t> &real, double *auxLoss);
  /// dh [rows, hidden] (fp32, partial over TP) += the MLP's input gradient
  /// from the output's fp32 gradient `dy` (all the rank's rows).
  void backward(MoeCache &c, const Tensor &h, const Tensor &dy, float *dh,
                int64_t rows);
  /// recompute "selective": the activations are dropped after the forward
  /// and made again in the backward.
  static void dropActivations(MoeCache &c);

private:
  /// Expert parallelism: the experts' outputs of y's rows through the ep
  /// group (forward), and dh's rows of their gradients (backward).
  void expertsAcross(MoeCache &c, const Tensor &h, Tensor &y);
  void expertsAcrossBackward(MoeCache &c, const Tensor &dy, float *dh);
  /// send[d] to ep member d and recv[d] from it (sizes agreed: the counts
  /// went first); this rank's own copied. Empty messages are not sent.
  void exchange(std::vector<Tensor> &send, std::vector<Tensor> &recv) const;
  /// To each member, our rows of `src` (times their weights when
  /// `weighted`) for its experts, expert by expert; returns what each
  /// member sent us.
  std::vector<Tensor> dispatch(MoeCache &c, const Tensor &src, bool weighted);
  /// Our expert `expert`'s rows of every member's message, in member order.
  Tensor fromMembers(const MoeCache &c, std::vector<Tensor> &recv,
                     int64_t expert);
  /// Our experts' fp32 results (in fromMembers' order) back to the members
  /// whose rows they are; returns ours, as dispatch sent them.
  std::vector<Tensor> toMembers(MoeCache &c, std::vector<Tensor> &results);
  /// Rows member `member` sent us for our experts before `expert`; rows we
  /// send member `member`.
  int64_t sentBefore(const MoeCache &c, int64_t member, int64_t expert) const;
  int64_t sentTo(const MoeCache &c, int64_t member) const;
  Tensor swiglu(const Tensor &g, const Tensor &u, int64_t n) const;
  /// One SwiGLU over x's n rows (weights w1, w3 [H, ffn], w2 [ffn, H]):
  /// gate, up and activation kept in `e` for the backward, the fp32 output
  /// returned.
  Tensor expertForward(MoeCache::Expert &e, const Tensor &x, size_t w1,
                       size_t w3, size_t w2, int64_t n, int64_t ffn);
  /// One SwiGLU's backward: ds = dout·W2^T, the three weight gradients,
  /// dx (fp32 [n, hidden]) = dg·W1^T + du·W3^T.
  Tensor expertBackward(const Tensor &x, const Tensor &g, const Tensor &u,
                        const Tensor &s, const Tensor &dout, size_t w1,
                        size_t w3, size_t w2, int64_t n, int64_t ffn);
  device::Bf16Operand P(size_t i) const { return params[i].weight(); }
  float *WG(size_t i) {
    return params[i].frozen ? nullptr : params[i].grad.data();
  }

  std::vector<Param> &params;
  MoeConfig moe;
  MoeParams p;
  int64_t H, Fe, Fs;
  const StageContext &ctx;
};

} // namespace mimo::exec

#endif // MIMO_RUNTIME_MODEL_MOEMLP_H
