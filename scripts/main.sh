#!/usr/bin/env bash
# The README's main command.
#   With GPUs (nvidia-smi lists >= 1 and python3 imports torch): the LL dispatch/combine benchmark
#   at the DeepEP test shape with an NCCL all_to_all baseline (bench/ll/bench_ll.py).
#   Without: the CPU proxy pipeline across local processes (`anyep bench proxy`, build/cli/anyep).
# Arguments are passed to whichever program runs. ANYEP_MAIN=cpu forces the CPU pipeline.
set -euo pipefail
cd "$(dirname "$0")/.."
bash scripts/install-deps.sh
BUILD_DIR=${BUILD_DIR:-build}
if [ -x /usr/local/cuda/bin/nvcc ] && ! command -v nvcc >/dev/null; then export PATH=/usr/local/cuda/bin:$PATH; fi
export FI_TCP_IFACE=lo NCCL_NVLS_ENABLE=0 NVSHMEM_DISABLE_NVLS=1
gpu=0
if [ "${ANYEP_MAIN:-auto}" != cpu ] && command -v nvidia-smi >/dev/null && nvidia-smi -L 2>/dev/null | grep -q '^GPU' \
   && python3 -c 'import torch' 2>/dev/null; then
  gpu=1
fi
mkdir -p "$BUILD_DIR"
cfg=(${ANYEP_CMAKE_ARGS:-})
[ "$gpu" = 1 ] && cfg+=(-DANYEP_PYTHON=ON -DPython3_EXECUTABLE="$(command -v python3)")
if ! cmake -S . -B "$BUILD_DIR" -G Ninja "${cfg[@]}" > "$BUILD_DIR/configure.log" 2>&1; then
  cat "$BUILD_DIR/configure.log"; exit 1
fi
grep -E "^-- anyep" "$BUILD_DIR/configure.log" || true
if [ "$gpu" = 1 ]; then
  cmake --build "$BUILD_DIR" -j "$(nproc)" --target anyep_python
  ANYEP_BUILD_DIR=$PWD/$BUILD_DIR exec python3 bench/ll/bench_ll.py "$@"
fi
cmake --build "$BUILD_DIR" -j "$(nproc)" --target anyep_cli
exec "$BUILD_DIR/cli/anyep" bench proxy "$@"
