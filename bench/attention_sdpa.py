#!/usr/bin/env python3
"""PyTorch's attention, the baseline for mimo's (SPEC §23; run by
scripts/gpu-check.sh's attention phase beside `gpu_bench --only attention`).

F.scaled_dot_product_attention in bf16, causal, batch 1, 16 heads, in the
layout SDPA wants ([B, H, S, D]), at sequence 2048, 4096 and 8192 and head
dimension 64 and 128, on two of SDPA's backends, each forced with
torch.nn.attention.sdpa_kernel: FLASH_ATTENTION (`torch_flash`) and
CUDNN_ATTENTION (`torch_cudnn`). Forward: the call; backward: out.backward(dout)
(the gradients of q, k and v; the forward before it is not timed). Each is
timed with CUDA events, a few warm-up calls first, then the median of
--iters. TFLOP/s with FlashAttention's count: 4 d FLOPs per attended pair
and head forward, 2.5 times that backward, S (S + 1) / 2 pairs when causal.
A backend that is not available or raises is a row with nulls and the
reason. Without torch or a GPU every row is null (the reason printed) and
the exit status is still 0, so the script can be tried on any machine.

usage: bench/attention_sdpa.py [--iters N] [--warmup N] [--json FILE]
Prints a markdown table; --json writes {"rows": [{"backend", "seq", "heads",
"head_dim", "causal", "fwd_ms", "fwd_tflops", "bwd_ms", "bwd_tflops",
"error"}]}.
"""
import argparse
import json
import statistics
import warnings

SEQS = (2048, 4096, 8192)
HEAD_DIMS = (64, 128)
HEADS = 16
BACKENDS = ("torch_flash", "torch_cudnn")


def unavailable():
    """Why PyTorch's GPU attention cannot run here, or None."""
    try:
        import torch
    except ImportError as e:
        return "no torch here (%s)" % e
    if not torch.cuda.is_available():
        return "torch %s sees no CUDA device" % torch.__version__
    try:
        import torch.nn.attention  # noqa: F401 (PyTorch >= 2.3)
    except ImportError:
        return "torch %s has no torch.nn.attention.sdpa_kernel" % (
            torch.__version__)
    return None


def median_ms(torch, run, before, iters):
    """The median of `iters` timings of run() (CUDA events around it),
    before() called untimed ahead of each."""
    times = []
    for _ in range(iters):
        before()
        start = torch.cuda.Event(enable_timing=True)
        end = torch.cuda.Event(enable_timing=True)
        start.record()
        run()
        end.record()
        end.synchronize()
        times.append(start.elapsed_time(end))
    return statistics.median(times)


def measure(backend, seq, head_dim, args):
    import torch
    import torch.nn.functional as F
    from torch.nn.attention import SDPBackend, sdpa_kernel
    kind = {"torch_flash": SDPBackend.FLASH_ATTENTION,
            "torch_cudnn": SDPBackend.CUDNN_ATTENTION}[backend]
    shape = (1, HEADS, seq, head_dim)
    torch.manual_seed(0)
    q, k, v = (torch.randn(shape, device="cuda", dtype=torch.bfloat16,
                           requires_grad=True) for _ in range(3))
    dout = torch.randn(shape, device="cuda", dtype=torch.bfloat16)
    state = {}

    def forward():
        return F.scaled_dot_product_attention(q, k, v, is_causal=True)

    def fresh_graph():
        q.grad = k.grad = v.grad = None
        state["out"] = forward()

    def backward():
        state["out"].backward(dout)

    # SDPA says why a forced backend cannot take the case in warnings
    # before its "No available kernel" error: they are the reason.
    with warnings.catch_warnings(record=True) as said, sdpa_kernel([kind]):
        warnings.simplefilter("always")
        try:
            for _ in range(args.warmup):
                fresh_graph()
                backward()
            torch.cuda.synchronize()
            # The forward as training runs it: grad on, the softmax
            # statistics kept for the backward.
            fwd = median_ms(torch, forward, lambda: None, args.iters)
            bwd = median_ms(torch, backward, fresh_graph, args.iters)
        except Exception as e:  # noqa: BLE001 (any failure is the row's)
            reasons = [str(w.message) for w in said]
            first = (str(e).splitlines() or [type(e).__name__])[0]
            return {"error": " ".join([first] + reasons)[:600]}
    pairs = seq * (seq + 1) / 2
    flops = 4.0 * head_dim * HEADS * pairs
    return {"fwd_ms": fwd, "fwd_tflops": flops / fwd / 1e9,
            "bwd_ms": bwd, "bwd_tflops": 2.5 * flops / bwd / 1e9,
            "error": None}


def main():
    parser = argparse.ArgumentParser()
    parser.add_argument("--iters", type=int, default=20)
    parser.add_argument("--warmup", type=int, default=3)
    parser.add_argument("--json")
    args = parser.parse_args()
    why = unavailable()
    rows = []
    for backend in BACKENDS:
        for head_dim in HEAD_DIMS:
            for seq in SEQS:
                row = {"backend": backend, "seq": seq, "heads": HEADS,
                       "head_dim": head_dim, "causal": True,
                       "fwd_ms": None, "fwd_tflops": None,
                       "bwd_ms": None, "bwd_tflops": None, "error": why}
                if not why:
                    row.update(measure(backend, seq, head_dim, args))
                rows.append(row)
    if why:
        version = "not run"
    else:
        import torch
        version = "torch %s, %s, cuDNN %s" % (
            torch.__version__, torch.cuda.get_device_name(),
            torch.backends.cudnn.version())
    lines = ["## Attention: PyTorch SDPA (bf16, causal, %d heads, one "
             "sequence; %s)" % (HEADS, version), ""]
    if why:
        lines.append("Not measured: %s." % why)
    else:
        lines += ["`python3 bench/attention_sdpa.py --iters %d`: CUDA "
                  "events, the median of %d calls after %d warm-up; "
                  "backward is out.backward(dout)." % (
                      args.iters, args.iters, args.warmup), "",
                  "| backend | sequence | head dim | forward ms | forward "
                  "TFLOP/s | backward ms | backward TFLOP/s |",
                  "|---|---:|---:|---:|---:|---:|---:|"]
        for r in rows:
            if r["error"]:
                lines.append("| %s | %d | %d | failed: %s | | | |" % (
                    r["backend"], r["seq"], r["head_dim"],
                    r["error"].replace("|", "/").replace("\n", " ")))
            else:
                lines.append("| %s | %d | %d | %.3f | %.1f | %.3f | %.1f |" % (
                    r["backend"], r["seq"], r["head_dim"], r["fwd_ms"],
                    r["fwd_tflops"], r["bwd_ms"], r["bwd_tflops"]))
    print("\n".join(lines) + "\n")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"rows": rows}, f, indent=1)
            f.write("\n")


if __name__ == "__main__":
    main()
