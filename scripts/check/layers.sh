#!/usr/bin/env bash
# Includes in src/ follow the layer matrix (docs/architecture.md, "Layer matrix"): every quoted
# #include of a file in src/<layer>/ must match one of that layer's allowed patterns below.
# Inside kernels/ and runtime/ the two modes are separate rooms over a shared core: a file in
# <layer>/ll/ includes nothing of kernels/ht/ or runtime/ht/, and the other way round, and a file
# in <layer>/common/ includes neither mode (MODES below).
# Prints file:line, the include and the rule for each violation; exit 1 if any.
set -euo pipefail
cd "$(dirname "$0")/../.."

# layer      may include (quoted include paths, ERE, whole path must match)
MATRIX='
common       common/.*  anyep/.*
channel      common/.*  channel/.*  anyep/.*
transport    common/.*  transport/.*  anyep/.*
kernels      common/.*  channel/ring\.h  channel/transfer_cmd\.h  kernels/.*
proxy        common/.*  channel/.*  transport/transport\.h  transport/bootstrap/.*  proxy/.*  anyep/.*
runtime      common/.*  channel/.*  transport/transport\.h  transport/factory\.h  transport/bootstrap/.*  proxy/.*  kernels/.*  runtime/.*  anyep/.*
capi         common/.*  runtime/.*  transport/bootstrap/.*  capi/.*  anyep/.*
'
# Why a include is refused, by what it names (first match wins; the generic text otherwise).
why() {
  local layer=$1 inc=$2
  case "$inc" in
    tests/* | testkit/* | bench/* | ../*) echo "src/ never includes tests/, testkit/ or bench/ (test scaffolding stays out of the library)" ;;
    transport/*/*)
      case "$layer" in
        proxy) echo "proxy may not include a transport backend: only transport/transport.h and transport/bootstrap/" ;;
        runtime) echo "runtime reaches backends only through the factory: transport/factory.h, transport/transport.h, transport/bootstrap/" ;;
        *) echo "$layer may not include a transport backend" ;;
      esac ;;
    *) echo "$layer may include only: $(allowed "$layer" | tr '\n' ' ' | sed 's/\\//g; s/ $//')" ;;
  esac
}
allowed() { awk -v l="$1" '$1 == l { for (i = 2; i <= NF; ++i) print $i }' <<<"$MATRIX"; }

# The mode of a file under src/kernels or src/runtime: ll, ht, common, or "" (elsewhere, or the
# top of the folder: kernels/preload.cu loads both modes' kernels).
mode_of() { sed -nE 's#^src/(kernels|runtime)/(ll|ht|common)/.*#\2#p' <<<"$1"; }
mode_ok() {
  local from to
  from=$(mode_of "$1")
  to=$(mode_of "src/$2")
  case "$from:$to" in
    ll:ht | ht:ll | common:ll | common:ht) return 1 ;;
  esac
  return 0
}

fail=0
checked=0
while IFS= read -r f; do
  [ -f "$f" ] || continue
  layer=$(cut -d/ -f2 <<<"$f")
  mapfile -t pats < <(allowed "$layer")
  if [ ${#pats[@]} -eq 0 ]; then
    echo "$f: [layer '$layer' is not in the matrix of scripts/check/layers.sh and docs/architecture.md]"
    fail=1
    continue
  fi
  while IFS=: read -r line inc; do
    [ -z "$line" ] && continue
    checked=$((checked + 1))
    # A path without a folder is relative to the including file's own folder.
    if [[ "$inc" != */* ]]; then
      if [ ! -f "$(dirname "$f")/$inc" ]; then
        echo "$f:$line: #include \"$inc\": not in its own folder; name its layer folder (e.g. \"common/env.h\")"
        fail=1
        continue
      fi
      inc="$(cut -d/ -f2- <<<"$(dirname "$f")")/$inc"
    fi
    if ! mode_ok "$f" "$inc"; then
      echo "$f:$line: #include \"$inc\": $(mode_of "$f") code may not include $(mode_of "src/$inc") code (the modes meet only in common/)"
      fail=1
      continue
    fi
    ok=0
    for p in "${pats[@]}"; do
      if [[ "$inc" =~ ^${p}$ ]]; then ok=1; break; fi
    done
    if [ "$ok" = 0 ]; then
      echo "$f:$line: #include \"$inc\": $(why "$layer" "$inc")"
      fail=1
    fi
  done < <(awk 'match($0, /^[ \t]*#[ \t]*include[ \t]*"[^"]+"/) {
                  s = substr($0, RSTART, RLENGTH); sub(/^[^"]*"/, "", s); sub(/"$/, "", s); print FNR ":" s }' "$f")
done < <(git ls-files 'src/*' | grep -E '\.(h|hpp|cuh|c|cc|cpp|cu)$')

if [ "$fail" != 0 ]; then
  echo "layer check: FAILED (matrix: docs/architecture.md, 'Layer matrix')"
  exit 1
fi
echo "layer check: OK ($checked includes)"
