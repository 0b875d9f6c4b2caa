#!/usr/bin/env python3
"""tools/mimo-prep end to end (docs/data.md, "Preparing image
conversations"), checked with no code of mimo-prep's:

1. the README's quick start in a scratch folder: examples/prep/make-sample-
   data.py, mimo-prep, mimoc compile, mimo-run: the two broken records are
   skipped and named, the model trains (the loss falls by half); then its
   multi-image, variable-size one with the tokenizer's chat template;
2. the files, read with this script's own reader: each image's rows are
   torch's unfold of the resized, normalised pixels (the (channel, row, col)
   order of a ViT's patch convolution), the image run is the encoder's
   special token once per row, and the mask keeps exactly each answer and
   its EOS (decoded back to the answer's text by sentencepiece);
3. byte-level BPE on a hand-made tokenizer.json: ids worked out by hand,
   added tokens, a Split pre-tokenizer;
4. bad input: exit 1 with the file and the fix;
5. hostile input, every read bounded: decompression bombs and damaged
   PNGs, FIFOs, sockets and folders named as images, image paths that lead
   outside --images, JSON nested 100000 deep, a regex that backtracks
   without end, bad added tokens, tokenizer.json and model.json files
   mutated at random (a one-line error or a run, never a traceback),
   --max-skipped, missing Python packages, progress lines in a log.

usage: mimo_prep_check.py BUILD_DIR SOURCE_DIR
"""
import contextlib
import importlib.machinery
import importlib.util
import io
import json
import os
import pty
import random
import shutil
import socket
import struct
import subprocess
import sys
import tempfile
import zlib

import numpy as np
import sentencepiece
import torch
from PIL import Image

failures = []


def check(ok, what, detail=""):
    """One line; `detail` (what a command printed) only when it fails."""
    print(f"{'ok  ' if ok else 'FAIL'} {what}")
    if not ok:
        if detail:
            print(detail)
        failures.append(what)


def run(cmd, timeout=600, **kw):
    """The command's result; one that runs past `timeout` (a hang) has
    returncode None."""
    try:
        return subprocess.run(cmd, capture_output=True, text=True, timeout=timeout, **kw)
    except subprocess.TimeoutExpired:
        return subprocess.CompletedProcess(cmd, None, "", f"(hung: killed after {timeout} s)")


def refused(r, *words):
    """Exit 1 with no traceback, the last line of stderr mimo-prep's error
    naming each of `words`."""
    last = (r.stderr.strip().splitlines() or [""])[-1]
    return (r.returncode == 1 and "Traceback" not in r.stderr
            and last.startswith("mimo-prep: error: ") and all(w in last for w in words))


def fresh(work):
    """A dataset PREFIX no run has written to."""
    fresh.n = getattr(fresh, "n", 0) + 1
    return os.path.join(work, "out", str(fresh.n), "x")


def written(prefix):
    """The files of a dataset PREFIX that exist, finished or partial."""
    d, base = os.path.split(prefix)
    return [f for f in os.listdir(d) if f.startswith(os.path.basename(base) + ".")] \
        if os.path.isdir(d) else []


def read_dataset(prefix, encoder, dim):
    idx = open(prefix + ".idx", "rb").read()
    assert idx[:9] == b"MMIDIDX\0\0"
    version, code, n, docs = struct.unpack("<QBQQ", idx[9:34])
    lengths = np.frombuffer(idx, "<i4", n, 34)
    pointers = np.frombuffer(idx, "<i8", n, 34 + 4 * n)
    dtype = {8: "<u2", 4: "<i4"}[code]
    bin_ = open(prefix + ".bin", "rb").read()
    ids = [np.frombuffer(bin_, dtype, int(l), int(p)).tolist()
           for l, p in zip(lengths, pointers)]
    mask_file = open(prefix + ".mask", "rb").read()
    assert mask_file[:8] == b"MIMOMASK"
    (tokens,) = struct.unpack("<Q", mask_file[16:24])
    mask = np.frombuffer(mask_file, "u1", tokens, 24)
    masks, at = [], 0
    for s in ids:
        masks.append(mask[at:at + len(s)].tolist())
        at += len(s)
    feat = open(f"{prefix}.{encoder}.feat", "rb").read()
    assert feat[:8] == b"MIMOFEAT"
    _, kind, _, fdim, seqs = struct.unpack("<QIIQQ", feat[8:40])
    assert kind == 1 and fdim == dim and seqs == n
    offsets = np.frombuffer(feat, "<u8", n + 1, 40)
    values = np.frombuffer(feat, "<f4", int(offsets[-1]) * dim, 40 + 8 * (n + 1))
    rows = [values[int(offsets[i]) * dim:int(offsets[i + 1]) * dim].reshape(-1, dim)
            for i in range(n)]
    return ids, masks, rows


def trains(build, work, model, tag, what):
    """mimoc compile MODEL, then 20 steps of mimo-run: the loss halves."""
    plan = os.path.join(work, tag + ".plan.json")
    metrics = os.path.join(work, tag + ".jsonl")
    r = run([os.path.join(build, "bin", "mimoc"), "compile", "-q", model, "-o", plan])
    check(r.returncode == 0, f"mimoc compile ({tag})", r.stderr[-2000:])
    r = run([os.path.join(build, "bin", "mimo-run"), plan, "--steps", "20",
             "--metrics", metrics])
    check(r.returncode == 0, f"mimo-run ({tag})", r.stderr[-2000:])
    if r.returncode == 0:
        losses = [json.loads(l)["loss"] for l in open(metrics) if '"loss"' in l]
        check(len(losses) == 20 and losses[-1] < losses[0] / 2,
              f"{what}: loss {losses[0]:.3f} -> {losses[-1]:.3f}")


def quick_start(build, source, work):
    prep = os.path.join(work, "prep")
    shutil.copytree(os.path.join(source, "examples", "prep"), prep,
                    ignore=shutil.ignore_patterns("sample", "data"))
    py, tool = sys.executable, os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    r = run([py, os.path.join(prep, "make-sample-data.py")])
    check(r.returncode == 0, "make-sample-data.py", r.stderr[-2000:])
    sample = os.path.join(prep, "sample")
    r = run([py, tool, "--conversations", os.path.join(sample, "conversations.json"),
             "--images", sample, "--tokenizer", os.path.join(sample, "tokenizer.model"),
             "--model", os.path.join(prep, "vlm-prepared.json"),
             "-o", os.path.join(prep, "data", "train")])
    check(r.returncode == 0 and "wrote 65 samples (64 images and frames" in r.stdout,
          "mimo-prep writes the 65 usable records", r.stdout + r.stderr[-2000:])
    check("skipped 2 of 67 records: 1 no image file, 1 <image> placeholders that do "
          "not match the images" in r.stdout
          and 'id "missing" (record 65): no image file' in r.stdout
          and 'id "two" (record 66): <image> placeholders that do not match the '
          'images: 2 <image> for 1 image(s)' in r.stdout,
          "the two broken records are skipped, counted and named by their ids")
    check("mimo-prep: 67/67 records" in r.stderr and "\r" not in r.stderr,
          "progress in plain lines when stderr is not a terminal", r.stderr[-2000:])
    trains(build, work, os.path.join(prep, "vlm-prepared.json"), "prepared",
           "trains on the prepared data")
    return prep, sample


def quick_start_multi(build, source, work, prep, sample):
    """The README's second quick start: conversations about one or two
    images of six sizes each, several turns, rendered by the tokenizer's
    own chat template (--template hf) with each image kept in its shape
    (--resize native, at most 256 pixels: 16 patches, the encoder's learned
    positions). Every image becomes its own item of 16 rows or fewer, the
    counts vary with the shapes, the mask keeps each answer and its </s>,
    and the model trains (the loss falls by half)."""
    py, tool = sys.executable, os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    model_path = os.path.join(prep, "vlm-prepared-multi.json")
    prefix = os.path.join(prep, "data", "train-multi")
    r = run([py, tool, "--conversations", os.path.join(sample, "conversations-multi.json"),
             "--images", sample, "--tokenizer", os.path.join(sample, "tokenizer.model"),
             "--template", "hf", "--resize", "native", "--max-image-pixels", "256",
             "--model", model_path, "-o", prefix])
    check(r.returncode == 0 and "wrote 32 samples (48 images and frames" in r.stdout,
          "mimo-prep writes the 32 multi-image records", r.stdout + r.stderr[-2000:])
    if r.returncode != 0:
        return
    model = json.load(open(model_path))
    enc = model["modules"][0]
    ids, masks, rows = read_dataset(prefix, "images", enc["arch"]["feature_dim"])
    starts = read_items(prefix, "images", sum(len(x) for x in rows))
    records = json.load(open(os.path.join(sample, "conversations-multi.json")))
    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(os.path.join(sample, "tokenizer.model"))
    counts, at, items_ok, masks_ok = [], 0, True, True
    for i, record in enumerate(records):
        flags = starts[at:at + len(rows[i])]
        at += len(rows[i])
        begins = [k for k, f in enumerate(flags) if f] + [len(flags)]
        sizes = [b - a for a, b in zip(begins, begins[1:])]
        counts += sizes
        items_ok &= len(sizes) == len(record["images"]) and \
            ids[i].count(enc["special_token_id"]) == len(rows[i])
        targets = [t for t, k in zip(ids[i], masks[i]) if k]
        said = sp.DecodeIds([t for t in targets if t != sp.eos_id()])
        answers = [t["value"] for t in record["conversations"] if t["from"] == "gpt"]
        masks_ok &= targets.count(sp.eos_id()) == len(answers) and \
            all(a in said for a in answers) and "USER" not in said
    check(items_ok, "every image is its own item, one special token a row")
    check(max(counts) <= 16 and len(set(counts)) >= 3,
          f"native sizes: {sorted(set(counts))} patches an image, at most 16")
    check(masks_ok, "the template's mask keeps each answer and its </s>, no question")
    trains(build, work, model_path, "prepared-multi",
           "trains on several images a sample")


def files_check(prep, sample):
    model = json.load(open(os.path.join(prep, "vlm-prepared.json")))
    enc = model["modules"][0]
    dim, special = enc["arch"]["feature_dim"], enc["special_token_id"]
    ids, masks, rows = read_dataset(os.path.join(prep, "data", "train"), "images", dim)
    records = json.load(open(os.path.join(sample, "conversations.json")))
    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(os.path.join(sample, "tokenizer.model"))
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073])[:, None, None]
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711])[:, None, None]
    worst, runs_ok, masks_ok = 0.0, True, True
    for i in range(64):
        im = Image.open(os.path.join(sample, records[i]["image"])).convert("RGB")
        im = im.resize((16, 16), Image.BICUBIC)  # 4 x 4 patches of 4 pixels
        x = (torch.from_numpy(np.asarray(im, np.float32) / 255).permute(2, 0, 1)
             - mean) / std
        want = torch.nn.functional.unfold(x[None], 4, stride=4)[0].T  # [16, 48]
        worst = max(worst, float((torch.from_numpy(rows[i].copy()) - want).abs().max()))
        s, m = ids[i], masks[i]
        runs_ok &= s.count(special) == 16 and rows[i].shape == (16, dim)
        targets = [t for t, k in zip(s, m) if k]
        masks_ok &= targets[-1] == sp.eos_id() and \
            sp.DecodeIds(targets[:-1]) == records[i]["conversations"][1]["value"]
    check(worst < 1e-5, f"patch rows are torch's unfold of the pixels (max diff {worst:.1e})")
    check(runs_ok, "each image is 16 special tokens and 16 rows")
    check(masks_ok, "the mask keeps exactly each answer and its EOS")
    check(rows[64].shape[0] == 0 and special not in ids[64],
          "a text-only record has no rows")


def bpe_check(source, work):
    sys.path.insert(0, os.path.join(source, "tools", "mimo-prep"))
    import prep_tokenizers
    vocab = {chr(b): b for b in range(33, 127)}
    vocab["Ġ"] = 32  # GPT-2's printable stand-in for the space byte
    merges = ["h e", "l l", "he ll", "hell o", "Ġ hello", "3 4", "1 2", "12 3", "4 5"]
    for i, m in enumerate(merges):
        vocab[m.replace(" ", "")] = 200 + i
    doc = {"model": {"type": "BPE", "vocab": vocab, "merges": merges},
           "added_tokens": [{"id": 300, "content": "<|eot|>"}],
           "pre_tokenizer": {"type": "ByteLevel", "add_prefix_space": False,
                             "use_regex": True}}
    path = os.path.join(work, "tokenizer.json")
    json.dump(doc, open(path, "w"))
    tok = prep_tokenizers.load(path)
    got = tok.encode("hello hello<|eot|>hi!")
    check(got == [203, 204, 300, ord("h"), ord("i"), ord("!")],
          f"byte-level BPE: hello, Ġhello, an added token, bytes ({got})")
    # GPT-2's regex keeps "12345" whole: 3 4 merges first -> 12, 34, 5.
    check(tok.encode("12345") == [206, 205, ord("5")],
          f"BPE merges by rank ({tok.encode('12345')})")
    doc["pre_tokenizer"] = {"type": "Sequence", "pretokenizers": [
        {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"}, "behavior": "Isolated"},
        {"type": "ByteLevel", "add_prefix_space": False, "use_regex": False}]}
    json.dump(doc, open(path, "w"))
    tok = prep_tokenizers.load(path)
    check(tok.encode("12345") == [207, 208],
          f"a Split pre-tokenizer (Llama 3's digit runs) cuts 123|45 ({tok.encode('12345')})")


def read_items(prefix, encoder, rows):
    """The item start bytes of PREFIX.<encoder>.items."""
    data = open(f"{prefix}.{encoder}.items", "rb").read()
    assert data[:8] == b"MIMOITEM", data[:8]
    version, count = struct.unpack("<QQ", data[8:24])
    assert version == 1 and count == rows and len(data) == 24 + rows, (count, rows)
    return list(data[24:])


def clip_rows(path, size, crop=None):
    """torch's unfold of an image resized to `size` (w, h) (and cut to
    `crop`, (x, y, w, h)), CLIP-normalised: [rows, 48] of 4 x 4 patches,
    row-major."""
    mean = torch.tensor([0.48145466, 0.4578275, 0.40821073])[:, None, None]
    std = torch.tensor([0.26862954, 0.26130258, 0.27577711])[:, None, None]
    im = Image.open(path).convert("RGB").resize(size, Image.BICUBIC)
    x = (torch.from_numpy(np.asarray(im, np.float32) / 255).permute(2, 0, 1) - mean) / std
    if crop:
        x = x[:, crop[1]:crop[1] + crop[3], crop[0]:crop[0] + crop[2]]
    return torch.nn.functional.unfold(x[None], 4, stride=4)[0].T


def several_images(build, source, work, prep, sample):
    """Several images a record ("images", or "image" a list), each at its
    own size (--resize native: aspect kept, sides multiples of the patch,
    at most the encoder's 16 x 16 pixels, a smaller image not enlarged),
    and a video folder's frames (--frames): rows in the placeholders'
    order (images without <image> at the first question's start, after a
    system turn), one item each in PREFIX.images.items; --max-image-pixels;
    --resize tiles; a model folder's config.json; mimo-run trains on it."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    folder = os.path.join(work, "multi")
    os.makedirs(os.path.join(folder, "clip"), exist_ok=True)
    g = np.random.default_rng(5)
    def png(path, w, h):
        Image.fromarray(g.integers(0, 256, (h, w, 3), dtype=np.uint8)).save(path)
    png(os.path.join(folder, "wide.png"), 32, 16)
    png(os.path.join(folder, "square.png"), 16, 16)
    png(os.path.join(folder, "small.png"), 8, 12)
    for k in range(5):
        png(os.path.join(folder, "clip", f"frame-{k}.png"), 24, 16)
    answer = {"from": "gpt", "value": "Two things."}
    records = [
        {"id": "pair", "images": ["wide.png", "square.png"], "conversations": [
            {"from": "human", "value": "<image> or <image>?"}, answer]},
        {"id": "list", "image": ["square.png", "wide.png"], "conversations": [
            {"from": "human", "value": "Which?"}, answer]},
        {"id": "video", "video": "clip", "conversations": [
            {"from": "human", "value": "What happens in <video>?"}, answer]},
        {"id": "short", "images": ["wide.png"], "conversations": [
            {"from": "human", "value": "<image> <image>?"}, answer]},
        {"id": "small", "images": ["small.png", "wide.png"], "conversations": [
            {"from": "system", "value": "Be short."},
            {"from": "human", "value": "Which?"}, answer]},
    ] * 3
    conv = os.path.join(folder, "conversations.json")
    json.dump(records, open(conv, "w"))
    out = os.path.join(folder, "data", "train")
    model = json.load(open(os.path.join(prep, "vlm-prepared.json")))
    model["data"]["path"] = out
    model["batch"]["seq_length"] = 128  # room for two frames and the text
    json.dump(model, open(os.path.join(folder, "model.json"), "w"))
    r = run(prep_cmd(tool, conv, folder, os.path.join(sample, "tokenizer.model"),
                     os.path.join(folder, "model.json"), out,
                     "--resize", "native", "--frames", "2", "--max-skipped", "0.3"))
    check(r.returncode == 0 and "wrote 12 samples" in r.stdout and
          "skipped 3 of 15 records: 3 <image> placeholders that do not match the "
          "images" in r.stdout and 'id "short" (record 3): <image> placeholders '
          "that do not match the images: 2 <image> for 1 image(s)" in r.stdout,
          "several images and a video: 12 samples, the mismatched record skipped",
          r.stdout + r.stderr[-2000:])
    if r.returncode != 0:
        return
    ids, masks, rows = read_dataset(out, "images", 48)
    starts = read_items(out, "images", sum(len(x) for x in rows))
    wide = clip_rows(os.path.join(folder, "wide.png"), (20, 8))  # 5 x 2 patches
    square = clip_rows(os.path.join(folder, "square.png"), (16, 16))
    small = clip_rows(os.path.join(folder, "small.png"), (8, 12))  # not enlarged
    frames = [clip_rows(os.path.join(folder, "clip", f"frame-{k}.png"), (16, 12))
              for k in (1, 3)]  # 2 of 5, evenly; 24 x 16 at most 256 pixels
    at = 0
    for name, i, want in (("pair", 0, [wide, square]), ("list", 1, [square, wide]),
                          ("video", 2, frames), ("small", 3, [small, wide])):
        got = torch.from_numpy(rows[i].copy())
        whole = torch.cat(want)
        n = [len(w) for w in want]
        check(got.shape == whole.shape and float((got - whole).abs().max()) < 1e-5
              and ids[i].count(96) == sum(n),
              f"{name}: rows of each image at its own size, in order ({n})")
        mine = starts[at:at + sum(n)]
        want_starts = sum(([1] + [0] * (k - 1) for k in n), [])
        check(mine == want_starts, f"{name}: one item per image or frame in .items")
        at += sum(n)
    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(os.path.join(sample, "tokenizer.model"))
    first = ids[3].index(96)
    check(ids[3][:first] == [sp.bos_id()] + sp.EncodeAsIds("Be short.\n")
          + sp.EncodeAsIds("USER: ") and ids[3][first:first + 16] == [96] * 16,
          "images without <image> go to the first question's start, after the "
          "system turn")
    check(starts.count(1) == 12 * 2 and set(starts) == {0, 1},
          "the 12 samples' 24 images and frames are 24 items", str(starts))
    # Tiles: a thumbnail, then the 32 x 16 image as 2 x 1 tiles of 16.
    tiles_out = fresh(work)
    conv_tiles = os.path.join(folder, "tiles.json")
    json.dump([{"id": "tiles", "image": "wide.png", "conversations": [
        {"from": "human", "value": "<image>"}, answer]}], open(conv_tiles, "w"))
    r = run(prep_cmd(tool, conv_tiles, folder, os.path.join(sample, "tokenizer.model"),
                     os.path.join(folder, "model.json"), tiles_out,
                     "--resize", "tiles", "--max-tiles", "4"))
    if r.returncode == 0:
        ids, _, rows = read_dataset(tiles_out, "images", 48)
        starts = read_items(tiles_out, "images", len(rows[0]))
        wide_png = os.path.join(folder, "wide.png")
        want = torch.cat([clip_rows(wide_png, (16, 16)),
                          clip_rows(wide_png, (32, 16), (0, 0, 16, 16)),
                          clip_rows(wide_png, (32, 16), (16, 0, 16, 16))])
        got = torch.from_numpy(rows[0].copy())
        ok = got.shape == want.shape and float((got - want).abs().max()) < 1e-5
        ok &= starts == ([1] + [0] * 15) * 3 and ids[0].count(96) == 48
    else:
        ok = False
    check(ok, "--resize tiles: a thumbnail and 2 x 1 tiles, three items",
          r.stdout + r.stderr[-2000:])
    # A model folder's config.json beside the tokenizer: another vocab_size
    # is one line naming both files, exit 1.
    hf = os.path.join(folder, "hf")
    os.makedirs(hf, exist_ok=True)
    shutil.copy(os.path.join(sample, "tokenizer.model"), hf)
    json.dump({"model_type": "llama", "vocab_size": 32000}, open(os.path.join(hf, "config.json"), "w"))
    r = run(prep_cmd(tool, conv, folder, os.path.join(hf, "tokenizer.model"),
                     os.path.join(folder, "model.json"), fresh(work)))
    check(refused(r, os.path.join(hf, "config.json") + ": vocab_size 32000, but",
                  os.path.join(folder, "model.json") + " says 128")
          and len(r.stderr.strip().splitlines()) == 1,
          "a tokenizer from a model of another vocab_size: exit 1, one line naming "
          "both files", r.stdout + r.stderr[-2000:])
    json.dump({"text_config": {"vocab_size": 32000}},
              open(os.path.join(hf, "config.json"), "w"))
    r = run(prep_cmd(tool, conv, folder, os.path.join(hf, "tokenizer.model"),
                     os.path.join(folder, "model.json"), fresh(work)))
    check(refused(r, "config.json: vocab_size 32000, but", "says 128"),
          "a multimodal config.json's text_config vocab_size is checked too",
          r.stdout + r.stderr[-2000:])
    json.dump({"vocab_size": 128, "bos_token_id": 5, "eos_token_id": [2, 7]},
              open(os.path.join(hf, "config.json"), "w"))
    r = run(prep_cmd(tool, conv_tiles, folder, os.path.join(hf, "tokenizer.model"),
                     os.path.join(folder, "model.json"), fresh(work)))
    warned = [l for l in r.stderr.splitlines() if "warning" in l]
    check(r.returncode == 0 and len(warned) == 1 and "bos_token_id 5, but the "
          "tokenizer's is 1" in warned[0], "a config.json's other bos_token_id is "
          "warned about in one line (an eos_token_id list holding the EOS is not)",
          r.stdout + r.stderr[-2000:])
    # --max-image-pixels: 128 pixels make the 32 x 16 image 16 x 8 (4 x 2
    # patches); more patches than the encoder's positions, or less than one
    # patch, is one line.
    out = fresh(work)
    r = run(prep_cmd(tool, conv_tiles, folder, os.path.join(sample, "tokenizer.model"),
                     os.path.join(folder, "model.json"), out,
                     "--resize", "native", "--max-image-pixels", "128"))
    if r.returncode == 0:
        ids, _, rows = read_dataset(out, "images", 48)
        want = clip_rows(os.path.join(folder, "wide.png"), (16, 8))
        got = torch.from_numpy(rows[0].copy())
        ok = (got.shape == want.shape and float((got - want).abs().max()) < 1e-5
              and read_items(out, "images", 8) == [1] + [0] * 7 and ids[0].count(96) == 8)
    else:
        ok = False
    check(ok, "--max-image-pixels 128: 32 x 16 pixels become 16 x 8, 8 rows",
          r.stdout + r.stderr[-2000:])
    for pixels, words in (("1024", ("--max-image-pixels 1024", "64 patches",
                                    "16 learned positions", "at most 256")),
                          ("15", ("--max-image-pixels 15", "less than one patch"))):
        out = fresh(work)
        r = run(prep_cmd(tool, conv_tiles, folder, os.path.join(sample, "tokenizer.model"),
                         os.path.join(folder, "model.json"), out,
                         "--resize", "native", "--max-image-pixels", pixels))
        check(refused(r, *words) and len(r.stderr.strip().splitlines()) == 1
              and not written(out), f"--max-image-pixels {pixels} is refused in one line",
              r.stderr[-2000:])
    plan = os.path.join(folder, "plan.json")
    r = run([os.path.join(build, "bin", "mimoc"), "compile", "-q",
             os.path.join(folder, "model.json"), "-o", plan])
    r = r if r.returncode else run([os.path.join(build, "bin", "mimo-run"), plan,
                                    "--steps", "2"])
    check(r.returncode == 0, "mimo-run trains on several images a sample",
          r.stderr[-2000:])


def bad_input(source, work, prep, sample):
    py, tool = sys.executable, os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    base = ["--conversations", os.path.join(sample, "conversations.json"),
            "--images", sample, "--model", os.path.join(prep, "vlm-prepared.json"),
            "-o", os.path.join(work, "bad", "x")]
    wordpiece = os.path.join(work, "wordpiece.json")
    json.dump({"model": {"type": "WordPiece"}}, open(wordpiece, "w"))
    r = run([py, tool, "--tokenizer", wordpiece] + base)
    check(r.returncode == 1 and "/model/type is 'WordPiece'" in r.stderr,
          "a WordPiece tokenizer.json is refused, naming /model/type")
    model = json.load(open(os.path.join(prep, "vlm-prepared.json")))
    model["modules"][0]["special_token_id"] = 5
    bad_model = os.path.join(work, "bad-model.json")
    json.dump(model, open(bad_model, "w"))
    r = run([py, tool, "--tokenizer", os.path.join(sample, "tokenizer.model"),
             "--conversations", os.path.join(sample, "conversations.json"),
             "--images", sample, "--model", bad_model, "-o", os.path.join(work, "bad", "x")])
    check(r.returncode == 1 and "special_token_id 5 must be at or past the tokenizer's 96"
          in r.stderr, "a special token inside the tokenizer's ids is refused with the fix")
    check(not os.path.exists(os.path.join(work, "bad", "x.bin")), "nothing half-written")


# Hostile input (issue: every input mimo-prep reads is bounded).

def png_bytes(w, h, idat=None, ihdr_crc=None, cut=None):
    """A PNG of w x h RGB pixels, chunk by chunk: a wrong IHDR checksum, or
    cut after `cut` bytes, on request."""
    def chunk(kind, data, crc=None):
        crc = zlib.crc32(kind + data) if crc is None else crc
        return struct.pack(">I", len(data)) + kind + data + struct.pack(">I", crc & 0xFFFFFFFF)
    if idat is None:
        idat = zlib.compress(b"".join(b"\0" + b"\x10\x80\xf0" * w for _ in range(h)))
    data = (b"\x89PNG\r\n\x1a\n"
            + chunk(b"IHDR", struct.pack(">IIBBBBB", w, h, 8, 2, 0, 0, 0), ihdr_crc)
            + chunk(b"IDAT", idat) + chunk(b"IEND", b""))
    return data[:cut] if cut else data


def conversation(rid, image=None, question="What is it?"):
    r = {"id": rid, "conversations": [{"from": "human", "value": "<image>\n" + question},
                                      {"from": "gpt", "value": "It is red."}]}
    if image is None:
        r["conversations"][0]["value"] = question
    else:
        r["image"] = image
    return r


def prep_cmd(tool, conversations, images, tokenizer, model, out, *extra):
    return [sys.executable, tool, "--conversations", conversations, "--images", images,
            "--tokenizer", tokenizer, "--model", model, "-o", out] + list(extra)


def hostile_images(source, work, prep, sample):
    """Bombs and damaged PNGs; FIFOs, sockets, folders and links as images;
    paths that lead outside --images: each record skipped and named."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    root = os.path.join(work, "hostile")
    os.makedirs(os.path.join(root, "images", "folder.png"))
    for i in range(4):
        shutil.copy(os.path.join(sample, "images", f"{i:03d}.png"),
                    os.path.join(root, "images", f"{i:03d}.png"))
    files = {
        "bomb": png_bytes(100000, 100000, idat=zlib.compress(b"\0" * 1000)),
        "twice": png_bytes(100, 100),  # 10000 pixels: more than twice --max-pixels
        "over": png_bytes(50, 50),  # 2500: past --max-pixels, not twice (PIL's warning)
        "crc": png_bytes(32, 32, ihdr_crc=12345),
        "cut": png_bytes(32, 32, cut=60),
        "zlib": png_bytes(32, 32, idat=b"x\x9c" + bytes(range(200))),
    }
    records = [conversation(f"good{i}", f"images/{i:03d}.png") for i in range(4)]
    for name, data in files.items():
        open(os.path.join(root, "images", name + ".png"), "wb").write(data)
        records.append(conversation(name, f"images/{name}.png"))
    conv = os.path.join(work, "hostile-images.json")
    json.dump(records, open(conv, "w"))
    out = fresh(work)
    model = os.path.join(prep, "vlm-prepared.json")
    tokenizer = os.path.join(sample, "tokenizer.model")
    r = run(prep_cmd(tool, conv, root, tokenizer, model, out, "--max-skipped", "1",
                     "--max-pixels", "2000"), timeout=60)
    named = all(f'id "{n}" (record {4 + i}): ' in r.stdout for i, n in enumerate(files))
    check(r.returncode == 0 and "Traceback" not in r.stderr and "wrote 4 samples" in r.stdout
          and named and "skipped 6 of 10 records: 3 an image too large, "
          "3 an unreadable image" in r.stdout,
          "a decompression bomb, images past --max-pixels and damaged PNGs are "
          "skipped and named", r.stdout + r.stderr[-3000:])
    # Not regular files, and paths that lead outside --images.
    os.mkfifo(os.path.join(root, "images", "fifo.png"))
    sock = socket.socket(socket.AF_UNIX)
    sock.bind(os.path.join(root, "images", "sock.png"))
    outside = os.path.join(sample, "images", "005.png")
    os.symlink(outside, os.path.join(root, "images", "out.png"))
    os.symlink("/dev/zero", os.path.join(root, "images", "zero.png"))
    os.symlink("000.png", os.path.join(root, "images", "in.png"))
    rel_out = os.path.relpath(outside, os.path.join(root, "images"))
    bad = {"fifo": ("images/fifo.png", "not a regular file"),
           "socket": ("images/sock.png", "not a regular file"),
           "folder": ("images/folder.png", "not a regular file"),
           "absolute": (outside, "outside --images"),
           "dotdot": ("images/" + rel_out, "outside --images"),
           "link-out": ("images/out.png", "outside --images"),
           "device": ("images/zero.png", "outside --images"),
           "nul": ("images/000.png\0x", "outside --images")}
    records = [conversation("good", "images/001.png"), conversation("in", "images/in.png"),
               conversation("updown", "images/../images/002.png")]
    records += [conversation(n, path) for n, (path, _) in bad.items()]
    json.dump(records, open(conv, "w"))
    r = run(prep_cmd(tool, conv, root, tokenizer, model, out, "--max-skipped", "1"),
            timeout=60)
    sock.close()
    named = all(f'id "{n}" (record {3 + i}): ' in r.stdout and why in r.stdout
                for i, (n, (_, why)) in enumerate(bad.items()))
    check(r.returncode == 0 and "Traceback" not in r.stderr and "wrote 3 samples" in r.stdout
          and named and "skipped 8 of 11 records: 5 an image path outside --images, "
          "3 an image that is not a regular file" in r.stdout,
          "a FIFO, a socket, a folder, absolute paths, .. and links out of --images "
          "are skipped, not read", r.stdout + r.stderr[-3000:])
    check(not any(n in r.stdout for n in ("good", "updown", '"in"')),
          "links and .. that stay inside --images are read")


def hostile_conversations(source, work, prep, sample):
    """Deep JSON, a FIFO as an input, lone surrogates, ids in the messages,
    --max-skipped."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    model = os.path.join(prep, "vlm-prepared.json")
    tokenizer = os.path.join(sample, "tokenizer.model")
    out = fresh(work)
    deep = os.path.join(work, "deep.json")
    open(deep, "w").write("[" * 100000 + "]" * 100000)
    r = run(prep_cmd(tool, deep, sample, tokenizer, model, out), timeout=60)
    check(refused(r, deep, "nested too deeply") and not written(out),
          "a JSON array nested 100000 deep is refused in one line", r.stderr[-2000:])
    lines = [json.dumps(rec) for rec in json.load(
        open(os.path.join(sample, "conversations.json")))[:20]]
    lines.insert(5, "[" * 100000)
    lines.insert(7, json.dumps({"id": "deep", "x": 1})[:-1] + ', "y": ' + "[" * 100000 +
                 "]" * 100000 + "}")
    lines.append(json.dumps(conversation("surrogate", None, "\ud800?")))
    lines.append(json.dumps(conversation("surrogate-path", "images/\ud800.png")))
    lines.append(json.dumps({"id": 7, "conversations": []}))
    jsonl = os.path.join(work, "deep.jsonl")
    open(jsonl, "w").write("\n\n".join(lines) + "\n")
    r = run(prep_cmd(tool, jsonl, sample, tokenizer, model, fresh(work), "--max-skipped", "0.5"),
            timeout=60)
    check(r.returncode == 0 and "Traceback" not in r.stderr and "wrote 20 samples" in r.stdout
          and "line 11: not JSON: nested too deeply" in r.stdout
          and "line 15: not JSON: nested too deeply" in r.stdout
          and 'id "surrogate" (line 45): text that is not Unicode' in r.stdout
          and 'id "surrogate-path" (line 47): an unreadable image' in r.stdout
          and "id 7 (line 49): no conversations" in r.stdout,
          "JSON lines: a line nested too deeply, lone surrogates: skipped, "
          "named by line and id", r.stdout + r.stderr[-3000:])
    fifo = os.path.join(work, "fifo.json")
    os.mkfifo(fifo)
    for flag in ("--conversations", "--tokenizer", "--model"):
        args = {"--conversations": jsonl, "--tokenizer": tokenizer, "--model": model}
        args[flag] = fifo
        r = run(prep_cmd(tool, args["--conversations"], sample, args["--tokenizer"],
                         args["--model"], out), timeout=30)
        check(refused(r, fifo, "not a regular file"), f"a FIFO as {flag} is refused",
              r.stderr[-2000:])
    # --max-skipped: a wrong --images folder drops 66 of the 67 records.
    conv = os.path.join(sample, "conversations.json")
    r = run(prep_cmd(tool, conv, prep, tokenizer, model, out))
    check(refused(r, "skipped 66 of 67 records", "--max-skipped 0.05")
          and "skipped 66 of 67 records: 66 no image file" in r.stdout and not written(out),
          "a wrong --images folder (66 of 67 records skipped) fails, writing nothing",
          r.stdout[-2000:] + r.stderr[-2000:])
    r = run(prep_cmd(tool, conv, prep, tokenizer, model, fresh(work), "--max-skipped", "1"))
    check(r.returncode == 0 and "wrote 1 samples" in r.stdout, "--max-skipped 1 lets it run",
          r.stdout[-2000:] + r.stderr[-2000:])
    out = fresh(work)
    r = run(prep_cmd(tool, conv, sample, tokenizer, model, out, "--max-skipped", "0"))
    check(refused(r, "skipped 2 of 67 records") and not written(out),
          "--max-skipped 0 fails on the quick start's 2 skipped records", r.stderr[-2000:])


def progress_on_a_terminal(source, work, prep, sample):
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    master, slave = pty.openpty()
    p = subprocess.Popen(prep_cmd(tool, os.path.join(sample, "conversations.json"), sample,
                                  os.path.join(sample, "tokenizer.model"),
                                  os.path.join(prep, "vlm-prepared.json"),
                                  fresh(work)),
                         stdout=subprocess.DEVNULL, stderr=slave)
    os.close(slave)
    seen = b""
    while True:
        try:
            chunk = os.read(master, 4096)
        except OSError:  # EIO: the process is gone
            break
        if not chunk:
            break
        seen += chunk
    os.close(master)
    p.wait(timeout=60)
    check(b"\rmimo-prep: [" + b"#" * 30 + b"] 67/67 records" in seen,
          "a progress bar redrawn in place on a terminal", seen[-500:].decode(errors="replace"))


def byte_tokenizer():
    """A byte-level BPE tokenizer.json: the 256 bytes, a few merges, added
    tokens and Llama 3's Split (digit runs)."""
    import prep_tokenizers
    vocab = {ch: b for b, ch in prep_tokenizers.bytes_to_unicode().items()}
    merges = ["h e", "l l", "he ll", "hell o", "Ġ hello", "1 2", "12 3"]
    for i, m in enumerate(merges):
        vocab[m.replace(" ", "")] = 256 + i
    return {"model": {"type": "BPE", "vocab": vocab, "merges": merges},
            "added_tokens": [{"id": 270, "content": "<s>", "special": True},
                             {"id": 271, "content": "</s>", "special": True}],
            "pre_tokenizer": {"type": "Sequence", "pretokenizers": [
                {"type": "Split", "pattern": {"Regex": r"\p{N}{1,3}"},
                 "behavior": "Isolated", "invert": False},
                {"type": "ByteLevel", "add_prefix_space": False, "use_regex": True}]}}


def bpe_model(prep, work):
    """vlm-prepared.json with its image token past byte_tokenizer()'s ids."""
    model = json.load(open(os.path.join(prep, "vlm-prepared.json")))
    model["modules"][0]["special_token_id"] = 300
    model["modules"][1]["arch"]["vocab_size"] = 320
    model["batch"]["seq_length"] = 256
    path = os.path.join(work, "bpe-model.json")
    json.dump(model, open(path, "w"))
    return path


# transformers' own extras: loop controls, strftime_now, {% generation %};
# a template that refuses a conversation starting with the assistant.
HF_TEMPLATE = ("{% set today = strftime_now('%Y-%m-%d') %}"
               "{% if messages and messages[0]['role'] == 'assistant' %}"
               "{{ raise_exception('the user speaks first') }}{% endif %}"
               "{{ bos_token }}{% for m in messages %}"
               "{% if m['role'] == 'tool' %}{% continue %}{% endif %}"
               "{% if m['role'] == 'user' %}[U]{{ m['content'] }}\n"
               "{% elif m['role'] == 'system' %}[S]{{ m['content'] }}\n"
               "{% else %}[A]{% generation %}{{ m['content'] }}{{ eos_token }}"
               "{% endgeneration %}{{ '\\n' }}{% endif %}"
               "{% endfor %}{% if add_generation_prompt %}[A]{% endif %}")


def target_runs(seq, mask, decode):
    """The text of each run of targets."""
    runs, cur = [], []
    for t, k in zip(seq + [None], mask + [0]):
        if k:
            cur.append(t)
        elif cur:
            runs.append(decode(cur))
            cur = []
    return runs


def hf_template(source, work, prep, sample):
    """--template hf: the tokenizer's own Jinja chat_template renders the
    conversation (system turn, images in two questions, two answers);
    decoded independently, the ids are the rendered text with each image's
    rows where its <image> was, and the mask keeps exactly what each
    assistant message adds (its answer and end of turn). With sentencepiece
    the <s> and </s> the template writes are the BOS and EOS ids and the
    text between images is tokenised whole. A tokenizer without a template,
    a template that is not a string, not Jinja or cannot render a question
    and its answer, a missing jinja2: exit 1, one line naming the file; a
    record the template refuses is skipped."""
    try:
        import jinja2  # noqa: F401
    except ImportError:
        check(False, "--template hf needs python3-jinja2 (scripts/setup.sh installs it)")
        return
    sys.path.insert(0, os.path.join(source, "tools", "mimo-prep"))
    import prep_tokenizers
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    folder = os.path.join(work, "hf-template")
    os.makedirs(folder, exist_ok=True)
    doc = byte_tokenizer()
    tokenizer = os.path.join(folder, "tokenizer.json")
    json.dump(doc, open(tokenizer, "w"))
    config_path = os.path.join(folder, "tokenizer_config.json")
    conv = os.path.join(folder, "conversations.json")
    records = [{"id": "t", "image": "images/000.png", "conversations": [
        {"from": "system", "value": "Be brief."},
        {"from": "human", "value": "<image>\nhello?"},
        {"from": "gpt", "value": "hello 12"}]},
        {"id": "multi", "images": ["images/001.png", "images/002.png"], "conversations": [
            {"from": "system", "value": "Be brief."},
            {"from": "human", "value": "<image>\nhello?"},
            {"from": "gpt", "value": "hello 12"},
            {"from": "user", "value": "and <image>?"},
            {"from": "assistant", "value": "hello"}]},
        {"id": "gpt-first", "conversations": [
            {"from": "gpt", "value": "hello"}, {"from": "human", "value": "hello?"},
            {"from": "gpt", "value": "hello"}]}]
    json.dump(records, open(conv, "w"))
    model = bpe_model(prep, work)

    def prep_hf(out, *extra, **kw):
        return run(prep_cmd(tool, conv, sample, tokenizer, model, out, "--template", "hf",
                            "--max-skipped", "0.5", *extra), **kw)
    out = fresh(work)
    r = prep_hf(out)
    check(refused(r, "no chat template", "--template hf") and not written(out),
          "--template hf without a chat template: exit 1, one line", r.stderr[-2000:])
    for template, words, what in (
            (5, ("/chat_template is the integer 5",), "a template that is not a string"),
            ([{"name": "tool_use", "template": HF_TEMPLATE}],
             ('none named "default"',), "a list of templates without a default"),
            ("{% for %}", ("not Jinja",), "a template that is not Jinja"),
            ("{{ raise_exception('no') }}", ("cannot render a question and its answer",
                                             "the template raised: no"),
             "a template that cannot render a question and its answer")):
        json.dump({"chat_template": template}, open(config_path, "w"))
        out = fresh(work)
        r = prep_hf(out)
        check(refused(r, config_path, *words) and not written(out)
              and len(r.stderr.strip().splitlines()) == 1,
              f"{what}: exit 1, one line naming the file", r.stderr[-2000:])
    json.dump({"bos_token": "<s>", "eos_token": {"content": "</s>"},
               "chat_template": [{"name": "default", "template": HF_TEMPLATE},
                                 {"name": "rag", "template": "{{ x }}"}]},
              open(config_path, "w"))
    hide = os.path.join(work, "hide-jinja2")
    os.makedirs(os.path.join(hide, "jinja2"), exist_ok=True)
    open(os.path.join(hide, "jinja2", "__init__.py"), "w").write(
        "raise ImportError(\"No module named 'jinja2'\")\n")
    r = prep_hf(fresh(work), env=dict(os.environ, PYTHONPATH=hide))
    check(refused(r, "jinja2", "python3-jinja2", "pip install Jinja2")
          and len(r.stderr.strip().splitlines()) == 1,
          "a missing jinja2 is one line naming python3-jinja2 and Jinja2", r.stderr[-2000:])
    out = fresh(work)
    r = prep_hf(out)
    check(r.returncode == 0 and "wrote 2 samples" in r.stdout and
          'id "gpt-first" (record 2): a conversation the chat template cannot render: '
          "the template raised: the user speaks first" in r.stdout,
          "--template hf writes the records (the default of a list of templates), "
          "skips the one the template refuses", r.stdout + r.stderr[-2000:])
    if r.returncode:
        return
    ids, masks, rows = read_dataset(out, "images", 48)
    byte_of = {ch: b for b, ch in prep_tokenizers.bytes_to_unicode().items()}
    text_of = {i: t for t, i in doc["model"]["vocab"].items()}
    added = {t["id"]: t["content"] for t in doc["added_tokens"]}

    def decode(seq):
        """The text of ids, each image's run of rows as <IMG>."""
        out = b""
        for k, i in enumerate(seq):
            if i == 300:
                out += b"<IMG>" if k == 0 or seq[k - 1] != 300 else b""
            else:
                out += added[i].encode() if i in added else bytes(byte_of[c] for c in text_of[i])
        return out.decode()
    s, m = ids[0], masks[0]
    at = s.index(300)
    runs_ok = s[at:at + 16] == [300] * 16 and s.count(300) == 16
    check(runs_ok and decode(s) == "<s>[S]Be brief.\n[U]<IMG>\nhello?\n[A]hello 12</s>\n",
          "the ids are the template's text, the image's 16 rows in place of <image>",
          repr(decode(s)))
    check(target_runs(s, m, decode) == ["hello 12</s>\n"],
          "the mask keeps the answer and its end of turn, as rendered",
          repr(target_runs(s, m, decode)))
    s, m = ids[1], masks[1]
    check(decode(s) == "<s>[S]Be brief.\n[U]<IMG>\nhello?\n[A]hello 12</s>\n"
          "[U]and <IMG>?\n[A]hello</s>\n" and s.count(300) == 32 and
          rows[1].shape == (32, 48), "two turns, an image in each question: the "
          "images' rows where their <image>s stand", repr(decode(s)))
    check(target_runs(s, m, decode) == ["hello 12</s>\n", "hello</s>\n"],
          "two answers: the mask keeps each answer and its end of turn",
          repr(target_runs(s, m, decode)))
    # A generation prompt the answer's render does not repeat (an empty
    # thinking block, as Qwen3's): the answer begins where the two part.
    json.dump({"chat_template": "{% for m in messages %}<s>{{ m.role }}\n"
               "{{ m.content }}</s>\n{% endfor %}{% if add_generation_prompt %}"
               "<s>assistant\n[think][/think]\n{% endif %}"}, open(config_path, "w"))
    out = fresh(work)
    r = prep_hf(out)
    if r.returncode == 0:
        ids, masks, _ = read_dataset(out, "images", 48)
        runs = target_runs(ids[1], masks[1], decode)
        ok = runs == ["hello 12</s>\n", "hello</s>\n"] and "wrote 3 samples" in r.stdout
    else:
        runs, ok = r.stdout + r.stderr[-2000:], False
    check(ok, "a generation prompt the answer does not repeat: the answers still "
          "found", repr(runs))
    # sentencepiece: the template's <s> and </s> are the BOS and EOS ids.
    spdir = os.path.join(folder, "sp")
    os.makedirs(spdir, exist_ok=True)
    shutil.copy(os.path.join(sample, "tokenizer.model"), spdir)
    json.dump({"bos_token": "<s>", "eos_token": "</s>", "chat_template":
               "{{ bos_token }}{% for m in messages %}{% if m['role'] == 'user' %}"
               "USER: {{ m['content'] }} ASSISTANT:{% else %} {{ m['content'] }}"
               "{{ eos_token }}{% endif %}{% endfor %}"},
              open(os.path.join(spdir, "tokenizer_config.json"), "w"))
    out = fresh(work)
    r = run(prep_cmd(tool, os.path.join(sample, "conversations.json"), sample,
                     os.path.join(spdir, "tokenizer.model"),
                     os.path.join(prep, "vlm-prepared.json"), out, "--template", "hf",
                     "--limit", "4"))
    check(r.returncode == 0 and "wrote 4 samples" in r.stdout,
          "--template hf with a sentencepiece tokenizer.model", r.stdout + r.stderr[-2000:])
    if r.returncode:
        return
    ids, masks, _ = read_dataset(out, "images", 48)
    sp = sentencepiece.SentencePieceProcessor()
    sp.Load(os.path.join(sample, "tokenizer.model"))
    sample_records = json.load(open(os.path.join(sample, "conversations.json")))
    ok = True
    for i in range(4):
        q, a = (t["value"] for t in sample_records[i]["conversations"])
        assert q.startswith("<image>")
        want = ([sp.bos_id()] + sp.EncodeAsIds("USER: ") + [96] * 16
                + sp.EncodeAsIds(f"{q[len('<image>'):]} ASSISTANT: {a}") + [sp.eos_id()])
        targets = [t for t, k in zip(ids[i], masks[i]) if k]
        ok &= (ids[i] == want and targets[-1] == sp.eos_id()
               and sp.DecodeIds(targets[:-1]) == a and 96 not in targets)
    check(ok, "sentencepiece: BOS and EOS ids where the template writes <s> and "
          "</s>, the text between images tokenised whole, the answers and EOS targets")


def hostile_tokenizers(source, work, prep, sample):
    """Bad added tokens, a regex that backtracks without end."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    model, out = bpe_model(prep, work), fresh(work)
    conv = os.path.join(sample, "conversations.json")
    path = os.path.join(work, "hostile-tokenizer.json")
    base = byte_tokenizer()
    json.dump(base, open(path, "w"))
    r = run(prep_cmd(tool, conv, sample, path, model, fresh(work)))
    check(r.returncode == 0 and "wrote 65 samples" in r.stdout,
          "a byte-level BPE tokenizer.json prepares the quick start", r.stderr[-2000:])
    for value, shown in ((-1, "-1"), (257.9, "257.9"), (True, "true"), ("5", "'5'"),
                         (1 << 40, str(1 << 40))):
        doc = byte_tokenizer()
        doc["added_tokens"].append({"id": value, "content": "<|x|>"})
        json.dump(doc, open(path, "w"))
        r = run(prep_cmd(tool, conv, sample, path, model, out))
        check(refused(r, path, "/added_tokens/2/id", "'<|x|>'", shown, "from 0")
              and not written(out), f"an added token of id {shown} is refused",
              r.stdout[-1000:] + r.stderr[-2000:])
    doc = byte_tokenizer()
    doc["added_tokens"].append({"id": 400, "content": "<|x|>"})
    json.dump(doc, open(path, "w"))
    r = run(prep_cmd(tool, conv, sample, path, model, out))
    check(refused(r, path, "'<|x|>'", "400", "vocab_size 320"),
          "an added token past the model's vocab_size is refused, named",
          r.stdout[-1000:] + r.stderr[-2000:])
    doc = byte_tokenizer()
    doc["added_tokens"].append({"id": 272, "content": ""})
    json.dump(doc, open(path, "w"))
    r = run(prep_cmd(tool, conv, sample, path, model, out))
    check(refused(r, path, "/added_tokens/2/content", "empty"),
          "an empty added token is refused", r.stdout[-1000:] + r.stderr[-2000:])
    doc = byte_tokenizer()
    doc["pre_tokenizer"]["pretokenizers"][0]["pattern"]["Regex"] = "(a+)+$"
    json.dump(doc, open(path, "w"))
    long_a = os.path.join(work, "long-a.json")
    json.dump([conversation("short", None, "aaa!"), conversation("long", None, "a" * 5000 + "!")],
              open(long_a, "w"))
    r = run(prep_cmd(tool, long_a, sample, path, model, out), timeout=60)
    check(refused(r, path, "'(a+)+$'", 'id "long"') and not written(out),
          "a regex that backtracks without end stops the run, naming the file and "
          "the pattern", r.stderr[-2000:])


def mutants(doc, rng, n):
    """n copies of the JSON document `doc`, each changed in 1 to 3 places: a
    key deleted, a value of another type or a random one, an array emptied."""
    values = [None, True, False, 0, -1, 1, 2.5, 257.9, 1 << 40, "", "x", "(a+)+$", "[",
              [], [1, 2], ["a", "b", "c"], {}, {"type": "BPE"}, {"a": 1}, "Split",
              "ByteLevel", "Sequence", "BPE"]

    def places(node, at):
        yield at
        if isinstance(node, dict):
            keys = list(node)
            for k in (rng.sample(keys, 6) if len(keys) > 6 else keys):
                yield from places(node[k], at + (k,))
        elif isinstance(node, list):
            for i in (rng.sample(range(len(node)), 4) if len(node) > 4 else range(len(node))):
                yield from places(node[i], at + (i,))

    out = []
    for _ in range(n):
        d = json.loads(json.dumps(doc))
        for _ in range(rng.randint(1, 3)):
            at = rng.choice(list(places(d, ())))
            if not at:
                continue
            parent = d
            for k in at[:-1]:
                parent = parent[k]
            op = rng.random()
            if op < 0.3 and isinstance(parent, dict):
                del parent[at[-1]]
            elif op < 0.4 and isinstance(parent[at[-1]], (list, dict)):
                parent[at[-1]] = type(parent[at[-1]])()
            else:
                parent[at[-1]] = json.loads(json.dumps(rng.choice(values)))
        out.append(d)
    return out


def fuzz_tokenizers(source, work, prep, sample):
    """tokenizer.json mutated at random: loaded and used, a TokenizerError
    or ids; through mimo-prep, a one-line error (exit 1) or a run."""
    import prep_tokenizers
    rng = random.Random(55)
    path = os.path.join(work, "fuzz-tokenizer.json")
    other = []
    for i, doc in enumerate(mutants(byte_tokenizer(), rng, 600)):
        json.dump(doc, open(path, "w"))
        try:
            tok = prep_tokenizers.load(path)
            prep_tokenizers.special_ids(tok, None, None)
            ids = tok.encode("hello 12345 <s> world\n")
            assert all(isinstance(t, int) and 0 <= t < tok.size for t in ids), ids
        except (prep_tokenizers.TokenizerError,
                getattr(prep_tokenizers, "PatternTimeout", KeyError)) as e:
            assert path in str(e) or "symbol" in str(e), str(e)
        except Exception as e:  # noqa: BLE001: what this looks for
            other.append(f"mutant {i}: {type(e).__name__}: {e}: {json.dumps(doc)[:300]}")
    check(not other, f"600 mutated tokenizer.json files: an error naming the file "
          f"or ids ({len(other)} otherwise)", "\n".join(other[:5]))
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    model, out = bpe_model(prep, work), fresh(work)
    conv = os.path.join(sample, "conversations.json")
    bad = []
    for i, doc in enumerate(mutants(byte_tokenizer(), random.Random(56), 12)):
        json.dump(doc, open(path, "w"))
        r = run(prep_cmd(tool, conv, sample, path, model, out, "--limit", "3",
                         "--max-skipped", "1"), timeout=60)
        if not (r.returncode == 0 or refused(r)):
            bad.append(f"mutant {i}: exit {r.returncode}: {r.stderr[-600:]}")
    check(not bad, "12 mutated tokenizer.json files through mimo-prep: exit 0, or 1 "
          "with the file named, no traceback", "\n".join(bad[:3]))


def fuzz_models(source, work, prep, sample):
    """model.json mutated at random: mimo-prep's reading of it ends in a
    one-line error (SystemExit 1) or in facts of the right types."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    loader = importlib.machinery.SourceFileLoader("mimo_prep_tool", tool)
    spec = importlib.util.spec_from_loader("mimo_prep_tool", loader)
    prep_tool = importlib.util.module_from_spec(spec)
    loader.exec_module(prep_tool)
    path = os.path.join(work, "fuzz-model.json")
    other = []
    base = json.load(open(os.path.join(prep, "vlm-prepared.json")))
    for i, doc in enumerate(mutants(base, random.Random(57), 500)):
        json.dump(doc, open(path, "w"))
        err = io.StringIO()
        try:
            with contextlib.redirect_stderr(err):
                facts = prep_tool.model_facts(path, None, None)
            assert all(type(facts[k]) is int for k in
                       ("special", "dim", "patch", "image_size", "vocab", "seq")), facts
        except SystemExit as e:
            if e.code != 1 or len(err.getvalue().splitlines()) != 1:
                other.append(f"mutant {i}: exit {e.code}: {err.getvalue()}")
        except Exception as e:  # noqa: BLE001: what this looks for
            other.append(f"mutant {i}: {type(e).__name__}: {e}: {json.dumps(doc)[:300]}")
    check(not other, f"500 mutated model.json files: a one-line error or the facts "
          f"({len(other)} otherwise)", "\n".join(other[:5]))


def missing_packages(source, work, prep, sample):
    """Each package mimo-prep needs, hidden: one line naming its Debian and
    pip packages, exit 1."""
    tool = os.path.join(source, "tools", "mimo-prep", "mimo-prep")
    tokenizer_json = os.path.join(work, "pkg-tokenizer.json")
    json.dump(byte_tokenizer(), open(tokenizer_json, "w"))
    for module, deb, pip in (("numpy", "python3-numpy", "numpy"),
                             ("PIL", "python3-pil", "Pillow"),
                             ("sentencepiece", "python3-sentencepiece", "sentencepiece"),
                             ("regex", "python3-regex", "regex")):
        hide = os.path.join(work, "hide-" + module)
        os.makedirs(os.path.join(hide, module))
        open(os.path.join(hide, module, "__init__.py"), "w").write(
            f"raise ImportError(\"No module named '{module}'\")\n")
        tokenizer = (tokenizer_json if module == "regex"
                     else os.path.join(sample, "tokenizer.model"))
        model = bpe_model(prep, work) if module == "regex" else os.path.join(
            prep, "vlm-prepared.json")
        r = run(prep_cmd(tool, os.path.join(sample, "conversations.json"), sample,
                         tokenizer, model, fresh(work)),
                env=dict(os.environ, PYTHONPATH=hide))
        check(refused(r, module, deb, f"pip install {pip}")
              and len(r.stderr.strip().splitlines()) == 1,
              f"a missing {module} is one line naming {deb} and {pip}", r.stderr[-2000:])


def hostile(source, work, prep, sample):
    sys.path.insert(0, os.path.join(source, "tools", "mimo-prep"))
    for part in (hostile_images, hostile_conversations, progress_on_a_terminal,
                 hostile_tokenizers, fuzz_tokenizers, fuzz_models, missing_packages):
        try:
            part(source, work, prep, sample)
        except Exception:  # noqa: BLE001: one part's crash fails it, not the rest
            import traceback
            check(False, f"{part.__name__} ran", traceback.format_exc())


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="mimo-prep-")
    try:
        prep, sample = quick_start(build, source, work)
        quick_start_multi(build, source, work, prep, sample)
        files_check(prep, sample)
        several_images(build, source, work, prep, sample)
        hf_template(source, work, prep, sample)
        bpe_check(source, work)
        bad_input(source, work, prep, sample)
        hostile(source, work, prep, sample)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
