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
source scripts/device/deepep_common.sh
build_anyep 200
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
