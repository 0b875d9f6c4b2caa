#!/usr/bin/env python3
"""Makes a small LLaVA-format dataset for the quick start of docs/data.md
("Preparing image conversations"): PNG images of coloured shapes, a
conversations.json asking about them, and a sentencepiece tokenizer trained
on its text. Two records are broken on purpose (a missing image, a second
<image>): mimo-prep skips and names them.

usage: make-sample-data.py [OUT]   (default: sample/ beside this file)
Needs python3-pil, python3-numpy and python3-sentencepiece.
"""
import io
import json
import os
import sys

import numpy as np
import sentencepiece
from PIL import Image, ImageDraw

COLORS = {"red": (220, 30, 30), "green": (30, 180, 60), "blue": (40, 60, 220),
          "yellow": (230, 210, 40)}
SHAPES = ("square", "circle")


def main():
    out = sys.argv[1] if len(sys.argv) > 1 else os.path.join(
        os.path.dirname(os.path.abspath(__file__)), "sample")
    os.makedirs(os.path.join(out, "images"), exist_ok=True)
    g = np.random.default_rng(0)
    records = []
    for i in range(64):
        color = list(COLORS)[i % 4]
        shape = SHAPES[(i // 4) % 2]
        im = Image.new("RGB", (32, 32), tuple(int(x) for x in g.integers(0, 60, 3)))
        d = ImageDraw.Draw(im)
        x, y = (int(v) for v in g.integers(2, 12, 2))
        box = (x, y, x + 18, y + 18)
        (d.rectangle if shape == "square" else d.ellipse)(box, fill=COLORS[color])
        name = f"images/{i:03d}.png"
        im.save(os.path.join(out, name))
        question = ["What color is the shape?", "Which shape is it?",
                    "Describe the image."][i % 3]
        answer = [f"It is {color}.", f"It is a {shape}.",
                  f"A {color} {shape} on a dark background."][i % 3]
        records.append({"id": str(i), "image": name, "conversations": [
            {"from": "human", "value": "<image>\n" + question},
            {"from": "gpt", "value": answer}]})
    records.append({"id": "text", "conversations": [
        {"from": "human", "value": "Name a color."},
        {"from": "gpt", "value": "Blue."}]})
    records.append({"id": "missing", "image": "images/none.png", "conversations": [
        {"from": "human", "value": "<image>\nWhat is it?"},
        {"from": "gpt", "value": "Nothing."}]})
    records.append({"id": "two", "image": "images/000.png", "conversations": [
        {"from": "human", "value": "<image> and <image>?"},
        {"from": "gpt", "value": "Two."}]})
    with open(os.path.join(out, "conversations.json"), "w") as f:
        json.dump(records, f, indent=1)
    multi = several_images(out, g)
    with open(os.path.join(out, "conversations-multi.json"), "w") as f:
        json.dump(multi, f, indent=1)
    text = [t["value"].replace("<image>\n", "") for r in records + multi
            for t in r["conversations"]] + ["USER:", "ASSISTANT:"]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.Train(
        sentence_iterator=iter(text * 20), model_writer=model, vocab_size=96,
        model_type="bpe", character_coverage=1.0, minloglevel=2)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    # The model's own chat template (--template hf), as a Hugging Face
    # tokenizer_config.json beside the tokenizer holds it: Vicuna's, as
    # LLaVA 1.5 uses.
    with open(os.path.join(out, "tokenizer_config.json"), "w") as f:
        json.dump({"bos_token": "<s>", "eos_token": "</s>",
                   "chat_template": CHAT_TEMPLATE}, f, indent=1)
    print(f"wrote {out}/conversations.json ({len(records)} records), "
          f"{out}/conversations-multi.json ({len(multi)} records), "
          f"{out}/images/ (64 + 32 PNGs), {out}/tokenizer.model (96 pieces) "
          f"and {out}/tokenizer_config.json (its chat template)")


CHAT_TEMPLATE = (
    "{{ bos_token }}{% for m in messages %}"
    "{% if m['role'] == 'system' %}{{ m['content'] }} "
    "{% elif m['role'] == 'user' %}USER: {{ m['content'] }} "
    "{% else %}ASSISTANT: {{ m['content'] }}{{ eos_token }}{% endif %}"
    "{% endfor %}{% if add_generation_prompt %}ASSISTANT:{% endif %}")


def shape_image(g, size, color, shape):
    """A coloured shape on a dark background, `size` = (width, height)."""
    w, h = size
    im = Image.new("RGB", size, tuple(int(x) for x in g.integers(0, 60, 3)))
    side = min(w, h) * 3 // 5
    x = int(g.integers(1, w - side)) if w - side > 1 else 0
    y = int(g.integers(1, h - side)) if h - side > 1 else 0
    box = (x, y, x + side, y + side)
    (ImageDraw.Draw(im).rectangle if shape == "square"
     else ImageDraw.Draw(im).ellipse)(box, fill=COLORS[color])
    return im


def several_images(out, g):
    """32 images of other sizes (wider, taller, larger than the encoder's
    16 x 16) and conversations about one or two of them at a time, several
    turns each: the multi-image quick start (--resize native keeps each
    image's shape, in a variable number of patches)."""
    os.makedirs(os.path.join(out, "images", "var"), exist_ok=True)
    sizes = [(48, 32), (32, 48), (40, 40), (64, 24), (24, 40), (56, 56)]
    facts = []
    for i in range(32):
        color, shape = list(COLORS)[(i * 3) % 4], SHAPES[(i // 2) % 2]
        name = f"images/var/{i:03d}.png"
        shape_image(g, sizes[i % len(sizes)], color, shape).save(
            os.path.join(out, name))
        facts.append((name, color, shape))
    records = []
    for i in range(32):
        a, b = facts[i], facts[(i + 5) % 32]
        if i % 2 == 0:
            records.append({"id": f"pair-{i}", "images": [a[0], b[0]],
                            "conversations": [
                {"from": "human", "value": "<image>\n<image>\nWhat colors are they?"},
                {"from": "gpt", "value": f"The first is {a[1]}, the second {b[1]}."},
                {"from": "human", "value": "Which shapes?"},
                {"from": "gpt", "value": f"A {a[2]} and a {b[2]}."}]})
        else:
            records.append({"id": f"one-{i}", "images": [a[0]], "conversations": [
                {"from": "system", "value": "Answer briefly."},
                {"from": "human", "value": "<image>\nDescribe the image."},
                {"from": "gpt", "value": f"A {a[1]} {a[2]} on a dark background."}]})
    return records


if __name__ == "__main__":
    main()
