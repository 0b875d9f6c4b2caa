// RUN: mimo-opt %s --mimo-verify-plan -split-input-file -verify-diagnostics | FileCheck %s

// A compiled plan (encoder at rank 0, language pp2 at ranks 1-2, one
// microbatch) verifies and passes through unchanged.
// CHECK-LABEL: mimo.model @valid
// CHECK: mimo.program "language/pp1"
mimo.model @valid attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    mimo.recv_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: the first language stage waits for the gradient before it
// sends the activation, while the last stage waits for that activation.
mimo.model @deadlock attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    // expected-error @+1 {{the plan deadlocks: rank 1 waits at instruction 3 (recv_grad language mb 0) for rank 2, rank 2 waits at instruction 0 (recv_act language mb 0) for rank 1 (3 of 3 ranks are blocked)}}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    // expected-note @+1 {{rank 2 is here (program 'language/pp1')}}
    mimo.recv_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: the last stage never receives the activation.
mimo.model @unmatched attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    // expected-error @+1 {{rank 1 (instruction 3: send_act language mb 0) sends the activation of microbatch 0 from rank 1 to rank 2, but rank 2 never receives it}}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: a microbatch the step does not have.
mimo.model @wrong_microbatch attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    // expected-error @+1 {{'mimo.recv_act' op names microbatch 3 of 1}}
    mimo.recv_act @language {mb = 3 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: the last stage has no next stage to send to.
mimo.model @not_applicable attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    mimo.recv_act @language {mb = 0 : i64}
    // expected-error @+1 {{rank 2 (instruction 1: send_act language mb 0) does not apply: module 'language' has no pipeline stage 2 next to rank 2's stage 1}}
    mimo.send_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: the rank count of a role is wrong.
mimo.model @miscounted attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  // expected-error @+1 {{'mimo.program' op says 2 ranks have the role 'language/pp1', but 1 do}}
  mimo.program "language/pp1" attributes {ranks = 2 : i64} {
    mimo.recv_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: a stage's warm-up is not the one the schedule gives (the
// passes build stages and bridges with the one topology builder,
// runtime/plan/BuildTopology.h, and readers check the IR against it).
// expected-error @+1 {{the IR's bridges or stages are not the ones its grids and batch give (/schedule/stages/1/cooldown: expected 1, found 0); rerun mimo-insert-bridges and the schedule passes}}
mimo.model @tampered_stage attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 1>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 0 : i64, stage = 1 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    mimo.recv_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}

// -----

// Hand-edited: a bridge route to a rank that is not the language leader.
// expected-error @+1 {{the IR's bridges or stages are not the ones its grids and batch give (/bridges/0/routes/0/to: expected 1, found 2); rerun mimo-insert-bridges and the schedule passes}}
mimo.model @tampered_bridge attributes {layout = #mimo<layout non_colocated>, precision = "fp32", seed = 0 : i64, total_stages = 3 : i64, version = 1 : i64, world_size = 3 : i64} {
  %0 = mimo.grid <tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 1>}
  %1 = mimo.grid <tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 1, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 1, 3>}
  %2 = mimo.data_source "synthetic"
  %3 = mimo.microbatch %2 {attention_mask = #mimo<attention_mask causal>, micro_batch_size = 2 : i64, num_microbatches = 1 : i64, packing = false, seq_length = 16 : i64}
  %4 = mimo.split_sizes %3 {dst_lanes = 1 : i64, modality = @images, samples = 2 : i64, special_token_id = 100 : i64, src_lanes = 1 : i64}
  %5 = mimo.dp_slice %3 on %0 {lanes = 1 : i64, module = @images, samples_per_lane = 2 : i64}
  %6 = mimo.encoder @images(%5) on %0 {arch = #mimo.encoder_arch<feature_dim = 8, hidden_size = 16, num_layers = 1, num_heads = 2, ffn_hidden_size = 32>, special_token_id = 100 : i64} : <32>
  %7 = mimo.dp_slice %3 on %1 {lanes = 1 : i64, module = @language, samples_per_lane = 2 : i64}
  %8 = mimo.bridge %6, %4 {batch_dim = 0 : i64, dst = @language, dst_broadcast_groups = [array<i64: 1>], dst_leaders = array<i64: 1>, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, routes = array<i64: 0, 2>, src = @images, src_broadcast_groups = [array<i64: 0>], src_leaders = array<i64: 0>, tensor_ndim = 2 : i64} : <32>
  %9 = mimo.embed %7, %8 : !mimo.tokens<32> on %1 {language = @language, modalities = ["images"]} : <32>
  %10 = mimo.targets %7 on %1
  %11 = mimo.language @language(%7) embeddings(%9 : !mimo.hidden<32>) targets(%10) on %1 {arch = #mimo.language_arch<vocab_size = 128, hidden_size = 32, num_layers = 2, num_heads = 2, ffn_hidden_size = 64>, modalities = ["images"]}
  mimo.stage @images {cooldown = 1 : i64, pp = 0 : i64, stage = 0 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 1 : i64, pp = 0 : i64, stage = 1 : i64, steady = 0 : i64, warmup = 1 : i64}
  mimo.stage @language {cooldown = 0 : i64, pp = 1 : i64, stage = 2 : i64, steady = 1 : i64, warmup = 0 : i64}
  mimo.program "images/pp0/language:src-leader" attributes {ranks = 1 : i64} {
    mimo.forward @images {mb = 0 : i64}
    mimo.bridge_send {bridge = 0 : i64, mb = 0 : i64}
    mimo.bridge_recv_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.backward @images {mb = 0 : i64}
    mimo.reduce_grads @images
    mimo.optimizer_step
  }
  mimo.program "language/pp0/images:dst-leader" attributes {ranks = 1 : i64} {
    mimo.bridge_recv {bridge = 0 : i64, mb = 0 : i64}
    mimo.shard @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.send_act @language {mb = 0 : i64}
    mimo.recv_grad @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.program "language/pp1" attributes {ranks = 1 : i64} {
    mimo.recv_act @language {mb = 0 : i64}
    mimo.forward @language {mb = 0 : i64}
    mimo.backward @language {mb = 0 : i64}
    mimo.send_grad @language {mb = 0 : i64}
    mimo.reduce_grads @language
    mimo.optimizer_step
  }
  mimo.train %11 {betas = array<f64: 9.000000e-01, 0.99899999999999999>, clip_grad = 1.000000e+00 : f64, eps = 1.000000e-08 : f64, lr = 1.000000e-03 : f64, optimizer = "adamw", steps = 1 : i64, weight_decay = 0.000000e+00 : f64}
}
