#!/usr/bin/env python3
"""Ring CP against all_gather CP (docs/model.md Context parallelism),
measured on the CPU: a 2-layer language model (hidden 128, 4 heads, FFN
256, vocabulary 256) on 4 CP ranks (local backend, one thread each), one
sample of 16384 and of 32768 tokens, 2 steps each. For each: mimo-run's
`peak_bytes` (the largest rank) beside the memory plan's (`mimoc explain`),
the keys and values a rank holds for its attention (kept for the backward
and in flight: what the ring cuts cp-fold), and the second step's time
beside `mimoc simulate --profile cpu`'s. The losses must agree within 1e-6.

usage: ring_cp.py [BUILD_DIR] [--out FILE] [--lengths 16384 32768]
"""
import argparse
import json
import os
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
CP = 4
MODEL = {
    "version": 1, "name": "long-context", "seed": 3,
    "batch": {"micro_batch_size": 1, "num_microbatches": 1, "seq_length": 0},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 256, "hidden_size": 128,
                          "num_layers": 2, "num_heads": 4,
                          "ffn_hidden_size": 256},
                 "parallel": {"cp": CP}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 2},
}


def attention_bytes(mode, seq):
    """Bytes of keys and values (fp32) a rank holds for its attention:
    (kept for the backward by every layer, in flight during one layer's
    backward: the gathered rows' gradients (all_gather), or two remote
    blocks, the two travelling sums and a block's dq, dk, dv (ring))."""
    arch = MODEL["modules"][0]["arch"]
    layers, hidden = arch["num_layers"], arch["hidden_size"]
    local = seq // CP
    if mode == "all_gather":
        return 4 * layers * 2 * seq * hidden, 4 * 2 * seq * hidden
    return 4 * layers * 2 * local * hidden, 4 * (4 + 4 + 3) * local * hidden


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--out")
    ap.add_argument("--lengths", type=int, nargs="+", default=[16384, 32768])
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    run = os.path.join(args.build, "bin", "mimo-run")
    mib = 1 << 20
    rows, ok = [], True
    with tempfile.TemporaryDirectory() as work:
        for seq in args.lengths:
            losses = {}
            for mode in ("all_gather", "ring"):
                model = json.loads(json.dumps(MODEL))
                model["batch"]["seq_length"] = seq
                model["modules"][0]["parallel"]["cp_comm"] = mode
                path = os.path.join(work, f"{mode}-{seq}.json")
                json.dump(model, open(path, "w"))
                plan = path + ".plan"
                subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
                explain = json.loads(subprocess.run(
                    [mimoc, "explain", plan, "--format=json"],
                    capture_output=True, text=True, check=True).stdout)
                planned = max(r["memory"]["total_bytes"] for r in explain["ranks"])
                sim = json.loads(subprocess.run(
                    [mimoc, "simulate", plan, "--profile", "cpu", "--format=json"],
                    capture_output=True, text=True, check=True).stdout)
                metrics = plan + ".jsonl"
                subprocess.run([run, plan, "--metrics", metrics, "--threads", "1"],
                               check=True, capture_output=True)
                got = [json.loads(l) for l in open(metrics)]
                losses[mode] = [l["loss"] for l in got]
                rows.append((seq, mode, max(l["peak_bytes"] for l in got), planned,
                             attention_bytes(mode, seq), got[-1]["seconds"],
                             sim["step_seconds"]))
            same = all(abs(a - b) <= 1e-6 * abs(b)
                       for a, b in zip(losses["ring"], losses["all_gather"]))
            ok = ok and same
            rows[-1] += (same,)
            rows[-2] += (same,)
    lines = [
        "# Long context: ring CP against all_gather CP (CPU)", "",
        "`python3 bench/ring_cp.py`: a 2-layer language model (hidden 128, 4 heads,"
        f" FFN 256, vocabulary 256) over cp {CP} (local backend, one thread a rank),"
        " one sample a step, 2 steps. Peak: mimo-run's `peak_bytes` (the largest"
        " rank) and the memory plan's (`mimoc explain`); K/V kept: the keys and"
        " values every layer keeps for its backward; in flight: what one layer's"
        " backward adds (fp32, computed from the shapes); step: the second step,"
        " beside `mimoc simulate --profile cpu`.", "",
        "| sequence | cp_comm | peak (measured) | peak (plan) | K/V kept | K/V in flight |"
        " step (measured) | step (simulate) | losses |",
        "|---:|---|---:|---:|---:|---:|---:|---:|---|",
    ]
    for seq, mode, peak, planned, (kept, flight), step, predicted, same in rows:
        lines.append(f"| {seq} | {mode} | {peak / mib:.1f} MiB | {planned / mib:.1f} MiB | "
                     f"{kept / mib:.1f} MiB | {flight / mib:.1f} MiB | {step:.2f} s | "
                     f"{predicted:.2f} s | {'within 1e-6' if same else 'DIFFER'} |")
    for seq in args.lengths:
        pair = {r[1]: r for r in rows if r[0] == seq}
        lines.append("")
        lines.append(
            f"At {seq} tokens the ring's largest rank peaks "
            f"{(pair['all_gather'][2] - pair['ring'][2]) / mib:.1f} MiB lower "
            f"(plan: {(pair['all_gather'][3] - pair['ring'][3]) / mib:.1f} MiB); "
            f"the keys and values its layers keep fall "
            f"{pair['all_gather'][4][0] / pair['ring'][4][0]:.1f}x (cp {CP}).")
    lines.append("")
    text = "\n".join(lines)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
