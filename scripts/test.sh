#!/usr/bin/env bash
# The README's test command: install dependencies, configure, build (CUDA code included where nvcc
# exists: compile and link only on machines without a GPU), run every test with ctest.
#   BUILD_DIR (default build), JOBS (default nproc), extra CMake arguments via ANYEP_CMAKE_ARGS.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
JOBS=${JOBS:-$(nproc)}
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
# Tests talk to loopback addresses only.
export FI_TCP_IFACE=lo
mkdir -p "$BUILD_DIR"
if ! cmake -S . -B "$BUILD_DIR" -G Ninja ${ANYEP_CMAKE_ARGS:-} > "$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log"; exit 1
fi
grep -E "^-- anyep" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j "$JOBS"
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" ${CTEST_ARGS:-}
