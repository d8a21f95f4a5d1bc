#!/usr/bin/env bash
# Device run for the LL layer in ONE call: build what LL needs (with libfabric from .deps for the
# shm proxy path), the torch-free C++ tests, a one-process Python smoke run (step trace + native
# backtrace on a crash), then, if the smoke run passes, pytest over the worlds in LL_WORLDS (a
# pytest -k expression; default: the one-GPU worlds -- 2 and 4 processes sharing GPU 0, over direct
# stores, proxy over cuda-ipc and proxy over libfabric shm, the proxy ones also under chaos, and
# the killed-rank worlds (rank 1 gets SIGKILL between calls; LL_WORLDS=killed runs only those) --
# and, when two GPUs are visible, the 2-GPU worlds too, and with four the 4-GPU ones) with the
# checks in LL_CHECKS (empty: all), and the benchmark at the DeepEP shape, a rank per GPU, for the
# paths in LL_BENCH_PATHS with the NCCL baseline. Every step runs under `timeout`; logs in $OUT; a
# table last. Exits 1 when a step failed, timed out or was skipped for lack of budget.
#
# Device call (kind nvidia-h100-x1 or nvidia-h200; nvidia-h200-x2 adds the 2-GPU worlds and the
# proxy benchmark, nvidia-h200-x4 the 4-GPU worlds (LL_WORLDS=4gpu: only those); carry [".deps"]), from
# the repository root:
#   bash scripts/device/ll.sh            (timeout_s ~ LL_BUDGET_S + 30)
set -u
cd "$(dirname "$0")/../.."          # the LL worktree root (.carry/ll on the device)
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-ll-out}
mkdir -p "$OUT"
DEPS=""
for d in "$ROOT/.deps/usr" "$ROOT/../../.deps/usr" "$ROOT/../.deps/usr"; do
  [ -d "$d" ] && { DEPS=$(cd "$d" && pwd); break; }
done
BUILD=$ROOT/build-lldev               # own build dir: a copied build/ from another machine is never reused
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 ANYEP_TIMEOUT_S=${ANYEP_TIMEOUT_S:-5}
PY=$(command -v python3)
summary=()
START=$(date +%s)
BUDGET=${LL_BUDGET_S:-540}
# GPUs this run can use (torch honours CUDA_VISIBLE_DEVICES; nvidia-smi when torch is missing).
NGPUS=$("$PY" -c 'import torch;print(torch.cuda.device_count())' 2>/dev/null || nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
# Every multi-process world name starts with 2proc or 4proc; the one-GPU ones contain _1gpu.
if [ "${NGPUS:-0}" -ge 2 ]; then DEFAULT_WORLDS="2proc or 4proc"; else DEFAULT_WORLDS="2proc_1gpu or 4proc_1gpu"; fi

step() {  # step NAME LIMIT CMD...   (the limit shrinks to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  local left=$(( BUDGET - (t0 - START) - 3 ))
  if [ "$left" -lt 10 ]; then
    summary+=("$(printf '%-14s skipped (budget spent)' "$name")")
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local note=""
  [ "$rc" = 124 ] && note="TIMEOUT ${limit}s"
  [ "$rc" -gt 128 ] && note="killed by signal $(( rc - 128 ))"
  summary+=("$(printf '%-14s rc=%-4s %4ss %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$note")")
  return $rc
}
skip() { summary+=("$(printf '%-14s not run: %s' "$1" "$2")"); }

# Native frames of anyep._C printed by the module's fatal-signal handler -> function, file:line.
resolve_frames() {  # resolve_frames LOG
  local so=$1 log=$2
  grep -o "_C\.[^ ]*\.so(+0x[0-9a-f]*)" "$log" | sed 's/.*(+\(0x[0-9a-f]*\))/\1/' | head -20 |
    while read -r off; do echo "$off: $(addr2line -f -C -i -e "$so" "$off" | paste -sd' ')"; done
}

# ---- 0. machine ------------------------------------------------------------------------------
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda,"cxx11abi",torch._C._GLIBCXX_USE_CXX11_ABI,"gpus",torch.cuda.device_count())'
  echo "gdb: $(command -v gdb || echo absent)  cuda-gdb: $(command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null || echo absent)"
  echo "deps: ${DEPS:-none}  root: $ROOT"
} > "$OUT/machine.txt" 2>&1

# ---- 1. build (only the LL targets) ------------------------------------------------------------
CFG=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
     ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON} -DANYEP_BENCH=OFF -DANYEP_LIBFABRIC=ON -DANYEP_TESTS=ON -DPython3_EXECUTABLE="$PY")
TARGETS=(anyep_python test_ll_layout test_ll_single_rank)
if ! step configure 60 cmake "${CFG[@]}" -DANYEP_PYTHON=ON; then
  # Without the extension (torch not importable?): still build and run the torch-free C++ tests.
  step configure_nopy 60 cmake "${CFG[@]}" -DANYEP_PYTHON=OFF
  TARGETS=(test_ll_layout test_ll_single_rank)
fi
step build 130 cmake --build "$BUILD" --target "${TARGETS[@]}" -j 16 -- -k 0
SO=$(ls "$BUILD"/python/anyep/_C*.so 2>/dev/null | head -1)
if [ -n "$SO" ]; then
  {  # how the module is linked: one shared libcudart (torch's), no static copy, no exported CUDA API
    echo "== ldd"; ldd "$SO" | grep -Ei "cudart|torch|c10|python|stdc"
    echo "== NEEDED / RPATH"; readelf -d "$SO" | grep -E "NEEDED|RPATH|RUNPATH"
    echo "== CUDA runtime symbols defined inside the module (a static cudart would show here)"
    nm -D --defined-only "$SO" | grep -ciE " (cuda|__cuda)" || true
    nm -C "$SO" | grep -iE " [tT] (cudaLaunchKernel|__cudaRegisterFatBinary|cudaGetDevice)\b" | head || true
    echo "== exported dynamic symbols: $(nm -D --defined-only "$SO" | wc -l) (libstdc++: $(nm -D --defined-only "$SO" | grep -c " _ZNS[io]\| _ZNSt"))"
    echo "== compile flags of ll_ext.cpp"
    grep -A6 "ll_ext.cpp.o:" "$BUILD/build.ninja" | grep -E "FLAGS|DEFINES" | cut -c1-1500
  } > "$OUT/linkcheck.txt" 2>&1
fi

# ---- 2. C++ tests without torch ----------------------------------------------------------------
step cpp_layout 20 "$BUILD/tests/unit/kernels/test_ll_layout"
step cpp_single 40 env ANYEP_TIMEOUT_S=5 "$BUILD/tests/gpu/ll/test_ll_single_rank"

# ---- 3. one-process Python smoke run -----------------------------------------------------------
export PYTHONPATH=$BUILD/python ANYEP_BUILD_DIR=$BUILD ANYEP_TEST_LOG_DIR=$OUT
SMOKE_OK=0
if [ -z "$SO" ]; then
  skip smoke "anyep._C was not built"
else
  step smoke 45 env ANYEP_LL_TRACE=1 "$PY" -X faulthandler tests/python/ll_smoke.py
  SRC=$?
  if [ "$SRC" = 0 ]; then
    SMOKE_OK=1
  elif [ "$SRC" -gt 128 ] && [ "$SRC" != 137 ]; then  # killed by a signal (not our timeout's SIGKILL)
    resolve_frames "$SO" "$OUT/smoke.log" > "$OUT/smoke_frames.txt" 2>&1
    # A debugger only when the module's own handler printed no native backtrace (a crash on another
    # thread, or before the module loaded): cuda-gdb loading torch's symbols is slow.
    DBG=$(command -v gdb || command -v cuda-gdb || ls /usr/local/cuda/bin/cuda-gdb 2>/dev/null)
    if grep -q "anyep._C: fatal signal" "$OUT/smoke.log"; then
      skip smoke_gdb "the module's handler printed the native backtrace (smoke.log)"
    elif [ -n "$DBG" ]; then
      step smoke_gdb 80 env LL_SMOKE_PORT=29535 ANYEP_LL_TRACE=1 "$DBG" -batch -nx -ex "set pagination off" \
        -ex "set confirm off" -ex "handle SIGPIPE nostop noprint" -ex "handle SIGUSR1 nostop noprint" -ex run \
        -ex "bt 40" -ex "info threads" -ex "thread apply all bt 8" \
        --args "$PY" tests/python/ll_smoke.py
    else
      skip smoke_gdb "neither gdb nor cuda-gdb found"
    fi
  fi  # other failures (wrong data, a device timeout, a Python error) are in smoke.log
fi

# ---- 4. 2 processes on 2 GPUs, then the benchmark ----------------------------------------------
if [ "$SMOKE_OK" = 0 ]; then
  skip pytest2 "the smoke run failed"
  skip bench "the smoke run failed"
else
  CHECKS=${LL_CHECKS-}  # empty: every check
  step pytest2 "${LL_PYTEST_S:-360}" env ANYEP_TEST_LL_CHECKS=$CHECKS ANYEP_TEST_WORLD_TIMEOUT_S=${LL_WORLD_S:-150} \
    ANYEP_TEST_STACKS_AFTER_S=${LL_STACKS_S:-120} ANYEP_LL_TRACE=${LL_TRACE:-0} \
    "$PY" -m pytest -s -q -rs tests/python/test_ll.py -k "${LL_WORLDS:-$DEFAULT_WORLDS}" --junitxml="$OUT/pytest2.xml"
  # A rank per visible GPU (bench_ll.py's default); one rank has no peer for the proxy paths.
  if [ "${NGPUS:-0}" -ge 1 ]; then
    paths=auto
    [ "${NGPUS:-0}" -ge 2 ] && paths=auto,proxy-libfabric,proxy-cuda-ipc
    step bench "${LL_BENCH_S:-120}" env ANYEP_BENCH_TIMEOUT_S=$(( ${LL_BENCH_S:-120} - 5 )) "$PY" bench/ll/bench_ll.py \
      --iters "${LL_BENCH_ITERS:-200}" --warmup 20 --paths "${LL_BENCH_PATHS:-$paths}" --json "$OUT/bench.json"
  else
    skip bench "needs a GPU, none visible"
  fi
fi

# ---- summary -----------------------------------------------------------------------------------
echo "== logs: $OUT"
cat "$OUT/machine.txt"
tail -n 4 "$OUT/build.log" 2>/dev/null
[ -f "$OUT/linkcheck.txt" ] && head -n 30 "$OUT/linkcheck.txt"
for f in cpp_layout cpp_single; do echo "== $f"; grep -E "PASSED|FAILED|SKIPPED|Failure|error" "$OUT/$f.log" | head -12; done
for f in smoke; do
  [ -f "$OUT/$f.log" ] || continue
  echo "== $f (last 40 lines)"; tail -n 40 "$OUT/$f.log" | { c++filt 2>/dev/null || cat; }
  [ -s "$OUT/${f}_frames.txt" ] && { echo "== $f: module frames"; cat "$OUT/${f}_frames.txt"; }
done
[ -f "$OUT/smoke_gdb.log" ] && { echo "== gdb"; grep -E -A40 "received signal|^#0" "$OUT/smoke_gdb.log" | head -60; tail -n 5 "$OUT/smoke_gdb.log"; }
[ -f "$OUT/pytest2.log" ] && { echo "== pytest2"; grep -hE "rank [0-9]+: |passed|failed|PASSED|FAILED|error|Error" "$OUT/pytest2.log" | grep -v "^anyep._C trace" | tail -n 60; }
[ -f "$OUT/bench.log" ] && { echo "== bench"; tail -n 40 "$OUT/bench.log"; }
# The device tool returns only a few files: the per-rank logs travel as one archive.
if ls "$OUT"/ll_*.log > /dev/null 2>&1; then
  tar -czf "$OUT/rank_logs.tgz" -C "$OUT" $(cd "$OUT" && ls ll_*.log) && rm -f "$OUT"/ll_*.log
fi
echo "== summary (rc 124: timeout; rc > 128: killed by signal rc-128)"
echo "GPUs visible: ${NGPUS:-0}; worlds: ${LL_WORLDS:-$DEFAULT_WORLDS}"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE 'rc=[1-9]|budget spent' && exit 1
exit 0
