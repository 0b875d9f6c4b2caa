//===- MimoAttrs.td - Parallel and architecture attributes -*- tablegen -*-===//

#ifndef MIMO_ATTRS_TD
#define MIMO_ATTRS_TD

include "ir/MimoDialect.td"

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
