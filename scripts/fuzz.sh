#!/usr/bin/env bash
# Builds the libFuzzer targets with clang (build/fuzz) and runs each for SECONDS (default 60).
#
#   scripts/fuzz.sh [SECONDS] [TARGET...]   build, then run each target (all when none named)
#   scripts/fuzz.sh --build-only            build only
#   scripts/fuzz.sh --seeds                 rebuild the committed seed corpora (fuzz/corpus/<target>/)
#
# Targets: fuzz_onnx (ONNX import), fuzz_onnx_run (ONNX import + compile + run on the CPU),
# fuzz_json (graph JSON import + compile + run), fuzz_safetensors, fuzz_gguf, fuzz_npy (when src/io/npy.cpp
# compiles with clang; see CMakeLists.txt). Every run has the fuzz size policy of fuzz/fuzz_run.h.
#
# Inputs: fuzz/corpus/<target>/ (seeds) and fuzz/corpus/regressions/<target>/ (inputs that once
# failed: they must keep passing) are read, never written; new units go to a scratch corpus,
# build/fuzz/corpus/<target>/, which a later local run continues from (FUZZ_FRESH=1 empties it).
#
# Fails on any crash, sanitizer report, leak, timeout (FUZZ_TIMEOUT s per input, default 30),
# out-of-memory (FUZZ_RSS_MB, default 2560) or exception that is not rlx::Error; the input is
# left in build/fuzz/crashes/<target>/. Copy it to fuzz/corpus/regressions/<target>/ and add a
# regression test (tests/onnx, tests/io) that builds the bad input before fixing the library.
# Runs up to FUZZ_PARALLEL targets at once (default: the number of cores, at most 4).
# Prints a summary line per target: executions, new corpus units, crashes.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
BUILD="$ROOT/build/fuzz"
JOBS="${FUZZ_BUILD_JOBS:-$(nproc)}"
ALL_TARGETS=(fuzz_onnx fuzz_onnx_run fuzz_json fuzz_safetensors fuzz_gguf fuzz_npy)

MODE=run
case "${1:-}" in
  --build-only) MODE=build; shift ;;
  --seeds) MODE=seeds; shift ;;
  -h|--help) sed -n '2,22p' "$0"; exit 0 ;;
esac
SECONDS_EACH=60
if [ "$#" -gt 0 ] && [[ "$1" =~ ^[0-9]+$ ]]; then SECONDS_EACH="$1"; shift; fi
TARGETS=("$@")

# rlx needs clang >= 16 (C++20 lambda captures of structured bindings); Debian 12:
#   apt-get install clang-16 libclang-rt-16-dev   (scripts/install-deps.sh does this)
CXX_FUZZ="${FUZZ_CXX:-}"
if [ -z "$CXX_FUZZ" ]; then
  for c in clang++-19 clang++-18 clang++-17 clang++-16; do
    if command -v "$c" >/dev/null; then CXX_FUZZ="$c"; break; fi
  done
fi
[ -n "$CXX_FUZZ" ] || { echo "fuzz.sh: no clang++ >= 16 found (apt-get install clang-16 libclang-rt-16-dev)" >&2; exit 1; }

build_start=$(date +%s)
# -O1 with line tables only: half the compile time of -O2 -g, symbolized stacks still carry
# file:line; assert() stays on (no NDEBUG).
cmake -S "$ROOT" -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CXX_COMPILER="$CXX_FUZZ" \
  -DCMAKE_CXX_FLAGS_RELWITHDEBINFO="-O1 -gline-tables-only" -DRLX_FUZZ=ON -DRLX_BUILD_TESTS=OFF -DRLX_BUILD_BENCH=OFF >"$BUILD.configure.log" 2>&1 ||
  { cat "$BUILD.configure.log"; exit 1; }
# The targets this configuration has (fuzz_npy only when npy.cpp compiles with clang).
AVAILABLE=()
for t in "${ALL_TARGETS[@]}"; do
  if ninja -C "$BUILD" -t query "$t" >/dev/null 2>&1; then AVAILABLE+=("$t"); fi
done
if [ "${#TARGETS[@]}" -eq 0 ]; then TARGETS=("${AVAILABLE[@]}"); fi
for t in "${TARGETS[@]}"; do
  [[ " ${AVAILABLE[*]} " == *" $t "* ]] || { echo "fuzz.sh: no target $t in this build (have: ${AVAILABLE[*]})" >&2; exit 2; }
done

if [ "$MODE" = seeds ]; then
  ninja -C "$BUILD" -j"$JOBS" fuzz_make_seeds
  for t in "${ALL_TARGETS[@]}"; do rm -rf "${ROOT:?}/fuzz/corpus/$t"; done
  ASAN_OPTIONS=detect_leaks=0 "$BUILD/fuzz_make_seeds" "$ROOT/fuzz/corpus"
  du -sh "$ROOT/fuzz/corpus"
  exit 0
fi

ninja -C "$BUILD" -j"$JOBS" "${TARGETS[@]}"
echo "fuzz.sh: build took $(( $(date +%s) - build_start ))s"
[ "$MODE" = build ] && exit 0

PARALLEL="${FUZZ_PARALLEL:-$(nproc)}"
[ "$PARALLEL" -gt 4 ] && PARALLEL=4
[ "$PARALLEL" -lt 1 ] && PARALLEL=1
export ASAN_OPTIONS="${ASAN_OPTIONS:-detect_leaks=1:abort_on_error=0:symbolize=1}"
export UBSAN_OPTIONS="${UBSAN_OPTIONS:-print_stacktrace=1}"

run_target() {
  local t="$1"
  local corpus="$BUILD/corpus/$t" crashes="$BUILD/crashes/$t" log="$BUILD/$t.log"
  [ "${FUZZ_FRESH:-0}" = 1 ] && rm -rf "$corpus"
  mkdir -p "$corpus" "$crashes"
  # The ONNX node cases stay in ../shared (never copied into the repository): when the folder is
  # there, the small models (<= 2 KiB, at most 300) seed the scratch corpus of the ONNX targets.
  local node_dir="$ROOT/../shared/onnx-node"
  if [[ "$t" == fuzz_onnx* ]] && [ -d "$node_dir" ] && [ -z "$(ls -A "$corpus")" ]; then
    local n=0 m
    while read -r m; do
      cp "$m" "$corpus/node_$(basename "$(dirname "$m")").onnx"
      n=$((n + 1))
      [ "$n" -ge 300 ] && break
    done < <(find "$node_dir" -name model.onnx -size -2049c | sort)
  fi
  local inputs=("$corpus")
  for d in "$ROOT/fuzz/corpus/$t" "$ROOT/fuzz/corpus/regressions/$t"; do
    if [ -d "$d" ] && [ -n "$(ls -A "$d")" ]; then inputs+=("$d"); fi
  done
  local max_len=65536 dict=()
  [ "$t" = fuzz_npy ] && max_len=4096
  case "$t" in
    fuzz_onnx|fuzz_onnx_run) dict=(-dict="$ROOT/fuzz/onnx.dict") ;;
    fuzz_json) dict=(-dict="$ROOT/fuzz/json.dict") ;;
    fuzz_gguf) dict=(-dict="$ROOT/fuzz/gguf.dict") ;;
  esac
  local rc=0
  "$BUILD/$t" "${inputs[@]}" "${dict[@]}" -max_total_time="$SECONDS_EACH" -max_len="$max_len" \
    -timeout="${FUZZ_TIMEOUT:-30}" -rss_limit_mb="${FUZZ_RSS_MB:-2560}" -detect_leaks=1 \
    -artifact_prefix="$crashes/" -print_final_stats=1 >"$log" 2>&1 || rc=$?
  echo "$rc" >"$BUILD/$t.rc"
}

echo "fuzz.sh: running ${TARGETS[*]} for ${SECONDS_EACH}s each, $PARALLEL at a time"
run_start=$(date +%s)
pids=()
for t in "${TARGETS[@]}"; do
  run_target "$t" &
  pids+=($!)
  if [ "${#pids[@]}" -ge "$PARALLEL" ]; then wait "${pids[0]}"; pids=("${pids[@]:1}"); fi
done
for p in "${pids[@]}"; do wait "$p"; done

status=0
printf '%-18s %6s %12s %10s %10s %s\n' target rc executions exec/s new-units crashes
for t in "${TARGETS[@]}"; do
  log="$BUILD/$t.log"
  rc="$(cat "$BUILD/$t.rc")"
  execs="$(grep 'stat::number_of_executed_units:' "$log" | tail -1 | awk '{print $2}')"
  speed="$(grep 'stat::average_exec_per_sec:' "$log" | tail -1 | awk '{print $2}')"
  units="$(find "$BUILD/corpus/$t" -type f | wc -l)"
  ncrash="$(find "$BUILD/crashes/$t" -type f -newermt "@$run_start" | wc -l)"
  printf '%-18s %6s %12s %10s %10s %s\n' "$t" "$rc" "${execs:-?}" "${speed:-?}" "$units" "$ncrash"
  if [ "$rc" != 0 ] || [ "$ncrash" != 0 ]; then
    status=1
    echo "fuzz.sh: $t FAILED (exit $rc); inputs in $BUILD/crashes/$t, log $log:"
    grep -E "ERROR: |SUMMARY: |escaped|deadly signal|Test unit written" "$log" | head -20 || true
    tail -60 "$log"
  fi
done
echo "fuzz.sh: fuzzing took $(( $(date +%s) - run_start ))s; $([ $status = 0 ] && echo "no crashes" || echo "FAILED")"
exit $status
