#!/usr/bin/env bash
# The anyep CLI's command lines and its CPU commands (ctest cli_commands):
#   bash cli/test_cli.sh <anyep> <anyep_main>
# Every subcommand answers --help; bad command lines exit 2 naming the problem; `info` and
# `bench proxy|transport --json` work without a GPU and print valid JSON with the results;
# `bench ll` and `bench ht` without a GPU exit 77, as does `bench ll --ranks` beyond the GPUs; --plot
# needs matplotlib (a PNG where it exists).
set -u
ANYEP=$1
MAIN=$2
fails=0
tmp=$(mktemp -d)
trap 'rm -rf "$tmp"' EXIT
check() {  # check NAME WANT_RC WANT_TEXT cmd...   (WANT_TEXT in stdout+stderr)
  local name=$1 want=$2 text=$3
  shift 3
  "$@" > "$tmp/out" 2> "$tmp/err"
  local rc=$?
  if [ "$rc" != "$want" ] || ! grep -qF -- "$text" "$tmp/out" "$tmp/err"; then
    echo "FAIL: $name: exit $rc (want $want), '$text' $(grep -qF -- "$text" "$tmp/out" "$tmp/err" && echo found || echo missing)"
    sed 's/^/    out: /' "$tmp/out" | head -20
    sed 's/^/    err: /' "$tmp/err" | head -20
    fails=$((fails + 1))
  else
    echo "ok: $name (exit $rc)"
  fi
}
json_check() {  # json_check NAME PYTHON-EXPRESSION-ON-d   (on $tmp/out)
  if python3 -c "import json,sys; d=json.load(open('$tmp/out')); sys.exit(0 if ($2) else 1)"; then
    echo "ok: $1"
  else
    echo "FAIL: $1: $2 is false for:"; head -c 2000 "$tmp/out"; echo
    fails=$((fails + 1))
  fi
}

check "anyep --help" 0 "usage: anyep <command>" "$ANYEP" --help
check "anyep (no command)" 2 "usage: anyep <command>" "$ANYEP"
check "anyep version" 0 "anyep " "$ANYEP" version
check "unknown command" 2 "unknown command 'bogus'" "$ANYEP" bogus
check "anyep bench --help" 0 "usage: anyep bench ll|ht|proxy|transport" "$ANYEP" bench --help
check "unknown bench" 2 "unknown benchmark 'nope'" "$ANYEP" bench nope
for sub in "info" "bench proxy" "bench transport" "bench ll" "bench ht"; do
  # shellcheck disable=SC2086
  check "anyep $sub --help" 0 "usage: anyep $sub" "$ANYEP" $sub --help
done
check "anyep_main --help (alias)" 0 "usage: anyep_main" "$MAIN" --help
check "bad --ranks" 2 "--ranks='0' is out of range" "$ANYEP" bench proxy --ranks 0
check "missing value" 2 "--ranks needs a value" "$ANYEP" bench proxy --ranks
check "unknown option" 2 "unknown option --bogus" "$ANYEP" bench proxy --bogus 1
check "flag with a value" 2 "--json takes no value" "$ANYEP" bench proxy --json=1
check "option twice" 2 "--ranks is given twice" "$ANYEP" bench proxy --ranks 2 --ranks=3
check "alias refuses alike" 2 "--rounds='1e9'" "$MAIN" --rounds 1e9
check "transport provider" 2 "accepted: efa, cxi, verbs, tcp, shm, emunic, libfabric" "$ANYEP" bench transport --providers nosuch
check "transport sizes" 2 "--min=4096 is larger than --max=64" "$ANYEP" bench transport --min 4096 --max 64
check "info option" 2 "unknown option --bogus" "$ANYEP" info --bogus
check "info stray argument" 2 "unexpected argument 'x'" "$ANYEP" info x
check "bench ht bad sweep" 2 "--sweep" "$ANYEP" bench ht --sweep 8,x
check "bad environment variable" 2 "ANYEP_LL_PATH" env ANYEP_LL_PATH=sideways "$ANYEP" info

check "anyep info" 0 "transports anyep can open here" "$ANYEP" info
check "anyep info --json" 0 "\"transports\"" "$ANYEP" info --json
json_check "info JSON has the build, GPUs, transports and paths" \
  "d['build']['version'] and isinstance(d['gpus'], list) and any(t['name'] == 'shm' for t in d['transports']) and d['paths']['ll_buffer']"
gpus=$(python3 -c "import json; print(len(json.load(open('$tmp/out'))['gpus']))")
# loopback always has native adds and placed writes: the proxy's answer to ANYEP_PROXY_ATOMICS.
check "info, native atomics asked" 0 "signals go as the transport's remote atomic adds (ANYEP_PROXY_ATOMICS=native)" \
  env ANYEP_PROXY_ATOMICS=native "$ANYEP" info
check "info, native atomics not asked" 0 "signals are applied by the receiving proxy (ANYEP_PROXY_ATOMICS=emulated" \
  "$ANYEP" info
check "bad ANYEP_PROXY_ATOMICS" 2 "ANYEP_PROXY_ATOMICS" env ANYEP_PROXY_ATOMICS=sometimes "$ANYEP" info

# Under TSan (ANYEP_CLI_TEST_TSAN=1) the multi-process run is the alias's, whose endpoints TSan can follow.
if [ "${ANYEP_CLI_TEST_TSAN:-0}" = 1 ]; then proxy=("$MAIN"); else proxy=("$ANYEP" bench proxy); fi
check "bench proxy --json (shm)" 0 "\"bench\": \"proxy\"" "${proxy[@]}" --ranks 2 --rounds 50 --json
json_check "proxy JSON: ok, commands counted, a table" \
  "d['ok'] and d['results']['commands'] > 0 and d['table']['rows'] and d['config']['ranks'] == 2"
check "bench proxy table (loopback)" 0 "command rate" "$ANYEP" bench proxy --ranks 2 --rounds 50 --provider loopback
check "bench transport --json (shm)" 0 "\"bench\": \"transport\"" "$ANYEP" bench transport --providers shm \
  --min 64 --max 4096 --bytes-per-point 1048576 --pingpongs 50 --json
json_check "transport JSON: 4 sizes measured" \
  "len(d['results']['shm']) == 4 and all(p['GBps'] > 0 and p['latency_p50_us'] > 0 for p in d['results']['shm'])"

if [ "$gpus" -lt 1 ]; then
  check "bench ll without a GPU" 77 "needs 1 GPU, 0 visible" "$ANYEP" bench ll
else
  echo "skipped: bench ll's refusal without a GPU (this machine has $gpus GPUs; scripts/gpu/bench.sh ll runs the benchmark)"
fi
check "bench ll --ranks beyond the GPUs" 77 "needs 64 GPUs, $gpus visible" "$ANYEP" bench ll --ranks 64
check "bench ll --ranks 0" 2 "--ranks" "$ANYEP" bench ll --ranks 0
if [ "$gpus" -lt 1 ]; then
  check "bench ht without a GPU" 77 "needs 1 GPU, 0 visible" "$ANYEP" bench ht
else
  echo "skipped: bench ht's refusal (this machine has $gpus GPUs; scripts/gpu/bench.sh ht runs the benchmark)"
fi
if python3 -c "import matplotlib" 2>/dev/null; then
  check "--plot" 0 "plot: $tmp/t.png" "$ANYEP" bench transport --providers shm --min 64 --max 256 \
    --bytes-per-point 65536 --pingpongs 20 --plot "$tmp/t.png"
  if [ -s "$tmp/t.png" ]; then echo "ok: the PNG was written"; else echo "FAIL: no PNG"; fails=$((fails + 1)); fi
else
  check "--plot without matplotlib" 2 "--plot needs python3 with matplotlib" "$ANYEP" bench proxy --plot "$tmp/p.png"
fi

echo "cli checks: $fails failed"
[ "$fails" = 0 ]
