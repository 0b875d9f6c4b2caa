#!/usr/bin/env bash
# The check a user with several GPUs runs and sends back (docs/gpu.md,
# "What is proven, and how"): the examples under mpirun with the nccl
# backend, one process per GPU, overlap on and off, each against the
# one-rank --reference on one GPU (1e-4 relative, docs/gpu.md "Numbers"),
# with each run's step time. Nothing of mimo has run on more than one GPU
# on the project's own machines; this is how it gets checked.
#
#   scripts/multi-gpu-check.sh [--build DIR] [--out DIR] [--steps N]
#                              [--cases a,b,...] [--cpu]
#
# --build: mimo's build folder (default build); --out: where the plans,
# logs and results go (default multi-gpu-check); --cases: example names
# (default every example of 8 ranks or fewer that fits the GPUs); --cpu:
# the same runs with --backend mpi --device cpu (what the project's tests
# run, to keep this script working).
#
# Writes OUT/results.json and OUT/results.md: send both (and OUT/*.log of
# any failed case) to the mimo developers. Exit 0 when every case matches
# its reference, 1 otherwise.
set -uo pipefail
here=$(cd "$(dirname "$0")/.." && pwd)
build=$here/build out=multi-gpu-check steps=5 cases="" cpu=0
while [ $# -gt 0 ]; do
  case $1 in
  --build) build=$2; shift 2 ;;
  --out) out=$2; shift 2 ;;
  --steps) steps=$2; shift 2 ;;
  --cases) cases=$2; shift 2 ;;
  --cpu) cpu=1; shift ;;
  -h | --help) sed -n '2,21p' "$0"; exit 0 ;;
  *) echo "multi-gpu-check.sh: unknown argument '$1' (see --help)" >&2; exit 1 ;;
  esac
done
bin=$build/bin
for tool in "$bin/mimoc" "$bin/mimo-run"; do
  [ -x "$tool" ] || { echo "multi-gpu-check.sh: $tool is missing: build mimo first (README.md)" >&2; exit 1; }
done
command -v mpirun >/dev/null ||
  { echo "multi-gpu-check.sh: mpirun is missing (apt-get install openmpi-bin)" >&2; exit 1; }
if [ $cpu -eq 1 ]; then
  backend=mpi device=cpu tolerance=1e-5 gpus=0
else
  backend=nccl device=cuda tolerance=1e-4
  gpus=$(nvidia-smi --list-gpus 2>/dev/null | grep -c '^GPU') || gpus=0
  [ "$gpus" -ge 2 ] ||
    { echo "multi-gpu-check.sh: found $gpus GPU(s) (nvidia-smi); this check needs two or more" >&2; exit 1; }
fi
mkdir -p "$out" || exit 1
# The examples and their ranks (examples/*.json: world = the ranks their
# modules span).
all="vlm-fan-in:8 vlm-fan-out:8 avlm:8 vlm-colocated:8 vlm-colocated-pp2:8 lm-cp2-sp:6 packed-thd:6"
runs=()
for entry in $all; do
  name=${entry%%:*} world=${entry##*:}
  if [ -n "$cases" ]; then
    case ",$cases," in *",$name,"*) ;; *) continue ;; esac
  elif [ $cpu -eq 0 ] && [ "$world" -gt "$gpus" ]; then
    continue
  fi
  runs+=("$name:$world")
done
[ ${#runs[@]} -gt 0 ] || { echo "multi-gpu-check.sh: no case to run (--cases '$cases')" >&2; exit 1; }

record() { # NAME WORLD MODE EXIT MILLISECONDS METRICS REFERENCE
  printf '%s\t%s\t%s\t%s\t%s\t%s\t%s\n' "$@" >>"$out/runs.tsv"
}
: >"$out/runs.tsv"
for entry in "${runs[@]}"; do
  name=${entry%%:*} world=${entry##*:}
  plan=$out/$name.plan.json
  if ! "$bin/mimoc" compile -q "$here/examples/$name.json" -o "$plan" >"$out/$name.compile.log" 2>&1; then
    record "$name" "$world" compile 1 0 "" ""
    continue
  fi
  ref=$out/$name.reference.jsonl
  "$bin/mimo-run" "$plan" --reference --device "$device" --steps "$steps" \
    --metrics "$ref" >"$out/$name.reference.log" 2>&1
  rc=$?
  [ $rc -eq 0 ] || { record "$name" "$world" reference $rc 0 "" ""; continue; }
  for mode in overlap no-overlap; do
    metrics=$out/$name.$mode.jsonl
    start=$(date +%s%N)
    mpirun -np "$world" "$bin/mimo-run" "$plan" --backend "$backend" \
      --device "$device" --steps "$steps" --"$mode" --metrics "$metrics" \
      >"$out/$name.$mode.log" 2>&1
    rc=$?
    end=$(date +%s%N)
    record "$name" "$world" "$mode" $rc "$(((end - start) / 1000000))" "$metrics" "$ref"
  done
done

python3 - "$out" "$tolerance" "$backend" "$device" "$gpus" "$steps" \
  "$("$bin/mimo-run" --version 2>&1 | head -1)" <<'EOF'
import json, sys
out, tolerance, backend, device, gpus, steps, version = sys.argv[1:8]
tolerance = float(tolerance)

def losses(path):
    try:
        return [json.loads(l) for l in open(path) if '"loss"' in l]
    except OSError:
        return []

cases, ok = [], True
for line in open(f"{out}/runs.tsv"):
    name, world, mode, rc, seconds, metrics, ref = line.rstrip("\n").split("\t")
    case = {"case": name, "ranks": int(world), "run": mode, "exit": int(rc),
            "seconds": float(seconds or 0) / 1000}
    if mode in ("overlap", "no-overlap") and case["exit"] == 0:
        run, reference = losses(metrics), losses(ref)
        worst = 0.0
        for a, b in zip(run, reference):
            for key in ("loss", "grad_norm"):
                worst = max(worst, abs(a[key] - b[key]) / max(abs(b[key]), 1e-12))
        case.update(loss=[s["loss"] for s in run],
                    reference=[s["loss"] for s in reference],
                    max_relative=worst,
                    tokens_per_s=[s.get("tokens_per_s") for s in run])
        case["matches"] = len(run) == len(reference) == int(steps) and worst <= tolerance
    else:
        case["matches"] = False
    ok &= case["matches"]
    cases.append(case)
doc = {"backend": backend, "device": device, "gpus": int(gpus), "steps": int(steps),
       "tolerance": tolerance, "mimo": version, "cases": cases, "all_match": ok}
json.dump(doc, open(f"{out}/results.json", "w"), indent=1)
with open(f"{out}/results.md", "w") as f:
    f.write(f"# multi-gpu-check: {backend} on {device} ({gpus} GPUs), {version}\n\n")
    f.write("| case | ranks | run | exit | max rel. diff | matches | seconds |\n")
    f.write("|---|---|---|---|---|---|---|\n")
    for c in cases:
        diff = f"{c['max_relative']:.1e}" if "max_relative" in c else "-"
        f.write(f"| {c['case']} | {c['ranks']} | {c['run']} | {c['exit']} | {diff} "
                f"| {'yes' if c['matches'] else 'NO'} | {c['seconds']:.1f} |\n")
print(open(f"{out}/results.md").read())
print(f"multi-gpu-check.sh: {'every case matches' if ok else 'some cases FAIL'} "
      f"its reference; send {out}/results.json and {out}/results.md "
      "(and the .log files of failed cases) to the mimo developers")
sys.exit(0 if ok else 1)
EOF
