# Sourced by scripts/device/deepep_tests.sh and deepep_baseline.sh, from the repository root: the
# folders, environment and step runner both use, and the build of anyep's extension they share
# (build-lldev, as scripts/device/ll.sh builds it). Sets ROOT, OUT, TESTS, PY, BUILD, NPROC, rows,
# failed; run NAME LIMIT CMD... runs a step under `timeout` into $OUT/NAME.log and adds a row.
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

build_anyep() {  # build_anyep LIMIT: configure once, then build the extension
  if [ ! -f "$BUILD/build.ninja" ]; then
    run configure 90 cmake -S . -B "$BUILD" -G Ninja -DCMAKE_BUILD_TYPE=RelWithDebInfo -DCMAKE_CUDA_ARCHITECTURES=90 \
      ${DEPS:+-DCMAKE_PREFIX_PATH="$DEPS" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON} -DANYEP_BENCH=OFF \
      -DANYEP_TESTS=ON -DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$PY" || failed=1
  fi
  run build "$1" cmake --build "$BUILD" --target anyep_python -j 16 || failed=1
}
