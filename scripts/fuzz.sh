#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build/fuzz) and runs each for SECONDS (default 30).
# Seeds: the ONNX models of ../shared/onnx-node when present, plus a small written safetensors
# file. A crash leaves its input in build/fuzz/crashes/<target>/ and makes the script fail;
# turn each such input into a regression test (tests/onnx, tests/io) before fixing it.
# Usage: scripts/fuzz.sh [SECONDS] [TARGET...]   (targets: fuzz_onnx fuzz_safetensors)
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
SECONDS_EACH="${1:-30}"
shift || true
TARGETS=("$@")
if [ "${#TARGETS[@]}" -eq 0 ]; then TARGETS=(fuzz_onnx fuzz_safetensors); fi
BUILD="$ROOT/build/fuzz"
JOBS="${FUZZ_BUILD_JOBS:-2}"

# rlx needs clang >= 16 (C++20 lambda captures of structured bindings); Debian 12:
#   apt-get install clang-16 libclang-rt-16-dev
CXX_FUZZ="${FUZZ_CXX:-}"
if [ -z "$CXX_FUZZ" ]; then
  for c in clang++-19 clang++-18 clang++-17 clang++-16 clang++; do
    if command -v "$c" >/dev/null; then CXX_FUZZ="$c"; break; fi
  done
fi
[ -n "$CXX_FUZZ" ] || { echo "fuzz.sh: no clang++ found (apt-get install clang-16 libclang-rt-16-dev)"; exit 1; }
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
  -DRLX_FUZZ=ON -DRLX_BUILD_TESTS=OFF -DRLX_BUILD_BENCH=OFF >/dev/null
ninja -C "$BUILD" -j"$JOBS" "${TARGETS[@]}"

status=0
for t in "${TARGETS[@]}"; do
  corpus="$BUILD/corpus/$t"
  crashes="$BUILD/crashes/$t"
  mkdir -p "$corpus" "$crashes"
  if [ "$t" = fuzz_onnx ] && [ -d "$ROOT/../shared/onnx-node" ] && [ -z "$(ls -A "$corpus")" ]; then
    n=0
    for m in "$ROOT"/../shared/onnx-node/test_*/model.onnx; do
      cp "$m" "$corpus/seed_$n.onnx"
      n=$((n + 1))
      [ "$n" -ge 300 ] && break
    done
  fi
  if [ "$t" = fuzz_safetensors ] && [ -z "$(ls -A "$corpus")" ]; then
    # 8-byte length, a header with two tensors, 16 bytes of data.
    python3 - "$corpus/seed.safetensors" <<'PY'
import json, struct, sys
h = json.dumps({"a": {"dtype": "F32", "shape": [2], "data_offsets": [0, 8]},
                "b": {"dtype": "I32", "shape": [2], "data_offsets": [8, 16]},
                "__metadata__": {"k": "v"}}).encode()
open(sys.argv[1], "wb").write(struct.pack("<Q", len(h)) + h + bytes(range(16)))
PY
  fi
  echo "fuzz.sh: running $t for ${SECONDS_EACH}s"
  if ! "$BUILD/$t" "$corpus" -max_total_time="$SECONDS_EACH" -max_len=65536 -rss_limit_mb=4096 \
      -artifact_prefix="$crashes/" -print_final_stats=1 2>"$BUILD/$t.log"; then
    echo "fuzz.sh: $t found a crash; inputs in $crashes (log: $BUILD/$t.log)"
    tail -40 "$BUILD/$t.log"
    status=1
  else
    grep -E "stat::number_of_executed_units|Done" "$BUILD/$t.log" | tail -2 || true
  fi
done
exit $status
