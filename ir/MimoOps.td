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
                       OptionalAttr<Mimo_LayoutAttr>:$layout,
                       OptionalAttr<I64Attr>:$total_stages);
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
    ranks the grid covers. `pipeline_layers` (model.json's, as computed:
    an encoder's cut at its output layer) gives each pipeline stage's
    layers, first to last; without it each stage holds num_layers / pp.

    ```mlir
    %grid = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1,
        rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
    ```
  }];
  let arguments = (ins Mimo_ParallelAttr:$parallel,
                       OptionalAttr<DenseI64ArrayAttr>:$span,
                       OptionalAttr<DenseI64ArrayAttr>:$pipeline_layers);
  let results = (outs Mimo_GridType:$grid);
  let assemblyFormat = "$parallel attr-dict";
  let hasVerifier = 1;
  let extraClassDeclaration = [{
    ::mimo::Grid getGridArithmetic() { return getParallel().getGrid(); }
  }];
}

def Mimo_DataSourceOp : Mimo_Op<"data_source", [Pure]> {
  let summary = "where samples come from: synthetic, a jsonl file or an indexed dataset";
  let description = [{
    `source` is "synthetic" (deterministic from the seed; `tokens_per_sample`
    maps each modality to its `[min, max]` token count per sample), "jsonl"
    (`path`: the file) or "indexed" (`path`: the PREFIX of Megatron's
    PREFIX.bin / PREFIX.idx); file paths as mimoc resolved them.

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
        attention_mask = #mimo<attention_mask causal>}
    ```

    `schedule = "zero_bubble"` (model.json `batch.schedule`; absent: 1F1B)
    asks `mimo-schedule-zero-bubble` to split the pipelined backwards;
    `schedule = "interleaved"` with `virtual_stages` (the language module's
    `parallel.virtual_stages`) runs the language pipeline's chunks in
    Megatron's interleaved order.
  }];
  let arguments = (ins Mimo_SourceType:$source, I64Attr:$micro_batch_size,
                       I64Attr:$num_microbatches, I64Attr:$seq_length,
                       BoolAttr:$packing,
                       Mimo_AttentionMaskAttr:$attention_mask,
                       OptionalAttr<StrAttr>:$schedule,
                       OptionalAttr<I64Attr>:$virtual_stages);
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
    `forward_only`: every parameter is frozen (`freeze` in model.json), so
    the encoder runs no backward and its bridges carry no gradients: the
    programs leave them out (docs/model-json.md).
    `expert_parallel`: the encoder has sparse layers (`arch.moe`), as the
    language module's; `expert_tensor_parallel` too.

    ```mlir
    %images = mimo.encoder @images(%batch) on %grid {special_token_id = 1000 : i64,
        arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64,
                                  num_layers = 2, num_heads = 4,
                                  ffn_hidden_size = 256>} : !mimo.tokens<128>
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Mimo_BatchType:$batch,
                       Mimo_GridType:$grid, I64Attr:$special_token_id,
                       Mimo_EncoderArchAttr:$arch, UnitAttr:$forward_only,
                       OptionalAttr<I64Attr>:$expert_parallel,
                       OptionalAttr<I64Attr>:$expert_tensor_parallel);
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

def Mimo_LanguageOp : Mimo_Op<"language", [Symbol, HasParent<"ModelOp">,
                                           AttrSizedOperandSegments]> {
  let summary = "the language module on its own grid";
  let description = [{
    Embeds the text tokens, places each modality's token rows at its
    special-token positions (`modalities[i]` names `modality_inputs[i]`),
    runs the causal transformer and returns the masked cross-entropy.
    `tied_embeddings`: the output head is the input embedding
    (`arch.tie_embeddings`); over more than one pipeline stage the first
    and last stage sum its gradients. `expert_parallel`: the module has
    sparse layers (`arch.moe`), their experts split over that many members
    of each DP x CP group (`parallel.ep`; 1: every rank holds every
    expert). `expert_tensor_parallel`: each expert is cut over that many
    of the grid's TP ranks (`parallel.etp`, a divisor of tp; absent: all
    of them), the TP ranks holding the same cut sharing the rows.

    ```mlir
    %loss = mimo.language @language(%batch, %images : !mimo.tokens<128>)
        on %grid {modalities = ["images"],
                  arch = #mimo.language_arch<vocab_size = 1024, ...>}
    ```

    After `mimo-shard-sequence` the embedding is a separate `mimo.embed`
    and the module takes the (sharded) embeddings and targets instead:

    ```mlir
    %loss = mimo.language @language(%batch) embeddings(%e : !mimo.hidden<128>)
        targets(%t) on %grid {modalities = ["images"], arch = ...}
    ```
  }];
  let arguments = (ins SymbolNameAttr:$sym_name, Mimo_BatchType:$batch,
                       Variadic<Mimo_TokensType>:$modality_inputs,
                       Optional<Mimo_HiddenType>:$embeddings,
                       Optional<Mimo_TargetsType>:$targets,
                       Mimo_GridType:$grid, StrArrayAttr:$modalities,
                       Mimo_LanguageArchAttr:$arch,
                       UnitAttr:$tied_embeddings,
                       OptionalAttr<I64Attr>:$expert_parallel,
                       OptionalAttr<I64Attr>:$expert_tensor_parallel);
  let results = (outs Mimo_LossType:$loss);
  let assemblyFormat = [{
    $sym_name `(` $batch (`,` $modality_inputs^ `:` type($modality_inputs))? `)`
    (`embeddings` `(` $embeddings^ `:` type($embeddings) `)`)?
    (`targets` `(` $targets^ `)`)?
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

//===----------------------------------------------------------------------===//
// Graph-level ops inserted by the passes
//===----------------------------------------------------------------------===//

def Mimo_DpSliceOp : Mimo_Op<"dp_slice", [Pure]> {
  let summary = "the samples of the global microbatch a module's lane takes";
  let description = [{
    Inserted by `mimo-slice-batch` for every module: data-parallel rank `k`
    of `lanes` takes samples `[k·B/lanes, (k+1)·B/lanes)`, i.e.
    `samples_per_lane` consecutive samples.

    ```mlir
    %slice = mimo.dp_slice %batch on %grid {module = @images, lanes = 4 : i64,
                                            samples_per_lane = 2 : i64}
    ```
  }];
  let arguments = (ins Mimo_BatchType:$batch, Mimo_GridType:$grid,
                       FlatSymbolRefAttr:$module, I64Attr:$lanes,
                       I64Attr:$samples_per_lane);
  let results = (outs Mimo_BatchType:$slice);
  let assemblyFormat = "$batch `on` $grid attr-dict";
  let hasVerifier = 1;
}

def Mimo_SplitSizesOp : Mimo_Op<"split_sizes", [Pure]> {
  let summary = "per-sample modality-token counts from the input ids";
  let description = [{
    Inserted by `mimo-propagate-split-sizes` for every encoder: sample `b`'s
    count is the number of positions of the *global* microbatch's input ids
    equal to `special_token_id`. The bridge of the modality folds the counts
    of consecutive samples into per-route piece sizes on both of its ends
    (`src_lanes` and `dst_lanes` lanes), forward and backward.

    ```mlir
    %sizes = mimo.split_sizes %batch {modality = @images,
        special_token_id = 1000 : i64, samples = 8 : i64, src_lanes = 4 : i64,
        dst_lanes = 1 : i64}
    ```
  }];
  let arguments = (ins Mimo_BatchType:$batch, FlatSymbolRefAttr:$modality,
                       I64Attr:$special_token_id, I64Attr:$samples,
                       I64Attr:$src_lanes, I64Attr:$dst_lanes);
  let results = (outs Mimo_SplitSizesType:$sizes);
  let assemblyFormat = "$batch attr-dict";
  let hasVerifier = 1;
}

def Mimo_BridgeOp : Mimo_Op<"bridge", [Pure, AllTypesMatch<["input", "output"]>]> {
  let summary = "hands an encoder's tokens to the language module's grid";
  let description = [{
    Inserted by `mimo-insert-bridges` per encoder -> language edge
    (docs/plan.md, bridges). `mode` is
    `#mimo<bridge_mode fan_in|fan_out|one_to_one|colocated>`; `ratio` the
    lane ratio. Non-colocated bridges connect lane
    leaders (`src_leaders`, `dst_leaders`) along `routes` (flattened
    from/to pairs) and broadcast over the boundary TP x CP groups; pieces
    are cut at sample boundaries by `%sizes`. Colocated bridges all-gather
    over `gather_groups` or narrow to the rank's slot (`direction`).

    ```mlir
    %t = mimo.bridge %images, %sizes {src = @images, dst = @language,
        mode = #mimo<bridge_mode fan_in>, ratio = 4 : i64, tensor_ndim = 2 : i64,
        batch_dim = 0 : i64, src_leaders = array<i64: 0, 1, 2, 3>,
        dst_leaders = array<i64: 4>, routes = array<i64: 0, 4, 1, 4, 2, 4, 3, 4>,
        src_broadcast_groups = [array<i64: 0>, ...],
        dst_broadcast_groups = [array<i64: 4, 5>]} : !mimo.tokens<128>
    ```
  }];
  let arguments = (ins Mimo_TokensType:$input, Mimo_SplitSizesType:$sizes,
                       FlatSymbolRefAttr:$src, FlatSymbolRefAttr:$dst,
                       Mimo_BridgeModeAttr:$mode, I64Attr:$ratio,
                       I64Attr:$tensor_ndim,
                       I64Attr:$batch_dim, DenseI64ArrayAttr:$src_leaders,
                       DenseI64ArrayAttr:$dst_leaders,
                       DenseI64ArrayAttr:$routes,
                       ArrayAttr:$src_broadcast_groups,
                       ArrayAttr:$dst_broadcast_groups,
                       OptionalAttr<Mimo_ColocatedDirectionAttr>:$direction,
                       OptionalAttr<ArrayAttr>:$gather_groups);
  let results = (outs Mimo_TokensType:$output);
  let assemblyFormat = "$input `,` $sizes attr-dict `:` type($output)";
  let hasVerifier = 1;
}

def Mimo_EmbedOp : Mimo_Op<"embed", [Pure]> {
  let summary = "text embeddings with each modality's rows at its tokens";
  let description = [{
    The language module's input embeddings `[S, B, H]`: the (vocab-parallel)
    embedding of the text tokens, and the rows of `modality_inputs[i]` at
    the positions of `modalities[i]`'s special token, in row-major `[B, S]`
    order.

    ```mlir
    %e = mimo.embed %batch, %t : !mimo.tokens<128> on %grid {
        language = @language, modalities = ["images"]} : !mimo.hidden<128>
    ```
  }];
  let arguments = (ins Mimo_BatchType:$batch,
                       Variadic<Mimo_TokensType>:$modality_inputs,
                       Mimo_GridType:$grid, FlatSymbolRefAttr:$language,
                       StrArrayAttr:$modalities);
  let results = (outs Mimo_HiddenType:$embeddings);
  let assemblyFormat = [{
    $batch (`,` $modality_inputs^ `:` type($modality_inputs))? `on` $grid
    attr-dict `:` type($embeddings)
  }];
}

def Mimo_TargetsOp : Mimo_Op<"targets", [Pure]> {
  let summary = "next-token labels and the loss mask of the microbatch";
  let description = [{
    The loss mask is 0 at modality-token positions, padding and the last
    position.

    ```mlir
    %t = mimo.targets %batch on %grid
    ```
  }];
  let arguments = (ins Mimo_BatchType:$batch, Mimo_GridType:$grid);
  let results = (outs Mimo_TargetsType:$targets);
  let assemblyFormat = "$batch `on` $grid attr-dict";
}

def Mimo_CpShardOp : Mimo_Op<"cp_shard", [Pure, AllTypesMatch<["input", "output"]>]> {
  let summary = "context-parallel zigzag sharding of the sequence";
  let description = [{
    CP rank `r` of `cp` keeps chunks `r` and `2·cp-1-r` of the `2·cp` equal
    chunks of dimension `seq_dim` (docs/plan.md). With `packing`, the zigzag
    applies to every packed sequence, each padded to a multiple of
    `pad_multiple`.

    ```mlir
    %s = mimo.cp_shard %e {scheme = "zigzag", cp = 2 : i64, seq_dim = 0 : i64,
                           packing = false, pad_multiple = 8 : i64}
        : !mimo.hidden<128>
    ```
  }];
  let arguments = (ins AnyType:$input, StrAttr:$scheme, I64Attr:$cp,
                       I64Attr:$seq_dim, BoolAttr:$packing,
                       I64Attr:$pad_multiple);
  let results = (outs AnyType:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Mimo_SpScatterOp : Mimo_Op<"sp_scatter", [Pure, AllTypesMatch<["input", "output"]>]> {
  let summary = "sequence-parallel scatter over the tensor-parallel group";
  let description = [{
    TP rank `t` of `tp` keeps a contiguous `1/tp` of its (CP-local)
    sequence along `seq_dim`.

    ```mlir
    %p = mimo.sp_scatter %s {tp = 2 : i64, seq_dim = 0 : i64} : !mimo.hidden<128>
    ```
  }];
  let arguments = (ins Mimo_HiddenType:$input, I64Attr:$tp, I64Attr:$seq_dim);
  let results = (outs Mimo_HiddenType:$output);
  let assemblyFormat = "$input attr-dict `:` type($input)";
  let hasVerifier = 1;
}

def Mimo_StageOp : Mimo_Op<"stage", [HasParent<"ModelOp">]> {
  let summary = "one pipeline stage of a module in the multi-module 1F1B";
  let description = [{
    Inserted by `mimo-schedule-1f1b` for every (module, pp) pair: the global
    `stage` (longest path to it, weighted by pipeline size), and the
    `warmup` forwards, `steady` 1F1B pairs and `cooldown` backwards its
    ranks run for the step's microbatches. `mimo-schedule-zero-bubble` adds
    `weight_lag`: the stage's backwards make input gradients only, and the
    weight gradients of at most `weight_lag` microbatches wait behind them
    (docs/plan.md). `mimo-schedule-interleaved` adds `virtual_stages` to the
    language module's stages (their ranks hold that many chunks of layers
    and run them in the interleaved order) and gives the encoders ahead of
    them `warmup = M`: every forward first.

    ```mlir
    mimo.stage @language {pp = 0 : i64, stage = 1 : i64, warmup = 1 : i64,
                          steady = 3 : i64, cooldown = 1 : i64}
    ```
  }];
  let arguments = (ins FlatSymbolRefAttr:$module, I64Attr:$pp, I64Attr:$stage,
                       I64Attr:$warmup, I64Attr:$steady, I64Attr:$cooldown,
                       OptionalAttr<I64Attr>:$weight_lag,
                       OptionalAttr<I64Attr>:$virtual_stages);
  let assemblyFormat = "$module attr-dict";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Rank programs (mimo-lower-to-ranks)
//===----------------------------------------------------------------------===//

def Mimo_ProgramOp : Mimo_Op<"program", [HasParent<"ModelOp">, NoTerminator,
                                         SingleBlock]> {
  let summary = "the instruction stream of every rank with one role";
  let description = [{
    Ranks whose streams are the same up to their peers share one program;
    peers are symbolic (the next pipeline stage, the lane's bridge routes,
    the boundary group) and resolved per rank from the grids. `role` names
    the ranks (module, pipeline stage and bridge part), `ranks` counts them.
    Sends and receives inside `mimo.exchange` are posted together.

    ```mlir
    mimo.program "language/pp1" {ranks = 2 : i64} {
      mimo.recv_act @language {mb = 0 : i64}
      mimo.forward @language {mb = 0 : i64}
      ...
    }
    ```
  }];
  let arguments = (ins StrAttr:$role, I64Attr:$ranks);
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "$role attr-dict-with-keyword $body";
}

def Mimo_ExchangeOp : Mimo_Op<"exchange", [HasParent<"ProgramOp">,
                                           NoTerminator, SingleBlock]> {
  let summary = "sends and receives posted together (batch_isend_irecv)";
  let regions = (region SizedRegion<1>:$body);
  let assemblyFormat = "attr-dict-with-keyword $body";
  let hasVerifier = 1;
}

//===----------------------------------------------------------------------===//
// Instructions: one op per kind of the runtime's InstrOp (runtime/plan/Plan.h),
// each with exactly the operands its kind names. The InstructionOp interface
// maps an op to its kind; a unit test checks the two lists are the same.
//===----------------------------------------------------------------------===//

def Mimo_InstructionOpInterface : OpInterface<"InstructionOp"> {
  let cppNamespace = "::mimo::ir";
  let description = [{
    An instruction of a rank's program (inside a `mimo.program` or a
    `mimo.exchange`): `getInstr()` is the runtime instruction it lowers to.
  }];
  let methods = [
    InterfaceMethod<"The runtime instruction kind.", "::mimo::InstrOp",
                    "getInstr">,
  ];
}

def Mimo_NonNegativeI64 : ConfinedAttr<I64Attr, [IntNonNegative]>;

class Mimo_InstrOp<string mnemonic, string kind, string doc>
    : Mimo_Op<mnemonic, [ParentOneOf<["ProgramOp", "ExchangeOp"]>,
                         Mimo_InstructionOpInterface]> {
  let summary = doc;
  let extraClassDeclaration = [{
    ::mimo::InstrOp getInstr() { return ::mimo::InstrOp::}] # kind # [{; }
  }];
  // Only the attributes its kind names (attr-dict would take any).
  let hasVerifier = 1;
}

// A module's stage for microbatch `mb`: `mimo.forward @language {mb = 0}`;
// under the interleaved schedule, of one of the rank's chunks of layers:
// `mimo.forward @language {chunk = 1, mb = 0}` (absent: chunk 0).
class Mimo_ModuleInstrOp<string mnemonic, string kind, string doc>
    : Mimo_InstrOp<mnemonic, kind, doc> {
  let arguments = (ins FlatSymbolRefAttr:$module, Mimo_NonNegativeI64:$mb,
                       OptionalAttr<Mimo_NonNegativeI64>:$chunk);
  let assemblyFormat = "$module attr-dict";
}

// A bridge (its index in model order) for microbatch `mb`:
// `mimo.bridge_send {bridge = 0, mb = 0}`.
class Mimo_BridgeInstrOp<string mnemonic, string kind, string doc>
    : Mimo_InstrOp<mnemonic, kind, doc> {
  let arguments = (ins Mimo_NonNegativeI64:$bridge, Mimo_NonNegativeI64:$mb);
  let assemblyFormat = "attr-dict";
}

def Mimo_ForwardOp : Mimo_ModuleInstrOp<"forward", "Forward", "run this rank's stage of a module forward">;
def Mimo_BackwardOp : Mimo_ModuleInstrOp<"backward", "Backward", "run this rank's stage of a module backward">;
def Mimo_WeightGradOp : Mimo_ModuleInstrOp<"weight_grad", "WeightGrad", "zero bubble: the weight gradients a split backward deferred">;
def Mimo_ShardInstrOp : Mimo_ModuleInstrOp<"shard", "Shard", "embed, place modality rows, CP/SP-shard the language input">;
def Mimo_UnshardOp : Mimo_ModuleInstrOp<"unshard", "Unshard", "gather the input-embedding gradient over TP x CP">;
def Mimo_SendActOp : Mimo_ModuleInstrOp<"send_act", "SendAct", "send activations to the next pipeline stage">;
def Mimo_RecvActOp : Mimo_ModuleInstrOp<"recv_act", "RecvAct", "receive activations from the previous stage">;
def Mimo_SendGradOp : Mimo_ModuleInstrOp<"send_grad", "SendGrad", "send gradients to the previous stage">;
def Mimo_RecvGradOp : Mimo_ModuleInstrOp<"recv_grad", "RecvGrad", "receive gradients from the next stage">;
// A bridge's message for microbatch `mb`; `posted`: the sender posts it
// and goes on (docs/plan.md "Posted messages"), on both ends:
// `mimo.bridge_send_grad {bridge = 0, mb = 0, posted}`.
class Mimo_BridgeMessageOp<string mnemonic, string kind, string doc>
    : Mimo_InstrOp<mnemonic, kind, doc> {
  let arguments = (ins Mimo_NonNegativeI64:$bridge, Mimo_NonNegativeI64:$mb,
                       UnitAttr:$posted);
  let assemblyFormat = "attr-dict";
}

def Mimo_BridgeSendOp : Mimo_BridgeMessageOp<"bridge_send", "BridgeSend", "source leader: send split pieces along the routes">;
def Mimo_BridgeRecvOp : Mimo_BridgeMessageOp<"bridge_recv", "BridgeRecv", "destination leader: receive and concatenate pieces">;
def Mimo_BridgeBroadcastOp : Mimo_BridgeInstrOp<"bridge_broadcast", "BridgeBroadcast", "broadcast the received tokens over the boundary group">;
def Mimo_BridgeSendGradOp : Mimo_BridgeMessageOp<"bridge_send_grad", "BridgeSendGrad", "destination leader: send gradient pieces back">;
def Mimo_BridgeRecvGradOp : Mimo_BridgeMessageOp<"bridge_recv_grad", "BridgeRecvGrad", "source leader: receive and concatenate gradient pieces">;
def Mimo_BridgeBroadcastGradOp : Mimo_BridgeInstrOp<"bridge_broadcast_grad", "BridgeBroadcastGrad", "broadcast the token gradient over the source boundary group">;
def Mimo_ColocatedForwardOp : Mimo_BridgeInstrOp<"colocated_forward", "ColocatedForward", "colocated bridge: all-gather (fan-in) or narrow (fan-out)">;
def Mimo_ColocatedBackwardOp : Mimo_BridgeInstrOp<"colocated_backward", "ColocatedBackward", "colocated bridge adjoint">;

def Mimo_ReduceGradsOp : Mimo_InstrOp<"reduce_grads", "ReduceGrads", "sum a module's gradients over its DP x CP group"> {
  let arguments = (ins FlatSymbolRefAttr:$module);
  let assemblyFormat = "$module attr-dict";
}
def Mimo_OptimizerStepOp : Mimo_InstrOp<"optimizer_step", "OptimizerStep", "global gradient norm, clipping and AdamW"> {
  let assemblyFormat = "attr-dict";
}

#endif // MIMO_OPS_TD
