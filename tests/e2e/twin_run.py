"""Running mimo for tests/e2e/twin.py: compile, train, export; compare a
loss with the twin's."""
import json
import os
import subprocess

TOL = 1e-5

MICRO, MICROBATCHES = 4, 2
GLOBAL_BATCH = MICRO * MICROBATCHES


class RunError(Exception):
    pass


def run_mimo(bin_dir, work, tag, model, steps, save=None, export=None):
    """Compiles `model` and trains it `steps` steps (saving into `save`
    after each step when given); then, with `export`, writes step 1's
    checkpoint as Hugging Face folders there (--export-hf, fp32)."""
    plan = os.path.join(work, tag + ".plan.json")
    metrics = os.path.join(work, tag + ".metrics.jsonl")
    cmds = [[os.path.join(bin_dir, "mimoc"), "compile", model, "-o", plan],
            [os.path.join(bin_dir, "mimo-run"), plan, "--steps", str(steps),
             "--device", "cpu", "--threads", "1", "--metrics", metrics]]
    if save:
        cmds[1] += ["--save", save, "--save-every", "1"]
    if export:
        cmds.append([os.path.join(bin_dir, "mimo-run"), plan, "--load",
                     os.path.join(save, "step-1"), "--export-hf", export,
                     "--export-dtype", "fp32"])
    for cmd in cmds:
        r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
        if r.returncode != 0:
            raise RunError(f"{' '.join(cmd)} exited {r.returncode}\n"
                           f"{r.stdout[-4000:]}{r.stderr[-8000:]}")
    lines = [json.loads(l) for l in open(metrics) if l.strip()]
    lines = [l for l in lines if "loss" in l and "step" in l]
    if [l["step"] for l in lines] != list(range(1, steps + 1)):
        raise RunError(f"{metrics}: expected steps 1..{steps}, found "
                       f"{[l['step'] for l in lines]}")
    return lines


def rel(a, b):
    return abs(a - b) / max(abs(b), 1e-30)


def compare(tag, want, got, failures):
    """One line for a loss of mimo's against the twin's; a mismatch beyond
    TOL joins `failures`."""
    r = rel(got, want)
    print(f"{'ok  ' if r <= TOL else 'FAIL'} {tag}: twin {want:.8f} "
          f"mimo {got:.8f} rel {r:.2e}")
    if r > TOL:
        failures.append(f"{tag}: rel {r:.2e}")
