#!/usr/bin/env python3
"""PyTorch peer of bench/bench_cuda.cpp: the same cases on device-resident tensors, timed with
CUDA events (median): eager, eager captured in a CUDA graph (`torch.graph`: replays cost no host
dispatch, so launch-bound cases show the kernels' own time, as rlx's captured runs do) and
torch.compile. Prints `name,impl,p50_ms,extra` lines."""
import math
import os
import sys
import time

import torch
import torch.nn.functional as F

dev = "cuda"
T0 = time.time()
BUDGET_S = float(os.environ.get("RLX_PEER_BUDGET_S", "420"))  # stop compiling new graphs after this


def p50(fn, iters=30, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b))
    ts.sort()
    return ts[len(ts) // 2]


def out(name, impl, ms, extra=""):
    print(f"{name},{impl},{ms:.4f},{extra}", flush=True)


def tag(dt):
    return {torch.bfloat16: "bf16", torch.float16: "fp16", torch.float32: "fp32"}[dt]


def rnd(*shape, dt, amp=0.03):
    return (torch.rand(*shape, device=dev, dtype=torch.float32) * 2 - 1).mul_(amp).to(dt)


def graphed(fn):
    """fn captured in a CUDA graph after a warm-up on a side stream; returns the replay."""
    side = torch.cuda.Stream()
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        for _ in range(3):
            fn()
    torch.cuda.current_stream().wait_stream(side)
    g = torch.cuda.CUDAGraph()
    with torch.cuda.graph(g):
        fn()
    return g.replay


def eager_and_graph(name, fn, iters, extra=lambda ms: ""):
    """Times fn eagerly, then captured in a CUDA graph (call under inference_mode)."""
    ms = p50(fn, iters)
    out(name, "torch", ms, extra(ms))
    try:
        ms = p50(graphed(fn), iters)
        out(name, "torch.graph", ms, extra(ms))
    except Exception as e:  # report, never hide
        out(name, "torch.graph", float("nan"), f"failed: {type(e).__name__}")


def both(name, fn, iters, extra=lambda ms: ""):
    with torch.inference_mode():
        eager_and_graph(name, fn, iters, extra)
        if time.time() - T0 > BUDGET_S:
            out(name, "torch.compile", float("nan"), "skipped: time budget")
            return
        try:
            c = torch.compile(fn)
            ms = p50(c, iters, warmup=3)
            out(name, "torch.compile", ms, extra(ms))
        except Exception as e:  # report, never hide
            out(name, "torch.compile", float("nan"), f"failed: {type(e).__name__}")


# ---- BERT-base ----
def bert(batch, dt):
    E, H, Fd, S, L = 768, 12, 3072, 128, 12
    W = [dict(qkv=rnd(E, 3 * E, dt=dt), qkv_b=rnd(3 * E, dt=dt), o=rnd(E, E, dt=dt), o_b=rnd(E, dt=dt),
              g1=torch.ones(E, device=dev, dtype=dt), b1=torch.zeros(E, device=dev, dtype=dt),
              f1=rnd(E, Fd, dt=dt), f1_b=rnd(Fd, dt=dt), f2=rnd(Fd, E, dt=dt), f2_b=rnd(E, dt=dt),
              g2=torch.ones(E, device=dev, dtype=dt), b2=torch.zeros(E, device=dev, dtype=dt)) for _ in range(L)]
    x0 = rnd(batch, S, E, dt=dt, amp=1.0)
    mask = torch.ones(batch, S, device=dev, dtype=torch.bool)

    def fwd():
        x = x0
        am = mask[:, None, None, :]
        for w in W:
            qkv = x @ w["qkv"] + w["qkv_b"]
            q, k, v = qkv.view(batch, S, 3, H, E // H).permute(2, 0, 3, 1, 4)
            a = F.scaled_dot_product_attention(q, k, v, attn_mask=am).transpose(1, 2).reshape(batch, S, E)
            x = F.layer_norm(x + a @ w["o"] + w["o_b"], (E,), w["g1"], w["b1"], 1e-12)
            f = F.gelu(x @ w["f1"] + w["f1_b"]) @ w["f2"] + w["f2_b"]
            x = F.layer_norm(x + f, (E,), w["g2"], w["b2"], 1e-12)
        return x

    both(f"bert_base_b{batch}_{tag(dt)}", fwd, 30)


# ---- Llama-style decoder ----
E, H, HKV, D, I, L = 2048, 32, 8, 64, 5632, 16


def llama_weights(dt):
    return [dict(n1=torch.ones(E, device=dev, dtype=dt), q=rnd(E, H * D, dt=dt), k=rnd(E, HKV * D, dt=dt),
                 v=rnd(E, HKV * D, dt=dt), o=rnd(H * D, E, dt=dt), n2=torch.ones(E, device=dev, dtype=dt),
                 gate=rnd(E, I, dt=dt), up=rnd(E, I, dt=dt), down=rnd(I, E, dt=dt)) for _ in range(L)]


def rms(x, g, eps=1e-6):
    xf = x.float()
    return (xf * torch.rsqrt(xf.pow(2).mean(-1, keepdim=True) + eps)).to(x.dtype) * g


def rope(x, cos, sin):  # x (B, S, H, D), NeoX halves
    h = x.shape[-1] // 2
    x1, x2 = x[..., :h], x[..., h:]
    c, s = cos[None, :, None, :], sin[None, :, None, :]
    return torch.cat([x1 * c - x2 * s, x2 * c + x1 * s], -1)


def tables(pos, dt):
    inv = 10000.0 ** (-torch.arange(0, D // 2, device=dev, dtype=torch.float32) * 2 / D)
    ang = pos[:, None].float() * inv[None, :]
    return ang.cos().to(dt), ang.sin().to(dt)


def llama_layer(x, w, cos, sin, kc=None, vc=None):
    B, S, _ = x.shape
    h = rms(x, w["n1"])
    q = rope((h @ w["q"]).view(B, S, H, D), cos, sin)
    k = rope((h @ w["k"]).view(B, S, HKV, D), cos, sin)
    v = (h @ w["v"]).view(B, S, HKV, D)
    if kc is not None:
        k, v = torch.cat([kc, k], 1), torch.cat([vc, v], 1)
    qt, kt, vt = q.transpose(1, 2), k.transpose(1, 2), v.transpose(1, 2)
    a = F.scaled_dot_product_attention(qt, kt, vt, is_causal=kc is None, enable_gqa=True)
    x = x + a.transpose(1, 2).reshape(B, S, H * D) @ w["o"]
    y = rms(x, w["n2"])
    return x + (F.silu(y @ w["gate"]) * (y @ w["up"])) @ w["down"]


def llama_prefill(S, dt):
    W = llama_weights(dt)
    x0 = rnd(1, S, E, dt=dt, amp=1.0)
    cos, sin = tables(torch.arange(S, device=dev), dt)

    def fwd():
        x = x0
        for w in W:
            x = llama_layer(x, w, cos, sin)
        return x

    both(f"llama_prefill{S}_{tag(dt)}", fwd, 10)


def llama_decode(past, dt):
    W = llama_weights(dt)
    caches = [(rnd(1, past, HKV, D, dt=dt, amp=1.0), rnd(1, past, HKV, D, dt=dt, amp=1.0)) for _ in range(L)]
    x0 = rnd(1, 1, E, dt=dt, amp=1.0)
    cos, sin = tables(torch.tensor([past], device=dev), dt)

    def fwd():
        x = x0
        for w, (kc, vc) in zip(W, caches):
            x = llama_layer(x, w, cos, sin, kc, vc)
        return x

    both(f"llama_decode_ctx{past}_{tag(dt)}", fwd, 30)


def gemm(n, dt, tf32=False):
    torch.backends.cuda.matmul.allow_tf32 = tf32
    a, b = rnd(n, n, dt=dt), rnd(n, n, dt=dt)
    with torch.inference_mode():
        ms = p50(lambda: a @ b, 20)
    out(f"gemm{n}_{tag(dt)}{'_tf32' if tf32 else ''}", "torch", ms, f"{2 * n ** 3 / (ms * 1e9):.1f} TFLOP/s")
    torch.backends.cuda.matmul.allow_tf32 = False


def gemv(k, n, dt):
    x, w = rnd(1, k, dt=dt, amp=1.0), rnd(k, n, dt=dt)
    with torch.inference_mode():
        eager_and_graph(f"gemv_1x{k}x{n}_{tag(dt)}", lambda: x @ w, 50,
                        lambda ms: f"{k * n * x.element_size() / (ms * 1e6):.0f} GB/s")


def attention(b, h, s, d, dt):
    q, k, v = (rnd(b, h, s, d, dt=dt, amp=1.0) for _ in range(3))
    flops = 4.0 * b * h * s * s * d / 2
    with torch.inference_mode():
        eager_and_graph(f"attn_causal_b{b}h{h}s{s}d{d}_{tag(dt)}",
                        lambda: F.scaled_dot_product_attention(q, k, v, is_causal=True), 20,
                        lambda ms: f"{flops / (ms * 1e9):.1f} TFLOP/s")


def rows(kind, r, c, dt):
    x = rnd(r, c, dt=dt, amp=1.0)
    g, bb = torch.ones(c, device=dev, dtype=dt), torch.zeros(c, device=dev, dtype=dt)
    fn = (lambda: F.layer_norm(x, (c,), g, bb)) if kind == "layernorm" else (lambda: torch.softmax(x, -1))
    with torch.inference_mode():
        eager_and_graph(f"{kind}_{r}x{c}_{tag(dt)}", fn, 20,
                        lambda ms: f"{2.0 * r * c * x.element_size() / (ms * 1e6):.0f} GB/s")


if __name__ == "__main__":
    only = sys.argv[1] if len(sys.argv) > 1 else ""
    want = lambda n: not only or only in n
    if want("gemm"):
        gemm(4096, torch.bfloat16); gemm(8192, torch.bfloat16); gemm(4096, torch.float32); gemm(4096, torch.float32, True)
    if want("gemv"):
        for dt in (torch.bfloat16, torch.float32):
            gemv(4096, 4096, dt); gemv(4096, 14336, dt); gemv(14336, 4096, dt)
            # the Llama decode benchmark's products: QKV, O, gate+up, down
            gemv(2048, 3072, dt); gemv(2048, 2048, dt); gemv(2048, 11264, dt); gemv(5632, 2048, dt)
    if want("attn"):
        for dt in (torch.bfloat16, torch.float16):
            attention(4, 32, 2048, 128, dt); attention(4, 32, 2048, 64, dt)
    if want("rows"):
        rows("layernorm", 16384, 4096, torch.bfloat16); rows("softmax", 16384, 4096, torch.bfloat16)
        rows("layernorm", 16384, 4096, torch.float32)
    if want("bert"):
        for dt in (torch.bfloat16, torch.float32):
            for b in (1, 32):
                bert(b, dt)
    # "llama" runs both; "decode" / "prefill" one of them (as bench_cuda).
    for dt in (torch.bfloat16, torch.float32):
        if want("llama") or want("decode"):
            llama_decode(511, dt)
        if want("llama") or want("prefill"):
            llama_prefill(512, dt)
