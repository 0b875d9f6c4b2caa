//===- Passes.td - The mimo compiler passes ----------------*- tablegen -*-===//

#ifndef MIMO_PASSES_TD
#define MIMO_PASSES_TD

include "mlir/Pass/PassBase.td"

def AssignGrids : Pass<"mimo-assign-grids", "::mlir::ModuleOp"> {
  let summary = "Check every module grid and fix the rank layout";
  let description = [{
    For every `mimo.model`: checks that the module spans tile the world
    (all equal: colocated; pairwise disjoint: non-colocated; a partial overlap
    or a gap is an error naming both modules and their rank ranges), that
    `world_size` (when given) matches, and the layout-dependent divisibility
    rules: attention heads, FFN width and vocabulary by `tp`, layers by `pp`,
    `micro_batch_size` by `dp`, encoder `cp` = 1, encoder and language
    data-parallel lanes dividing one another, `seq_length` by the CP/SP
    sharding factor, no dense mask under CP, and encoder `pp` = 1 when
    colocated. It then records the layout and world size on the model and
    each grid's rank span; per-rank coordinates and first/last stages follow
    from these by the shared grid arithmetic (`runtime/config/Grid.h`).

    Before:
    ```mlir
    mimo.model @vlm attributes {precision = "fp32", seed = 1 : i64, version = 1 : i64} {
      %0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
      %1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
      ...
    }
    ```
    After:
    ```mlir
    mimo.model @vlm attributes {layout = "non_colocated", world_size = 8 : i64, ...} {
      %0 = mimo.grid #mimo.parallel<...> {span = array<i64: 0, 4>}
      %1 = mimo.grid #mimo.parallel<...> {span = array<i64: 4, 8>}
      ...
    }
    ```
  }];
}

def SliceBatch : Pass<"mimo-slice-batch", "::mlir::ModuleOp"> {
  let summary = "Give every module its data-parallel slice of the microbatch";
  let description = [{
    Inserts a `mimo.dp_slice` in front of every encoder and the language
    module: data-parallel rank `k` of `D` takes samples `[k·B/D, (k+1)·B/D)`
    of the global microbatch (docs/data.md). `B % D != 0` is an error at the
    module's `/parallel/dp`.

    ```mlir
    %0 = mimo.dp_slice %batch on %grid {lanes = 4 : i64, module = @images,
                                        samples_per_lane = 2 : i64}
    %1 = mimo.encoder @images(%0) on %grid ...
    ```
  }];
}

def PropagateSplitSizes : Pass<"mimo-propagate-split-sizes",
                                "::mlir::ModuleOp"> {
  let summary = "Derive per-sample modality-token counts for every bridge";
  let description = [{
    Inserts one `mimo.split_sizes` per encoder, computed from the global
    microbatch's input ids and the modality's special token id. Both ends of
    the modality's bridge read it (no runtime shape handshake) and fold the
    per-sample counts into per-route piece sizes, forward and backward, so
    fan-in with unequal token counts stays correct (docs/plan.md).
  }];
}

def InsertBridges : Pass<"mimo-insert-bridges", "::mlir::ModuleOp"> {
  let summary = "Insert a mimo.bridge on every encoder -> language edge";
  let description = [{
    Between an encoder's last stage and the language first stage:
    `mode` (fan_in, fan_out, one_to_one or colocated), `ratio`, the token
    list's `tensor_ndim` and `batch_dim`, the lane leaders, the routes and
    the boundary broadcast groups (docs/plan.md), or for colocated models the
    direction and gather groups (docs/plan.md). Lanes that don't divide are an
    error at the encoder's `/parallel/dp` with a note at the language's.
    Needs mimo-propagate-split-sizes.
  }];
}

def ShardSequence : Pass<"mimo-shard-sequence", "::mlir::ModuleOp"> {
  let summary = "CP zigzag and SP scatter of the language inputs";
  let description = [{
    Splits the language module's input embedding into `mimo.embed` (text
    embeddings with the modality rows at their tokens) and `mimo.targets`
    (labels, loss mask), then inserts `mimo.cp_shard {scheme = "zigzag"}` on
    both (cp > 1) and `mimo.sp_scatter` on the embeddings (sequence
    parallel, tp > 1), docs/plan.md. Packed sequences are zigzagged one by one,
    each padded to `pad_multiple`. Indivisible sequences and dense masks
    under CP are errors.
  }];
}

def Schedule1F1B : Pass<"mimo-schedule-1f1b", "::mlir::ModuleOp"> {
  let summary = "Place every pipeline stage in the multi-module 1F1B";
  let description = [{
    Sets the model's `total_stages` (the longest path through the module
    graph, weighted by pipeline size; the language pipeline alone when
    colocated) and inserts a `mimo.stage` per (module, pp) with its global
    stage, `warmup = min(total - stage - 1, M)`, `steady = M - warmup` and
    `cooldown = warmup` (docs/plan.md).
  }];
}

def ScheduleZeroBubble : Pass<"mimo-schedule-zero-bubble", "::mlir::ModuleOp"> {
  let summary = "Split the pipelined backwards for a zero-bubble schedule";
  let description = [{
    For a model whose `mimo.microbatch` asks for `schedule = "zero_bubble"`
    (ZB-H1, docs/plan.md), after `mimo-schedule-1f1b`: gives every
    pipelined `mimo.stage` after the first a `weight_lag = min(stage, M)`. Its programs
    then run each backward as input gradients only and the deferred weight
    gradients as `mimo.weight_grad`, once more than `weight_lag`
    microbatches' wait, filling the bubbles of the cool-down. A colocated
    layout's encoders (stage 0, run whole before and after the language
    pipeline) keep whole backwards. Other models are left as they are.
  }];
}

def ScheduleInterleaved : Pass<"mimo-schedule-interleaved", "::mlir::ModuleOp"> {
  let summary = "Give the language pipeline's ranks chunks of layers (interleaved 1F1B)";
  let description = [{
    For a model whose `mimo.microbatch` asks for `schedule = "interleaved"`
    with `virtual_stages = v` (Megatron's virtual pipeline, docs/plan.md),
    after `mimo-schedule-1f1b`: gives the language module's `mimo.stage`s
    `virtual_stages = v` (each rank holds v chunks of layers, chunk c of
    stage p being virtual stage c x pp + p, and runs them in Megatron's
    interleaved order, in lockstep with its neighbours) and the encoders'
    stages `warmup = M` (every forward before the language pipeline, their
    gradients after it). Other models are left as they are.
  }];
}

def LowerToRanks : Pass<"mimo-lower-to-ranks", "::mlir::ModuleOp"> {
  let summary = "Lower the model to per-role instruction streams";
  let description = [{
    Emits one `mimo.program` per role (ranks whose instruction streams are
    the same up to their peers): receives, forward stages, sends, backward
    stages, bridge sends/receives/broadcasts, sharding, the data-parallel
    gradient reduction and the optimizer step, in multi-module 1F1B order.
    Sends and receives posted together sit in a `mimo.exchange`. Peers are
    resolved per rank from the grids, so the IR grows with the number of
    roles, not with the world size.
  }];
}

def VerifyPlan : Pass<"mimo-verify-plan", "::mlir::ModuleOp"> {
  let summary = "Prove that every send meets its receive and nothing deadlocks";
  let description = [{
    Resolves every rank's program against the grids and checks that each
    instruction applies to its rank, that each send has exactly one
    matching receive (same peers, microbatch and shape rule), and, by
    simulating all ranks' streams with blocking sends and receives
    (an exchange's operations posted together) and collectives, that the
    plan runs to the end. Failures name the ranks and instructions.
  }];
}

#endif // MIMO_PASSES_TD
