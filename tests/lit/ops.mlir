// Round trip: print -> parse -> print is stable, in custom and generic form.
// RUN: mimo-opt %s -split-input-file | mimo-opt -split-input-file | FileCheck %s
// RUN: mimo-opt %s -split-input-file --mlir-print-op-generic | mimo-opt -split-input-file | FileCheck %s
// RUN: mimo-opt %s -split-input-file --mlir-print-debuginfo | FileCheck %s --check-prefix=LOC

// CHECK-LABEL: mimo.model @vlm
// CHECK-SAME: precision = "fp32"
// CHECK: %[[G0:.*]] = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// CHECK: %[[G1:.*]] = mimo.grid <tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "pp-tp-cp-dp", sequence_parallel = true> {span = array<i64: 4, 8>}
// CHECK: %[[SRC:.*]] = mimo.data_source "synthetic" {text_only_fraction = {{.*}} : f64, tokens_per_sample = {audio = array<i64: 1, 4>, images = array<i64: 0, 24>}}
// CHECK: %[[MB:.*]] = mimo.microbatch %[[SRC]] {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 8 : i64, num_microbatches = 4 : i64, packing = false, seq_length = 128 : i64}
// CHECK: %[[IMG:.*]] = mimo.encoder @images(%[[MB]]) on %[[G0]] {arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>, special_token_id = 1000 : i64} : <128>
// CHECK: %[[AUD:.*]] = mimo.encoder @audio(%[[MB]]) on %[[G0]]
// CHECK: %[[LOSS:.*]] = mimo.language @language(%[[MB]], %[[IMG]], %[[AUD]] : !mimo.tokens<128>, !mimo.tokens<128>) on %[[G1]] {arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>, modalities = ["images", "audio"]}
// CHECK: mimo.train %[[LOSS]] {betas = array<f64: 9.000000e-01, {{.*}}>, clip_grad = 1.000000e+00 : f64, eps = {{.*}}, lr = {{.*}}, optimizer = "adamw", steps = 10 : i64, weight_decay = 0.000000e+00 : f64}

// LOC: mimo.encoder @images{{.*}} loc([[IMAGES:#loc[0-9]+]])
// LOC: [[IMAGES]] = loc("/modules/0"([[POS:#loc[0-9]*]]))

mimo.model @vlm attributes {version = 1 : i64, seed = 1234 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "pp-tp-cp-dp", sequence_parallel = true> {span = array<i64: 4, 8>}
  %src = mimo.data_source "synthetic" {tokens_per_sample = {images = array<i64: 0, 24>, audio = array<i64: 1, 4>}, text_only_fraction = 0.25 : f64}
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128> loc(#images)
  %aud = mimo.encoder @audio(%mb) on %g0 {special_token_id = 1001 : i64, arch = #mimo.encoder_arch<feature_dim = 16, hidden_size = 32, num_layers = 1, num_heads = 2, ffn_hidden_size = 64>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img, %aud : !mimo.tokens<128>, !mimo.tokens<128>) on %g1 {modalities = ["images", "audio"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 10 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

#images = loc("/modules/0"("model.json":9:5))

// -----

// A language-only model: no encoders, no modality inputs.
// CHECK-LABEL: mimo.model @text_only
// CHECK: mimo.language @lm(%{{.*}}) on %{{.*}} {arch
mimo.model @text_only attributes {version = 1 : i64, seed = 0 : i64, precision = "bf16"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 2, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "jsonl" {path = "data.jsonl"}
  %mb = mimo.microbatch %src {micro_batch_size = 2 : i64, num_microbatches = 1 : i64, seq_length = 64 : i64, packing = true, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 256, hidden_size = 64, num_layers = 2, num_heads = 2, ffn_hidden_size = 128>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.1 : f64, clip_grad = 0.0 : f64}
}
