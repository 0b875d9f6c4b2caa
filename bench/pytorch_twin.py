#!/usr/bin/env python3
"""The language model mimo trains, in PyTorch eager: a peer to measure against.

Same architecture as mimo's language module (docs/runtime.md): token
embedding, pre-norm layers (RMSNorm eps 1e-5, Q/K/V/O projections without
bias, rotate-half RoPE with base 10000, causal softmax attention scaled by
1/sqrt(head_dim), SwiGLU MLP), final RMSNorm, output head, cross-entropy
over every position but the last, AdamW. Attention by default is what
eager PyTorch 1.13 offers: the [S, S] scores materialised per head, the
causal half masked after the fact; `--attention sdpa` uses
F.scaled_dot_product_attention (PyTorch 2's fused kernels, still eager).

On a GPU (`--device cuda`), `--dtype bf16` runs the forward under
torch.autocast (bf16 GEMMs with fp32 accumulation, fp32 master weights and
AdamW), the usual mixed precision of eager PyTorch; steps are timed with
torch.cuda.synchronize and the peak memory PyTorch allocated is reported.

`--microbatches M` accumulates the gradients of M batches before each
clip and AdamW step, as mimo's `num_microbatches` does (a step is then M
times `--batch` sequences).

`--compile` runs the same model through torch.compile (default mode; the
first step compiles, so it is left out of tokens/s as always; the AdamW
step stays eager). A failure to compile or run prints {"error": reason}
and exits 1. `--profile` (on a GPU) runs one more step after the timed ones
under torch.profiler with CUDA activities and adds "kernels": the 20 device
kernels (and copies) of most self time in that step, each {"name",
"calls", "ms"}, and "kernel_ms": the step's device time over all of them.

usage: pytorch_twin.py --hidden 512 --layers 4 --heads 8 --ffn 1536
       --vocab 8192 --seq 512 --batch 4 --steps 4 [--microbatches M]
       [--threads N]
       [--device cpu|cuda] [--dtype fp32|bf16] [--attention eager|sdpa]
       [--compile] [--profile]
Prints one JSON object: {"tokens_per_s": mean over steps 2.., "steps": [...]}
(and "peak_bytes" on a GPU).
"""
import argparse
import json
import math
import sys
import time

import torch
import torch.nn.functional as F


class RMSNorm(torch.nn.Module):
    def __init__(self, dim, eps=1e-5):
        super().__init__()
        self.eps = eps
        self.weight = torch.nn.Parameter(torch.ones(dim))

    def forward(self, x):
        return x * torch.rsqrt(x.pow(2).mean(-1, keepdim=True) + self.eps) * self.weight


SDPA = False  # --attention sdpa


def rope(x, positions):
    # x: [B, heads, S, d]; rotate-half with base 10000.
    d = x.shape[-1]
    half = d // 2
    inv = 10000.0 ** (-2.0 * torch.arange(half, dtype=torch.float32,
                                          device=x.device) / d)
    angles = positions[:, None].float() * inv[None, :]  # [S, half]
    cos, sin = angles.cos(), angles.sin()
    x1, x2 = x[..., :half], x[..., half:]
    return torch.cat([x1 * cos - x2 * sin, x2 * cos + x1 * sin], dim=-1)


class Layer(torch.nn.Module):
    def __init__(self, hidden, heads, ffn):
        super().__init__()
        self.heads = heads
        self.attn_norm = RMSNorm(hidden)
        self.wq = torch.nn.Linear(hidden, hidden, bias=False)
        self.wk = torch.nn.Linear(hidden, hidden, bias=False)
        self.wv = torch.nn.Linear(hidden, hidden, bias=False)
        self.wo = torch.nn.Linear(hidden, hidden, bias=False)
        self.mlp_norm = RMSNorm(hidden)
        self.gate = torch.nn.Linear(hidden, ffn, bias=False)
        self.up = torch.nn.Linear(hidden, ffn, bias=False)
        self.down = torch.nn.Linear(ffn, hidden, bias=False)

    def forward(self, x, positions, causal):
        B, S, H = x.shape
        d = H // self.heads
        h = self.attn_norm(x)
        q = self.wq(h).view(B, S, self.heads, d).transpose(1, 2)
        k = self.wk(h).view(B, S, self.heads, d).transpose(1, 2)
        v = self.wv(h).view(B, S, self.heads, d).transpose(1, 2)
        q, k = rope(q, positions), rope(k, positions)
        if SDPA:
            a = F.scaled_dot_product_attention(q.to(v.dtype), k.to(v.dtype), v,
                                               is_causal=True)
        else:
            scores = (q @ k.transpose(-1, -2)) / math.sqrt(d)
            scores = scores.masked_fill(causal, float("-inf"))
            a = torch.softmax(scores, dim=-1) @ v
        x = x + self.wo(a.transpose(1, 2).reshape(B, S, H))
        h = self.mlp_norm(x)
        return x + self.down(F.silu(self.gate(h)) * self.up(h))


class Model(torch.nn.Module):
    def __init__(self, vocab, hidden, layers, heads, ffn):
        super().__init__()
        self.embedding = torch.nn.Embedding(vocab, hidden)
        self.layers = torch.nn.ModuleList(Layer(hidden, heads, ffn) for _ in range(layers))
        self.final_norm = RMSNorm(hidden)
        self.head = torch.nn.Linear(hidden, vocab, bias=False)

    def forward(self, ids):
        S = ids.shape[1]
        positions = torch.arange(S, device=ids.device)
        causal = torch.triu(torch.ones(S, S, dtype=torch.bool, device=ids.device),
                            diagonal=1)
        x = self.embedding(ids)
        for layer in self.layers:
            x = layer(x, positions, causal)
        logits = self.head(self.final_norm(x))
        # Next-token loss over every position but the last (in fp32).
        return F.cross_entropy(logits[:, :-1].reshape(-1, logits.shape[-1]).float(),
                               ids[:, 1:].reshape(-1))


def profile_step(step, top=20):
    """The device kernels of one step(), by self time (torch.profiler)."""
    from torch.autograd import DeviceType
    from torch.profiler import ProfilerActivity, profile
    with profile(activities=[ProfilerActivity.CPU,
                             ProfilerActivity.CUDA]) as prof:
        step()
    kernels = []
    for e in prof.key_averages():
        if e.device_type != DeviceType.CUDA:
            continue
        # self_device_time_total since PyTorch 2.4, self_cuda_time_total before.
        us = getattr(e, "self_device_time_total", None)
        if us is None:
            us = e.self_cuda_time_total
        kernels.append({"name": e.key, "calls": e.count, "ms": us / 1e3})
    kernels.sort(key=lambda k: -k["ms"])
    return {"kernels": kernels[:top],
            "kernel_ms": sum(k["ms"] for k in kernels)}


def main():
    p = argparse.ArgumentParser()
    for name, default in (("hidden", 512), ("layers", 4), ("heads", 8), ("ffn", 1536),
                          ("vocab", 8192), ("seq", 512), ("batch", 4), ("steps", 4),
                          ("microbatches", 1), ("threads", 1)):
        p.add_argument("--" + name, type=int, default=default)
    p.add_argument("--device", default="cpu", choices=["cpu", "cuda"])
    p.add_argument("--dtype", default="fp32", choices=["fp32", "bf16"])
    p.add_argument("--attention", default="eager", choices=["eager", "sdpa"])
    p.add_argument("--compile", action="store_true")
    p.add_argument("--profile", action="store_true")
    a = p.parse_args()
    global SDPA
    SDPA = a.attention == "sdpa"
    torch.set_num_threads(a.threads)
    torch.manual_seed(0)
    cuda = a.device == "cuda"
    if cuda:
        torch.backends.cuda.matmul.allow_tf32 = False  # fp32 means fp32
    model = Model(a.vocab, a.hidden, a.layers, a.heads, a.ffn).to(a.device)
    opt = torch.optim.AdamW(model.parameters(), lr=1e-3, weight_decay=0.0)
    sync = torch.cuda.synchronize if cuda else (lambda: None)

    def step():
        batches = [torch.randint(0, a.vocab, (a.batch, a.seq), device=a.device)
                   for _ in range(a.microbatches)]
        sync()
        start = time.perf_counter()
        opt.zero_grad(set_to_none=True)
        total = torch.zeros((), device=a.device)
        for ids in batches:
            with torch.autocast(a.device, dtype=torch.bfloat16,
                                enabled=a.dtype == "bf16"):
                loss = model(ids) / a.microbatches
            loss.backward()
            total += loss.detach().float()
        torch.nn.utils.clip_grad_norm_(model.parameters(), 1.0)
        opt.step()
        sync()
        return total.item(), time.perf_counter() - start

    steps = []
    try:
        if a.compile:
            model = torch.compile(model)
        for n in range(a.steps):
            loss, seconds = step()
            steps.append({"step": n + 1, "loss": loss, "seconds": seconds,
                          "tokens": a.batch * a.seq * a.microbatches})
    except Exception as e:  # noqa: BLE001 (torch.compile's errors are many)
        if not a.compile:
            raise
        # The reason in one line (the traceback's last line is often advice).
        first = (str(e).strip().splitlines() or [""])[0]
        print(json.dumps({"error": "%s: %s" % (type(e).__name__, first[:400])}))
        sys.exit(1)
    later = steps[1:] or steps
    rate = sum(s["tokens"] for s in later) / sum(s["seconds"] for s in later)
    out = {"tokens_per_s": rate, "threads": a.threads, "device": a.device,
           "dtype": a.dtype, "attention": a.attention, "compile": a.compile,
           "steps": steps}
    if cuda:
        out["peak_bytes"] = torch.cuda.max_memory_allocated()
        if a.profile:
            try:
                out.update(profile_step(step))
            except Exception as e:  # noqa: BLE001 (no CUPTI, ...)
                out["kernels_error"] = "%s: %s" % (type(e).__name__, e)
    print(json.dumps(out))


if __name__ == "__main__":
    main()
