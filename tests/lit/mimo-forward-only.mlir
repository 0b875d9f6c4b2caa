// RUN: mimo-opt %s --mimo-propagate-split-sizes --mimo-insert-bridges --mimo-shard-sequence --mimo-schedule-1f1b --mimo-lower-to-ranks --mimo-verify-plan | FileCheck %s

// An encoder whose every parameter is frozen (`freeze` in model.json; the
// importer marks it `forward_only`) runs no backward: its program is its
// forwards and sends, no gradient messages and no gradient reduction, and
// the language leader sends it no gradients. The verifier proves the rest
// still matches.
// CHECK-LABEL: mimo.model @frozen_tower
// CHECK: mimo.encoder @images{{.*}}forward_only
// CHECK: mimo.program "images/pp0/language:src-leader" attributes {ranks = 4 : i64} {
// CHECK-NEXT: mimo.forward @images {mb = 0 : i64}
// CHECK-NEXT: mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
// CHECK-NEXT: mimo.forward @images {mb = 1 : i64}
// CHECK-NEXT: mimo.bridge_send {bridge = 0 : i64, mb = 1 : i64}
// CHECK-NEXT: mimo.optimizer_step
// CHECK-NEXT: }
// CHECK: mimo.program "language/pp0/images:dst-leader"
// CHECK-NOT: mimo.bridge_send_grad
// CHECK: mimo.reduce_grads @language
// CHECK-NOT: mimo.bridge_recv_grad
// CHECK-NOT: mimo.reduce_grads @images
// CHECK: mimo.train
mimo.model @frozen_tower attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>, forward_only} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
