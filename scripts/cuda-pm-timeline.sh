#!/bin/bash
# DRAM / SM activity over time inside one CUDA-graph replay, through Nsight Compute's PM
# sampling (ncu profiles the whole graph as one workload, so the kernels keep their overlap):
#   scripts/cuda-pm-timeline.sh OUT_PREFIX COMMAND [ARGS...]
# e.g. `scripts/cuda-pm-timeline.sh $OUT/pm build/release/bench_cuda decode`. Profiles graph
# launch number $PM_SKIP (default 8: past the bench's capture and warm-up runs), writes
# OUT_PREFIX.ncu-rep and OUT_PREFIX.txt (every sampled metric: one "time_ns value" row per
# sample, from scripts/cuda-trace/pm_dump.py) and prints the DRAM-throughput rows binned to
# $PM_BIN_NS (default 1000 ns). Needs ncu with the PmSampling section (Nsight Compute 2024.3+)
# and hardware counters (see the device notes: Firecracker machines have them). Clocks are left
# alone (--clock-control none).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT_PREFIX COMMAND [ARGS...]" >&2; exit 2; }
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1 || true)
[[ -n "$ncu" ]] || { echo "cuda-pm-timeline: ncu not found" >&2; exit 1; }
"$ncu" --list-sections 2>/dev/null | grep -q PmSampling || { echo "cuda-pm-timeline: $ncu has no PmSampling section" >&2; exit 1; }
"$ncu" --clock-control none --graph-profiling graph --launch-skip "${PM_SKIP:-8}" --launch-count 1 \
  --section PmSampling ${PM_NCU_ARGS:-} -f -o "$out" "$@"
PYTHONPATH="$(dirname "$(readlink -f "$ncu")")/extras/python" python3 "$here/cuda-trace/pm_dump.py" \
  "$out.ncu-rep" "${PM_BIN_NS:-1000}" > "$out.txt"
grep -E "^(#|BIN)" "$out.txt" | head -"${PM_LINES:-120}"
