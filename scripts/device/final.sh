#!/usr/bin/env bash
# One device call that re-checks what changed since the last full runs: the HT suite
# (scripts/device/ht.sh: worlds, example, DeepEP's test_intranode.py, bench), the one-rank HT
# kernel sweep, the LL checks touched by LogFMT and the elastic clean (scripts/device/ll.sh with a
# subset), and the C API's GPU part (scripts/device/capi.sh, CAPI_PARTS=c). Prints each script's
# table; exits 1 if any failed. Carry [".deps", ".carry"]; timeout_s 595.
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-final-out}
mkdir -p "$OUT/ht" "$OUT/ll" "$OUT/capi"
rc=0
OUT=$OUT/ht HT_BUDGET_S=${HT_BUDGET_S:-230} bash scripts/device/ht.sh > "$OUT/ht.txt" 2>&1 || rc=1
grep -A40 "== summary" "$OUT/ht.txt"; grep -E "passed|failed|PASSED|FAIL|Best|GB/s" "$OUT/ht.txt" | tail -25
echo "== HT kernel sweep (one rank)"
PYTHONPATH=$PWD/build-htdev/python timeout 60 python3 bench/ht/ht_kernel_sweep.py 2>&1 | tail -10 || rc=1
OUT=$OUT/ll LL_CHECKS=${FINAL_LL_CHECKS:-c_bf16_random,c_logfmt,c_mask_rank,c_dead_rank,c_dead_rank_clean} \
  LL_WORLDS=${FINAL_LL_WORLDS:-2proc_1gpu or 4proc_1gpu} LL_BUDGET_S=${FINAL_LL_S:-170} LL_PYTEST_S=110 \
  bash scripts/device/ll.sh > "$OUT/ll.txt" 2>&1 || rc=1
grep -A12 "== summary" "$OUT/ll.txt"; grep -E "FAILED|failure|passed|failed" "$OUT/ll.txt" | tail -15
OUT=$OUT/capi CAPI_PARTS=c CAPI_BUDGET_S=${FINAL_CAPI_S:-150} bash scripts/device/capi.sh > "$OUT/capi.txt" 2>&1 || rc=1
tail -25 "$OUT/capi.txt"
exit $rc
