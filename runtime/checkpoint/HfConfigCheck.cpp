//===- HfConfigCheck.cpp - config.json against a module's arch ------------===//
//
// docs/pretrained.md: every disagreement between a Hugging Face folder's
// config.json and the module's `arch`, at the arch key's pointer with
// config.json's pointer in the message and the fix; and what the folder's
// model computes that mimo does not. The module's family checks its part
// of config.json (ModuleFamily::hfCheck); this file finds the part and
// checks LLaVA's own keys around a vision tower.
//
//===----------------------------------------------------------------------===//

#include "runtime/checkpoint/HfWeights.h"

#include "runtime/json/JsonReader.h"

namespace mimo::exec {

using nlohmann::json;

namespace {

/// LLaVA's keys around the tower (a LLaVA folder, or mimo's export of an
/// encoder) against an encoder's arch.
void llavaProblems(const HfFolder &folder, const ModuleConfig &module,
                   std::vector<Diagnostic> &problems) {
  const std::string top = folder.config.contains("model_type") &&
                                  folder.config["model_type"].is_string()
                              ? folder.config["model_type"].get<std::string>()
                              : "";
  ConfigCheck l{folder.config,
                "",
                folder.configPath,
                module.pointer + "/arch/",
                problems,
                module.pointer,
                top};
  const bool llava = top == "llava";
  if (llava && module.finalNorm)
    l.problem("final_norm", "LLaVA takes the tower's hidden states before its "
                            "post_layernorm: set arch.final_norm to false");
  if (l.has("vision_feature_layer") || llava) {
    if (l.has("vision_feature_layer") &&
        !l.c["vision_feature_layer"].is_number_integer())
      l.problem("output_layer",
                l.where("vision_feature_layer") + " is " +
                    briefJson(l.c["vision_feature_layer"]) +
                    ": mimo's encoder passes on one layer's output");
    else
      l.size("output_layer", "vision_feature_layer", module.outputLayer, -2);
  }
  if (l.has("vision_feature_select_strategy") || llava) {
    const std::string strategy =
        l.text("vision_feature_select_strategy", "default");
    // "default" drops the first row (CLIP's class token), "full" none.
    if (strategy != "default" && strategy != "full")
      l.problem("class_token", l.where("vision_feature_select_strategy") +
                                   " is '" + strategy +
                                   "', which mimo does not compute");
    else if ((strategy == "default") != module.classToken)
      l.problem("class_token",
                l.where("vision_feature_select_strategy") + " is '" + strategy +
                    "': LLaVA " +
                    (strategy == "default" ? "drops the first row"
                                           : "keeps every row") +
                    ", and this encoder " +
                    (module.classToken ? "has a class token it drops"
                                       : "has no class token") +
                    "; the tower and the strategy disagree");
  }
  if (!folder.layout.projector.empty()) {
    const std::string pact = l.text("projector_hidden_act", "gelu");
    l.choice("projector_activation", "projector_hidden_act",
             module.projectorActivation,
             pact == "quick_gelu" ? "" : mimoActivationName(pact), pact,
             "gelu and gelu_pytorch_tanh");
    if (!l.boolean("multimodal_projector_bias", true))
      l.problem("projector", l.where("multimodal_projector_bias") +
                                 " is false: mimo's projector has biases");
  }
}

} // namespace

std::vector<Diagnostic> hfConfigProblems(const HfFolder &folder,
                                         const ModuleConfig &module,
                                         int64_t seqLength) {
  std::vector<Diagnostic> problems;
  const std::string top = folder.config.contains("model_type") &&
                                  folder.config["model_type"].is_string()
                              ? folder.config["model_type"].get<std::string>()
                              : "";
  if (module.kind == ModuleKind::Language) {
    ConfigCheck k{folder.text,
                  folder.textPointer,
                  folder.configPath,
                  module.pointer + "/arch/",
                  problems,
                  module.pointer,
                  ""};
    module.family().hfCheck(k, module, seqLength);
    return problems;
  }
  if (folder.vision.is_null()) {
    problems.push_back(Diagnostic::error(
        module.pointer + "/init/from",
        folder.configPath +
            " describes no vision tower (no vision_config, and no "
            "clip_vision_model or siglip_vision_model model_type): an "
            "encoder reads a CLIP, SigLIP or LLaVA folder"));
    return problems;
  }
  ConfigCheck k{folder.vision,
                folder.visionPointer,
                folder.configPath,
                module.pointer + "/arch/",
                problems,
                module.pointer,
                top};
  // A tower of another family, or one too broken to check, says so
  // alone; else LLaVA's keys are checked too.
  if (module.family().hfCheck(k, module, seqLength))
    llavaProblems(folder, module, problems);
  return problems;
}

} // namespace mimo::exec
