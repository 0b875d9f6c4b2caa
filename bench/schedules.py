#!/usr/bin/env python3
"""Pipeline schedules on the CPU (docs/plan.md Zero bubble, Interleaved
1F1B): 1F1B against zero bubble (ZB-H1) and interleaved 1F1B (two virtual
stages) on a language model over pp 4 with 4 microbatches
(the bubble's worst case: P - 1 = 3 idle slots of M + P - 1 = 7), local
backend, one thread a rank. For each schedule: the median step (steps 2..)
and each rank's idle share in the last step, measured from mimo-run's trace
(the time outside forward, backward, weight_grad, shard and the optimizer
step), beside `mimoc simulate --profile cpu`'s step and idle share. The
losses must be the same bits.

Caveat for this machine: 4 ranks share its cores (`nproc`), so a rank that
waits lends its core to the others and the measured step falls by less
than the idle share does; simulate models the sharing (docs/tune.md).

A second table (--only many): zero bubble against 1F1B with 16
microbatches, where weight gradients placed between a send and the next
receive made zero bubble slower than 1F1B.

usage: schedules.py [BUILD_DIR] [--out FILE] [--steps N] [--only few|many]
"""
import argparse
import json
import os
import statistics
import subprocess
import sys
import tempfile

HERE = os.path.dirname(os.path.abspath(__file__))
PP, M, V = 4, 4, 2
MANY = 16
MODEL = {
    "version": 1, "name": "pipeline", "seed": 5,
    "batch": {"micro_batch_size": 4, "num_microbatches": M, "seq_length": 256},
    "modules": [{"name": "language", "kind": "language",
                 "arch": {"vocab_size": 1024, "hidden_size": 512,
                          "num_layers": 8, "num_heads": 8,
                          "ffn_hidden_size": 2048},
                 "parallel": {"pp": PP}}],
    "data": {"source": "synthetic", "text_only_fraction": 1.0},
    "train": {"steps": 4},
}
COMPUTE = ("forward ", "backward ", "weight_grad ", "shard ", "optimizer_step")


def idle_shares(trace):
    events = json.load(open(trace))
    events = events["traceEvents"] if isinstance(events, dict) else events
    # Each rank marks the start of each step; the last step runs from its
    # first mark to the end of the last instruction.
    marks = [e for e in events if e.get("cat") == "step"]
    final = max(int(e["name"].split()[1]) for e in marks)
    begin = min(e["ts"] for e in marks if e["name"] == f"step {final}")
    end = max(e["ts"] + e["dur"] for e in events
              if e.get("cat") == "instruction" and e["ts"] >= begin)
    shares = []
    for rank in range(PP):
        busy = sum(e["dur"] for e in events
                   if e.get("cat") == "instruction" and e.get("pid") == rank
                   and e["ts"] >= begin and e["ts"] < end
                   and e["name"].startswith(COMPUTE))
        shares.append(1 - busy / (end - begin))
    return shares


def run_schedules(mimoc, run, base, schedules, steps, work, tag):
    """Compile, simulate and run `base` under each schedule: rows of
    (schedule, step, mean idle, idle per rank, simulated step, simulated
    idle, peak bytes, the bubble mimoc explain gives), and each schedule's (loss, grad norm) per step."""
    rows, losses = [], {}
    for schedule in schedules:
        model = json.loads(json.dumps(base))
        model["batch"]["schedule"] = schedule
        if schedule == "interleaved":
            model["modules"][0]["parallel"]["virtual_stages"] = V
        model["train"]["steps"] = steps
        path = os.path.join(work, f"{tag}-{schedule}.json")
        json.dump(model, open(path, "w"))
        plan = path + ".plan"
        subprocess.run([mimoc, "compile", "-q", path, "-o", plan], check=True)
        sim = json.loads(subprocess.run(
            [mimoc, "simulate", plan, "--profile", "cpu", "--format=json"],
            capture_output=True, text=True, check=True).stdout)
        # The schedule's bubble with equal parts, as mimoc explain gives it
        # (runtime/schedule/Formulas.h).
        formula = json.loads(subprocess.run(
            [mimoc, "explain", plan, "--format=json"],
            capture_output=True, text=True, check=True).stdout)["pipeline_bubble"]
        metrics, trace = plan + ".jsonl", plan + ".trace.json"
        subprocess.run([run, plan, "--metrics", metrics, "--threads", "1",
                        "--trace", trace], check=True, capture_output=True)
        got = [json.loads(l) for l in open(metrics)]
        losses[schedule] = [(l["loss"], l["grad_norm"]) for l in got]
        step = statistics.median(l["seconds"] for l in got[1:])
        shares = idle_shares(trace)
        rows.append((schedule, step, sum(shares) / len(shares), shares,
                     sim["step_seconds"], sim["idle_share"],
                     max(l["peak_bytes"] for l in got), formula))
    return rows, losses


def table(rows):
    mib = 1 << 20
    lines = ["| schedule | step (measured) | idle (measured) | idle per rank | step (simulate)"
             " | idle (simulate) | idle (formula) | peak, largest rank |",
             "|---|---:|---:|---|---:|---:|---:|---:|"]
    for schedule, step, idle, shares, sim_step, sim_idle, peak, formula in rows:
        lines.append(
            f"| {schedule} | {step:.3f} s | {idle * 100:.1f}% | "
            f"{' / '.join(f'{s * 100:.0f}%' for s in shares)} | {sim_step:.3f} s | "
            f"{sim_idle * 100:.1f}% | {formula * 100:.1f}% | {peak / mib:.1f} MiB |")
    return lines


def against(name, row, one):
    return (f"{name} against 1F1B: step {row[1] / one[1]:.2f}x measured, "
            f"{row[4] / one[4]:.2f}x simulated; idle {one[2] * 100:.1f}% -> "
            f"{row[2] * 100:.1f}% measured, {one[5] * 100:.1f}% -> {row[5] * 100:.1f}% "
            "simulated.")


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("build", nargs="?", default=os.path.join(HERE, "..", "build"))
    ap.add_argument("--out")
    ap.add_argument("--steps", type=int, default=4)
    ap.add_argument("--only", choices=("few", "many"),
                    help="run one of the two tables")
    args = ap.parse_args()
    mimoc = os.path.join(args.build, "bin", "mimoc")
    run = os.path.join(args.build, "bin", "mimo-run")
    arch = MODEL["modules"][0]["arch"]
    lines, ok = [], True
    with tempfile.TemporaryDirectory() as work:
        if args.only != "many":
            rows, losses = run_schedules(mimoc, run, MODEL,
                                         ("1f1b", "zero_bubble", "interleaved"),
                                         args.steps, work, "few")
            same = losses["1f1b"] == losses["zero_bubble"]
            # Interleaved: the losses bit for bit, the norms within 1e-12
            # (each rank sums other layers' squares before the world's sum).
            same_interleaved = all(
                a[0] == b[0] and abs(a[1] - b[1]) <= 1e-12 * b[1]
                for a, b in zip(losses["interleaved"], losses["1f1b"]))
            ok = ok and same and same_interleaved
            lines += [
                "## Pipeline schedules: 1F1B, zero bubble and interleaved (CPU)", "",
                f"`python3 bench/schedules.py`: a language model ({arch['num_layers']} layers,"
                f" hidden {arch['hidden_size']}, FFN {arch['ffn_hidden_size']}, vocabulary"
                f" {arch['vocab_size']}, sequence {MODEL['batch']['seq_length']}, micro-batch"
                f" {MODEL['batch']['micro_batch_size']}) over pp {PP} with {M} microbatches,"
                f" local backend, one thread a rank, {args.steps} steps on a {os.cpu_count()}-core"
                " machine. Step: the median of steps 2 on. Idle: each rank's share of the last"
                " step outside its compute instructions (mimo-run --trace), the mean over"
                " ranks (per rank pp0..pp3 beside it). Simulate: `mimoc simulate --profile"
                " cpu`. Formula: (P - 1) / (M + P - 1) for 1F1B, (P - 1) / (3M + P - 1) for"
                " zero bubble with equal F, B and W (M = P), (P - 1) / (vM + P - 1) for"
                f" interleaved with v = {V} virtual stages (two chunks of a stage's layers).",
                ""] + table(rows)
            one, zb, il = rows
            lines += ["", against("Zero bubble", zb, one) +
                      " Losses and gradient norms: " +
                      ("the same bits." if same else "DIFFER."), "",
                      against(f"Interleaved (v = {V})", il, one) + " Losses: " +
                      ("the same bits" if same_interleaved else "DIFFER") +
                      " (gradient norms within 1e-12).", ""]
        if args.only != "few":
            many = json.loads(json.dumps(MODEL))
            many["batch"]["num_microbatches"] = MANY
            rows, losses = run_schedules(mimoc, run, many, ("1f1b", "zero_bubble"),
                                         args.steps, work, "many")
            same = losses["1f1b"] == losses["zero_bubble"]
            ok = ok and same
            lines += [
                "## Zero bubble with many microbatches (CPU)", "",
                f"`python3 bench/schedules.py --only many`: the same model with {MANY}"
                " microbatches; the rest as above."
                " Formula: 3(P - 1) idle units of 3(M + P - 1) for 1F1B, 2(P - 1) of"
                " 3M + 2(P - 1) for zero bubble with equal F, B and W (M > P, sends that"
                " block until matched).", ""] + table(rows)
            one, zb = rows
            lines += ["", against("Zero bubble", zb, one) +
                      " Losses and gradient norms: " +
                      ("the same bits." if same else "DIFFER."), ""]
    text = "\n".join(lines)
    print(text)
    if args.out:
        open(args.out, "w").write(text)
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
