#!/usr/bin/env bash
# Installs dependencies, builds rlx and runs the whole test suite with ctest, then builds the
# libFuzzer targets and runs each for a short smoke (scripts/fuzz.sh).
#   scripts/test.sh              release build + tests + fuzz smoke
#   scripts/test.sh --sanitize   also an ASan+UBSan build + tests
#   scripts/test.sh --no-fuzz    without the fuzz smoke
# FUZZ_SECONDS: seconds per fuzz target (default 25); the smoke fails on any crash, sanitizer
# report, leak, timeout, out-of-memory or exception that is not rlx::Error.
set -euo pipefail
cd "$(dirname "$0")/.."

SANITIZE=0
FUZZ=1
for a in "$@"; do
  case "$a" in
    --sanitize) SANITIZE=1 ;;
    --no-fuzz) FUZZ=0 ;;
    *) echo "usage: scripts/test.sh [--sanitize] [--no-fuzz]" >&2; exit 2 ;;
  esac
done

bash scripts/install-deps.sh
JOBS="$(nproc)"

run_preset() {
  local preset="$1"
  cmake --preset "$preset" >/dev/null
  cmake --build --preset "$preset" -j "$JOBS"
  ctest --preset "$preset" -j "$JOBS"
}

run_preset release
if [ "$SANITIZE" = 1 ]; then
  export ASAN_OPTIONS=detect_leaks=1:abort_on_error=1
  export UBSAN_OPTIONS=print_stacktrace=1:halt_on_error=1
  run_preset sanitize
fi
if [ "$FUZZ" = 1 ]; then
  # A fresh scratch corpus each time; the committed seeds (fuzz/corpus/) are only read.
  fuzz_start=$(date +%s)
  FUZZ_FRESH=1 bash scripts/fuzz.sh "${FUZZ_SECONDS:-25}"
  echo "test.sh: fuzz stage (build + smoke) took $(( $(date +%s) - fuzz_start ))s"
fi
