// RUN: mimo-opt %s --mimo-assign-grids -split-input-file -verify-diagnostics | FileCheck %s

// Non-colocated fan-in: encoder DP4 at 0-3, language TP2·PP2 at 4-7.
// CHECK-LABEL: mimo.model @fan_in
// CHECK-SAME: layout = #mimo<layout non_colocated>
// CHECK-SAME: world_size = 8 : i64
// CHECK: mimo.grid <tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0{{.*}}> {span = array<i64: 0, 4>}
// CHECK: mimo.grid <tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4{{.*}}> {span = array<i64: 4, 8>}
mimo.model @fan_in attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = true>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Colocated: encoder TP2·DP4 and language TP4·DP2 on the same 8 ranks; a
// declared world_size that matches is kept.
// CHECK-LABEL: mimo.model @colocated
// CHECK-SAME: layout = #mimo<layout colocated>
// CHECK-SAME: world_size = 8 : i64
// CHECK-COUNT-2: {span = array<i64: 0, 8>}
mimo.model @colocated attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32", world_size = 8 : i64} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 4, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Packed THD: seq_length need not divide by 2·cp (each packed sequence is
// padded instead); modules listed out of rank order.
// CHECK-LABEL: mimo.model @packed_unsorted
// CHECK-SAME: layout = #mimo<layout non_colocated>
// CHECK-SAME: world_size = 6 : i64
// CHECK: {span = array<i64: 4, 6>}
// CHECK: {span = array<i64: 0, 4>}
mimo.model @packed_unsorted attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 2, pp = 1, dp = 2, rank_offset = 0, order = "cp-dp-tp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 2 : i64, seq_length = 126 : i64, packing = true, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Spans that partly overlap.
mimo.model @overlap attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-note @+1 {{encoder 'images' spans ranks [0, 4)}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{language module 'language' spans ranks [2, 6), which overlaps encoder 'images' at ranks [0, 4); module spans must be all equal (colocated) or pairwise disjoint (non-colocated): set rank_offset of 'language' to 4 or make every module span the same ranks}}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// A gap between the modules.
mimo.model @gap attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-note @+1 {{encoder 'images' spans ranks [0, 4)}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{no module holds ranks [4, 6): encoder 'images' ends at rank 4 and language module 'language' starts at rank 6; set rank_offset of 'language' to 4}}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 6, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// No module starts at rank 0.
mimo.model @gap_at_zero attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{no module holds ranks [0, 2): the lowest rank_offset is 2 (encoder 'images'); ranks must start at 0, so set its rank_offset to 0}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 2, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 6, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// A declared world_size that disagrees.
// expected-error @+1 {{world_size 10 does not match the 8 ranks the modules span ([0, 8)); set world_size to 8 or remove it}}
mimo.model @world_size attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32", world_size = 10 : i64} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// tp must divide heads, ffn and vocab.
mimo.model @tp_heads_ffn_vocab attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+3 {{num_heads 4 of language module 'language' is not divisible by tp 8; use a tp that divides 4 or change arch.num_heads}}
// expected-error @+2 {{ffn_hidden_size 500 of language module 'language' is not divisible by tp 8; use a tp that divides 500 or change arch.ffn_hidden_size}}
// expected-error @+1 {{vocab_size 1020 of language module 'language' is not divisible by tp 8; use a tp that divides 1020 or change arch.vocab_size}}
  %g1 = mimo.grid #mimo.parallel<tp = 8, cp = 1, pp = 1, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1020, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 500>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// pp must divide the layers.
mimo.model @layers_pp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{num_layers 3 of encoder 'images' is not divisible by pp 2; use a pp that divides 3 or change arch.num_layers}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 3, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// pipeline_layers splits layers that pp does not divide.
// CHECK-LABEL: mimo.model @uneven_stages
// CHECK: mimo.grid <tp = 1, cp = 1, pp = 2{{.*}}> {pipeline_layers = array<i64: 2, 1>, span = array<i64: 0, 4>}
mimo.model @uneven_stages attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {pipeline_layers = array<i64: 2, 1>}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false> {pipeline_layers = array<i64: 1, 3>}
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 3, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// pipeline_layers must add up to the layers, one count per stage.
mimo.model @uneven_stages_wrong attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {pipeline_layers = array<i64: 2, 2>}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false> {pipeline_layers = array<i64: 4>}
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  // expected-error @+1 {{pipeline_layers of encoder 'images' adds up to 4 layers, not num_layers 3; make the counts add up to num_layers}}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 3, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  // expected-error @+1 {{pipeline_layers of language module 'language' gives 1 layer counts for pp 2; give one count per pipeline stage}}
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// micro_batch_size must divide by every dp.
mimo.model @micro_batch_dp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{micro_batch_size 6 is not divisible by dp 4 of encoder 'images'; use a micro_batch_size that is a multiple of 4}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-note @+1 {{micro_batch_size is set here}}
  %mb = mimo.microbatch %src {micro_batch_size = 6 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Encoders have no context parallelism.
mimo.model @encoder_cp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{encoder 'images' must have cp 1 (context parallelism applies to the language module only), found cp 2; remove cp or set it to 1}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 2, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Bridge lanes must divide.
mimo.model @lanes attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{data-parallel lanes of encoder 'images' (dp 3) and language module 'language' (dp 2) must divide one another for the bridge between them; use dp sizes where one is a multiple of the other}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 3, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-note @+1 {{language module 'language' has dp 2}}
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 3, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 6 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// CP+SP sharding needs seq_length % (2*cp*tp) == 0; dense masks cannot take CP.
mimo.model @sequence_cp_sp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-note @+2 {{the language module's parallel grid}}
// expected-note @+1 {{cp is set here}}
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 2, pp = 1, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = true>
  %src = mimo.data_source "synthetic"
// expected-error @+2 {{seq_length 100 is not divisible by 8 (2*cp*tp with cp 2 and tp 2) for the sequence sharding of language module 'language'; use a multiple of 8 such as 104}}
// expected-error @+1 {{attention_mask "dense" cannot be used with cp 2 of language module 'language' (context parallelism shards the sequence in zigzag chunks); use "causal" or packing, or set cp to 1}}
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 100 : i64, packing = false, attention_mask = #mimo<attention_mask dense>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Colocated encoders cannot be pipelined.
mimo.model @colocated_encoder_pp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{encoder 'images' must have pp 1 in a colocated layout (it runs once per step before the language pipeline), found pp 2; set pp to 1}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 2 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
