#!/usr/bin/env python3
"""mimo's attention beside PyTorch's, one table (scripts/gpu-check.sh's
attention phase): the rows of `gpu_bench --only attention --json` (mimo's
two backends, `mimo` and `cudnn`) and of `bench/attention_sdpa.py --json`
(`torch_flash`, `torch_cudnn`), both of the same run, bf16 and causal, by
sequence and head dimension, forward and backward TFLOP/s. Then SPEC §23's
target at head dimension 128, sequence 4096: the default backend's figures
(cudnn's where it ran, else mimo's; what `mimo-run --attention auto` picks).

usage: bench/attention_table.py MIMO.json TORCH.json   (prints markdown)
A file that is missing or unreadable counts as no rows.
"""
import json
import sys

COLUMNS = ("mimo", "cudnn", "torch_flash", "torch_cudnn")
# SPEC §23: bf16 causal attention, head dimension 128, one sequence of
# 4096 with 16 heads: forward >= 350 TFLOP/s, backward >= 250.
TARGET = {"seq": 4096, "head_dim": 128, "heads": 16}
TARGET_TFLOPS = (350, 250)


def load_rows(path):
    """The rows of a {"rows": [...]} file; [] when it is not there."""
    try:
        with open(path) as f:
            return json.load(f).get("rows", [])
    except (OSError, ValueError, AttributeError):
        return []


def bf16_causal(rows):
    # The PyTorch rows carry no dtype: they are all bf16.
    return [r for r in rows if r.get("causal", True) and
            r.get("dtype", "bf16") == "bf16"]


def at_target(rows, backend):
    """The row of `backend` at the §23 shape, if it ran without error."""
    for r in bf16_causal(rows):
        if (r.get("backend") == backend and not r.get("error") and
                r.get("fwd_tflops") is not None and
                all(r.get(k) == v for k, v in TARGET.items())):
            return r
    return None


def default_backend(rows):
    """(backend, row) of the default backend at the §23 shape: cuDNN's where
    it ran, else mimo's; (None, None) when neither did."""
    for backend in ("cudnn", "mimo"):
        row = at_target(rows, backend)
        if row:
            return backend, row
    return None, None


def table(mimo_rows, torch_rows):
    cells = {}
    for r in bf16_causal(mimo_rows + torch_rows):
        if r.get("backend") not in COLUMNS:
            continue
        if r.get("error"):
            pair = ("failed", "failed")
        else:
            pair = tuple("%.1f" % r[k] if r.get(k) is not None else "n/a"
                         for k in ("fwd_tflops", "bwd_tflops"))
        cells[(r["seq"], r["head_dim"], r["backend"])] = pair
    shapes = sorted({(seq, d) for seq, d, _ in cells}, key=lambda s: (s[1], s[0]))
    lines = ["## Attention side by side (bf16, causal, one sequence; TFLOP/s "
             "forward / backward, this run)", ""]
    if not shapes:
        return lines + ["Not measured.", ""]
    lines += ["| sequence | head dim | %s |" % " | ".join(COLUMNS),
              "|---:|---:|" + "---:|" * len(COLUMNS)]
    for seq, d in shapes:
        lines.append("| %d | %d | %s |" % (seq, d, " | ".join(
            "%s / %s" % cells[(seq, d, b)] if (seq, d, b) in cells else "-"
            for b in COLUMNS)))
    lines.append("")
    # Why a backend failed, once each (the first reason it gave).
    reasons = {}
    for r in bf16_causal(mimo_rows + torch_rows):
        if r.get("error") and r.get("backend") in COLUMNS:
            reasons.setdefault(r["backend"], r["error"])
    for name, reason in reasons.items():
        lines.append("- %s failed: %s" % (name, reason))
    backend, row = default_backend(mimo_rows)
    if row:
        lines.append("- default backend (%s) at sequence %d, head dim %d, %d "
                     "heads: forward %.1f TFLOP/s, backward %.1f (SPEC §23's "
                     "target: %d / %d)" % (
                         backend, TARGET["seq"], TARGET["head_dim"],
                         TARGET["heads"], row["fwd_tflops"], row["bwd_tflops"],
                         TARGET_TFLOPS[0], TARGET_TFLOPS[1]))
    else:
        lines.append("- neither cudnn nor mimo ran at sequence %d, head dim %d"
                     % (TARGET["seq"], TARGET["head_dim"]))
    return lines + [""]


def main():
    if len(sys.argv) != 3:
        sys.exit("usage: bench/attention_table.py MIMO.json TORCH.json")
    print("\n".join(table(load_rows(sys.argv[1]), load_rows(sys.argv[2]))))


if __name__ == "__main__":
    main()
