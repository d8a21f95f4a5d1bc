#!/usr/bin/env bash
# Kernel code names no vendor instruction: inline assembly, warp intrinsics with lane masks, a
# literal warp size or full-warp mask belong in src/common/portability.h (kWarpSize,
# full_lane_mask(), warp_shuffle_xor, warp_reduce_*, load_acquire_*, ...), which is the one file a
# HIP port changes. Prints file:line, the rule and the line for each violation; exit 1 if any.
#
# Kernel code: every tracked .cu/.cuh file, plus the headers compiled into kernels (src/kernels/,
# src/channel/, *kernels*.h of bench/ and tests/gpu/). Line comments are ignored.
set -euo pipefail
cd "$(dirname "$0")/../.."

mapfile -t files < <(git ls-files '*.cu' '*.cuh' 'src/kernels/*.h' 'src/channel/*.h' 'bench/*kernels*.h' \
                       'tests/gpu/*kernels*.h' | grep -v '^src/common/portability\.h$')

fail=0
# rule name, pattern (ERE), optional: the line must also match this (ERE) to count
scan() {
  local rule=$1 pattern=$2 also=${3:-}
  local f hits
  for f in "${files[@]}"; do
    [ -f "$f" ] || continue
    # number lines first, then drop line comments, so file:line stays true
    hits=$(awk '{ sub(/\/\/.*$/, ""); print FNR ": " $0 }' "$f" | grep -E -- "$pattern" || true)
    if [ -n "$also" ] && [ -n "$hits" ]; then hits=$(grep -E -- "$also" <<<"$hits" || true); fi
    [ -z "$hits" ] && continue
    while IFS= read -r h; do
      echo "$f:${h%%:*}: [$rule]${h#*:}"
      fail=1
    done <<<"$hits"
  done
}

scan "inline assembly: put it behind src/common/portability.h" '(^|[^A-Za-z0-9_])(asm|__asm__|__asm)([^A-Za-z0-9_]|$)'
scan "vendor warp intrinsic: use port::warp_* / full_lane_mask()" \
  '__shfl|__ballot|__activemask|__match_(any|all)|__(any|all|uni)_sync|__reduce_[a-z]+_sync|__syncwarp|__lane_id|%laneid|(^|[^A-Za-z0-9_])warpSize([^A-Za-z0-9_]|$)'
scan "literal full-warp mask: use port::full_lane_mask()" '0x[fF]{8}([uUlL]*)([^0-9A-Fa-f]|$)'
scan "literal lane mask passed to a warp helper: use port::full_lane_mask()" 'warp_[a-z_]+\(\s*(~0|0x[fF]+)'
scan "literal warp size: use port::kWarpSize" \
  '([/%&]|\+=|-=|<|<=|==)\s*(31|32|63|64)([^0-9.xXA-Za-z_]|$)' 'threadIdx|blockDim|lane|warp|(^|[^A-Za-z_])tid'

if [ "$fail" != 0 ]; then
  echo "portability check: FAILED (see above; the primitives live in src/common/portability.h)"
  exit 1
fi
echo "portability check: OK (${#files[@]} kernel files)"
