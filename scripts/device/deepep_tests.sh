#!/usr/bin/env bash
# DeepEP's own tests, unmodified, against anyep's `deep_ep` package: the drop-in bar.
# The tests are not part of this repository: bring DeepEP's tests/ folder (test_low_latency.py and
# utils.py at commit 567632d) in a git-ignored folder, e.g.
#   git -C <DeepEP clone> show 567632d:tests/test_low_latency.py > .carry/deepep/test_low_latency.py
#   git -C <DeepEP clone> show 567632d:tests/utils.py           > .carry/deepep/utils.py
# and run (device call with carry [".deps", ".carry"]):
#   DEEPEP_TESTS=.carry/deepep bash scripts/device/deepep_tests.sh
# It builds the extension as scripts/device/ll.sh does (same build folder), then runs, each under
# `timeout`: test_low_latency.py plain, with --use-logfmt, and with --pressure-test (which loops
# forever by design: it passes if it finishes >= DEEPEP_PRESSURE_SEEDS seeds without an error
# before its timeout; the seed the timeout interrupts does not count). --num-processes is the
# number of visible GPUs (DEEPEP_NPROC overrides).
# DEEPEP_RUNS (default "plain logfmt pressure") picks the runs. Logs under $OUT; a table last; exit 1
# if a run failed.
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-deepep-out}
mkdir -p "$OUT"
TESTS=$(cd "${DEEPEP_TESTS:-.carry/deepep}" 2>/dev/null && pwd) || { echo "DEEPEP_TESTS folder not found"; exit 2; }
[ -f "$TESTS/test_low_latency.py" ] && [ -f "$TESTS/utils.py" ] || { echo "no test_low_latency.py/utils.py in $TESTS"; exit 2; }
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1
PY=$(command -v python3)
BUILD=$ROOT/build-lldev
DEPS=""
[ -d "$ROOT/.deps/usr" ] && DEPS=$ROOT/.deps/usr
NGPUS=$("$PY" -c 'import torch; print(torch.cuda.device_count())' 2>/dev/null || echo 0)
NPROC=${DEEPEP_NPROC:-$NGPUS}
rows=()
failed=0

run() {  # run NAME LIMIT CMD...
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  rows+=("$(printf '%-22s rc=%-4s %4ss' "$name" "$rc" "$(( $(date +%s) - t0 ))")")
  return $rc
}

if [ ! -f "$BUILD/build.ninja" ]; then
  run configure 90 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
    ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON} -DANYEP_BENCH=OFF \
    -DANYEP_TESTS=ON -DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$PY" || failed=1
fi
run build 200 cmake --build "$BUILD" --target anyep_python -j 16 || failed=1
# The installed-package view: deep_ep and anyep from the build, the tests from their own folder.
export PYTHONPATH=$BUILD/python
cd "$TESTS"
LL=(test_low_latency.py --num-processes "$NPROC")
RUNS=" ${DEEPEP_RUNS:-plain logfmt pressure} "
if [[ $RUNS == *" plain "* ]]; then run ll_plain "${DEEPEP_LL_S:-240}" "$PY" "${LL[@]}" || failed=1; fi
if [[ $RUNS == *" logfmt "* ]]; then run ll_logfmt "${DEEPEP_LL_S:-240}" "$PY" "${LL[@]}" --use-logfmt || failed=1; fi
if [[ $RUNS == *" pressure "* ]]; then
  limit=${DEEPEP_PRESSURE_S:-150}
  run ll_pressure "$limit" "$PY" "${LL[@]}" --pressure-test
  rc=$?
  # Seeds finished: every "Testing with seed" line but the last, which the timeout interrupted.
  started=$(grep -c "Testing with seed" "$OUT/ll_pressure.log" 2>/dev/null || echo 0)
  seeds=$(( started > 0 ? started - 1 : 0 ))
  want=${DEEPEP_PRESSURE_SEEDS:-3}
  if grep -qE "Error|Traceback|AssertionError" "$OUT/ll_pressure.log" || { [ "$rc" != 124 ] && [ "$rc" != 0 ]; }; then
    failed=1
    err=$(grep -E "Error|assert" "$OUT/ll_pressure.log" | grep -v "^Traceback" | tail -1 | cut -c1-160)
    rows+=("ll_pressure: FAILED ($seeds seeds finished, rc $rc; last error line: ${err:-none printed})")
  elif [ "$seeds" -lt "$want" ]; then
    # No error, but the timeout came first: say how long a seed took here, so the next run's limit fits.
    failed=1
    per=$(( started > 0 ? limit / started : limit ))
    rows+=("ll_pressure: FAILED (no error, but only $seeds of $want seeds finished in ${limit}s; ~${per}s a seed here: DEEPEP_PRESSURE_S >= $(( per * (want + 1) )) would fit them)")
  else
    rows+=("ll_pressure: ok ($seeds seeds finished before the timeout ended it)")
  fi
fi
cd "$ROOT"

echo "== DeepEP tests against anyep's deep_ep: $(date -u), $(nvidia-smi --query-gpu=name --format=csv,noheader | head -1), $NPROC process(es)"
for f in ll_plain ll_logfmt; do
  [ -f "$OUT/$f.log" ] || continue
  echo "-- $f"; grep -E "^\[rank 0\]|Error|error|Traceback|assert" "$OUT/$f.log" | head -20
done
printf '%s\n' "${rows[@]}"
exit $failed
