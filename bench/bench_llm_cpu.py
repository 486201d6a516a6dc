#!/usr/bin/env python3
"""rlx against llama.cpp on the CPU: the same Llama GGUF files, prompt processing and greedy decode.

The peer is llama.cpp through the npm package node-llama-cpp (pinned below; it ships prebuilt CPU
binaries), installed by this script with npm into --peer-dir on its first run and driven by
bench/llama_cpp_peer.mjs. rlx is timed by build/release/bench_generate (rlx::Generator) on the same
file.

Models (no downloads): bench_generate --write-model writes a random-weight Llama (default 12
blocks, hidden 768, 12 heads / 4 KV heads, ffn 2048, vocab 32000: ~125M parameters) with F16
matrices and a synthetic SentencePiece tokenizer; `rlx quantize` converts that file to each other
scheme (every matrix, the embedding and output included; the norms stay F32).

For each file:
  1. (--check-types) Greedy token ids over --n steps from the same prompt ids (no BOS added by
     either), rlx and llama.cpp (1 thread, llama.cpp with an F32 KV cache like rlx's and flash
     attention off, which rounds to f16 inside on the CPU): how many
     agree before the first divergence, and the logit margins there (rlx's logits; llama.cpp's
     log-probabilities of the raw logits, whose differences are logit differences). Random weights
     give near-tied logits, so rlx also runs teacher-forced on llama.cpp's tokens: the steps whose
     argmax is the same, and the largest error of the logit differences (each id of both top-8
     lists minus llama.cpp's top token) over the steps.
  2. For each thread count, --rounds alternating rounds of rlx then llama.cpp (each process loads
     the model, warms up, then times --repeat runs of a --prompt-token prompt and --n greedy tokens
     and reports its medians; llama.cpp with its default F16 KV cache); the table has the median over
     the rounds. Prompt tokens/s = prompt tokens / time to the first generated token; decode tokens/s
     = (n - 1) / time from the first to the n-th token.

  /usr/bin/python3 bench/bench_llm_cpu.py [--types f16,q8_0,q4_0,q4_k] [--threads 1,2] [--rounds 3]
      [--repeat 3] [--prompt 128] [--n 64] [--ctx 256] [--layers 12 --hidden 768 --ffn 2048 ...]
      [--peer-dir ~/.cache/rlx/llama-cpp] [--keep DIR]
"""
from __future__ import annotations

import argparse
import json
import os
import re
import shutil
import statistics
import subprocess
import sys
import tempfile
from pathlib import Path

ROOT = Path(__file__).resolve().parent.parent
PEER_PKG = "node-llama-cpp@3.21.1"  # pinned; MIT; prebuilt llama.cpp binaries (its install script is skipped)


def run(cmd, what, env=None):
    r = subprocess.run([str(c) for c in cmd], capture_output=True, text=True, env=env)
    if r.returncode != 0:
        sys.exit(f"bench_llm_cpu: {what} failed ({r.returncode}):\n{r.stdout[-4000:]}\n{r.stderr[-4000:]}")
    return r.stdout


def ensure_peer(peer_dir: Path) -> None:
    """Installs the peer into peer_dir unless that pinned version is there already."""
    stamp = peer_dir / "VERSION"
    if stamp.exists() and stamp.read_text().strip() == PEER_PKG:
        return
    if not shutil.which("npm"):
        sys.exit("bench_llm_cpu: npm is needed to install the llama.cpp peer (node-llama-cpp)")
    peer_dir.mkdir(parents=True, exist_ok=True)
    print(f"bench_llm_cpu: installing {PEER_PKG} into {peer_dir}", file=sys.stderr)
    run(["npm", "install", "--prefix", peer_dir, "--ignore-scripts", "--no-audit", "--no-fund", "--silent", PEER_PKG],
        "npm install")
    stamp.write_text(PEER_PKG + "\n")


def parse_line(out: str, tag: str) -> dict:
    m = re.search(rf"^{tag} (.*)$", out, re.M)
    if not m:
        sys.exit(f"bench_llm_cpu: no {tag} line in:\n{out[-4000:]}")
    fields = dict(kv.split("=") for kv in m.group(1).split())
    return {k: float(v) for k, v in fields.items() if "/" not in v}  # host_picks=H/N stays out


def rlx_time(args, model: Path, ids: str, threads: int) -> dict:
    out = run([args.bench_generate, "--model", model, "--prompt-ids", ids, "--n", args.n, "--ctx", args.ctx,
               "--threads", threads, "--repeat", args.repeat], "bench_generate")
    return parse_line(out, "BENCH_GENERATE")


def peer_time(args, model: Path, ids: str, threads: int) -> dict:
    out = run(["node", ROOT / "bench" / "llama_cpp_peer.mjs", model, "--prompt-ids", ids, "--n", args.n, "--ctx",
               args.ctx, "--threads", threads, "--repeat", args.repeat], "llama_cpp_peer")
    return parse_line(out, "LLAMA_PEER")


def divergence(r: dict, l: dict):
    """(steps equal before the first divergence, a note on the margins there)."""
    a, b = r["tokens"], l["tokens"]
    k = next((i for i, (x, y) in enumerate(zip(a, b)) if x != y), min(len(a), len(b)))
    if k == min(len(a), len(b)):
        return k, "none"
    tr, tl = dict(map(tuple, r["top"][k])), dict(map(tuple, l["top"][k]))
    x, y = a[k], b[k]

    def gap(top: dict, first: int, second: int) -> str:
        return f"{top[first] - top[second]:.4f}" if first in top and second in top else "(not in the top 8)"

    return k, f"step {k}: rlx {x}, llama.cpp {y}; margins: rlx {gap(tr, x, y)}, llama.cpp {gap(tl, y, x)}"


def forced(r: dict, l: dict):
    """rlx fed llama.cpp's tokens: (steps with the same argmax, largest error of the logit differences
    to llama.cpp's top token over the ids in both top-8 lists)."""
    same = sum(1 for x, y in zip(r["tokens"], l["tokens"]) if x == y)
    worst = 0.0
    for tr, tl in zip(r["top"], l["top"]):
        dr, dl = dict(map(tuple, tr)), dict(map(tuple, tl))
        ref = tl[0][0]
        if ref not in dr:
            continue
        for i in dr.keys() & dl.keys():
            worst = max(worst, abs((dr[i] - dr[ref]) - (dl[i] - dl[ref])))
    return same, worst


def main():
    ap = argparse.ArgumentParser(description=__doc__.split("\n")[0])
    cache = Path(os.environ.get("XDG_CACHE_HOME", Path.home() / ".cache")) / "rlx" / "llama-cpp"
    ap.add_argument("--peer-dir", default=os.environ.get("RLX_LLAMA_CPP_DIR", str(cache)),
                    help="where node-llama-cpp is (installed there when missing)")
    ap.add_argument("--rlx", default=str(ROOT / "build" / "release" / "rlx"), help="for `rlx quantize`")
    ap.add_argument("--bench-generate", default=str(ROOT / "build" / "release" / "bench_generate"))
    ap.add_argument("--types", default="f16,q8_0,q4_0,q4_k", help="timed files")
    ap.add_argument("--check-types", default="f32,f16,q8_0,q4_0,q4_k", help="files whose greedy tokens are compared")
    ap.add_argument("--threads", default="1,2")
    ap.add_argument("--rounds", type=int, default=3, help="alternating rounds per runtime (the median counts)")
    ap.add_argument("--repeat", type=int, default=3, help="timed runs inside each process (its median counts)")
    ap.add_argument("--prompt", type=int, default=128, help="prompt tokens")
    ap.add_argument("--n", type=int, default=64, help="generated tokens (greedy)")
    ap.add_argument("--ctx", type=int, default=256, help="KV cache rows / context size of both")
    ap.add_argument("--layers", type=int, default=12)
    ap.add_argument("--hidden", type=int, default=768)
    ap.add_argument("--heads", type=int, default=12)
    ap.add_argument("--kv-heads", type=int, default=4)
    ap.add_argument("--ffn", type=int, default=2048)
    ap.add_argument("--vocab", type=int, default=32000)
    ap.add_argument("--no-timing", action="store_true", help="token agreement only")
    ap.add_argument("--keep", help="write the models and traces here (default: a temporary folder)")
    args = ap.parse_args()
    ensure_peer(Path(args.peer_dir))
    os.environ["RLX_LLAMA_CPP_DIR"] = args.peer_dir  # bench/llama_cpp_peer.mjs looks there
    threads = [int(t) for t in args.threads.split(",")]
    types = [t for t in args.types.split(",") if t]
    check_types = [t for t in args.check_types.split(",") if t]
    work = Path(args.keep) if args.keep else Path(tempfile.mkdtemp(prefix="rlx_llm_cpu_"))
    work.mkdir(parents=True, exist_ok=True)
    ids = ",".join(str(3 + (i * 7919) % (args.vocab - 3)) for i in range(args.prompt))
    rows, agree = [], []
    try:
        base = work / "model-f16.gguf"
        print(run([args.bench_generate, "--type", "f16", "--layers", args.layers, "--hidden", args.hidden, "--heads",
                   args.heads, "--kv-heads", args.kv_heads, "--ffn", args.ffn, "--vocab", args.vocab,
                   "--write-model", base], "bench_generate --write-model").strip(), file=sys.stderr)
        for t in dict.fromkeys(check_types + types):
            model = work / f"model-{t}.gguf"
            if t != "f16":
                run([args.rlx, "quantize", base, model, "--scheme", t], "rlx quantize")
            mib = model.stat().st_size / (1 << 20)
            if t in check_types:  # 1. greedy tokens
                trace = [args.bench_generate, "--model", model, "--prompt-ids", ids, "--n", args.n, "--ctx", args.ctx,
                         "--threads", 1, "--repeat", 0, "--trace"]
                run(trace + [work / f"rlx-{t}.json"], "bench_generate --trace")
                run(["node", ROOT / "bench" / "llama_cpp_peer.mjs", model, "--prompt-ids", ids, "--n", args.n, "--ctx",
                     args.ctx, "--threads", 1, "--repeat", 0, "--trace", work / f"llama-{t}.json"], "llama_cpp_peer --trace")
                lt = json.loads((work / f"llama-{t}.json").read_text())
                run(trace + [work / f"rlx-forced-{t}.json", "--follow-ids", ",".join(map(str, lt["tokens"]))],
                    "bench_generate --trace --follow-ids")
                k, note = divergence(json.loads((work / f"rlx-{t}.json").read_text()), lt)
                same, worst = forced(json.loads((work / f"rlx-forced-{t}.json").read_text()), lt)
                agree.append((t, k, same, worst, note))
                print(f"  {t}: {k}/{args.n} greedy tokens equal before the first divergence; {same}/{args.n} same argmax "
                      f"teacher-forced, logit-difference error <= {worst:.4f}; first divergence: {note}", file=sys.stderr)
            if t not in types:
                continue
            if args.no_timing:
                continue
            # 2. timings, alternating rounds
            for th in threads:
                rs, ls = [], []
                for _ in range(args.rounds):
                    rs.append(rlx_time(args, model, ids, th))
                    ls.append(peer_time(args, model, ids, th))
                med = lambda xs, key: statistics.median(x[key] for x in xs)  # noqa: E731
                row = (t, mib, th, med(rs, "prompt_tps"), med(ls, "prompt_tps"), med(rs, "decode_tps"),
                       med(ls, "decode_tps"))
                rows.append(row)
                print(f"  {t} t={th}: prompt rlx {row[3]:.1f} / llama.cpp {row[4]:.1f} tok/s, decode rlx {row[5]:.2f} / "
                      f"llama.cpp {row[6]:.2f} tok/s", file=sys.stderr)
    finally:
        if not args.keep:
            shutil.rmtree(work, ignore_errors=True)
    if rows:
        print(f"prompt {args.prompt} tokens, {args.n} greedy tokens, ctx {args.ctx}; medians of {args.rounds} rounds "
              f"x {args.repeat} runs\n")
        print("| model | MiB | threads | rlx prompt tok/s | llama.cpp prompt tok/s | rlx / llama.cpp | "
              "rlx decode tok/s | llama.cpp decode tok/s | rlx / llama.cpp |")
        print("|---|---:|---:|---:|---:|---:|---:|---:|---:|")
        for t, mib, th, rp, lp, rd, ld in rows:
            print(f"| {t} | {mib:.1f} | {th} | {rp:.1f} | {lp:.1f} | {rp / lp:.2f} | {rd:.2f} | {ld:.2f} | {rd / ld:.2f} |")
        print()
    if not agree:
        return
    print(f"| model | greedy tokens equal before the first divergence (of {args.n}) | same argmax, llama.cpp's tokens "
          f"fed to both | largest logit-difference error | first divergence (margins: each runtime's logit of its "
          "pick minus the other's) |")
    print("|---|---:|---:|---:|---|")
    for t, k, same, worst, note in agree:
        print(f"| {t} | {k} | {same} | {worst:.4f} | {note} |")

if __name__ == "__main__":
    main()
