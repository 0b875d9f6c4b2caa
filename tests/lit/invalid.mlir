// Every verifier message of the mimo dialect, one case per split.
// RUN: mimo-opt %s -split-input-file -verify-diagnostics --allow-unregistered-dialect

// ParallelAttr: sizes
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{tp must be at least 1, found 0}}
  %g = mimo.grid #mimo.parallel<tp = 0, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ParallelAttr: rank_offset
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{rank_offset must be non-negative, found -1}}
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = -1, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ParallelAttr: order
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{order must name tp, cp, dp and pp once each, joined by '-', found "tp-tp-dp-pp": dimension 'tp' appears twice}}
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-tp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// EncoderArchAttr: feature_dim
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{feature_dim must be at least 1, found 0}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 0, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// EncoderArchAttr: heads
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{hidden_size 8 is not divisible by num_heads 3}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 3, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageArchAttr: vocab
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{vocab_size must be at least 1, found 0}}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 0, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageArchAttr: odd head size
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{head size 1 must be even for rotary embeddings}}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 8, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TokensType
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{token hidden size must be at least 1, found 0}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<0>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: version
// expected-error @+1 {{'mimo.model' op version must be 1, found 2}}
mimo.model @m attributes {version = 2 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: seed
// expected-error @+1 {{'mimo.model' op seed must be non-negative, found -3}}
mimo.model @m attributes {version = 1 : i64, seed = -3 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: precision
// expected-error @+1 {{'mimo.model' op precision must be "fp32" or "bf16", found "fp16"}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp16"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: world_size
// expected-error @+1 {{'mimo.model' op world_size must be at least 1, found 0}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, world_size = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: layout is an enum attribute, not a string
// expected-error @+1 {{'mimo.model' op attribute 'layout' failed to satisfy constraint: whether the modules share their ranks}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, layout = "mixed", precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: no language (the loss comes from elsewhere)
// expected-error @+1 {{'mimo.model' op must hold exactly one mimo.language, found 0}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = "test.loss"() : () -> !mimo.loss
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: two languages
// expected-error @+1 {{'mimo.model' op must hold exactly one mimo.language, found 2}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %other = mimo.language @lm2(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: two microbatches
// expected-error @+1 {{'mimo.model' op must hold exactly one mimo.microbatch, found 2}}
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %mb2 = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: duplicate special token id
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-note @+1 {{first used here}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
// expected-error @+1 {{special_token_id 9 of encoder 'img2' is already used by encoder 'img'; give each modality its own token id}}
  %img2 = mimo.encoder @img2(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: token id out of vocabulary
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{special_token_id 16 of encoder 'img' must be below the language vocab_size 16}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 16 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: modality is not an encoder
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
// expected-error @+1 {{'mimo.language' op modality 'video' is not an encoder of the model}}
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["video"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ModelOp: tokens_per_sample names a non-encoder
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op tokens_per_sample names 'video', which is not an encoder of the model}}
  %src = mimo.data_source "synthetic" {tokens_per_sample = {video = array<i64: 0, 4>}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// GridOp: span
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
// expected-error @+1 {{'mimo.grid' op span must be [rank_offset, rank_offset + tp*cp*pp*dp) = [0, 1)}}
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false> {span = array<i64: 0, 2>}
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DataSourceOp: source
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op source must be "synthetic", "jsonl" or "indexed", found "parquet"}}
  %src = mimo.data_source "parquet"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DataSourceOp: jsonl path
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op a jsonl source needs a path}}
  %src = mimo.data_source "jsonl"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DataSourceOp: synthetic path
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op a synthetic source takes no path}}
  %src = mimo.data_source "synthetic" {path = "x.jsonl"}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DataSourceOp: range
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op tokens_per_sample 'img' must be array<i64: min, max> with 0 <= min <= max}}
  %src = mimo.data_source "synthetic" {tokens_per_sample = {img = array<i64: 4, 2>}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DataSourceOp: fraction
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
// expected-error @+1 {{'mimo.data_source' op text_only_fraction must be in [0, 1]}}
  %src = mimo.data_source "synthetic" {text_only_fraction = 2.0 : f64}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: sizes
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op micro_batch_size and num_microbatches must be at least 1}}
  %mb = mimo.microbatch %src {micro_batch_size = 0 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: seq_length
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op seq_length must be at least 2, found 1}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 1 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: a schedule the registry (runtime/schedule/) does not have
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op schedule must be "1f1b", "zero_bubble" or "interleaved", found "gpipe"}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "gpipe"}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: virtual_stages under a schedule that does not chunk
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op virtual_stages (2 or more) goes with a schedule that runs the language layers in chunks, and such a schedule with it; found schedule "zero_bubble"}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>, schedule = "zero_bubble", virtual_stages = 2 : i64}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: mask
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op attribute 'attention_mask' failed to satisfy constraint: the language model's attention mask}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = "sliding"}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// MicrobatchOp: packing with dense
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+1 {{'mimo.microbatch' op packing restricts attention to each sample and cannot take a dense attention_mask}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = true, attention_mask = #mimo<attention_mask dense>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// EncoderOp: token id
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{'mimo.encoder' op special_token_id must be non-negative, found -1}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = -1 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// EncoderOp: sequence parallel
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = true>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{'mimo.encoder' op sequence_parallel applies to the language module only}}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageOp: modality count
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
// expected-error @+1 {{'mimo.language' op names 2 modalities for 1 modality inputs}}
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["img", "audio"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageOp: modality twice
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
// expected-error @+1 {{'mimo.language' op modality 'img' appears twice}}
  %loss = mimo.language @lm(%mb, %img, %img : !mimo.tokens<8>, !mimo.tokens<8>) on %g {modalities = ["img", "img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageOp: hidden size
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<4>
// expected-error @+1 {{'mimo.language' op modality 'img' has hidden size 4 but the language hidden_size is 8}}
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<4>) on %g {modalities = ["img"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TrainOp: steps
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
// expected-error @+1 {{'mimo.train' op steps must be at least 1, found 0}}
  mimo.train %loss {steps = 0 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TrainOp: optimizer
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
// expected-error @+1 {{'mimo.train' op optimizer must be "adamw", found "sgd"}}
  mimo.train %loss {steps = 1 : i64, optimizer = "sgd", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TrainOp: lr
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
// expected-error @+1 {{'mimo.train' op lr and eps must be positive}}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 0.0 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TrainOp: betas
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
// expected-error @+1 {{'mimo.train' op betas must be two numbers in [0, 1)}}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 1.5>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// TrainOp: weight decay
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
// expected-error @+1 {{'mimo.train' op weight_decay and clip_grad must be non-negative}}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = -1.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// DpSliceOp: lanes against the grid
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{'mimo.dp_slice' op has 4 lanes but its grid has dp = 2}}
  %s = mimo.dp_slice %mb on %g {module = @lm, lanes = 4 : i64, samples_per_lane = 1 : i64}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// SplitSizesOp: whole lanes
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{'mimo.split_sizes' op cannot cut 4 samples into whole lanes of 3 and 2}}
  %sz = mimo.split_sizes %mb {modality = @img, special_token_id = 9 : i64, samples = 4 : i64, src_lanes = 3 : i64, dst_lanes = 2 : i64}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// BridgeOp: mode
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %sz = mimo.split_sizes %mb {modality = @img, special_token_id = 9 : i64, samples = 4 : i64, src_lanes = 2 : i64, dst_lanes = 2 : i64}
// expected-error @+1 {{'mimo.bridge' op attribute 'mode' failed to satisfy constraint: how the data-parallel lanes of a bridge's two sides meet}}
  %b = mimo.bridge %img, %sz {src = @img, dst = @lm, mode = "fan_in", ratio = 1 : i64, tensor_ndim = 2 : i64, batch_dim = 0 : i64, src_leaders = array<i64: 0, 1>, dst_leaders = array<i64: 0, 1>, routes = array<i64: 0, 0, 1, 1>, src_broadcast_groups = [array<i64: 0>, array<i64: 1>], dst_broadcast_groups = [array<i64: 0>, array<i64: 1>]} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// BridgeOp: batch dim
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %sz = mimo.split_sizes %mb {modality = @img, special_token_id = 9 : i64, samples = 4 : i64, src_lanes = 2 : i64, dst_lanes = 2 : i64}
// expected-error @+1 {{'mimo.bridge' op tensor_ndim must be 2 (batch_dim 0) or 3 (batch_dim 1)}}
  %b = mimo.bridge %img, %sz {src = @img, dst = @lm, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, tensor_ndim = 3 : i64, batch_dim = 0 : i64, src_leaders = array<i64: 0, 1>, dst_leaders = array<i64: 0, 1>, routes = array<i64: 0, 0, 1, 1>, src_broadcast_groups = [array<i64: 0>, array<i64: 1>], dst_broadcast_groups = [array<i64: 0>, array<i64: 1>]} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// BridgeOp: routes
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %sz = mimo.split_sizes %mb {modality = @img, special_token_id = 9 : i64, samples = 4 : i64, src_lanes = 2 : i64, dst_lanes = 2 : i64}
// expected-error @+1 {{'mimo.bridge' op expected 2 routes, found 1}}
  %b = mimo.bridge %img, %sz {src = @img, dst = @lm, mode = #mimo<bridge_mode one_to_one>, ratio = 1 : i64, tensor_ndim = 2 : i64, batch_dim = 0 : i64, src_leaders = array<i64: 0, 1>, dst_leaders = array<i64: 0, 1>, routes = array<i64: 0, 0>, src_broadcast_groups = [array<i64: 0>, array<i64: 1>], dst_broadcast_groups = [array<i64: 0>, array<i64: 1>]} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// BridgeOp: colocated fields
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %img = mimo.encoder @img(%mb) on %g {special_token_id = 9 : i64, arch = #mimo.encoder_arch<feature_dim = 4, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>} : !mimo.tokens<8>
  %sz = mimo.split_sizes %mb {modality = @img, special_token_id = 9 : i64, samples = 4 : i64, src_lanes = 2 : i64, dst_lanes = 2 : i64}
// expected-error @+1 {{'mimo.bridge' op a colocated bridge needs direction and gather_groups}}
  %b = mimo.bridge %img, %sz {src = @img, dst = @lm, mode = #mimo<bridge_mode colocated>, ratio = 1 : i64, tensor_ndim = 2 : i64, batch_dim = 0 : i64, src_leaders = array<i64: 0, 1>, dst_leaders = array<i64: 0, 1>, routes = array<i64: 0, 0, 1, 1>, src_broadcast_groups = [array<i64: 0>, array<i64: 1>], dst_broadcast_groups = [array<i64: 0>, array<i64: 1>]} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// CpShardOp: scheme
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %e = mimo.embed %mb on %g {language = @lm, modalities = []} : !mimo.hidden<8>
  %t = mimo.targets %mb on %g
// expected-error @+1 {{'mimo.cp_shard' op scheme must be "zigzag", found "ring"}}
  %s = mimo.cp_shard %e {scheme = "ring", cp = 2 : i64, seq_dim = 0 : i64, packing = false, pad_multiple = 4 : i64} : !mimo.hidden<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// CpShardOp: sequence dim of targets
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %e = mimo.embed %mb on %g {language = @lm, modalities = []} : !mimo.hidden<8>
  %t = mimo.targets %mb on %g
// expected-error @+1 {{'mimo.cp_shard' op seq_dim must be 0 for [S,B,H] hidden states and 1 for [B,S] targets}}
  %s = mimo.cp_shard %t {scheme = "zigzag", cp = 2 : i64, seq_dim = 0 : i64, packing = false, pad_multiple = 4 : i64} : !mimo.targets
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// CpShardOp: cp
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %e = mimo.embed %mb on %g {language = @lm, modalities = []} : !mimo.hidden<8>
  %t = mimo.targets %mb on %g
// expected-error @+1 {{'mimo.cp_shard' op cp must be at least 2 to shard}}
  %s = mimo.cp_shard %e {scheme = "zigzag", cp = 1 : i64, seq_dim = 0 : i64, packing = false, pad_multiple = 4 : i64} : !mimo.hidden<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// SpScatterOp: tp
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %e = mimo.embed %mb on %g {language = @lm, modalities = []} : !mimo.hidden<8>
  %t = mimo.targets %mb on %g
// expected-error @+1 {{'mimo.sp_scatter' op tp must be at least 2 to scatter}}
  %s = mimo.sp_scatter %e {tp = 1 : i64, seq_dim = 0 : i64} : !mimo.hidden<8>
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageOp: embeddings without targets
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  %e = mimo.embed %mb on %g {language = @lm, modalities = []} : !mimo.hidden<8>
  %t = mimo.targets %mb on %g
// expected-error @+1 {{'mimo.language' op takes embeddings and targets together}}
  %loss = mimo.language @lm(%mb) embeddings(%e : !mimo.hidden<8>) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// StageOp: counts
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{'mimo.stage' op needs 0 <= pp <= stage, warmup >= 0, steady >= 0 and cooldown = warmup}}
  mimo.stage @lm {pp = 0 : i64, stage = 0 : i64, warmup = 1 : i64, steady = 0 : i64, cooldown = 0 : i64}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ExchangeOp: only sends and receives
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
    mimo.exchange {
// expected-error @+1 {{'mimo.forward' op cannot be posted in a mimo.exchange: only sends and receives can}}
      mimo.forward @lm {mb = 0 : i64}
    }
  }
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// ExchangeOp: a posted message goes alone
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
    mimo.exchange {
// expected-error @+1 {{'mimo.bridge_send_grad' op is posted: a posted message goes alone, outside any mimo.exchange}}
      mimo.bridge_send_grad {bridge = 0 : i64, mb = 0 : i64, posted}
      mimo.recv_grad @lm {mb = 0 : i64}
    }
  }
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Instructions: each kind takes exactly its typed attributes
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
// expected-error @+1 {{'mimo.send_act' op takes no attribute 'bridge' (it takes chunk, mb, module)}}
    mimo.send_act @lm {bridge = 0 : i64, mb = 0 : i64}
  }
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Instructions: microbatch
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
// expected-error @+1 {{'mimo.bridge_send' op requires attribute 'mb'}}
    mimo.bridge_send {bridge = 0 : i64}
  }
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// Instructions: no microbatch
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
// expected-error @+1 {{'mimo.optimizer_step' op takes no attribute 'mb' (it takes none)}}
    mimo.optimizer_step {mb = 0 : i64}
  }
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// An enum attribute takes only its cases.
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
// expected-error @+2 {{expected ::mimo::ir::AttentionMaskKind to be one of: causal, dense}}
// expected-error @+1 {{failed to parse}}
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask sliding>}
}

// -----

// Instructions: a microbatch index is non-negative
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 1, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 4 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
  mimo.program "r" attributes {ranks = 1 : i64} {
// expected-error @+1 {{'mimo.forward' op attribute 'mb' failed to satisfy constraint: 64-bit signless integer attribute whose value is non-negative}}
    mimo.forward @lm {mb = -1 : i64}
  }
}

// -----

// LanguageOp: expert_tensor_parallel divides tp
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 2 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{expert_tensor_parallel 3 must divide tp 2}}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>, expert_parallel = 2 : i64, expert_tensor_parallel = 3 : i64}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// LanguageOp: expert_parallel divides dp x cp
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 2, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 2 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{expert_parallel 4 must divide dp x cp 2}}
  %loss = mimo.language @lm(%mb) on %g {modalities = [], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>, expert_parallel = 4 : i64}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}

// -----

// EncoderOp: expert_tensor_parallel needs sparse layers
mimo.model @m attributes {version = 1 : i64, seed = 0 : i64, precision = "fp32"} {
  %g = mimo.grid #mimo.parallel<tp = 2, cp = 1, pp = 1, dp = 1, rank_offset = 0, order = "tp-cp-dp-pp", sequence_parallel = false>
  %src = mimo.data_source "synthetic"
  %mb = mimo.microbatch %src {micro_batch_size = 1 : i64, num_microbatches = 1 : i64, seq_length = 8 : i64, packing = false, attention_mask = #mimo<attention_mask causal>}
// expected-error @+1 {{expert_tensor_parallel needs sparse layers (expert_parallel)}}
  %img = mimo.encoder @images(%mb) on %g {special_token_id = 1000 : i64, arch = #mimo.encoder_arch<feature_dim = 48, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>, expert_tensor_parallel = 1 : i64} : !mimo.tokens<8>
  %loss = mimo.language @lm(%mb, %img : !mimo.tokens<8>) on %g {modalities = ["images"], arch = #mimo.language_arch<vocab_size = 16, hidden_size = 8, num_layers = 1, num_heads = 2, ffn_hidden_size = 8>}
  mimo.train %loss {steps = 1 : i64, optimizer = "adamw", lr = 1.0e-03 : f64, betas = array<f64: 0.9, 0.999>, eps = 1.0e-08 : f64, weight_decay = 0.0 : f64, clip_grad = 1.0 : f64}
}
