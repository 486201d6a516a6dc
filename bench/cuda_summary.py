#!/usr/bin/env python3
"""Joins bench_cuda (rlx) and cuda_peer.py (PyTorch) CSV lines into one table with ratios."""
import math
import sys

rows, order = {}, []
for path in sys.argv[1:]:
    for line in open(path):
        parts = line.strip().split(",", 3)
        if len(parts) < 3:
            continue
        name, impl, ms = parts[0], parts[1], parts[2]
        try:
            ms = float(ms)
        except ValueError:
            continue
        if name not in rows:
            rows[name] = {}
            order.append(name)
        rows[name][impl] = (ms, parts[3] if len(parts) > 3 else "")

# torch: eager; torch.graph: eager captured in a CUDA graph; torch.compile: default mode.
fmt = "{:<30} {:>10} {:>10} {:>12} {:>14} {:>9} {:>9} {:>9}  {}"
print(fmt.format("case (p50 ms, device time)", "rlx", "torch", "torch.graph", "torch.compile", "t/rlx", "tg/rlx",
                 "tc/rlx", "rlx note"))
for n in order:
    r = rows[n]
    get = lambda k: r.get(k, (math.nan, ""))[0]
    rl, te, tg, tc = get("rlx"), get("torch"), get("torch.graph"), get("torch.compile")
    if n.startswith("d2d"):
        rl = get("cuda")
    ratio = lambda a: f"{a / rl:.2f}" if rl == rl and a == a and rl > 0 else "-"
    f = lambda v: f"{v:.4f}" if v == v else "-"
    note = r.get("rlx", r.get("cuda", (0, "")))[1]
    print(fmt.format(n, f(rl), f(te), f(tg), f(tc), ratio(te), ratio(tg), ratio(tc), note))

# The Vulkan and WebGPU backends on the same GPU (bench_cuda --device vulkan|webgpu), against the
# CUDA backend and PyTorch eager: cuda/x > 1 means the CUDA backend takes longer.
for impl, label in (("rlx-vulkan", "vk"), ("rlx-webgpu", "wg")):
    if not any(impl in r for r in rows.values()):
        continue
    print()
    fmt = "{:<30} {:>12} {:>10} {:>10} {:>9} {:>9}  {}"
    print(fmt.format("case (p50 ms, device time)", impl, "rlx-cuda", "torch", "cuda/" + label, "t/" + label,
                     impl[4:] + " note"))
    for n in order:
        r = rows[n]
        if impl not in r:
            continue
        get = lambda k: r.get(k, (math.nan, ""))[0]
        x, cu, te = get(impl), get("rlx"), get("torch")
        ratio = lambda a: f"{a / x:.2f}" if x == x and a == a and x > 0 else "-"
        f = lambda v: f"{v:.4f}" if v == v else "-"
        print(fmt.format(n, f(x), f(cu), f(te), ratio(cu), ratio(te), r[impl][1]))
