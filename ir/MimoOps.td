//===- MimoOps.td - The model-graph ops of the mimo dialect -*- tablegen -*-===//

#ifndef MIMO_OPS_TD
#define MIMO_OPS_TD

include "ir/MimoDialect.td"
include "ir/MimoAttrs.td"
include "mlir/IR/SymbolInterfaces.td"
include "mlir/IR/BuiltinAttributes.td"
include "mlir/IR/CommonAttrConstraints.td"
include "mlir/Interfaces/SideEffectInterfaces.td"

class Mimo_Op<string mnemonic, list<Trait> traits = []>
    : Op<Mimo_Dialect, mnemonic, traits>;

def Mimo_ModelOp : Mimo_Op<"model", [IsolatedFromAbove, Symbol, SymbolTable,
                                     SingleBlock]> {
  let summary = "one multimodal model and its training step";
  let description = [{
    Holds the model graph: grids, the data source and microbatch, encoders,
    the language module, and ends with `mimo.train`. `mimo-assign-grids`
    sets `layout` ("colocated" or "non_colocated") and `world_size`.

    ```mlir
    mimo.model @vlm attributes {version = 1 : i64, seed = 1234 : i64,
                                precision = "fp32"} {
      ...
      mimo.train %loss {...}
    }
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, I64Attr:$version,
                       I64Attr:$seed, StrAttr:$precision,
                       OptionalAttr<I64Attr>:$world_size,
                       OptionalAttr<StrAttr>:$layout);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$sym_name attr-dict-with-keyword $body";
  let hasVerifier = 1;
  let hasRegionVerifier = 1;
  let extraClassDeclaration = [{
    /// The single language module (null if the model is malformed).
    LanguageOp getLanguage();
    /// Encoders in model order.
    ::llvm::SmallVector<EncoderOp> getEncoders();
    MicrobatchOp getMicrobatch();
  }];
}

def Mimo_GridOp : Mimo_Op<"grid", [Pure]> {
  let summary = "a module's parallel grid and rank span";
  let description = [{
    `mimo-assign-grids` adds `span = array<i64: begin, end>`, the global
    ranks the grid covers.

    ```mlir
    %grid = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1,
        rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
    ```
  }];
  let arguments = (ins Mimo_ParallelAttr:$parallel,
                       OptionalAttr<DenseI64ArrayAttr>:$span);
  let results = (outs Mimo_GridType:$grid);
  let assemblyFormat = "$parallel attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mimo::Grid getGridArithmetic() { return getParallel().getGrid(); }
  }];
}

def Mimo_DataSourceOp : Mimo_Op<"data_source", [Pure]> {
  let summary = "where samples come from: synthetic or a jsonl file";
  let description = [{
    `source` is "synthetic" (deterministic from the seed; `tokens_per_sample`
    maps each modality to its `[min, max]` token count per sample) or "jsonl"
    (`path`, relative to model.json).

    ```mlir
    %source = mimo.data_source "synthetic" {
        tokens_per_sample = {images = array<i64: 0, 24>},
        text_only_fraction = 0.0 : f64}
    ```
  }];
  let arguments = (ins StrAttr:$source, OptionalAttr<StrAttr>:$path,
                       OptionalAttr<DictionaryAttr>:$tokens_per_sample,
                       OptionalAttr<F64Attr>:$text_only_fraction);
  let results = (outs Mimo_SourceType:$samples);
  let assemblyFormat = "$source attr-dict";
  let hasVerifier = 1;
}

def Mimo_MicrobatchOp : Mimo_Op<"microbatch", [Pure]> {
  let summary = "the global microbatch every module slices its samples from";
  let description = [{
    `micro_batch_size` is global (all data-parallel lanes of every module);
    `seq_length` includes modality tokens.

    ```mlir
    %batch = mimo.microbatch %source {micro_batch_size = 8 : i64,
        num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false,
        attention_mask = "causal"}
    ```
  }];
  let arguments = (ins Mimo_SourceType:$source, I64Attr:$micro_batch_size,
                       I64Attr:$num_microbatches, I64Attr:$seq_length,
                       BoolAttr:$packing, StrAttr:$attention_mask);
  let results = (outs Mimo_BatchType:$batch);
  let assemblyFormat = "$source attr-dict";
  let hasVerifier = 1;
}

def Mimo_EncoderOp : Mimo_Op<"encoder", [Symbol, HasParent<"ModelOp">]> {
  let summary = "a modality encoder on its own grid";
  let description = [{
    Embeds the features of its modality's samples and projects them to the
    language hidden size, giving a sample-major token list. The symbol name
    is the modality name; `special_token_id` marks its positions in input_ids.

    ```mlir
    %images = mimo.encoder @images(%batch) on %grid {special_token_id = 1000 : i64,
        arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64,
                                  num_layers = 2, num_heads = 4,
                                  ffn_hidden_size = 256>} : !mimo.tokens<128>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Mimo_BatchType:$batch,
                       Mimo_GridType:$grid, I64Attr:$special_token_id,
                       Mimo_EncoderArchAttr:$arch);
  let results = (outs Mimo_TokensType:$output);
  let assemblyFormat = [{
    $sym_name `(` $batch `)` `on` $grid attr-dict `:` type($output)
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The grid this module runs on (null for a malformed graph).
    GridOp getGridOp();
  }];
}

def Mimo_LanguageOp : Mimo_Op<"language", [Symbol, HasParent<"ModelOp">]> {
  let summary = "the language module on its own grid";
  let description = [{
    Embeds the text tokens, places each modality's token rows at its
    special-token positions (`modalities[i]` names `modality_inputs[i]`),
    runs the causal transformer and returns the masked cross-entropy.

    ```mlir
    %loss = mimo.language @language(%batch, %images : !mimo.tokens<128>)
        on %grid {modalities = ["images"],
                  arch = #mimo.language_arch<vocab_size = 1024, ...>}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Mimo_BatchType:$batch,
                       Variadic<Mimo_TokensType>:$modality_inputs,
                       Mimo_GridType:$grid, StrArrayAttr:$modalities,
                       Mimo_LanguageArchAttr:$arch);
  let results = (outs Mimo_LossType:$loss);
  let assemblyFormat = [{
    $sym_name `(` $batch (`,` $modality_inputs^ `:` type($modality_inputs))? `)`
    `on` $grid attr-dict
  }];
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    /// The grid this module runs on (null for a malformed graph).
    GridOp getGridOp();
  }];
}

def Mimo_TrainOp : Mimo_Op<"train", [Terminator, HasParent<"ModelOp">]> {
  let summary = "minimise the loss with the optimizer";
  let description = [{
    Ends a model: gradients of the loss are reduced over each module's
    data-parallel group, clipped by global norm (`clip_grad`, 0 disables),
    and applied by AdamW for `steps` optimizer steps.

    ```mlir
    mimo.train %loss {steps = 10 : i64, optimizer = "adamw", lr = 1.0e-03 : f64,
        betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64,
        weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
    ```
  }];
  let arguments = (ins Mimo_LossType:$loss, I64Attr:$steps, StrAttr:$optimizer,
                       F64Attr:$lr, DenseF64ArrayAttr:$betas, F64Attr:$eps,
                       F64Attr:$weight_decay, F64Attr:$clip_grad);
  let assemblyFormat = "$loss attr-dict";
  let hasVerifier = 1;
}

#endif // MIMO_OPS_TD
