#!/usr/bin/env bash
# The mover kernel's code: the variant built for use (mover_kernel<true>) holds more system-scope
# fences than the test-only variant (mover_kernel<false>); the difference is the fences before the
# completion stores (the EXITING handshake and the last block's STOPPED keep theirs in both). A
# fence lost in a refactor, or a no-fence switch that changes nothing, fails here without a GPU.
# Usage: check_fence_code.sh --ptx <mover_kernel.ptx>
#        check_fence_code.sh --sass <cuobjdump> <libanyep_emunic_gpu.a>
set -euo pipefail
case "${1:-}" in
  --ptx)
    text=$(cat "$2")
    header='^[.]entry'
    fence='membar[.]sys|fence[.]sc[.]sys'
    ;;
  --sass)
    text=$("$2" -sass "$3")
    header='Function :'
    fence='MEMBAR.*SYS'
    ;;
  *)
    echo "usage: $0 --ptx FILE | --sass CUOBJDUMP LIB" >&2
    exit 2
    ;;
esac
# Fences at system scope in the kernel whose mangled name has the template argument (Lb1E: true,
# Lb0E: false); a kernel runs from its header line to the next one.
count() {
  awk -v want="$1" -v header="$header" -v fence="$fence" '
    $0 ~ header { infn = (index($0, "mover_kernel") > 0 && index($0, want) > 0) }
    infn && $0 ~ fence { n++ }
    END { print n + 0 }' <<<"$text"
}
with=$(count "ILb1E")
without=$(count "ILb0E")
echo "system-scope fences ($1): mover_kernel<true> $with, mover_kernel<false> $without"
if [ "$with" -eq 0 ]; then
  echo "FAIL: the mover kernel has no system-scope fence (the completion fence is gone)"
  exit 1
fi
if [ "$without" -ge "$with" ]; then
  echo "FAIL: the no-fence variant has as many system-scope fences as the real one: the switch removes nothing"
  exit 1
fi
echo "PASS"
