#!/usr/bin/env bash
# Every tracked C++/CUDA file is formatted as .clang-format says (clang-format --dry-run --Werror).
# Lists the files that differ; exit 1 if any. To fix: clang-format -i <file>...
set -euo pipefail
cd "$(dirname "$0")/../.."
CLANG_FORMAT=${CLANG_FORMAT:-clang-format}
command -v "$CLANG_FORMAT" >/dev/null || { echo "format check: $CLANG_FORMAT not found (apt-get install clang-format)"; exit 1; }
mapfile -t files < <(git ls-files '*.h' '*.hpp' '*.c' '*.cc' '*.cpp' '*.cu' '*.cuh')
bad=()
for f in "${files[@]}"; do
  "$CLANG_FORMAT" --dry-run --Werror "$f" >/dev/null 2>&1 || bad+=("$f")
done
if [ ${#bad[@]} -ne 0 ]; then
  printf '  %s\n' "${bad[@]}"
  echo "format check: FAILED (${#bad[@]} of ${#files[@]} files differ from .clang-format; $("$CLANG_FORMAT" --version))"
  exit 1
fi
echo "format check: OK (${#files[@]} files)"
