//===- MimoAttrs.td - Parallel and architecture attributes -*- tablegen -*-===//

#ifndef MIMO_ATTRS_TD
#define MIMO_ATTRS_TD

include "ir/MimoDialect.td"
include "mlir/IR/EnumAttr.td"

//===----------------------------------------------------------------------===//
// Enumerations: each choice the passes record is one of a closed set, printed
// as #mimo<bridge_mode fan_in>, never a free string.
//===----------------------------------------------------------------------===//

def Mimo_BridgeModeEnum : I32EnumAttr<"BridgeModeKind",
    "how the data-parallel lanes of a bridge's two sides meet", [
      I32EnumAttrCase<"FanIn", 0, "fan_in">,
      I32EnumAttrCase<"FanOut", 1, "fan_out">,
      I32EnumAttrCase<"OneToOne", 2, "one_to_one">,
      I32EnumAttrCase<"Colocated", 3, "colocated">]> {
  let cppNamespace = "::mimo::ir";
  let genSpecializedAttr = 0;
}
def Mimo_BridgeModeAttr : EnumAttr<Mimo_Dialect, Mimo_BridgeModeEnum,
                                   "bridge_mode">;

def Mimo_ColocatedDirectionEnum : I32EnumAttr<"ColocatedDirection",
    "a colocated bridge: encoder lanes gathered into fewer language lanes, "
    "narrowed into more, or equal", [
      I32EnumAttrCase<"FanIn", 0, "fan_in">,
      I32EnumAttrCase<"FanOut", 1, "fan_out">,
      I32EnumAttrCase<"Equal", 2, "equal">]> {
  let cppNamespace = "::mimo::ir";
  let genSpecializedAttr = 0;
}
def Mimo_ColocatedDirectionAttr : EnumAttr<Mimo_Dialect,
    Mimo_ColocatedDirectionEnum, "colocated_direction">;

def Mimo_LayoutEnum : I32EnumAttr<"LayoutKind",
    "whether the modules share their ranks", [
      I32EnumAttrCase<"Colocated", 0, "colocated">,
      I32EnumAttrCase<"NonColocated", 1, "non_colocated">]> {
  let cppNamespace = "::mimo::ir";
  let genSpecializedAttr = 0;
}
def Mimo_LayoutAttr : EnumAttr<Mimo_Dialect, Mimo_LayoutEnum, "layout">;

def Mimo_AttentionMaskEnum : I32EnumAttr<"AttentionMaskKind",
    "the language model's attention mask", [
      I32EnumAttrCase<"Causal", 0, "causal">,
      I32EnumAttrCase<"Dense", 1, "dense">]> {
  let cppNamespace = "::mimo::ir";
  let genSpecializedAttr = 0;
}
def Mimo_AttentionMaskAttr : EnumAttr<Mimo_Dialect, Mimo_AttentionMaskEnum,
                                      "attention_mask">;

class Mimo_Attr<string name, string attrMnemonic, list<Trait> traits = []>
    : AttrDef<Mimo_Dialect, name, traits> {
  let mnemonic = attrMnemonic;
}

def Mimo_ParallelAttr : Mimo_Attr<"Parallel", "parallel"> {
  let summary = "a module's TP/CP/PP/DP grid and rank placement";
  let description = [{
    `order` names the dimensions from fastest- to slowest-varying rank, joined
    by dashes (Megatron's `order="tp-cp-dp-pp"` convention). The module spans
    ranks `[rank_offset, rank_offset + tp·cp·pp·dp)`.

    ```mlir
    #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4,
                   order = "tp-cp-dp-pp", sequence_parallel = true>
    ```
  }];
  let parameters = (ins "int64_t":$tp, "int64_t":$cp, "int64_t":$pp,
                        "int64_t":$dp, "int64_t":$rank_offset,
                        StringRefParameter<"dimension order">:$order,
                        "::mlir::BoolAttr":$sequence_parallel);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
  let extraClassDeclaration = [{
    /// The grid arithmetic of this configuration (order must be valid).
    ::mimo::Grid getGrid() const;
    bool isSequenceParallel() const {
      return getSequenceParallel().getValue();
    }
  }];
}

def Mimo_EncoderArchAttr : Mimo_Attr<"EncoderArch", "encoder_arch"> {
  let summary = "an encoder: patch embedding, transformer layers, projection";
  let parameters = (ins "int64_t":$feature_dim, "int64_t":$hidden_size,
                        "int64_t":$num_layers, "int64_t":$num_heads,
                        "int64_t":$ffn_hidden_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

def Mimo_LanguageArchAttr : Mimo_Attr<"LanguageArch", "language_arch"> {
  let summary = "the language model: embedding, RMSNorm/RoPE/SwiGLU layers, head";
  let parameters = (ins "int64_t":$vocab_size, "int64_t":$hidden_size,
                        "int64_t":$num_layers, "int64_t":$num_heads,
                        "int64_t":$ffn_hidden_size);
  let assemblyFormat = "`<` struct(params) `>`";
  let genVerifyDecl = 1;
}

#endif // MIMO_ATTRS_TD
