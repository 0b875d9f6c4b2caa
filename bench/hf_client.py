#!/usr/bin/env python3
"""A real client of mimo's --export-hf (SPEC §28): transformers itself loads
the exported folders and computes the loss on a batch, which must equal
mimo's loss on the same batch from the same folder (relative 1e-4).

Two halves, because the development machines have mimo and no transformers
and the GPU machines the reverse:

  hf_client.py prepare OUT [--build build]
      (development machine, scripts/gpu-bundle.sh) for each case: random
      Hugging Face folders (numpy), mimo trains one step from them and
      exports the checkpoint (--export-hf, fp32); mimo then starts from the
      export and its first loss on a fixed batch is written beside it:
      OUT/<case>/{hf/, batch.json, expected.json}.
  hf_client.py check OUT [--json FILE]
      (GPU machine, scripts/gpu-check.sh hf) loads OUT/<case>/hf with
      transformers (LlavaForConditionalGeneration, AutoModelForCausalLM),
      fp32, eager attention, on the GPU when there is one; its loss on
      batch.json against expected.json. Exit 0 when every case agrees, 1
      when one does not, 2 when transformers is missing (said in one line).

Cases: llava (a CLIP tower with class token, quick_gelu, the penultimate
layer, LLaVA's gelu projector, a Llama with grouped-query attention; one
LlavaForConditionalGeneration folder), qwen2 (q, k, v biases, GQA,
rope_theta 1e6; its family's folder), and the mixtures of experts
mixtral, qwen2_moe (a shared expert and its gate, q, k, v biases) and
qwen3_moe (q/k norms), 4 experts, top 2, their families' folders (the
loss is the language model's: output_router_logits is false). The loss is docs/model.md's: the
mean over the batch's positions whose input and next token are text, which
is transformers' labels with -100 at image tokens and right after them.
"""
import argparse
import json
import os
import shutil
import struct
import subprocess
import sys

VOCAB, HIDDEN, LAYERS, HEADS, GROUPS, FFN = 128, 64, 2, 4, 2, 128
IMAGE_ID = VOCAB - 1
SEQ, BATCH = 32, 4
# The tower: 8x8 RGB images of 2x2 patches (16 patch rows of 12 values).
E_HIDDEN, E_LAYERS, E_HEADS, E_FFN, PATCH, IMAGE = 32, 2, 2, 64, 2, 8
GRID = (IMAGE // PATCH) ** 2
TOL = 1e-4


# ---------------------------------------------------------------------------
# prepare (numpy and mimo's binaries)

def write_safetensors(path, tensors):
    header, blobs, at = {"__metadata__": {"format": "pt"}}, [], 0
    for name, a in tensors:
        data = a.astype("<f4").tobytes()
        header[name] = {"dtype": "F32", "shape": list(a.shape),
                        "data_offsets": [at, at + len(data)]}
        at += len(data)
        blobs.append(data)
    text = json.dumps(header).encode()
    text += b" " * ((8 - len(text) % 8) % 8)
    with open(path, "wb") as f:
        f.write(struct.pack("<Q", len(text)) + text + b"".join(blobs))


def write_folder(folder, config, tensors):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump(config, f, indent=1)
    write_safetensors(os.path.join(folder, "model.safetensors"), tensors)


def llama_tensors(g, qkv_bias, head_dim=HIDDEN // HEADS):
    import numpy as np
    w = lambda *shape: (g.standard_normal(shape) / np.sqrt(shape[-1]))
    ones = lambda n: 1 + 0.1 * g.standard_normal(n)
    kv, a = GROUPS * head_dim, HEADS * head_dim
    t = [("model.embed_tokens.weight", 0.5 * g.standard_normal((VOCAB, HIDDEN)))]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        t += [(p + "input_layernorm.weight", ones(HIDDEN)),
              (p + "self_attn.q_proj.weight", w(a, HIDDEN)),
              (p + "self_attn.k_proj.weight", w(kv, HIDDEN)),
              (p + "self_attn.v_proj.weight", w(kv, HIDDEN)),
              (p + "self_attn.o_proj.weight", w(HIDDEN, a)),
              (p + "post_attention_layernorm.weight", ones(HIDDEN)),
              (p + "mlp.gate_proj.weight", w(FFN, HIDDEN)),
              (p + "mlp.up_proj.weight", w(FFN, HIDDEN)),
              (p + "mlp.down_proj.weight", w(HIDDEN, FFN))]
        if qkv_bias:
            t += [(p + f"self_attn.{n}_proj.bias", 0.1 * g.standard_normal(d))
                  for n, d in (("q", a), ("k", kv), ("v", kv))]
    t += [("model.norm.weight", ones(HIDDEN)), ("lm_head.weight", w(VOCAB, HIDDEN))]
    return t


def clip_tensors(g):
    import numpy as np
    w = lambda *shape: (g.standard_normal(shape) / np.sqrt(shape[-1]))
    small = lambda n: 0.05 * g.standard_normal(n)
    v = "vision_model."
    t = [(v + "embeddings.patch_embedding.weight",
          w(E_HIDDEN, 3, PATCH, PATCH) / PATCH),
         (v + "embeddings.class_embedding", g.standard_normal(E_HIDDEN)),
         (v + "embeddings.position_embedding.weight",
          0.1 * g.standard_normal((GRID + 1, E_HIDDEN))),
         (v + "pre_layrnorm.weight", 1 + small(E_HIDDEN)),
         (v + "pre_layrnorm.bias", small(E_HIDDEN))]
    for l in range(E_LAYERS):
        q = f"{v}encoder.layers.{l}."
        for n in ("layer_norm1", "layer_norm2"):
            t += [(q + n + ".weight", 1 + small(E_HIDDEN)), (q + n + ".bias", small(E_HIDDEN))]
        for n in ("q_proj", "k_proj", "v_proj", "out_proj"):
            t += [(f"{q}self_attn.{n}.weight", w(E_HIDDEN, E_HIDDEN)),
                  (f"{q}self_attn.{n}.bias", small(E_HIDDEN))]
        t += [(q + "mlp.fc1.weight", w(E_FFN, E_HIDDEN)), (q + "mlp.fc1.bias", small(E_FFN)),
              (q + "mlp.fc2.weight", w(E_HIDDEN, E_FFN)), (q + "mlp.fc2.bias", small(E_HIDDEN))]
    t += [(v + "post_layernorm.weight", 1 + small(E_HIDDEN)),
          (v + "post_layernorm.bias", small(E_HIDDEN))]
    return t


# The mixtures of experts: (model_type, architecture, HF names of an
# expert's gate, up and down, the sparse block's prefix, shared expert,
# q/k/v biases, q/k norms).
MOE = {
    "mixtral": ("mixtral", "MixtralForCausalLM", ("w1", "w3", "w2"),
                "block_sparse_moe.", False, False, False),
    "qwen2_moe": ("qwen2_moe", "Qwen2MoeForCausalLM",
                  ("gate_proj", "up_proj", "down_proj"), "mlp.", True, True,
                  False),
    "qwen3_moe": ("qwen3_moe", "Qwen3MoeForCausalLM",
                  ("gate_proj", "up_proj", "down_proj"), "mlp.", False, False,
                  True),
}
EXPERTS, TOP_K, EXPERT_FFN, SHARED_FFN = 4, 2, 32, 64


def moe_head_dim(name):
    """Qwen3-MoE's heads twice hidden_size / num_heads wide, as the
    released Qwen3-30B-A3B's (arch.head_dim); the others' the quotient."""
    return 2 * HIDDEN // HEADS if name == "qwen3_moe" else HIDDEN // HEADS


def moe_tensors(g, name):
    """A MoE folder's tensors: llama_tensors' with each layer's MLP made
    sparse (and Qwen3's q/k norms)."""
    import numpy as np
    _, _, linear, block, shared, bias, qk_norm = MOE[name]
    w = lambda *shape: (g.standard_normal(shape) / np.sqrt(shape[-1]))
    t = [(n, a) for n, a in llama_tensors(g, bias, moe_head_dim(name))
         if ".mlp." not in n]
    for l in range(LAYERS):
        p = f"model.layers.{l}."
        t.append((p + block + "gate.weight", 2 * w(EXPERTS, HIDDEN)))
        for j in range(EXPERTS):
            e = f"{p}{block}experts.{j}."
            t += [(e + linear[0] + ".weight", w(EXPERT_FFN, HIDDEN)),
                  (e + linear[1] + ".weight", w(EXPERT_FFN, HIDDEN)),
                  (e + linear[2] + ".weight", w(HIDDEN, EXPERT_FFN))]
        if shared:
            e = p + "mlp.shared_expert."
            t += [(e + "gate_proj.weight", w(SHARED_FFN, HIDDEN)),
                  (e + "up_proj.weight", w(SHARED_FFN, HIDDEN)),
                  (e + "down_proj.weight", w(HIDDEN, SHARED_FFN)),
                  (p + "mlp.shared_expert_gate.weight", w(1, HIDDEN))]
        if qk_norm:
            d = moe_head_dim(name)
            t += [(p + "self_attn.q_norm.weight", 1 + 0.1 * g.standard_normal(d)),
                  (p + "self_attn.k_norm.weight", 1 + 0.1 * g.standard_normal(d))]
    return t


def moe_config(name):
    model_type, arch, _, _, shared, _, _ = MOE[name]
    c = text_config(False)
    c.update(model_type=model_type, architectures=[arch],
             num_experts_per_tok=TOP_K, output_router_logits=False,
             router_aux_loss_coef=0.01, head_dim=moe_head_dim(name))
    if name == "mixtral":
        c.update(num_local_experts=EXPERTS, intermediate_size=EXPERT_FFN)
    else:
        c.update(num_experts=EXPERTS, moe_intermediate_size=EXPERT_FFN,
                 norm_topk_prob=name == "qwen3_moe", decoder_sparse_step=1,
                 mlp_only_layers=[])
    if shared:
        c["shared_expert_intermediate_size"] = SHARED_FFN
    return c


def moe_module(name, init):
    m = language_module(False, init, {})
    arch = m["arch"]
    arch["family"] = name
    arch["rope_theta"] = 500000
    if moe_head_dim(name) != HIDDEN // HEADS:
        arch["head_dim"] = moe_head_dim(name)
    moe = {"num_experts": EXPERTS, "top_k": TOP_K,
           "expert_ffn_hidden_size": EXPERT_FFN,
           "router": {"norm_topk": name != "qwen2_moe"}}
    if name == "mixtral":
        arch["ffn_hidden_size"] = EXPERT_FFN
    if MOE[name][4]:
        moe["shared_expert_ffn_hidden_size"] = SHARED_FFN
    arch["moe"] = moe
    return m


def text_config(qwen):
    c = {"model_type": "qwen2" if qwen else "llama", "vocab_size": VOCAB,
         "hidden_size": HIDDEN, "intermediate_size": FFN,
         "num_hidden_layers": LAYERS, "num_attention_heads": HEADS,
         "num_key_value_heads": GROUPS, "hidden_act": "silu",
         "max_position_embeddings": 256, "rms_norm_eps": 1e-6,
         "rope_theta": 1000000.0 if qwen else 500000.0,
         "tie_word_embeddings": False, "bos_token_id": 1, "eos_token_id": 2}
    c["architectures"] = ["Qwen2ForCausalLM" if qwen else "LlamaForCausalLM"]
    return c


def clip_config():
    return {"architectures": ["CLIPVisionModel"], "model_type": "clip_vision_model",
            "hidden_size": E_HIDDEN, "intermediate_size": E_FFN,
            "num_hidden_layers": E_LAYERS, "num_attention_heads": E_HEADS,
            "num_channels": 3, "patch_size": PATCH, "image_size": IMAGE,
            "layer_norm_eps": 1e-5, "hidden_act": "quick_gelu"}


def language_module(qwen, init, parallel):
    arch = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_layers": LAYERS,
            "num_heads": HEADS, "num_query_groups": GROUPS,
            "ffn_hidden_size": FFN, "norm_eps": 1e-6,
            "rope_theta": 1000000 if qwen else 500000}
    if qwen:
        arch["qkv_bias"] = True
    return {"name": "language", "kind": "language", "arch": arch,
            "parallel": parallel, "init": {"from": init, "format": "hf"}}


def tower_module(init):
    return {"name": "images", "kind": "encoder", "special_token_id": IMAGE_ID,
            "arch": {"feature_dim": 3 * PATCH * PATCH, "hidden_size": E_HIDDEN,
                     "num_layers": E_LAYERS, "num_heads": E_HEADS,
                     "ffn_hidden_size": E_FFN, "bias": True,
                     "position_embeddings": "learned", "max_positions": GRID + 1,
                     "pre_norm": True, "class_token": True, "patch_bias": False,
                     "output_layer": -2, "activation": "quick_gelu",
                     "norm_eps": 1e-5, "projector_activation": "gelu"},
            "init": {"from": init, "format": "hf"}}


def patch_rows(image):
    """docs/model.md's rows of an image [3, S, S]: each patch in (channel,
    row, col) order, the patches row-major."""
    rows = []
    for i in range(0, image.shape[1], PATCH):
        for j in range(0, image.shape[2], PATCH):
            rows.append(image[:, i:i + PATCH, j:j + PATCH].reshape(-1).tolist())
    return rows


def batch_of(g, images):
    """BATCH samples of SEQ tokens; with `images`, each has one image's GRID
    tokens at a random place."""
    import numpy as np
    samples = []
    for _ in range(BATCH):
        ids = [int(t) for t in g.integers(3, IMAGE_ID, SEQ)]
        sample = {"input_ids": ids}
        if images:
            at = int(g.integers(1, SEQ - GRID - 1))
            ids[at:at + GRID] = [IMAGE_ID] * GRID
            pixels = g.standard_normal((3, IMAGE, IMAGE)).astype(np.float32)
            sample["pixel_values"] = pixels.tolist()
        samples.append(sample)
    return samples


def write_jsonl(path, samples):
    import numpy as np
    with open(path, "w") as f:
        for s in samples:
            line = {"input_ids": s["input_ids"]}
            if "pixel_values" in s:
                line["images"] = {"features": patch_rows(
                    np.array(s["pixel_values"], dtype=np.float32))}
            f.write(json.dumps(line) + "\n")


def run(cmd):
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=600)
    if r.returncode != 0:
        sys.exit(f"hf_client.py: {' '.join(cmd)} exited {r.returncode}:\n"
                 f"{r.stdout[-2000:]}{r.stderr[-4000:]}")


def prepare_case(name, out, bin_dir):
    import numpy as np
    g = np.random.default_rng(sum(map(ord, name)))
    work = os.path.join(out, name)
    shutil.rmtree(work, ignore_errors=True)  # an export never overwrites
    os.makedirs(work)
    llava = name == "llava"
    lm_dir = os.path.join(work, "init-language")
    if name in MOE:
        write_folder(lm_dir, moe_config(name), moe_tensors(g, name))
        modules = [moe_module(name, lm_dir)]
    else:
        write_folder(lm_dir, text_config(not llava),
                     llama_tensors(g, not llava))
        modules = [language_module(not llava, lm_dir,
                                   {"rank_offset": 1} if llava else {})]
    if llava:
        tower_dir = os.path.join(work, "init-tower")
        write_folder(tower_dir, clip_config(), clip_tensors(g))
        modules.insert(0, tower_module(tower_dir))
    train = os.path.join(work, "train.jsonl")
    write_jsonl(train, batch_of(g, llava))
    model = {"version": 1, "name": f"hf-client-{name}", "seed": 3,
             "world_size": len(modules),
             "batch": {"micro_batch_size": 2, "num_microbatches": BATCH // 2,
                       "seq_length": SEQ},
             "modules": modules, "data": {"source": "jsonl", "path": train},
             "train": {"lr": 0.001}}
    path = os.path.join(work, "train.json")
    json.dump(model, open(path, "w"), indent=1)
    plan, save = os.path.join(work, "train.plan.json"), os.path.join(work, "save")
    hf = os.path.join(work, "hf")
    run([os.path.join(bin_dir, "mimoc"), "compile", "-q", path, "-o", plan])
    run([os.path.join(bin_dir, "mimo-run"), plan, "--steps", "1", "--device",
         "cpu", "--save", save])
    run([os.path.join(bin_dir, "mimo-run"), plan, "--load", save,
         "--export-hf", hf, "--export-dtype", "fp32"])
    # mimo from the export, on the batch transformers will see.
    samples = batch_of(g, llava)
    data = os.path.join(work, "batch.jsonl")
    write_jsonl(data, samples)
    for module in modules:
        module["init"] = {"from": hf, "format": "hf"}
    model["data"]["path"] = data
    path = os.path.join(work, "check.json")
    json.dump(model, open(path, "w"), indent=1)
    plan, metrics = os.path.join(work, "check.plan.json"), os.path.join(work, "check.jsonl")
    run([os.path.join(bin_dir, "mimoc"), "compile", "-q", path, "-o", plan])
    run([os.path.join(bin_dir, "mimo-run"), plan, "--steps", "1", "--device",
         "cpu", "--metrics", metrics])
    loss = next(json.loads(l)["loss"] for l in open(metrics)
                if '"loss"' in l and '"step"' in l)
    json.dump(samples, open(os.path.join(work, "batch.json"), "w"))
    json.dump({"case": name, "loss": loss, "image_token_id": IMAGE_ID,
               "class": "LlavaForConditionalGeneration" if llava
               else "AutoModelForCausalLM"},
              open(os.path.join(work, "expected.json"), "w"), indent=1)
    print(f"hf_client.py: {name}: {hf} (mimo's loss {loss:.8f})")


# ---------------------------------------------------------------------------
# check (torch and transformers)

def labels_of(ids, image_id):
    """transformers' labels for docs/model.md's loss: -100 at an image token
    and at the token after one (no prediction from an image row)."""
    labels = []
    for j, t in enumerate(ids):
        image = t == image_id or (j > 0 and ids[j - 1] == image_id)
        labels.append(-100 if image else t)
    return labels


def check_case(folder, torch, transformers, device):
    expected = json.load(open(os.path.join(folder, "expected.json")))
    samples = json.load(open(os.path.join(folder, "batch.json")))
    cls = (transformers.LlavaForConditionalGeneration
           if expected["class"] == "LlavaForConditionalGeneration"
           else transformers.AutoModelForCausalLM)
    path = os.path.join(folder, "hf")
    try:
        model = cls.from_pretrained(path, dtype=torch.float32,
                                    attn_implementation="eager")
    except TypeError:  # transformers before `dtype`
        model = cls.from_pretrained(path, torch_dtype=torch.float32,
                                    attn_implementation="eager")
    model = model.to(device).eval()
    ids = torch.tensor([s["input_ids"] for s in samples], device=device)
    labels = torch.tensor([labels_of(s["input_ids"], expected["image_token_id"])
                           for s in samples], device=device)
    inputs = {"input_ids": ids, "labels": labels}
    if "pixel_values" in samples[0]:
        inputs["pixel_values"] = torch.tensor(
            [s["pixel_values"] for s in samples], dtype=torch.float32,
            device=device)
    with torch.no_grad():
        loss = model(**inputs).loss.item()
    rel = abs(loss - expected["loss"]) / max(abs(expected["loss"]), 1e-30)
    return {"case": expected["case"], "class": type(model).__name__,
            "transformers_loss": loss, "mimo_loss": expected["loss"],
            "rel": rel, "ok": rel <= TOL}


def check(bundle, json_out):
    try:
        import torch
        import transformers
    except ImportError as e:
        print(f"hf_client.py: transformers and torch are needed for the check "
              f"({e}); pip install transformers torch")
        return 2
    device = "cuda" if torch.cuda.is_available() else "cpu"
    results, status = [], 0
    print(f"### transformers {transformers.__version__} loads mimo's "
          f"--export-hf (torch {torch.__version__}, {device}, fp32)\n")
    print("| case | class | transformers loss | mimo loss | rel | |")
    print("|---|---|---|---|---|---|")
    for case in sorted(os.listdir(bundle)):
        folder = os.path.join(bundle, case)
        if not os.path.isfile(os.path.join(folder, "expected.json")):
            continue
        try:
            r = check_case(folder, torch, transformers, device)
        except Exception as e:  # a load or forward failure is the finding
            r = {"case": case, "error": f"{type(e).__name__}: {e}"[:500],
                 "ok": False}
        results.append(r)
        if "error" in r:
            print(f"| {case} | | | | | FAIL: {r['error']} |")
        else:
            print(f"| {case} | {r['class']} | {r['transformers_loss']:.8f} | "
                  f"{r['mimo_loss']:.8f} | {r['rel']:.2e} | "
                  f"{'ok' if r['ok'] else 'FAIL'} |")
        status = status or (0 if r["ok"] else 1)
    if not results:
        print(f"hf_client.py: no case in {bundle} (run prepare first)")
        status = 1
    if json_out:
        json.dump({"transformers": transformers.__version__,
                   "torch": torch.__version__, "device": device,
                   "tolerance": TOL, "cases": results},
                  open(json_out, "w"), indent=1)
    return status


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    sub = ap.add_subparsers(dest="mode", required=True)
    p = sub.add_parser("prepare")
    p.add_argument("out")
    p.add_argument("--build", default="build")
    c = sub.add_parser("check")
    c.add_argument("bundle")
    c.add_argument("--json")
    args = ap.parse_args()
    if args.mode == "prepare":
        try:
            import numpy  # noqa: F401
        except ImportError:
            sys.exit("hf_client.py: numpy is needed (Debian: python3-numpy; "
                     "pip: numpy)")
        bin_dir = os.path.abspath(os.path.join(args.build, "bin"))
        for name in ("llava", "qwen2") + tuple(MOE):
            prepare_case(name, os.path.abspath(args.out), bin_dir)
        return 0
    return check(args.bundle, args.json)


if __name__ == "__main__":
    sys.exit(main())
