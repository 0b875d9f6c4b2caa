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
    text = [t["value"].replace("<image>\n", "") for r in records
            for t in r["conversations"]] + ["USER:", "ASSISTANT:"]
    model = io.BytesIO()
    sentencepiece.SentencePieceTrainer.Train(
        sentence_iterator=iter(text * 20), model_writer=model, vocab_size=96,
        model_type="bpe", character_coverage=1.0, minloglevel=2)
    with open(os.path.join(out, "tokenizer.model"), "wb") as f:
        f.write(model.getvalue())
    print(f"wrote {out}/conversations.json ({len(records)} records), "
          f"{out}/images/ (64 PNGs) and {out}/tokenizer.model (96 pieces)")


if __name__ == "__main__":
    main()
