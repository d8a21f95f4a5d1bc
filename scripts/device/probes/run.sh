#!/usr/bin/env bash
# The two probes behind docs/transport.md, "CUDA calls in the proxy" (one GPU, nvcc on PATH):
#   sync_stall: does a thread blocked in a synchronous CUDA call hold another thread's copy?
#               (argument 1: a second process spins a kernel meanwhile)
#   ipc_stall:  does a copy into another process's CUDA IPC mapping block while a kernel spins?
# Each prints, per case, how long the copy call and its event took.
set -euo pipefail
cd "$(dirname "$0")"
OUTDIR=${OUT:-/tmp}
for p in sync_stall ipc_stall; do nvcc -O2 -std=c++17 -I../../../src -o "$OUTDIR/$p" "$p.cu"; done
timeout 120 "$OUTDIR/sync_stall" 0
timeout 120 "$OUTDIR/sync_stall" 1
timeout 120 "$OUTDIR/ipc_stall"
