#!/usr/bin/env python3
"""Per-call overhead of the rlx Python module: a tiny compiled graph (y = relu(x + 1), x f32[1,8],
CPU, one thread) called from Python vs the same call from C++ (bench/python_overhead.cpp,
measured in the same run). Target: Python < 10 us above C++.

    PYTHONPATH=build/release/python python3 bench/python_overhead.py [--cpp build/release/python_overhead]
"""
import argparse
import os
import statistics
import subprocess
import sys
import time
from pathlib import Path

import numpy as np

import rlx


def per_call_us(fn, calls, rounds):
    for _ in range(1000):
        fn()
    times = []
    for _ in range(rounds):
        t0 = time.perf_counter()
        for _ in range(calls):
            fn()
        times.append((time.perf_counter() - t0) / calls * 1e6)
    return statistics.median(times), min(times)


def main():
    root = Path(__file__).resolve().parents[1]
    ap = argparse.ArgumentParser(description=__doc__.splitlines()[0])
    ap.add_argument("--cpp", default=str(root / "build" / "release" / "python_overhead"), help="the C++ bench binary")
    ap.add_argument("--calls", type=int, default=20000, help="calls per timed round")
    ap.add_argument("--rounds", type=int, default=7)
    args = ap.parse_args()
    if not os.path.exists(args.cpp):
        sys.exit(f"no C++ bench at {args.cpp}: build it with `cmake --build build/release --target python_overhead`")
    cpp = subprocess.run([args.cpp, str(args.calls), str(args.rounds)], check=True, capture_output=True, text=True).stdout
    cpp_us = float(next(line.split()[1] for line in cpp.splitlines() if line.startswith("cpp_run_us")))

    g = rlx.Graph()
    x = g.input("x", [1, 8])
    g.output(g.relu(x + 1.0), "y")
    model = rlx.compile(g, num_threads=1)
    xv = np.full((1, 8), 0.5, np.float32)
    feeds = {"x": xv}
    assert np.array_equal(model(x=xv), np.full((1, 8), 1.5, np.float32))
    xt = rlx.Tensor(xv)

    rows = [
        ("model(x=array)", lambda: model(x=xv)),
        ("model(array)  (positional)", lambda: model(xv)),
        ("model.run({'x': array})", lambda: model.run(feeds)),
        ("model(x=rlx.Tensor)", lambda: model(x=xt)),
        ("model.run(..., as_tensors=True)", lambda: model.run(feeds, as_tensors=True)),
        ("empty Python call (floor)", lambda: None),
    ]
    print(f"C++ CompiledGraph::run: {cpp_us:.3f} us per call (median of {args.rounds} rounds of {args.calls})\n")
    print(f"{'Python call':<34} {'median us':>10} {'min us':>10} {'vs C++ us':>10}")
    worst = 0.0
    for name, fn in rows:
        med, best = per_call_us(fn, args.calls, args.rounds)
        diff = med - cpp_us
        if not name.startswith("empty"):
            worst = max(worst, diff)
        print(f"{name:<34} {med:>10.3f} {best:>10.3f} {diff:>+10.3f}")
    print(f"\nworst overhead above C++: {worst:.3f} us per call (target < 10 us): {'ok' if worst < 10 else 'OVER'}")


if __name__ == "__main__":
    main()
