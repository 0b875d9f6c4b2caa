#!/usr/bin/env python3
"""Compares two mimo-run --metrics files step by step (docs/runtime.md).

usage: compare_metrics.py RUN.jsonl REFERENCE.jsonl [STEPS] [TOLERANCE]
Exits 1 naming the first step whose loss, grad_norm or (a model with
sparse layers) aux_loss differs by more than TOLERANCE (relative, default
1e-5).
"""
import json
import sys


def load(path):
    with open(path) as f:
        return [json.loads(line) for line in f if line.strip()]


def main():
    run, ref = load(sys.argv[1]), load(sys.argv[2])
    steps = int(sys.argv[3]) if len(sys.argv) > 3 else 3
    tol = float(sys.argv[4]) if len(sys.argv) > 4 else 1e-5
    if len(run) != steps or len(ref) != steps:
        print(f"expected {steps} steps, found {len(run)} and {len(ref)}")
        return 1
    for a, b in zip(run, ref):
        if ("aux_loss" in a) != ("aux_loss" in b):
            print(f"step {a['step']}: aux_loss in one file only")
            return 1
        for key in ("loss", "grad_norm", "aux_loss"):
            if key not in a:
                continue
            rel = abs(a[key] - b[key]) / max(abs(b[key]), 1e-12)
            if rel > tol:
                print(f"step {a['step']}: {key} {a[key]!r} vs reference "
                      f"{b[key]!r} (relative {rel:.3g} > {tol})")
                return 1
        if a["tokens"] != b["tokens"] or a["step"] != b["step"]:
            print(f"step {a['step']}: tokens {a['tokens']} vs {b['tokens']}")
            return 1
    print(f"{steps} steps match the reference within {tol}")
    return 0


if __name__ == "__main__":
    sys.exit(main())
