#!/usr/bin/env bash
# Device run of the transport layer (GPU machine, or any Linux host): build the transport's tests
# and benchmark, run the unit tests, the multi-process tests over tcp (pinned to lo) and shm
# (host memory: that machine's libfabric cannot register GPU memory), and the benchmark (anyep vs
# raw libfabric on the same endpoint). A short table comes last; full logs go to $OUT.
#   DEPS_PREFIX   CMake prefix with libfabric + GoogleTest -dev files (default: $PWD/.deps/usr if
#                 present; made by ../shared/tools/device-deps.sh .deps and carried as .deps)
#   BUILD_DIR     build folder (default build-device-transport)
#   BENCH_ARGS    extra arguments for bench_transport (see bench/transport/bench_transport.cpp); a
#                 second, short run repeats shm up to 64 KiB with --api single for comparison
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-transport}
BUILD_DIR=${BUILD_DIR:-build-device-transport}
mkdir -p "$OUT"
export PATH=/usr/local/cuda/bin:$PATH NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
export FI_TCP_IFACE=lo  # loopback only
DEPS_PREFIX=${DEPS_PREFIX:-}
[ -z "$DEPS_PREFIX" ] && [ -d .deps/usr ] && DEPS_PREFIX=$PWD/.deps/usr
args=()
# The Debian .pc file says prefix=/usr, where this machine has no headers: find libfabric through
# the prefix path instead of pkg-config.
[ -n "$DEPS_PREFIX" ] && args=(-DCMAKE_PREFIX_PATH="$DEPS_PREFIX" -DCMAKE_DISABLE_FIND_PACKAGE_PkgConfig=ON)

t0=$(date +%s)
if ! cmake -S . -B "$BUILD_DIR" -G Ninja -DCMAKE_BUILD_TYPE=Release -DANYEP_PYTHON=OFF \
     -DCMAKE_CUDA_ARCHITECTURES=90 "${args[@]}" >"$OUT/configure.log" 2>&1; then
  cat "$OUT/configure.log"; exit 1
fi
grep "anyep:" "$OUT/configure.log" || true
targets=(test_transport test_transport_mp_bootstrap)
if grep -q "libfabric=ON" "$OUT/configure.log"; then targets+=(test_transport_mp_libfabric bench_transport); fi
if ! cmake --build "$BUILD_DIR" -j "$(nproc)" --target "${targets[@]}" >"$OUT/build.log" 2>&1; then
  tail -50 "$OUT/build.log"; exit 1
fi
echo "=== built ${targets[*]} in $(( $(date +%s) - t0 )) s"
{ (fi_info -l 2>/dev/null | grep -E "^[a-z]" | tr "\n" " "; echo) || echo "fi_info not available"; } | tee "$OUT/providers.txt"
nproc | sed 's/^/cores: /'

declare -A rc
run() {  # name, timeout, command...
  local name=$1 limit=$2; shift 2
  local t=$(date +%s)
  set +e
  timeout "$limit" "$@" >"$OUT/$name.log" 2>&1
  rc[$name]=$?
  set -e
  echo "--- $name: rc ${rc[$name]} in $(( $(date +%s) - t )) s"
  grep -E "^\[ +(FAILED|SKIPPED) +\]|^\[ info \]|Failure|rank [0-9]+ (FAILED|KILLED|CRASHED)" "$OUT/$name.log" | head -30 || true
}
T=$BUILD_DIR/tests
run unit 120 "$T/unit/transport/test_transport"
run mp_bootstrap 120 "$T/mp/transport/test_transport_mp_bootstrap"
if [ -x "$T/mp/transport/test_transport_mp_libfabric" ]; then
  run mp_libfabric 300 "$T/mp/transport/test_transport_mp_libfabric"
  # shellcheck disable=SC2086
  run bench 400 "$BUILD_DIR/bench/transport/bench_transport" ${BENCH_ARGS:-}
  # The same small shm writes posted one post_write at a time (the pre-batch path), for comparison.
  # shellcheck disable=SC2086
  run bench_single 200 "$BUILD_DIR/bench/transport/bench_transport" ${BENCH_ARGS:-} --providers shm --max 64K --api single
fi

echo
echo "=== summary (logs in $OUT)"
for n in unit mp_bootstrap mp_libfabric; do
  [ -f "$OUT/$n.log" ] || continue
  echo "$n: $(grep -E '^\[  PASSED  \]|^\[  FAILED  \]|^\[  SKIPPED \]' "$OUT/$n.log" | tr '\n' ' ') (rc ${rc[$n]})"
done
if [ -f "$OUT/bench.log" ]; then
  grep -E "^# (command|machine|2 processes)" "$OUT/bench.log"
  grep -E "^(prov|tcp|shm|self) " "$OUT/bench.log" | awk '!(/^prov/ && seen++)'
fi
if [ -f "$OUT/bench_single.log" ]; then
  echo "one post_write per write (--api single):"
  grep -E "^shm " "$OUT/bench_single.log"
fi
status=0
for n in "${!rc[@]}"; do [ "${rc[$n]}" = 0 ] || status=1; done
exit $status
