"""The files tools/mimo-prep writes (docs/data.md): Megatron's indexed
dataset PREFIX.bin/.idx, each encoder's PREFIX.<encoder>.feat, its item
boundaries PREFIX.<encoder>.items (a byte per row, 1 where an image or a
frame begins) and the loss mask PREFIX.mask. Written under temporary names and renamed when complete:
an interrupted run leaves no half-written dataset."""
import os
import struct

import numpy as np


class DatasetWriter:
    def __init__(self, prefix, encoder, feature_dim, bf16, vocab):
        self.prefix, self.encoder, self.dim, self.bf16 = prefix, encoder, feature_dim, bf16
        self.code = 8 if vocab <= 65536 else 4  # uint16, else int32
        self.dtype = np.uint16 if self.code == 8 else np.int32
        self.parts = {k: prefix + k + ".partial" for k in
                      (".bin", ".mask", f".{encoder}.feat.rows",
                       f".{encoder}.items.rows")}
        self.files = {}
        try:
            for k, p in self.parts.items():
                self.files[k] = open(p, "wb")
        except BaseException:
            self.abandon()
            raise
        self.lengths, self.rows = [], [0]

    def add(self, ids, mask, items):
        """One sequence: its ids, 0/1 mask and its items' feature rows (a
        list of [r, dim] arrays, one per image or frame, in order)."""
        self.files[".bin"].write(np.asarray(ids, dtype=self.dtype).tobytes())
        self.files[".mask"].write(bytes(mask))
        starts = bytearray()
        for item in items:
            n = np.asarray(item).reshape(-1, self.dim).shape[0]
            starts += bytes([1] + [0] * (n - 1)) if n else b""
        self.files[f".{self.encoder}.items.rows"].write(bytes(starts))
        r = (np.concatenate([np.asarray(i, np.float32).reshape(-1, self.dim)
                             for i in items]) if items
             else np.zeros((0, self.dim), np.float32))
        if self.bf16:
            bits = r.view(np.uint32)
            data = ((bits + 0x7FFF + ((bits >> 16) & 1)) >> 16).astype("<u2").tobytes()
        else:
            data = r.astype("<f4").tobytes()
        self.files[f".{self.encoder}.feat.rows"].write(data)
        self.lengths.append(len(ids))
        self.rows.append(self.rows[-1] + r.shape[0])

    def close(self):
        """Writes the headers and renames every file into place."""
        for f in self.files.values():
            f.close()
        n = len(self.lengths)
        size = np.dtype(self.dtype).itemsize
        pointers = np.zeros(n, dtype="<i8")
        if n:
            pointers[1:] = np.cumsum(np.asarray(self.lengths[:-1], dtype=np.int64)) * size
        with open(self.prefix + ".idx.partial", "wb") as f:
            f.write(b"MMIDIDX\0\0")
            f.write(struct.pack("<QBQQ", 1, self.code, n, n + 1))
            f.write(np.asarray(self.lengths, dtype="<i4").tobytes())
            f.write(pointers.tobytes())
            f.write(np.arange(n + 1, dtype="<i8").tobytes())
        total = sum(self.lengths)
        with open(self.prefix + ".mask.head.partial", "wb") as f:
            f.write(b"MIMOMASK" + struct.pack("<QQ", 1, total))
        feat = f"{self.prefix}.{self.encoder}.feat.partial"
        with open(feat, "wb") as f:
            f.write(b"MIMOFEAT" + struct.pack("<QIIQQ", 1, 2 if self.bf16 else 1, 0,
                                              self.dim, n))
            f.write(np.asarray(self.rows, dtype="<u8").tobytes())
            with open(self.parts[f".{self.encoder}.feat.rows"], "rb") as rows:
                while chunk := rows.read(1 << 24):
                    f.write(chunk)
        os.remove(self.parts[f".{self.encoder}.feat.rows"])
        items = f"{self.prefix}.{self.encoder}.items.partial"
        with open(items, "wb") as f:
            f.write(b"MIMOITEM" + struct.pack("<QQ", 1, self.rows[-1]))
            with open(self.parts[f".{self.encoder}.items.rows"], "rb") as body:
                while chunk := body.read(1 << 24):
                    f.write(chunk)
        os.remove(self.parts[f".{self.encoder}.items.rows"])
        with open(self.prefix + ".mask.head.partial", "ab") as f:
            with open(self.parts[".mask"], "rb") as body:
                while chunk := body.read(1 << 24):
                    f.write(chunk)
        os.remove(self.parts[".mask"])
        os.replace(self.parts[".bin"], self.prefix + ".bin")
        os.replace(self.prefix + ".idx.partial", self.prefix + ".idx")
        os.replace(self.prefix + ".mask.head.partial", self.prefix + ".mask")
        os.replace(feat, f"{self.prefix}.{self.encoder}.feat")
        os.replace(items, f"{self.prefix}.{self.encoder}.items")

    def abandon(self):
        for f in self.files.values():
            f.close()
        for p in list(self.parts.values()) + [self.prefix + s for s in (
                ".idx.partial", ".mask.head.partial", f".{self.encoder}.feat.partial",
                f".{self.encoder}.items.partial")]:
            try:
                os.remove(p)
            except OSError:  # not there, or not ours to remove
                pass
