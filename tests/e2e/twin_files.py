"""The files of tests/e2e/twin.py, written and read with no code of mimo's:
safetensors (its own writer and reader), a mimo checkpoint folder that a
module's `init` (format mimo) accepts, and Hugging Face model folders
(LlamaForCausalLM / Qwen2ForCausalLM names and layouts, config.json, one file
or shards with an index).
"""
import json
import os
import struct

import numpy as np

from twin_models import (E_CHANNELS, E_FFN, E_H, E_HEADS, E_IMAGE, E_LAYERS,
                         E_PATCH, FFN, HEADS, HIDDEN, IMAGE_ID, LAYERS, VOCAB)

SEQ = 32  # the samples' length (twin.py's seq_length)

# --------------------------------------------------------------------------
# Files: safetensors, the checkpoint folder, jsonl, model.json.


def bf16_bytes(a):
    """float32 values (already bf16-exact) as little-endian bf16 bits."""
    bits = np.ascontiguousarray(a, dtype="<f4").view("<u4")
    rounded = (bits + 0x7FFF + ((bits >> 16) & 1)) >> 16
    return rounded.astype("<u2").tobytes()


def write_safetensors(path, tensors, metadata=None, dtype="F32"):
    """tensors: [(name, np.float32 array)] in order, written as `dtype`
    (F32, BF16 or F16)."""
    header = {}
    if metadata:
        header["__metadata__"] = metadata
    at = 0
    blobs = []
    for name, a in tensors:
        if dtype == "BF16":
            data = bf16_bytes(a)
        elif dtype == "F16":
            data = np.ascontiguousarray(a, dtype="<f2").tobytes()
        else:
            data = np.ascontiguousarray(a, dtype="<f4").tobytes()
        header[name] = {"dtype": dtype, "shape": list(a.shape),
                        "data_offsets": [at, at + len(data)]}
        at += len(data)
        blobs.append(data)
    text = json.dumps(header, separators=(",", ":")).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)))
        f.write(text)
        for b in blobs:
            f.write(b)


def read_safetensors(path):
    """{name: (shape, raw little-endian bytes)}, checking the tiling."""
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    header.pop("__metadata__", None)
    out, spans = {}, []
    for name, t in header.items():
        assert t["dtype"] == "F32", (path, name, t["dtype"])
        b, e = t["data_offsets"]
        assert e - b == 4 * int(np.prod(t["shape"], dtype=np.int64)), (path, name)
        spans.append((b, e))
        out[name] = (tuple(t["shape"]), body[b:e])
    at = 0
    for b, e in sorted(spans):
        assert b == at, (path, "tensors do not tile the data")
        at = e
    assert at == len(body), (path, "trailing or missing bytes")
    return out


def write_init(twin, folder, extra=None):
    """A mimo checkpoint folder that `init` accepts (runtime/checkpoint/
    Checkpoint.cpp openModuleWeights): a step folder with state.json (only
    its presence is needed; a valid minimal one is written) and
    model.safetensors holding every parameter of the module as F32 at its
    global shape, named `language.LOCAL`. Returns {mimo name: fp32 bytes}."""
    os.makedirs(folder, exist_ok=True)
    tensors, raw = [], {}
    for name, t in twin.params.items():
        a = twin.mimo_tensor(name, t).numpy().astype("<f4")
        full = "language." + twin.mimo_name(name)
        tensors.append((full, a))
        raw[full] = np.ascontiguousarray(a).tobytes()
    for full, t in (extra or {}).items():  # other modules', mimo's layout
        a = t.numpy().astype("<f4")
        tensors.append((full, a))
        raw[full] = np.ascontiguousarray(a).tobytes()
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors,
                      {"format": "mimo", "model": "twin"})
    with open(os.path.join(folder, "state.json"), "w") as f:
        json.dump({"format": "mimo-checkpoint", "version": 1, "model": "twin",
                   "step": 1}, f)
    return raw


HF_NAMES = {"input_layernorm": "input_layernorm.weight",
            "post_attention_layernorm": "post_attention_layernorm.weight",
            "q_proj": "self_attn.q_proj.weight",
            "k_proj": "self_attn.k_proj.weight",
            "v_proj": "self_attn.v_proj.weight",
            "o_proj": "self_attn.o_proj.weight",
            "q_bias": "self_attn.q_proj.bias",
            "k_bias": "self_attn.k_proj.bias",
            "v_bias": "self_attn.v_proj.bias",
            "gate_proj": "mlp.gate_proj.weight",
            "up_proj": "mlp.up_proj.weight",
            "down_proj": "mlp.down_proj.weight"}


def hf_name(name):
    """The Hugging Face (LlamaForCausalLM, Qwen2ForCausalLM) name of a twin
    parameter."""
    if name == "embed_tokens":
        return "model.embed_tokens.weight"
    if name == "norm":
        return "model.norm.weight"
    if name == "lm_head":
        return "lm_head.weight"
    layer, l, part = name.split(".")
    return f"model.layers.{l}.{HF_NAMES[part]}"


def hf_config(twin):
    """The twin's config.json (LlamaConfig's or Qwen2Config's keys)."""
    cfg, hf = twin.cfg, twin.cfg["hf"]
    config = {"architectures": ["Qwen2ForCausalLM" if hf["model_type"] == "qwen2"
                                else "LlamaForCausalLM"],
              "model_type": hf["model_type"], "hidden_act": "silu",
              "hidden_size": HIDDEN, "intermediate_size": FFN,
              "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
              "num_key_value_heads": cfg["groups"], "vocab_size": VOCAB,
              "rms_norm_eps": cfg["eps"], "rope_theta": cfg["theta"],
              "tie_word_embeddings": bool(cfg.get("tied")),
              "max_position_embeddings": 4 * SEQ,
              "torch_dtype": {"F32": "float32", "BF16": "bfloat16",
                              "F16": "float16"}[hf["dtype"]]}
    if hf["model_type"] == "llama":
        config["attention_bias"] = False
        config["mlp_bias"] = False
    if cfg["scaling"]:
        config["rope_scaling"] = dict(cfg["scaling"], rope_type="llama3")
    return config


def write_hf(twin, folder):
    """A Hugging Face model folder of the twin, as transformers saves one:
    config.json, the tensors in torch's layout ([out, in]) under their
    Hugging Face names, in the case's dtype, one file or shards named by
    model.safetensors.index.json."""
    tensors = [(hf_name(n), t.numpy().astype("<f4"))
               for n, t in twin.params.items()]
    write_folder(folder, hf_config(twin), tensors, twin.cfg["hf"]["dtype"],
                 twin.cfg["hf"]["shards"])


def write_folder(folder, config, tensors, dtype, shards):
    """config.json and `tensors` [(name, array)] in one file or shards."""
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=2)
    if shards == 1:
        write_safetensors(os.path.join(folder, "model.safetensors"), tensors,
                          {"format": "pt"}, dtype)
        return
    per = (len(tensors) + shards - 1) // shards
    weight_map = {}
    for i in range(shards):
        name = f"model-{i + 1:05d}-of-{shards:05d}.safetensors"
        part = tensors[i * per:(i + 1) * per]
        write_safetensors(os.path.join(folder, name), part, {"format": "pt"},
                          dtype)
        weight_map.update({n: name for n, _ in part})
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"metadata": {"total_size": 0}, "weight_map": weight_map}, f,
                  indent=2)


# --------------------------------------------------------------------------
# Vision towers: CLIP and SigLIP folders, LLaVA's.


def tower_config(tower):
    """A CLIPVisionConfig's or SiglipVisionConfig's keys."""
    return {"model_type": ("clip" if tower.clip else "siglip") + "_vision_model",
            "hidden_size": E_H, "intermediate_size": E_FFN,
            "num_hidden_layers": E_LAYERS, "num_attention_heads": E_HEADS,
            "num_channels": E_CHANNELS, "patch_size": E_PATCH,
            "image_size": E_IMAGE, "layer_norm_eps": tower.eps,
            "hidden_act": "quick_gelu" if tower.clip else "gelu_pytorch_tanh"}


def write_tower(tower, folder):
    """A SiglipVisionModel's (or CLIPVisionModel's) folder with LLaVA's
    projector beside the tower, fp32 (as mimo's --export-hf writes one)."""
    config = dict(tower_config(tower), projector_hidden_act=tower.projector_act,
                  vision_feature_layer=tower.feature_layer,
                  vision_feature_select_strategy="default" if tower.clip else "full")
    tensors = [(n, t.numpy().astype("<f4")) for n, t in tower.tensors.items()]
    write_folder(folder, config, tensors, "F32", 1)


def llava_names(layout):
    """(tower, projector, language body, head) prefixes of a LLaVA folder:
    as transformers writes it before 4.52 (and mimo's --export-hf), or
    since."""
    if layout == "since-4.52":
        return ("model.vision_tower.", "model.multi_modal_projector.",
                "model.language_model.", "")
    return "vision_tower.", "multi_modal_projector.", "language_model.model.", \
        "language_model."


def write_llava(lm, tower, folder, dtype, shards, layout="before-4.52"):
    """A LlavaForConditionalGeneration folder: config.json with text_config
    and vision_config; the tower, the projector and the language model
    under `layout`'s names (llava_names)."""
    config = {"architectures": ["LlavaForConditionalGeneration"],
              "model_type": "llava", "text_config": hf_config(lm),
              "vision_config": tower_config(tower),
              "projector_hidden_act": tower.projector_act,
              "vision_feature_layer": tower.feature_layer,
              "vision_feature_select_strategy": "default",
              "image_token_index": IMAGE_ID}
    vision, projector, body, head = llava_names(layout)
    tensors = []
    for n, t in tower.tensors.items():
        if n.startswith("multi_modal_projector."):
            name = projector + n[len("multi_modal_projector."):]
        else:
            name = vision + n
        tensors.append((name, t.numpy().astype("<f4")))
    for n, t in lm.params.items():
        name = hf_name(n)
        name = body + name[len("model."):] if name.startswith("model.") \
            else head + name
        tensors.append((name, t.numpy().astype("<f4")))
    write_folder(folder, config, tensors, dtype, shards)


def read_folder(folder):
    """{name: np.float64 array} of a one-file fp32 folder."""
    return {name: np.frombuffer(raw, "<f4").reshape(shape).astype(np.float64)
            for name, (shape, raw) in
            read_safetensors(os.path.join(folder, "model.safetensors")).items()}
