#!/usr/bin/env bash
# Builds rlx with the CUDA backend on a GPU machine, runs the CUDA tests and the CUDA
# benchmarks (rlx vs PyTorch), writes every log to $OUT (default ./gpu-check-out) and prints a
# short summary table.
#
#   scripts/gpu-check.sh                 configure + build (Release, -DRLX_CUDA=ON, sm_90) in build/gpu
#   RLX_GPU_PREBUILT=dir scripts/gpu-check.sh
#                                        use binaries packed by `scripts/gpu-check.sh pack` instead
#                                        of building (for GPU machines without the build deps)
#   scripts/gpu-check.sh pack <build-dir> <dir>
#                                        copy rlx_tests, bench_cuda and their non-system, non-CUDA
#                                        shared libraries into <dir> (stripped); with the Python
#                                        module built, also python/librlx_all.so (rlx_core as one
#                                        shared library) from which the run builds rlx._rlx for the
#                                        GPU machine's python3 (needs g++, Python.h and pybind11 there)
#   RLX_GPU_TESTS=<gtest filter>         default 'Cuda*'
#   RLX_GPU_PYTHON=0                     skip the Python CUDA tests (tests/python/test_cuda_dlpack.py and
#                                        test_device_tensors.py with PyTorch: torch CUDA tensors through
#                                        an rlx model with no host copy); they run when the build or the
#                                        pack has the Python module (<bin>/python/rlx), log python.log
#   RLX_GPU_BENCH=0                      skip the benchmarks
#   RLX_GPU_PEER=0                       skip the PyTorch peer (rlx numbers only)
#   RLX_GPU_BENCH_ONLY=<substring>       run only the benchmark cases whose group matches
#                                        (gemm, gemv, dequant (CUDA), attn, rows, bert, llama = decode + prefill)
#   RLX_GPU_SWEEP="A=1 A=2,B=0 ..."      also run bench_cuda (group RLX_GPU_BENCH_ONLY) once per
#                                        setting (commas join variables of one setting) and
#                                        print its device p50 lines (bench_sweep.txt)
#   RLX_GPU_CONFORMANCE=<dir>            also run the ONNX node cases of <dir> (e.g. a copy of
#                                        ../shared/onnx-node) on CUDA: `rlx conformance --device
#                                        cuda`, report in onnx-conformance-cuda.md, totals printed
#   RLX_GPU_VULKAN=1                     also the Vulkan backend on the same GPU: bench_cuda
#                                        --device vulkan (a second summary table against the CUDA
#                                        backend and PyTorch) and, with RLX_GPU_CONFORMANCE, the node
#                                        cases on Vulkan. Needs a Vulkan loader (libvulkan1); the
#                                        NVIDIA ICD is used when the loader finds no driver.
#   RLX_GPU_WEBGPU=1                     also the WebGPU backend (Dawn over the same Vulkan driver):
#                                        bench_cuda --device webgpu (its own summary table) and, with
#                                        RLX_GPU_CONFORMANCE, the node cases on WebGPU. The Dawn
#                                        library comes from the pack (lib/libwebgpu_wrapper.so) or the
#                                        default install path.
set -uo pipefail
ROOT="$(cd "$(dirname "$0")/.." && pwd)"

if [[ "${1:-}" == "pack" ]]; then
  build="$2" dest="$3"
  mkdir -p "$dest/lib"
  for exe in rlx_tests bench_cuda rlx vk_kernel_lab; do
    [[ -x "$build/$exe" ]] || continue
    cp "$build/$exe" "$dest/$exe" && strip "$dest/$exe"
    ldd "$build/$exe" | awk '/=> \// {print $3}' | while read -r lib; do
      case "$(basename "$lib")" in
        libc.so*|libm.so*|libdl.so*|librt.so*|libpthread.so*|libgcc_s.so*|libstdc++.so*|ld-linux*) ;;
        libcublas*|libnvrtc*|libcudart*|libcuda.so*|libcudnn*) ;;  # the GPU machine's CUDA provides these
        *) cp -L "$lib" "$dest/lib/" ;;
      esac
    done
  done
  # The Python package: its files, and rlx_core with its static dependencies linked here as one
  # shared library (python/librlx_all.so, with the headers the bindings need), so that the run
  # step can build rlx._rlx for the GPU machine's Python (another version than this build's).
  if compgen -G "$build/python/rlx/_rlx*.so" >/dev/null; then
    mkdir -p "$dest/python/inc"
    rm -rf "$dest/python/rlx" && cp -r "$build/python/rlx" "$dest/python/rlx" && rm -f "$dest"/python/rlx/_rlx*.so
    link=$(ninja -C "$build" -t commands rlx_python | tail -1)
    link=${link#:*&& }; link=${link%&& :*}
    link=$(tr ' ' '\n' <<<"$link" | grep -v -e 'rlx_python.dir' -e 'exclude-libs' |
           sed "s|^python/rlx/_rlx.*\.so\$|$(realpath "$dest")/python/librlx_all.so|" | tr '\n' ' ')
    (cd "$build" && eval "$link") || echo "pack: linking python/librlx_all.so failed"
    strip "$dest/python/librlx_all.so" 2>/dev/null || true
    for h in dlpack vulkan vk_video; do [[ -d /usr/include/$h ]] && cp -r /usr/include/$h "$dest/python/inc/"; done
  fi
  strip "$dest"/lib/*.so* 2>/dev/null || true
  # Dawn is opened at run time (not in ldd's list): packed as is (its symbols are its ABI).
  dawn="${RLX_WEBGPU_LIB:-/usr/local/lib/rlx-webgpu/libwebgpu_wrapper.so}"
  [[ -f "$dawn" ]] && cp "$dawn" "$dest/lib/libwebgpu_wrapper.so"
  du -sh "$dest"
  exit 0
fi

OUT="${OUT:-$ROOT/gpu-check-out}"
mkdir -p "$OUT"
cd "$ROOT"
{
  echo "date: $(date -u +%Y-%m-%dT%H:%MZ)"
  nvidia-smi --query-gpu=name,driver_version,memory.total,clocks.max.sm --format=csv,noheader 2>&1
  nvcc --version 2>&1 | tail -1
  python3 -c 'import torch; print("torch", torch.__version__, torch.version.cuda)' 2>&1
} | tee "$OUT/env.txt"

# CUDA libraries: the toolkit's, else the pip wheels PyTorch ships.
for d in /usr/local/cuda/lib64 /usr/local/cuda/lib \
         $(python3 -c 'import nvidia, os; p = nvidia.__path__[0]; print(" ".join(os.path.join(p, x, "lib") for x in os.listdir(p)))' 2>/dev/null); do
  [[ -d "$d" ]] && export LD_LIBRARY_PATH="$d:${LD_LIBRARY_PATH:-}"
done

if [[ -n "${RLX_GPU_PREBUILT:-}" ]]; then
  BIN="$ROOT/$RLX_GPU_PREBUILT"
  [[ -d "$BIN" ]] || BIN="$RLX_GPU_PREBUILT"
  export LD_LIBRARY_PATH="$BIN/lib:${LD_LIBRARY_PATH:-}"
  echo "using prebuilt binaries in $BIN"
else
  BIN="$ROOT/build/gpu"
  cmake -S "$ROOT" -B "$BIN" -G Ninja -DCMAKE_BUILD_TYPE=Release -DRLX_CUDA=ON \
    -DCMAKE_CUDA_ARCHITECTURES=90 >"$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
  ninja -C "$BIN" rlx_tests bench_cuda rlx >"$OUT/build.log" 2>&1 || { tail -40 "$OUT/build.log"; exit 1; }
  if [[ "${RLX_GPU_PYTHON:-1}" != "0" ]]; then
    ninja -C "$BIN" rlx_python >>"$OUT/build.log" 2>&1 || echo "python module: not built (see build.log)"
  fi
fi

export RLX_CACHE_DIR="${RLX_CACHE_DIR:-$OUT/kernel-cache}"
if [[ -z "${RLX_WEBGPU_LIB:-}" && -f "$BIN/lib/libwebgpu_wrapper.so" ]]; then
  export RLX_WEBGPU_LIB="$BIN/lib/libwebgpu_wrapper.so"
fi
if [[ ( "${RLX_GPU_VULKAN:-0}" != "0" || "${RLX_GPU_WEBGPU:-0}" != "0" ) && -z "${VK_DRIVER_FILES:-}" && -z "${VK_ICD_FILENAMES:-}" ]]; then
  for icd in /usr/share/vulkan/icd.d/nvidia_icd.json /etc/vulkan/icd.d/nvidia_icd.json \
             /usr/local/nvidia/share/vulkan/icd.d/nvidia_icd.json; do
    [[ -f "$icd" ]] && { export VK_DRIVER_FILES="$icd"; break; }
  done
fi
"$BIN/rlx_tests" --gtest_filter="${RLX_GPU_TESTS:-Cuda*}" --gtest_brief=1 >"$OUT/tests.log" 2>&1
tests_rc=$?
grep -E "^\[  (PASSED|FAILED|SKIPPED) |tests? ran|FAILED  \]" "$OUT/tests.log" | tail -40

py_rc=0
# A pack's Python package: rlx._rlx built here for this python3 against python/librlx_all.so.
if [[ "${RLX_GPU_PYTHON:-1}" != "0" && -f "$BIN/python/librlx_all.so" ]] && ! compgen -G "$BIN/python/rlx/_rlx*.so" >/dev/null; then
  g++ -std=c++20 -O2 -fPIC -shared -fvisibility=hidden -DONNX_ML=1 -DONNX_NAMESPACE=onnx -DRLX_HAVE_CUDA \
    -DRLX_HAVE_VULKAN -DRLX_HAVE_WEBGPU -DNDEBUG -I"$ROOT/include" -I"$ROOT/src" -I"$BIN/python/inc" \
    -I/usr/local/cuda/include -I"$(python3 -c "import sysconfig; print(sysconfig.get_paths()['include'])")" \
    -I"$(python3 -c "import pybind11; print(pybind11.get_include())")" "$ROOT"/python/src/*.cpp \
    -o "$BIN/python/rlx/_rlx$(python3 -c "import sysconfig; print(sysconfig.get_config_var('EXT_SUFFIX'))")" \
    -L"$BIN/python" -lrlx_all -Wl,-rpath,"$BIN/python" >"$OUT/python-build.log" 2>&1 ||
    echo "python module: not built for $(python3 --version) (python-build.log; needs g++, Python.h, pybind11)"
fi
if [[ "${RLX_GPU_PYTHON:-1}" != "0" ]] && compgen -G "$BIN/python/rlx/_rlx*.so" >/dev/null; then
  python3 -c "import pytest, numpy" 2>/dev/null || echo "python: this python3 lacks pytest or numpy (python.log says which)"
  PYTHONPATH="$BIN/python" python3 -m pytest -q -rs "$ROOT/tests/python/test_cuda_dlpack.py" \
    "$ROOT/tests/python/test_device_tensors.py" >"$OUT/python.log" 2>&1; py_rc=$?
  tail -15 "$OUT/python.log"
fi

bench_rc=0
if [[ "${RLX_GPU_BENCH:-1}" != "0" && -x "$BIN/bench_cuda" ]]; then
  "$BIN/bench_cuda" ${RLX_GPU_BENCH_ONLY:-} >"$OUT/bench_rlx.txt" 2>"$OUT/bench_rlx.log"; bench_rc=$?
  if [[ "${RLX_GPU_PEER:-1}" != "0" ]]; then
    PYTHONUNBUFFERED=1 python3 "$ROOT/bench/cuda_peer.py" ${RLX_GPU_BENCH_ONLY:-} >"$OUT/bench_torch.txt" 2>"$OUT/bench_torch.log" || bench_rc=$?
  fi
  if [[ "${RLX_GPU_VULKAN:-0}" != "0" ]]; then
    "$BIN/bench_cuda" --device vulkan ${RLX_GPU_BENCH_ONLY:-} >"$OUT/bench_vulkan.txt" 2>"$OUT/bench_vulkan.log" || bench_rc=$?
  fi
  if [[ "${RLX_GPU_WEBGPU:-0}" != "0" ]]; then
    "$BIN/bench_cuda" --device webgpu ${RLX_GPU_BENCH_ONLY:-} >"$OUT/bench_webgpu.txt" 2>"$OUT/bench_webgpu.log" || bench_rc=$?
  fi
  python3 "$ROOT/bench/cuda_summary.py" "$OUT/bench_rlx.txt" \
    $(ls "$OUT/bench_torch.txt" "$OUT/bench_vulkan.txt" "$OUT/bench_webgpu.txt" 2>/dev/null) \
    | tee "$OUT/summary.txt"
  for setting in ${RLX_GPU_SWEEP:-}; do
    echo "== $setting" | tee -a "$OUT/bench_sweep.txt"
    out=$(env ${setting//,/ } "$BIN/bench_cuda" ${RLX_GPU_BENCH_ONLY:-} 2>&1) || bench_rc=1
    grep 'device p50' <<<"$out" | tee -a "$OUT/bench_sweep.txt"
  done
fi
conf_rc=0
if [[ -n "${RLX_GPU_CONFORMANCE:-}" ]]; then
  if [[ -x "$BIN/rlx" ]]; then
    "$BIN/rlx" conformance "$RLX_GPU_CONFORMANCE" --device cuda -j "${RLX_GPU_CONFORMANCE_JOBS:-8}" \
      --doc "$OUT/onnx-conformance-cuda.md" >"$OUT/conformance-cuda.txt" 2>&1; conf_rc=$?
    grep -A4 "^## Totals" "$OUT/onnx-conformance-cuda.md" 2>/dev/null || tail -5 "$OUT/conformance-cuda.txt"
    grep -E "^FAIL" "$OUT/conformance-cuda.txt" | head -20
    if [[ "${RLX_GPU_VULKAN:-0}" != "0" ]]; then
      "$BIN/rlx" conformance "$RLX_GPU_CONFORMANCE" --device vulkan -j "${RLX_GPU_CONFORMANCE_JOBS:-8}" \
        --doc "$OUT/onnx-conformance-vulkan.md" >"$OUT/conformance-vulkan.txt" 2>&1 || conf_rc=$?
      grep -A4 "^## Totals" "$OUT/onnx-conformance-vulkan.md" 2>/dev/null || tail -5 "$OUT/conformance-vulkan.txt"
      grep -E "^FAIL" "$OUT/conformance-vulkan.txt" | head -20
    fi
    if [[ "${RLX_GPU_WEBGPU:-0}" != "0" ]]; then
      "$BIN/rlx" conformance "$RLX_GPU_CONFORMANCE" --device webgpu -j "${RLX_GPU_CONFORMANCE_JOBS:-8}" \
        --doc "$OUT/onnx-conformance-webgpu.md" >"$OUT/conformance-webgpu.txt" 2>&1 || conf_rc=$?
      grep -A4 "^## Totals" "$OUT/onnx-conformance-webgpu.md" 2>/dev/null || tail -5 "$OUT/conformance-webgpu.txt"
      grep -E "^FAIL" "$OUT/conformance-webgpu.txt" | head -20
    fi
  else
    echo "conformance: no rlx binary in $BIN"; conf_rc=1
  fi
fi
echo "tests rc=$tests_rc python rc=$py_rc bench rc=$bench_rc conformance rc=$conf_rc (logs in $OUT)"
exit $(( tests_rc != 0 || py_rc != 0 || bench_rc != 0 || conf_rc != 0 ))
