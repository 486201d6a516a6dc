#!/usr/bin/env python3
"""rlx export-web end to end: each model of tests/web/web_models.py is run by `rlx run` on the CPU
(the oracle), exported with `rlx export-web`, and run in headless Chromium (WebGPU on SwiftShader
without a GPU) through the bundle's own rlx-web.js, loaded by tests/web/harness.html from a local
HTTP server. Every output must match the CPU's, a second run must give the same bytes, and bad
inputs must be refused with RlxError messages.

  /usr/bin/python3 tests/web/test_export_web.py --rlx build/release/rlx [--chromium chromium]
                                                [--cases bert,cnn,bert_f16w,mlp16] [--keep DIR]

Exit 0: passed; 1: failed; 77: skipped (no Chromium, or no WebGPU adapter for rlx), reason printed.
"""
from __future__ import annotations

import argparse
import base64
import http.server
import json
import queue
import shutil
import subprocess
import sys
import tempfile
import threading
import time
from pathlib import Path

import numpy as np

HERE = Path(__file__).resolve().parent
sys.path.insert(0, str(HERE))
import web_models  # noqa: E402

SKIP = 77
NP = {"f32": np.float32, "i64": np.int64, "i32": np.int32, "u8": np.uint8, "bool": np.uint8}
# The refusals the harness provokes, and a phrase each message must contain.
REFUSALS = [("short input", "takes"), ("unknown input", "has no input"), ("missing input", "has no value"),
            ("unknown output", "has no output"), ("i64 beyond 32 bits", "does not fit"),
            ("index out of range", "out of range")]


def run(cmd):
    p = subprocess.run([str(c) for c in cmd], capture_output=True, text=True)
    if p.returncode != 0:
        raise RuntimeError(f"{' '.join(map(str, cmd))} failed ({p.returncode}):\n{p.stdout}{p.stderr}")
    return p.stdout


def browser_result(chromium: str, folder: Path, timeout: float) -> dict:
    """Serves `folder`, opens harness.html in headless Chromium, returns what the page posts."""
    got: queue.Queue = queue.Queue()

    class Handler(http.server.SimpleHTTPRequestHandler):
        def __init__(self, *a, **kw):
            super().__init__(*a, directory=str(folder), **kw)

        def do_POST(self):  # noqa: N802
            body = self.rfile.read(int(self.headers["Content-Length"]))
            self.send_response(200)
            self.end_headers()
            got.put(body)

        def log_message(self, *a):
            pass

    server = http.server.ThreadingHTTPServer(("127.0.0.1", 0), Handler)
    threading.Thread(target=server.serve_forever, daemon=True).start()
    profile = tempfile.mkdtemp(prefix="rlx-chromium-")
    url = f"http://127.0.0.1:{server.server_address[1]}/harness.html"
    cmd = [chromium, "--headless=new", "--no-sandbox", "--disable-gpu-sandbox", "--disable-dev-shm-usage",
           "--enable-unsafe-webgpu", "--enable-features=Vulkan", "--use-angle=swiftshader",
           "--no-first-run", "--no-default-browser-check", f"--user-data-dir={profile}", url]
    proc = subprocess.Popen(cmd, stdout=subprocess.DEVNULL, stderr=subprocess.PIPE, text=True)
    try:
        body = got.get(timeout=timeout)
    except queue.Empty:
        proc.kill()
        err = proc.communicate()[1]
        raise RuntimeError(f"no result from Chromium within {timeout:.0f} s; its stderr ends:\n{err[-3000:]}")
    finally:
        if proc.poll() is None:
            proc.kill()
            proc.wait()
        server.shutdown()
        shutil.rmtree(profile, ignore_errors=True)
    return json.loads(body)


# (case, model, extra export-web arguments, max error / max |value| allowed per output): f16
# weights round every weight to f16, so that case allows the rounding's effect; mlp16 computes in
# f16 (the CPU rounds after every op, WebGPU once per kernel).
CASES = [("bert", "bert", [], 1e-4), ("cnn", "cnn", [], 1e-4), ("bert_f16w", "bert", ["--weights", "f16"], 1e-2),
         ("mlp16", "mlp16", [], 1e-2)]
# Cases whose f16 weights only matmuls read: how many the bundle holds packed (two per word).
PACKED = {"mlp16": 2}


def check_model(name: str, model_name: str, export_args: list, rtol: float, args, work: Path) -> list[str]:
    data, inputs, dims = web_models.MODELS[model_name]()
    d = work / name
    d.mkdir()
    model = d / f"{name}.onnx"
    model.write_bytes(data)
    feeds = []
    for k, v in inputs.items():
        np.save(d / f"{k}.npy", v)
        feeds += ["--input", f"{k}={d / (k + '.npy')}"]
    run([args.rlx, "run", model, *feeds, "--save-outputs", d / "cpu"])
    bundle = d / "bundle"
    t0 = time.time()
    run([args.rlx, "export-web", model, bundle, *export_args,
         *sum((["--dim", f"{k}={v}"] for k, v in dims.items()), [])])
    export_s = time.time() - t0
    shutil.copy(HERE / "harness.html", bundle / "harness.html")
    spec = {}
    for k, v in inputs.items():
        (bundle / f"in_{k}.bin").write_bytes(np.ascontiguousarray(v).tobytes())
        spec[k] = {"dtype": {np.dtype(np.float32): "f32", np.dtype(np.int64): "i64"}[v.dtype], "file": f"in_{k}.bin"}
    (bundle / "inputs.json").write_text(json.dumps(spec))
    res = browser_result(args.chromium, bundle, args.timeout)
    if "error" in res:
        return [f"{name}: the page failed: {res['error']}"]
    fails = []
    manifest = json.loads((bundle / "model.json").read_text())
    print(f"{name}: exported in {export_s:.2f} s ({len(manifest['kernels'])} kernels, "
          f"{sum(c['op'] == 'dispatch' for c in manifest['commands'])} dispatches, "
          f"{manifest['weights']['bytes']} weight bytes)")
    print(f"  {'output':<20} {'dims':<16} {'max |err|':>10} {'max |ref|':>10} {'rel':>9}")
    for oname, o in res["outputs"].items():
        ref = np.load(d / "cpu" / f"{oname}.npy")
        got = np.frombuffer(base64.b64decode(o["data"]), NP[o["dtype"]]).reshape(o["dims"])
        if got.shape != ref.shape:
            fails.append(f"{name}/{oname}: shape {got.shape}, the CPU gives {ref.shape}")
            continue
        err = float(np.max(np.abs(got.astype(np.float64) - ref))) if ref.size else 0.0
        scale = float(np.max(np.abs(ref))) if ref.size else 0.0
        rel = err / scale if scale else err
        print(f"  {oname:<20} {str(list(o['dims'])):<16} {err:10.3g} {scale:10.3g} {rel:9.2e}")
        if not np.all(np.isfinite(got)) or rel > rtol:
            fails.append(f"{name}/{oname}: max error {err:.3g} is {rel:.2e} of the largest value (limit {rtol})")
    if name in PACKED:  # f16 weights the page writes as they are (no widening form): held packed
        packed = sum(b["role"] in ("param", "constant") and "init" in b and len(b["init"]) == 2
                     for b in manifest["buffers"])
        print(f"  weights held as packed 16-bit values: {packed}")
        if packed != PACKED[name]:
            fails.append(f"{name}: {packed} weights are held packed, expected {PACKED[name]}")
    if set(res["outputs"]) != set(o["name"] for o in manifest["outputs"]):
        fails.append(f"{name}: outputs {sorted(res['outputs'])}, the bundle has {[o['name'] for o in manifest['outputs']]}")
    if not res["repeat_equal"]:
        fails.append(f"{name}: a second run gave other bytes")
    wanted = REFUSALS if manifest["inputs"][0]["dtype"] == "i64" else REFUSALS[:4]
    for (what, phrase), msg in zip(wanted, res["refusals"]):
        ok = msg.startswith("rlx: ") and phrase in msg
        print(f"  refused {what}: {msg}")
        if not ok:
            fails.append(f"{name}: {what}: expected an RlxError saying '{phrase}', got: {msg}")
    return fails


def main() -> int:
    ap = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    ap.add_argument("--rlx", required=True)
    ap.add_argument("--chromium", default=shutil.which("chromium") or "chromium")
    ap.add_argument("--cases", default=",".join(c[0] for c in CASES))
    ap.add_argument("--keep", help="keep the models and bundles in this folder")
    ap.add_argument("--timeout", type=float, default=180.0, help="seconds for each page")
    args = ap.parse_args()
    if not shutil.which(args.chromium):
        print(f"SKIP: no Chromium ('{args.chromium}'); scripts/install-deps.sh installs Debian's chromium")
        return SKIP
    probe = subprocess.run([args.rlx, "check", "--device", "webgpu", "--help"], capture_output=True, text=True)
    if probe.returncode != 0:
        print(f"FAIL: {args.rlx} does not run: {probe.stderr}")
        return 1
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rlx-web-"))
    if args.keep:
        shutil.rmtree(work, ignore_errors=True)
        work.mkdir(parents=True)
    fails = []
    try:
        for name, model_name, export_args, rtol in CASES:
            if name not in args.cases.split(","):
                continue
            try:
                fails += check_model(name, model_name, export_args, rtol, args, work)
            except RuntimeError as e:
                if "no WebGPU device" in str(e):
                    print(f"SKIP: rlx has no WebGPU adapter to compile with: {e}")
                    return SKIP
                fails.append(f"{name}: {e}")
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    for f in fails:
        print("FAIL:", f)
    print("web export:", "FAILED" if fails else "passed", f"({args.cases})")
    return 1 if fails else 0


if __name__ == "__main__":
    sys.exit(main())
