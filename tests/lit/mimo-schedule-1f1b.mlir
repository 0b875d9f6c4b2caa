// RUN: mimo-opt %s --mimo-schedule-1f1b -split-input-file | FileCheck %s

// Reference §11.10 full_pp_8gpu (M = 4): encoder tp2·pp2, language tp2·pp2;
// total 4 stages, warm-ups 3, 2, 1, 0.
// CHECK-LABEL: mimo.model @full_pp
// CHECK-SAME: total_stages = 4 : i64
// CHECK: mimo.stage @images {cooldown = 3 : i64, pp = 0 : i64, stage = 0 : i64, steady = 1 : i64, warmup = 3 : i64}
// CHECK: mimo.stage @images {cooldown = 2 : i64, pp = 1 : i64, stage = 1 : i64, steady = 2 : i64, warmup = 2 : i64}
// CHECK: mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 2 : i64, steady = 3 : i64, warmup = 1 : i64}
// CHECK: mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 3 : i64, steady = 4 : i64, warmup = 0 : i64}
// CHECK: mimo.train
mimo.model @full_pp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 0, order = "tp-cp-pp-dp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-pp-dp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Two encoders of different depth: the longest path counts (1 + 2 language
// stages behind the pp2 encoder); more stages than microbatches caps at M.
// CHECK-LABEL: mimo.model @two_encoders
// CHECK-SAME: total_stages = 4 : i64
// CHECK: mimo.stage @images {{{.*}}pp = 0 : i64, stage = 0 : i64{{.*}}warmup = 2 : i64}
// CHECK: mimo.stage @audio {{{.*}}pp = 1 : i64, stage = 1 : i64{{.*}}warmup = 2 : i64}
// CHECK: mimo.stage @language {{{.*}}pp = 1 : i64, stage = 3 : i64{{.*}}warmup = 0 : i64}
mimo.model @two_encoders attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g2 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 2, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %aud = mimo.encoder @audio(%mb) on %g1 {special_token_id = 1001 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img, %aud : !mimo.tokens<128>, !mimo.tokens<128>) on %g2 {modalities = ["images", "audio"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Colocated: only the language pipeline counts (docs/data.md).
// CHECK-LABEL: mimo.model @colocated
// CHECK-SAME: total_stages = 1 : i64
// CHECK: mimo.stage @language {cooldown = 0 : i64, pp = 0 : i64, stage = 0 : i64, steady = 4 : i64, warmup = 0 : i64}
mimo.model @colocated attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 4, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
