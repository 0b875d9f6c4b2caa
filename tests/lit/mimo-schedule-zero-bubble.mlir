// RUN: mimo-opt %s --mimo-schedule-1f1b --mimo-schedule-zero-bubble -split-input-file | FileCheck %s
// RUN: mimo-opt %s --mimo-pipeline -split-input-file | FileCheck %s --check-prefix=PROGRAMS

// ZB-H1 over full_pp_8gpu (M = 4): every stage holds back min(stage, M)
// microbatches' weight gradients, the last stage all of them; the first,
// holding none back, keeps its backward whole (no weight_lag).
// CHECK-LABEL: mimo.model @full_pp
// CHECK: mimo.stage @images {cooldown = 3 : i64, pp = 0 : i64, stage = 0 : i64, steady = 1 : i64, warmup = 3 : i64}
// CHECK: mimo.stage @images {cooldown = 2 : i64, pp = 1 : i64, stage = 1 : i64, steady = 2 : i64, warmup = 2 : i64, weight_lag = 1 : i64}
// CHECK: mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 2 : i64, steady = 3 : i64, warmup = 1 : i64, weight_lag = 2 : i64}
// CHECK: mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 3 : i64, steady = 4 : i64, warmup = 0 : i64, weight_lag = 3 : i64}
// The first language stage (weight_lag 2) runs mb 0's weight gradients
// once mb 2's input gradients are sent.
// PROGRAMS-LABEL: mimo.program "language/pp0
// PROGRAMS: mimo.backward @language {mb = 2 : i64}
// PROGRAMS-NEXT: mimo.bridge_send_grad {bridge = 0 : i64, mb = 2 : i64}
// PROGRAMS-NEXT: mimo.weight_grad @language {mb = 0 : i64}
// The last stage: 1F1B's order with input gradients only, then the weight
// gradients of the three it held back and the fourth.
// PROGRAMS-LABEL: mimo.program "language/pp1"
// PROGRAMS: mimo.forward @language {mb = 0 : i64}
// PROGRAMS-NEXT: mimo.backward @language {mb = 0 : i64}
// PROGRAMS-NOT: mimo.weight_grad
// PROGRAMS: mimo.backward @language {mb = 3 : i64}
// PROGRAMS-NEXT: mimo.send_grad @language {mb = 3 : i64}
// PROGRAMS-NEXT: mimo.weight_grad @language {mb = 0 : i64}
// PROGRAMS-NEXT: mimo.weight_grad @language {mb = 1 : i64}
// PROGRAMS-NEXT: mimo.weight_grad @language {mb = 2 : i64}
// PROGRAMS-NEXT: mimo.weight_grad @language {mb = 3 : i64}
// PROGRAMS-NEXT: mimo.reduce_grads @language
mimo.model @full_pp attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 0, order = "tp-cp-pp-dp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 2, dp = 1, rank_offset = 4, order = "tp-cp-pp-dp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "zero_bubble"}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Without the schedule the pass changes nothing: no weight_lag.
// CHECK-LABEL: mimo.model @one_f_one_b
// CHECK-NOT: weight_lag
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

// -----

// Colocated with language pp 1: nothing is pipelined, nothing split.
// CHECK-LABEL: mimo.model @colocated
// CHECK-NOT: weight_lag
// CHECK: mimo.train
mimo.model @colocated attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 4, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 4 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "zero_bubble"}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Zero bubble across modules (docs/plan.md): colocated, language pp 4, 8
// microbatches. The first stage's leader posts each microbatch's bridge
// gradients right after its backward; before the cool-down's first
// receive (microbatch 5's gradient) it runs the encoder backward of
// microbatches 0 and 1 (at most M / P = 2 a slot), the rest after the
// pipeline. The source leaders receive them posted (rank 1 its own too).
// PROGRAMS-LABEL: mimo.model @across_modules
// PROGRAMS-LABEL: mimo.program "colocated/pp0/images:dst-leader"
// PROGRAMS: mimo.backward @language {mb = 0 : i64}
// PROGRAMS-NEXT: mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64, posted}
// PROGRAMS: mimo.bridge_send_grad {bridge = 0 : i64, mb = 4 : i64, posted}
// PROGRAMS-NEXT: mimo.bridge_broadcast_grad {bridge = 0 : i64, mb = 0 : i64}
// PROGRAMS-NEXT: mimo.backward @images {mb = 0 : i64}
// PROGRAMS-NEXT: mimo.bridge_broadcast_grad {bridge = 0 : i64, mb = 1 : i64}
// PROGRAMS-NEXT: mimo.backward @images {mb = 1 : i64}
// PROGRAMS-NEXT: mimo.recv_grad @language {mb = 5 : i64}
// PROGRAMS-LABEL: mimo.program "colocated/pp0/images:src-leader/images:dst-leader"
// PROGRAMS: mimo.bridge_send_grad {bridge = 0 : i64, mb = 4 : i64, posted}
// PROGRAMS-NEXT: mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64, posted}
// PROGRAMS-NEXT: mimo.bridge_broadcast_grad {bridge = 0 : i64, mb = 0 : i64}
// PROGRAMS-NEXT: mimo.backward @images {mb = 0 : i64}
mimo.model @across_modules attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g0 = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 4, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 4, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 8 : i64, num_microbatches = 8 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "zero_bubble"}
  %img = mimo.encoder @images(%mb) on %g0 {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 64, num_layers = 2, num_heads = 4, ffn_hidden_size = 256>} : !mimo.tokens<128>
  %loss = mimo.language @language(%mb, %img : !mimo.tokens<128>) on %g1 {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
