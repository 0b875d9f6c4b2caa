// RUN: mimo-opt %s --mimo-propagate-split-sizes --mimo-insert-bridges -split-input-file -verify-diagnostics | FileCheck %s

// Fan-in 4:1 (reference §11.10 fan_in_dp4_to_dp1 with our default order):
// source leaders 0-3, destination leader 4, broadcast over the TP pair.
// CHECK-LABEL: mimo.model @fan_in
// CHECK: %[[SIZES:.+]] = mimo.split_sizes
// CHECK: %[[IMG:.+]] = mimo.encoder @images
// CHECK: %[[T:.+]] = mimo.bridge %[[IMG]], %[[SIZES]] {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 4, 5>], dst_leaders = array<i64: 4>, mode = #mimo<bridge_mode fan_in>, ratio = 4 : i64, routes = array<i64: 0, 4, 1, 4, 2, 4, 3, 4>, src = @images, src_broadcast_groups = [array<i64: 0>, array<i64: 1>, array<i64: 2>, array<i64: 3>], src_leaders = array<i64: 0, 1, 2, 3>, tensor_ndim = 2 : i64}
// CHECK: mimo.language @language(%{{.+}}, %[[T]] : !mimo.tokens<128>)
mimo.model @fan_in attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Fan-out 1:4 (reference §11.4 tp4 -> dp4): the last TP rank of the
// encoder's last stage leads; its TP peers get the gradient by broadcast.
// CHECK-LABEL: mimo.model @fan_out
// CHECK: mimo.bridge {{.*}}dst_leaders = array<i64: 4, 5, 6, 7>, mode = #mimo<bridge_mode fan_out>, ratio = 4 : i64, routes = array<i64: 3, 4, 3, 5, 3, 6, 3, 7>, src = @images, src_broadcast_groups = [array<i64: 0, 1, 2, 3>], src_leaders = array<i64: 3>
mimo.model @fan_out attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 4, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 4, rank_offset = 4, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Colocated fan-in (reference §11.9): gather groups of the encoder side.
// CHECK-LABEL: mimo.model @colocated
// CHECK: mimo.bridge {{.*}}direction = #mimo<colocated_direction fan_in>{{.*}}gather_groups = [array<i64: 0, 2>, array<i64: 1, 3>, array<i64: 4, 6>, array<i64: 5, 7>], mode = #mimo<bridge_mode colocated>, ratio = 2 : i64
mimo.model @colocated attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 4, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Lanes that don't divide: the error is at the encoder's grid, with a note at
// the language module's.
mimo.model @indivisible attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  // expected-error @+1 {{cannot bridge encoder 'images' to the language module: the data-parallel lanes of 'images' (dp = 3) and 'language' (dp = 2) must divide one another}}
  %g0 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 3, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  // expected-note @+1 {{the language module's grid}}
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 3, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 6 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
