#!/usr/bin/env bash
# Compares the GPU machine code of CUDA objects built from two trees (a refactor that must not
# change what runs: the same flags on both sides, only the sources differ).
#
#   sass_diff.sh [--mode sass|bytes] BASE NEW [OBJECT...]
#
# BASE and NEW are build folders or folders of objects. Each OBJECT is a path relative to BASE;
# NEW holds it at the same relative path or, failing that, at exactly one path ending in it (so a
# folder of copied objects, e.g. ll/dispatch.cu.o, pairs with a build folder). Without OBJECTs:
# every *.cu.o under BASE.
#
# --mode sass (the default where cuobjdump is found: $CUOBJDUMP, PATH, $CUDA_HOME/bin,
#   /usr/local/cuda/bin): `cuobjdump -sass` of both sides, each mangled name (_Z...) replaced by
#   SYM<n> in order of first appearance and the folder part of `identifier =` lines dropped, then
#   compared line by line. Nothing else is normalised. Each line says how many instructions it
#   compared; a run that compared none fails.
# --mode bytes (the default without cuobjdump): the cubins embedded in each object (.nv_fatbin),
#   compared section by section: machine code (.text.*), its relocations, kernel attributes and
#   constant banks, byte for byte. In section names an anonymous namespace (_GLOBAL__N_..., named
#   after the source file) counts as one token; string and symbol tables and debug and line
#   sections (paths, line numbers) are not compared.
#
# Prints one line per object (lines or bytes compared, identical or not; a diff for those that
# differ). Exit 0: all identical; 1: a difference; 2: bad usage or a missing tool/object.
set -euo pipefail

usage() { sed -n '2,24p' "$0" | sed 's/^# \{0,1\}//'; }

mode=
while [ $# -gt 0 ]; do
  case "$1" in
    -h | --help) usage; exit 0 ;;
    --mode) mode=${2:-}; shift 2 ;;
    --mode=*) mode=${1#--mode=}; shift ;;
    --) shift; break ;;
    -*) echo "sass_diff: unknown option '$1' (see --help)" >&2; exit 2 ;;
    *) break ;;
  esac
done
if [ $# -lt 2 ]; then
  echo "sass_diff: need BASE and NEW (see --help)" >&2
  exit 2
fi
base=$1 new=$2
shift 2
for d in "$base" "$new"; do
  [ -d "$d" ] || { echo "sass_diff: '$d' is not a folder" >&2; exit 2; }
done

cuobjdump=${CUOBJDUMP:-}
if [ -z "$cuobjdump" ]; then
  for c in "$(command -v cuobjdump || true)" "${CUDA_HOME:+$CUDA_HOME/bin/cuobjdump}" /usr/local/cuda/bin/cuobjdump; do
    if [ -n "$c" ] && [ -x "$c" ]; then cuobjdump=$c; break; fi
  done
fi
case "$mode" in
  "") if [ -n "$cuobjdump" ]; then mode=sass; else mode=bytes; fi ;;
  sass) [ -n "$cuobjdump" ] || { echo "sass_diff: --mode sass needs cuobjdump (set CUOBJDUMP)" >&2; exit 2; } ;;
  bytes) ;;
  *) echo "sass_diff: --mode is sass or bytes, not '$mode'" >&2; exit 2 ;;
esac
if [ "$mode" = bytes ]; then
  command -v python3 >/dev/null || { echo "sass_diff: --mode bytes needs python3" >&2; exit 2; }
  [ -z "$cuobjdump" ] && echo "sass_diff: no cuobjdump found; comparing the cubins' bytes (--mode bytes)"
fi

objects=("$@")
if [ ${#objects[@]} -eq 0 ]; then
  mapfile -t objects < <(cd "$base" && find . -name '*.cu.o' | sed 's|^\./||' | sort)
  [ ${#objects[@]} -gt 0 ] || { echo "sass_diff: no *.cu.o under '$base'" >&2; exit 2; }
fi

# The NEW-side path of OBJECT (see the header).
pair() {
  local rel=$1 hits
  if [ -f "$new/$rel" ]; then echo "$new/$rel"; return; fi
  mapfile -t hits < <(find "$new" -path "*/$rel" -type f)
  if [ ${#hits[@]} -eq 1 ]; then echo "${hits[0]}"; return; fi
  echo "sass_diff: '$rel': ${#hits[@]} matches under '$new' (want one; give the path relative to both)" >&2
  return 1
}

# cuobjdump -sass with mangled names numbered in order of first appearance.
sass_of() {
  "$cuobjdump" -sass "$1" | awk '
    /^[ \t]*identifier *= */ { sub(/= .*\//, "= ") }
    {
      line = $0; out = ""
      while (match(line, /_Z[A-Za-z0-9_]+/)) {
        s = substr(line, RSTART, RLENGTH)
        if (!(s in id)) id[s] = "SYM" (++n)
        out = out substr(line, 1, RSTART - 1) id[s]
        line = substr(line, RSTART + RLENGTH)
      }
      print out line
    }'
}

# Section-by-section comparison of the cubins inside two host objects (--mode bytes).
bytes_cmp() {
  python3 - "$1" "$2" <<'EOF'
import re, struct, sys

def elf_sections(b):
    if b[:4] != b"\x7fELF" or b[4] != 2:
        raise SystemExit("not a 64-bit ELF file")
    shoff = struct.unpack_from("<Q", b, 0x28)[0]
    shentsize, shnum, shstrndx = struct.unpack_from("<HHH", b, 0x3A)
    hdrs = [struct.unpack_from("<IIQQQQIIQQ", b, shoff + i * shentsize) for i in range(shnum)]
    names = hdrs[shstrndx]
    strtab = b[names[4] : names[4] + names[5]]
    out = {}
    for h in hdrs:
        name = strtab[h[0] : strtab.index(b"\0", h[0])].decode()
        out[name] = b[h[4] : h[4] + h[5]] if h[1] != 8 else b""  # 8: NOBITS
    return out

def cubins(path):
    fat = elf_sections(open(path, "rb").read()).get(".nv_fatbin", b"")
    found, off = [], 0
    while off + 16 <= len(fat):
        magic, _, hsize, size = struct.unpack_from("<IHHQ", fat, off)
        if magic != 0xBA55ED50:
            break
        e, end = off + hsize, off + hsize + size
        while e < end:
            kind, _, ehsize, psize = struct.unpack_from("<HHIQ", fat, e)
            payload = fat[e + ehsize : e + ehsize + psize]
            if kind == 2:  # an ELF (cubin) entry
                if payload[:4] != b"\x7fELF":
                    raise SystemExit("a compressed cubin: rebuild without fatbin compression or use --mode sass")
                found.append(payload)
            e += ehsize + psize
        off = end
    return found

SKIP = re.compile(r"^(|\.shstrtab|\.strtab|\.symtab|\.debug_.*|\.rela\.debug_.*|\.nv_debug.*|\.rela\.nv_debug.*)$")
ANON = re.compile(r"(\d+)(_GLOBAL__N_)")
def unnamed(name):
    """An anonymous namespace's mangled name (<length>_GLOBAL__N_<file's name and hash>) made one
    token: it carries the source file's name, which a move or rename changes."""
    out, pos = [], 0
    for m in ANON.finditer(name):
        if m.start() < pos:
            continue
        out.append(name[pos : m.start()] + "ANON")
        pos = m.start(2) + int(m.group(1))
    return "".join(out) + name[pos:]

def code(cubin):
    return {unnamed(k): v for k, v in elf_sections(cubin).items() if not SKIP.match(k)}

a, b = cubins(sys.argv[1]), cubins(sys.argv[2])
if not a:
    print("no cubin in the base object")
    sys.exit(2)
if len(a) != len(b):
    print(f"{len(a)} cubin(s) in the base object, {len(b)} in the new one")
    sys.exit(1)
text = 0
diffs = []
for i, (ca, cb) in enumerate(zip(a, b)):
    sa, sb = code(ca), code(cb)
    for k in sorted(set(sa) | set(sb)):
        if sa.get(k) != sb.get(k):
            la = None if k not in sa else len(sa[k])
            lb = None if k not in sb else len(sb[k])
            diffs.append(f"    cubin {i} section {k}: base {la} bytes, new {lb} bytes")
    text += sum(len(v) for k, v in sa.items() if k.startswith(".text."))
print(f"{text} bytes of machine code", "identical" if not diffs else "DIFFER")
for d in diffs:
    print(d)
sys.exit(1 if diffs else 0)
EOF
}

tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
status=0
compared=0
for rel in "${objects[@]}"; do
  a="$base/$rel"
  [ -f "$a" ] || { echo "$rel: MISSING in '$base'"; status=2; continue; }
  b=$(pair "$rel") || { status=2; continue; }
  if [ "$mode" = sass ]; then
    sass_of "$a" >"$tmp/a" || { echo "$rel: cuobjdump failed on '$a'"; status=2; continue; }
    sass_of "$b" >"$tmp/b" || { echo "$rel: cuobjdump failed on '$b'"; status=2; continue; }
    na=$(wc -l <"$tmp/a") nb=$(wc -l <"$tmp/b")
    ia=$(grep -c '/\*[0-9a-f]\{4,\}\*/' "$tmp/a" || true)
    ib=$(grep -c '/\*[0-9a-f]\{4,\}\*/' "$tmp/b" || true)
    if [ "$na" -eq 0 ]; then
      echo "$rel: cuobjdump printed nothing for '$a'"
      status=2
      continue
    fi
    compared=$((compared + ia))
    what="$ia instructions"
    [ "$ia" -gt 0 ] || what="no device code: no instructions on this side"
    if cmp -s "$tmp/a" "$tmp/b"; then
      echo "$rel: identical ($na lines, $what)"
    else
      echo "$rel: DIFFER (base $na lines, $ia instructions; new $nb lines, $ib instructions)"
      diff "$tmp/a" "$tmp/b" >"$tmp/d" || true
      head -n 200 "$tmp/d" | sed 's/^/    /'
      [ "$(wc -l <"$tmp/d")" -le 200 ] || echo "    ... ($(wc -l <"$tmp/d") diff lines in all)"
      [ "$status" = 2 ] || status=1
    fi
  else
    if out=$(bytes_cmp "$a" "$b"); then
      echo "$rel: $out"
      compared=$((compared + ${out%% *}))
    else
      rc=$?
      echo "$rel: $out"
      if [ "$rc" = 1 ]; then [ "$status" = 2 ] || status=1; else status=2; fi
    fi
  fi
done
if [ "$status" = 0 ] && [ "$compared" -eq 0 ]; then
  echo "sass_diff: nothing was compared (no object holds device code)"
  exit 2
fi
exit "$status"
