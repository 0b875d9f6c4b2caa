// RUN: mimo-opt %s --mimo-schedule-1f1b --mimo-schedule-interleaved -split-input-file | FileCheck %s
// RUN: mimo-opt %s --mimo-pipeline -split-input-file | FileCheck %s --check-prefix=PROGRAMS

// Interleaved 1F1B, two chunks a stage (M = 4, two groups of pp = 2):
// the language stages hold virtual_stages = 2; the encoder ahead runs its
// four forwards first (warmup = M, where 1F1B gives it 2) and its
// backwards after the pipeline.
// CHECK-LABEL: mimo.model @interleaved
// CHECK: mimo.stage @images {cooldown = 4 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 4 : i64}
// CHECK: mimo.stage @language {{{.*}}pp = 0 : i64{{.*}}virtual_stages = 2 : i64
// CHECK: mimo.stage @language {{{.*}}pp = 1 : i64{{.*}}virtual_stages = 2 : i64
// The last stage runs chunk 0 of the first group's microbatches, then
// chunk 1 (the last virtual stage: each forward followed by its backward).
// PROGRAMS-LABEL: mimo.program "language/pp1"
// PROGRAMS: mimo.forward @language {mb = 0 : i64}
// PROGRAMS: mimo.forward @language {mb = 1 : i64}
// PROGRAMS: mimo.recv_act @language {chunk = 1 : i64, mb = 0 : i64}
// PROGRAMS: mimo.forward @language {chunk = 1 : i64, mb = 0 : i64}
// PROGRAMS-NEXT: mimo.backward @language {chunk = 1 : i64, mb = 0 : i64}
// PROGRAMS: mimo.reduce_grads @language
mimo.model @interleaved attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "interleaved", virtual_stages = 2 : i64}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Without the schedule the pass changes nothing: no virtual_stages.
// CHECK-LABEL: mimo.model @one_f_one_b
// CHECK-NOT: virtual_stages
// CHECK: mimo.train
mimo.model @one_f_one_b attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
