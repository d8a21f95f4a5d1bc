#!/usr/bin/env bash
# The C API as a user gets it: install a build (BUILD_DIR, default build) to a temporary prefix,
# compile examples/quickstart.c against the INSTALLED package twice -- with CMake's
# find_package(anyep) and with pkg-config -- and run each (its LL round trip on a GPU; exit 77
# "no GPU" on a machine without one, which still shows it links and loads the installed library);
# then the installed `anyep` CLI: info and bench proxy --json. Exit 1 on any failure.
# ANYEP_CAPI_ALLOW_NO_PKG_CONFIG=1 lets a machine without pkg-config skip that half (said so);
# CI installs pkg-config (scripts/install-deps.sh) and never sets it.
set -euo pipefail
cd "$(dirname "$0")/../.."
BUILD_DIR=${BUILD_DIR:-build}
export FI_TCP_IFACE=lo
prefix=$(mktemp -d)
trap 'rm -rf "$prefix"' EXIT
step() { echo "--- $*"; }

step "install $BUILD_DIR to $prefix"
cmake --install "$BUILD_DIR" --prefix "$prefix" > "$prefix/install.log"
for f in include/anyep/anyep.h include/anyep/status.h include/anyep/version.h bin/anyep bin/anyep_main; do
  [ -e "$prefix/$f" ] || { echo "capi install: $f is missing from the installation"; exit 1; }
done
libdir=$(dirname "$(find "$prefix" -name 'libanyep.so' | head -1)")
pcdir=$(dirname "$(find "$prefix" -name anyep.pc | head -1)")
echo "    library: $libdir, pkg-config: $pcdir, CMake package: $(dirname "$(find "$prefix" -name anyepConfig.cmake)")"
echo "    exported symbols: $(nm -D --defined-only "$libdir/libanyep.so" | awk '{print $3}' | tr '\n' ' ')"
if nm -D --defined-only "$libdir/libanyep.so" | awk '{print $3}' | grep -vqE '^(anyep_|anyepStatusName$)'; then
  echo "capi install: libanyep exports symbols outside the C API"; exit 1
fi

# run_example NAME BINARY: the round trip passes, or says "no GPU" (77) where it cannot run.
run_example() {
  local name=$1 bin=$2 rc=0
  step "$name: quickstart"
  "$bin" > "$prefix/gpu.log" 2>&1 || rc=$?
  cat "$prefix/gpu.log"
  if [ "$rc" = 77 ] && grep -q "no GPU" "$prefix/gpu.log"; then
    echo "    GPU part skipped (exit 77, no GPU), as it must be here"
  elif [ "$rc" != 0 ]; then
    echo "capi install: $name quickstart failed (exit $rc)"; exit 1
  fi
}

step "example with find_package(anyep)"
cmake -S examples -B "$prefix/ex-cmake" -G Ninja -DCMAKE_PREFIX_PATH="$prefix" -DCMAKE_BUILD_TYPE=Release \
  > "$prefix/ex-cmake.log" 2>&1 || { cat "$prefix/ex-cmake.log"; exit 1; }
cmake --build "$prefix/ex-cmake" > "$prefix/ex-build.log" 2>&1 || { cat "$prefix/ex-build.log"; exit 1; }
run_example "find_package" "$prefix/ex-cmake/quickstart"

if ! command -v pkg-config > /dev/null && [ "${ANYEP_CAPI_ALLOW_NO_PKG_CONFIG:-0}" = 1 ]; then
  step "example with pkg-config: skipped (pkg-config is not installed here)"
else
step "example with pkg-config ($(PKG_CONFIG_PATH=$pcdir pkg-config --modversion anyep))"
cflags=$(PKG_CONFIG_PATH=$pcdir pkg-config --cflags anyep)
libs=$(PKG_CONFIG_PATH=$pcdir pkg-config --libs anyep)
cuda=()
if [ "$(PKG_CONFIG_PATH=$pcdir pkg-config --variable=cuda anyep)" = 1 ]; then
  cudadir=$(dirname "$(dirname "$(command -v nvcc)")")
  cuda=(-DANYEP_EXAMPLE_CUDA -isystem "$cudadir/include" -L"$cudadir/lib64" -lcudart -Wl,-rpath,"$cudadir/lib64")
fi
# shellcheck disable=SC2086
cc -std=c99 -Wall -Wextra -pedantic -Werror examples/quickstart.c $cflags $libs "${cuda[@]}" \
  -o "$prefix/quickstart_pc"
LD_LIBRARY_PATH=$libdir run_example "pkg-config" "$prefix/quickstart_pc"
fi

step "installed CLI"
"$prefix/bin/anyep" --version
"$prefix/bin/anyep" info > "$prefix/info.txt"
grep -q "transports anyep can open here" "$prefix/info.txt" || { cat "$prefix/info.txt"; exit 1; }
"$prefix/bin/anyep" bench proxy --ranks 2 --rounds 100 --json > "$prefix/proxy.json"
python3 - "$prefix/proxy.json" <<'PY'
import json, sys
d = json.load(open(sys.argv[1]))
assert d["ok"] and d["results"]["commands"] > 0, d
print(f"    anyep bench proxy --json: {d['results']['commands']} commands, {d['results']['mcommands_per_s']:.3f} M/s")
PY
echo "capi install: OK"
