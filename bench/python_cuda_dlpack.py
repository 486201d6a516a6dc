#!/usr/bin/env python3
"""torch CUDA tensor -> rlx CUDA model -> torch CUDA tensor: through the host (x.cpu().numpy(),
NumPy outputs, torch.from_numpy(...).cuda()) against DLPack with device outputs (no host copy),
per call, with the host <-> device bytes rlx moved per call (rlx.device_stats). Needs PyTorch and
a GPU.

    PYTHONPATH=build/release/python python3 bench/python_cuda_dlpack.py [--rows 64] [--dim 1024]
"""
import argparse
import statistics
import time

import numpy as np
import torch

import rlx


def timed(fn, calls, rounds):
    for _ in range(20):
        fn()
    torch.cuda.synchronize()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        torch.cuda.synchronize()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times)


def main():
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--rows", type=int, default=64)
    ap.add_argument("--dim", type=int, default=1024)
    ap.add_argument("--calls", type=int, default=200)
    ap.add_argument("--rounds", type=int, default=5)
    args = ap.parse_args()
    g = rlx.Graph()
    x = g.input("x", [args.rows, args.dim])
    g.output(g.gelu(x @ g.param("w", [args.dim, args.dim])), "y")
    model = rlx.compile(g, device="cuda")
    model.set_param("w", (np.random.default_rng(0).standard_normal((args.dim, args.dim)) * 0.02).astype(np.float32))
    xt = torch.randn(args.rows, args.dim, device="cuda")

    def via_host():
        (y,) = model.run({"x": xt.cpu().numpy()})
        return torch.from_numpy(y).cuda()

    def via_dlpack():
        (y,) = model.run({"x": xt}, device_outputs=True)
        return torch.from_dlpack(y)

    torch.testing.assert_close(via_host(), via_dlpack(), rtol=1e-5, atol=1e-5)
    print(f"x f32[{args.rows},{args.dim}] @ w f32[{args.dim},{args.dim}], gelu; {torch.cuda.get_device_name()}")
    print("| path | us per call | host->device bytes per call | device->host bytes per call |")
    print("|---|---|---|---|")
    for name, fn in (("x.cpu().numpy() -> NumPy -> .cuda()", via_host), ("DLPack, device_outputs=True", via_dlpack)):
        before = rlx.device_stats()
        fn()
        torch.cuda.synchronize()
        after = rlx.device_stats()
        us = timed(fn, args.calls, args.rounds)
        up = after["upload_bytes"] - before["upload_bytes"]
        down = after["download_bytes"] - before["download_bytes"]
        print(f"| {name} | {us:.1f} | {up} | {down} |")


if __name__ == "__main__":
    main()
