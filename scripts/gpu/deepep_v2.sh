#!/usr/bin/env bash
# DeepEP V2's own ElasticBuffer test (tests/elastic/test_ep.py), unmodified, against anyep's
# `deep_ep` package. Run scripts/gpu/deepep_v2.sh --help for the runs and the options.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() {
  cat << 'EOF'
usage: scripts/gpu/deepep_v2.sh (--checkout DIR | --mirror GIT_DIR [--commit C]) [options]

The DeepEP V2 source: a checkout (DIR holding tests/elastic/test_ep.py and deep_ep/utils/), or a
git directory (a bare mirror) from which commit C [dd758ca] is exported into --work (git archive:
the mirror is only read). test_ep.py runs from the source's root with PYTHONPATH naming anyep's
build, so `import deep_ep` is anyep's (checked), and ANYEP_DEEPEP_UTILS naming the source, so its
`deep_ep.utils.*` modules (math, gate, envs, refs, testing) come from DeepEP's files without
running DeepEP's deep_ep/__init__.py (which checks NCCL and starts its JIT). Every run passes
--skip-perf-test: the performance section times DeepEP's kernels by name (dispatch_impl, ...),
which anyep does not have. Runs (--runs), each under its own time limit:
  first      --test-first-only (one mode: the quick smoke run)
  full       every mode of the test (FP8 and BF16, biases, alignment, events, handle copies)
  nosync     --do-cpu-sync 0 (worst-case outputs, no host sync)
  single     --allow-multiple-reduction 0 (expanded combine adds every slot at the source)
  masked     --masked-ratio 0.1 (top-k slots set to -1)
  uneven     --unbalanced-ratio 3 (one rank gets 3x the traffic)
  det        --deterministic (the dispatch twice, compared; anyep's order is always the same)

Options:
  --runs LIST         comma list of the runs above [first,full,nosync,single,masked,det]
  --nproc N           --num-processes [1]; the processes share the visible GPUs (DeepEP's test
                      puts rank r on GPU r, so N must not exceed the visible GPUs)
  --tokens N          --num-tokens [4096]
  --hidden N          --hidden [7168]
  --extra "ARGS"      more arguments for every run (word-split)
  --timeout S         limit of each run, seconds [1200]
  --commit C          the commit exported from --mirror [dd758ca]
  --work DIR          where the export goes [/tmp/anyep-deepep-v2]
  --build DIR         anyep's build folder [build-gpu, shared with scripts/gpu/test.sh]
  --logs DIR          log folder [/tmp/anyep-gpu-logs]
  -h, --help          this text
Environment: ANYEP_PREFIX, CMAKE_CUDA_ARCHITECTURES (90), CMAKE_BUILD_TYPE, ANYEP_CMAKE_ARGS, JOBS,
PYTHON (scripts/gpu/lib.sh).

Exit status: 0 every run passed; 1 a build or run failed or timed out (the table names it); 2 bad
command line, missing source, no GPU, or no python3 importing torch.
EOF
}

CHECKOUT="" MIRROR="" COMMIT=dd758ca WORK=/tmp/anyep-deepep-v2 RUNS="first,full,nosync,single,masked,det" NPROC=1
TOKENS=4096 HIDDEN=7168 EXTRA="" TIMEOUT=1200
while [ $# -gt 0 ]; do
  case $1 in
    --checkout) need_value "$@"; CHECKOUT=$(realpath -m "$2"); shift ;;
    --mirror) need_value "$@"; MIRROR=$(realpath -m "$2"); shift ;;
    --commit) need_value "$@"; COMMIT=$2; shift ;;
    --work) need_value "$@"; WORK=$(realpath -m "$2"); shift ;;
    --runs) need_value "$@"; RUNS=$2; shift ;;
    --nproc) need_value "$@"; NPROC=$2; shift ;;
    --tokens) need_value "$@"; TOKENS=$2; shift ;;
    --hidden) need_value "$@"; HIDDEN=$2; shift ;;
    --extra) need_value "$@"; EXTRA=$2; shift ;;
    --timeout) need_value "$@"; TIMEOUT=$2; shift ;;
    --build) need_value "$@"; BUILD=$(realpath -m "$2"); shift ;;
    --logs) need_value "$@"; LOGS=$(realpath -m "$2"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
  shift
done
[ -n "$CHECKOUT" ] || [ -n "$MIRROR" ] || die "name the DeepEP V2 source: --checkout DIR or --mirror GIT_DIR (--help)"
[ -z "$CHECKOUT" ] || [ -z "$MIRROR" ] || die "--checkout and --mirror exclude each other"
for n in NPROC TOKENS HIDDEN TIMEOUT; do
  o=${n,,}
  if ! [[ ${!n} =~ ^[0-9]+$ ]] || [ "${!n}" -lt 1 ]; then die "--$o takes a positive whole number, not '${!n}'"; fi
done
for r in ${RUNS//,/ }; do
  [[ $r =~ ^(first|full|nosync|single|masked|uneven|det)$ ]] ||
    die "--runs: unknown run '$r' (first, full, nosync, single, masked, uneven, det)"
done
if [ -n "$MIRROR" ]; then
  git -C "$MIRROR" rev-parse --verify --quiet "$COMMIT^{commit}" > /dev/null ||
    die "--mirror $MIRROR: no commit $COMMIT there"
  CHECKOUT=$WORK/$COMMIT
  if [ ! -f "$CHECKOUT/tests/elastic/test_ep.py" ]; then
    rm -rf "$CHECKOUT"
    mkdir -p "$CHECKOUT"
    git -C "$MIRROR" archive "$COMMIT" | tar -x -C "$CHECKOUT" || die "git archive of $COMMIT from $MIRROR failed"
  fi
fi
for f in tests/elastic/test_ep.py deep_ep/utils/math.py deep_ep/utils/refs.py deep_ep/utils/envs.py; do
  [ -f "$CHECKOUT/$f" ] || die "no $f in $CHECKOUT (a DeepEP V2 source is needed)"
done
have_torch || die "${PY:-python3} cannot import torch (set PYTHON to the python3 that can)"
NGPUS=$(gpu_count)
[ "${NGPUS:-0}" -ge 1 ] || die "no GPU visible"
[ "$NPROC" -le "$NGPUS" ] || die "--nproc $NPROC exceeds the $NGPUS visible GPUs (DeepEP's test puts rank r on GPU r)"
read -r -a EXTRA_ARGS <<< "$EXTRA"
mkdir -p "$LOGS"
machine_info
echo "DeepEP V2: $CHECKOUT${MIRROR:+ (commit $COMMIT of $MIRROR)}; processes: $NPROC; runs: $RUNS"

configure || { summary; exit 1; }
build anyep_python || { summary; exit 1; }
ANYEP_PY=$BUILD/python

# The deep_ep the test imports must be anyep's, and deep_ep.utils.refs the source's.
got=$(env -C "$CHECKOUT/tests/elastic" PYTHONPATH="$ANYEP_PY" ANYEP_DEEPEP_UTILS="$CHECKOUT" "$PY" -c \
  "import deep_ep, deep_ep.utils.refs as r; print(deep_ep.__file__, r.__file__)" 2>&1 | tail -1)
echo "   imports: $got"
read -r dep refs <<< "$got"
if [[ $dep != "$ANYEP_PY"/* || $refs != "$CHECKOUT"/* ]]; then
  fail imports "deep_ep and deep_ep.utils.refs came from '$got', not from $ANYEP_PY and $CHECKOUT"
  summary
  exit 1
fi

# run NAME ARGS...: test_ep.py from the source's root with the shape and the shared arguments.
run() {
  local name=$1
  shift
  step "$name" "$TIMEOUT" env -C "$CHECKOUT" PYTHONPATH="$ANYEP_PY" ANYEP_DEEPEP_UTILS="$CHECKOUT" "$PY" \
    tests/elastic/test_ep.py --num-processes "$NPROC" --num-tokens "$TOKENS" --hidden "$HIDDEN" --skip-perf-test \
    "${EXTRA_ARGS[@]}" "$@" || true
}
for r in ${RUNS//,/ }; do
  case $r in
    first) run v2_first --test-first-only ;;
    full) run v2_full ;;
    nosync) run v2_nosync --do-cpu-sync 0 ;;
    single) run v2_single --allow-multiple-reduction 0 ;;
    masked) run v2_masked --masked-ratio 0.1 ;;
    uneven) run v2_uneven --unbalanced-ratio 3 ;;
    det) run v2_det --deterministic ;;
  esac
done
summary
