#!/usr/bin/env bash
# The cuda-ipc transport backend on the device machine, in one call: build only its targets,
# run its tests (CPU inbox and wire + GPU) and its benchmark twice (copies batched per poll with
# cudaMemcpyBatchAsync, then one cudaMemcpyAsync each), print the short tables last.
#   scripts/device/cuda_ipc.sh            full logs under $OUT (default /tmp/anyep-cuda-ipc)
# One GPU (nvidia-h100-x1) is enough: the benchmark then runs both ranks on GPU 0.
#   DEPS=<prefix with GTest>  BENCH_REPS=5  BUILD_DIR=build-cuda-ipc   (optional)
set -uo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-cuda-ipc}
BUILD_DIR=${BUILD_DIR:-build-cuda-ipc}
BENCH_REPS=${BENCH_REPS:-5}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
if [ -x /usr/local/cuda/bin/nvcc ]; then export PATH=/usr/local/cuda/bin:$PATH; fi
prefix=()
if [ -n "${DEPS:-}" ]; then prefix=(-DCMAKE_PREFIX_PATH="$DEPS"); fi

{ date -u; hostname; nvidia-smi -L; nvidia-smi topo -m; } > "$OUT/machine.txt" 2>&1
t0=$(date +%s)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DANYEP_PYTHON=OFF -DANYEP_LIBFABRIC=OFF \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" > "$OUT/configure.log" 2>&1; then
  tail -30 "$OUT/configure.log"; echo "configure FAILED"; exit 1
fi
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target test_imm_inbox test_cuda_ipc cuda_ipc_peer bench_cuda_ipc \
     > "$OUT/build.log" 2>&1; then
  grep -E "error|FAILED" "$OUT/build.log" | head -30; echo "build FAILED"; exit 1
fi
t1=$(date +%s)
(cd "$BUILD_DIR" && ctest -R "ImmInbox|CudaIpc|CopyTracker" --output-on-failure --timeout 180) > "$OUT/ctest.log" 2>&1
rc_test=$?
t2=$(date +%s)
"$BUILD_DIR/bench/cuda_ipc/bench_cuda_ipc" "$BENCH_REPS" batch > "$OUT/bench.txt" 2> "$OUT/bench.err"
rc_bench=$?
"$BUILD_DIR/bench/cuda_ipc/bench_cuda_ipc" "$BENCH_REPS" loop > "$OUT/bench_loop.txt" 2>> "$OUT/bench.err"
[ $? = 0 ] || rc_bench=1
t3=$(date +%s)

# Optional: prove the tests catch an immediate that overtakes its data. A patched copy of the
# backend pushes the immediate when the copy is queued (post time); the multi-process tests must
# then fail.
mutation="not run (MUTATION_CHECK=1 runs it)"
if [ "${MUTATION_CHECK:-0}" = 1 ]; then
  M=/tmp/anyep-cuda-ipc-mutant
  rm -rf "$M" && mkdir -p "$M" && tar --exclude='./build*' -cf - . | tar -xf - -C "$M"
  sed -i 's|^      track_.queue(|      if (op.has_imm) { outbox_[op.dst]->push(opt_.rank, op.imm); op.has_imm = false; }  track_.queue(|' \
    "$M/src/transport/cuda_ipc/cuda_ipc_transport.cpp"
  if ! grep -q "op.has_imm = false; }  track_.queue" "$M/src/transport/cuda_ipc/cuda_ipc_transport.cpp"; then
    mutation="patch did not apply"
  elif (cmake -S "$M" -B "$M/build" -G Ninja -DANYEP_PYTHON=OFF -DANYEP_LIBFABRIC=OFF \
          -DCMAKE_CUDA_ARCHITECTURES=90 "${prefix[@]}" && cmake --build "$M/build" -j "$(nproc)" --target test_cuda_ipc cuda_ipc_peer) \
          > "$OUT/mutant_build.log" 2>&1; then
    "$M/build/tests/gpu/transport/test_cuda_ipc" --gtest_filter='*TwoProcesses*:*CudaIpcBatched*' > "$OUT/mutant_test.log" 2>&1
    if [ $? != 0 ] && grep -q "arrived before its data" "$OUT/mutant_test.log"; then
      mutation="early immediate DETECTED: $(grep -m1 -o 'immediate [0-9]* from rank [0-9]* arrived before its data[^(]*' "$OUT/mutant_test.log")"
    else
      mutation="early immediate NOT detected (see mutant_test.log)"
    fi
  else
    mutation="mutant build failed (see mutant_build.log)"
  fi
fi
t4=$(date +%s)

echo "== machine"; grep -E "^GPU" "$OUT/machine.txt"
echo "== ctest (rc $rc_test): failures and skips"
grep -E "tests passed|\(Failed\)|\(Skipped\)|\(Timeout\)" "$OUT/ctest.log" | head -30
if [ "$rc_test" != 0 ]; then grep -E "Failure|error|rank [0-9]+:" "$OUT/ctest.log" | head -30; fi
echo "== bench (rc $rc_bench)"; tail -5 "$OUT/bench.err"
echo "== mutation check: $mutation"
echo "== times: build $((t1 - t0)) s, tests $((t2 - t1)) s, bench $((t3 - t2)) s, mutation check $((t4 - t3)) s"
echo "== table (copies batched per poll)"; cat "$OUT/bench.txt"
echo "== table (one cudaMemcpyAsync per copy)"; cat "$OUT/bench_loop.txt"
[ "$rc_test" = 0 ] && [ "$rc_bench" = 0 ]
