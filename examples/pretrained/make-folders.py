#!/usr/bin/env python3
"""Writes the two Hugging Face folders the worked example of
docs/pretrained.md starts from, scaled down to run on a CPU: a Llama 3.1
(grouped-query attention, rope_theta 500000, the llama3 RoPE rescaling)
and a SigLIP vision tower (patches of 14 pixels, as so400m-patch14 has),
as transformers saves them (config.json, model.safetensors, with the
generation, tokenizer and image processor configs beside). The weights
are random: replace the folders with real ones (Meta-Llama-3.1-8B,
siglip-so400m-patch14-384) and the sizes in llava-siglip.json with theirs.

usage: make-folders.py [OUT]   (default: hf/ beside this file)
Needs python3 and numpy only.
"""
import json
import os
import struct
import sys

import numpy as np

LLAMA = {"architectures": ["LlamaForCausalLM"], "model_type": "llama",
         "vocab_size": 1024, "hidden_size": 128, "intermediate_size": 448,
         "num_hidden_layers": 4, "num_attention_heads": 4,
         "num_key_value_heads": 2, "hidden_act": "silu",
         "max_position_embeddings": 512, "rms_norm_eps": 1e-5,
         "rope_theta": 500000.0,
         "rope_scaling": {"rope_type": "llama3", "factor": 8.0,
                          "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                          "original_max_position_embeddings": 128},
         "tie_word_embeddings": False, "attention_bias": False,
         "mlp_bias": False, "bos_token_id": 1001, "eos_token_id": 1002,
         "torch_dtype": "bfloat16"}
# Beside the weights, as in a model's own folder: what generate() and the
# tokenizer read (mimo's --export-hf copies them into its export). A real
# folder has its tokenizer.json here too.
GENERATION = {"bos_token_id": 1001, "eos_token_id": 1002, "do_sample": True,
              "temperature": 0.6, "top_p": 0.9}
TOKENIZER = {"bos_token": "<|begin_of_text|>", "eos_token": "<|end_of_text|>",
             "model_max_length": 512,
             "tokenizer_class": "PreTrainedTokenizerFast"}
PREPROCESSOR = {"image_processor_type": "SiglipImageProcessor",
                "do_resize": True, "size": {"height": 56, "width": 56},
                "resample": 3, "do_rescale": True,
                "rescale_factor": 0.00392156862745098, "do_normalize": True,
                "image_mean": [0.5, 0.5, 0.5], "image_std": [0.5, 0.5, 0.5]}
SIGLIP = {"architectures": ["SiglipVisionModel"],
          "model_type": "siglip_vision_model", "hidden_size": 64,
          "intermediate_size": 256, "num_hidden_layers": 3,
          "num_attention_heads": 4, "num_channels": 3, "patch_size": 14,
          "image_size": 56, "layer_norm_eps": 1e-6,
          "hidden_act": "gelu_pytorch_tanh", "torch_dtype": "bfloat16"}


def bf16(a):
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    return ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()


def write(folder, config, tensors, beside=()):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    for name, doc in beside:
        with open(os.path.join(folder, name), "w") as f:
            json.dump(doc, f, indent=2)
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        data = bf16(a)
        header[name] = {"dtype": "BF16", "shape": list(a.shape),
                        "data_offsets": [at, at + len(data)]}
        at += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(os.path.join(folder, "model.safetensors"), "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "hf")
    g = np.random.default_rng(0)
    w = lambda *shape: g.standard_normal(shape) / np.sqrt(shape[-1])
    ones = lambda n: np.ones(n) + 0.1 * g.standard_normal(n)

    c = LLAMA
    H, F, V = c["hidden_size"], c["intermediate_size"], c["vocab_size"]
    KV = c["num_key_value_heads"] * H // c["num_attention_heads"]
    t = [("model.embed_tokens.weight", 0.02 * g.standard_normal((V, H)))]
    for l in range(c["num_hidden_layers"]):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", ones(H)),
              (p + "self_attn.q_proj.weight", w(H, H)),
              (p + "self_attn.k_proj.weight", w(KV, H)),
              (p + "self_attn.v_proj.weight", w(KV, H)),
              (p + "self_attn.o_proj.weight", w(H, H)),
              (p + "post_attention_layernorm.weight", ones(H)),
              (p + "mlp.gate_proj.weight", w(F, H)),
              (p + "mlp.up_proj.weight", w(F, H)),
              (p + "mlp.down_proj.weight", w(H, F))]
    t += [("model.norm.weight", ones(H)), ("lm_head.weight", w(V, H))]
    write(os.path.join(out, "llama3"), c, t,
          [("generation_config.json", GENERATION),
           ("tokenizer_config.json", TOKENIZER)])

    c = SIGLIP
    H, F, p = c["hidden_size"], c["intermediate_size"], c["patch_size"]
    C, grid = c["num_channels"], (c["image_size"] // p) ** 2
    v = "vision_model."
    t = [(v + "embeddings.patch_embedding.weight", w(H, C, p, p) / p),
         (v + "embeddings.patch_embedding.bias", 0.02 * g.standard_normal(H)),
         (v + "embeddings.position_embedding.weight", 0.02 * g.standard_normal((grid, H)))]
    for l in range(c["num_hidden_layers"]):
        q = f"{v}encoder.layers.{l}."
        for n in ("layer_norm1", "layer_norm2"):
            t += [(q + n + ".weight", ones(H)), (q + n + ".bias", 0.02 * g.standard_normal(H))]
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t += [(f"{q}self_attn.{n}.weight", w(H, H)),
                  (f"{q}self_attn.{n}.bias", 0.02 * g.standard_normal(H))]
        t += [(q + "mlp.fc1.weight", w(F, H)), (q + "mlp.fc1.bias", 0.02 * g.standard_normal(F)),
              (q + "mlp.fc2.weight", w(H, F)), (q + "mlp.fc2.bias", 0.02 * g.standard_normal(H))]
    t += [(v + "post_layernorm.weight", ones(H)), (v + "post_layernorm.bias", np.zeros(H))]
    write(os.path.join(out, "siglip"), c, t,
          [("preprocessor_config.json", PREPROCESSOR)])
    print(f"wrote {out}/llama3 and {out}/siglip")


if __name__ == "__main__":
    main()
