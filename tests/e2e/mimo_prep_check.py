#!/usr/bin/env python3
"""tools/mimo-prep end to end (docs/data.md, "Preparing image
conversations"), checked with no code of mimo-prep's:

1. the README's quick start in a scratch folder: examples/prep/make-sample-
   data.py, mimo-prep, mimoc compile, mimo-run: the two broken records are
   skipped and named, the model trains (the loss falls by half);
2. the files, read with this script's own reader: each image's rows are
   torch's unfold of the resized, normalised pixels (the (channel, row, col)
   order of a ViT's patch convolution), the image run is the encoder's
   special token once per row, and the mask keeps exactly each answer and
   its EOS (decoded back to the answer's text by sentencepiece);
3. byte-level BPE on a hand-made tokenizer.json: ids worked out by hand,
   added tokens, a Split pre-tokenizer;
4. bad input: exit 1 with the file and the fix.

usage: mimo_prep_check.py BUILD_DIR SOURCE_DIR
"""
import json
import os
import shutil
import struct
import subprocess
import sys
import tempfile

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


def run(cmd, **kw):
    return subprocess.run(cmd, capture_output=True, text=True, timeout=600, **kw)


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
    check(r.returncode == 0 and "wrote 65 samples (64 with an image" in r.stdout,
          "mimo-prep writes the 65 usable records", r.stdout + r.stderr[-2000:])
    check("skipped 2 record(s): 1 no image file, 1 more than one <image>" in r.stdout
          and "record 65: no image file" in r.stdout,
          "the two broken records are skipped, counted and named")
    check("67/67 records" in r.stderr, "a progress bar")
    plan = os.path.join(work, "prepared.plan.json")
    metrics = os.path.join(work, "prepared.jsonl")
    r = run([os.path.join(build, "bin", "mimoc"), "compile", "-q",
             os.path.join(prep, "vlm-prepared.json"), "-o", plan])
    check(r.returncode == 0, "mimoc compile", r.stderr[-2000:])
    r = run([os.path.join(build, "bin", "mimo-run"), plan, "--steps", "20",
             "--metrics", metrics])
    check(r.returncode == 0, "mimo-run", r.stderr[-2000:])
    if r.returncode == 0:
        losses = [json.loads(l)["loss"] for l in open(metrics) if '"loss"' in l]
        check(len(losses) == 20 and losses[-1] < losses[0] / 2,
              f"trains on the prepared data: loss {losses[0]:.3f} -> {losses[-1]:.3f}")
    return prep, sample


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


def main():
    build, source = os.path.abspath(sys.argv[1]), os.path.abspath(sys.argv[2])
    work = tempfile.mkdtemp(prefix="mimo-prep-")
    try:
        prep, sample = quick_start(build, source, work)
        files_check(prep, sample)
        bpe_check(source, work)
        bad_input(source, work, prep, sample)
    finally:
        shutil.rmtree(work, ignore_errors=True)
    print(f"{len(failures)} failure(s)")
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
