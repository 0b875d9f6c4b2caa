#!/usr/bin/env python3
"""An independent PyTorch twin of mimo's language model (docs/model.md).

usage: twin.py [BUILD_DIR] [--cases a,b,...] [--keep DIR] [--jobs N]

The models are twin_models.py's, the files (safetensors, mimo checkpoints,
Hugging Face folders) twin_files.py's; this file runs the cases.

Builds, in float64 PyTorch, a small random Llama-style causal language model
written from the Hugging Face LlamaForCausalLM semantics (token embedding;
pre-norm layers of RMSNorm, grouped-query attention with rotary embeddings
in the rotate-half layout, optionally rescaled as Llama 3.1's "llama3"
rope_scaling; SwiGLU MLP; final RMSNorm; an untied head), with no code of
mimo's. Its weights are written as a mimo checkpoint folder (a small
safetensors writer of its own) that the language module's
`"init": {"from": DIR, "format": "mimo"}` starts from; the token sequences
go to a jsonl file. Then BUILD_DIR/bin/mimoc compiles and BUILD_DIR/bin/
mimo-run trains the same model in several layouts, and every step's loss of
mimo must match the twin's within 1e-5 relative.

Cases:
  a       defaults (num_heads key/value heads, rope theta 10000, eps 1e-5)
  b       "llama3": GQA (2 key/value heads of 4), rope_theta 500000,
          llama3 rope_scaling, norm_eps 1e-6
  c       MQA: one key/value head
  qwen2   Qwen2: biases on q, k and v (before RoPE), GQA, rope_theta 1e6
  tied    the head tied to the embedding (tie_embeddings), GQA
  mask    loss_mask in the jsonl: prompts and a span left out of the loss
  freeze  4 AdamW steps (docs/model.md's Optimizer: clipping, decay on
          parameters of more than one row, bias correction, warm-up and
          cosine decay) with `"freeze": ["embedding", "layers.0"]`; every
          step's loss and gradient norm against the twin's, the frozen
          weights of mimo's saved checkpoint bit for bit the ones written,
          their moments zero, the trained ones near the twin's.
  lora    PEFT's LoRA (twin_lora.py): a Qwen2 base and a PEFT adapter
          folder in; 4 AdamW steps of the adapters and the head in 4
          layouts; the lean checkpoint, --export-peft bit for bit and
          --export-hf merged exactly; the export read back
  moe     Mixtral, Qwen2-MoE and Qwen3-MoE folders in (twin_moe.py): the
          step-1 loss and aux_loss in 6 layouts, --export-hf read back
  vlm, vlm-moe, llava, siglip, stage1: vision towers feeding the language
          model
          (twin_vision.py)

Prints one line per (case, layout); exits 1 on any mismatch or failed run
(with mimo's stderr). Run it with a python3 that has torch (Debian's
python3-torch: /usr/bin/python3).
"""
import argparse
import concurrent.futures
import json
import math
import os
import shutil
import subprocess
import sys
import tempfile

import numpy as np
import torch

from twin_files import SEQ, hf_name, read_safetensors, write_hf, write_init
from twin_models import FFN, HEADS, HIDDEN, LAYERS, VOCAB, Twin, inv_freq
from twin_run import (GLOBAL_BATCH, MICRO, MICROBATCHES, TOL, AdamW,
                      RunError, compare, compare_steps, rel, run_mimo)
from twin_lora import run_lora
from twin_moe import run_moe
from twin_vision import run_llava, run_siglip, run_stage1, run_vlm, run_vlm_moe

VISION = {"vlm": run_vlm, "vlm-moe": run_vlm_moe, "llava": run_llava,
          "siglip": run_siglip, "stage1": run_stage1}

FREEZE_STEPS = 4

LAYOUTS = [  # name, the language module's `parallel`
    ("1", {}),
    ("tp2", {"tp": 2}),
    ("pp2", {"pp": 2}),
    ("cp2", {"cp": 2}),
    ("dp2", {"dp": 2}),
    ("tp2pp2", {"tp": 2, "pp": 2, "sequence_parallel": True}),
]

# The arch of each case: (extra model.json `arch` keys, the twin's config).
CASES = {
    "a": ({}, dict(groups=HEADS, theta=10000.0, eps=1e-5, scaling=None)),
    "b": ({"num_query_groups": 2, "rope_theta": 500000.0,
           # original_max_position_embeddings 64 (not Llama 3.1's 8192)
           # puts the head size's 8 frequencies in all three bands of the
           # rescaling: kept, smoothed, divided (checked below).
           "rope_scaling": {"type": "llama3", "factor": 8.0,
                            "low_freq_factor": 1.0, "high_freq_factor": 4.0,
                            "original_max_position_embeddings": 64},
           "norm_eps": 1e-6},
          dict(groups=2, theta=500000.0, eps=1e-6,
               scaling=dict(factor=8.0, low_freq_factor=1.0,
                            high_freq_factor=4.0,
                            original_max_position_embeddings=64),
               # A Hugging Face folder: bf16 weights in two shards.
               hf=dict(model_type="llama", dtype="BF16", shards=2))),
    "c": ({"num_query_groups": 1}, dict(groups=1, theta=10000.0, eps=1e-5,
                                        scaling=None)),
    # Qwen2: biases on q, k and v (added before RoPE), GQA, theta 1e6.
    "qwen2": ({"num_query_groups": 2, "rope_theta": 1000000.0,
               "qkv_bias": True},
              dict(groups=2, theta=1000000.0, eps=1e-5, scaling=None,
                   qkv_bias=True,
                   hf=dict(model_type="qwen2", dtype="F32", shards=1))),
    # Instruction tuning: each sample's prompt (and a span inside) masked
    # from the loss by the jsonl's loss_mask.
    "mask": ({"num_query_groups": 2},
             dict(groups=2, theta=10000.0, eps=1e-5, scaling=None,
                  masked=True)),
    # Llama 3.2 1B/3B and the small Qwen2.5: the head is the embedding's
    # transpose (across pipeline stages: the last stage's copy).
    "tied": ({"num_query_groups": 2, "tie_embeddings": True},
             dict(groups=2, theta=10000.0, eps=1e-5, scaling=None,
                  tied=True,
                  hf=dict(model_type="llama", dtype="F16", shards=1))),
}

FREEZE = ["embedding", "layers.0"]
TRAIN = {"lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-8, "weight_decay": 0.1,
         "clip_grad": 1.0,
         "lr_schedule": {"warmup_steps": 2, "decay": "cosine",
                         "decay_steps": 2, "min_lr": 0.001}}


def make_samples(seed, count):
    """Token sequences: mostly full length, some shorter (padded by mimo and
    masked from the loss)."""
    g = np.random.default_rng(seed)
    samples = []
    for i in range(count):
        length = SEQ if i % 3 else int(g.integers(SEQ // 2, SEQ))
        samples.append([int(t) for t in g.integers(0, VOCAB, length)])
    return samples


def model_json(path, name, arch_extra, parallel, init_dir, data_path,
               freeze=None, train=None, init_format="mimo"):
    world = 1
    for k in ("tp", "cp", "pp", "dp"):
        world *= parallel.get(k, 1)
    arch = {"vocab_size": VOCAB, "hidden_size": HIDDEN, "num_layers": LAYERS,
            "num_heads": HEADS, "ffn_hidden_size": FFN}
    arch.update(arch_extra)
    module = {"name": "language", "kind": "language", "arch": arch,
              "parallel": dict(parallel),
              "init": {"from": init_dir, "format": init_format}}
    if freeze:
        module["freeze"] = freeze
    model = {"version": 1, "name": name, "seed": 7, "precision": "fp32",
             "world_size": world,
             "batch": {"micro_batch_size": MICRO,
                       "num_microbatches": MICROBATCHES, "seq_length": SEQ},
             "modules": [module],
             "data": {"source": "jsonl", "path": data_path}}
    if train:
        model["train"] = train
    with open(path, "w") as f:
        json.dump(model, f, indent=1)


# --------------------------------------------------------------------------
# The checks.


def design_checks(case, twin, batch):
    """The twin's own sanity: the case's features move the loss far more
    than the tolerance, so that matching within it proves them."""
    cfg = twin.cfg
    d = HIDDEN // HEADS
    problems = []
    with torch.no_grad():
        base = twin.loss(batch).item()
        if cfg["scaling"]:
            plain = inv_freq(d, cfg["theta"], None)
            scaled = inv_freq(d, cfg["theta"], cfg["scaling"])
            s = cfg["scaling"]
            wavelen = 2 * math.pi / plain
            orig = s["original_max_position_embeddings"]
            high = wavelen < orig / s["high_freq_factor"]
            low = wavelen > orig / s["low_freq_factor"]
            mid = ~high & ~low
            if not (high.any() and mid.any() and low.any()):
                problems.append("rope_scaling: not every band is used "
                                f"(high {high.tolist()}, low {low.tolist()})")
            if not torch.equal(scaled[high], plain[high]):
                problems.append("rope_scaling: the high band changed")
            if not torch.allclose(scaled[low], plain[low] / s["factor"]):
                problems.append("rope_scaling: the low band is not divided")
            if not (((scaled[mid] < plain[mid]) &
                     (scaled[mid] > plain[mid] / s["factor"])).all()):
                problems.append("rope_scaling: the medium band is not between")
            print(f"  twin {case}: inv_freq plain  {plain.numpy().round(6).tolist()}")
            print(f"  twin {case}: inv_freq llama3 {scaled.numpy().round(6).tolist()}"
                  f" (bands: {int(high.sum())} kept, {int(mid.sum())} smoothed, "
                  f"{int(low.sum())} divided)")
            other = twin.loss(batch, inv=plain).item()
            if rel(other, base) < 100 * TOL:
                problems.append(f"rope_scaling moves the loss only {rel(other, base):.2e}")
            print(f"  twin {case}: loss without rope_scaling {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
        if cfg["theta"] != 10000.0:
            saved = dict(cfg)
            twin.cfg = dict(cfg, theta=10000.0)
            other = twin.loss(batch).item()
            twin.cfg = saved
            print(f"  twin {case}: loss with theta 10000 {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
            if rel(other, base) < 100 * TOL:
                problems.append("rope_theta barely moves the loss")
        if cfg["eps"] != 1e-5:
            saved = dict(cfg)
            twin.cfg = dict(cfg, eps=1e-5)
            other = twin.loss(batch).item()
            twin.cfg = saved
            print(f"  twin {case}: loss with eps 1e-5 {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
            if rel(other, base) < 100 * TOL:
                problems.append("norm_eps barely moves the loss")
        if cfg.get("tied"):
            untied = dict(twin.params)
            untied["lm_head"] = twin.params["embed_tokens"].flip(0)
            saved = dict(cfg)
            twin.cfg = dict(cfg, tied=False)
            other = twin.loss(batch, p=untied).item()
            twin.cfg = saved
            print(f"  twin {case}: loss with another head {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
            if rel(other, base) < 100 * TOL:
                problems.append("tying the head barely moves the loss")
        if cfg.get("qkv_bias"):
            saved = dict(cfg)
            twin.cfg = dict(cfg, qkv_bias=False)
            other = twin.loss(batch).item()
            twin.cfg = saved
            print(f"  twin {case}: loss without the q, k, v biases {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
            if rel(other, base) < 100 * TOL:
                problems.append("qkv_bias barely moves the loss")
        G = cfg["groups"]
        if 1 < G < HEADS:
            # Query head i on key/value head i % G (interleaved, not HF's).
            other = twin.loss(batch, kv_map=[i % G for i in range(HEADS)]).item()
            print(f"  twin {case}: loss with interleaved kv heads {other:.8f} "
                  f"(rel {rel(other, base):.2e})")
            if rel(other, base) < 100 * TOL:
                problems.append("the kv-head mapping barely moves the loss")
    return problems


def run_cases(args, bin_dir, work, samples, data_path, cases):
    failures = []
    for case in cases:
        failures += run_case(args, bin_dir, work, samples, data_path, case)
        if CASES[case][1].get("hf"):
            failures += run_export(bin_dir, work, samples, data_path, case)
    return failures


def twin_from_hf(cfg, folder):
    """A twin whose weights are a Hugging Face folder's (one fp32 file):
    the exported model, read with no code of mimo's."""
    twin = Twin(cfg, seed=0)
    tensors = read_safetensors(os.path.join(folder, "model.safetensors"))
    by_hf = {hf_name(n): n for n in twin.params}
    if set(tensors) != set(by_hf):
        raise RunError(f"{folder}: tensors {sorted(set(tensors) ^ set(by_hf))} "
                       "differ from the twin's")
    for name, (shape, raw) in tensors.items():
        mine = by_hf[name]
        if tuple(twin.params[mine].shape) != shape:
            raise RunError(f"{folder}: {name} has shape {shape}, the twin's "
                           f"{tuple(twin.params[mine].shape)}")
        twin.params[mine] = torch.from_numpy(
            np.frombuffer(raw, dtype="<f4").reshape(shape).astype(np.float64))
    return twin


def run_export(bin_dir, work, samples, data_path, case):
    """--export-hf: mimo trains the case's model 2 steps from its Hugging
    Face folder, saving each; step 1's checkpoint exported as a Hugging Face
    folder (fp32) must (1) have a config.json the twin's config agrees
    with, (2) hold tensors with which the twin's loss on step 2's batch is
    mimo's step-2 loss, and (3) start mimo again (init format hf), its first
    loss the twin's on the exported weights."""
    arch_extra, cfg = CASES[case]
    tag = f"{case}-export"
    model = os.path.join(work, tag + ".json")
    model_json(model, "twin", arch_extra, {}, os.path.join(work, f"init-{case}"),
               data_path, init_format="hf")
    save, out = os.path.join(work, tag + "-save"), os.path.join(work, tag + "-hf")
    failures = []
    try:
        lines = run_mimo(bin_dir, work, tag, model, 2, save=save, export=out)
        folder = out  # a language model alone: one folder, OUT itself
        config = json.load(open(os.path.join(folder, "config.json")))
        want = {"num_key_value_heads": cfg["groups"], "rope_theta": cfg["theta"],
                "rms_norm_eps": cfg["eps"], "hidden_size": HIDDEN,
                "num_hidden_layers": LAYERS, "intermediate_size": FFN,
                "tie_word_embeddings": bool(cfg.get("tied")),
                "model_type": cfg["hf"]["model_type"]}
        wrong = {k: (config.get(k), v) for k, v in want.items()
                 if config.get(k) != v}
        if wrong:
            raise RunError(f"{folder}/config.json: (found, expected) {wrong}")
        exported = twin_from_hf(cfg, folder)
        with torch.no_grad():
            second = exported.loss(samples[GLOBAL_BATCH:2 * GLOBAL_BATCH]).item()
            first = exported.loss(samples[:GLOBAL_BATCH]).item()
        # The twin on the export, step 2's batch, against mimo's step 2.
        compare(f"{case}/export", second, lines[1]["loss"], failures)
        again = os.path.join(work, tag + "-again.json")
        model_json(again, "twin", arch_extra, {}, folder, data_path,
                   init_format="hf")
        got = run_mimo(bin_dir, work, tag + "-again", again, 1)[0]["loss"]
        # mimo from the export against the twin on it, step 1's batch.
        compare(f"{case}/re-import", first, got, failures)
    except (RunError, subprocess.TimeoutExpired, OSError, ValueError,
            KeyError) as e:
        print(f"FAIL {case}/export: {e}")
        failures.append(f"{case}/export")
    return failures


def run_case(args, bin_dir, work, samples, data_path, case):
    """One case: the twin's loss and design checks, then mimo in every
    layout the case allows, args.jobs runs at once."""
    failures = []
    jobs = []
    arch_extra, cfg = CASES[case]
    twin = Twin(cfg, seed=100 + sum(map(ord, case)))
    init_dir = os.path.join(work, f"init-{case}")
    init_format = "hf" if cfg.get("hf") else "mimo"
    if cfg.get("hf"):
        write_hf(twin, init_dir)
    else:
        write_init(twin, init_dir)
    batch = samples[:GLOBAL_BATCH]
    masks = None
    if cfg.get("masked"):
        # Prompts of 1 to half the sample, and 3 tokens inside the answer.
        g = np.random.default_rng(5)
        masks = []
        for ids in batch:
            m = [1] * len(ids)
            for i in range(int(g.integers(1, len(ids) // 2 + 1))):
                m[i] = 0
            at = int(g.integers(len(ids) // 2, len(ids) - 3))
            m[at:at + 3] = [0, 0, 0]
            masks.append(m)
        data_path = os.path.join(work, "data-mask.jsonl")
        with open(data_path, "w") as f:
            for ids, m in zip(batch, masks):
                f.write(json.dumps({"input_ids": ids, "loss_mask": m}) + "\n")
    with torch.no_grad():
        want = twin.loss(batch, masks=masks).item()
        if masks is not None:
            unmasked = twin.loss(batch).item()
            print(f"  twin {case}: loss without the masks {unmasked:.8f} "
                  f"(rel {rel(unmasked, want):.2e})")
            if rel(unmasked, want) < 100 * TOL:
                failures.append(f"{case}: the masks barely move the loss")
    problems = design_checks(case, twin, batch)
    for p in problems:
        print(f"FAIL twin {case}: {p}")
        failures.append(f"{case}: {p}")
    for layout, parallel in LAYOUTS:
        tp = parallel.get("tp", 1)
        if cfg["groups"] % tp:
            print(f"skip {case}/{layout}: tp {tp} does not divide "
                  f"{cfg['groups']} key/value heads")
            continue
        tag = f"{case}-{layout}"
        model = os.path.join(work, tag + ".json")
        model_json(model, "twin", arch_extra, parallel, init_dir,
                   data_path, init_format=init_format)
        jobs.append((case, layout, want, tag, model))

    def one(job):
        case, layout, want, tag, model = job
        try:
            got = run_mimo(bin_dir, work, tag, model, 1)[0]["loss"]
        except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            return job, None, str(e)
        return job, got, None

    seen = {}  # error text (less the file names) -> the case that had it
    with concurrent.futures.ThreadPoolExecutor(args.jobs) as pool:
        for job, got, err in pool.map(one, jobs):
            case, layout, want, tag, model = job
            if err is not None:
                key = err.replace(tag, "")
                if key in seen:
                    err = f"(the same error as {seen[key]})"
                else:
                    seen[key] = f"{case}/{layout}"
                print(f"FAIL {case}/{layout}: twin {want:.8f} mimo failed:\n{err}")
                failures.append(f"{case}/{layout}: run failed")
                continue
            compare(f"{case}/{layout}", want, got, failures)
    return failures


def frozen(name):
    parts = name.split(".")
    return any(parts[:len(f.split("."))] == f.split(".") for f in FREEZE)


def run_freeze(args, bin_dir, work, samples, data_path):
    """AdamW by hand (docs/model.md's Optimizer), float64."""
    failures = []
    cfg = CASES["a"][1]
    twin = Twin(cfg, seed=300)
    init_dir = os.path.join(work, "init-freeze")
    written = write_init(twin, init_dir)
    params = {k: v.clone() for k, v in twin.params.items()}
    trainable = [k for k in params if not frozen(twin.mimo_name(k))]
    for k in trainable:
        params[k].requires_grad_(True)
    adamw = AdamW(params, trainable, TRAIN)
    want = []
    for k in range(1, FREEZE_STEPS + 1):
        batch = samples[(k - 1) * GLOBAL_BATCH:k * GLOBAL_BATCH]
        loss = twin.loss(batch, params)
        loss.backward()
        want.append((loss.item(), adamw.step()))

    for layout, parallel in [("1", {}), ("tp2pp2", {"tp": 2, "pp": 2}),
                             ("dp2cp2", {"dp": 2, "cp": 2})]:
        tag = f"freeze-{layout}"
        model = os.path.join(work, tag + ".json")
        model_json(model, "twin", {}, parallel, init_dir, data_path,
                   freeze=FREEZE, train=TRAIN)
        save = os.path.join(work, tag + ".save")
        try:
            lines = run_mimo(bin_dir, work, tag, model, FREEZE_STEPS, save=save)
        except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            print(f"FAIL freeze/{layout}: mimo failed:\n{e}")
            failures.append(f"freeze/{layout}: run failed")
            continue
        compare_steps(f"freeze/{layout}", want, lines, failures)
        step_dir = os.path.join(save, f"step-{FREEZE_STEPS}")
        try:
            saved = read_safetensors(os.path.join(step_dir, "model.safetensors"))
            moments = read_safetensors(os.path.join(step_dir, "optimizer.safetensors"))
        except (OSError, AssertionError, ValueError) as e:
            print(f"FAIL freeze/{layout}: cannot read the checkpoint: {e}")
            failures.append(f"freeze/{layout}: checkpoint")
            continue
        bad, diffs = [], []
        for name, t in twin.params.items():
            full = "language." + twin.mimo_name(name)
            shape, data = saved[full]
            if frozen(twin.mimo_name(name)):
                if data != written[full]:
                    bad.append(f"{full} changed")
                for suffix in (".exp_avg", ".exp_avg_sq"):
                    if any(np.frombuffer(moments[full + suffix][1], "<f4")):
                        bad.append(f"{full}{suffix} not zero")
            else:
                if data == written[full]:
                    bad.append(f"{full} not trained")
                got = np.frombuffer(data, "<f4").reshape(shape)
                ref = twin.mimo_tensor(name, params[name].detach()).numpy()
                diffs.append(np.abs(got - ref).ravel())
        # Almost every trained element within 1e-4 of the twin's (the median
        # is about 5e-7). AdamW moves an element by about lr a step whatever
        # its gradient, so fp32 against float64 can move the few elements
        # whose gradient is rounding noise differently: a handful of them (a
        # 1e-4 share at most) may differ by up to lr.
        diffs = np.concatenate(diffs)
        far = float((diffs > 1e-4).mean())
        worst = float(diffs.max())
        if far > 1e-3 or worst > TRAIN["lr"]:
            bad.append(f"trained weights: {far:.2e} of the elements differ "
                       f"from the twin's by more than 1e-4, at most by {worst:.2e}")
        n_frozen = sum(frozen(twin.mimo_name(n)) for n in twin.params)
        print(f"{'ok  ' if not bad else 'FAIL'} freeze/{layout}/checkpoint: "
              f"{n_frozen} frozen tensors bit for bit, their moments zero; "
              f"trained weights: median difference {float(np.median(diffs)):.1e}, "
              f"{far:.1e} of them above 1e-4, max {worst:.1e}")
        for b in bad:
            print(f"    {b}")
        if bad:
            failures.append(f"freeze/{layout}: checkpoint")
    return failures


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    ap.add_argument("build", nargs="?", default="build",
                    help="the build folder (its bin/ holds mimoc, mimo-run)")
    ap.add_argument("--cases",
                    default=",".join(list(CASES) + ["freeze", "lora", "moe"]
                                     + list(VISION)))
    ap.add_argument("--keep", help="work in this folder and keep it")
    ap.add_argument("--jobs", type=int, default=2,
                    help="mimo runs at once (default 2)")
    args = ap.parse_args()
    cases = [c for c in args.cases.split(",") if c]
    for c in cases:
        if (c not in CASES and c not in ("freeze", "lora", "moe")
                and c not in VISION):
            names = list(CASES) + ["freeze", "lora", "moe"] + list(VISION)
            ap.error(f"unknown case '{c}' ({', '.join(names)})")
    bin_dir = os.path.abspath(os.path.join(args.build, "bin"))
    for tool in ("mimoc", "mimo-run"):
        if not os.access(os.path.join(bin_dir, tool), os.X_OK):
            sys.exit(f"twin.py: error: no {tool} in {bin_dir}")
    torch.set_num_threads(1)
    if args.keep:
        work = os.path.abspath(args.keep)
        os.makedirs(work, exist_ok=True)
    else:
        work = tempfile.mkdtemp(prefix="mimo-twin-")
    try:
        samples = make_samples(11, FREEZE_STEPS * GLOBAL_BATCH)
        data_path = os.path.join(work, "data.jsonl")
        with open(data_path, "w") as f:
            for s in samples:
                f.write(json.dumps({"input_ids": s}) + "\n")
        failures = []
        plain = [c for c in cases if c in CASES]
        if plain:
            failures += run_cases(args, bin_dir, work, samples, data_path, plain)
        if "freeze" in cases:
            failures += run_freeze(args, bin_dir, work, samples, data_path)
        if "lora" in cases:
            failures += run_lora(bin_dir, work, samples, data_path,
                                 CASES["qwen2"], model_json)
        if "moe" in cases:
            failures += run_moe(bin_dir, work, samples, data_path, model_json)
        for case, run in VISION.items():
            if case in cases:
                failures += run(bin_dir, work)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if failures:
        print(f"twin.py: {len(failures)} failure(s): " + "; ".join(failures))
        return 1
    print("twin.py: every case matches the twin")
    return 0


if __name__ == "__main__":
    sys.exit(main())
