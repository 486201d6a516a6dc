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
  chromium  # SwiftShader, the CPU Vulkan driver the WebGPU backend runs on without a GPU (and headless WebGPU)
  libstb-dev  # stb_image / stb_image_write: image I/O of examples/remove_background.cpp (the README's main job)
)

missing=()
for p in "${PACKAGES[@]}"; do
  if ! dpkg-query -W -f='${Status}' "$p" 2>/dev/null | grep -q "install ok installed"; then
    missing+=("$p")
  fi
done

# npm fetches Dawn's C library below; a Node.js that is already installed (with its npm) is kept.
command -v npm >/dev/null || missing+=(npm)

if [ "${#missing[@]}" -eq 0 ]; then
  echo "install-deps: all ${#PACKAGES[@]} packages already installed"
else
  echo "install-deps: installing ${missing[*]}"
  export DEBIAN_FRONTEND=noninteractive
  $SUDO apt-get update -q
  $SUDO apt-get install -y -q --no-install-recommends "${missing[@]}"
fi

# The WebGPU backend loads Dawn's `wgpu*` C library at run time: libwebgpu_wrapper.so from the npm
# package bun-webgpu-linux-x64 (Apache-2.0), pinned to the version rlx's declarations match
# (src/backends/webgpu/wgpu_abi.h), unpacked into the default place of the knob webgpu_lib.
WEBGPU_PKG=bun-webgpu-linux-x64@0.1.7
WEBGPU_DIR=/usr/local/lib/rlx-webgpu
if [ "$(uname -m)" != x86_64 ]; then
  echo "install-deps: no Dawn build for $(uname -m) in $WEBGPU_PKG; the WebGPU backend will report it unavailable"
elif [ ! -f "$WEBGPU_DIR/libwebgpu_wrapper.so" ] || [ "$(cat "$WEBGPU_DIR/VERSION" 2>/dev/null)" != "$WEBGPU_PKG" ]; then
  tmp="$(mktemp -d)"
  (cd "$tmp" && npm pack "$WEBGPU_PKG" --silent >/dev/null)
  tar -xzf "$tmp"/*.tgz -C "$tmp"
  $SUDO install -D -m 755 "$tmp/package/libwebgpu_wrapper.so" "$WEBGPU_DIR/libwebgpu_wrapper.so"
  $SUDO install -m 644 "$tmp/package/LICENSE" "$WEBGPU_DIR/LICENSE"
  echo "$WEBGPU_PKG" | $SUDO tee "$WEBGPU_DIR/VERSION" >/dev/null
  rm -rf "$tmp"
  echo "install-deps: Dawn (WebGPU) from $WEBGPU_PKG in $WEBGPU_DIR"
fi

# The README's main job (scripts/remove-background.sh) runs on a photo by default: the astronaut
# portrait (public domain, NASA) that Debian's python3-skimage ships as skimage/data/astronaut.png,
# taken from the package file without installing the package.
PHOTO=/usr/local/share/rlx/astronaut.png
if [ ! -f "$PHOTO" ]; then
  tmp="$(mktemp -d)"
  chmod 755 "$tmp"  # apt-get download writes as the _apt user where it can
  if ! (cd "$tmp" && apt-get download -q python3-skimage >/dev/null 2>&1); then
    $SUDO apt-get update -q >/dev/null
    (cd "$tmp" && apt-get download -q python3-skimage >/dev/null)
  fi
  dpkg-deb --fsys-tarfile "$tmp"/python3-skimage_*.deb | tar -x -C "$tmp" --wildcards '*/skimage/data/astronaut.png'
  $SUDO install -D -m 644 "$(find "$tmp" -name astronaut.png -print -quit)" "$PHOTO"
  rm -rf "$tmp"
  echo "install-deps: the astronaut photo (python3-skimage) in $PHOTO"
fi
