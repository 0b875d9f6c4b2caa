#!/usr/bin/env python3
"""Loading a 1B-class Llama-shape Hugging Face folder (docs/pretrained.md).

Writes a random bf16 Llama-shape folder (hidden 2048, 16 layers, 16 heads,
4 key/value heads, FFN 5632, vocabulary 32000: 0.85B parameters, 1.7 GB in
two shards), compiles a model that starts from it at TP2 x PP2 (4 ranks,
threads of one process), runs `mimo-run --steps 0` (every rank maps the
shards and reads its own blocks, nothing trained) and `--steps 1`, and
prints the wall times, the process's peak RSS (/usr/bin/time) and the memory
plan's bytes for the 4 ranks (`mimoc explain --format json`).

usage: /usr/bin/python3 bench/hf_load.py [--build build] [--work DIR]
       [--out bench/results/hf-load-cpu.md]
"""
import argparse
import json
import os
import re
import struct
import subprocess
import time

import numpy as np

H, L, N, G, F, V = 2048, 16, 16, 4, 5632, 32000


def tensors():
    d = H // N
    out = [("model.embed_tokens.weight", (V, H))]
    for l in range(L):
        p = f"model.layers.{l}."
        out += [(p + "input_layernorm.weight", (H,)),
                (p + "self_attn.q_proj.weight", (H, H)),
                (p + "self_attn.k_proj.weight", (G * d, H)),
                (p + "self_attn.v_proj.weight", (G * d, H)),
                (p + "self_attn.o_proj.weight", (H, H)),
                (p + "post_attention_layernorm.weight", (H,)),
                (p + "mlp.gate_proj.weight", (F, H)),
                (p + "mlp.up_proj.weight", (F, H)),
                (p + "mlp.down_proj.weight", (H, F))]
    out += [("model.norm.weight", (H,)), ("lm_head.weight", (V, H))]
    return out


def write_folder(folder):
    os.makedirs(folder, exist_ok=True)
    with open(os.path.join(folder, "config.json"), "w") as f:
        json.dump({"model_type": "llama", "architectures": ["LlamaForCausalLM"],
                   "hidden_size": H, "num_hidden_layers": L,
                   "num_attention_heads": N, "num_key_value_heads": G,
                   "intermediate_size": F, "vocab_size": V,
                   "rms_norm_eps": 1e-5, "rope_theta": 500000.0,
                   "hidden_act": "silu", "tie_word_embeddings": False,
                   "torch_dtype": "bfloat16"}, f)
    rng = np.random.default_rng(0)
    all_t = tensors()
    half = len(all_t) // 2
    weight_map = {}
    params = 0
    for i, part in enumerate((all_t[:half], all_t[half:])):
        name = f"model-{i + 1:05d}-of-00002.safetensors"
        header, at = {"__metadata__": {"format": "pt"}}, 0
        for t, shape in part:
            n = int(np.prod(shape))
            header[t] = {"dtype": "BF16", "shape": list(shape),
                         "data_offsets": [at, at + 2 * n]}
            at += 2 * n
            weight_map[t] = name
            params += n
        text = json.dumps(header).encode()
        text += b" " * ((8 - len(text) % 8) % 8)
        with open(os.path.join(folder, name), "wb") as f:
            f.write(struct.pack("<Q", len(text)))
            f.write(text)
            for t, shape in part:
                a = (rng.standard_normal(shape, dtype=np.float32) * 0.02)
                if len(shape) == 1:
                    a = a + 1.0
                f.write((a.view(np.uint32) >> 16).astype("<u2").tobytes())
    with open(os.path.join(folder, "model.safetensors.index.json"), "w") as f:
        json.dump({"weight_map": weight_map}, f)
    return params


def run(cmd):
    start = time.time()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True,
                       text=True)
    wall = time.time() - start
    if r.returncode != 0:
        raise SystemExit(f"{' '.join(cmd)}: exit {r.returncode}\n{r.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)",
                        r.stderr).group(1)) * 1024
    return wall, rss


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default="build")
    ap.add_argument("--work", default="/tmp/mimo-hf-load")
    ap.add_argument("--out", default="bench/results/hf-load-cpu.md")
    args = ap.parse_args()
    folder = os.path.join(args.work, "llama-1b")
    params = write_folder(folder)
    model = {"version": 1, "name": "hf-load", "precision": "bf16",
             "world_size": 4,
             "batch": {"micro_batch_size": 1, "num_microbatches": 2,
                       "seq_length": 256},
             "modules": [{"name": "language", "kind": "language",
                          "arch": {"vocab_size": V, "hidden_size": H,
                                   "num_layers": L, "num_heads": N,
                                   "num_query_groups": G,
                                   "ffn_hidden_size": F,
                                   "rope_theta": 500000},
                          "parallel": {"tp": 2, "pp": 2},
                          "init": {"from": folder, "format": "hf"}}]}
    path = os.path.join(args.work, "model.json")
    json.dump(model, open(path, "w"))
    plan = os.path.join(args.work, "plan.json")
    b = os.path.join(args.build, "bin")
    compile_wall, _ = run([os.path.join(b, "mimoc"), "compile", "-q", path,
                           "-o", plan])
    explain = json.loads(subprocess.run(
        [os.path.join(b, "mimoc"), "explain", plan, "--format", "json"],
        capture_output=True, text=True, check=True).stdout)
    ranks = explain["ranks"]
    planned = [r["memory"]["total_bytes"] for r in ranks]
    load_wall, load_rss = run([os.path.join(b, "mimo-run"), plan, "--steps", "0",
                               "--device", "cpu"])
    # The same model initialised at random: what starting costs without
    # the folder.
    del model["modules"][0]["init"]
    plain = os.path.join(args.work, "plain.json")
    json.dump(model, open(plain, "w"))
    run([os.path.join(b, "mimoc"), "compile", "-q", plain, "-o", plain + ".plan"])
    plain_wall, plain_rss = run([os.path.join(b, "mimo-run"), plain + ".plan",
                                 "--steps", "0", "--device", "cpu"])
    metrics = os.path.join(args.work, "metrics.jsonl")
    step_wall, step_rss = run([os.path.join(b, "mimo-run"), plan, "--steps", "1",
                               "--device", "cpu", "--metrics", metrics])
    step = [json.loads(l) for l in open(metrics) if l.strip()][-1]
    gib = 2.0 ** 30
    size = sum(os.path.getsize(os.path.join(folder, f)) for f in os.listdir(folder))
    lines = [
        "# Loading a 1B-class Hugging Face folder on the CPU",
        "",
        f"`/usr/bin/python3 bench/hf_load.py` on a {os.cpu_count()}-core "
        f"machine, {time.strftime('%Y-%m-%d')}: a random bf16 Llama-shape "
        f"folder of {params / 1e9:.2f}B parameters ({size / gib:.2f} GiB in "
        "two shards), the language module at TP2 x PP2 (4 ranks, threads of "
        "one mimo-run process), precision bf16.",
        "",
        "| | wall | peak RSS of the process |",
        "|---|---:|---:|",
        f"| `mimoc compile` (config.json and every tensor header checked) | {compile_wall:.2f} s | |",
        f"| `mimo-run --steps 0` (start, every rank maps the shards and reads its blocks) | {load_wall:.2f} s | {load_rss / gib:.2f} GiB |",
        f"| `mimo-run --steps 1` (the same and one step) | {step_wall:.2f} s | {step_rss / gib:.2f} GiB |",
        f"| `mimo-run --steps 0` of the same model without `init` (random weights) | {plain_wall:.2f} s | {plain_rss / gib:.2f} GiB |",
        "",
        f"Reading the folder adds {load_wall - plain_wall:.1f} s to the start "
        f"({size / gib / max(load_wall - plain_wall, 1e-9) * 1024:.0f} MiB/s of "
        "bf16 on these cores) and no memory: the peak with `init` is "
        f"{load_rss / plain_rss:.2f}x the peak without it.",
        "",
        f"The memory plan (`mimoc explain`): {' + '.join(f'{p / gib:.2f}' for p in planned)} "
        f"= {sum(planned) / gib:.2f} GiB for the 4 ranks; "
        f"--steps 0's peak RSS is {load_rss / sum(planned):.2f}x that "
        f"(RSS also counts the folder's pages while they are mapped, "
        f"{size / gib:.2f} GiB, and the CPU allocator's cached blocks). mimo's "
        f"own count of the step: the most bytes a rank held, "
        f"{step['peak_bytes'] / gib:.2f} GiB on rank {step['peak_rank']}, "
        f"against its plan's {planned[step['peak_rank']] / gib:.2f} GiB "
        f"({step['peak_bytes'] / planned[step['peak_rank']]:.2f}x).",
    ]
    text = "\n".join(lines) + "\n"
    print(text)
    with open(args.out, "w") as f:
        f.write(text)


if __name__ == "__main__":
    main()
