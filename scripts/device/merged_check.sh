#!/usr/bin/env bash
# One short device call after merging branches that touch CUDA code paths (the HIP port, the
# cuda-ipc batching, the C API's HT calls): ONE build, then the checks that would show a CUDA
# behaviour change, each under `timeout`, a table last.
#   ll:    scripts/device/ll.sh over 2proc_1gpu (direct stores) and 2proc_1gpu_proxy_cudaipc (the
#          batched cuda-ipc copies) with CHECK_LL_CHECKS;
#   ht:    the HT pytest world 2proc_1gpu (CHECK_HT_WORLDS) and, with CHECK_HT_DEEPEP=1, DeepEP's
#          test_intranode.py at 1 process, on the same build;
#   capi:  scripts/device/capi.sh CAPI_PARTS=c on the same build folder (C API error tests, the C
#          example's LL and HT rounds on the GPU across 2 processes, every value checked);
#   pip:   scripts/device/capi.sh CAPI_PARTS=pip (venv, pip install ./python, import from elsewhere);
#   ipc:   bench_cuda_ipc (both ranks on GPU 0 with one GPU).
# CHECK_PARTS picks ("ll ht capi pip" by default; each part has a time budget, ~6 minutes in all,
# sized for the few minutes of device time a session has left). Carry [".deps", ".carry"];
# timeout_s 420.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-merged-out}
mkdir -p "$OUT/logs"
PARTS=" ${CHECK_PARTS:-ll ht capi pip} "
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
rows=()
rc_all=0
note() { rows+=("$(printf '%-12s rc=%-4s %4ss' "$1" "$2" "$3")"); [ "$2" = 0 ] || rc_all=1; }
run() {  # run NAME LIMIT CMD...
  local name=$1 limit=$2 t0=$(date +%s); shift 2
  timeout -k 5 "$limit" "$@" > "$OUT/logs/$name.log" 2>&1
  note "$name" $? $(( $(date +%s) - t0 ))
}

if [[ $PARTS == *" ll "* ]]; then
  OUT=$OUT/logs/ll LL_WORLDS="2proc_1gpu and not chaos and not killed and not shm" \
    LL_CHECKS=${CHECK_LL_CHECKS:-c_bf16_random,c_hook,c_logfmt,c_mask_rank} \
    LL_BUDGET_S=${CHECK_LL_S:-90} LL_PYTEST_S=45 bash scripts/device/ll.sh > "$OUT/logs/ll.txt" 2>&1
  note ll $? 0
  sed -n '/== summary/,$p' "$OUT/logs/ll.txt"
  grep -hE "rank 0: c_|passed|failed" "$OUT/logs/ll/pytest2.log" 2>/dev/null | cut -c1-200 | tail -12
fi
# The HT checks reuse the LL build (same configuration but the build folder's name).
[ -d build-lldev ] && [ ! -e build-htdev ] && ln -s build-lldev build-htdev
if [[ $PARTS == *" ht "* ]]; then
  cmake --build build-lldev --target anyep_python -j 16 > "$OUT/logs/ht_build.log" 2>&1 || note ht_build 1 0
  export PYTHONPATH=$ROOT/build-lldev/python ANYEP_BUILD_DIR=$ROOT/build-lldev ANYEP_TIMEOUT_S=10
  run ht_pytest 40 python3 -m pytest -q -rs tests/python/test_ht.py -k "${CHECK_HT_WORLDS:-2proc_1gpu}"
  tail -3 "$OUT/logs/ht_pytest.log"
  if [ "${CHECK_HT_DEEPEP:-0}" = 1 ]; then
    run ht_deepep 30 bash -c "cd .carry/deepep && python3 test_intranode.py --num-processes 1"
    grep -E "passed|Best|Error" "$OUT/logs/ht_deepep.log" | tail -5
  fi
fi
if [[ $PARTS == *" capi "* ]]; then
  [ -d build-lldev ] && [ ! -e build-capidev ] && ln -s build-lldev build-capidev
  OUT=$OUT/logs/capi CAPI_PARTS=c CAPI_BUDGET_S=${CHECK_CAPI_S:-80} bash scripts/device/capi.sh > "$OUT/logs/capi.txt" 2>&1
  note capi $? 0
  grep -E "rc=|HT dispatch|exact|FAIL" "$OUT/logs/capi.txt" | tail -20
fi
if [[ $PARTS == *" pip "* ]]; then
  OUT=$OUT/logs/pip CAPI_PARTS=pip CAPI_BUDGET_S=${CHECK_PIP_S:-90} bash scripts/device/capi.sh > "$OUT/logs/pip.txt" 2>&1
  note pip $? 0
  tail -22 "$OUT/logs/pip.txt"
fi
if [[ $PARTS == *" ipc "* ]]; then
  cmake -S . -B build-lldev -DANYEP_BENCH=ON > /dev/null 2>&1 && cmake --build build-lldev --target bench_cuda_ipc -j 16 \
    > "$OUT/logs/ipc_build.log" 2>&1 || note ipc_build 1 0
  run ipc_bench 60 build-lldev/bench/cuda_ipc/bench_cuda_ipc 3
  tail -22 "$OUT/logs/ipc_bench.log"
fi
tar -czf "$OUT/logs.tgz" -C "$OUT" logs && rm -rf "$OUT/logs"
echo "== merged check: $(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1)"
printf '%s\n' "${rows[@]}"
exit $rc_all
