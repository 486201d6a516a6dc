#!/bin/bash
# Kernel timeline of any command on a CUDA machine without Nsight Systems, through CUPTI:
#   scripts/cuda-trace.sh OUT.csv COMMAND [ARGS...]
# builds scripts/cuda-trace/cupti_trace.cpp against the toolkit's CUPTI (found under
# /usr/local/cuda* or $CUPTI_DIR), runs COMMAND with it injected, writes every kernel's start and
# end to OUT.csv and prints scripts/cuda-trace/summary.py's table (e.g. for
# `build/release/bench_cuda decode`: one decode layer's kernels and the per-kernel means).
set -euo pipefail
[[ $# -ge 2 ]] || { echo "usage: $0 OUT.csv COMMAND [ARGS...]" >&2; exit 2; }
out=$1; shift
here=$(cd "$(dirname "$0")" && pwd)
hdr=$(find ${CUPTI_DIR:-} /usr/local/cuda*/ -name cupti.h 2>/dev/null | head -1 || true)
lib=$(find ${CUPTI_DIR:-} /usr/local/cuda*/ -name 'libcupti.so*' 2>/dev/null | head -1 || true)
[[ -n "$hdr" && -n "$lib" ]] || { echo "cuda-trace: CUPTI not found (set CUPTI_DIR)" >&2; exit 1; }
inc=$(dirname "$hdr"); libdir=$(dirname "$lib")
krec=$(grep -oE 'CUpti_ActivityKernel[0-9]+;' "$inc/cupti_activity.h" | sort -V | tail -1 | tr -d ';')
so=$(mktemp -d)/cupti_trace.so
g++ -O2 -shared -fPIC -DKREC="$krec" -I"$inc" -I/usr/local/cuda/include "$here/cuda-trace/cupti_trace.cpp" \
  -o "$so" -L"$libdir" -lcupti -Wl,-rpath,"$libdir"
TRACE_OUT=$out CUDA_INJECTION64_PATH=$so LD_LIBRARY_PATH=$libdir:${LD_LIBRARY_PATH:-} "$@"
python3 "$here/cuda-trace/summary.py" "$out"
