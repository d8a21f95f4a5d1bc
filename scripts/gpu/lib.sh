# shellcheck shell=bash
# Sourced by scripts/gpu/{test,bench,deepep}.sh (not run by itself): the build they share, the step
# runner (every step under `timeout`, its output in a log file, a row in the summary table) and the
# facts about the machine printed with every run.
#
# Environment every script reads (all optional):
#   ANYEP_PREFIX               CMake prefix holding libfabric and GoogleTest dev files when they are
#                              not installed system-wide (becomes CMAKE_PREFIX_PATH)
#   CMAKE_CUDA_ARCHITECTURES   GPU architectures to compile for [90]
#   CMAKE_BUILD_TYPE           [RelWithDebInfo: optimized, with the symbols a backtrace needs]
#   ANYEP_CMAKE_ARGS           extra CMake arguments (word-split)
#   JOBS                       build jobs [nproc]
#   PYTHON                     the python3 that imports torch [python3]

# ---- setup -------------------------------------------------------------------------------------
ROOT=$(cd "$(dirname "${BASH_SOURCE[0]}")/../.." && pwd)
cd "$ROOT"
PY=$(command -v "${PYTHON:-python3}" || true)
JOBS=${JOBS:-$(nproc)}
BUILD=$ROOT/build-gpu
LOGS=/tmp/anyep-gpu-logs
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc > /dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
# Tests and benchmarks talk over loopback only. NCCL's and NVSHMEM's NVLink multicast (NVLS) stay off
# unless set: the baselines measure plain NVLink, and hosts without multicast support fail at init.
export FI_TCP_IFACE=${FI_TCP_IFACE:-lo} NCCL_NVLS_ENABLE=${NCCL_NVLS_ENABLE:-0}
export NVSHMEM_DISABLE_NVLS=${NVSHMEM_DISABLE_NVLS:-1} PYTHONUNBUFFERED=1

die() { echo "$(basename "$0"): $*" >&2; exit 2; }
# need_value OPTION "$@": the option's value, or a usage error naming the option.
need_value() { if [ $# -lt 2 ] || [ -z "$2" ]; then die "$1 needs a value (--help)"; fi; }

have_torch() { [ -n "$PY" ] && "$PY" -c "import torch" > /dev/null 2>&1; }
# GPUs this run can use (torch honours CUDA_VISIBLE_DEVICES; nvidia-smi where torch is missing).
gpu_count() {
  "$PY" -c "import torch; print(torch.cuda.device_count())" 2> /dev/null ||
    { nvidia-smi -L 2> /dev/null | grep -c "^GPU " || true; }
}
# The pytest -k expression of the worlds this machine can run: the one-GPU worlds always (several
# processes sharing GPU 0), the 2- and 4-GPU worlds when that many GPUs are visible.
worlds_for() {
  local w="1gpu"
  [ "$1" -ge 2 ] && w+=" or 2gpu"
  [ "$1" -ge 4 ] && w+=" or 4gpu"
  echo "$w"
}

# ---- steps -------------------------------------------------------------------------------------
ROWS=()
FAILED=0
SHOW_OUTPUT=0  # 1: a step's output goes to the terminal too (bench.sh), not only to its log
row() { ROWS+=("$(printf '%-26s %-5s %7s  %s' "$1" "$2" "$3" "${4:-}")"); }
# skip NAME WHY: a step that did not run because an earlier one failed (that one is the failure).
skip() { row "$1" - - "not run: $2"; echo "-- $1: not run: $2"; }
# fail NAME WHY: a check that failed without a command of its own.
fail() { row "$1" 1 - "FAILED: $2"; FAILED=1; echo "-- $1: FAILED: $2"; }

# shell_words ARG...: the command as one would type it (quoted only where the shell needs it).
shell_words() {
  local a out=()
  for a in "$@"; do
    if [[ $a =~ ^[A-Za-z0-9_./:=,+@%^-]+$ ]]; then
      out+=("$a")
    elif [[ $a != *"'"* && $a != *$'\n'* ]]; then
      out+=("'$a'")
    else
      out+=("$(printf '%q' "$a")")
    fi
  done
  echo "${out[*]}"
}

# step NAME LIMIT_S CMD...: CMD under `timeout` (then SIGKILL 10 s later), output in $LOGS/NAME.log,
# a row in the table; returns CMD's status. A step cut by its limit says so by name; with
# UNTIL_LIMIT=1 (a command that runs until stopped) reaching the limit is its normal end (status 0).
step() {
  local name=$1 limit=$2 rc=0 t0 note="" errexit=0 log
  shift 2
  log=$LOGS/$name.log
  t0=$(date +%s)
  echo "-- $name (limit ${limit} s): $(shell_words "$@")"
  [[ $- == *e* ]] && errexit=1
  set +e
  if [ "$SHOW_OUTPUT" = 1 ]; then
    timeout -k 10 "$limit" "$@" 2>&1 | tee "$log"
    rc=${PIPESTATUS[0]}
  else
    timeout -k 10 "$limit" "$@" > "$log" 2>&1
    rc=$?
  fi
  [ "$errexit" = 1 ] && set -e
  if [ "$rc" = 124 ] && [ "${UNTIL_LIMIT:-0}" = 1 ]; then
    rc=0 note="stopped at its limit, as meant"
  elif [ "$rc" = 124 ] || [ "$rc" = 137 ]; then
    note="TIMEOUT: $name cut after ${limit} s"
  elif [ "$rc" -gt 128 ]; then
    note="killed by signal $((rc - 128))"
  fi
  row "$name" "$rc" "$(($(date +%s) - t0))" "$note"
  if [ "$rc" != 0 ]; then
    FAILED=1
    if [ "$SHOW_OUTPUT" = 1 ]; then
      echo "   $name: rc $rc ${note:+($note) }- its output is above and in $log"
    else
      echo "   $name: rc $rc ${note:+($note) }- last lines of $log:"
      tail -n 15 "$log" | sed 's/^/   | /'
    fi
  fi
  return "$rc"
}

# summary: the table of every step; returns 1 if any failed.
summary() {
  echo
  echo "== summary ($(date -u '+%Y-%m-%d %H:%M UTC'); logs in $LOGS; rc 124/137: timeout, > 128: signal)"
  printf '%-26s %-5s %7s  %s\n' step rc seconds note
  printf '%s\n' "${ROWS[@]}"
  return "$FAILED"
}

# machine_info: what ran where, printed first and kept as $LOGS/machine.txt.
machine_info() {
  {
    echo "date: $(date -u '+%Y-%m-%d %H:%M:%S UTC')  host: $(hostname)  cores: $(nproc)"
    nvidia-smi --query-gpu=index,name,memory.total,driver_version --format=csv,noheader 2> /dev/null |
      sed 's/^/gpu: /' || echo "gpu: nvidia-smi not found"
    "${PY:-python3}" -c 'import sys, torch; print("python", sys.version.split()[0], "torch", torch.__version__,
      "cuda", torch.version.cuda, "gpus", torch.cuda.device_count())' 2>&1 | tail -1 || true
    echo "anyep: $(git -C "$ROOT" rev-parse --short HEAD 2> /dev/null || echo "not a git checkout")$(
      git -C "$ROOT" diff --quiet HEAD 2> /dev/null || echo " with local changes")  build: $BUILD"
  } | tee "$LOGS/machine.txt"
}

# ---- build -------------------------------------------------------------------------------------
# configure: one configuration for tests, benchmarks and the Python extension (built when python3
# imports torch), so the three scripts share a build folder.
configure() {
  local cfg=(-S "$ROOT" -B "$BUILD" -DCMAKE_BUILD_TYPE="${CMAKE_BUILD_TYPE:-RelWithDebInfo}"
    -DCMAKE_CUDA_ARCHITECTURES="${CMAKE_CUDA_ARCHITECTURES:-90}" -DANYEP_TESTS=ON -DANYEP_BENCH=ON
    -DANYEP_LIBFABRIC=ON)
  command -v ninja > /dev/null && [ ! -f "$BUILD/Makefile" ] && cfg+=(-G Ninja)
  if have_torch; then cfg+=(-DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$PY"); else cfg+=(-DANYEP_PYTHON=OFF); fi
  # A prefix's libfabric.pc may name the prefix it was built for; CMake then finds libfabric by
  # its header and library under CMAKE_PREFIX_PATH instead.
  [ -n "${ANYEP_PREFIX:-}" ] && cfg+=(-DCMAKE_PREFIX_PATH="$ANYEP_PREFIX" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)
  # shellcheck disable=SC2206  # extra arguments are meant to be split into words
  cfg+=(${ANYEP_CMAKE_ARGS:-})
  step configure 300 cmake "${cfg[@]}" && grep -E "^-- anyep: " "$LOGS/configure.log" | tail -1
}
# build TARGET...: `all` builds everything.
build() { step build 3600 cmake --build "$BUILD" -j "$JOBS" --target "$@"; }
# libfabric_built: whether the configuration found libfabric (the proxy paths over it are built).
libfabric_built() { grep -q "libfabric=ON" "$LOGS/configure.log" 2> /dev/null; }
