//===- MimoDialect.td - The mimo dialect and its types -----*- tablegen -*-===//

#ifndef MIMO_DIALECT_TD
#define MIMO_DIALECT_TD

include "mlir/IR/OpBase.td"
include "mlir/IR/AttrTypeBase.td"

def Mimo_Dialect : Dialect {
  let name = "mimo";
  let cppNamespace = "::mimo::ir";
  let summary = "Multimodal models whose modules each run on their own grid";
  let description = [{
    The `mimo` dialect describes a multimodal training step as a dataflow
    graph: a data source yields the global microbatch, encoders turn their
    modality's features into token lists, and the language module embeds
    text, places the modality tokens at their special-token positions and
    computes the loss. Every module owns a `mimo.grid` (TP, CP, DP, PP and a
    rank span); passes insert the communication that different grids need.
    Every op's location points into model.json.
  }];
  let useDefaultTypePrinterParser = 1;
  let useDefaultAttributePrinterParser = 1;
}

class Mimo_Type<string name, string typeMnemonic, list<Trait> traits = []>
    : TypeDef<Mimo_Dialect, name, traits> {
  let mnemonic = typeMnemonic;
}

def Mimo_GridType : Mimo_Type<"Grid", "grid"> {
  let summary = "a module's parallel grid";
}

def Mimo_SourceType : Mimo_Type<"Source", "source"> {
  let summary = "a deterministic stream of samples";
}

def Mimo_BatchType : Mimo_Type<"Batch", "batch"> {
  let summary = "a global microbatch: input ids [B,S] and modality features";
}

def Mimo_TokensType : Mimo_Type<"Tokens", "tokens"> {
  let summary = "a sample-major token list [N, hidden_size]";
  let description = [{
    Rows of sample 0 first, in token order, then sample 1, and so on, so that
    contiguous splits fall on sample boundaries. `N` varies per microbatch.
  }];
  let parameters = (ins "int64_t":$hidden_size);
  let assemblyFormat = "`<` $hidden_size `>`";
  let genVerifyDecl = 1;
}

def Mimo_SplitSizesType : Mimo_Type<"SplitSizes", "split_sizes"> {
  let summary = "per-sample modality-token counts of a global microbatch";
  let description = [{
    One count per sample: the positions whose input id is the modality's
    special token id. Both ends of a bridge derive it from the same global
    microbatch, so pieces are cut at sample boundaries without a shape
    handshake, in both directions.
  }];
}

def Mimo_HiddenType : Mimo_Type<"Hidden", "hidden"> {
  let summary = "language hidden states [S, B, H] (sequence first)";
  let parameters = (ins "int64_t":$hidden_size);
  let assemblyFormat = "`<` $hidden_size `>`";
}

def Mimo_TargetsType : Mimo_Type<"Targets", "targets"> {
  let summary = "next-token labels and the loss mask, [B, S] each";
}

def Mimo_LossType : Mimo_Type<"Loss", "loss"> {
  let summary = "the masked cross-entropy of a step";
}

#endif // MIMO_DIALECT_TD
