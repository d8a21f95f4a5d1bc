#!/usr/bin/env bash
# The README's main command. With GPUs: the dispatch/combine benchmark. Without: the CPU pipeline
# across local processes. Builds what it needs first.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
export FI_TCP_IFACE=lo
mkdir -p "$BUILD_DIR"
if ! cmake -S . -B "$BUILD_DIR" -G Ninja ${ANYEP_CMAKE_ARGS:-} > "$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log"; exit 1
fi
grep -E "^-- anyep" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j "$(nproc)" --target anyep_main
exec "$BUILD_DIR/bench/anyep_main" "$@"
