#!/usr/bin/env bash
# Device run for the LogFMT combine (use_logfmt=True) and the elastic clean, in ONE call:
#  1. scripts/device/ll.sh with the checks that cover them (LOGFMT_CHECKS) over the one-GPU worlds
#     (1, 2 and 4 processes on GPU 0: direct stores, proxy over cuda-ipc and libfabric shm, with
#     and without chaos): it builds, runs the C++ LL tests (test_ll_single_rank has
#     LLSingleRank.LogfmtCombineRounds), the smoke run, then pytest;
#  2. DeepEP's own tests/test_low_latency.py --use-logfmt (scripts/device/deepep_tests.sh with
#     DEEPEP_RUNS=logfmt), when DeepEP's tests are carried (.carry/deepep; see that script).
# Prints both tables and the lines that prove the LogFMT parts ran; exits 1 if a step failed or was
# skipped for lack of budget, 2 if DeepEP's tests are missing (after step 1 passed).
#
# Device call (kind nvidia-h100-x1 or nvidia-h200; carry [".deps", ".carry"]), repository root:
#   bash scripts/device/logfmt.sh            (timeout_s 600; both steps)
# or in two calls on the same warm machine (the second reuses the build):
#   LOGFMT_STEPS=ll bash scripts/device/logfmt.sh
#   LOGFMT_STEPS=deepep bash scripts/device/logfmt.sh
# Knobs: LOGFMT_STEPS ("ll deepep"), LOGFMT_CHECKS (pytest checks), LOGFMT_WORLDS (pytest -k),
# LL_BUDGET_S (step 1, default 400), DEEPEP_LL_S (step 2, default 150).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-logfmt-out}
mkdir -p "$OUT/ll" "$OUT/deepep"
CHECKS=${LOGFMT_CHECKS:-c_bad_input,c_bf16_random,c_logfmt,c_mask_rank,c_dead_rank,c_dead_rank_clean}
WORLDS=${LOGFMT_WORLDS:-(1proc_1gpu or 2proc_1gpu or 4proc_1gpu) and not killed}
STEPS=" ${LOGFMT_STEPS:-ll deepep} "
rc_ll=0
rc_deepep=0

if [[ $STEPS == *" ll "* ]]; then
echo "== 1. LL tests: checks $CHECKS; worlds: $WORLDS"
OUT=$OUT/ll LL_CHECKS=$CHECKS LL_WORLDS=$WORLDS LL_BUDGET_S=${LL_BUDGET_S:-400} LL_PYTEST_S=${LL_PYTEST_S:-300} \
  bash scripts/device/ll.sh > "$OUT/ll.txt" 2>&1 || rc_ll=$?
tail -n 40 "$OUT/ll.txt"
echo "-- C++: LLSingleRank.LogfmtCombineRounds"
grep -hE "LogfmtCombineRounds" "$OUT/ll/cpp_single.log" 2>/dev/null | head -3
echo "-- pytest: per test (from the JUnit XML)"
python3 - "$OUT/ll/pytest2.xml" <<'PY' || true
import sys, xml.etree.ElementTree as ET
try:
    cases = ET.parse(sys.argv[1]).getroot().iter("testcase")
except Exception as e:
    print(f"no pytest results ({e})"); sys.exit(0)
rows = {}
for c in cases:
    name = c.get("name", "")
    state = "FAILED" if c.find("failure") is not None or c.find("error") is not None else \
        "skipped" if c.find("skipped") is not None else "passed"
    check, _, world = name.partition("[")[2].rstrip("]").partition("-")
    rows.setdefault(check, []).append((world, state))
for check, res in sorted(rows.items()):
    n = {s: sum(1 for _, x in res if x == s) for s in ("passed", "FAILED", "skipped")}
    print(f"{check:20s} passed {n['passed']:2d}  failed {n['FAILED']:2d}  skipped {n['skipped']:2d}"
          + ("  failed in: " + ", ".join(w for w, x in res if x == "FAILED") if n["FAILED"] else ""))
PY
echo "-- per-rank progress of the LogFMT and elastic-clean checks"
grep -hE "rank [0-9]+: (c_logfmt|c_dead_rank_clean): " "$OUT/ll/pytest2.log" 2>/dev/null | head -60
fi

if [[ $STEPS != *" deepep "* ]]; then
  echo "== 2. DeepEP's test: not in LOGFMT_STEPS"
elif [ -f "${DEEPEP_TESTS:-.carry/deepep}/test_low_latency.py" ]; then
  echo "== 2. DeepEP's test_low_latency.py --use-logfmt"
  OUT=$OUT/deepep DEEPEP_RUNS=logfmt DEEPEP_LL_S=${DEEPEP_LL_S:-150} bash scripts/device/deepep_tests.sh \
    > "$OUT/deepep.txt" 2>&1 || rc_deepep=$?
  cat "$OUT/deepep.txt"
  echo "-- its last lines"
  tail -n 15 "$OUT/deepep/ll_logfmt.log" 2>/dev/null
else
  echo "DeepEP's tests not found in ${DEEPEP_TESTS:-.carry/deepep} (carry .carry; see scripts/device/deepep_tests.sh)"
  rc_deepep=2
fi

echo "== summary: ll.sh rc=$rc_ll, deepep_tests.sh (logfmt) rc=$rc_deepep; logs in $OUT"
[ "$rc_ll" != 0 ] && exit 1
[ "$rc_deepep" = 2 ] && exit 2
[ "$rc_deepep" != 0 ] && exit 1
exit 0
