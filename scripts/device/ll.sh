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
export PYTHONPATH=$PWD/build/python
step pytest 420 "$PY" -m pytest -q -rs tests/python --junitxml="$OUT/pytest.xml"
step bench 200 "$PY" bench/ll/bench_ll.py --iters 500 --json "$OUT/bench.json"
if [ "${LL_PIP:-0}" = 1 ]; then
  step pip 300 "$PY" -m pip install --no-build-isolation --no-deps --target "$OUT/../pipcheck" ./python
fi

echo "== logs: $OUT"
tail -n 25 "$OUT/pytest.log"
grep -E "error|Error" "$OUT/build.log" | head -20
cat "$OUT/bench.log"
printf '%s\n' "${summary[@]}"
