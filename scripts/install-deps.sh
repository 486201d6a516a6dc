#!/usr/bin/env bash
# Installs every build and test dependency of rlx with apt-get (Debian 12 / Ubuntu 24.04).
# Idempotent: packages already present are left as they are. Needs root (or sudo).
set -euo pipefail

SUDO=""
if [ "$(id -u)" -ne 0 ]; then SUDO="sudo"; fi

PACKAGES=(
  build-essential cmake ninja-build pkg-config git
  libopenblas-dev
  nlohmann-json3-dev
  libcli11-dev
  libprotobuf-dev protobuf-compiler libonnx-dev
  libgtest-dev libgmock-dev googletest
  libbenchmark-dev
  python3
  python3-dev pybind11-dev python3-pybind11 python3-numpy libdlpack-dev  # the Python package (python/)
  python3-pytest python3-setuptools python3-wheel python3-venv  # its tests (tests/python) and pip install .
  glslang-dev spirv-tools  # GLSL kernels compiled to SPIR-V (the Vulkan backend) and validated (codegen tests)
  libvulkan-dev mesa-vulkan-drivers vulkan-validationlayers vulkan-tools  # the Vulkan backend, run on lavapipe in CI
  clang-16 libclang-rt-16-dev  # the libFuzzer targets (scripts/fuzz.sh): libFuzzer + ASan runtimes
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
  exit 0
fi

echo "install-deps: installing ${missing[*]}"
export DEBIAN_FRONTEND=noninteractive
$SUDO apt-get update -q
$SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
