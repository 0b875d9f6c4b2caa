#!/usr/bin/env python3
"""Data formats for image conversations (docs/data.md), measured on this
machine:

1. tools/mimo-prep: images per second, 256 random 336x336 PNGs cut into
   576 patch rows of 588 values (CLIP ViT-L/14-336's patches);
2. the same 256 samples as jsonl (features as JSON text) and as the binary
   dataset: file sizes, mimo-run's start-up (to the end of step 1) and
   tokens/s over 6 steps, and the process's peak RSS (/usr/bin/time);
3. a 1 GB feature file: mimo-run --steps 1 on a dataset whose .feat is
   1 GB against the same model on a 20 MB one (the open checks the header
   and the offsets; rows are read per sample): wall and peak RSS.

usage: /usr/bin/python3 bench/data_formats.py [--build build] [--work DIR]
       [--out bench/results/data-formats-cpu.md]
"""
import argparse
import json
import os
import re
import shutil
import struct
import subprocess
import sys
import time

import numpy as np

HERE = os.path.dirname(os.path.abspath(__file__))
ROOT = os.path.dirname(HERE)
sys.path.insert(0, os.path.join(ROOT, "tools", "mimo-prep"))
import prep_files  # noqa: E402

SPECIAL, VOCAB, SEQ, DIM, GRID = 1000, 1024, 704, 588, 576


def model(data, path, steps=6):
    m = {"version": 1, "name": "formats", "seed": 1,
         "batch": {"micro_batch_size": 4, "num_microbatches": 2, "seq_length": SEQ},
         "modules": [
             {"name": "images", "kind": "encoder", "special_token_id": SPECIAL,
              "arch": {"feature_dim": DIM, "hidden_size": 64, "num_layers": 2,
                       "num_heads": 4, "ffn_hidden_size": 256},
              "parallel": {"dp": 2}},
             {"name": "language", "kind": "language",
              "arch": {"vocab_size": VOCAB, "hidden_size": 128, "num_layers": 2,
                       "num_heads": 4, "ffn_hidden_size": 512},
              "parallel": {"tp": 2}}],
         "data": data, "train": {"steps": steps}}
    json.dump(m, open(path, "w"))


def run(cmd):
    start = time.time()
    r = subprocess.run(["/usr/bin/time", "-v"] + cmd, capture_output=True, text=True)
    wall = time.time() - start
    if r.returncode != 0:
        sys.exit(f"{' '.join(cmd)} failed:\n{r.stdout}{r.stderr[-3000:]}")
    rss = int(re.search(r"Maximum resident set size \(kbytes\): (\d+)", r.stderr).group(1))
    return wall, rss / 1024, r.stdout + r.stderr


def train(build, work, tag, data, steps=6):
    path = os.path.join(work, tag + ".json")
    model(data, path, steps)
    plan = os.path.join(work, tag + ".plan.json")
    subprocess.run([os.path.join(build, "bin", "mimoc"), "compile", "-q", path, "-o", plan],
                   check=True)
    metrics = os.path.join(work, tag + ".jsonl")
    wall, rss, _ = run([os.path.join(build, "bin", "mimo-run"), plan, "--steps", str(steps),
                        "--metrics", metrics])
    lines = [json.loads(l) for l in open(metrics) if '"tokens_per_s"' in l or '"loss"' in l]
    steps_ = [l for l in lines if "step" in l and "loss" in l]
    tps = [l.get("tokens_per_s") or l.get("tokens_per_second") for l in steps_]
    return wall, rss, steps_, tps


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--build", default=os.path.join(ROOT, "build"))
    ap.add_argument("--work", default="/tmp/mimo-data-formats")
    ap.add_argument("--out", default=os.path.join(HERE, "results", "data-formats-cpu.md"))
    args = ap.parse_args()
    build = os.path.abspath(args.build)
    shutil.rmtree(args.work, ignore_errors=True)
    os.makedirs(os.path.join(args.work, "images"))
    g = np.random.default_rng(0)
    from PIL import Image
    # 1. mimo-prep.
    records = []
    for i in range(256):
        Image.fromarray(g.integers(0, 256, (336, 336, 3), dtype=np.uint8)).save(
            os.path.join(args.work, "images", f"{i}.png"))
        records.append({"image": f"{i}.png", "conversations": [
            {"from": "human", "value": "<image>\nDescribe it."},
            {"from": "gpt", "value": "Noise " * (i % 7 + 1)}]})
    json.dump(records, open(os.path.join(args.work, "conv.json"), "w"))
    import prep_tokenizers
    vocab = {ch: b for b, ch in prep_tokenizers.bytes_to_unicode().items()}
    tok = {"model": {"type": "BPE", "vocab": vocab, "merges": []},
           "added_tokens": [{"id": 256, "content": "<s>"},
                            {"id": 257, "content": "</s>"}],
           "pre_tokenizer": {"type": "ByteLevel", "use_regex": True}}
    json.dump(tok, open(os.path.join(args.work, "tokenizer.json"), "w"))
    prep_model = os.path.join(args.work, "prep-model.json")
    model({"source": "synthetic"}, prep_model)
    m = json.load(open(prep_model))
    m["modules"][0]["arch"].update(position_embeddings="learned", max_positions=GRID)
    json.dump(m, open(prep_model, "w"))
    prefix = os.path.join(args.work, "data", "train")
    start = time.time()
    r = subprocess.run([sys.executable, os.path.join(ROOT, "tools", "mimo-prep", "mimo-prep"),
                        "--conversations", os.path.join(args.work, "conv.json"),
                        "--images", os.path.join(args.work, "images"),
                        "--tokenizer", os.path.join(args.work, "tokenizer.json"),
                        "--model", prep_model, "-o", prefix],
                       capture_output=True, text=True)
    prep_wall = time.time() - start
    if r.returncode:
        sys.exit(r.stdout + r.stderr)
    prep_rate = float(re.search(r"\(([\d.]+) images/s\)", r.stdout).group(1))
    # 2. the same samples as jsonl.
    ids_, masks, rows = read_binary(prefix)
    jsonl = os.path.join(args.work, "train.jsonl")
    with open(jsonl, "w") as f:
        for s, m_, r_ in zip(ids_, masks, rows):
            line = {"input_ids": s, "loss_mask": m_}
            if len(r_):
                line["images"] = {"features": [[float(f"{v:.9g}") for v in row] for row in r_]}
            f.write(json.dumps(line) + "\n")
    binary_bytes = sum(os.path.getsize(prefix + s) for s in
                       (".bin", ".idx", ".mask", ".images.feat"))
    jb = train(build, args.work, "jsonl", {"source": "jsonl", "path": jsonl})
    bb = train(build, args.work, "binary", {"source": "indexed", "path": prefix})
    same = [a["loss"] for a in jb[2]] == [b["loss"] for b in bb[2]]
    # 3. a 1 GB feature file (one row per sequence, 450,000 sequences).
    big = os.path.join(args.work, "big", "train")
    small = os.path.join(args.work, "small", "train")
    for p, n in ((big, 450_000), (small, 8_000)):
        os.makedirs(os.path.dirname(p))
        w = prep_files.DatasetWriter(p, "images", DIM, False, VOCAB)
        row = g.standard_normal((1, DIM)).astype(np.float32)
        for i in range(n):
            w.add([5, SPECIAL, 7, 8], [0, 0, 1, 1], row)
        w.close()
    feat_gb = os.path.getsize(big + ".images.feat") / 1e9
    small_mb = os.path.getsize(small + ".images.feat") / 1e6
    sb = train(build, args.work, "small", {"source": "indexed", "path": small}, 1)
    gb = train(build, args.work, "big", {"source": "indexed", "path": big}, 1)
    mean = lambda xs: sum(xs[1:]) / max(len(xs) - 1, 1)
    lines = [
        "# Data formats for image conversations (CPU)",
        "",
        f"`/usr/bin/python3 bench/data_formats.py` on this machine (2 cores), "
        f"{time.strftime('%Y-%m-%d')}. 256 random 336x336 RGB PNGs, each cut by "
        f"`tools/mimo-prep` into {GRID} patch rows of {DIM} values (CLIP ViT-L/14-336's "
        "patches); a model with a 2-layer encoder (dp 2) and a 2-layer language model "
        f"(tp 2), seq_length {SEQ}, 8 samples a step, colocated on 2 ranks.",
        "",
        "## mimo-prep",
        "",
        f"- {prep_rate:.1f} images/s (PNG decode, bicubic resize, normalise, patches, "
        f"tokenise, write); {prep_wall:.1f} s for 256 records with Python's start.",
        "",
        "## The same samples as jsonl and as binary files",
        "",
        "| | jsonl | binary (indexed + .feat + .mask) | binary / jsonl |",
        "|---|---|---|---|",
        f"| files | {os.path.getsize(jsonl) / 1e6:.1f} MB | {binary_bytes / 1e6:.1f} MB | "
        f"{binary_bytes / os.path.getsize(jsonl):.2f}x |",
        f"| mimo-run, 6 steps, wall | {jb[0]:.2f} s | {bb[0]:.2f} s | {bb[0] / jb[0]:.2f}x |",
        f"| tokens/s (steps 2-6, mean) | {mean(jb[3]):.0f} | {mean(bb[3]):.0f} | "
        f"{mean(bb[3]) / mean(jb[3]):.2f}x |",
        f"| peak RSS of the process | {jb[1]:.0f} MiB | {bb[1]:.0f} MiB | {bb[1] / jb[1]:.2f}x |",
        "",
        f"Losses of the 6 steps identical: {'yes' if same else 'NO'} (fp32 features, "
        "jsonl written with 9 significant digits).",
        "",
        "## Opening a 1 GB feature file",
        "",
        "| .feat | mimo-run --steps 1, wall | peak RSS |",
        "|---|---|---|",
        f"| {small_mb:.0f} MB (8,000 sequences) | {sb[0]:.2f} s | {sb[1]:.0f} MiB |",
        f"| {feat_gb:.2f} GB (450,000 sequences) | {gb[0]:.2f} s | {gb[1]:.0f} MiB |",
        "",
        f"The 1 GB file costs {gb[0] - sb[0]:+.2f} s and {gb[1] - sb[1]:+.0f} MiB more than "
        "the small one: the open maps it and checks the header and the 450,001 offsets "
        "(3.6 MB); a step reads only its samples' rows.",
    ]
    open(args.out, "w").write("\n".join(lines) + "\n")
    print("\n".join(lines))


def read_binary(prefix):
    idx = open(prefix + ".idx", "rb").read()
    _, code, n, _ = struct.unpack("<QBQQ", idx[9:34])
    lengths = np.frombuffer(idx, "<i4", n, 34)
    pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
    b = open(prefix + ".bin", "rb").read()
    ids = [np.frombuffer(b, "<u2", int(l), int(p)).tolist() for l, p in zip(lengths, pointers)]
    mk = np.frombuffer(open(prefix + ".mask", "rb").read(), "u1", offset=24)
    masks, at = [], 0
    for s in ids:
        masks.append(mk[at:at + len(s)].tolist())
        at += len(s)
    f = open(prefix + ".images.feat", "rb").read()
    off = np.frombuffer(f, "<u8", n + 1, 40)
    vals = np.frombuffer(f, "<f4", offset=40 + 8 * (n + 1)).reshape(-1, DIM)
    rows = [vals[int(off[i]):int(off[i + 1])] for i in range(n)]
    return ids, masks, rows


if __name__ == "__main__":
    main()
