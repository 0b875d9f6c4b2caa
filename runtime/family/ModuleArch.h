//===- ModuleArch.h - A module's architecture -------------------*- C++ -*-===//
//
// docs/model-json.md `modules/N/arch`: what a module computes, apart from
// how it is laid out and trained. ModuleConfig (config/ModelConfig.h) is a
// ModuleArch with the rest of the module's entry; the module families
// (family/ModuleFamily.h) read only this part.
//
//===----------------------------------------------------------------------===//
#ifndef MIMO_RUNTIME_FAMILY_MODULEARCH_H
#define MIMO_RUNTIME_FAMILY_MODULEARCH_H

#include "runtime/family/Moe.h"

#include <cstdint>
#include <optional>
#include <string>

namespace mimo {

enum class ModuleKind { Encoder, Language };

class ModuleFamily;

/// docs/model-json.md `rope_scaling`: Llama 3.1's ("llama3").
struct RopeScaling {
  double factor = 8.0, lowFreqFactor = 1.0, highFreqFactor = 4.0;
  double originalMaxPositions = 8192;
};

struct ModuleArch {
  ModuleKind kind = ModuleKind::Encoder;
  /// featureDim is the encoder's input feature size, vocabSize the
  /// language vocabulary; the other is 0.
  int64_t featureDim = 0, vocabSize = 0;
  int64_t hiddenSize = 0, numLayers = 0, numHeads = 0, ffnHiddenSize = 0;
  /// docs/model-json.md `num_query_groups` (language): the key and value
  /// heads (GQA; numHeads when absent: plain multi-head attention).
  int64_t numQueryGroups = 0;
  /// `head_dim` (language; Hugging Face's `head_dim`, Megatron's
  /// `kv_channels`): each attention head's width when it is not
  /// hidden_size / num_heads (Qwen3's 0.6B, 4B and 30B-A3B); 0: that.
  int64_t headDimKey = 0;
  /// `rope_theta` and `rope_scaling` (language): RoPE's base and Llama
  /// 3.1's rescaling of its frequencies.
  double ropeTheta = 10000.0;
  std::optional<RopeScaling> ropeScaling;
  /// `norm_eps`: the ε of every norm of the module.
  double normEps = 1e-5;
  /// `qkv_bias` (language: Qwen2's biases on q, k and v) and `bias`
  /// (encoder: CLIP's and SigLIP's on q, k, v, o, fc1 and fc2).
  bool qkvBias = false, bias = false;
  /// `tie_embeddings` (language): the head is the embedding's transpose.
  bool tieEmbeddings = false;
  /// `qk_norm` (language): Qwen3's per-head RMSNorm of q and k (weights
  /// [head_dim]) after their projection, before RoPE.
  bool qkNorm = false;
  /// `moe` (language): the sparse layers' experts and router
  /// (family/Moe.h); experts 0 without.
  MoeConfig moe;
  /// Encoders, the ViT family (docs/model-json.md): learned position
  /// embeddings (`position_embeddings` "learned", a table of maxPositions
  /// rows), CLIP's LayerNorm before the layers (`pre_norm`), SigLIP's
  /// after them (`final_norm`), CLIP's class token (dropped from the
  /// output), the patch embedding's bias (`patch_bias`), the layer whose
  /// output is taken (`output_layer`: -1 the last; later layers are not
  /// computed) and the projector (`projector` "mlp2x_gelu" or "linear").
  bool learnedPositions = false;
  int64_t maxPositions = 0;
  bool preNorm = false, finalNorm = false, classToken = false, patchBias = true;
  int64_t outputLayer = -1;
  bool linearProjector = false;
  /// `activation` of an encoder's MLP ("gelu_tanh", "gelu" exact,
  /// "quick_gelu") and `projector_activation` ("gelu_tanh", "gelu").
  std::string activation = "gelu_tanh", projectorActivation = "gelu_tanh";
  /// `family`: the module family model.json names (nullptr: none named,
  /// family() infers it from the keys).
  const ModuleFamily *namedFamily = nullptr;

  /// The module's family: the named one, else the built-in family whose
  /// structure the keys have (family/ModuleFamily.h inferFamily).
  const ModuleFamily &family() const;
  /// The layers computed: numLayers, less those after output_layer.
  int64_t layers() const { return numLayers + outputLayer + 1; }
  /// The key/value heads (numQueryGroups, else numHeads) and their width.
  int64_t kvHeads() const {
    return numQueryGroups > 0 ? numQueryGroups : numHeads;
  }
  bool hasMoe() const { return moe.experts > 0; }
  /// Each attention head's width: head_dim, else hidden_size / num_heads.
  int64_t headDim() const {
    return headDimKey > 0 ? headDimKey
                          : (numHeads > 0 ? hiddenSize / numHeads : hiddenSize);
  }
  /// The queries' and the attention output's width (num_heads x
  /// headDim(): wq's output, wo's input), and the keys' and values'.
  int64_t attentionWidth() const {
    return numHeads > 0 ? numHeads * headDim() : hiddenSize;
  }
  int64_t kvHidden() const {
    return numHeads > 0 ? kvHeads() * headDim() : hiddenSize;
  }
};

} // namespace mimo

#endif // MIMO_RUNTIME_FAMILY_MODULEARCH_H
