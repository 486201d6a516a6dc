#!/usr/bin/env bash
# Installs dependencies, builds rlx and runs the whole test suite with ctest.
#   scripts/test.sh              release build + tests
#   scripts/test.sh --sanitize   also an ASan+UBSan build + tests
set -euo pipefail
cd "$(dirname "$0")/.."

SANITIZE=0
for a in "$@"; do
  case "$a" in
    --sanitize) SANITIZE=1 ;;
    *) echo "usage: scripts/test.sh [--sanitize]" >&2; exit 2 ;;
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
