#!/usr/bin/env bash
# anyep's benchmarks on a GPU machine: one build, then each benchmark with the baseline it measures
# in the same run (NCCL, raw libfabric, raw CUDA copies, raw stores), printed as the programs print
# it, with the machine, the date and the command. Run scripts/gpu/bench.sh --help for the parts.
set -euo pipefail
# shellcheck source-path=SCRIPTDIR source=lib.sh
source "$(dirname "$0")/lib.sh"

usage() {
  cat << 'EOF'
usage: scripts/gpu/bench.sh [ll|ht|proxy|transport|channel|all]... [--build DIR] [--logs DIR]

Builds what the parts named need (default: all = ll ht proxy transport channel) in one build
folder, then runs, printing each program's output as it comes:
  ll         anyep bench ll (bench/ll/bench_ll.py): LL dispatch (FP8) and combine (BF16) kernel
             times at DeepEP's shape, a rank per visible GPU, against an NCCL all_to_all dispatcher;
             with 2 or more GPUs also through the CPU proxy (proxy-libfabric over shm, proxy-cuda-ipc)
  ht         anyep bench ht (bench/ht/bench_ht.py): HT dispatch/combine GB/s over an SM sweep, a
             rank per GPU (2 processes sharing one GPU on a one-GPU machine), NCCL baseline where
             every rank has its own GPU
  proxy      bench/proxy/proxy_bench: proxy threads 1, 2, 4, 8 over loopback and libfabric shm,
             with and without the ordering engine, the channel alone as baseline; then
             anyep bench proxy (the CPU pipeline across 4 processes) over shm and loopback (no GPU)
  transport  bench/transport/bench_transport: anyep's libfabric transport against raw libfabric on
             the same endpoint (tcp on lo, shm), and shm up to 64 KiB one post_write at a time;
             bench/cuda_ipc/bench_cuda_ipc: the cuda-ipc transport against raw cudaMemcpyAsync,
             copies batched per poll, then one copy call each (one GPU: both ranks on GPU 0)
  channel    bench/channel/anyep_channel_bench: GPU -> CPU command rings, commands/s and push-to-pop
             latency against offered load, baselines raw mapped stores and CPU producers

Options:
  --build DIR   build folder [build-gpu in the source tree, shared with scripts/gpu/test.sh]
  --logs DIR    log folder [/tmp/anyep-gpu-logs]: each benchmark's output, machine.txt, CSV/JSON
  -h, --help    this text

Environment:
  ANYEP_PREFIX, CMAKE_CUDA_ARCHITECTURES (90), CMAKE_BUILD_TYPE, ANYEP_CMAKE_ARGS, JOBS, PYTHON
                the build (scripts/gpu/lib.sh); the proxy, transport and channel figures in
                docs/bench/ come from Release builds: CMAKE_BUILD_TYPE=Release --build build-release
  LL_BENCH_ARGS, HT_BENCH_ARGS, PROXY_BENCH_ARGS, TRANSPORT_BENCH_ARGS, CUDA_IPC_BENCH_REPS (5),
  CHANNEL_BENCH_ARGS
                extra arguments for each benchmark (anyep bench ll --help, etc.), appended last
  LL_BENCH_PATHS  LL paths for anyep bench ll [auto; with 2+ GPUs auto,proxy-cuda-ipc,proxy-libfabric]

Exit status: 0 every benchmark ran; 1 a build or a benchmark failed or timed out (the table names
it); 2 bad command line, or the machine cannot run what was asked (no GPU, no torch).
EOF
}

PARTS=()
while [ $# -gt 0 ]; do
  case $1 in
    ll | ht | proxy | transport | channel) PARTS+=("$1") ;;
    all) PARTS+=(ll ht proxy transport channel) ;;
    --build) need_value "$@"; BUILD=$(realpath -m "$2"); shift ;;
    --logs) need_value "$@"; LOGS=$(realpath -m "$2"); shift ;;
    -h | --help) usage; exit 0 ;;
    *) die "unknown argument '$1' (--help)" ;;
  esac
  shift
done
[ ${#PARTS[@]} -gt 0 ] || PARTS=(ll ht proxy transport channel)
wants() { [[ " ${PARTS[*]} " == *" $1 "* ]]; }
NGPUS=$(gpu_count)
if wants ll || wants ht; then
  have_torch || die "ll and ht need ${PY:-python3} importing torch (set PYTHON to the python3 that can)"
fi
if wants ll || wants ht || wants transport || wants channel; then
  [ "${NGPUS:-0}" -ge 1 ] || die "no GPU visible: only the proxy part runs without one"
fi
# Split on purpose: each knob is a list of arguments.
read -r -a LL_ARGS <<< "${LL_BENCH_ARGS:-}"
read -r -a HT_ARGS <<< "${HT_BENCH_ARGS:-}"
read -r -a PROXY_ARGS <<< "${PROXY_BENCH_ARGS:-}"
read -r -a TRANSPORT_ARGS <<< "${TRANSPORT_BENCH_ARGS:-}"
read -r -a CHANNEL_ARGS <<< "${CHANNEL_BENCH_ARGS:-}"
mkdir -p "$LOGS"
machine_info
echo "parts: ${PARTS[*]}"

configure || { summary; exit 1; }
targets=(anyep_cli)
if wants ll || wants ht; then targets+=(anyep_python); fi
if wants proxy; then targets+=(proxy_bench); fi
if wants transport; then
  targets+=(bench_cuda_ipc)
  if libfabric_built; then targets+=(bench_transport); else
    fail bench_transport "CMake found no libfabric (install its dev package, or set ANYEP_PREFIX)"
  fi
fi
if wants channel; then targets+=(anyep_channel_bench); fi
build "${targets[@]}" || { summary; exit 1; }
export PYTHONPATH=$BUILD/python ANYEP_BUILD_DIR=$BUILD
ANYEP=$BUILD/cli/anyep
B=$BUILD/bench
SHOW_OUTPUT=1

part_ll() {
  local paths=auto
  if [ "$NGPUS" -ge 2 ]; then  # the proxy paths need a peer: one rank per GPU
    paths=auto,proxy-cuda-ipc
    if libfabric_built; then paths+=",proxy-libfabric"; fi
  fi
  step bench_ll 1800 "$ANYEP" bench ll --paths "${LL_BENCH_PATHS:-$paths}" --timeout-s 1700 "${LL_ARGS[@]}" || true
}

part_ht() {
  step bench_ht 1800 "$ANYEP" bench ht --sweep 8,16,24,32 --timeout-s 1700 "${HT_ARGS[@]}" || true
}

part_proxy() {
  step bench_proxy_loopback 900 "$B/proxy/proxy_bench" --threads 1,2,4,8 --backends loopback --commands 1000000 \
    --reps 3 "${PROXY_ARGS[@]}" || true
  if libfabric_built; then
    step bench_proxy_shm 900 "$B/proxy/proxy_bench" --threads 1,2,4,8 --backends shm --commands 200000 --reps 3 \
      "${PROXY_ARGS[@]}" || true
    step bench_pipeline_shm 600 "$ANYEP" bench proxy --ranks 4 --threads 4 --provider shm || true
  else
    fail bench_proxy_shm "CMake found no libfabric (install its dev package, or set ANYEP_PREFIX)"
  fi
  step bench_pipeline_loopback 600 "$ANYEP" bench proxy --ranks 4 --threads 4 --provider loopback || true
}

part_transport() {
  if libfabric_built; then
    step bench_transport 1200 "$B/transport/bench_transport" --reps 5 --bytes-per-point 64M "${TRANSPORT_ARGS[@]}" ||
      true
    # The same small shm writes posted one post_write at a time, beside the batched calls above.
    step bench_transport_single 600 "$B/transport/bench_transport" --providers shm --max 64K --reps 5 --api single \
      || true
  fi
  local reps=${CUDA_IPC_BENCH_REPS:-5}
  step bench_cuda_ipc_batch 900 "$B/cuda_ipc/bench_cuda_ipc" "$reps" batch || true
  step bench_cuda_ipc_loop 900 "$B/cuda_ipc/bench_cuda_ipc" "$reps" loop || true
}

part_channel() {
  step bench_channel 900 "$B/channel/anyep_channel_bench" --csv "$LOGS/channel_bench.csv" "${CHANNEL_ARGS[@]}" || true
}

DONE=" "
for part in "${PARTS[@]}"; do
  [[ $DONE == *" $part "* ]] && continue  # `all ll` runs ll once
  DONE+="$part "
  echo "== $part"
  "part_$part"
done
summary
