#!/usr/bin/env bash
# Device run for the HT (high-throughput, DeepEP's normal mode) layer in ONE call: build the
# extension (its own build folder), print the HT size hints at the docs' shapes, then pytest over
# the HT worlds (1 process, 2 and 4 processes sharing GPU 0; with two GPUs also 2 processes on 2
# GPUs), the autograd example, DeepEP's own tests/test_intranode.py, unmodified, from the
# git-ignored folder .carry/deepep (DEEPEP_TESTS), with --num-processes = the visible GPUs (one
# GPU: 1 process; anyep serves one rank), and a short benchmark. Every step runs under `timeout` within
# HT_BUDGET_S (default 530 s, under 9 minutes on one H100); logs in $OUT; a table last. Exits 1
# when a step failed, timed out or was skipped for lack of budget.
#
# DeepEP's tests (commit 567632d) in .carry/deepep: test_intranode.py, test_low_latency.py (it
# imports it) and utils.py, e.g.
#   for f in test_intranode.py test_low_latency.py utils.py; do
#     git -C <DeepEP clone> show 567632d:tests/$f > .carry/deepep/$f; done
# Device call (kind nvidia-h100-x1 or nvidia-h200; nvidia-h200-x2 adds the 2-GPU world and the
# NCCL baseline; carry [".deps", ".carry"]), from the repository root:
#   bash scripts/device/ht.sh            (timeout_s ~ HT_BUDGET_S + 30)
# Knobs: HT_WORLDS (a pytest -k expression), HT_CHECKS (ANYEP_TEST_HT_CHECKS), HT_SKIP_DEEPEP=1.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-ht-out}
mkdir -p "$OUT"
DEPS=""
for d in "$ROOT/.deps/usr" "$ROOT/../../.deps/usr" "$ROOT/../.deps/usr"; do
  [ -d "$d" ] && { DEPS=$(cd "$d" && pwd); break; }
done
BUILD=$ROOT/build-htdev               # own build dir: a copied build/ from another machine is never reused
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 ANYEP_TIMEOUT_S=${ANYEP_TIMEOUT_S:-10}
PY=$(command -v python3)
summary=()
START=$(date +%s)
BUDGET=${HT_BUDGET_S:-530}
NGPUS=$("$PY" -c 'import torch;print(torch.cuda.device_count())' 2>/dev/null || nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
if [ "${NGPUS:-0}" -ge 2 ]; then DEFAULT_WORLDS="1gpu or 2gpu"; else DEFAULT_WORLDS="1gpu"; fi
WORLDS=${HT_WORLDS:-$DEFAULT_WORLDS}

step() {  # step NAME LIMIT CMD...   (the limit shrinks to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  local left=$(( BUDGET - (t0 - START) - 3 ))
  if [ "$left" -lt 10 ]; then
    summary+=("$(printf '%-12s skipped (budget spent)' "$name")")
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local note=""
  [ "$rc" = 124 ] && note="TIMEOUT ${limit}s"
  [ "$rc" -gt 128 ] && note="killed by signal $(( rc - 128 ))"
  summary+=("$(printf '%-12s rc=%-4s %4ss %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$note")")
  return $rc
}
fail() { summary+=("$(printf '%-12s rc=1    not run: %s' "$1" "$2")"); }

# ---- 0. machine ------------------------------------------------------------------------------
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda,"gpus",torch.cuda.device_count())'
  echo "deps: ${DEPS:-none}  root: $ROOT  worlds: $WORLDS"
} > "$OUT/machine.txt" 2>&1

# ---- 1. build the extension --------------------------------------------------------------------
CFG=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
     ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON} -DANYEP_BENCH=OFF -DANYEP_TESTS=ON
     -DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$PY")
step configure 60 cmake "${CFG[@]}"
step build 200 cmake --build "$BUILD" --target anyep_python -j 16
SO=$(ls "$BUILD"/python/anyep/_C*.so 2>/dev/null | head -1)
export PYTHONPATH=$BUILD/python ANYEP_BUILD_DIR=$BUILD ANYEP_TEST_LOG_DIR=$OUT

if [ -z "$SO" ]; then
  for s in hints pytest example bench deepep; do fail "$s" "anyep._C was not built"; done
else
  # ---- 2. size hints at the docs' shapes (docs/ht.md, "Memory") -------------------------------
  step hints 30 "$PY" -c '
import anyep
from anyep import Buffer, Config
print("HT region (Config.get_nvl_buffer_size_hint(hidden*2, R)) and LL region (get_low_latency_rdma_size_hint)")
for R in (1, 2, 4, 8, 16):
    for sms, ring in ((24, 256), (20, 256)):
        print(f"R={R:2d} hidden=7168 Config({sms}, ., {ring}): HT {Config(sms, 6, ring).get_nvl_buffer_size_hint(7168 * 2, R):,} B")
    print(f"R={R:2d} default dispatch config: HT {Buffer.get_dispatch_config(R).get_nvl_buffer_size_hint(7168 * 2, R):,} B")
for R in (2, 8):
    print(f"R={R} LL (128 tokens, 7168, 288 experts): {Buffer.get_low_latency_rdma_size_hint(128, 7168, R, 288):,} B")
'

  # ---- 3. pytest worlds --------------------------------------------------------------------------
  step pytest "${HT_PYTEST_S:-180}" env ANYEP_TEST_HT_CHECKS="${HT_CHECKS-}" \
    ANYEP_TEST_WORLD_TIMEOUT_S="${HT_WORLD_S:-120}" ANYEP_TEST_STACKS_AFTER_S="${HT_STACKS_S:-100}" \
    "$PY" -m pytest -s -q -rs tests/python/test_ht.py -k "$WORLDS" --junitxml="$OUT/pytest.xml"

  # ---- 4. the autograd example (2 processes; they share GPU 0 on one GPU) ----------------------
  step example 60 "$PY" examples/moe_layer.py --processes 2 --timeout 50

  # ---- 5. DeepEP's test_intranode.py, unmodified -------------------------------------------------
  TESTS=$(cd "${DEEPEP_TESTS:-.carry/deepep}" 2>/dev/null && pwd)
  if [ "${HT_SKIP_DEEPEP:-0}" = 1 ]; then
    summary+=("$(printf '%-12s not run (HT_SKIP_DEEPEP=1)' deepep)")
  elif [ -z "$TESTS" ] || [ ! -f "$TESTS/test_intranode.py" ] || [ ! -f "$TESTS/test_low_latency.py" ] \
       || [ ! -f "$TESTS/utils.py" ]; then
    fail deepep "no test_intranode.py, test_low_latency.py and utils.py in ${DEEPEP_TESTS:-.carry/deepep}"
  else
    NPROC=${DEEPEP_NPROC:-$NGPUS}
    [ "${NPROC:-0}" -ge 1 ] || NPROC=1
    step deepep "${HT_DEEPEP_S:-100}" bash -c "cd '$TESTS' && exec '$PY' test_intranode.py --num-processes $NPROC"
  fi

  # ---- 6. the benchmark, short -------------------------------------------------------------------
  step bench 60 env ANYEP_BENCH_TIMEOUT_S=55 "$PY" bench/ht/bench_ht.py --warmup 3 --iters 8 \
    --sweep "${HT_BENCH_SWEEP:-8,16,24,32}" --json "$OUT/bench.json"
fi

# ---- summary -----------------------------------------------------------------------------------
echo "== logs: $OUT"
cat "$OUT/machine.txt"
tail -n 4 "$OUT/build.log" 2>/dev/null
[ -f "$OUT/hints.log" ] && { echo "== hints"; cat "$OUT/hints.log"; }
[ -f "$OUT/pytest.log" ] && { echo "== pytest"; grep -hE "rank [0-9]+: |passed|failed|PASSED|FAILED|SKIPPED|Error" "$OUT/pytest.log" | tail -n 60; }
[ -f "$OUT/example.log" ] && { echo "== example"; tail -n 20 "$OUT/example.log"; }
[ -f "$OUT/bench.log" ] && { echo "== bench"; tail -n 30 "$OUT/bench.log"; }
[ -f "$OUT/deepep.log" ] && { echo "== DeepEP test_intranode.py (--num-processes ${NPROC:-?})"; grep -vE "^\[tuning\] SMs" "$OUT/deepep.log" | tail -n 40; }
# The device tool returns only a few files: the per-rank logs travel as one archive.
if ls "$OUT"/ht_*.log > /dev/null 2>&1; then
  tar -czf "$OUT/rank_logs.tgz" -C "$OUT" $(cd "$OUT" && ls ht_*.log) && rm -f "$OUT"/ht_*.log
fi
echo "== summary (rc 124: timeout; rc > 128: killed by signal rc-128)"
echo "GPUs visible: ${NGPUS:-0}; worlds: $WORLDS"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE 'rc=[1-9]|budget spent' && exit 1
exit 0
