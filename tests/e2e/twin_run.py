"""Running mimo for tests/e2e/twin.py: compile, train, export; compare a
loss with the twin's."""
import json
import math
import os
import subprocess

import torch

TOL = 1e-5

MICRO, MICROBATCHES = 4, 2
GLOBAL_BATCH = MICRO * MICROBATCHES


class RunError(Exception):
    pass


def run_mimo(bin_dir, work, tag, model, steps, save=None, export=None,
             per_module=False):
    """Compiles `model` and trains it `steps` steps (saving into `save`
    after each step when given); then, with `export`, writes step 1's
    checkpoint as a Hugging Face folder there (--export-hf, fp32; a folder
    per module with `per_module`)."""
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
                     "--export-dtype", "fp32"]
                    + (["--export-hf-per-module"] if per_module else []))
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


def lr_at(k, train):
    """docs/model.md's schedule, step k from 1."""
    lr, s = train["lr"], train["lr_schedule"]
    warm, decay, min_lr = s["warmup_steps"], s["decay_steps"], s["min_lr"]
    if k <= warm:
        return lr * k / warm
    t = k - warm
    if t > decay:
        return min_lr
    return min_lr + (lr - min_lr) * (1 + math.cos(math.pi * t / decay)) / 2


class AdamW:
    """docs/model.md's Optimizer by hand, float64, over the tensors of
    `params` named in `trainable` (their .grad set): the gradient norm over
    them, clipping, bias correction, the schedule, decay only on parameters
    of more than one row (norm weights and biases are 1-D here), and each
    name's learning rate times `lr_mult(name)`."""

    def __init__(self, params, trainable, train, lr_mult=lambda name: 1.0):
        self.params, self.trainable, self.train = params, trainable, train
        self.lr_mult = lr_mult
        self.m = {k: torch.zeros_like(params[k]) for k in trainable}
        self.v = {k: torch.zeros_like(params[k]) for k in trainable}
        self.k = 0

    def step(self):
        """One step from the gradients; returns the (unclipped) norm."""
        self.k += 1
        k, train = self.k, self.train
        b1, b2 = train["betas"]
        eps, wd, clip = train["eps"], train["weight_decay"], train["clip_grad"]
        norm = math.sqrt(sum(float((self.params[n].grad ** 2).sum())
                             for n in self.trainable))
        scale = clip / (norm + 1e-6) if clip > 0 and norm > clip else 1.0
        with torch.no_grad():
            for n in self.trainable:
                p, g = self.params[n], self.params[n].grad * scale
                self.m[n].mul_(b1).add_((1 - b1) * g)
                self.v[n].mul_(b2).add_((1 - b2) * g * g)
                mhat = self.m[n] / (1 - b1 ** k)
                vhat = self.v[n] / (1 - b2 ** k)
                decay = wd if p.dim() > 1 else 0.0
                lr = lr_at(k, train) * self.lr_mult(n)
                p -= lr * (mhat / (vhat.sqrt() + eps) + decay * p)
                p.grad = None
        return norm


def compare_steps(tag, want, lines, failures):
    """Each step's loss and gradient norm of mimo's `lines` against the
    twin's `want` [(loss, norm)]: the loss within TOL; the norm, more
    sensitive to fp32 against float64 (updates of elements whose gradient
    is noise, bf16 weights), within 1e-4 at step 1 and 1e-3 after."""
    for (wl, wn), line in zip(want, lines):
        r, rn = rel(line["loss"], wl), rel(line["grad_norm"], wn)
        ok = r <= TOL and rn <= (1e-4 if line["step"] == 1 else 1e-3)
        print(f"{'ok  ' if ok else 'FAIL'} {tag}/step {line['step']}: "
              f"twin {wl:.8f} mimo {line['loss']:.8f} rel {r:.2e} "
              f"(grad_norm twin {wn:.6f} mimo {line['grad_norm']:.6f} rel {rn:.2e})")
        if not ok:
            failures.append(f"{tag}/step {line['step']}: rel {r:.2e}, "
                            f"grad_norm rel {rn:.2e}")
