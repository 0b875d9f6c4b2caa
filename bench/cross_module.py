#!/usr/bin/env python3
"""Zero bubble across modules in a colocated layout (docs/plan.md "Zero
bubble across modules"), as `mimoc simulate` predicts it: each layout's
zero-bubble step as compiled ("now": the encoders' forwards in the
language pipeline's ramp, their backward in its cool-down) and the same
plan in the order before ("before": every encoder forward and bridge
first, every encoder backward after the pipeline), with the encoder
trained and frozen (the LLaVA recipe's tower). "bound, trained" is the
share of the trained step before that its encoder backward took (the
frozen step before is the same without it). The idle share is the
trained plan's as compiled.

Layouts, in bf16: a LLaVA-7B-like model colocated on 8 ranks (a
ViT-L-like tower of 24 layers, hidden 1024, 576 tokens an image, dp 8; a
7B-like language model, 32 layers, hidden 4096, tp 2 pp 4, 2048-token
sequences) at 4, 8 and 16 microbatches, and the same with eight 576-token
frames in 8192-token sequences (a video model).

usage: cross_module.py [BUILD_DIR] [--profile FILE]
"""
import argparse
import json
import os
import re
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))


def model(microbatches, seq, image_tokens, frozen):
    encoder = {"name": "images", "kind": "encoder", "special_token_id": 31999,
               "arch": {"feature_dim": 588, "hidden_size": 1024,
                        "num_layers": 24, "num_heads": 16,
                        "ffn_hidden_size": 4096},
               "parallel": {"tp": 1, "dp": 8}}
    if frozen:
        encoder["freeze"] = True
    return {
        "version": 1, "name": "colocated-bound", "seed": 1,
        "precision": "bf16",
        "batch": {"micro_batch_size": 8, "num_microbatches": microbatches,
                  "seq_length": seq, "schedule": "zero_bubble"},
        "modules": [encoder, {
            "name": "language", "kind": "language",
            "arch": {"vocab_size": 32000, "hidden_size": 4096,
                     "num_layers": 32, "num_heads": 32,
                     "ffn_hidden_size": 11008},
            "parallel": {"tp": 2, "pp": 4}}],
        "data": {"source": "synthetic",
                 "tokens_per_sample": {"images": [image_tokens, image_tokens]}},
        "train": {"steps": 1},
    }


BRIDGE_FORWARD_OPS = ("bridge_send", "bridge_recv", "bridge_broadcast")
BRIDGE_BACKWARD_OPS = ("bridge_send_grad", "bridge_recv_grad",
                       "bridge_broadcast_grad")


def order_before(plan):
    """The plan in the order before zero bubble across modules: each rank's
    encoder forwards first (microbatch order), then their bridges, then the
    language pipeline, then the encoder backwards with their bridge
    gradients (microbatch order), then the reduction and the step."""
    language = plan["model"]["modules"][-1]["name"]

    def encoder(i, op):
        return i["op"] == op and i.get("module") != language
    for program in plan["programs"]:
        instrs = program["instructions"]
        forwards = [i for i in instrs if encoder(i, "forward")]
        bridges = [i for i in instrs if i["op"] in BRIDGE_FORWARD_OPS]
        backwards = [i for i in instrs if i["op"] in BRIDGE_BACKWARD_OPS or
                     encoder(i, "backward")]
        moved = forwards + bridges + backwards
        kept = [i for i in instrs if not any(i is m for m in moved)]
        end = next(k for k, i in enumerate(kept) if i["op"] == "reduce_grads")
        # Stable sorts: a microbatch's instructions keep their order.
        bridges.sort(key=lambda i: i["mb"])
        backwards.sort(key=lambda i: i["mb"])
        program["instructions"] = (forwards + bridges + kept[:end] +
                                   backwards + kept[end:])
    return plan


def simulate(mimoc, profile, doc, tmp, before=False):
    path = os.path.join(tmp, "model.json")
    with open(path, "w") as f:
        json.dump(doc, f)
    if before:
        plan = os.path.join(tmp, "plan.json")
        subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
        with open(plan) as f:
            edited = order_before(json.load(f))
        with open(plan, "w") as f:
            json.dump(edited, f)
        path = plan
    out = subprocess.run([mimoc, "simulate", path, "--profile", profile],
                         capture_output=True, text=True, check=True).stdout
    step = float(re.search(r"predicted step:\s+([0-9.]+) ms", out).group(1))
    idle = float(re.search(r"idle \(bubble\):\s+([0-9.]+)%", out).group(1))
    return step, idle


def main():
    parser = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    parser.add_argument("build", nargs="?",
                        default=os.path.join(HERE, "..", "build"))
    parser.add_argument("--profile", default=os.path.join(
        HERE, "results", "profile-h100.json"))
    args = parser.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    rows = [("LLaVA-7B-like, 576 image tokens, sequence 2048", m, 2048, 576)
            for m in (4, 8, 16)]
    rows.append(("video, 8 frames of 576 tokens, sequence 8192", 8, 8192,
                 8 * 576))
    print(f"`python3 bench/cross_module.py` (mimoc simulate, profile "
          f"{os.path.basename(args.profile)}), bf16, zero bubble, 8 ranks "
          "colocated")
    print()
    print("| layout | M | trained: now | trained: before | saved | "
          "frozen: now | frozen: before | saved | bound, trained | "
          "idle share |")
    print("|---|---:|---:|---:|---:|---:|---:|---:|---:|---:|")
    with tempfile.TemporaryDirectory() as tmp:
        for name, m, seq, tokens in rows:
            steps = {}
            for frozen in (False, True):
                doc = model(m, seq, tokens, frozen)
                steps[frozen, "now"], idle = simulate(mimoc, args.profile,
                                                      doc, tmp)
                if not frozen:
                    trained_idle = idle
                steps[frozen, "before"], _ = simulate(mimoc, args.profile,
                                                      doc, tmp, True)

            def saved(frozen):
                return (1 - steps[frozen, "now"] /
                        steps[frozen, "before"]) * 100
            bound = (1 - steps[True, "before"] / steps[False, "before"]) * 100
            print(f"| {name} | {m} | {steps[False, 'now'] / 1000:.2f} s | "
                  f"{steps[False, 'before'] / 1000:.2f} s | "
                  f"{saved(False):.1f}% | {steps[True, 'now'] / 1000:.2f} s | "
                  f"{steps[True, 'before'] / 1000:.2f} s | "
                  f"{saved(True):.1f}% | {bound:.1f}% | {trained_idle:.1f}% |")
    return 0


if __name__ == "__main__":
    sys.exit(main())
