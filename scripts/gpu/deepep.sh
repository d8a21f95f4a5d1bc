#!/usr/bin/env bash
# DeepEP's own tests, unmodified, against anyep's `deep_ep` package (the drop-in bar), and, given
# DeepEP's source, DeepEP itself built and run on the same machine in the same run as the baseline
# of the kernel and host times. Run scripts/gpu/deepep.sh --help for the runs and the options.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() {
  cat << 'EOF'
usage: scripts/gpu/deepep.sh DEEPEP_DIR [--deepep-src DIR] [options]

DEEPEP_DIR is a DeepEP checkout (its tests/ folder is used; a folder holding test_low_latency.py,
test_intranode.py and utils.py directly works too). The tests run unmodified from there, importing
`deep_ep` from anyep's build (configured as scripts/gpu/test.sh does; the module each run imports
is checked). Runs (--runs), each under its own time limit:
  plain      test_low_latency.py --num-processes N
  logfmt     test_low_latency.py --num-processes N --use-logfmt
  pressure   test_low_latency.py --num-processes N --pressure-test: it loops over seeds until
             stopped; it passes when --pressure-seeds seeds finish without an error before its
             limit (the seed the limit interrupts does not count)
  intranode  test_intranode.py --num-processes N (one GPU: 1 process, which anyep serves and
             DeepEP itself refuses)
N is the number of visible GPUs unless --nproc says otherwise.

With --deepep-src DIR: DeepEP built from that source (a copy in --deepep-build, built once there
with `setup.py build_ext --inplace`; NVSHMEM must be findable by its setup.py, e.g. the
nvidia-nvshmem wheel or NVSHMEM_DIR), then --rounds rounds of test_low_latency.py against DeepEP
and against anyep, alternating which goes first, and bench/ll/bench_host.py --baseline (both in one
process, calls alternating); last, a table of rank 0's kernel, hook and bench() times, median over
the rounds, DeepEP beside anyep with the ratio.

Options:
  --runs LIST          comma list of plain, logfmt, pressure, intranode [all four]; none: only the
                       baseline rounds
  --nproc N            --num-processes of every run [visible GPUs, at least 1]
  --timeout S          limit of each run, seconds [600]; a run cut by it is named in the table
  --pressure-s S       how long the pressure test runs [600]
  --pressure-seeds N   seeds it must finish [3]
  --deepep-src DIR     DeepEP's source, for the baseline
  --deepep-build DIR   where DeepEP is copied and built [build-deepep in anyep's source tree]
  --rounds N           baseline rounds [3]
  --deepep-env "K=V.." environment for DeepEP's runs only (e.g. NVSHMEM_REMOTE_TRANSPORT=none)
  --build DIR          anyep's build folder [build-gpu, shared with scripts/gpu/test.sh]
  --logs DIR           log folder [/tmp/anyep-gpu-logs]
  -h, --help           this text
Environment: ANYEP_PREFIX, CMAKE_CUDA_ARCHITECTURES (90), CMAKE_BUILD_TYPE, ANYEP_CMAKE_ARGS, JOBS,
PYTHON (scripts/gpu/lib.sh); TORCH_CUDA_ARCH_LIST for DeepEP's build [from CMAKE_CUDA_ARCHITECTURES].

Exit status: 0 every run passed; 1 a build or run failed or timed out (the table names it); 2 bad
command line, missing tests or source, no GPU, or no python3 importing torch.
EOF
}

DIR="" SRC="" DBUILD=$ROOT/build-deepep RUNS="plain,logfmt,pressure,intranode" NPROC="" TIMEOUT=600
PRESSURE_S=600 PRESSURE_SEEDS=3 ROUNDS=3 DEEPEP_ENV=""
while [ $# -gt 0 ]; do
  case $1 in
    --runs) need_value "$@"; RUNS=$2; shift ;;
    --nproc) need_value "$@"; NPROC=$2; shift ;;
    --timeout) need_value "$@"; TIMEOUT=$2; shift ;;
    --pressure-s) need_value "$@"; PRESSURE_S=$2; shift ;;
    --pressure-seeds) need_value "$@"; PRESSURE_SEEDS=$2; shift ;;
    --deepep-src) need_value "$@"; SRC=$(realpath -m "$2"); shift ;;
    --deepep-build) need_value "$@"; DBUILD=$(realpath -m "$2"); shift ;;
    --rounds) need_value "$@"; ROUNDS=$2; shift ;;
    --deepep-env) need_value "$@"; DEEPEP_ENV=$2; shift ;;
    --build) need_value "$@"; BUILD=$(realpath -m "$2"); shift ;;
    --logs) need_value "$@"; LOGS=$(realpath -m "$2"); shift ;;
    -h | --help) usage; exit 0 ;;
    -*) die "unknown option '$1' (--help)" ;;
    *) [ -z "$DIR" ] || die "one DeepEP folder only ('$DIR', then '$1')"; DIR=$(realpath -m "$1") ;;
  esac
  shift
done
[ -n "$DIR" ] || die "name a DeepEP checkout (--help)"
for n in NPROC TIMEOUT PRESSURE_S PRESSURE_SEEDS ROUNDS; do
  o=${n,,}
  [[ -z ${!n} || ${!n} =~ ^[0-9]+$ ]] || die "--${o//_/-} takes a whole number, not '${!n}'"
done
for r in ${RUNS//,/ }; do
  [[ $r =~ ^(plain|logfmt|pressure|intranode|none)$ ]] ||
    die "--runs: unknown run '$r' (plain, logfmt, pressure, intranode, none)"
done
TESTS=$DIR/tests
[ -f "$TESTS/test_low_latency.py" ] || TESTS=$DIR
for f in test_low_latency.py test_intranode.py utils.py; do
  [ -f "$TESTS/$f" ] || die "no $f in $DIR/tests or $DIR"
done
[ -z "$SRC" ] || [ -f "$SRC/setup.py" ] || die "--deepep-src: no setup.py in $SRC"
have_torch || die "${PY:-python3} cannot import torch (set PYTHON to the python3 that can)"
NGPUS=$(gpu_count)
[ "${NGPUS:-0}" -ge 1 ] || die "no GPU visible"
NPROC=${NPROC:-$NGPUS}
read -r -a DENV <<< "$DEEPEP_ENV"
mkdir -p "$LOGS"
machine_info
echo "DeepEP tests: $TESTS at $(git -C "$TESTS" rev-parse --short HEAD 2> /dev/null || echo "(not a git checkout)")"
echo "processes: $NPROC; runs: $RUNS${SRC:+; DeepEP baseline from $SRC, $ROUNDS rounds}"

configure || { summary; exit 1; }
build anyep_python || { summary; exit 1; }
ANYEP_PY=$BUILD/python

# uses NAME PYTHONPATH_DIR: the deep_ep that runs from the tests' folder must come from that folder.
uses() {
  local got
  got=$(env -C "$TESTS" PYTHONPATH="$2" "$PY" -c "import deep_ep; print(deep_ep.__file__)" 2>&1 | tail -1)
  echo "   $1: deep_ep = $got"
  [[ $got == "$2"/* ]] || { fail "$1_import" "deep_ep came from $got, not from $2"; return 1; }
}
# run_ll NAME TIMEOUT PYTHONPATH_DIR [ENV...] -- ARGS...: DeepEP's test_low_latency.py from its folder.
run_ll() {
  local name=$1 limit=$2 path=$3 envs=()
  shift 3
  while [ "$1" != -- ]; do envs+=("$1"); shift; done
  shift
  step "$name" "$limit" env -C "$TESTS" "${envs[@]}" PYTHONPATH="$path" "$PY" test_low_latency.py \
    --num-processes "$NPROC" "$@"
}

if uses anyep "$ANYEP_PY"; then
  for r in ${RUNS//,/ }; do
    case $r in
      plain) run_ll ll_plain "$TIMEOUT" "$ANYEP_PY" -- || true ;;
      logfmt) run_ll ll_logfmt "$TIMEOUT" "$ANYEP_PY" -- --use-logfmt || true ;;
      intranode)
        step intranode "$TIMEOUT" env -C "$TESTS" PYTHONPATH="$ANYEP_PY" "$PY" test_intranode.py \
          --num-processes "$NPROC" || true ;;
      pressure)
        UNTIL_LIMIT=1 run_ll ll_pressure "$PRESSURE_S" "$ANYEP_PY" -- --pressure-test || true
        started=$(grep -c "Testing with seed" "$LOGS/ll_pressure.log" || true)
        seeds=$((started > 0 ? started - 1 : 0))
        if grep -qE "Error|Traceback|AssertionError" "$LOGS/ll_pressure.log"; then
          fail ll_pressure_seeds "$seeds seeds finished, then: $(grep -E "Error|assert" "$LOGS/ll_pressure.log" |
            grep -v "^Traceback" | tail -1 | cut -c1-120)"
        elif [ "$seeds" -lt "$PRESSURE_SEEDS" ]; then
          fail ll_pressure_seeds "no error, but $seeds of $PRESSURE_SEEDS seeds finished in $PRESSURE_S s"
        else
          row ll_pressure_seeds 0 - "$seeds seeds finished without an error"
        fi ;;
    esac
  done
fi

if [ -n "$SRC" ]; then
  if ! compgen -G "$DBUILD/deep_ep_cpp*.so" > /dev/null; then
    if [ -e "$DBUILD" ] && [ ! -f "$DBUILD/setup.py" ]; then
      die "--deepep-build $DBUILD exists and is not a copy of DeepEP's source"
    fi
    [ -e "$DBUILD" ] || cp -r "$SRC" "$DBUILD"
    # CUDA 13 keeps libcu++ (cuda/std/...) under include/cccl, which nvcc searches and the host
    # compiler of DeepEP's C++ files does not; NVSHMEM's headers include it.
    cccl=$(dirname "$(dirname "$(command -v nvcc)")")/include/cccl
    [ -d "$cccl" ] || cccl=""
    # CMake's 90 is torch's 9.0.
    arch=${TORCH_CUDA_ARCH_LIST:-$(sed -E 's/([0-9]+)([0-9])([a-z]?)/\1.\2\3/g' <<< "${CMAKE_CUDA_ARCHITECTURES:-90}")}
    step deepep_build 3600 env -C "$DBUILD" MAX_JOBS="$JOBS" TORCH_CUDA_ARCH_LIST="$arch" \
      ${cccl:+CPATH="$cccl${CPATH:+:$CPATH}"} "$PY" setup.py build_ext --inplace || { summary; exit 1; }
  fi
  uses deepep "$DBUILD" || { summary; exit 1; }
  for i in $(seq 1 "$ROUNDS"); do
    order="deepep anyep"
    [ $((i % 2)) = 0 ] && order="anyep deepep"
    for impl in $order; do
      if [ "$impl" = deepep ]; then
        run_ll "base_deepep_$i" "$TIMEOUT" "$DBUILD" "${DENV[@]}" -- || true
      else
        run_ll "base_anyep_$i" "$TIMEOUT" "$ANYEP_PY" -- || true
      fi
    done
  done
  step host_bench 900 env "${DENV[@]}" ANYEP_BUILD_DIR="$BUILD" "$PY" bench/ll/bench_host.py --baseline "$DBUILD" ||
    true
  echo "== DeepEP's test_low_latency.py --num-processes $NPROC, rank 0, median of $ROUNDS rounds (us)"
  "$PY" - "$LOGS" "$ROUNDS" << 'EOF' || fail baseline_table "a round printed no timings"
import re, statistics, sys
logs, rounds = sys.argv[1], int(sys.argv[2])
r0 = r"\[rank 0\] "
num = r"([\d.]+)"
pats = {"dispatch kernel": r0 + r"Dispatch bandwidth: .*?avg_t=" + num,
        "combine kernel": r0 + r"Dispatch bandwidth: .*Combine bandwidth: .*?avg_t=" + num,
        "hook dispatch send": r0 + r"Dispatch send/recv time: " + num,
        "hook dispatch recv": r0 + r"Dispatch send/recv time: [\d.]+ \+ " + num,
        "hook combine send": r0 + r".*Combine send/recv time: " + num,
        "hook combine recv": r0 + r".*Combine send/recv time: [\d.]+ \+ " + num,
        "bench() dispatch + combine": r0 + r"Dispatch \+ combine bandwidth: .*?avg_t=" + num}
got = {impl: {k: [] for k in pats} for impl in ("deepep", "anyep")}
for impl in got:
    for i in range(1, rounds + 1):
        try:
            text = open(f"{logs}/base_{impl}_{i}.log").read()
        except OSError:
            continue
        for k, p in pats.items():
            got[impl][k] += [float(v) for v in re.findall(p, text)]
med = lambda v: statistics.median(v) if v else float("nan")
print(f"{'':28s} {'DeepEP':>9s} {'anyep':>9s} {'anyep/DeepEP':>13s}  range DeepEP | anyep")
for k in pats:
    d, a = got["deepep"][k], got["anyep"][k]
    span = lambda v: f"{min(v):.2f}-{max(v):.2f}" if v else "-"
    print(f"{k:28s} {med(d):9.2f} {med(a):9.2f} {med(a) / med(d) if d and a else float('nan'):13.3f}  "
          f"{span(d)} | {span(a)}")
sys.exit(0 if all(got[i]["dispatch kernel"] for i in got) else 1)
EOF
fi
summary
