#!/usr/bin/env bash
# Nsight Compute profile of the four LL kernels (hook mode: dispatch send, dispatch receive, combine
# send, combine receive) at DeepEP's test shape on one rank (128 tokens, hidden 7168, top-8, 288
# experts, FP8 dispatch, BF16 combine): throughput, stall reasons, occupancy per kernel, to see
# where the time goes (docs/ll.md, "What each change gained"). One device call, carry [".deps"]:
#   bash scripts/device/ll_profile.sh           logs under $OUT (default /tmp/anyep-ll-profile)
#   LL_PROFILE_SECTIONS="SpeedOfLight ..."      ncu sections (default below)
# Builds the extension through scripts/device/deepep_tests.sh's build step (same build folder).
set -u
cd "$(dirname "$0")/../.."
ROOT=$PWD
OUT=${OUT:-/tmp/anyep-ll-profile}
mkdir -p "$OUT"
NCU=$(command -v ncu || ls /usr/local/cuda/bin/ncu /opt/nvidia/nsight-compute/*/ncu 2>/dev/null | head -1)
[ -n "$NCU" ] || { echo "ll_profile: no ncu (Nsight Compute) on this machine"; exit 2; }
WORK=$(mktemp -d)  # build logs and the driver stay out of $OUT
mkdir -p "$WORK/empty"
touch "$WORK/empty/test_low_latency.py" "$WORK/empty/utils.py"
# Build only (no DeepEP test run): the runs list names none.
OUT=$WORK/build DEEPEP_TESTS=$WORK/empty DEEPEP_RUNS=none bash scripts/device/deepep_tests.sh > "$OUT/build.txt" 2>&1 || {
  tail -20 "$OUT/build.txt"; echo "ll_profile: build FAILED"; exit 1; }
export PYTHONPATH=$ROOT/build-lldev/python MASTER_ADDR=127.0.0.1 MASTER_PORT=${MASTER_PORT:-29533}
cat > "$WORK/drive.py" <<'PY'
# 12 hook-mode round trips; ncu profiles the last two (8 launches after 40 skipped).
import torch, torch.distributed as dist
dist.init_process_group("gloo", rank=0, world_size=1)
import deep_ep
T, H, K, E = 128, 7168, 8, 288
buf = deep_ep.Buffer(dist.group.WORLD, 0, deep_ep.Buffer.get_low_latency_rdma_size_hint(T, H, 1, E),
                     low_latency_mode=True, num_qps_per_rank=E)
torch.manual_seed(0)
x = torch.randn(T, H, dtype=torch.bfloat16, device="cuda")
idx = (torch.randn(T, E, device="cuda").abs() + 1).topk(K, dim=-1).indices
w = torch.rand(T, K, device="cuda")
y = torch.randn(E, T, H, dtype=torch.bfloat16, device="cuda")
for _ in range(12):
    recv, cnt, handle, _, hook = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, return_recv_hook=True)
    hook()
    out, _, hook = buf.low_latency_combine(y, idx, w, handle, return_recv_hook=True)
    hook()
torch.cuda.synchronize()
print("drive: done")
PY
SECTIONS=${LL_PROFILE_SECTIONS:-"SpeedOfLight MemoryWorkloadAnalysis WarpStateStats SchedulerStats Occupancy LaunchStats"}
args=()
for s in $SECTIONS; do args+=(--section "$s"); done
timeout 300 "$NCU" -k regex:"dispatch_kernel|combine_kernel" --launch-skip 40 --launch-count 8 "${args[@]}" \
  python3 "$WORK/drive.py" > "$OUT/ncu.txt" 2>&1
rc=$?
# Per kernel: every stall reason (cycles per issued instruction). (Per-source-line stall samples
# need PC sampling, which the device machine's ncu did not provide on 2026-11-23.)
timeout 200 "$NCU" -k regex:"dispatch_kernel|combine_kernel" --launch-skip 40 --launch-count 4 \
  --metrics "regex:smsp__average_warps_issue_stalled_.*_per_issue_active\.ratio" \
  -f -o "$WORK/rep" python3 "$WORK/drive.py" > "$OUT/ncu_stalls.log" 2>&1
"$NCU" -i "$WORK/rep.ncu-rep" --page raw --csv > "$WORK/raw.csv" 2>/dev/null
python3 - "$WORK/raw.csv" > "$OUT/stalls.txt" <<'PY'
import csv, sys
rows = list(csv.reader(open(sys.argv[1])))
head = rows[0]
for r in rows[2:]:
    name = r[head.index("Kernel Name")] if "Kernel Name" in head else "?"
    st = sorted(((float(v.replace(",", "")), h) for h, v in zip(head, r)
                 if h.startswith("smsp__average_warps_issue_stalled_") and v.replace(",", "").replace(".", "").isdigit()),
                reverse=True)
    print(name[:60], " ".join(f"{h.split('stalled_')[1].split('_per')[0]}={v:.1f}" for v, h in st[:7]))
PY
cat "$OUT/stalls.txt"
grep -E "dispatch_kernel|combine_kernel|Duration|DRAM Throughput|Memory Throughput|Compute \(SM\)|Achieved Occupancy|Stall|Warp Cycles Per Issued|One or More Eligible|Registers Per|Block Limit|L2 Hit|L1/TEX Hit|stalled|Theoretical Occupancy" "$OUT/ncu.txt" | head -150
echo "ll_profile: ncu rc=$rc (full report: $OUT/ncu.txt)"
exit $rc
