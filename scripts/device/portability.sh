#!/usr/bin/env bash
# The portability layer on an NVIDIA GPU, in one call: build the GPU tests of src/common and of
# the channel, then run them:
#   WarpGpu            warp primitives (lane ids, shuffles, reductions, ballot/any/all, masks,
#                      warp_sync) against port::kWarpSize;
#   NumberFormatsGpu   the software BF16/FP8 conversions (what AMD GPUs run) against NVIDIA's
#                      conversion instructions over all 2^32 floats (prints the mismatch counts);
#   ChannelGpu         GPU producers -> rings -> host threads (host code through gpu_runtime.h).
# None may skip here: a skip means no GPU was seen, and the script fails. Exit 1 on any failure.
#   scripts/device/portability.sh         logs under $OUT (default /tmp/anyep-portability)
#   DEPS=<prefix with GTest>  BUILD_DIR=build-portability                       (optional)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-portability}
BUILD_DIR=${BUILD_DIR:-build-portability}
mkdir -p "$OUT"
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
prefix=()
if [ -n "${DEPS:-}" ]; then prefix=(-DCMAKE_PREFIX_PATH="$DEPS"); fi

{ date -u; hostname; nvidia-smi -L; } > "$OUT/machine.txt" 2>&1
t0=$(date +%s)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DANYEP_GPU=cuda -DANYEP_PYTHON=OFF -DANYEP_LIBFABRIC=OFF -DANYEP_BENCH=OFF \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" > "$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; echo "configure FAILED"; exit 1
fi
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target test_warp_gpu test_number_formats_gpu test_channel_gpu \
     > "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -30; echo "build FAILED"; exit 1
fi
t1=$(date +%s)
(cd "$BUILD_DIR" && ctest -R "WarpGpu|NumberFormatsGpu|ChannelGpu" -V --timeout 180) > "$OUT/ctest.log" 2>&1
rc=$?
t2=$(date +%s)

echo "== machine"; grep -E "^GPU" "$OUT/machine.txt"
echo "== ctest (rc $rc)"
grep -E "% tests passed|\(Failed\)|\(Skipped\)|\(Timeout\)|2\^32 floats:" "$OUT/ctest.log" | head -30
if [ "$rc" != 0 ]; then grep -E "Failure|error|Expected|Which is" "$OUT/ctest.log" | head -30; fi
skips=$(grep -c "(Skipped)" "$OUT/ctest.log")
echo "== times: build $((t1 - t0)) s, tests $((t2 - t1)) s; skipped: $skips"
[ "$rc" = 0 ] && [ "$skips" = 0 ]
