#!/usr/bin/env python3
"""The headline figures of one GPU check, as JSON (SPEC §23; written by
scripts/gpu-check.sh's report phase beside bench/results/gpu-<device>.md).

Reads what the phases left in the check's log folder, all of the same run:
  attention-mimo.json   gpu_bench --only attention --json (mimo, cudnn)
  attention-torch.json  bench/attention_sdpa.py --json (torch_flash,
                        torch_cudnn)
  train-1b.json         bench/train_1b.py --json
  bridges.json          {"fan_in_of_copy_64mib": x}, where a phase writes it
  simulate.json         {"error_bf16": x}, where a phase writes it
and writes one object with exactly these keys:
  device, commit, date,
  attention_backend, attention_fwd_tflops, attention_bwd_tflops
      bf16, causal, head dim 128, one sequence of 4096, 16 heads, the
      default backend: cudnn's row where it ran, else mimo's,
  pytorch_sdpa_fwd_tflops, pytorch_sdpa_bwd_tflops
      the same shape, SDPA's flash backend, else its cuDNN backend,
  mfu_1b, vs_pytorch_eager_bf16, vs_torch_compile
      the ~1.3B model (a fraction, and mimo's tokens/s over PyTorch's),
  bridge_fan_in_of_copy_64mib, simulate_error_bf16 (predicted / measured - 1).
A figure not measured is null.

usage: bench/gpu_summary.py --logs DIR --device NAME --commit C --date D
                            -o FILE.json
"""
import argparse
import json
import os
import sys

sys.path.insert(0, os.path.dirname(os.path.abspath(__file__)))
from attention_table import at_target, default_backend, load_rows  # noqa: E402


def load(path):
    """A JSON object from a file, {} when it is missing or unreadable."""
    try:
        with open(path) as f:
            value = json.load(f)
        return value if isinstance(value, dict) else {}
    except (OSError, ValueError):
        return {}


def number(value):
    """A finite figure, else None (a string, NaN or infinity is no figure)."""
    if isinstance(value, bool) or not isinstance(value, (int, float)):
        return None
    return value if value == value and abs(value) != float("inf") else None


def summary(logs, device, commit, date):
    mimo_rows = load_rows(os.path.join(logs, "attention-mimo.json"))
    torch_rows = load_rows(os.path.join(logs, "attention-torch.json"))
    backend, row = default_backend(mimo_rows)
    sdpa = at_target(torch_rows, "torch_flash") or at_target(torch_rows,
                                                             "torch_cudnn")
    train = load(os.path.join(logs, "train-1b.json"))
    bridges = load(os.path.join(logs, "bridges.json"))
    simulate = load(os.path.join(logs, "simulate.json"))
    return {
        "device": device,
        "commit": commit,
        "date": date,
        "attention_backend": backend,
        "attention_fwd_tflops": number(row and row.get("fwd_tflops")),
        "attention_bwd_tflops": number(row and row.get("bwd_tflops")),
        "pytorch_sdpa_fwd_tflops": number(sdpa and sdpa.get("fwd_tflops")),
        "pytorch_sdpa_bwd_tflops": number(sdpa and sdpa.get("bwd_tflops")),
        "mfu_1b": number(train.get("mfu_1b")),
        "vs_pytorch_eager_bf16": number(train.get("vs_pytorch_eager_bf16")),
        "vs_torch_compile": number(train.get("vs_torch_compile")),
        "bridge_fan_in_of_copy_64mib": number(
            bridges.get("fan_in_of_copy_64mib")),
        "simulate_error_bf16": number(simulate.get("error_bf16")),
    }


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--logs", required=True)
    parser.add_argument("--device", required=True)
    parser.add_argument("--commit", required=True)
    parser.add_argument("--date", required=True)
    parser.add_argument("-o", "--out", required=True)
    args = parser.parse_args()
    out = summary(args.logs, args.device, args.commit, args.date)
    with open(args.out, "w") as f:
        json.dump(out, f, indent=2)
        f.write("\n")


if __name__ == "__main__":
    main()
