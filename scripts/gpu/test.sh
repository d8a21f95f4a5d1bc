#!/usr/bin/env bash
# The GPU test suites of anyep on a machine with NVIDIA GPUs: one build, then the C++ GPU tests, the
# Python worlds and, for the C API, the program, the installed package and the pip package as a
# user gets them. Each step runs under `timeout` with its output in a log file; a table comes last.
# Run scripts/gpu/test.sh --help for the parts, the knobs and the exit statuses.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() {
  cat << 'EOF'
usage: scripts/gpu/test.sh [ll|ht|capi|all]... [--build DIR] [--logs DIR]

Builds anyep once (CMake, RelWithDebInfo, tests, benchmarks and the Python extension), then runs,
for every part named (default: all = ll ht capi):
  always  ctest labels gpu-common, gpu-channel, gpu-transport (warp primitives, number formats over
          every float, GPU producers -> channel rings, the cuda-ipc transport)
  ll      ctest label gpu-ll; tests/python/ll_smoke.py (one process, step trace; a crash is
          resolved to native frames, under gdb when present); then, if it passed, pytest
          tests/python/test_ll.py over the worlds this machine can run (below)
  ht      ctest label gpu-ht; pytest tests/python/test_ht.py, test_ht_internode.py and test_elastic.py over the
          worlds; examples/moe_layer.py (autograd through dispatch/combine, 2 processes)
  capi    ctest labels unit-capi, mp-capi, gpu-capi; the C API round trip (tests/gpu/capi) on the
          CPU (3 processes) and on the GPU (2 processes) by direct stores and through the CPU proxy
          over libfabric shm; `anyep info`; scripts/check/capi_install.sh (the installed package
          through find_package and pkg-config); then the pip package in a fresh venv (pip install
          --no-index --no-build-isolation ./python) and, from a folder outside the source tree
          with no PYTHONPATH: import anyep and deep_ep, examples/quickstart.py on 2 processes
          (torch.distributed.run), and `anyep bench ll --ranks 1` with the venv's anyep command

Worlds: pytest -k over the world names. The one-GPU worlds always run (1, 2 and 4 processes
sharing GPU 0: every multi-rank world also runs as several processes on one GPU); with 2 visible
GPUs the 2-GPU worlds too, with 4 the 4-GPU ones.

Needs: the CUDA toolkit, python3 with torch (CUDA build), libfabric and GoogleTest dev files
(system-installed, or under ANYEP_PREFIX), CMake >= 3.20, ninja (optional), gdb (optional).

Options:
  --build DIR   build folder [build-gpu in the source tree]; configured once, rebuilt incrementally
  --logs DIR    log folder [/tmp/anyep-gpu-logs]: one log per step, machine.txt, pytest XML,
                ll_ranks/ (a log per rank of the LL worlds)
  -h, --help    this text

Environment:
  ANYEP_PREFIX, CMAKE_CUDA_ARCHITECTURES (90), CMAKE_BUILD_TYPE, ANYEP_CMAKE_ARGS, JOBS, PYTHON
                the build (scripts/gpu/lib.sh)
  LL_WORLDS, HT_WORLDS    pytest -k expressions replacing the worlds chosen by GPU count (e.g.
                          LL_WORLDS=killed: the killed-rank worlds only); HT_WORLDS applies to both
                          HT files
  ANYEP_TEST_LL_CHECKS, ANYEP_TEST_HT_CHECKS, ANYEP_TEST_HTN_CHECKS
                          comma lists narrowing the checks of each world (tests/python harnesses)
  ANYEP_TEST_WORLD_TIMEOUT_S  seconds a world's processes may take to report [400]
  PYTEST_S      limit of each pytest step, seconds [2400]
  ANYEP_VENV    the venv the pip step makes, removed first [/tmp/anyep-gpu-venv]
  ANYEP_CAPI_ALLOW_NO_PKG_CONFIG  1 (default here): capi_install.sh skips its pkg-config half,
                saying so, where pkg-config is not installed

Exit status: 0 every step passed; 1 a step failed or timed out (the table names it); 2 bad command
line, or the machine cannot run the suites (no GPU visible, no python3 importing torch).
EOF
}

PARTS=()
while [ $# -gt 0 ]; do
  case $1 in
    ll | ht | capi) PARTS+=("$1") ;;
    all) PARTS+=(ll ht capi) ;;
    --build) need_value "$@"; BUILD=$(realpath -m "$2"); shift ;;
    --logs) need_value "$@"; LOGS=$(realpath -m "$2"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
  shift
done
[ ${#PARTS[@]} -gt 0 ] || PARTS=(ll ht capi)
have_torch || die "${PY:-python3} cannot import torch (set PYTHON to the python3 that can)"
NGPUS=$(gpu_count)
[ "${NGPUS:-0}" -ge 1 ] || die "no GPU visible (torch.cuda.device_count() is 0): every GPU test would skip"
WORLDS=$(worlds_for "$NGPUS")
PYTEST_S=${PYTEST_S:-2400}
mkdir -p "$LOGS"
machine_info
echo "parts: ${PARTS[*]}; worlds: $WORLDS"

configure || { summary; exit 1; }
libfabric_built || fail libfabric "CMake found no libfabric (install its dev package, or set ANYEP_PREFIX)"
build all || { summary; exit 1; }
export PYTHONPATH=$BUILD/python ANYEP_BUILD_DIR=$BUILD ANYEP_TEST_LOG_DIR=$LOGS/ll_ranks
mkdir -p "$ANYEP_TEST_LOG_DIR"

# ctest_step NAME LIMIT LABEL_REGEX: the tests of those labels; a label without tests is an error,
# and skipped tests are listed (a skip on a GPU machine says which GPU count a case needs).
ctest_step() {
  step "$1" "$2" ctest --test-dir "$BUILD" -L "$3" --no-tests=error --output-on-failure || true
  grep -E "\*\*\*Skipped|Not Run" "$LOGS/$1.log" | sed 's/^/   skipped: /' || true
}

# pytest_step NAME FILE WORLDS: pytest over the worlds (-k), a JUnit XML beside the log.
pytest_step() {
  local name=$1 file=$2 worlds=$3
  step "$name" "$PYTEST_S" "$PY" -m pytest -s -q -rs "$file" -k "$worlds" \
    --junitxml="$LOGS/$name.xml" || true
  grep -E "^(FAILED|ERROR) |[0-9]+ (passed|failed|skipped)" "$LOGS/$name.log" | tail -n 12 | sed 's/^/   /' || true
}

# A crash (a signal other than the timeout's SIGKILL) in the smoke run: the native frames the
# module's handler printed, resolved to functions and lines; under gdb when it printed none.
smoke_backtrace() {
  local rc=$1 so
  [ "$rc" -gt 128 ] && [ "$rc" != 137 ] || return 0
  so=$(find "$BUILD/python/anyep" -name "_C*.so" 2> /dev/null | head -1 || true)
  if grep -q "anyep._C: fatal signal" "$LOGS/ll_smoke.log"; then
    grep -o "_C\.[^ ]*\.so(+0x[0-9a-f]*)" "$LOGS/ll_smoke.log" | sed 's/.*(+\(0x[0-9a-f]*\))/\1/' | head -20 |
      while read -r off; do echo "   $off: $(addr2line -f -C -i -e "$so" "$off" | paste -sd' ')"; done || true
  elif command -v gdb > /dev/null; then
    step ll_smoke_gdb 600 env ANYEP_LL_TRACE=1 LL_SMOKE_PORT=29535 gdb -batch -nx -ex "set pagination off" \
      -ex "handle SIGPIPE nostop noprint" -ex run -ex "bt 40" -ex "thread apply all bt 8" \
      --args "$PY" tests/python/ll_smoke.py || true
  fi
}

part_ll() {
  ctest_step ll_cpp 900 '^gpu-ll$'
  local rc=0
  step ll_smoke 300 env ANYEP_LL_TRACE=1 "$PY" -X faulthandler tests/python/ll_smoke.py || rc=$?
  if [ "$rc" != 0 ]; then
    smoke_backtrace "$rc"
    skip ll_pytest "the smoke run failed (ll_smoke.log)"
    return
  fi
  pytest_step ll_pytest tests/python/test_ll.py "${LL_WORLDS:-$WORLDS}"
}

part_ht() {
  ctest_step ht_cpp 900 '^gpu-ht$'
  pytest_step ht_pytest tests/python/test_ht.py "${HT_WORLDS:-$WORLDS}"
  pytest_step ht_internode_pytest tests/python/test_ht_internode.py "${HT_WORLDS:-$WORLDS}"
  pytest_step elastic_pytest tests/python/test_elastic.py "${HT_WORLDS:-$WORLDS}"
  step ht_example 600 "$PY" examples/moe_layer.py --processes 2 --timeout 500 || true
}

part_capi() {
  ctest_step capi_ctest 1800 'capi'
  local rt=$BUILD/tests/gpu/capi/capi_roundtrip
  if [ ! -x "$rt" ]; then
    fail capi_roundtrip "$rt was not built (target capi_roundtrip)"
  else
    step capi_roundtrip_cpu 300 "$rt" --part cpu --ranks 3 --timeout-s 240 || true
    step capi_roundtrip_gpu 600 "$rt" --part gpu --ranks 2 --timeout-s 500 || true
    if [ "$NGPUS" -ge 2 ]; then  # and as 2 processes sharing one GPU
      step capi_roundtrip_gpu_1gpu 600 env CUDA_VISIBLE_DEVICES=0 "$rt" --part gpu --ranks 2 --timeout-s 500 || true
    fi
    # Each process its own node: every peer through the CPU proxy, host-staged buffer over shm.
    step capi_roundtrip_proxy 600 env ANYEP_LL_PATH=proxy-libfabric ANYEP_FI_PROVIDER=shm \
      "$rt" --part gpu --ranks 2 --timeout-s 500 || true
  fi
  step capi_cli_info 60 "$BUILD/cli/anyep" info || true
  step capi_install 1200 env BUILD_DIR="$BUILD" ANYEP_CAPI_ALLOW_NO_PKG_CONFIG="${ANYEP_CAPI_ALLOW_NO_PKG_CONFIG:-1}" \
    bash scripts/check/capi_install.sh || true
  if grep -q "GPU part skipped" "$LOGS/capi_install.log"; then
    fail capi_install_gpu "the installed program's GPU part was skipped on a machine with a GPU"
  fi
  part_pip
}

# The pip package as a user gets it: a venv seeing the machine's torch, pip install, then every
# use from a folder outside the source tree with no PYTHONPATH and no build folder named.
part_pip() {
  local venv=${ANYEP_VENV:-/tmp/anyep-gpu-venv} vpy away rc=0
  vpy=$venv/bin/python
  rm -rf "$venv"
  step pip_venv 300 "$PY" -m venv --system-site-packages "$venv" || { skip pip_install "no venv"; return; }
  # --system-site-packages gives the BASE interpreter's site-packages: where python3 is itself a
  # venv holding torch, a .pth file names the site-packages holding torch (after the venv's own).
  if ! "$vpy" -c "import torch" > /dev/null 2>&1; then
    "$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' \
      > "$("$vpy" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')/outer-torch.pth"
  fi
  # --no-build-isolation builds with the venv's python: torch and the build tools must import there.
  step pip_tools 120 "$vpy" -c 'import torch, setuptools, wheel
print("torch", torch.__version__, "from", torch.__file__)
print("setuptools", setuptools.__version__, "wheel", wheel.__version__)' ||
    { skip pip_install "the venv lacks torch, setuptools or wheel"; return; }
  local cargs="-DCMAKE_CUDA_ARCHITECTURES=${CMAKE_CUDA_ARCHITECTURES:-90}" penv=()
  if [ -n "${ANYEP_PREFIX:-}" ]; then
    cargs+=" -DCMAKE_PREFIX_PATH=$ANYEP_PREFIX -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON"
  fi
  penv=(CMAKE_ARGS="$cargs")
  if libfabric_built; then penv+=(ANYEP_REQUIRE_LIBFABRIC=1); fi  # as the build above found it
  rm -rf python/build  # setuptools' build folder inside the source tree: a fresh build each time
  # --no-index: the package needs nothing from an index, so the result depends on this machine only.
  step pip_install 3600 env "${penv[@]}" "$vpy" -m pip install --no-index --no-build-isolation -v ./python || rc=$?
  rm -rf python/build
  [ "$rc" = 0 ] || { skip pip_use "pip install failed"; return; }
  grep -E "^ *anyep setup.py:" "$LOGS/pip_install.log" | sed 's/^ */   /' || true

  away=$(mktemp -d)
  [ -f examples/quickstart.py ] && cp examples/quickstart.py "$away/"
  cat > "$away/check_import.py" << 'EOF'
import os, sys
import anyep, deep_ep
from anyep import _build_info
root, want_fabric = sys.argv[1], sys.argv[2] == "1"
with open(os.path.join(root, "CMakeLists.txt")) as f:
    want = f.read().split("project(anyep VERSION ")[1].split()[0]
print("anyep", anyep.__version__, "from", anyep.__file__)
print("deep_ep from", deep_ep.__file__, "| libfabric built in:", _build_info.libfabric)
problems = []
if anyep.__version__ != want:
    problems.append(f"version {anyep.__version__}, CMakeLists.txt says {want}")
if anyep.__file__.startswith(root + os.sep) or deep_ep.__file__.startswith(root + os.sep):
    problems.append("imported from the source tree, not from the installed package")
if want_fabric and not _build_info.libfabric:
    problems.append("CMake found libfabric, but the pip package was built without it")
print("FAILED: " + "; ".join(problems) if problems else "OK")
sys.exit(1 if problems else 0)
EOF
  local out=(env -u PYTHONPATH -u ANYEP_BUILD_DIR -C "$away")
  step pip_import 120 "${out[@]}" "$vpy" check_import.py "$ROOT" "$(libfabric_built && echo 1 || echo 0)" || true
  if [ -f "$away/quickstart.py" ]; then
    step pip_quickstart 600 "${out[@]}" "$vpy" -m torch.distributed.run --standalone --nproc-per-node 2 \
      quickstart.py || true
  else
    fail pip_quickstart "examples/quickstart.py is missing"
  fi
  if [ -x "$venv/bin/anyep" ]; then
    step pip_bench_ll 900 "${out[@]}" PATH="$venv/bin:$PATH" "$venv/bin/anyep" bench ll --ranks 1 || true
  else
    fail pip_bench_ll "the pip package installed no anyep command ($venv/bin/anyep)"
  fi
  rm -rf "$away"
}

ctest_step gpu_common 1200 '^gpu-(common|channel|transport)$'
for part in "${PARTS[@]}"; do
  case " ${DONE:-} " in *" $part "*) continue ;; esac  # `all ll` runs ll once
  DONE="${DONE:-} $part"
  echo "== $part"
  "part_$part"
done
summary
