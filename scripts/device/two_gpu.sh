#!/usr/bin/env bash
# Issue 16's runs on nvidia-h200-x2, one part per device call (each under 600 s):
#   TWO_GPU_PART=ll  scripts/device/ll.sh over the 2-GPU worlds (LL_WORLDS overrides: a pytest -k expression) (NVLink, proxy over cuda-ipc,
#                    proxy over libfabric shm, 4 processes on 2 GPUs) and the LL benchmark at DeepEP's
#                    shape with the NCCL baseline for the three paths; then DeepEP's
#                    test_low_latency.py (plain, --use-logfmt, --pressure-test) at 2 processes from
#                    .carry/deepep, on the same build.
#   TWO_GPU_PART=ht  scripts/device/ht.sh over the 2-GPU world, DeepEP's test_intranode.py at 2
#                    processes, the example, and the HT benchmark with an SM sweep and NCCL baseline.
#   TWO_GPU_PART=proxy  the LL proxy-path round trips next to the transports' own time for writes of
#                    the same sizes (bench_transport over shm, bench_cuda_ipc), same lease.
#                    PROXY_CUDA_IPC_LOOP=1 adds the proxy-cuda-ipc round trip with one
#                    cudaMemcpyAsync per copy (ANYEP_CUDA_IPC_BATCH=0) for comparison.
# Each sub-script's logs go to $OUT/<part>/ and travel back as one archive (the device tool returns
# only a few files); the tables are printed. Carry [".deps", ".carry"]; timeout_s 595.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-two-gpu-out}
PART=${TWO_GPU_PART:-ll}
mkdir -p "$OUT/$PART"
rc=0
case "$PART" in
  ll)
    OUT=$OUT/ll LL_WORLDS="${LL_WORLDS:-2gpu}" LL_BUDGET_S=${LL_BUDGET_S:-400} LL_PYTEST_S=${LL_PYTEST_S:-220} \
      LL_BENCH_S=${LL_BENCH_S:-110} LL_BENCH_ITERS=200 bash scripts/device/ll.sh > "$OUT/ll.txt" 2>&1 || rc=1
    sed -n '/== pytest2/,$p' "$OUT/ll.txt" | grep -v "^anyep._C trace" | tail -80
    OUT=$OUT/ll DEEPEP_TESTS=.carry/deepep DEEPEP_LL_S=${DEEPEP_LL_S:-60} DEEPEP_PRESSURE_S=${DEEPEP_PRESSURE_S:-50} \
      bash scripts/device/deepep_tests.sh > "$OUT/deepep.txt" 2>&1 || rc=1
    tail -40 "$OUT/deepep.txt"
    ;;
  ht)
    OUT=$OUT/ht HT_WORLDS="2gpu" HT_BUDGET_S=${HT_BUDGET_S:-420} HT_BENCH_SWEEP=${HT_BENCH_SWEEP:-8,12,16,20,24,32} \
      bash scripts/device/ht.sh > "$OUT/ht.txt" 2>&1 || rc=1
    sed -n '/== hints/,$p' "$OUT/ht.txt" | tail -100
    ;;
  proxy)
    # The LL proxy paths alone (more round trips than the ll part's benchmark), then the transports'
    # own time for bytes of the same shape in the same lease: bench_transport (anyep vs raw
    # libfabric shm, host memory, 4-64 KiB writes) and bench_cuda_ipc (post_write vs raw
    # cudaMemcpyAsync GPU0 -> GPU1). Same build folder as the ll part.
    D=$PWD/.deps/usr
    { cmake -S . -B build-lldev -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
        -DCMAKE_PREFIX_PATH="$D" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON -DANYEP_BENCH=ON -DANYEP_LIBFABRIC=ON \
        -DANYEP_TESTS=ON -DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)" &&
      cmake --build build-lldev --target anyep_python bench_transport bench_cuda_ipc -j 32; } > "$OUT/proxy/build.log" 2>&1 \
      || { rc=1; tail -30 "$OUT/proxy/build.log"; }
    export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 ANYEP_BUILD_DIR=$PWD/build-lldev
    PYTHONPATH=$PWD/build-lldev/python ANYEP_BENCH_TIMEOUT_S=200 timeout 220 python3 bench/ll/bench_ll.py --iters 20 \
      --warmup 5 --proxy-iters ${PROXY_ITERS:-100} --paths auto,proxy-libfabric,proxy-cuda-ipc \
      --json "$OUT/proxy/bench_ll.json" > "$OUT/proxy/bench_ll.log" 2>&1 || rc=1
    tail -32 "$OUT/proxy/bench_ll.log"
    if [ "${PROXY_CUDA_IPC_LOOP:-0}" = 1 ]; then
      PYTHONPATH=$PWD/build-lldev/python ANYEP_BENCH_TIMEOUT_S=100 ANYEP_CUDA_IPC_BATCH=0 timeout 120 \
        python3 bench/ll/bench_ll.py --iters 20 --warmup 5 --proxy-iters ${PROXY_ITERS:-100} --paths proxy-cuda-ipc \
        --json "$OUT/proxy/bench_ll_loop.json" > "$OUT/proxy/bench_ll_loop.log" 2>&1 || rc=1
      echo "== proxy-cuda-ipc with ANYEP_CUDA_IPC_BATCH=0 (one cudaMemcpyAsync per copy)"
      tail -12 "$OUT/proxy/bench_ll_loop.log"
    fi
    timeout 150 build-lldev/bench/transport/bench_transport --providers shm --min 4K --max 64K --reps 5 \
      > "$OUT/proxy/bench_transport.log" 2>&1 || rc=1
    grep -E "^# |^(prov|shm) " "$OUT/proxy/bench_transport.log" | tail -12
    timeout 150 build-lldev/bench/cuda_ipc/bench_cuda_ipc 5 > "$OUT/proxy/bench_cuda_ipc.log" 2>&1 || rc=1
    tail -25 "$OUT/proxy/bench_cuda_ipc.log"
    ;;
  *) echo "TWO_GPU_PART must be ll, ht or proxy"; exit 2 ;;
esac
tar -czf "$OUT/$PART-logs.tgz" -C "$OUT" "$PART" 2>/dev/null
rm -rf "${OUT:?}/$PART"
exit $rc
