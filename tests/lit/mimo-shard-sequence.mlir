// RUN: mimo-opt %s --mimo-shard-sequence -split-input-file -verify-diagnostics | FileCheck %s

// CP2 + SP over TP2: zigzag on embeddings and targets, SP scatter on the
// embeddings only (docs/plan.md).
// CHECK-LABEL: mimo.model @cp_sp
// CHECK: %[[IMG:.+]] = mimo.encoder @images
// CHECK: %[[E:.+]] = mimo.embed %{{[0-9]+}}, %[[IMG]] : !mimo.tokens<128> on %{{.+}} {language = @language, modalities = ["images"]} : <128>
// CHECK: %[[T:.+]] = mimo.targets %{{[0-9]+}} on
// CHECK: %[[E2:.+]] = mimo.cp_shard %[[E]] {cp = 2 : i64, packing = false, pad_multiple = 8 : i64, scheme = "zigzag", seq_dim = 0 : i64} : !mimo.hidden<128>
// CHECK: %[[T2:.+]] = mimo.cp_shard %[[T]] {cp = 2 : i64, packing = false, pad_multiple = 8 : i64, scheme = "zigzag", seq_dim = 1 : i64} : !mimo.targets
// CHECK: %[[E3:.+]] = mimo.sp_scatter %[[E2]] {seq_dim = 0 : i64, tp = 2 : i64} : <128>
// CHECK: mimo.language @language(%{{[0-9]+}}) embeddings(%[[E3]] : !mimo.hidden<128>) targets(%[[T2]]) on
mimo.model @cp_sp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 2, pp = 1, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = true>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// No CP and no SP: the embedding is explicit, nothing is sharded.
// CHECK-LABEL: mimo.model @plain
// CHECK: mimo.embed
// CHECK-NOT: mimo.cp_shard
// CHECK-NOT: mimo.sp_scatter
// CHECK: mimo.language @language(%{{[0-9]+}}) embeddings(
mimo.model @plain attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Packed THD: seq_length need not divide; each sequence is padded to 4.
// CHECK-LABEL: mimo.model @packed
// CHECK: mimo.cp_shard %{{.+}} {cp = 2 : i64, packing = true, pad_multiple = 4 : i64, scheme = "zigzag", seq_dim = 0 : i64}
mimo.model @packed attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 2, pp = 1, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 126 : i64, packing = true, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// seq_length 100 is not a multiple of 2·cp·tp = 8 (the same diagnostic as
// mimo-assign-grids: at seq_length, with a note at the grid).
mimo.model @indivisible attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  // expected-note @+1 {{the language module's parallel grid}}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 2, pp = 1, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = true>
  %src = mimo.data_source "synthetic"
  // expected-error @+1 {{seq_length 100 is not divisible by 8 (2*cp*tp with cp 2 and tp 2) for the sequence sharding of language module 'language'; use a multiple of 8 such as 104}}
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 100 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// A dense mask cannot be sharded across CP ranks.
mimo.model @dense attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  // expected-note @+1 {{cp is set here}}
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 2, pp = 1, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  // expected-error @+1 {{attention_mask "dense" cannot be used with cp 2 of language module 'language' (context parallelism shards the sequence in zigzag chunks); use "causal" or packing, or set cp to 1}}
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask dense>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
