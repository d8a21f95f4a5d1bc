#!/usr/bin/env bash
# Device run for the C API, the CLI and the pip package (issue 14), in ONE call:
#   c:   build libanyep, the C example, the C API tests and the CLI (libfabric from .deps); run the
#        error-path tests (LL and HT), the example's CPU part and its data path across 2 processes
#        sharing GPU 0 (LL by direct stores, then LL over the proxy on libfabric shm, each run also
#        with its HT round by direct stores), every value checked; `anyep info`;
#        the example built against the INSTALLED package (find_package and pkg-config) and run.
#   pip: a venv that sees the machine's torch: python3 -m venv --system-site-packages, and, where
#        python3 is itself a venv (this machine's /opt/torch/.venv: the new venv would see the BASE
#        interpreter's site-packages, without torch), a .pth file naming the site-packages that holds
#        torch (found by importing torch with python3); the build tools checked with the new venv's
#        python (setuptools, wheel; scikit-build-core noted: setuptools drives CMake either way), then
#        pip install --no-index --no-build-isolation ./python  (libfabric required when .deps has it);
#        from another folder: import deep_ep / anyep (the installed copy, its version, libfabric
#        built in), the README's LL example across 2 processes (torch.distributed.run, gloo), and
#        tests/python/ll_smoke.py importing the installed package (no PYTHONPATH). The commands, as a
#        user types them, are written to $OUT/pip_commands.sh and printed.
# CAPI_PARTS picks the parts ("c pip", the default; "c" or "pip" to split across two calls: build
# outputs stay on a warm machine). Every step runs under `timeout`; logs in $OUT; a table last.
# Exits 1 when a step failed, timed out or was skipped for lack of budget.
#
# Device call (kind nvidia-h100-x1 or nvidia-h200; carry [".deps"]), from the repository root:
#   bash scripts/device/capi.sh          (timeout_s ~ CAPI_BUDGET_S + 30; default budget 560 s)
# Proof: the summary table shows rc=0 for every step; example_gpu.log has "fused BF16 dispatch",
# "staged (send-only + complete) BF16 dispatch", "FP8 dispatch" and "HT dispatch" for both ranks; pip_import.log
# shows site-packages paths, the version and libfabric=True; readme_ll.log "rank 0/1: dispatch/combine OK".
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-capi-out}
mkdir -p "$OUT"
DEPS=""
for d in "$ROOT/.deps/usr" "$ROOT/../../.deps/usr" "$ROOT/../.deps/usr"; do
  [ -d "$d" ] && { DEPS=$(cd "$d" && pwd); break; }
done
BUILD=$ROOT/build-capidev  # own build dir: a copied build/ from another machine is never reused
if [ -f "$BUILD/CMakeCache.txt" ] && ! grep -q "CMAKE_HOME_DIRECTORY:INTERNAL=$ROOT\$" "$BUILD/CMakeCache.txt"; then
  rm -rf "$BUILD"
fi
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 PYTHONUNBUFFERED=1 ANYEP_TIMEOUT_S=${ANYEP_TIMEOUT_S:-10}
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc > /dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
PY=$(command -v python3)
NGPUS=$("$PY" -c 'import torch;print(torch.cuda.device_count())' 2>/dev/null || nvidia-smi -L 2>/dev/null | grep -c '^GPU ')
PARTS=${CAPI_PARTS:-c pip}
summary=()
START=$(date +%s)
BUDGET=${CAPI_BUDGET_S:-560}

step() {  # step NAME LIMIT CMD...   (the limit shrinks to what is left of BUDGET)
  local name=$1 limit=$2; shift 2
  local t0=$(date +%s)
  local left=$(( BUDGET - (t0 - START) - 3 ))
  if [ "$left" -lt 10 ]; then
    summary+=("$(printf '%-16s skipped (budget spent)' "$name")")
    return 125
  fi
  [ "$limit" -gt "$left" ] && limit=$left
  timeout -k 5 "$limit" "$@" > "$OUT/$name.log" 2>&1
  local rc=$?
  local note=""
  [ "$rc" = 124 ] && note="TIMEOUT ${limit}s"
  [ "$rc" -gt 128 ] && note="killed by signal $(( rc - 128 ))"
  summary+=("$(printf '%-16s rc=%-4s %4ss %s' "$name" "$rc" "$(( $(date +%s) - t0 ))" "$note")")
  return $rc
}
fail_note() { summary+=("$(printf '%-16s rc=1    FAILED: %s' "$1" "$2")"); }
show() { [ -f "$OUT/$1.log" ] && { echo "== $1 (last ${2:-25} lines)"; tail -n "${2:-25}" "$OUT/$1.log"; }; }

# ---- 0. machine and Python build tools ---------------------------------------------------------
{
  date -u; nvidia-smi --query-gpu=name,memory.total,driver_version --format=csv
  "$PY" -c 'import torch,sys;print("python",sys.version.split()[0],"torch",torch.__version__,"cuda",torch.version.cuda,"gpus",torch.cuda.device_count())'
  for m in pip setuptools wheel scikit_build_core; do
    "$PY" -c "import importlib.metadata as md, sys; n = sys.argv[1].replace('_', '-'); print(n, md.version(n))" "$m" \
      2>/dev/null || echo "$m: not installed"
  done
  echo "cmake: $(cmake --version | head -1)  ninja: $(ninja --version 2>/dev/null || echo absent)  pkg-config: $(command -v pkg-config || echo absent)  cc: $(command -v cc || echo absent)"
  echo "deps: ${DEPS:-none}  root: $ROOT  parts: $PARTS"
} > "$OUT/machine.txt" 2>&1

# ---- c: libanyep, the example, the tests, the CLI ----------------------------------------------
if [[ " $PARTS " == *" c "* ]]; then
  CFG=(-S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90
       ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON} -DANYEP_LIBFABRIC=ON
       -DANYEP_TESTS=ON -DANYEP_BENCH=ON -DANYEP_PYTHON=OFF)
  if step configure 60 cmake "${CFG[@]}" && \
     step build 200 cmake --build "$BUILD" --target anyep ll_example test_capi_errors test_capi_ht_errors \
       test_capi_group_mp anyep_cli anyep_main -j "$(nproc)"; then
    step capi_errors 40 "$BUILD/tests/unit/capi/test_capi_errors"
    step capi_ht_errors 40 "$BUILD/tests/unit/capi/test_capi_ht_errors"
    step capi_group_mp 60 "$BUILD/tests/mp/capi/test_capi_group_mp"
    step example_cpu 60 "$BUILD/examples/ll_example" --part cpu --ranks 3 --timeout-s 50
    # The LL data path, then HT: 2 processes sharing GPU 0 (rank r on GPU r % GPUs), direct stores (CUDA IPC).
    step example_gpu 120 env CUDA_VISIBLE_DEVICES=0 "$BUILD/examples/ll_example" --part gpu --ranks 2 --timeout-s 110
    # The same through the CPU proxy over libfabric shm (each process its own node, host-staged buffer).
    step example_proxy 150 env CUDA_VISIBLE_DEVICES=0 ANYEP_LL_PATH=proxy-libfabric ANYEP_FI_PROVIDER=shm \
      "$BUILD/examples/ll_example" --part gpu --ranks 2 --timeout-s 140
    step cli_info 30 "$BUILD/cli/anyep" info
    step install 150 env BUILD_DIR="$BUILD" ANYEP_CAPI_ALLOW_NO_PKG_CONFIG=1 bash scripts/check/capi_install.sh
    # The GPU part of the installed example must have run, not skipped.
    if [ -f "$OUT/install.log" ] && grep -q "GPU part skipped" "$OUT/install.log"; then
      fail_note install_gpu "the installed example's GPU part was skipped on a GPU machine"
    fi
  fi
fi

# ---- pip: the package as a user installs it --------------------------------------------------------
if [[ " $PARTS " == *" pip "* ]]; then
  VENV=/tmp/anyep-capi-venv
  rm -rf "$VENV" "$OUT/pip_commands.sh"
  record() { printf '%s\n' "$*" >> "$OUT/pip_commands.sh"; }  # the commands as a user types them
  record "python3 -m venv --system-site-packages $VENV"
  if step venv 60 "$PY" -m venv --system-site-packages "$VENV"; then
    VPY=$VENV/bin/python
    # --system-site-packages gives the BASE interpreter's site-packages. Where python3 is itself a
    # venv holding torch, the new venv needs that venv's site-packages too: a .pth file naming it
    # (appended after the new venv's own, so what pip installs there comes first).
    if ! "$VPY" -c "import torch" > /dev/null 2>&1; then
      TORCH_SITE=$("$PY" -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))' 2>/dev/null)
      VSITE=$("$VPY" -c 'import sysconfig; print(sysconfig.get_paths()["purelib"])')
      record "TORCH_SITE=\$(python3 -c 'import os, torch; print(os.path.dirname(os.path.dirname(torch.__file__)))')"
      record "echo \"\$TORCH_SITE\" > \"\$($VPY -c 'import sysconfig; print(sysconfig.get_paths()[\"purelib\"])')/outer-torch.pth\""
      if [ -n "$TORCH_SITE" ] && [ -d "$TORCH_SITE" ]; then
        echo "$TORCH_SITE" > "$VSITE/outer-torch.pth"
        echo "venv: torch is not in the base interpreter's site-packages; $VSITE/outer-torch.pth -> $TORCH_SITE" \
          >> "$OUT/machine.txt"
      else
        fail_note venv_torch "python3 ($PY) cannot import torch either: no site-packages to point the venv at"
      fi
    fi
    # The build tools, where the build looks: --no-build-isolation builds with the venv's python.
    step build_tools 30 "$VPY" - << 'PY'
import importlib, importlib.metadata as md, sys
print("venv python", sys.executable, sys.version.split()[0])
missing = []
for mod, dist in (("torch", "torch"), ("setuptools", "setuptools"), ("wheel", "wheel"), ("scikit_build_core", "scikit-build-core")):
    try:
        m = importlib.import_module(mod)
        print(f"{dist} {md.version(dist)} from {m.__file__}")
    except Exception as e:  # noqa: BLE001 - any failure means "not usable here"
        print(f"{dist}: not importable ({e})")
        if dist != "scikit-build-core":  # optional: setuptools drives CMake either way
            missing.append(dist)
sys.exit(f"missing in the venv: {', '.join(missing)}" if missing else 0)
PY
    SKB=$(grep -q "^scikit-build-core [0-9]" "$OUT/build_tools.log" 2>/dev/null && echo present || echo absent)
    echo "scikit-build-core in the venv: $SKB (the package builds with setuptools driving CMake either way)" \
      >> "$OUT/machine.txt"
    rm -rf python/build python/*.egg-info
    PIP_ENV=(CMAKE_ARGS="-DCMAKE_CUDA_ARCHITECTURES=90 ${DEPS:+-DCMAKE_PREFIX_PATH=$DEPS -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON}")
    [ -n "$DEPS" ] && PIP_ENV+=(ANYEP_REQUIRE_LIBFABRIC=1)
    record "$(printf '%q ' "${PIP_ENV[@]}")$VPY -m pip install --no-index --no-build-isolation -v ./python"
    if step pip_install 300 env "${PIP_ENV[@]}" "$VPY" -m pip install --no-index --no-build-isolation -v ./python; then
      grep -E "^ *anyep setup.py:" "$OUT/pip_install.log" > "$OUT/pip_summary.txt" 2>&1
      AWAY=$(mktemp -d)  # another folder: nothing of the checkout on sys.path
      cat > "$AWAY/check_import.py" << 'PY'
import os, sys
import anyep, deep_ep
from anyep import _build_info
root = sys.argv[1]
print("anyep", anyep.__version__, "from", anyep.__file__)
print("deep_ep", deep_ep.__version__, "from", deep_ep.__file__)
print("anyep._C from", anyep.buffer._C.__file__, "libfabric built in:", _build_info.libfabric)
want = open(os.path.join(root, "CMakeLists.txt")).read().split("project(anyep VERSION ")[1].split()[0]
ok = anyep.__version__ == want and "site-packages" in anyep.__file__ and not anyep.__file__.startswith(root + "/python")
ok = ok and (_build_info.libfabric or os.environ.get("DEPS_PRESENT") != "1")
print("checks:", "version equals CMakeLists.txt's", want, "| installed copy | libfabric:", _build_info.libfabric,
      "->", "OK" if ok else "FAILED")
sys.exit(0 if ok else 1)
PY
      record "cd \$(mktemp -d) && $VPY check_import.py $ROOT   # import anyep / deep_ep from another folder"
      step pip_import 60 env -u PYTHONPATH DEPS_PRESENT=$([ -n "$DEPS" ] && echo 1 || echo 0) \
        sh -c "cd '$AWAY' && '$VPY' check_import.py '$ROOT'"
      # The README's LL example, extracted from README.md, run from the other folder.
      awk '/<!-- the README.s LL example/{f=1; next} f && /^```python/{p=1; next} p && /^```/{exit} p' README.md \
        > "$AWAY/readme_ll.py"
      if [ -s "$AWAY/readme_ll.py" ]; then
        record "$VPY -m torch.distributed.run --nproc-per-node 2 --master-port 29617 readme_ll.py   # README's LL example"
        step readme_ll 150 env -u PYTHONPATH CUDA_VISIBLE_DEVICES=0 sh -c \
          "cd '$AWAY' && '$VPY' -m torch.distributed.run --nproc-per-node 2 --master-port 29617 readme_ll.py"
        cp "$AWAY/readme_ll.py" "$OUT/readme_ll.py"
      else
        fail_note readme_ll "README.md has no LL example after its marker"
      fi
      # A test that imports the installed package (no PYTHONPATH, run from the other folder).
      record "$VPY $ROOT/tests/python/ll_smoke.py"
      step ll_smoke 60 env -u PYTHONPATH LL_SMOKE_PORT=29619 sh -c "cd '$AWAY' && '$VPY' '$ROOT/tests/python/ll_smoke.py'"
      if [ -f "$OUT/ll_smoke.log" ] && ! grep -q "ll_smoke: ok" "$OUT/ll_smoke.log"; then
        fail_note ll_smoke_ok "ll_smoke.py did not print 'ok'"
      fi
      # `anyep bench ll` drives bench/ll/bench_ll.py with the venv's python3 and the installed package
      # (ANYEP_BUILD_DIR points nowhere, so no build folder is put on sys.path), a rank per GPU.
      if [ "${NGPUS:-0}" -ge 1 ] && [ -x "$BUILD/cli/anyep" ]; then
        step cli_bench_ll 200 env PATH="$VENV/bin:$PATH" ANYEP_BUILD_DIR=/nonexistent "$BUILD/cli/anyep" bench ll \
          --iters 50 --warmup 10 --json
      else
        summary+=("$(printf '%-16s not run: needs a GPU (%s visible) and the c part' cli_bench_ll "${NGPUS:-0}")")
      fi
    fi
  fi
fi

# ---- summary -------------------------------------------------------------------------------------
echo "== logs: $OUT"
cat "$OUT/machine.txt"
show build 4
show capi_errors 6
show capi_ht_errors 3
show capi_group_mp 4
for f in example_gpu example_proxy; do
  [ -f "$OUT/$f.log" ] && { echo "== $f: what was checked"; grep -E "BF16|FP8|HT |FAILED|no GPU|passed|exited" "$OUT/$f.log" | head -24; }
done
show cli_info 45
[ -f "$OUT/install.log" ] && { echo "== install"; grep -E "^---|symbols|GPU part|dispatch|capi install|FAILED|skipped" "$OUT/install.log" | head -40; }
show build_tools 8
[ -f "$OUT/pip_commands.sh" ] && { echo "== pip: the commands run (as a user types them)"; cat "$OUT/pip_commands.sh"; }
[ -f "$OUT/pip_summary.txt" ] && { echo "== pip (setup.py's lines)"; cat "$OUT/pip_summary.txt"; }
show pip_install 8
show pip_import 8
[ -f "$OUT/readme_ll.py" ] && { echo "== README LL example run"; cat "$OUT/readme_ll.py"; }
show readme_ll 12
show ll_smoke 12
show cli_bench_ll 30
echo "== summary (rc 124: timeout; rc > 128: killed by signal rc-128)"
printf '%s\n' "${summary[@]}"
printf '%s\n' "${summary[@]}" | grep -qE 'rc=[1-9]|budget spent' && exit 1
exit 0
