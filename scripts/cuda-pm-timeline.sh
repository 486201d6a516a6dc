#!/bin/bash
# DRAM / SM activity over time inside one CUDA-graph replay, through Nsight Compute's PM
# sampling (ncu profiles the whole graph as one workload, so the kernels keep their overlap):
#   scripts/cuda-pm-timeline.sh OUT_PREFIX COMMAND [ARGS...]
# e.g. `scripts/cuda-pm-timeline.sh $OUT/pm build/release/bench_cuda decode`. Profiles the first
# workload inside a profiler range (bench_cuda opens one around timed run $PM_RUN, default 5,
# through RLX_BENCH_PROFILE_RUN: a graph replay, not a compile-time kernel), writes
# OUT_PREFIX.ncu-rep and OUT_PREFIX.txt (every sampled metric: one "time_ns value" row per
# sample, from scripts/cuda-trace/pm_dump.py) and prints the DRAM-throughput rows binned to
# $PM_BIN_NS (default 1000 ns). Needs ncu with the PmSampling section (Nsight Compute 2024.3+)
# and hardware counters (see the device notes: Firecracker machines have them). Clocks are left
# alone (--clock-control none). Measured on the H100 (session 14): Nsight Compute 2025.3.1 profiles
# the replay as one graph workload, but the report keeps no sampled series for it, so pm_dump.py
# stops with that message; kept for a Nsight Compute that does.
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT_PREFIX COMMAND [ARGS...]" >&2; exit 2; }
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
ncu=$(command -v ncu || ls /opt/nvidia/nsight-compute/*/ncu /usr/local/cuda/bin/ncu 2>/dev/null | head -1 || true)
[[ -n "$ncu" ]] || { echo "cuda-pm-timeline: ncu not found" >&2; exit 1; }
"$ncu" --list-sections 2>/dev/null | grep -q PmSampling || { echo "cuda-pm-timeline: $ncu has no PmSampling section" >&2; exit 1; }
RLX_BENCH_PROFILE_RUN="${PM_RUN:-5}" "$ncu" --clock-control none --graph-profiling graph --profile-from-start off \
  --launch-count 1 --section PmSampling ${PM_NCU_ARGS:-} -f -o "$out" "$@"
# ncu_report.py ships in the Nsight Compute installation's extras/python.
report_py=$(find "$(dirname "$(readlink -f "$ncu")")/.." /usr/local/cuda/ /opt/nvidia -name ncu_report.py 2>/dev/null | head -1 || true)
[[ -n "$report_py" ]] || { echo "cuda-pm-timeline: ncu_report.py not found beside $ncu" >&2; exit 1; }
PYTHONPATH="$(dirname "$report_py")" python3 "$here/cuda-trace/pm_dump.py" \
  "$out.ncu-rep" "${PM_BIN_NS:-1000}" > "$out.txt"
grep -E "^(#|BIN)" "$out.txt" | head -"${PM_LINES:-120}"
