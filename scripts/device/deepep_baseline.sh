#!/usr/bin/env bash
# DeepEP itself next to anyep, in the same machine lease: DeepEP's own test_low_latency.py run
# against DeepEP's package and against anyep's `deep_ep`, alternating, and the kernel and bench()
# timings it prints put side by side with their ratio. This is the same-run baseline for the
# figures of issue 11 (docs/bench/ll.md).
# Neither DeepEP's code nor its tests are part of this repository: bring them into git-ignored
# folders first, e.g.
#   git -C <DeepEP clone> archive 567632d | tar -x -C .carry/deepep-src
#   git -C <DeepEP clone> show 567632d:tests/test_low_latency.py > .carry/deepep/test_low_latency.py
#   git -C <DeepEP clone> show 567632d:tests/utils.py           > .carry/deepep/utils.py
# and run (device call with carry [".deps", ".carry"]):
#   bash scripts/device/deepep_baseline.sh
# DeepEP is built against the NVSHMEM wheel of the machine's Python (its setup.py finds
# nvidia.nvshmem) in build-deepep/, outside the carried folders, so a warm machine keeps it for the
# next call. anyep is built as scripts/device/deepep_tests.sh builds it (build-lldev).
# Knobs: DEEPEP_SRC, DEEPEP_TESTS, DEEPEP_ROUNDS (3), DEEPEP_NPROC (visible GPUs),
# DEEPEP_BUILD_S (540), DEEPEP_LL_S (150, per test run), DEEPEP_ENV (extra environment for the
# DeepEP runs only, e.g. "NVSHMEM_REMOTE_TRANSPORT=none"), DEEPEP_HOST_BENCH=1 (also
# bench/ll/bench_host.py --baseline: both in one process). Logs under $OUT; the table last; exit 1 if a build or run failed.
set -u
cd "$(dirname "$0")/../.."
source scripts/device/deepep_common.sh
SRC=$(cd "${DEEPEP_SRC:-.carry/deepep-src}" 2>/dev/null && pwd) || { echo "DEEPEP_SRC folder not found"; exit 2; }
[ -f "$SRC/setup.py" ] || { echo "no setup.py in $SRC"; exit 2; }
DBUILD=$ROOT/build-deepep

# DeepEP: a copy of the source (setup.py builds in place), built once per warm machine.
if ! ls "$DBUILD"/deep_ep_cpp*.so > /dev/null 2>&1; then
  rm -rf "$DBUILD" && cp -r "$SRC" "$DBUILD"
  # CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl, where nvcc looks but the host
  # compiler of deep_ep.cpp does not; NVSHMEM's headers include it.
  cccl=${CUDA_HOME:-/usr/local/cuda}/include/cccl
  [ -d "$cccl" ] || cccl=""
  cd "$DBUILD"
  run deepep_build "${DEEPEP_BUILD_S:-540}" env MAX_JOBS=16 TORCH_CUDA_ARCH_LIST=9.0 \
    ${cccl:+CPATH="$cccl${CPATH:+:$CPATH}"} "$PY" setup.py build_ext --inplace || failed=1
  cd "$ROOT"
fi
build_anyep 300

declare -A PATHS=([deepep]=$DBUILD [anyep]=$BUILD/python)
# Which package each name imports, so a mix-up cannot pass unnoticed.
for impl in deepep anyep; do
  mod=$(cd "$TESTS" && PYTHONPATH=${PATHS[$impl]} "$PY" -c 'import deep_ep; print(deep_ep.__file__)' 2>&1 | tail -1)
  rows+=("$(printf '%-22s deep_ep = %s' "$impl" "$mod")")
done

# Alternate the two, DeepEP first in odd rounds, anyep first in even ones.
for i in $(seq 1 "${DEEPEP_ROUNDS:-3}"); do
  order="deepep anyep"; [ $((i % 2)) = 0 ] && order="anyep deepep"
  for impl in $order; do
    extra=(); [ "$impl" = deepep ] && extra=(${DEEPEP_ENV:-})
    cd "$TESTS"
    run "ll_${impl}_$i" "${DEEPEP_LL_S:-150}" env "${extra[@]}" PYTHONPATH="${PATHS[$impl]}" \
      "$PY" test_low_latency.py --num-processes "$NPROC"
    echo "rc=$?" >> "$OUT/ll_${impl}_$i.log"  # the table below reads it
    cd "$ROOT"
  done
done
if [ "${DEEPEP_HOST_BENCH:-1}" = 1 ]; then
  # Both in one process, calls alternating (bench_host.py --baseline): host times of separate
  # processes on one machine differ more from run to run than the two implementations do.
  extra=(${DEEPEP_ENV:-})
  run host_bench 300 env "${extra[@]}" ANYEP_BUILD_DIR="$BUILD" "$PY" bench/ll/bench_host.py --baseline "$DBUILD"
fi

echo "== DeepEP (567632d) and anyep, DeepEP's test_low_latency.py --num-processes $NPROC: $(date -u)," \
  "$(nvidia-smi --query-gpu=name,driver_version --format=csv,noheader | head -1), anyep $(git rev-parse --short HEAD 2>/dev/null)$(git diff --quiet HEAD 2>/dev/null || echo ' with uncommitted changes')"
"$PY" - "$OUT" "${DEEPEP_ROUNDS:-3}" <<'EOF' || failed=1
import re, statistics, sys
out, rounds = sys.argv[1], int(sys.argv[2])
pats = {
    "bench() dispatch + combine, host included": r"\[rank 0\] Dispatch \+ combine bandwidth: .*?avg_t=([\d.]+) us",
    "dispatch kernel": r"\[rank 0\] Dispatch bandwidth: .*?avg_t=([\d.]+) us",
    "combine kernel": r"\[rank 0\] Dispatch bandwidth: .*Combine bandwidth: .*?avg_t=([\d.]+) us",
    "hook dispatch send": r"\[rank 0\] Dispatch send/recv time: ([\d.]+) \+",
    "hook dispatch recv": r"\[rank 0\] Dispatch send/recv time: [\d.]+ \+ ([\d.]+) us",
    "hook combine send": r"\[rank 0\] .*Combine send/recv time: ([\d.]+) \+",
    "hook combine recv": r"\[rank 0\] .*Combine send/recv time: [\d.]+ \+ ([\d.]+) us",
}
vals = {impl: {k: [] for k in pats} for impl in ("deepep", "anyep")}
bad = 0
for impl in vals:
    for i in range(1, rounds + 1):
        try:
            text = open(f"{out}/ll_{impl}_{i}.log").read()
        except OSError:
            continue
        rc = re.search(r"^rc=(\d+)", text, re.M)
        if not rc or rc.group(1) != "0":
            bad = 1
            err = [l for l in text.splitlines() if re.search(r"Error|assert", l)]
            print(f"{impl} round {i}: rc {rc.group(1) if rc else '?'}; {err[-1][:160] if err else 'no error line'}")
        for k, p in pats.items():
            vals[impl][k] += [float(v) for v in re.findall(p, text)]
print(f"{'rank 0, median of the rounds (us)':44s} {'DeepEP':>9s} {'anyep':>9s} {'anyep/DeepEP':>13s}  runs")
for k in pats:
    d, a = vals["deepep"][k], vals["anyep"][k]
    dm = statistics.median(d) if d else float("nan")
    am = statistics.median(a) if a else float("nan")
    ratio = am / dm if d and a else float("nan")
    rng = lambda v: f"{min(v):.2f}-{max(v):.2f}" if v else "-"
    print(f"{k:44s} {dm:9.2f} {am:9.2f} {ratio:13.3f}  DeepEP {rng(d)}, anyep {rng(a)}")
for impl in vals:
    if rounds > 0 and not vals[impl]["dispatch kernel"]:
        print(f"{impl}: no timings in its logs (see ll_{impl}_*.log)")
        bad = 1
sys.exit(bad)
EOF
if [ -f "$OUT/host_bench.log" ]; then
  echo "-- bench/ll/bench_host.py --baseline (DeepEP in the same process)"
  grep -vE "^\s*$|nvshmemi_transport_init" "$OUT/host_bench.log" | tail -20
fi
printf '%s\n' "${rows[@]}"
exit $failed
