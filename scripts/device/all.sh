#!/usr/bin/env bash
# One device call for the whole team's device checks, in priority order, each under a time cap:
#   1. transport (unit + multi-process tests over tcp/shm, anyep vs raw libfabric benchmark)
#   2. proxy thread sweep (CPU only) and the CPU main job
#   3. LL (C++ tests, Python smoke with diagnostics, pytest + benchmark if the smoke passes)
# Each part's logs are packed into one archive under $OUT (the device tool returns few files).
# Run from the repository root with carry [".deps"]:  bash scripts/device/all.sh
set -u
cd "$(dirname "$0")/../.."
OUT=${OUT:-/tmp/anyep-all-out}
mkdir -p "$OUT"
export NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1 FI_TCP_IFACE=lo DEPS=$PWD/.deps/usr
part() {  # part NAME CAP_S SCRIPT...
  local name=$1 cap=$2; shift 2
  local dir=/tmp/anyep-dev-$name t0=$(date +%s)
  rm -rf "$dir"; mkdir -p "$dir"
  echo "################ $name (cap ${cap} s)"
  OUT=$dir timeout -k 5 "$cap" "$@" > "$dir/stdout.txt" 2>&1
  local rc=$?
  tail -${TAIL_LINES:-40} "$dir/stdout.txt"
  echo "################ $name: rc $rc in $(( $(date +%s) - t0 )) s"
  tar -czf "$OUT/$name.tgz" -C "$dir" . 2>/dev/null
}
part transport "${TRANSPORT_CAP:-70}" env BENCH_ARGS="${TRANSPORT_BENCH_ARGS:---reps 5 --bytes-per-point 64M}" \
  bash scripts/device/transport.sh
part proxy "${PROXY_CAP:-100}" bash scripts/device/proxy.sh
part ll "${LL_CAP:-170}" env LL_BUDGET_S="$(( ${LL_CAP:-170} - 10 ))" bash scripts/device/ll.sh
