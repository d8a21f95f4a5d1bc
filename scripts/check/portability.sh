#!/usr/bin/env bash
# Kernel code is written once for NVIDIA (CUDA, 32-lane warps) and AMD (HIP, 64-lane wavefronts):
# it names no vendor instruction, header, type or intrinsic, and no warp size. Inline assembly,
# warp intrinsics with lane masks, fences, cache-hinted loads, timers, traps, BF16/FP8 conversions,
# a literal warp size or full-warp mask belong in src/common/portability.h (port::kWarpSize,
# full_lane_mask(), warp_shuffle_xor, fence_system, load_l2, float2_to_bf16x2, ...); runtime calls
# in src/common/gpu_runtime.h. docs/amd.md lists what a kernel file must do. Prints file:line, the
# rule and the line for each violation; exit 1 if any.
#
# Kernel code: every tracked .cu/.cuh file, plus the headers compiled into kernels (src/kernels/,
# src/channel/, *kernels*.h of bench/ and tests/gpu/). Line comments are ignored.
#
# Before scanning the tree the script checks itself: every rule must fire on a sample line that
# breaks it and stay quiet on a sample of lines that do not (an edited pattern that stops matching
# fails here instead of passing everything).
set -euo pipefail
cd "$(dirname "$0")/../.."

fail=0
files=()
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

# Lines that mention threads, lanes or warps: a 32/64 there is a warp size.
warp_context='threadIdx|blockDim|[Ll]ane|[Ww]arp|[Ww]ave|(^|[^A-Za-z_])tid'

# The rules: name, pattern (ERE), the line must also match (ERE, optional).
names=() patterns=() alsos=()
rule() { names+=("$1"); patterns+=("$2"); alsos+=("${3:-}"); }
rule "inline assembly: put it behind src/common/portability.h" '(^|[^A-Za-z0-9_])(asm|__asm__|__asm)([^A-Za-z0-9_]|$)'
rule "vendor warp intrinsic: use port::warp_* / full_lane_mask()" \
  '__shfl|__ballot|__activemask|__match_(any|all)|__(any|all|uni)_sync|__reduce_[a-z]+_sync|__syncwarp|__lane_id|%laneid|(^|[^A-Za-z0-9_])warpSize([^A-Za-z0-9_]|$)'
rule "literal full-warp mask: use port::full_lane_mask()" '0x[fF]{8}([uUlL]*)([^0-9A-Fa-f]|$)|0x[fF]{16}'
rule "literal lane mask passed to a warp helper: use port::full_lane_mask()" 'warp_[a-z_]+\(\s*(~0|0x[fF]+|-1)'
rule "literal warp size: use port::kWarpSize" \
  '([/%&*]|\+=|-=|<|<=|>|>=|==|!=|=)\s*(31|32|63|64)([^0-9.xXA-Za-z_]|$)|(^|[^0-9A-Za-z_.])(32|64)\s*\*' "$warp_context"
rule "warp index by shift (a warp size of 32 or 64): use / port::kWarpSize" '(>>|<<)\s*[56]([^0-9]|$)' "$warp_context"
rule "vendor header in kernel code: include common/portability.h (device) or common/gpu_runtime.h (host API)" \
  '#\s*include\s*[<"](cuda|cuda_[a-z0-9_]+|hip/[a-z0-9_/]+|cub/[a-z0-9_/]+|cooperative_groups[a-z0-9_/]*)(\.h|\.hpp|\.cuh)?[>"]'
rule "vendor type or intrinsic: use its port:: twin (fences, loads, timers, traps, BF16/FP8)" \
  '__nv_|__NV_|__hip_|__HIP_|__builtin_amdgcn|__ldg|__ldc[agsv]|__ldlu|__st(cg|cs|wt|wb)\(|__nanosleep|__trap|__threadfence|__grid_constant__|globaltimer|clock64|__[a-z0-9]*(bfloat16|half)[a-z0-9_]*\(|__(bfloat16|half)[0-9]*([^A-Za-z0-9_]|$)'

scan_rules() {
  local i
  for i in "${!names[@]}"; do scan "${names[$i]}" "${patterns[$i]}" "${alsos[$i]}"; done
}

self_test() {
  local dir bad good out broken=0 i
  dir=$(mktemp -d)
  bad="$dir/bad.cu"
  good="$dir/good.cu"
  # Line i breaks rule i (in the order above).
  cat >"$bad" <<'EOF'
  asm volatile("membar.gl;");
  v = __shfl_xor_sync(m, v, 1);
  const unsigned m = 0xffffffff;
  x = port::warp_broadcast(~0ull, x, 0);
  const int lane = threadIdx.x % 32;
  const int warp = threadIdx.x >> 5;
#include <cuda_bf16.h>
  __threadfence_system();
EOF
  # Lines close to a rule that are fine (port:: names, scale groups, other 32s, comments).
  cat >"$good" <<'EOF'
#include "common/portability.h"
  const int lane = threadIdx.x % port::kWarpSize;
  amax = port::warp_reduce_max<kScaleGroup / 16>(amax);
  if ((v & 7) == 0) s_scale[v / 8] = scale;
  const uint32_t packed = port::ue8m0_exponent(f.x) | (port::ue8m0_exponent(f.y) << 8);
  x = port::warp_broadcast(port::full_lane_mask(), x, 0);  // not 0xffffffff: a comment
  const uint64_t hi = word >> 32;
  port::fence_system();
EOF
  files=("$bad")
  out=$(scan_rules)
  for i in "${!names[@]}"; do
    if ! grep -qF -- "$bad:$((i + 1)): [${names[$i]}]" <<<"$out"; then
      echo "portability self-test: rule '${names[$i]}' did not fire on: $(sed -n "$((i + 1))p" "$bad")"
      broken=1
    fi
  done
  files=("$good")
  out=$(scan_rules)
  if [ -n "$out" ]; then
    echo "portability self-test: a rule fired on a line that is fine:"
    echo "$out"
    broken=1
  fi
  rm -rf "$dir"
  if [ "$broken" != 0 ]; then
    echo "portability check: FAILED (its own self-test; see above)"
    exit 1
  fi
}

self_test

mapfile -t files < <(git ls-files '*.cu' '*.cuh' 'src/kernels/*.h' 'src/channel/*.h' 'bench/*kernels*.h' \
                       'tests/gpu/*kernels*.h' | sort -u | grep -v '^src/common/portability\.h$')
fail=0
scan_rules

if [ "$fail" != 0 ]; then
  echo "portability check: FAILED (see above; device primitives live in src/common/portability.h, runtime calls in"
  echo "  src/common/gpu_runtime.h; docs/amd.md says what a kernel file must do)"
  exit 1
fi
echo "portability check: OK (${#files[@]} kernel files; self-test: every rule fires on its sample)"
