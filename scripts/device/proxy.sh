#!/usr/bin/env bash
# Proxy thread sweep on the device machine's CPUs (no GPU needed): builds proxy_bench and
# anyep_main (CPU only), runs T = 1, 2, 4, 8 over loopback and libfabric shm, engine and bypass,
# then the CPU main job. Full logs under $OUT (or ./proxy-device-out); a short table last.
#   Run from the repository root (or its .carry copy): bash scripts/device/proxy.sh
set -euo pipefail
cd "$(dirname "$0")/../.."
OUT=${OUT:-$PWD/proxy-device-out}
mkdir -p "$OUT"
DEPS=${DEPS:-$PWD/../../.deps/usr}
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
{
  echo "date: $(date -u)"; echo "host: $(hostname)"; nproc; lscpu | grep -E "Model name|Socket|NUMA node\(s\)" || true
  git rev-parse HEAD 2>/dev/null || echo "(no git: copied tree)"
} > "$OUT/machine.txt" 2>&1
# .deps' libfabric.pc names prefix /usr, where the device machine has no headers: hide pkg-config
# so CMake's find_path/find_library search CMAKE_PREFIX_PATH instead.
mkdir -p "$OUT/no-pkgconfig"
PKG_CONFIG_LIBDIR="$OUT/no-pkgconfig" PKG_CONFIG_PATH= \
cmake -S . -B build-proxy -G Ninja -DCMAKE_BUILD_TYPE=Release -DANYEP_CUDA=OFF -DANYEP_TESTS=OFF \
  -DPKG_CONFIG_USE_CMAKE_PREFIX_PATH=OFF -DCMAKE_PREFIX_PATH="$DEPS" > "$OUT/configure.log" 2>&1 || { tail -30 "$OUT/configure.log"; exit 1; }
cmake --build build-proxy -j "$(nproc)" --target proxy_bench anyep_main > "$OUT/build.log" 2>&1 || { tail -30 "$OUT/build.log"; exit 1; }
./build-proxy/bench/proxy/proxy_bench --threads 1,2,4,8 --backends loopback --commands 1000000 --reps 3 \
  2>&1 | tee "$OUT/bench_loopback.txt"
./build-proxy/bench/proxy/proxy_bench --threads 1,2,4,8 --backends shm --commands 200000 --reps 3 \
  2>&1 | tee "$OUT/bench_shm.txt"
./build-proxy/bench/anyep_main --ranks 4 --threads 4 2>&1 | tee "$OUT/main_shm.txt"
./build-proxy/bench/anyep_main --ranks 4 --threads 4 --provider loopback 2>&1 | tee "$OUT/main_loopback.txt"
echo "==== summary ===="
cat "$OUT/machine.txt"
grep -hE "^(backend|loopback|shm) " "$OUT"/bench_*.txt
grep -hE "transport:|M commands/s|round trip" "$OUT"/main_*.txt
