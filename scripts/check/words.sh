#!/usr/bin/env bash
# The tree speaks of the project, not of how it was developed: no text file refers to leases or
# sessions of the machines it was built on, to numbered issues, to a DESIGN.md (the design document
# is docs/architecture.md) or to folders that travelled with a tool (.carry/, "carry `.deps`").
# A figure says what ran back to back on which machine; a target says what it is; a command names
# the script a reader runs (scripts/gpu/...) or the one that ran, at its commit.
# Prints file:line, the rule, the hit and the line for each occurrence; exit 1 if any.
#
# Files: every git-tracked text file (binary files are skipped) except this script. Matching is
# case-insensitive and on whole words: "release", "please", "increase" or "leaseholder" never match.
# "issue" followed by a number always reads as an issue number, so a count after the verb is
# written another way ("issues all 32 copies", "issues the 32 copies").
#
# Before scanning the tree the script checks itself: every rule must fire on a sample line that
# breaks it and stay quiet on a sample of lines that do not (an edited pattern that stops matching
# fails here instead of passing everything).
set -euo pipefail
cd "$(dirname "$0")/../.."
self=scripts/check/words.sh

# Word boundaries spelled out (POSIX ERE has no \b): not a letter, digit or underscore, or the edge.
L='(^|[^[:alnum:]_])'
R='([^[:alnum:]_]|$)'

# The rules: name, pattern (ERE, matched case-insensitively).
names=() patterns=()
rule() { names+=("$1"); patterns+=("$2"); }
rule "lease: say what ran back to back on which machine" "${L}leas(e|es|ed)${R}"
rule "session: say when (the date) or which commit" "${L}sessions?${R}"
rule "issue number: say what the target or change is" "${L}issues?([[:space:]]*#|[[:space:]]+)[0-9]+"
rule "DESIGN.md: the design document is docs/architecture.md" "${L}design\\.md${R}"
rule ".carry folder: name what the reader installs or checks out" \
  "(^|[^[:alnum:]_.])\\.carry([^[:alnum:]_-][^][:space:]\"'\`{}()]*|$)"
rule "carry naming a folder: say what must be installed (scripts/install-deps.sh)" \
  "${L}carry[[:space:]]*[:=]?[[:space:]]*(\\[[^]]*]?|[\"'\`]?\\.[[:alnum:]_][^][:space:]\"'\`{}()]*[\"'\`]?)"
rule "a ticket as the reason: say which case the code or test covers" \
  "${L}(the|this|that)[[:space:]]+issue('s)?[[:space:]]+(reproductions?|asks|wants|says)${R}"

fail=0
hits=0
hit_files=()
files=()
# One rule over every file: file:line: [rule] "hit": the line (trimmed).
scan() {
  local name=$1 pattern=$2 out rc=0 full f rest line text hit
  [ ${#files[@]} -eq 0 ] && return 0
  # grep: 0 found, 1 none, 2 a file could not be read (that must not pass quietly)
  out=$(grep -IHniE -- "$pattern" "${files[@]}") || rc=$?
  if [ "$rc" -gt 1 ]; then
    echo "word check: FAILED (grep could not read the files; see above)"
    exit 1
  fi
  [ -z "$out" ] && return 0
  shopt -s nocasematch
  while IFS= read -r full; do
    f=${full%%:*} # tracked paths hold no ':'
    rest=${full#*:}
    line=${rest%%:*}
    text=${rest#*:}
    hit=$text
    if [[ "$text" =~ $pattern ]]; then hit=${BASH_REMATCH[0]}; fi
    # the match without the boundary characters around it, the line without its indentation
    while [[ "$hit" =~ ^[^[:alnum:]_.#] ]]; do hit=${hit:1}; done
    while [[ "$hit" =~ [[:space:]:\;,.()]$ ]]; do hit=${hit%?}; done
    text=${text#"${text%%[![:space:]]*}"}
    [ ${#text} -gt 140 ] && text="${text:0:137}..."
    echo "$f:$line: [$name] \"$hit\": $text"
    fail=1
    hits=$((hits + 1))
    hit_files+=("$f")
  done <<<"$out"
  shopt -u nocasematch
}

scan_rules() {
  local i
  for i in "${!names[@]}"; do scan "${names[$i]}" "${patterns[$i]}"; done
}

self_test() {
  local dir bad good out broken=0 i
  dir=$(mktemp -d)
  bad="$dir/bad.md"
  good="$dir/good.md"
  # Line i breaks rule i (in the order above).
  cat >"$bad" <<'EOF'
DeepEP built and run in the same Lease: dispatch 19.0 us.
Measured in session 16 on one H200.
Against the target (issue #13: small writes at >= 0.9x raw).
Targets set in DESIGN.md section 5.
DeepEP's tests from the git-ignored .carry/deepep folder.
Command (repository root, carry `.deps`): bash scripts/gpu/bench.sh ll
// The issue's reproduction: an unknown provider was ignored.
EOF
  # Lines close to a rule that are fine.
  cat >"$good" <<'EOF'
The release store publishes the slot; please increase the ring, a release-acquire pair.
Both ran back to back on the same machine (2 x H200), a leaseholder's word aside, in possession of
the lock; the proxy may reissue 3 writes; obsessions.
poll() issues everything queued since the last poll; the issue's event fires after them.
Writes carry no immediate; descriptors carry one key per NIC and carrying `seq` is fine.
The design document is docs/architecture.md; a struct's sum.carry bit; carry-over of 1.
EOF
  files=("$bad")
  out=$(scan_rules)
  for i in "${!names[@]}"; do
    if ! grep -qF -- "$bad:$((i + 1)): [${names[$i]}]" <<<"$out"; then
      echo "word self-test: rule '${names[$i]}' did not fire on: $(sed -n "$((i + 1))p" "$bad")"
      broken=1
    fi
  done
  # The second "issue" form (a number without #) and the tool's list form of carry.
  printf '%s\n' 'the bar of issue 11 is met' 'carry [".deps", "build-x"]' >"$bad"
  out=$(scan_rules)
  if ! grep -qF -- "$bad:1: [${names[2]}]" <<<"$out" || ! grep -qF -- "$bad:2: [${names[5]}]" <<<"$out"; then
    echo "word self-test: 'issue 11' or 'carry [\".deps\"]' did not fire:"
    echo "$out"
    broken=1
  fi
  files=("$good")
  out=$(scan_rules)
  if [ -n "$out" ]; then
    echo "word self-test: a rule fired on a line that is fine:"
    echo "$out"
    broken=1
  fi
  rm -rf "$dir"
  if [ "$broken" != 0 ]; then
    echo "word check: FAILED (its own self-test; see above)"
    exit 1
  fi
}

self_test

files=()
while IFS= read -r -d '' f; do
  [ "$f" = "$self" ] && continue
  [ -f "$f" ] || continue # tracked but deleted in the working tree
  files+=("$f")
done < <(git ls-files -z | sort -zu) # one entry per path, also while a merge is unresolved
fail=0
hits=0
hit_files=()
scan_rules

if [ "$fail" != 0 ]; then
  n=$(printf '%s\n' "${hit_files[@]}" | sort -u | wc -l)
  echo "word check: FAILED ($hits hits in $n of ${#files[@]} files; say what the project does, not how it is made)"
  exit 1
fi
echo "word check: OK (${#files[@]} files)"
