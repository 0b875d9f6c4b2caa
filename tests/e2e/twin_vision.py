"""The vision cases of tests/e2e/twin.py: an encoder feeding the language
model, with no code of mimo's.

  vlm     LLaVA's shape in mimo's names: a CLIP-style vision tower (class
          token, learned positions, pre-norm, biases, the penultimate layer,
          mlp2x_gelu) feeding the language model, from a mimo checkpoint, in
          three layouts
  vlm-moe the same with a sparse tower (arch.moe: router, top-2 experts, a
          gated shared expert): the first loss and aux_loss in three
          layouts, one of them with the tower's experts split (ep 2)
  llava   a LlavaForConditionalGeneration folder (bf16, two shards): a
          CLIPVisionModel under vision_tower., LLaVA's projector, the
          Llama under language_model.; both modules start from it (init
          format hf) in three layouts, and from the same folder in the
          layout of transformers 4.52 and later, and on samples of two
          images each ("items": each image its own sequence in the
          tower); the images are pixels,
          the twin runs the patch convolution, mimo reads the patch rows;
          then 2 steps and --export-hf, one LLaVA folder the twin reads
          back (its step-2 loss is mimo's) and mimo starts again from
  siglip  a SiglipVisionModel folder with LLaVA's projector beside it (the
          pooling head and nothing else left unread) and a Llama folder;
          mimo trains 2 steps from them and exports both (--export-hf),
          which the twin reads back: its step-2 loss is mimo's, and mimo
          started again from the export gives the twin's first loss
  stage1  LLaVA's stage 1 from that folder: the tower (`freeze` of its
          parts) and the language model (`freeze: true`) frozen, the
          projector alone trained at the encoder's lr_mult 0.5 for 3 AdamW
          steps; the twin trains only the projector's tensors
          (requires_grad), every step's loss and gradient norm compared
"""
import json
import os
import subprocess

import numpy as np
import torch

from twin_files import (SEQ, llava_names, read_folder, write_hf, write_init,
                        write_llava, write_tower)
from twin_models import (E_CHANNELS, E_D, E_FFN, E_GRID, E_H, E_HEADS,
                         E_IMAGE, E_LAYERS, E_POSITIONS, FFN, HEADS, HIDDEN,
                         IMAGE_ID, LAYERS, VOCAB, HfTower, Twin, VisionTwin,
                         patch_rows, vlm_loss)
from twin_run import (GLOBAL_BATCH, MICRO, MICROBATCHES, TOL, AdamW,
                      RunError, compare, compare_steps, rel, run_mimo)

# The LLaVA layouts: name, the encoder's and the language model's
# `parallel`, the world size.
LAYOUTS = [("1+1", {}, {"rank_offset": 1}, 2),
           ("tp2+tp2pp2", {"tp": 2}, {"tp": 2, "pp": 2, "rank_offset": 2}, 6),
           ("colocated-tp2", {"tp": 2}, {"tp": 2}, 2)]


# vlm's tower (mimo's names): CLIP's structure, the penultimate layer.
VLM_ARCH = {"feature_dim": E_D, "hidden_size": E_H, "num_layers": E_LAYERS,
            "num_heads": E_HEADS, "ffn_hidden_size": E_FFN, "bias": True,
            "position_embeddings": "learned", "max_positions": E_POSITIONS,
            "pre_norm": True, "class_token": True, "output_layer": -2,
            "patch_bias": False, "activation": "quick_gelu",
            "projector_activation": "gelu"}


def feature_batch(seed, rows_of):
    """GLOBAL_BATCH samples, each with rows_of(i, rng) image feature rows
    (0: text-only) at a random place; (ids, features [c, E_D])."""
    g = np.random.default_rng(seed)
    batch = []
    for i in range(GLOBAL_BATCH):
        c = rows_of(i, g)
        at = int(g.integers(1, SEQ - c - 2))
        ids = [int(t) for t in g.integers(0, IMAGE_ID, SEQ - (i % 3) * 5)]
        ids[at:at + c] = [IMAGE_ID] * c
        feats = torch.from_numpy(
            g.standard_normal((c, E_D)).astype(np.float32).astype(np.float64))
        batch.append((ids, feats))
    return batch


def write_features(path, batch):
    """jsonl of feature_batch's samples: the rows as the encoder's
    features."""
    with open(path, "w") as f:
        for ids, feats in batch:
            sample = {"input_ids": ids}
            if feats.shape[0]:
                sample["images"] = {"features": feats.numpy().tolist()}
            f.write(json.dumps(sample) + "\n")


def run_vlm(bin_dir, work):
    """LLaVA's shape: a CLIP-style tower (class token, learned positions,
    pre-norm, biases, the penultimate layer, mlp2x_gelu) feeding the
    Llama-style language model; the first loss of mimo, started from the
    twins' weights, against theirs in three layouts."""
    cfg = dict(groups=2, theta=10000.0, eps=1e-5, scaling=None)
    lm, vision = Twin(cfg, seed=301), VisionTwin(seed=302)
    # Some text-only.
    batch = feature_batch(
        9, lambda i, g: int(g.integers(0, E_POSITIONS - 1)) if i % 4 else 0)
    # The twin's own sanity: the tower's details move the loss.
    want, failures = tower_checks(
        "vlm", lm, vision, batch,
        ("position_embedding", "class_token", "pre_norm.weight", "layers.0.bq"))
    data = os.path.join(work, "vlm.jsonl")
    write_features(data, batch)
    init = os.path.join(work, "init-vlm")
    write_init(lm, init, extra={"images." + n: t
                                for n, t in vision.params.items()})
    arch = VLM_ARCH
    for name, enc_par, lang_par, world in LAYOUTS:
        path = os.path.join(work, f"vlm-{name}.json")
        vision_model(path, arch, init, init, enc_par, lang_par, world, data,
                     init_format="mimo", name="twin-vlm")
        first_loss(bin_dir, work, f"vlm-{name}", f"vlm/{name}", want, path,
                   failures)
    return failures


# The sparse tower of vlm-moe (mimo's arch.moe): its one computed layer
# sparse, 4 experts, top 2 not renormalised, a gated shared expert.
TOWER_MOE = {"num_experts": 4, "top_k": 2, "expert_ffn_hidden_size": 16,
             "shared_expert_ffn_hidden_size": 32, "layers": [0],
             "router": {"norm_topk": False, "aux_loss_coef": 0.02,
                        "z_loss_coef": 0.001}}
# Layouts of the sparse tower: its experts split over its data-parallel
# pair (ep 2), and colocated under tp 2.
MOE_LAYOUTS = [("1+1", {}, {"rank_offset": 1}, 2),
               ("dp2ep2+tp2", {"dp": 2, "ep": 2}, {"tp": 2, "rank_offset": 2}, 4),
               ("colocated-tp2", {"tp": 2}, {"tp": 2}, 2)]


def tower_aux(stats):
    """docs/model.md's aux_loss of one global microbatch's router logits
    per sparse layer: experts · Σ_e f_e · P_e (f_e the share of the routed
    slots that chose e, P_e the mean probability) times aux_loss_coef,
    plus z_loss_coef times the mean squared log-sum-exp."""
    e, r = TOWER_MOE, TOWER_MOE["router"]
    aux = 0.0
    for logits in stats.values():
        z = torch.cat(logits)
        probs = torch.softmax(z, dim=-1)
        chosen = torch.topk(probs, e["top_k"], dim=-1).indices
        f = torch.nn.functional.one_hot(chosen, e["num_experts"]).sum(1)
        f = f.double().mean(0) / e["top_k"]
        aux = aux + r["aux_loss_coef"] * e["num_experts"] * (f * probs.mean(0)).sum()
        aux = aux + r["z_loss_coef"] * (torch.logsumexp(z, dim=-1) ** 2).mean()
    return aux


def run_vlm_moe(bin_dir, work):
    """vlm's shape with a sparse tower (docs/model.md "Mixture of
    experts" in an encoder): the first loss and aux_loss (every image's
    rows of a global microbatch, class tokens included, per sparse layer;
    the mean over microbatches) of mimo, started from the twins' weights,
    against theirs in three layouts."""
    cfg = dict(groups=2, theta=10000.0, eps=1e-5, scaling=None)
    lm, vision = Twin(cfg, seed=311), VisionTwin(seed=312, moe=TOWER_MOE)
    # The first two of every four text-only: at dp 2 the first lane of each
    # microbatch sees no image, its ep peer some.
    batch = feature_batch(
        19, lambda i, g: int(g.integers(1, E_POSITIONS - 1)) if i % 4 >= 2 else 0)
    # The twin's own sanity: the experts and the shared gate move it.
    want, failures = tower_checks(
        "vlm-moe", lm, vision, batch,
        ("layers.0.experts.1.up", "layers.0.shared_gate"))
    with torch.no_grad():
        aux = 0.0
        for m in range(MICROBATCHES):
            stats = {}
            vlm_loss(lm, vision, batch[m * MICRO:(m + 1) * MICRO], stats)
            aux += float(tower_aux(stats)) / MICROBATCHES
    data = os.path.join(work, "vlm-moe.jsonl")
    write_features(data, batch)
    init = os.path.join(work, "init-vlm-moe")
    write_init(lm, init, extra={"images." + n: t
                                for n, t in vision.params.items()})
    arch = dict(VLM_ARCH, moe=TOWER_MOE)
    for name, enc_par, lang_par, world in MOE_LAYOUTS:
        path = os.path.join(work, f"vlm-moe-{name}.json")
        vision_model(path, arch, init, init, enc_par, lang_par, world, data,
                     init_format="mimo", name="twin-vlm-moe")
        label = f"vlm-moe/{name}"
        try:
            line = run_mimo(bin_dir, work, f"vlm-moe-{name}", path, 1)[0]
            compare(label, want, line["loss"], failures)
            compare(label + "/aux_loss", aux, line.get("aux_loss", float("nan")),
                    failures)
        except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            print(f"FAIL {label}: {e}")
            failures.append(label)
    return failures


def first_loss(bin_dir, work, tag, label, want, path, failures):
    """mimo's first loss of the model at `path` against the twin's `want`."""
    try:
        got = run_mimo(bin_dir, work, tag, path, 1)[0]["loss"]
        compare(label, want, got, failures)
    except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
        print(f"FAIL {label}: {e}")
        failures.append(label)


def image_batch(seed, count):
    """Samples with one 4x4 RGB image each (every fourth text-only): the
    image's E_GRID tokens at a random place; (ids, image or None)."""
    g = np.random.default_rng(seed)
    batch = []
    for i in range(count):
        ids = [int(t) for t in g.integers(0, IMAGE_ID, SEQ - (i % 3) * 5)]
        image = None
        if i % 4:
            at = int(g.integers(1, len(ids) - E_GRID - 2))
            ids[at:at + E_GRID] = [IMAGE_ID] * E_GRID
            image = torch.from_numpy(g.standard_normal(
                (E_CHANNELS, E_IMAGE, E_IMAGE)).astype(np.float32)
                .astype(np.float64))
        batch.append((ids, image))
    return batch


def multi_image_batch(seed, count):
    """Samples with two 4x4 RGB images, one, or none: each image's E_GRID
    tokens at a random place, in order; (ids, [images] or None)."""
    g = np.random.default_rng(seed)
    batch = []
    for i in range(count):
        ids = [int(t) for t in g.integers(0, IMAGE_ID, SEQ - (i % 2) * 3)]
        images = []
        for k in range(2 - i % 3):
            lo = 1 + k * (len(ids) // 2)
            at = int(g.integers(lo, lo + len(ids) // 2 - E_GRID - 2))
            ids[at:at + E_GRID] = [IMAGE_ID] * E_GRID
            images.append(torch.from_numpy(g.standard_normal(
                (E_CHANNELS, E_IMAGE, E_IMAGE)).astype(np.float32)
                .astype(np.float64)))
        batch.append((ids, images or None))
    return batch


def write_images(path, batch):
    """jsonl: the image's patch rows as the encoder's features; several
    images' rows one after the other, with "items" their row counts."""
    with open(path, "w") as f:
        for ids, image in batch:
            sample = {"input_ids": ids}
            if isinstance(image, list):
                rows = [patch_rows(im) for im in image]
                sample["images"] = {
                    "features": torch.cat(rows).numpy().tolist(),
                    "items": [len(r) for r in rows]}
            elif image is not None:
                sample["images"] = {"features": patch_rows(image).numpy().tolist()}
            f.write(json.dumps(sample) + "\n")


def tower_arch(tower):
    """The encoder's arch for a tower (docs/pretrained.md's table)."""
    arch = {"feature_dim": E_D, "hidden_size": E_H, "num_layers": E_LAYERS,
            "num_heads": E_HEADS, "ffn_hidden_size": E_FFN, "bias": True,
            "position_embeddings": "learned",
            "max_positions": E_GRID + (1 if tower.clip else 0),
            "output_layer": tower.feature_layer,
            "projector_activation": "gelu"}
    if tower.clip:
        arch.update(pre_norm=True, class_token=True, patch_bias=False,
                    activation="quick_gelu")
    else:
        arch.update(final_norm=tower.final_norm, norm_eps=1e-6,
                    activation="gelu_tanh")
    return arch


def vision_model(path, arch, encoder_init, language_init, enc_par, lang_par,
                 world, data, init_format="hf", name="twin-vision",
                 recipe=None):
    """model.json of an encoder (`arch`) feeding the language model, each
    started from its folder (`init_format`); `recipe`: the encoder's and
    the language model's extra keys (freeze, lr_mult) and `train`."""
    model = {"version": 1, "name": name, "seed": 7, "world_size": world,
             "batch": {"micro_batch_size": MICRO,
                       "num_microbatches": MICROBATCHES, "seq_length": SEQ},
             "modules": [
                 {"name": "images", "kind": "encoder",
                  "special_token_id": IMAGE_ID, "arch": arch,
                  "parallel": enc_par,
                  "init": {"from": encoder_init, "format": init_format}},
                 {"name": "language", "kind": "language",
                  "arch": {"vocab_size": VOCAB, "hidden_size": HIDDEN,
                           "num_layers": LAYERS, "num_heads": HEADS,
                           "num_query_groups": 2, "ffn_hidden_size": FFN},
                  "parallel": lang_par,
                  "init": {"from": language_init, "format": init_format}}],
             "data": {"source": "jsonl", "path": data}}
    if recipe:
        encoder, language, train = recipe
        model["modules"][0].update(encoder)
        model["modules"][1].update(language)
        model["train"] = train
    with open(path, "w") as f:
        json.dump(model, f, indent=1)


def tower_checks(name, lm, tower, batch, keys):
    """The twin's own sanity: each of `keys` moves the loss."""
    failures = []
    with torch.no_grad():
        want = vlm_loss(lm, tower, batch).item()
        for key in keys:
            saved = tower.tensors[key]
            tower.tensors[key] = saved.flip(0)
            other = vlm_loss(lm, tower, batch).item()
            tower.tensors[key] = saved
            if rel(other, want) < 10 * TOL:
                print(f"FAIL twin {name}: {key} barely moves the loss "
                      f"(rel {rel(other, want):.2e})")
                failures.append(f"{name}: {key} barely moves the loss")
    return want, failures


def run_llava(bin_dir, work):
    """One LLaVA folder starts both modules; mimo's first loss against the
    twin's in three layouts."""
    lm = Twin(dict(groups=2, theta=10000.0, eps=1e-5, scaling=None,
                   hf=dict(model_type="llama", dtype="BF16", shards=2)),
              seed=401)
    tower = HfTower("clip", seed=402, feature_layer=-2, dtype="BF16")
    batch = image_batch(13, GLOBAL_BATCH)
    v = "vision_model."
    want, failures = tower_checks(
        "llava", lm, tower, batch,
        [v + "embeddings.patch_embedding.weight", v + "embeddings.class_embedding",
         v + "embeddings.position_embedding.weight", v + "pre_layrnorm.weight",
         v + "encoder.layers.0.self_attn.out_proj.bias",
         "multi_modal_projector.linear_2.weight"])
    folder = os.path.join(work, "llava-hf")
    write_llava(lm, tower, folder, "BF16", 2)
    since = os.path.join(work, "llava-hf-since-4.52")
    write_llava(lm, tower, since, "BF16", 2, layout="since-4.52")
    data = os.path.join(work, "llava.jsonl")
    write_images(data, batch)
    for name, enc_par, lang_par, world in LAYOUTS:
        path = os.path.join(work, f"llava-{name}.json")
        vision_model(path, tower_arch(tower), folder, folder, enc_par,
                     lang_par, world, data)
        first_loss(bin_dir, work, f"llava-{name}", f"llava/{name}", want, path,
                   failures)
    # The layout transformers writes since 4.52, read as well.
    path = os.path.join(work, "llava-since-4.52.json")
    vision_model(path, tower_arch(tower), since, since, {}, {"rank_offset": 1},
                 2, data)
    first_loss(bin_dir, work, "llava-since-4.52", "llava/since-4.52", want,
               path, failures)
    # Several images a sample ("items"): each image its own sequence in the
    # tower (its class token, positions from 0, attention within it).
    multi = multi_image_batch(15, GLOBAL_BATCH)
    with torch.no_grad():
        want_multi = vlm_loss(lm, tower, multi).item()
    data_multi = os.path.join(work, "llava-multi.jsonl")
    write_images(data_multi, multi)
    for name, enc_par, lang_par, world in LAYOUTS[:2]:
        path = os.path.join(work, f"llava-multi-{name}.json")
        vision_model(path, tower_arch(tower), folder, folder, enc_par,
                     lang_par, world, data_multi)
        first_loss(bin_dir, work, f"llava-multi-{name}",
                   f"llava/two-images/{name}", want_multi, path, failures)
    failures += llava_export(bin_dir, work, lm, tower, folder)
    return failures


def llava_export(bin_dir, work, lm, tower, folder):
    """2 steps from the LLaVA folder, then --export-hf: one LLaVA folder
    whose config the twin's agrees with; the twin on its tensors gives
    mimo's step-2 loss, and mimo started again from it the twin's first
    loss."""
    failures = []
    batch = image_batch(14, 2 * GLOBAL_BATCH)
    data = os.path.join(work, "llava-export.jsonl")
    write_images(data, batch)
    path = os.path.join(work, "llava-export.json")
    vision_model(path, tower_arch(tower), folder, folder, {},
                 {"rank_offset": 1}, 2, data)
    save, out = os.path.join(work, "llava-save"), os.path.join(work, "llava-out")
    try:
        lines = run_mimo(bin_dir, work, "llava-export", path, 2, save=save,
                         export=out)
        config = json.load(open(os.path.join(out, "config.json")))
        expect = {"model_type": "llava", "image_token_index": IMAGE_ID,
                  "vision_feature_layer": tower.feature_layer,
                  "vision_feature_select_strategy": "default",
                  "projector_hidden_act": tower.projector_act,
                  "image_seq_length": E_GRID}
        wrong = {k: (config.get(k), x) for k, x in expect.items()
                 if config.get(k) != x}
        for part, keys in (("text_config", {"model_type": "llama",
                                            "hidden_size": HIDDEN,
                                            "num_hidden_layers": LAYERS}),
                           ("vision_config", {"model_type": "clip_vision_model",
                                              "hidden_size": E_H,
                                              "image_size": E_IMAGE,
                                              "patch_size": 2})):
            wrong.update({f"{part}/{k}": (config[part].get(k), x)
                          for k, x in keys.items() if config[part].get(k) != x})
        if wrong:
            raise RunError(f"llava-out/config.json: (found, expected) {wrong}")
        vision, projector, body, head = llava_names("before-4.52")
        tensors = read_folder(out)
        exported = HfTower("clip", seed=402, feature_layer=tower.feature_layer,
                           dtype="BF16")
        again_lm = Twin(dict(lm.cfg), seed=0)
        from twin_files import hf_name
        for n in again_lm.params:
            name = hf_name(n)
            name = body + name[len("model."):] if name.startswith("model.") \
                else head + name
            again_lm.params[n] = torch.from_numpy(tensors.pop(name))
        for n, a in tensors.items():
            if n.startswith(projector):
                key = "multi_modal_projector." + n[len(projector):]
            elif n.startswith(vision):
                key = n[len(vision):]
            else:
                raise RunError(f"llava-out: tensor {n} is no part of LLaVA's")
            if key not in exported.tensors:
                raise RunError(f"llava-out: tensor {n} is not the twin's")
            exported.tensors[key] = torch.from_numpy(a)
        with torch.no_grad():
            second = vlm_loss(again_lm, exported, batch[GLOBAL_BATCH:]).item()
            first = vlm_loss(again_lm, exported, batch[:GLOBAL_BATCH]).item()
        compare("llava/export", second, lines[1]["loss"], failures)
        again = os.path.join(work, "llava-again.json")
        vision_model(again, tower_arch(tower), out, out, {}, {"rank_offset": 1},
                     2, data)
        got = run_mimo(bin_dir, work, "llava-again", again, 1)[0]["loss"]
        compare("llava/re-import", first, got, failures)
    except (RunError, subprocess.TimeoutExpired, OSError, ValueError,
            KeyError) as e:
        print(f"FAIL llava/export: {e}")
        failures.append("llava/export")
    return failures


def run_siglip(bin_dir, work):
    """A SigLIP folder (with a projector) and a Llama folder: mimo's first
    loss in two layouts; then 2 steps, --export-hf, and the twin on the
    export."""
    cfg = dict(groups=2, theta=10000.0, eps=1e-5, scaling=None,
               hf=dict(model_type="llama", dtype="F32", shards=1))
    lm = Twin(cfg, seed=501)
    tower = HfTower("siglip", seed=502, feature_layer=-1, final_norm=True)
    batch = image_batch(17, 2 * GLOBAL_BATCH)
    v = "vision_model."
    want, failures = tower_checks(
        "siglip", lm, tower, batch[:GLOBAL_BATCH],
        [v + "embeddings.patch_embedding.bias", v + "post_layernorm.weight",
         v + "encoder.layers.1.mlp.fc2.bias"])
    tower_dir, lm_dir = os.path.join(work, "siglip-hf"), os.path.join(work, "siglip-lm")
    write_tower(tower, tower_dir)
    write_hf(lm, lm_dir)
    data = os.path.join(work, "siglip.jsonl")
    write_images(data, batch)
    layouts = [("dp2+tp2", {"dp": 2}, {"tp": 2, "rank_offset": 2}, 4),
               ("colocated-tp2pp2", {"tp": 2, "dp": 2}, {"tp": 2, "pp": 2}, 4)]
    for name, enc_par, lang_par, world in layouts:
        path = os.path.join(work, f"siglip-{name}.json")
        vision_model(path, tower_arch(tower), tower_dir, lm_dir, enc_par,
                     lang_par, world, data)
        first_loss(bin_dir, work, f"siglip-{name}", f"siglip/{name}", want, path,
                   failures)
    # --export-hf after 2 steps, read back by the twin.
    path = os.path.join(work, "siglip-export.json")
    vision_model(path, tower_arch(tower), tower_dir, lm_dir, {},
                 {"rank_offset": 1}, 2, data)
    save, out = os.path.join(work, "siglip-save"), os.path.join(work, "siglip-out")
    try:
        # A tower with a final norm is not LLaVA's: a folder per module.
        lines = run_mimo(bin_dir, work, "siglip-export", path, 2, save=save,
                         export=out, per_module=True)
        config = json.load(open(os.path.join(out, "images", "config.json")))
        expect = {"model_type": "siglip_vision_model", "hidden_size": E_H,
                  "num_hidden_layers": E_LAYERS, "patch_size": 2,
                  "num_channels": E_CHANNELS, "image_size": E_IMAGE,
                  "hidden_act": "gelu_pytorch_tanh"}
        wrong = {k: (config.get(k), x) for k, x in expect.items()
                 if config.get(k) != x}
        if wrong:
            raise RunError(f"images/config.json: (found, expected) {wrong}")
        exported = HfTower("siglip", seed=0, feature_layer=-1, final_norm=True)
        tensors = read_folder(os.path.join(out, "images"))
        mine = {n for n in exported.tensors if ".head." not in n}
        if set(tensors) != mine:
            raise RunError(f"images: tensors {sorted(set(tensors) ^ mine)} "
                           "differ from the twin's")
        exported.tensors.update({n: torch.from_numpy(a) for n, a in tensors.items()})
        again_lm = Twin(cfg, seed=0)
        lm_tensors = read_folder(os.path.join(out, "language"))
        from twin_files import hf_name
        for n in again_lm.params:
            again_lm.params[n] = torch.from_numpy(lm_tensors[hf_name(n)])
        with torch.no_grad():
            second = vlm_loss(again_lm, exported, batch[GLOBAL_BATCH:]).item()
            first = vlm_loss(again_lm, exported, batch[:GLOBAL_BATCH]).item()
        compare("siglip/export", second, lines[1]["loss"], failures)
        again = os.path.join(work, "siglip-again.json")
        vision_model(again, tower_arch(tower), os.path.join(out, "images"),
                     os.path.join(out, "language"), {}, {"rank_offset": 1}, 2,
                     data)
        got = run_mimo(bin_dir, work, "siglip-again", again, 1)[0]["loss"]
        compare("siglip/re-import", first, got, failures)
    except (RunError, subprocess.TimeoutExpired, OSError, ValueError,
            KeyError) as e:
        print(f"FAIL siglip/export: {e}")
        failures.append("siglip/export")
    return failures


STAGE1_STEPS = 3
STAGE1_TRAIN = {"lr": 0.01, "betas": [0.9, 0.95], "eps": 1e-8,
                "weight_decay": 0.1, "clip_grad": 0.05,
                "lr_schedule": {"warmup_steps": 1, "decay": "cosine",
                                "decay_steps": 2, "min_lr": 0.001}}
# Every part of the CLIP tower but the projector (LLaVA's freeze_vit); the
# twin trains only the tensors named multi_modal_projector.*.
STAGE1_FREEZE = "encoder_body"
PROJECTOR = "multi_modal_projector."


def run_stage1(bin_dir, work):
    """LLaVA's stage 1: only the projector trains."""
    lm = Twin(dict(groups=2, theta=10000.0, eps=1e-5, scaling=None,
                   hf=dict(model_type="llama", dtype="BF16", shards=1)),
              seed=601)
    tower = HfTower("clip", seed=602, feature_layer=-2, dtype="BF16")
    batch = image_batch(19, STAGE1_STEPS * GLOBAL_BATCH)
    folder = os.path.join(work, "stage1-hf")
    write_llava(lm, tower, folder, "BF16", 1)
    data = os.path.join(work, "stage1.jsonl")
    write_images(data, batch)
    trainable = [n for n in tower.tensors if n.startswith(PROJECTOR)]
    if len(trainable) != 4:
        return [f"stage1: the twin's projector has {trainable}"]
    for n in trainable:
        tower.tensors[n].requires_grad_(True)
    adamw = AdamW(tower.tensors, trainable, STAGE1_TRAIN, lambda n: 0.5)
    want = []
    for k in range(STAGE1_STEPS):
        loss = vlm_loss(lm, tower, batch[k * GLOBAL_BATCH:(k + 1) * GLOBAL_BATCH])
        loss.backward()
        want.append((loss.item(), adamw.step()))
    # Clipping at 0.05 must bite (the norms are about 3), or lr_mult and
    # the clip would trade places unseen.
    failures = []
    if not all(norm > STAGE1_TRAIN["clip_grad"] for _, norm in want):
        failures.append(f"stage1: the twin's norms {[n for _, n in want]} "
                        "do not reach the clip")
    recipe = ({"freeze": STAGE1_FREEZE, "lr_mult": 0.5}, {"freeze": True},
              STAGE1_TRAIN)
    for name, enc_par, lang_par, world in LAYOUTS[:2]:
        path = os.path.join(work, f"stage1-{name}.json")
        vision_model(path, tower_arch(tower), folder, folder, enc_par,
                     lang_par, world, data, recipe=recipe)
        try:
            lines = run_mimo(bin_dir, work, f"stage1-{name}", path, STAGE1_STEPS)
        except (RunError, subprocess.TimeoutExpired, OSError, ValueError) as e:
            print(f"FAIL stage1/{name}: {e}")
            failures.append(f"stage1/{name}")
            continue
        compare_steps(f"stage1/{name}", want, lines, failures)
    return failures
