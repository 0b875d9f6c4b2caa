#!/usr/bin/env python3
"""Step time with and without overlapped communication (docs/gpu.md).

For each layout, `mimo-run --no-overlap` (every message and collective
blocks its rank; one DP x CP all-reduce per module after the backward) and
`mimo-run --overlap --grad-bucket-mb MB` (pipeline and bridge sends
posted ahead, gradient buckets posted during the backward, each on a
channel of the rank; the default on cuda) run in alternating rounds on the same device.
Reported per layout: the median step of each, their ratio, and the exposed
reduction: the time ranks spend in their reduce_grads instructions (what
the compute stream waits for), the mean over ranks and steps, read from
each run's trace.

usage: bench/overlap.py [--build DIR] [--device cpu|cuda] [--steps N]
                        [--rounds N] [--bucket-mb MB] [--out FILE.md]
                        [--write-plans DIR | --plans DIR]
  --write-plans DIR  compile the layouts' plans into DIR and stop (on a
                     machine with mimoc: scripts/gpu-bundle.sh);
  --plans DIR        measure plans compiled before (a GPU machine has no
                     mimoc).
"""
import argparse
import json
import os
import platform
import statistics
import subprocess
import tempfile
import time

ROOT = os.path.dirname(os.path.dirname(os.path.abspath(__file__)))


def layouts():
    """(name, model) pairs: the examples with data parallelism, and a
    language model trained purely data-parallel."""
    def example(name):
        with open(os.path.join(ROOT, "examples", name + ".json")) as f:
            return json.load(f)
    out = [(name, example(name)) for name in
           ["vlm-fan-in", "vlm-fan-out", "vlm-colocated", "lm-cp2-sp"]]
    dp = example("vlm-fan-out")
    dp["modules"][0]["parallel"] = {"dp": 2}
    dp["modules"][1]["parallel"] = {"dp": 2, "rank_offset": 2}
    out.append(("dp2-dp2", dp))
    pp = example("vlm-fan-out")
    pp["batch"]["num_microbatches"] = 4
    pp["modules"][0]["parallel"] = {"dp": 2}
    pp["modules"][1]["parallel"] = {"dp": 2, "pp": 2, "rank_offset": 2}
    out.append(("dp2-dp2pp2", pp))
    return out


def run(*args):
    return subprocess.run([str(a) for a in args], check=True,
                          capture_output=True, text=True)


def measure(bin_dir, plan, device, steps, bucket, work):
    metrics = os.path.join(work, "m.jsonl")
    trace = os.path.join(work, "t.json")
    run(os.path.join(bin_dir, "mimo-run"), plan, "--device", device,
        "--steps", steps,
        *(["--no-overlap"] if bucket == "0"
          else ["--overlap", "--grad-bucket-mb", bucket]),
        "--metrics", metrics,
        "--trace", trace)
    seconds = [json.loads(line)["seconds"] for line in open(metrics)]
    events = json.load(open(trace))["traceEvents"]
    ranks = {e["pid"] for e in events if e.get("ph") == "X"}
    exposed = sum(e["dur"] for e in events
                  if e.get("cat") == "instruction" and
                  e["name"].startswith("reduce_grads"))
    comm = sum(e["dur"] for e in events if e.get("cat") == "comm")
    per = len(ranks) * steps
    return (statistics.median(seconds[1:] or seconds), exposed / per / 1e3,
            comm / per / 1e3)


def commit():
    try:
        return run("git", "-C", ROOT, "rev-parse", "--short",
                   "HEAD").stdout.strip()
    except (subprocess.CalledProcessError, OSError):
        try:
            return open(os.path.join(ROOT, ".gpu-bundle", "commit")).read().strip()
        except OSError:
            return "unknown"


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--build", default=os.path.join(ROOT, "build"))
    parser.add_argument("--device", default="cpu")
    parser.add_argument("--steps", type=int, default=6)
    parser.add_argument("--rounds", type=int, default=3)
    parser.add_argument("--bucket-mb", default="0.25")
    parser.add_argument("--out")
    parser.add_argument("--write-plans")
    parser.add_argument("--plans")
    args = parser.parse_args()
    bin_dir = os.path.join(args.build, "bin")
    rows = []
    if args.write_plans:
        os.makedirs(args.write_plans, exist_ok=True)
    with tempfile.TemporaryDirectory() as work:
        for name, model in layouts():
            plan = os.path.join(args.plans or args.write_plans or work,
                                name + ".plan.json")
            if not args.plans:
                path = os.path.join(work, name + ".json")
                with open(path, "w") as f:
                    json.dump(model, f)
                run(os.path.join(bin_dir, "mimoc"), "compile", "-q", path,
                    "-o", plan)
            if args.write_plans:
                continue
            results = {"0": [], args.bucket_mb: []}
            for _ in range(args.rounds):  # alternating: noise hits both
                for bucket in results:
                    results[bucket].append(measure(
                        bin_dir, plan, args.device, args.steps, bucket, work))
            off = [statistics.median(x) for x in zip(*results["0"])]
            on = [statistics.median(x) for x in zip(*results[args.bucket_mb])]
            world = json.load(open(plan))["world_size"]
            rows.append((name, world, off, on))
    if args.write_plans:
        return
    lines = [
        "# Overlapped gradient reduction",
        "",
        "`python3 bench/overlap.py --device %s --steps %d --rounds %d "
        "--bucket-mb %s` on %s, %s, commit %s." % (
            args.device, args.steps, args.rounds, args.bucket_mb,
            platform.node() or "this machine", time.strftime("%Y-%m-%d"),
            commit()),
        "",
        "Step: the median over rounds of each run's median step (step 1 "
        "left out). Exposed reduction: ms per rank and step inside "
        "reduce_grads (the compute stream waiting for gradients); comm "
        "stream: ms per rank and step the channels spent on sends posted "
        "ahead and bucket all-reduces (waiting for peers included).",
        "",
        "| layout | ranks | step, --no-overlap | step, overlap (buckets of "
        "%s MiB) | ratio (overlap / none) | exposed reduction, none → "
        "overlap | comm stream |" % args.bucket_mb,
        "|---|---:|---:|---:|---:|---:|---:|",
    ]
    for name, world, off, on in rows:
        lines.append("| %s | %d | %.1f ms | %.1f ms | %.2f | %.2f → %.2f ms "
                     "| %.2f ms |" % (name, world, off[0] * 1e3, on[0] * 1e3,
                                      on[0] / off[0], off[1], on[1], on[2]))
    text = "\n".join(lines) + "\n"
    print(text)
    if args.out:
        with open(args.out, "w") as f:
            f.write(text)


if __name__ == "__main__":
    main()
