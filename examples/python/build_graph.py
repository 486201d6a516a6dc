#!/usr/bin/env python3
"""Builds a small transformer-style block with rlx.Graph, compiles it, runs it from NumPy, and
checks it against NumPy; then saves it as graph JSON (runnable with `rlx run`).

    PYTHONPATH=build/release/python python3 examples/python/build_graph.py [out.json]"""
import sys

import numpy as np

import rlx

HIDDEN, FFN = 64, 256


def build() -> rlx.Graph:
    g = rlx.Graph()
    x = g.input("x", ["batch", "seq", HIDDEN])  # symbolic batch and sequence
    gamma = g.param("norm.weight", [HIDDEN])
    w_up = g.param("up.weight", [HIDDEN, FFN])
    w_down = g.param("down.weight", [FFN, HIDDEN])
    h = g.rms_norm(x, gamma, eps=1e-6)
    h = g.gelu(h @ w_up) @ w_down
    g.output(x + h, "y")  # residual
    return g


def reference(x, w):
    h = x / np.sqrt((x * x).mean(-1, keepdims=True) + 1e-6) * w["norm.weight"]
    up = h @ w["up.weight"]
    from math import erf, sqrt
    gelu = up * 0.5 * (1 + np.vectorize(erf)(up / sqrt(2)))
    return x + gelu @ w["down.weight"]


def main():
    g = build()
    rng = np.random.default_rng(0)
    weights = {p.name: (rng.standard_normal(p.shape) * 0.1).astype(np.float32) for p in g.param_info}
    for name, value in weights.items():
        g.set_weight(name, value)

    model = rlx.load(g, device="cpu")
    x = rng.standard_normal((2, 5, HIDDEN)).astype(np.float32)
    y = model(x=x)
    err = np.abs(y - reference(x, weights)).max()
    print(f"y: {y.dtype}{list(y.shape)}, max |rlx - numpy| = {err:.2e}")
    print(rlx.pass_report(g, "cpu"))

    if len(sys.argv) > 1:
        g.save_json(sys.argv[1])
        print(f"saved {sys.argv[1]}")


if __name__ == "__main__":
    main()
