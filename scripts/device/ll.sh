#!/usr/bin/env bash
# Device run for the LL layer: build (kernels, runtime, Python extension), pytest on 2 GPUs
# (2 and 4 processes), benchmark at the DeepEP shape with the NCCL baseline. Full logs in $OUT;
# a short table last. Usage (repository root on the device machine):
#   OUT=/tmp/out scripts/device/ll.sh [deps_prefix]
set -u
OUT=${OUT:-/tmp/anyep-ll-out}
mkdir -p "$OUT"
DEPS=${1:-$PWD/.deps/usr}
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
PY=$(command -v python3)
summary=()

step() {  # step NAME TIMEOUT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  summary+=("$(printf '%-10s rc=%-3s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
  return $rc
}

nvidia-smi --query-gpu=name,memory.total --format=csv > "$OUT/gpus.txt" 2>&1
step configure 120 cmake -S . -B build -G Ninja -DCMAKE_BUILD_TYPE=Release -DCMAKE_CUDA_ARCHITECTURES=90 \
  -DCMAKE_PREFIX_PATH="$DEPS" -DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$PY"
step kernels 300 cmake --build build --target anyep_kernels -j 2   # CI-like: 2 jobs
step build 400 cmake --build build --target anyep_python -j 16
export PYTHONPATH=$PWD/build/python ANYEP_TEST_LOG_DIR=$OUT PYTHONUNBUFFERED=1
export ANYEP_TEST_WORLD_TIMEOUT_S=130
step pytest2 150 "$PY" -m pytest -s -q -rs tests/python -k 2proc \
  --junitxml="$OUT/pytest2.xml"
step bench 110 env ANYEP_TIMEOUT_S=5 "$PY" bench/ll/bench_ll.py --iters 500 --json "$OUT/bench.json"
export ANYEP_TEST_WORLD_TIMEOUT_S=170
step pytest4 190 "$PY" -m pytest -s -q -rs tests/python -k 4proc \
  --junitxml="$OUT/pytest4.xml"
if [ "${LL_PIP:-0}" = 1 ]; then
  step pip 300 "$PY" -m pip install --no-build-isolation --no-deps --target "$OUT/../pipcheck" ./python
fi

echo "== logs: $OUT"
grep -hE "rank [0-9]+: c_|FAILED|passed|failed|setup" "$OUT/pytest2.log" "$OUT/pytest4.log" | tail -n 60
grep -E "error|Error" "$OUT/build.log" | head -20
cat "$OUT/bench.log"
printf '%s\n' "${summary[@]}"
