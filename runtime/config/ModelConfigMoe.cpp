//===- ModelConfigMoe.cpp - model.json's arch.moe -------------------------===//
//
// docs/model-json.md `modules/N/arch/moe` (family/Moe.h) and the expert
// grid's `parallel.ep` / `etp`.
//
//===----------------------------------------------------------------------===//

#include "runtime/config/ModelConfigParse.h"

#include "runtime/json/JsonReader.h"
#include "runtime/support/Limits.h"

#include <algorithm>
#include <cmath>

namespace mimo::detail {

using nlohmann::json;

void parseMoe(JsonValidator &v, const json &arch, const std::string &at,
              ModuleConfig &module) {
  const json *moe =
      v.member(arch, at, "moe", false, "the sparse layers' experts and router");
  const std::string here = at + "/moe";
  if (!moe || !v.object(*moe, here, modelJsonKeys("/modules/N/arch/moe"),
                        "an arch.moe object"))
    return;
  MoeConfig config;
  if (auto n = v.integer(*moe, here, "num_experts", true, 1,
                         "the experts of each sparse layer", 4096))
    config.experts = *n;
  if (auto k = v.integer(*moe, here, "top_k", true, 1,
                         "the experts each token goes to", 4096)) {
    config.topK = *k;
    if (config.experts > 0 && *k > config.experts)
      v.error(here + "/top_k", "expected top_k at most num_experts " +
                                   std::to_string(config.experts) + ", found " +
                                   std::to_string(*k));
  }
  if (auto f = v.integer(*moe, here, "expert_ffn_hidden_size", false, 1,
                         "each expert's SwiGLU width", kMaxFfnWidth))
    config.expertFfn = *f;
  else if (!moe->contains("expert_ffn_hidden_size"))
    config.expertFfn = module.ffnHiddenSize;
  if (auto f = v.integer(*moe, here, "shared_expert_ffn_hidden_size", false, 0,
                         "the shared expert's width (0: none)", kMaxFfnWidth))
    config.sharedFfn = *f;
  if (auto gate = v.boolean(*moe, here, "shared_expert_gate",
                            "the shared expert's sigmoid gate")) {
    config.sharedGate = *gate;
    if (*gate && config.sharedFfn == 0)
      v.error(here + "/shared_expert_gate",
              "a gate on a shared expert, and there is none: set "
              "shared_expert_ffn_hidden_size, or remove shared_expert_gate");
  }
  if (const json *layers =
          v.member(*moe, here, "layers", false, "which layers are sparse")) {
    const std::string layersAt = here + "/layers";
    if (layers->is_string() && layers->get<std::string>() == "all") {
      config.allLayers = true;
    } else if (layers->is_array() && !layers->empty()) {
      config.allLayers = false;
      for (size_t i = 0; i < layers->size(); ++i) {
        const json &l = (*layers)[i];
        const std::string itemAt = layersAt + "/" + std::to_string(i);
        if (!l.is_number_integer() || l.get<int64_t>() < 0 ||
            (module.numLayers > 0 && l.get<int64_t>() >= module.numLayers)) {
          v.error(itemAt, "expected a layer index from 0 to " +
                              (module.numLayers > 0
                                   ? std::to_string(module.numLayers - 1)
                                   : std::string("num_layers - 1")) +
                              ", found " + briefJson(l));
          continue;
        }
        const int64_t layer = l.get<int64_t>();
        if (std::find(config.layers.begin(), config.layers.end(), layer) !=
            config.layers.end())
          v.error(itemAt, "layer " + std::to_string(layer) +
                              " is listed twice; list each sparse layer once");
        else
          config.layers.push_back(layer);
      }
      std::sort(config.layers.begin(), config.layers.end());
    } else {
      v.error(layersAt, "expected \"all\" or a non-empty array of layer "
                        "indices, found " +
                            describeJson(*layers) +
                            "; Hugging Face's mlp_only_layers are the dense "
                            "ones: list the others");
    }
  }
  const std::string routerAt = here + "/router";
  if (const json *router =
          v.member(*moe, here, "router", false, "how tokens are routed");
      router &&
      v.object(*router, routerAt, modelJsonKeys("/modules/N/arch/moe/router"),
               "an arch.moe.router object")) {
    if (auto score = v.choice(*router, routerAt, "score", false,
                              {"softmax", "sigmoid"}, "the router's scores"))
      config.router.sigmoid = *score == "sigmoid";
    if (auto norm = v.boolean(*router, routerAt, "norm_topk",
                              "the top-k weights divided by their sum"))
      config.router.normTopk = *norm;
    if (auto c = v.number(*router, routerAt, "aux_loss_coef", 0, false, 1e6,
                          false, "the load-balancing loss's coefficient"))
      config.router.auxLossCoef = *c;
    if (auto c = v.number(*router, routerAt, "z_loss_coef", 0, false, 1e6,
                          false, "the router z-loss's coefficient"))
      config.router.zLossCoef = *c;
  }
  module.moe = config;
}

void parseExpertGrid(JsonValidator &v, const json &moduleJson,
                     ModuleConfig &module) {
  const std::string at = module.pointer + "/parallel";
  const bool moe = module.hasMoe();
  const int64_t tp = module.parallel.tp;
  // The experts are cut over etp of the TP ranks (tp by default), the
  // shared expert over TP as the dense MLP is.
  auto grid = moduleJson.find("parallel");
  if (grid != moduleJson.end() && grid->is_object())
    if (auto etp =
            v.integer(*grid, at, "etp", false, 1,
                      "the tensor-parallel size of the experts", kMaxRanks)) {
      if (!moe && *etp != tp)
        v.error(at + "/etp", "module '" + module.name +
                                 "' has no experts to cut: remove etp, or "
                                 "add arch.moe");
      else if (tp % *etp != 0)
        v.error(at + "/etp",
                "etp " + std::to_string(*etp) + " does not divide tp " +
                    std::to_string(tp) + " of module '" + module.name +
                    "': each expert is cut over etp of the TP ranks, its "
                    "rows shared among tp / etp of them; use an etp that "
                    "divides " +
                    std::to_string(tp));
      else if (moe && *etp != tp)
        module.parallel.etp = *etp;
    }
  const int64_t etp = module.parallel.expertTp();
  if (moe && etp > 0 && module.moe.expertFfn % etp != 0)
    v.error(at + (module.parallel.etp > 0 ? "/etp" : "/tp"),
            "expert_ffn_hidden_size " + std::to_string(module.moe.expertFfn) +
                " of module '" + module.name + "' is not divisible by " +
                (module.parallel.etp > 0 ? "etp " : "tp ") +
                std::to_string(etp) +
                "; use one that divides it (each expert is cut over etp TP "
                "ranks, tp unless etp says)");
  if (moe && tp > 0 && module.moe.sharedFfn % tp != 0)
    v.error(at + "/tp", "shared_expert_ffn_hidden_size " +
                            std::to_string(module.moe.sharedFfn) +
                            " of module '" + module.name +
                            "' is not divisible by tp " + std::to_string(tp) +
                            "; use a tp that divides it (the shared expert "
                            "is cut over TP as the dense MLP)");
  // LoRA adapts no expert (docs/model.md "LoRA"): targeting the MLP of a
  // model whose every layer is sparse adapts nothing.
  if (moe && module.lora && module.layers() > 0 &&
      module.moe.sparseLayers(module.layers()) == module.layers())
    for (const char *mlp : {"gate", "up", "down", "fc1", "fc2"})
      if (module.lora->hasTarget(mlp)) {
        v.error(module.pointer + "/lora/targets",
                std::string("targets \"") + mlp +
                    "\", and every layer of module '" + module.name +
                    "' is sparse: its experts take no adapters in this "
                    "version; target q, k, v and o");
        break;
      }
  if (grid == moduleJson.end() || !grid->is_object())
    return;
  if (auto ep = v.integer(*grid, at, "ep", false, 1,
                          "the ranks the experts are split over", kMaxRanks)) {
    const ParallelConfig &p = module.parallel;
    const int64_t dpcp = p.dp * p.cp;
    if (!moe && *ep > 1)
      v.error(at + "/ep", "module '" + module.name +
                              "' has no experts to split: remove ep, or add "
                              "arch.moe");
    else if (*ep > 1 && module.moe.experts % *ep != 0)
      v.error(at + "/ep", "ep " + std::to_string(*ep) +
                              " does not divide num_experts " +
                              std::to_string(module.moe.experts) +
                              "; each ep rank holds num_experts / ep experts");
    else if (*ep > 1 && dpcp % *ep != 0)
      v.error(at + "/ep",
              "ep " + std::to_string(*ep) + " does not divide dp x cp " +
                  std::to_string(dpcp) + " of module '" + module.name +
                  "': the experts are split over members of the DP x CP "
                  "group (Megatron's expert_model_parallel_size); use an ep "
                  "that divides " +
                  std::to_string(dpcp));
    else
      module.parallel.ep = *ep;
  }
}

} // namespace mimo::detail
