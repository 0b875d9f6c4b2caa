#!/usr/bin/env python3
"""A minimal, independent safetensors reader (docs/checkpoints.md checks).

usage: read_safetensors.py FILE [FILE2]
Parses the 8-byte little-endian header length and the JSON header, checks
every tensor's dtype, shape and data_offsets, and that the offsets tile the
data exactly, then prints one line per tensor. With FILE2 (the same model
saved by another layout), checks that both hold the same names and shapes
and values within 1e-4 relative.
"""
import json
import struct
import sys

SIZES = {"F32": 4, "F64": 8, "F16": 2, "BF16": 2, "I64": 8, "I32": 4}


def read(path):
    data = open(path, "rb").read()
    (n,) = struct.unpack("<Q", data[:8])
    header = json.loads(data[8:8 + n])
    body = data[8 + n:]
    meta = header.pop("__metadata__", {})
    spans = []
    tensors = {}
    for name, t in header.items():
        assert t["dtype"] in SIZES, (name, t["dtype"])
        count = 1
        for d in t["shape"]:
            count *= d
        begin, end = t["data_offsets"]
        assert end - begin == count * SIZES[t["dtype"]], (name, t)
        spans.append((begin, end, name))
        tensors[name] = (t["shape"], struct.unpack("<%df" % count, body[begin:end]))
    spans.sort()
    at = 0
    for begin, end, name in spans:
        assert begin == at, f"{name} starts at {begin}, expected {at}"
        at = end
    assert at == len(body), f"tensors cover {at} bytes of {len(body)}"
    return meta, tensors


def main():
    meta, tensors = read(sys.argv[1])
    for name, (shape, _) in tensors.items():
        print(name, shape)
    if len(sys.argv) > 2:
        _, other = read(sys.argv[2])
        assert sorted(other) == sorted(tensors), "different tensor names"
        for name, (shape, values) in tensors.items():
            oshape, ovalues = other[name]
            assert oshape == shape, (name, shape, oshape)
            scale = max(max(abs(v) for v in values), 1e-12)
            worst = max(abs(a - b) for a, b in zip(values, ovalues))
            assert worst <= 1e-4 * scale, (name, worst, scale)
    print(f"{len(tensors)} tensors, format {meta.get('format')}")


if __name__ == "__main__":
    main()
