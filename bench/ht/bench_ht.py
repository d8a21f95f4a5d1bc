"""HT (high-throughput) dispatch/combine benchmark at DeepEP's test shape, with an NCCL all_to_all
dispatcher measured in the same run when every rank has a GPU of its own.

  python bench/ht/bench_ht.py [--processes N] [--tokens 4096 --hidden 7168 --topk 8 --experts 256]
                              [--sms 24] [--sweep 4,8,...,64] [--json out.json] [--rdma-bytes B]

With ANYEP_HT_RANKS_PER_NODE=1 (and --rdma-bytes) the same run times the internode path
(docs/ht.md, "Internode") with each process as its own node.

Shape and counting follow DeepEP's tests/test_intranode.py (commit 567632d): routing from
`topk(|randn| + 1)`; the timed calls are cached dispatches (the handle of a first dispatch) of BF16
and of FP8 tokens (per-128 scales, column-major), and BF16 combines of the received tokens;
GB/s = this rank's received BF16 bytes (recv_x.numel() * 2; FP8: times (1 + 4/128) / 2; combine:
the same bytes as BF16 dispatch) / the mean time of one call (CUDA events around each call, the
first dropped, after warm-up and an L2 flush), as DeepEP prints it for rank 0. Here rank 0's figure
is printed with the mean over ranks beside it.

Runs at `--sms` (24, DeepEP's) and over `--sweep`, and reports the fewest SMs that keep 90% of the
peak over the sweep. Chunk sizes: DeepEP's tables for the rank count (`get_dispatch_config`,
`get_combine_config`), receive rings of 256 tokens (DeepEP's test). With one process per GPU the
group is NCCL and the baseline runs: the same tokens (one copy per destination rank) gathered by
destination and exchanged with all_to_all_single, combine the reverse plus an index_add, timed and
counted the same way. Processes sharing a GPU (the default on one GPU) are time-sliced: their
figures are not a bandwidth claim, and the printout says so.
"""
import argparse
import datetime
import json
import os
import platform
import queue as queue_mod
import socket
import sys
import time
import traceback

try:  # --help needs no torch; a run without it exits 77 saying so (main)
    import torch
    import torch.distributed as dist
    import torch.multiprocessing as mp
except ImportError as _e:
    torch = dist = mp = None
    TORCH_MISSING = f"{sys.executable} cannot import torch ({_e})"

HERE = os.path.dirname(os.path.abspath(__file__))
# anyep comes from a build's python/ folder (anyep._C and the packages) when ANYEP_BUILD_DIR names
# the build, or when this script sits in a source checkout whose build/ holds one; otherwise from
# the installed package (pip install ./python ships this script as anyep/bench/bench_ht.py, and
# cmake --install under share/anyep/bench/).
_BUILD = os.environ.get("ANYEP_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
if "ANYEP_BUILD_DIR" in os.environ or os.path.isdir(os.path.join(_BUILD, "python", "anyep")):
    sys.path.insert(0, os.path.join(os.path.abspath(_BUILD), "python"))

FP8_FACTOR = (1 + 4 / 128) / 2  # DeepEP's: FP8 bytes per BF16 byte, scales included


def wait_stream():
    """Wait for the current stream by polling an event: a blocking CUDA call would stall the
    cuda-ipc transport's copies, which the proxy threads submit through the CUDA runtime (docs/ll.md)."""
    ev = torch.cuda.Event()
    ev.record()
    while not ev.query():
        time.sleep(0)


def time_calls(fn, warmup, iters):
    """DeepEP's tests' bench(): warm-up, L2 flush, per-call CUDA events; mean without the first."""
    wait_stream()
    cache = torch.empty(int(256e6 // 4), dtype=torch.int, device="cuda")
    for _ in range(warmup):
        fn()
    cache.zero_()
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(iters)]
    for s, e in zip(starts, ends):
        s.record()
        fn()
        e.record()
    wait_stream()
    times = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)][1:]
    return sum(times) / len(times)


def cast_to_fp8(x):
    n, H = x.shape
    g = x.float().view(n, H // 128, 128)
    amax = g.abs().amax(dim=2).clamp(min=1e-4)
    return (g * (448.0 / amax[:, :, None])).to(torch.float8_e4m3fn).view(n, H), amax / 448.0


def reduce_times(t):
    """Every rank's results, gathered (all_gather_object through the group)."""
    out = [None] * dist.get_world_size()
    dist.all_gather_object(out, t)
    return out


def nccl_baseline(x, q_bytes, in_rank, world, warmup, iters):
    """Dispatch = gather rows by destination + all_to_all_single; combine = all_to_all back +
    index_add. Returns (bf16 dispatch s, fp8 dispatch s, combine s, received rows)."""
    rows = [in_rank[:, r].nonzero().flatten() for r in range(world)]
    order = torch.cat(rows)
    send_counts = [int(r.numel()) for r in rows]
    counts = torch.tensor(send_counts, dtype=torch.int64, device="cuda")
    recv_counts_t = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts_t, counts)
    recv_counts = recv_counts_t.tolist()
    M = sum(recv_counts)
    recv = torch.empty(M, x.size(1), dtype=x.dtype, device="cuda")
    recv_q = torch.empty(M, q_bytes.size(1), dtype=torch.uint8, device="cuda")
    back = torch.empty(order.numel(), x.size(1), dtype=x.dtype, device="cuda")

    def disp_bf16():
        dist.all_to_all_single(recv, x[order], recv_counts, send_counts)

    def disp_fp8():
        dist.all_to_all_single(recv_q, q_bytes[order], recv_counts, send_counts)

    def comb():
        dist.all_to_all_single(back, recv, send_counts, recv_counts)
        out = torch.zeros(x.shape, dtype=torch.float32, device="cuda")
        out.index_add_(0, order, back.float())
        return out.to(torch.bfloat16)

    return (time_calls(disp_bf16, warmup, iters), time_calls(disp_fp8, warmup, iters),
            time_calls(comb, warmup, iters), M)


def fewest_for(points, frac=0.9):
    """The fewest SMs whose GB/s is >= frac of the peak over `points` ({sms: GB/s})."""
    peak = max(points.values())
    return min(s for s, v in points.items() if v >= frac * peak), peak


def run(rank, world, ngpus, port, args):
    torch.cuda.set_device(rank % ngpus)
    own_gpu = ngpus == world and world >= 2
    backend = "nccl" if own_gpu else "gloo"
    dist.init_process_group(backend, init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=300))
    import anyep
    B, Config = anyep.Buffer, anyep.Config
    T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
    dchunk = B.get_dispatch_config(world).num_max_nvl_chunked_send_tokens
    cchunk = B.get_combine_config(world).num_max_nvl_chunked_send_tokens
    sms_list = sorted(set([args.sms] + args.sweep))
    hint = max(Config(s, c, args.ring).get_nvl_buffer_size_hint(H * 2, world)
               for s in sms_list for c in (dchunk, cchunk))
    # num_rdma_bytes: the internode path's exchange region (ranks on several nodes, or
    # ANYEP_HT_RANKS_PER_NODE emulating them); unused on one node.
    buf = B(dist.group.WORLD, hint, args.rdma_bytes, explicitly_destroy=True)
    if rank == 0:
        print(f"paths: {buf.describe_paths()}", flush=True)
    try:
        torch.manual_seed(rank)
        x = torch.randn(T, H, dtype=torch.bfloat16, device="cuda")
        q, s = cast_to_fp8(x)
        x_fp8 = (q, s.T.contiguous().T)  # column-major scales, as DeepEP's test
        scores = torch.randn(T, E, dtype=torch.float32, device="cuda").abs() + 1
        topk_idx = torch.topk(scores, K, dim=-1, largest=True, sorted=False)[1].to(torch.int64)
        topk_w = torch.ones(T, K, dtype=torch.float32, device="cuda")
        per_rank, _, per_expert, in_rank, _ = buf.get_dispatch_layout(topk_idx, E)
        t_layout = time_calls(lambda: buf.get_dispatch_layout(topk_idx, E), args.warmup, args.iters)
        rows = {}
        for sms in sms_list:
            cfg_d, cfg_c = Config(sms, dchunk, args.ring), Config(sms, cchunk, args.ring)
            # A handle per SM count: its channel tables are [R, channels of num_sms].
            recv_x, _, _, _, handle, _ = buf.dispatch(x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank,
                                                      num_tokens_per_expert=per_expert, topk_idx=topk_idx,
                                                      topk_weights=topk_w, config=cfg_d)
            bf16_bytes = recv_x.numel() * 2
            dist.barrier()
            t_bf16 = time_calls(lambda: buf.dispatch(x, handle=handle, config=cfg_d), args.warmup, args.iters)
            t_fp8 = time_calls(lambda: buf.dispatch(x_fp8, handle=handle, config=cfg_d), args.warmup, args.iters)
            t_comb = time_calls(lambda: buf.combine(recv_x, handle, config=cfg_c), args.warmup, args.iters)
            rows[sms] = {"dispatch_bf16": (t_bf16, bf16_bytes), "dispatch_fp8": (t_fp8, bf16_bytes * FP8_FACTOR),
                         "combine_bf16": (t_comb, bf16_bytes)}
        nccl = None
        if own_gpu and not args.no_nccl:
            dist.barrier()
            qb = torch.cat([q.view(torch.uint8), s.contiguous().view(torch.uint8)], dim=1)
            tb, tf, tc, M = nccl_baseline(x, qb, in_rank, world, args.warmup, args.iters)
            nb = M * H * 2
            nccl = {"dispatch_bf16": (tb, nb), "dispatch_fp8": (tf, nb * FP8_FACTOR), "combine_bf16": (tc, nb)}
        mine = {"rows": rows, "nccl": nccl, "layout_s": t_layout, "recv_tokens": recv_x.size(0),
                "gpu": torch.cuda.get_device_name(), "sm_count": torch.cuda.get_device_properties(0).multi_processor_count}
        everyone = reduce_times(mine)
        dist.barrier()
        return everyone if rank == 0 else None
    finally:
        buf.destroy()
        dist.destroy_process_group()


def gbps(entry):
    t, nbytes = entry
    return nbytes / 1e9 / t


def report(everyone, args, world, ngpus, wall):
    r0 = everyone[0]
    shared = ngpus < world
    now = datetime.datetime.now(datetime.timezone.utc).strftime("%Y-%m-%d %H:%M UTC")
    gpus = sorted(set(e["gpu"] for e in everyone))
    print(f"== anyep HT benchmark, {now}")
    print(f"machine: {platform.node()}, {ngpus} x {', '.join(gpus)} ({r0['sm_count']} SMs), torch {torch.__version__}")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"shape: {args.tokens} tokens/rank, hidden {args.hidden}, top-{args.topk}, {args.experts} experts, "
          f"{world} ranks on {ngpus} GPU(s); rank 0 receives {r0['recv_tokens']} tokens; "
          f"layout {r0['layout_s'] * 1e6:.1f} us")
    if shared:
        print(f"NOTE: {world} processes share {ngpus} GPU(s) and are time-sliced: these figures measure the code "
              "path, NOT a bandwidth claim (no NVLink is crossed; the GPU runs one process at a time).")
    names = ("dispatch_bf16", "dispatch_fp8", "combine_bf16")
    print(f"{'SMs':>4} " + " ".join(f"{n + ' GB/s (r0 / mean)':>34}" for n in names))
    table = {}
    for sms in sorted(r0["rows"], key=int):
        cells = []
        for n in names:
            vals = [gbps(e["rows"][sms][n]) for e in everyone]
            table.setdefault(n, {})[int(sms)] = {"rank0": vals[0], "mean": sum(vals) / len(vals),
                                                 "rank0_us": r0["rows"][sms][n][0] * 1e6}
            cells.append(f"{vals[0]:9.2f} / {sum(vals) / len(vals):9.2f} ({r0['rows'][sms][n][0] * 1e6:8.1f} us)")
        print(f"{int(sms):>4} " + " ".join(f"{c:>34}" for c in cells))
    summary = {}
    for n in names:
        pts = {s: v["rank0"] for s, v in table[n].items() if s in args.sweep}
        fewest, peak = fewest_for(pts)
        at = table[n][args.sms]["rank0"]
        summary[n] = {"at_sms": args.sms, "gbps_at_sms": at, "peak_gbps": peak, "fewest_sms_90pct": fewest,
                      "gbps_at_fewest": pts[fewest]}
        print(f"{n}: {at:.2f} GB/s at {args.sms} SMs; peak over the sweep {peak:.2f} GB/s; "
              f"fewest SMs keeping 90%: {fewest} ({pts[fewest]:.2f} GB/s)")
    nccl = None
    if r0["nccl"] is not None:
        nccl = {n: {"rank0": gbps(r0["nccl"][n]), "mean": sum(gbps(e["nccl"][n]) for e in everyone) / world,
                    "rank0_us": r0["nccl"][n][0] * 1e6} for n in names}
        for n in names:
            print(f"NCCL all_to_all {n}: {nccl[n]['rank0']:.2f} GB/s (mean {nccl[n]['mean']:.2f}), "
                  f"{nccl[n]['rank0_us']:.1f} us")
    else:
        print("NCCL baseline: not run (" + ("--no-nccl" if args.no_nccl else
                                            "needs one process per GPU and >= 2 GPUs") + ")")
    print(f"wall time {wall:.0f} s")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"date": now, "machine": platform.node(), "gpus": gpus, "num_gpus": ngpus, "ranks": world,
                       "shared_gpu": shared, "bandwidth_claim": not shared,
                       "command": " ".join([os.path.basename(sys.executable)] + sys.argv),
                       "shape": {"tokens": args.tokens, "hidden": args.hidden, "topk": args.topk,
                                 "experts": args.experts},
                       "rank0_recv_tokens": r0["recv_tokens"], "layout_us": r0["layout_s"] * 1e6,
                       "table": table, "summary": summary, "nccl": nccl}, f, indent=1)


def worker(rank, world, ngpus, port, args, q):
    try:
        q.put((rank, run(rank, world, ngpus, port, args), None))
    except Exception:
        q.put((rank, None, traceback.format_exc()))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=0, help="ranks (default: one per GPU, 2 sharing one GPU)")
    p.add_argument("--tokens", type=int, default=4096)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=256)
    p.add_argument("--sms", type=int, default=24, help="the headline SM count (DeepEP's test: 24)")
    p.add_argument("--sweep", default="4,8,12,16,20,24,32,48,64", help="SM counts to sweep")
    p.add_argument("--ring", type=int, default=256, help="num_max_nvl_chunked_recv_tokens (DeepEP's test: 256)")
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--iters", type=int, default=50)
    p.add_argument("--no-nccl", action="store_true", help="skip the NCCL baseline")
    p.add_argument("--rdma-bytes", type=int, default=0,
                   help="num_rdma_bytes: the internode exchange region (needed when the ranks span nodes)")
    p.add_argument("--json", default="", help="write the results here")
    p.add_argument("--timeout", type=float, default=float(os.environ.get("ANYEP_BENCH_TIMEOUT_S", "500")))
    args = p.parse_args()
    if torch is None:
        print(f"bench_ht: cannot run here: {TORCH_MISSING}", file=sys.stderr)
        sys.exit(77)
    if not torch.cuda.is_available():
        print("bench_ht: cannot run here: torch sees no CUDA GPU", file=sys.stderr)
        return 77
    visible = torch.cuda.device_count()
    world = args.processes or (visible if visible >= 2 else 2)
    ngpus = min(visible, world)
    max_sms = torch.cuda.get_device_properties(0).multi_processor_count
    args.sweep = [s for s in (int(v) for v in args.sweep.split(",") if v.strip()) if s <= max_sms]
    if args.sms not in args.sweep:
        args.sweep.append(args.sms)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    t0 = time.time()
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, ngpus, port, args, q)) for r in range(world)]
    for pr in procs:
        pr.start()
    errors, result, reported = [], None, set()
    deadline = time.time() + args.timeout
    while len(reported) < world and time.time() < deadline:
        try:
            rank, res, err = q.get(timeout=2)
        except queue_mod.Empty:
            for r, pr in enumerate(procs):
                if pr.exitcode not in (None, 0) and r not in reported:
                    errors.append(f"rank {r} exited with code {pr.exitcode} without reporting")
                    reported.add(r)
            continue
        reported.add(rank)
        if err:
            errors.append(f"rank {rank}:\n{err}")
        if rank == 0 and res is not None:
            result = res
    if len(reported) < world:
        errors.append(f"ranks {sorted(set(range(world)) - reported)} did not finish within {args.timeout:.0f} s")
    for pr in procs:
        pr.join(timeout=10)
        if pr.is_alive():
            pr.kill()
    if errors or result is None:
        print("bench_ht: FAILED\n" + "\n".join(errors), file=sys.stderr)
        return 1
    report(result, args, world, ngpus, time.time() - t0)
    return 0


if __name__ == "__main__":
    sys.exit(main())
