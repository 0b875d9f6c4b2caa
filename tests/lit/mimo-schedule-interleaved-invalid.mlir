// RUN: mimo-opt %s --mimo-schedule-1f1b --mimo-schedule-interleaved -verify-diagnostics -o /dev/null

// The interleaved schedule with microbatches not in groups of pp.
mimo.model @ungrouped attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g1 = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 2, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  // expected-error @+1 {{microbatches in groups of pp, found pp 2 and 3 microbatches}}
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 3 : i64, seq_length = 128 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "interleaved", virtual_stages = 2 : i64}
  %loss = mimo.language @language(%mb) on %g1 {modalities = [], arch = #mimo.language_arch<vocab_size = 1024, hidden_size = 128, num_layers = 4, num_heads = 4, ffn_hidden_size = 512>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
