"""LL dispatch/combine benchmark at the DeepEP test shape, with an NCCL all_to_all baseline
measured in the same run.

  python bench/ll/bench_ll.py [--ranks N] [--tokens 128 --hidden 7168 --topk 8 --experts 288 --iters 500]
                              [--paths auto,proxy-cuda-ipc,proxy-libfabric]

--paths: one Buffer per LL path (ANYEP_LL_PATH), measured one after the other in the same
processes: auto = NVLink (CUDA IPC) between the GPUs of this host; proxy-* = each process its own
node, every peer through the CPU proxy (proxy-libfabric uses ANYEP_FI_PROVIDER, default shm here).

--ranks: processes, rank r on GPU r (default: one per visible GPU; 1 rank runs too, every token's
experts on its own GPU).

Times are kernel times: medians over --iters iterations of CUDA events on the stream, each chunk
of iterations queued behind a sleep kernel that outlasts the host's queueing (HiddenHost), so the
events time the kernels and the gaps between back-to-back kernels, not the host's per-call cost
(bench_host.py measures that, and DeepEP's figures printed last are its harness's kernel times).
Fused: dispatch then combine. Staged (hook): dispatch send, its receive hook, combine send, its
receive hook, back to back (no GEMM between send and receive as in DeepEP's harness, so the
receive finds the data in L2). GB/s as DeepEP counts it: this rank's valid (token, expert)
selections x message bytes (FP8: hidden + hidden/128*4 + 16; BF16 combine: 2*hidden) / time.
The NCCL dispatcher is timed by events around its calls as a user would run it (it synchronizes
with the host for its counts).
"""
import argparse
import json
import os
import queue as queue_mod
import socket
import statistics
import sys
import time

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
# the installed package (pip install ./python ships this script as anyep/bench/bench_ll.py, and
# cmake --install under share/anyep/bench/).
_BUILD = os.environ.get("ANYEP_BUILD_DIR") or os.path.join(HERE, "..", "..", "build")
if "ANYEP_BUILD_DIR" in os.environ or os.path.isdir(os.path.join(_BUILD, "python", "anyep")):
    sys.path.insert(0, os.path.join(os.path.abspath(_BUILD), "python"))


def sync():
    """Wait for the GPU by polling an event: a host thread blocked in a synchronous CUDA call can
    stall a proxy thread's CUDA calls (cuda-ipc transport, docs/ll.md)."""
    ev = torch.cuda.Event()
    ev.record()
    while not ev.query():
        time.sleep(0.001)  # each query takes the CUDA runtime's locks the proxy's copies need too


def median_us(pairs):
    return statistics.median(a.elapsed_time(b) * 1000.0 for a, b in pairs)


def nccl_dispatch(x, idx, num_experts, world, L):
    """Naive all_to_all dispatcher: FP8-quantize, permute selections by destination rank,
    exchange counts, then payload (FP8 bytes + float32 scales as bytes)."""
    n, k = idx.shape
    H = x.size(1)
    g = x.float().view(n, H // 128, 128)
    scale = g.abs().amax(dim=2).clamp(min=1e-4) / 448.0
    q = (g / scale[:, :, None]).view(n, H).to(torch.float8_e4m3fn)
    payload = torch.cat([q.view(torch.uint8), scale.contiguous().view(torch.uint8)], dim=1)
    flat = idx.flatten()
    valid = (flat >= 0).nonzero().flatten()
    dst = flat[valid] // L
    order = torch.argsort(dst, stable=True)
    sel = valid[order]
    send = payload[sel // k]
    counts = torch.bincount(dst, minlength=world).to(torch.int64)
    recv_counts = torch.empty_like(counts)
    dist.all_to_all_single(recv_counts, counts)
    sc, rc = counts.tolist(), recv_counts.tolist()
    recv = torch.empty(sum(rc), payload.size(1), dtype=torch.uint8, device=x.device)
    dist.all_to_all_single(recv, send, rc, sc)
    return recv, sel, sc, rc


def nccl_combine(y, sel, sc, rc, w, n, k):
    back = torch.empty(sum(sc), y.size(1), dtype=y.dtype, device=y.device)
    dist.all_to_all_single(back, y, sc, rc)
    wf = w.flatten()[sel]
    out = torch.zeros(n, y.size(1), dtype=torch.float32, device=y.device)
    out.index_add_(0, sel // k, back.float() * wf[:, None])
    return out.to(torch.bfloat16)


def worker(rank, world, port, args, queue):
    try:
        run(rank, world, port, args, queue)
    except Exception as e:  # report instead of leaving the parent waiting
        queue.put((rank, {"error": f"{type(e).__name__}: {e}"}))
        raise


def run(rank, world, port, args, queue):
    torch.cuda.set_device(rank)
    # The inputs are valid by construction: no host-side topk_idx value check (a device-to-host copy
    # and a stream sync per call) inside the timed region, as in a real decode step.
    os.environ.setdefault("ANYEP_LL_CHECK_INPUTS", "0")
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            device_id=torch.device("cuda", rank))
    import anyep
    T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
    L = E // world
    g = torch.Generator(device="cuda").manual_seed(rank + 1)
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
    scores = torch.rand(T, E, device="cuda", generator=g)
    idx = scores.topk(K, dim=1).indices.to(torch.int64)
    w = torch.rand(T, K, device="cuda", generator=g)
    selections = int((idx >= 0).sum())
    fp8_bytes = H + H // 128 * 4 + 16
    bf16_bytes = 2 * H
    y = torch.randn(L, world * T, H, device="cuda", generator=g).to(torch.bfloat16)

    def ev():
        e = torch.cuda.Event(enable_timing=True)
        e.record()
        return e

    res = {}
    for path in args.paths.split(","):
        os.environ["ANYEP_LL_PATH"] = path
        if path == "proxy-libfabric":
            os.environ.setdefault("ANYEP_FI_PROVIDER", "shm")
        buf = anyep.Buffer(dist.group.WORLD, 0, anyep.Buffer.get_low_latency_rdma_size_hint(T, H, world, E),
                           low_latency_mode=True, explicitly_destroy=True)
        res[f"{path}:paths"] = buf.describe_paths()
        if rank == 0:
            print(f"bench_ll: measuring {path}: {res[path + ':paths']}", file=sys.stderr, flush=True)
        try:
            iters, warmup = (args.iters, args.warmup) if path == "auto" else (args.proxy_iters, args.proxy_iters // 5)
            t0 = time.time()
            for k, v in measure(buf, iters, warmup, x, idx, w, y, T, E, ev).items():
                res[f"{path}:{k}"] = v
                if k in ("dispatch_us", "combine_us"):
                    nbytes = fp8_bytes if k == "dispatch_us" else bf16_bytes
                    res[f"{path}:{k[:-3]}_GBps"] = selections * nbytes / (v * 1e3)
            res[f"{path}:iters"] = iters
            if rank == 0:
                print(f"bench_ll: {path}: {2 * (iters + warmup)} round trips in {time.time() - t0:.1f} s",
                      file=sys.stderr, flush=True)
        except Exception as e:  # one path failing does not hide the others' figures
            res[f"{path}:error"] = f"{type(e).__name__}: {e}"
            torch.cuda.synchronize()
        buf.destroy()
        dist.barrier()
    # NCCL all_to_all baseline, same data.
    nd, nc = [], []
    for it in range(args.warmup // 5 + args.iters // 5):
        e0 = ev()
        recv_b, sel, sc, rc = nccl_dispatch(x, idx, E, world, L)
        e1 = ev()
        yb = torch.empty(recv_b.size(0), H, dtype=torch.bfloat16, device="cuda").normal_()
        e1b = ev()
        nccl_combine(yb, sel, sc, rc, w, T, K)
        e2 = ev()
        if it >= args.warmup // 5:
            nd.append((e0, e1))
            nc.append((e1b, e2))
    torch.cuda.synchronize()
    res["nccl_dispatch_us"] = median_us(nd)
    res["nccl_combine_us"] = median_us(nc)
    res["selections"] = selections
    res["device"] = torch.cuda.get_device_name()
    queue.put((rank, res))
    dist.barrier()
    dist.destroy_process_group()


class HiddenHost:
    """Kernel time from CUDA events with the host's launches hidden: each chunk of iterations is
    queued behind a sleep kernel, so every kernel starts as soon as the one before it ends. A chunk
    whose queueing took longer than 0.8 x the sleep (the GPU may have caught up with the host and
    waited for it) is not counted: the sleep doubles and the chunk is queued again, every rank
    agreeing (the LL calls of all ranks must match). The first iteration of a chunk lines the ranks
    up after the barrier and is not counted either. Without this the events measure the host's
    per-call cost whenever it exceeds the kernel's (bench_host.py measures that cost)."""

    CHUNK = 10

    def __init__(self):
        self.sleep_cycles = 2_000_000  # ~1 ms at 2 GHz; grows as needed
        self.requeued = 0

    def run(self, step, iters, warmup, ev):
        """step() queues one iteration and returns its events (n + 1 events: n intervals).
        Returns the median of each interval over `iters` counted iterations, in us."""
        for _ in range(warmup):
            step()
        sync()
        spans = None
        done = 0
        while done < iters:
            n = min(self.CHUNK, iters - done) + 1
            dist.barrier()
            e_sleep = ev()
            torch.cuda._sleep(self.sleep_cycles)
            t0 = time.perf_counter()
            events = [step() for _ in range(n)]
            queued_ms = (time.perf_counter() - t0) * 1e3
            sync()
            slept_ms = e_sleep.elapsed_time(events[0][0])
            late = torch.tensor([1 if queued_ms > 0.8 * slept_ms else 0], device="cuda")
            dist.all_reduce(late, op=dist.ReduceOp.MAX)
            if int(late.item()):
                self.requeued += 1
                if self.requeued > 12:
                    raise RuntimeError(f"bench_ll: the host needed {queued_ms:.1f} ms to queue {n} iterations, "
                                       f"longer than a {slept_ms:.1f} ms sleep, 12 times: kernel times not measurable")
                self.sleep_cycles *= 2
                continue
            spans = spans or [[] for _ in range(len(events[0]) - 1)]
            for evs in events[1:]:
                for i in range(len(spans)):
                    spans[i].append(evs[i].elapsed_time(evs[i + 1]) * 1000.0)
            done += n - 1
        return [statistics.median(v) for v in spans]


def measure(buf, iters, warmup, x, idx, w, y, T, E, ev):
    """Fused and staged dispatch/combine medians (us) on one Buffer."""
    timer = HiddenHost()
    res = {}

    def fused():  # one kernel each
        e0 = ev()
        _, _, handle, _, _ = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True)
        e1 = ev()
        buf.low_latency_combine(y, idx, w, handle)
        return [e0, e1, ev()]

    def staged():  # send now, receive when the hook is called
        e0 = ev()
        _, _, handle, _, hook = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, return_recv_hook=True)
        e1 = ev()
        hook()
        e2 = ev()
        _, _, hook = buf.low_latency_combine(y, idx, w, handle, return_recv_hook=True)
        e3 = ev()
        hook()
        return [e0, e1, e2, e3, ev()]

    res["dispatch_us"], res["combine_us"] = timer.run(fused, iters, warmup, ev)
    buf.check_async_error()
    (res["dispatch_send_us"], res["dispatch_recv_us"], res["combine_send_us"],
     res["combine_recv_us"]) = timer.run(staged, iters, warmup, ev)
    buf.check_async_error()
    res["requeued_chunks"] = timer.requeued
    return res


# DeepEP's LL kernels at this shape on H200s, timed by its own test_low_latency.py (kineto kernel
# time, not CUDA events around the calls as here), for orientation only: the baseline of this run
# is the NCCL dispatcher.
DEEPEP_H200 = {
    1: "dispatch 18.1 us, combine 21.4 us (docs/bench/ll.md, 2026-11-23)",
    2: "dispatch 28.7 us, combine 40.4 us (docs/bench/ll.md)",
    4: "dispatch 37.1 us, combine 56.2 us (docs/bench/ll.md, 2026-11-27)",
}


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=288)
    p.add_argument("--iters", type=int, default=500)
    p.add_argument("--warmup", type=int, default=50)
    p.add_argument("--json", default="")
    p.add_argument("--paths", default="auto", help="comma list of LL paths (ANYEP_LL_PATH values) to measure")
    p.add_argument("--proxy-iters", type=int, default=50,
                   help="iterations on the proxy paths (few: launches queue up on the stream, and a host thread "
                        "blocked on a full launch queue would stall the cuda-ipc transport's copies)")
    p.add_argument("--ranks", type=int, default=None, help="processes, one per GPU (default: every visible GPU)")
    args = p.parse_args()
    if torch is None:
        print(f"bench_ll: cannot run here: {TORCH_MISSING}", file=sys.stderr)
        sys.exit(77)
    gpus = torch.cuda.device_count()
    if gpus < 1:
        # Not a pass: scripts/main.sh runs this only where nvidia-smi lists a GPU, so torch seeing
        # none is a broken setup (driver, CUDA_VISIBLE_DEVICES, a CPU-only torch). 77 as the CLI's.
        print(f"bench_ll: cannot run here: torch sees no GPU (torch {torch.__version__}, CUDA "
              f"{torch.version.cuda}, CUDA_VISIBLE_DEVICES={os.environ.get('CUDA_VISIBLE_DEVICES', 'unset')})",
              file=sys.stderr)
        sys.exit(77)
    world = gpus if args.ranks is None else args.ranks
    if not 1 <= world <= gpus:
        sys.exit(f"bench_ll: --ranks {args.ranks}: needs one GPU per rank, and {gpus} are visible")
    if args.experts % world:
        sys.exit(f"bench_ll: --experts {args.experts} is not a multiple of the {world} ranks")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    q = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, world, port, args, q)) for r in range(world)]
    for pr in procs:
        pr.start()
    # Poll so that a worker that dies (signal, abort) ends the run at once with its exit code.
    results = {}
    deadline = time.time() + float(os.environ.get("ANYEP_BENCH_TIMEOUT_S", "600"))
    while len(results) < world and time.time() < deadline:
        try:
            r, v = q.get(timeout=2)
            results[r] = v
            continue
        except queue_mod.Empty:
            pass
        for r, pr in enumerate(procs):
            if r not in results and pr.exitcode not in (None, 0):
                results[r] = {"error": f"worker exited with code {pr.exitcode} without reporting"}
    for r in range(world):
        results.setdefault(r, {"error": "no result within ANYEP_BENCH_TIMEOUT_S"})
    for pr in procs:
        pr.join(timeout=30)
        if pr.is_alive():
            pr.kill()
    errors = {r: v["error"] for r, v in results.items() if "error" in v}
    if errors:
        print(f"bench_ll: failed: {errors}")
        sys.exit(1)
    metrics = ["dispatch_us", "combine_us", "dispatch_send_us", "dispatch_recv_us", "combine_send_us",
               "combine_recv_us", "dispatch_GBps", "combine_GBps", "requeued_chunks"]
    keys = [f"{p}:{m}" for p in args.paths.split(",") for m in metrics] + ["nccl_dispatch_us", "nccl_combine_us"]
    print(f"bench_ll: {world} ranks on {results[0]['device']}, tokens/rank {args.tokens}, hidden {args.hidden}, "
          f"top-{args.topk}, {args.experts} experts, FP8 dispatch, BF16 combine, median of {args.iters} "
          f"(proxy paths: {args.proxy_iters})")
    print(f"command: {' '.join(sys.argv)}")
    for p in args.paths.split(","):
        print(f"rank 0 {p}: {results[0][p + ':paths']}")
        for r in range(world):
            if f"{p}:error" in results[r]:
                print(f"rank {r} {p}: FAILED: {results[r][p + ':error']}")
    print(f"{'metric':<36}" + "".join(f"{'rank ' + str(r):>12}" for r in range(world)))
    for k in keys:
        print(f"{k:<36}" + "".join(f"{results[r][k]:>12.1f}" if k in results[r] else f"{'-':>12}" for r in range(world)))
    ref = DEEPEP_H200.get(world)
    if ref and "H200" in results[0]["device"] and (args.tokens, args.hidden, args.topk, args.experts) == (128, 7168, 8, 288):
        print(f"DeepEP at {world} rank{'s' if world > 1 else ''} on H200, its own harness (kernel time, another run): {ref}")
    if args.json:
        with open(args.json, "w") as f:
            json.dump({"args": vars(args), "results": results}, f, indent=1)


if __name__ == "__main__":
    main()
