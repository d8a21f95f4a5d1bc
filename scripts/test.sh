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
# Where libfabric is found, its tcp and shm providers are required: a multi-process test that
# finds one missing fails instead of skipping (set ANYEP_TEST_REQUIRE_PROVIDERS= to allow skips).
export ANYEP_TEST_REQUIRE_PROVIDERS=${ANYEP_TEST_REQUIRE_PROVIDERS-tcp,shm}
mkdir -p "$BUILD_DIR"
if ! cmake -S . -B "$BUILD_DIR" -G Ninja ${ANYEP_CMAKE_ARGS:-} > "$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log"; exit 1
fi
grep -E "^-- anyep" "$BUILD_DIR/configure.log" || true
cmake --build "$BUILD_DIR" -j "$JOBS"
# How many tests ran, passed, failed and skipped (and which skipped: "100% passed" says neither).
ctest_counts() {
  local log=$1
  local total passed skipped
  total=$(grep -cE 'Test +#[0-9]+: ' "$log" || true)
  passed=$(grep -E 'Test +#[0-9]+: ' "$log" | grep -c ' Passed ' || true)
  skipped=$(grep -E 'Test +#[0-9]+: ' "$log" | grep -c '\*\*\*Skipped' || true)
  echo "=== tests: ${total} in all: ${passed} passed, $((total - passed - skipped)) failed, ${skipped} skipped (did not run)"
  grep -E 'Test +#[0-9]+: .*\*\*\*Skipped' "$log" | sed -E 's/^.*Test +#[0-9]+: ([^ ]+).*$/    skipped: \1/' || true
}
log="$BUILD_DIR/ctest.log"
rc=0
ctest --test-dir "$BUILD_DIR" --output-on-failure -j "$JOBS" ${CTEST_ARGS:-} 2>&1 | tee "$log" || rc=$?
ctest_counts "$log"
exit "$rc"
