"""The LoRA case of tests/e2e/twin.py: PEFT's semantics by hand, float64.

A Qwen2-style twin (biases on q, k, v; GQA) is written as a Hugging Face
folder, and beside it a PEFT adapter folder as PEFT saves one:
adapter_config.json and adapter_model.safetensors with
base_model.model.<module>.lora_A.weight [r, in] and lora_B.weight [out, r]
for q, v, o, gate and down of every layer, and lm_head as a
modules_to_save tensor. The twin computes each adapted linear as PEFT's
LoraLayer does, base(x) + lora_B(lora_A(x)) * scaling (scaling = alpha / r),
and trains the adapters and the head with AdamW by hand (twin_run.AdamW),
the base frozen. mimo starts from the same two folders (`init` with an
`adapter`) and must match every step's loss and gradient norm in several
layouts; its checkpoint must hold the adapters and the head only; its
--export-peft folder must hold the checkpoint's adapters bit for bit under
PEFT's names; its --export-hf folder must hold W + s·B·A exactly (float64
sum, rounded once) for every adapted weight and the base bit for bit for
the rest; and mimo reading its own PEFT export back must give the twin's
loss with those adapters.
"""
import json
import math
import os
import subprocess

import numpy as np
import torch

from twin_files import hf_name, read_safetensors, write_hf, write_safetensors
from twin_models import Twin
from twin_run import (GLOBAL_BATCH, TOL, AdamW, RunError, compare,
                      compare_steps, run_mimo)

STEPS = 4
RANK, ALPHA = 4, 8.0
SCALE = ALPHA / RANK
# The twin's names of the adapted linears, and mimo's target names.
TARGETS = {"q_proj": "q", "v_proj": "v", "o_proj": "o", "gate_proj": "gate",
           "down_proj": "down"}
TRAIN = {"lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
         "clip_grad": 1.0,
         "lr_schedule": {"warmup_steps": 2, "decay": "cosine",
                         "decay_steps": 2, "min_lr": 0.001}}
LAYOUTS = [("1", {}), ("tp2", {"tp": 2}),
           ("tp2pp2", {"tp": 2, "pp": 2, "sequence_parallel": True}),
           ("dp2cp2", {"dp": 2, "cp": 2})]


def stem(name):
    return name[:name.rfind(".")]


def adapted(twin):
    """The twin's adapted weights: layers.L.q_proj, ..."""
    return [n for n in twin.params if n.split(".")[-1] in TARGETS]


def make_adapters(twin, seed):
    """lora_A [r, in] as PEFT starts it (Kaiming-uniform, bound 1/sqrt(in));
    lora_B [out, r] not zero (as after training), so that every term of the
    backward counts; the head's trained copy a little off the base's."""
    g = torch.Generator().manual_seed(seed)
    f32 = lambda t: t.float().double()
    ad = {}
    for n in adapted(twin):
        out, inp = twin.params[n].shape
        ad[n + ".lora_A"] = f32((torch.rand((RANK, inp), generator=g,
                                            dtype=torch.float64) * 2 - 1)
                                / math.sqrt(inp))
        ad[n + ".lora_B"] = f32((torch.rand((out, RANK), generator=g,
                                            dtype=torch.float64) * 2 - 1) * 0.05)
    head = twin.params["lm_head"]
    ad["lm_head"] = f32(head + 0.01 * (torch.rand(head.shape, generator=g,
                                                  dtype=torch.float64) - 0.5))
    return ad


def peft_name(key):
    """PEFT's saved name of an adapter tensor (save_and_load.py: the
    adapter name and "modules_to_save." dropped)."""
    if key == "lm_head":
        return "base_model.model.lm_head.weight"
    base, factor = key.rsplit(".", 1)
    return f"base_model.model.{stem(hf_name(base))}.{factor}.weight"


def write_peft(ad, folder, base_dir):
    os.makedirs(folder, exist_ok=True)
    tensors = [(peft_name(k), v.numpy().astype("<f4")) for k, v in ad.items()]
    write_safetensors(os.path.join(folder, "adapter_model.safetensors"),
                      tensors, {"format": "pt"})
    config = {"peft_type": "LORA", "task_type": "CAUSAL_LM",
              "base_model_name_or_path": base_dir, "r": RANK,
              "lora_alpha": ALPHA, "use_rslora": False,
              "target_modules": sorted(TARGETS), "modules_to_save": ["lm_head"],
              "lora_dropout": 0.05, "bias": "none", "fan_in_fan_out": False,
              "rank_pattern": {}, "alpha_pattern": {}}
    with open(os.path.join(folder, "adapter_config.json"), "w") as f:
        json.dump(config, f, indent=2)


class LoraTwin:
    """PEFT's LoraLayer over the twin's Linear layers: the base frozen,
    y = base(x) + lora_B(lora_A(x)) * scaling."""

    def __init__(self, twin, ad):
        self.twin = twin
        self.params = {k: v.clone().requires_grad_(True) for k, v in ad.items()}

    def loss(self, batch):
        twin = self.twin
        p = dict(twin.params)
        p["lm_head"] = self.params["lm_head"]
        # The forward computes x @ W.t(); PEFT adds (x @ A.t()) @ B.t() * s,
        # which is x @ (W + s B A).t() for every x: the twin's forward takes
        # the weight it multiplies by.
        for n in adapted(twin):
            a, b = self.params[n + ".lora_A"], self.params[n + ".lora_B"]
            p[n] = twin.params[n] + (b @ a) * SCALE
        return twin.loss(batch, p)


def lora_json(env, path, parallel, base_dir, adapter_dir):
    """twin.py's model.json of the case, with the adapter and `lora`."""
    env["model_json"](path, "twin-lora", env["arch"], parallel, base_dir,
                      env["data_path"], train=TRAIN, init_format="hf")
    with open(path) as f:
        model = json.load(f)
    module = model["modules"][0]
    module["init"]["adapter"] = {"from": adapter_dir, "format": "peft"}
    module["lora"] = {"r": RANK, "alpha": ALPHA,
                      "targets": sorted(TARGETS.values()),
                      "modules_to_save": ["head"]}
    with open(path, "w") as f:
        json.dump(model, f, indent=1)


def run_export(bin_dir, plan, step_dir, flag, out):
    cmd = [os.path.join(bin_dir, "mimo-run"), plan, "--load", step_dir, flag,
           out, "--export-dtype", "fp32"]
    r = subprocess.run(cmd, capture_output=True, text=True, timeout=300)
    if r.returncode != 0:
        raise RunError(f"{' '.join(cmd)} exited {r.returncode}\n{r.stderr}")


def f32(shape_data):
    shape, data = shape_data
    return np.frombuffer(data, "<f4").reshape(shape)


def check_exports(bin_dir, work, twin, base_dir, save, want_params, failures):
    """The checkpoint (lean), --export-peft and --export-hf of the first
    layout's last step."""
    tag = "lora-1"
    plan = os.path.join(work, tag + ".plan.json")
    step_dir = os.path.join(save, f"step-{STEPS}")
    bad = []
    ckpt = read_safetensors(os.path.join(step_dir, "model.safetensors"))
    names = sorted(ckpt)
    expected = sorted(["language.head"] + [
        f"language.{twin.mimo_name(n)}.lora_{f}" for n in adapted(twin)
        for f in "AB"])
    if names != expected:
        bad.append(f"the checkpoint holds {len(names)} tensors, not the "
                   f"{len(expected)} adapters and head: "
                   f"{sorted(set(names) ^ set(expected))[:4]}")
    # The trained adapters near the twin's (as the freeze case's weights).
    diffs = []
    for n in adapted(twin):
        for f in "AB":
            got = f32(ckpt[f"language.{twin.mimo_name(n)}.lora_{f}"])
            ref = want_params[f"{n}.lora_{f}"].detach().t().numpy()
            diffs.append(np.abs(got - ref).ravel())
    diffs = np.concatenate(diffs)
    if float((diffs > 1e-4).mean()) > 1e-3 or float(diffs.max()) > TRAIN["lr"]:
        bad.append(f"trained adapters: max difference {diffs.max():.2e} "
                   "from the twin's")
    peft, hf = os.path.join(work, "lora-peft"), os.path.join(work, "lora-hf")
    try:
        run_export(bin_dir, plan, step_dir, "--export-peft", peft)
        run_export(bin_dir, plan, step_dir, "--export-hf", hf)
    except (RunError, subprocess.TimeoutExpired) as e:
        print(f"FAIL lora/export: {e}")
        failures.append("lora/export")
        return None
    # PEFT's folder: the checkpoint's adapters transposed, bit for bit.
    out = read_safetensors(os.path.join(peft, "adapter_model.safetensors"))
    config = json.load(open(os.path.join(peft, "adapter_config.json")))
    for n in adapted(twin):
        for f in "AB":
            got = f32(out[peft_name(f"{n}.lora_{f}")])
            ref = f32(ckpt[f"language.{twin.mimo_name(n)}.lora_{f}"]).T
            if got.shape != ref.shape or got.tobytes() != ref.tobytes():
                bad.append(f"{peft_name(n + '.lora_' + f)} is not the "
                           "checkpoint's, transposed")
    if f32(out["base_model.model.lm_head.weight"]).tobytes() != \
            f32(ckpt["language.head"]).T.tobytes():
        bad.append("modules_to_save lm_head is not the checkpoint's head")
    if (config["r"], config["lora_alpha"], config["use_rslora"],
            config["modules_to_save"]) != (RANK, ALPHA, False, ["lm_head"]):
        bad.append(f"adapter_config.json: {config}")
    import re
    matched = {stem(hf_name(n)) for n in twin.params
               if re.fullmatch(config["target_modules"], stem(hf_name(n)))}
    if matched != {stem(hf_name(n)) for n in adapted(twin)}:
        bad.append(f"target_modules {config['target_modules']!r} matches "
                   f"{sorted(matched)}")
    # The merged folder: W + s·B·A, float64 sum rounded once; the rest of
    # the base bit for bit.
    merged = read_safetensors(os.path.join(hf, "model.safetensors"))
    for n, w in twin.params.items():
        got = f32(merged[hf_name(n)])
        base = w.numpy().astype("<f4")
        if n in adapted(twin):
            a = f32(ckpt[f"language.{twin.mimo_name(n)}.lora_A"]).astype(np.float64)
            b = f32(ckpt[f"language.{twin.mimo_name(n)}.lora_B"]).astype(np.float64)
            # mimo's A [in, r], B [r, out]: W^T [in, out] + s A B
            want = (base.T.astype(np.float64) + SCALE * (a @ b)).astype("<f4").T
        elif n == "lm_head":
            want = f32(ckpt["language.head"]).T
        else:
            want = base
        if got.tobytes() != np.ascontiguousarray(want).tobytes():
            diff = float(np.abs(got.astype(np.float64) - want).max())
            bad.append(f"merged {hf_name(n)} differs by {diff:.2e}")
    print(f"{'ok  ' if not bad else 'FAIL'} lora/export: the checkpoint "
          f"holds {len(names)} tensors (adapters and head), trained adapters "
          f"within {float(diffs.max()):.1e} of the twin's; PEFT's folder bit "
          "for bit; merged weights W + s·B·A exactly, the base bit for bit")
    for b in bad:
        print(f"    {b}")
    if bad:
        failures.append("lora/export")
    return peft


def run_lora(bin_dir, work, samples, data_path, case, model_json):
    """`case`: twin.py's (arch keys, twin config) with an "hf" folder;
    `model_json`: its model.json writer."""
    failures = []
    env = {"model_json": model_json, "arch": case[0], "data_path": data_path}
    twin = Twin(case[1], seed=400)
    base_dir = os.path.join(work, "lora-base")
    adapter_dir = os.path.join(work, "lora-adapter")
    write_hf(twin, base_dir)
    ad = make_adapters(twin, 401)
    write_peft(ad, adapter_dir, base_dir)
    lt = LoraTwin(twin, ad)
    adamw = AdamW(lt.params, list(lt.params), TRAIN)
    want = []
    for k in range(1, STEPS + 1):
        batch = samples[(k - 1) * GLOBAL_BATCH:k * GLOBAL_BATCH]
        loss = lt.loss(batch)
        loss.backward()
        want.append((loss.item(), adamw.step()))
    save_1 = None
    for layout, parallel in LAYOUTS:
        tag = f"lora-{layout}"
        model = os.path.join(work, tag + ".json")
        lora_json(env, model, parallel, base_dir, adapter_dir)
        save = os.path.join(work, tag + ".save")
        try:
            lines = run_mimo(bin_dir, work, tag, model, STEPS, save=save)
        except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            print(f"FAIL lora/{layout}: mimo failed:\n{e}")
            failures.append(f"lora/{layout}: run failed")
            continue
        compare_steps(f"lora/{layout}", want, lines, failures)
        if layout == "1":
            save_1 = save
    if save_1 is None:
        return failures
    peft = check_exports(bin_dir, work, twin, base_dir, save_1, lt.params,
                         failures)
    if peft is None:
        return failures
    # mimo reading its own PEFT export: the twin's loss with those adapters.
    out = read_safetensors(os.path.join(peft, "adapter_model.safetensors"))
    back = {k: torch.from_numpy(f32(out[peft_name(k)]).astype(np.float64))
            for k in ad}
    with torch.no_grad():
        wl = LoraTwin(twin, back).loss(samples[:GLOBAL_BATCH]).item()
    model = os.path.join(work, "lora-back.json")
    lora_json(env, model, {"tp": 2}, base_dir, peft)
    try:
        lines = run_mimo(bin_dir, work, "lora-back", model, 1)
        compare("lora/read back its PEFT export", wl, lines[0]["loss"],
                failures)
    except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"FAIL lora/read back: mimo failed:\n{e}")
        failures.append("lora/read back")
    return failures
