#!/usr/bin/env bash
# Device run for the LL layer, in one call: build (kernels, runtime, Python extension, C++ tests),
# C++ tests without torch, a one-process smoke run (under gdb when it crashes), pytest with 1, 2
# and 4 processes, and the benchmark at the DeepEP shape with the NCCL baseline. Full logs in
# $OUT; a short table last. Usage, from the repository root on the device machine:
#   OUT=/tmp/out scripts/device/ll.sh [deps_prefix]
set -u
OUT=${OUT:-/tmp/anyep-ll-out}
mkdir -p "$OUT"
DEPS=${1:-$PWD/.deps/usr}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PY=$(command -v python3)
summary=()
START=$(date +%s)
BUDGET=${LL_BUDGET_S:-570}  # the whole script stays under the device tool's 600 s per call

step() {  # step NAME TIMEOUT CMD...  (the timeout shrinks to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  local left=$(( BUDGET - (t0 - START) - 5 ))
  if [ "$left" -lt 15 ]; then
    summary+=("$(printf '%-10s skipped (budget spent)' "$name")")
    return 124
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
  return $rc
}

nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt" 2>&1
step configure 120 cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$DEPS" -DANYEP_PYTHON=ON -DANYEP_BENCH=OFF -DPython3_EXECUTABLE="$PY"
step build 300 cmake --build build --target anyep_python test_ll_layout test_ll_single_rank -j 16
step cpptests 60 ctest --test-dir build -L ll --output-on-failure
export PYTHONPATH=$PWD/build/python ANYEP_TEST_LOG_DIR=$OUT
if ! step smoke 60 "$PY" tests/python/ll_smoke.py && command -v gdb > /dev/null; then
  step smoke_gdb 90 gdb -batch -ex run -ex bt --args "$PY" tests/python/ll_smoke.py
fi
export ANYEP_TEST_WORLD_TIMEOUT_S=100
step pytest1 120 "$PY" -m pytest -s -q -rs tests/python -k 1proc --junitxml="$OUT/pytest1.xml"
export ANYEP_TEST_WORLD_TIMEOUT_S=130
step pytest2 150 "$PY" -m pytest -s -q -rs tests/python -k 2proc --junitxml="$OUT/pytest2.xml"
step bench 110 env ANYEP_TIMEOUT_S=5 "$PY" bench/ll/bench_ll.py --iters 500 --json "$OUT/bench.json"
export ANYEP_TEST_WORLD_TIMEOUT_S=170
step pytest4 190 "$PY" -m pytest -s -q -rs tests/python -k 4proc --junitxml="$OUT/pytest4.xml"
if [ "${LL_PIP:-0}" = 1 ]; then
  step pip 300 "$PY" -m pip install --no-build-isolation --no-deps --target "$OUT/../pipcheck" ./python
fi

echo "== logs: $OUT"
tail -n 5 "$OUT/cpptests.log"
cat "$OUT/smoke.log"
[ -f "$OUT/smoke_gdb.log" ] && grep -A25 "SIGSEGV\|^#0" "$OUT/smoke_gdb.log" | head -40
grep -hE "rank [0-9]+: c_|passed|failed|skipped" "$OUT"/pytest[124].log | tail -n 60
cat "$OUT/bench.log"
printf '%s\n' "${summary[@]}"
