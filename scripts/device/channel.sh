#!/usr/bin/env bash
# Device run of the channel layer (GPU machine): build only the GPU channel test and benchmark,
# run both, print a short table last. Full logs under $OUT (default /tmp/anyep-channel).
#   DEPS_PREFIX   CMake prefix with GoogleTest (e.g. the .deps/usr the run tool carries)
#   BUILD_DIR     build folder (default build-device)
#   BENCH_ARGS    extra arguments for anyep_channel_bench
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-channel}
BUILD_DIR=${BUILD_DIR:-build-device}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
prefix=()
[ -n "${DEPS_PREFIX:-}" ] && prefix=(-DCMAKE_PREFIX_PATH="$DEPS_PREFIX")

t0=$(date +%s)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANYEP_PYTHON=OFF -DANYEP_LIBFABRIC=OFF \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" >"$OUT/configure.log" 2>&1; then
  cat "$OUT/configure.log"; exit 1
fi
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target test_channel_gpu anyep_channel_bench >"$OUT/build.log" 2>&1; then
  tail -50 "$OUT/build.log"; exit 1
fi
echo "=== built in $(( $(date +%s) - t0 )) s"
nvidia-smi -L | tee "$OUT/gpus.txt" || true

echo "=== GPU channel test"
set +e
timeout 180 "$BUILD_DIR/tests/gpu/channel/test_channel_gpu" >"$OUT/gpu_test.log" 2>&1
test_rc=$?
set -e
grep -E "^\[ +(OK|FAILED|SKIPPED|PASSED) +\]|Failure|error" "$OUT/gpu_test.log" | head -40

echo "=== channel benchmark"
set +e
# shellcheck disable=SC2086
timeout 300 "$BUILD_DIR/bench/channel/anyep_channel_bench" --csv "$OUT/channel_bench.csv" ${BENCH_ARGS:-} 2>&1 | tee "$OUT/bench.log"
bench_rc=${PIPESTATUS[0]}
set -e

echo
echo "=== summary (logs in $OUT)"
echo "GPU test: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]' "$OUT/gpu_test.log" | tr '\n' ' ') (rc $test_rc)"
sed -n '/^(M commands/,$p' "$OUT/bench.log"
exit $(( test_rc || bench_rc ))
