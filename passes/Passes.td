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
    from these by the shared grid arithmetic (`runtime/core/Grid.h`).

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

#endif // MIMO_PASSES_TD
