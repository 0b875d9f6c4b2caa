#!/usr/bin/env python3
"""Writes a model that reads jsonl data, for the CLI tests.

usage: jsonl_model.py EXAMPLE.json DIR SEED
Writes DIR/jsonl.json (the example with data {"source": "jsonl", "path":
"data.jsonl"}, relative to it) and DIR/data.jsonl: 16 samples of 128 token
ids with 0..10 image tokens (id 1000) at position 5 and their 48-wide
features, random from SEED.
"""
import json
import random
import sys

example, here, seed = sys.argv[1], sys.argv[2], int(sys.argv[3])
model = json.load(open(example))
model["data"] = {"source": "jsonl", "path": "data.jsonl"}
json.dump(model, open(f"{here}/jsonl.json", "w"))
rnd = random.Random(seed)
with open(f"{here}/data.jsonl", "w") as f:
    for i in range(16):
        n = rnd.randint(0, 10)
        ids = [rnd.randrange(1000) for _ in range(128)]
        ids[5:5 + n] = [1000] * n
        sample = {"input_ids": ids}
        if n:
            sample["images"] = {"features": [[rnd.uniform(-1, 1) for _ in range(48)]
                                             for _ in range(n)]}
        f.write(json.dumps(sample) + "\n")
