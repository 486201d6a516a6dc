#!/usr/bin/env python3
"""Runs an ONNX model with rlx from Python: metadata, a run on random inputs, how each op runs.

    PYTHONPATH=build/release/python python3 examples/python/run_onnx.py [model.onnx] [--device cpu]

Without a model it runs tests/python/data/tiny_mlp.onnx (a small MLP with a symbolic batch dim)."""
import argparse
from pathlib import Path

import numpy as np

import rlx


def random_input(info, dims, rng):
    shape = [dims.get(d, 1) if isinstance(d, str) else d for d in info.shape]
    if info.dtype in ("f32", "f16", "f64"):
        return rng.standard_normal(shape).astype(rlx.numpy_dtype(info.dtype))
    if info.dtype == "bf16":
        return rlx.Tensor(rng.standard_normal(shape).astype(np.float32), "bf16")
    if info.dtype == "bool":
        return rng.integers(0, 2, shape).astype(np.bool_)
    return rng.integers(0, 4, shape).astype(rlx.numpy_dtype(info.dtype))


def main():
    default = Path(__file__).resolve().parents[2] / "tests" / "python" / "data" / "tiny_mlp.onnx"
    ap = argparse.ArgumentParser()
    ap.add_argument("model", nargs="?", default=str(default))
    ap.add_argument("--device", default="cpu")
    ap.add_argument("--dim", action="append", default=[], help="symbolic dim NAME=VALUE (default 1)")
    args = ap.parse_args()
    dims = {k: int(v) for k, v in (d.split("=", 1) for d in args.dim)}

    model = rlx.load(args.model, device=args.device)
    print(model)
    for kind, infos in (("input ", model.inputs), ("output", model.outputs)):
        for i in infos:  # dims: ints, or names for symbolic dims
            print(f"  {kind} {i.name}: {i.dtype}[{','.join(str(d) for d in i.shape)}]")

    rng = np.random.default_rng(0)
    feeds = {i.name: random_input(i, dims, rng) for i in model.inputs}
    for name, value in zip(model.output_names, model.run(feeds)):
        print(f"{name}: {value.dtype}{list(value.shape)} mean={value.astype(np.float64).mean():.6f}")

    print()
    print(rlx.check(model))


if __name__ == "__main__":
    main()
