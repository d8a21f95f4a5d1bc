"""Per-call host cost of LL dispatch + combine, next to kernel time, at DeepEP's test shape.

  python bench/ll/bench_host.py [--processes 1 --gpus 1] [--tokens 128 --hidden 7168 --topk 8
                                 --experts 288] [--iters 200 --warmup 20] [--impl anyep|deep_ep]

Runs with one process on one GPU (the default); --processes N --gpus G puts rank r on GPU r % G
(e.g. 2 processes sharing one GPU). Each rank measures, with the call shaped as DeepEP's
test_low_latency.py `test_func` (FP8 dispatch, BF16 combine, no async_finish):

  host_us     time for low_latency_dispatch + low_latency_combine to return, GPU idle before the
              call (synchronize and barrier between iterations, outside the timed region): what
              a decode step without CUDA graphs pays on the CPU per layer. Also per call: dispatch,
              combine, and the hook mode pair (send halves plus both hooks).
  bench_us    DeepEP's tests/utils.py bench(): CUDA events around back-to-back calls, no sync
              between them, average without the first (max of host and GPU time per call).
  kernel_us   GPU time of dispatch and of combine from CUDA events, with the host's launches
              hidden behind a sleep kernel queued first (so the events time the kernels only).

--impl deep_ep imports `deep_ep` (DeepEP itself when it is installed ahead of anyep's build on
sys.path; the module path is printed) to measure DeepEP the same way on the same machine.
The command line, the machine and the implementation are printed with the figures.
"""
import argparse
import os
import platform
import queue as queue_mod
import socket
import statistics
import sys
import time

import torch
import torch.distributed as dist
import torch.multiprocessing as mp

HERE = os.path.dirname(os.path.abspath(__file__))


def add_build_path(impl):
    """anyep: the build's python/ folder (ANYEP_BUILD_DIR, default <repo>/build) first on sys.path.
    deep_ep: left as installed (DeepEP's own package when present)."""
    if impl == "anyep":
        build = os.path.abspath(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")))
        sys.path.insert(0, os.path.join(build, "python"))


def machine():
    cpu = platform.processor() or "?"
    try:
        with open("/proc/cpuinfo") as f:
            cpu = next((line.split(":", 1)[1].strip() for line in f if line.startswith("model name")), cpu)
    except OSError:
        pass
    gpu = torch.cuda.get_device_name(0) if torch.cuda.is_available() else "no GPU"
    return (f"host {socket.gethostname()}, CPU {cpu} ({os.cpu_count()} cores), GPU {gpu} x {torch.cuda.device_count()}, "
            f"torch {torch.__version__}, CUDA {torch.version.cuda}, Python {platform.python_version()}")


def us(seconds):
    return seconds * 1e6


def worker(rank, world, ngpus, port, args, queue):
    try:
        queue.put((rank, run(rank, world, ngpus, port, args)))
    except Exception as e:  # report instead of leaving the parent waiting
        queue.put((rank, {"error": f"{type(e).__name__}: {e}"}))
        raise


def run(rank, world, ngpus, port, args):
    add_build_path(args.impl)
    torch.cuda.set_device(rank % ngpus)
    # gloo: the barriers between timed calls stay off the GPU.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    import deep_ep as impl  # anyep's compatibility package, or DeepEP itself (--impl deep_ep)
    if args.impl == "anyep":
        import anyep
        assert impl.Buffer is anyep.Buffer, f"--impl anyep imported {impl.__file__}, not anyep's deep_ep"
    T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
    L = E // world
    g = torch.Generator(device="cuda").manual_seed(rank + 1)
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
    idx = torch.rand(T, E, device="cuda", generator=g).topk(K, dim=1).indices.to(torch.int64)
    w = torch.rand(T, K, device="cuda", generator=g)
    y = torch.randn(L, world * T, H, device="cuda", generator=g).to(torch.bfloat16)
    buf = impl.Buffer(dist.group.WORLD, 0, impl.Buffer.get_low_latency_rdma_size_hint(T, H, world, E),
                      low_latency_mode=True, num_qps_per_rank=L, explicitly_destroy=True)

    def dispatch(hook=False):
        return buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, async_finish=False, return_recv_hook=hook)

    def combine(handle, hook=False):
        return buf.low_latency_combine(y, idx, w, handle, return_recv_hook=hook)

    def round_trip():
        _, _, handle, _, _ = dispatch()
        combine(handle)

    def settle():
        torch.cuda.synchronize()
        dist.barrier()

    for _ in range(args.warmup):
        round_trip()
    settle()

    # Host time per call, GPU idle before each call.
    t_disp, t_comb, t_pair, t_hook = [], [], [], []
    for _ in range(args.iters):
        settle()
        t0 = time.perf_counter()
        _, _, handle, _, _ = dispatch()
        t1 = time.perf_counter()
        combine(handle)
        t2 = time.perf_counter()
        t_disp.append(t1 - t0)
        t_comb.append(t2 - t1)
        t_pair.append(t2 - t0)
    for _ in range(args.iters):
        settle()
        t0 = time.perf_counter()
        _, _, handle, _, hk = dispatch(hook=True)
        hk()
        _, _, hk2 = combine(handle, hook=True)
        hk2()
        t_hook.append(time.perf_counter() - t0)
    settle()

    # DeepEP's bench(): events around back-to-back calls.
    starts = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
    ends = [torch.cuda.Event(enable_timing=True) for _ in range(args.iters)]
    for i in range(args.iters):
        starts[i].record()
        round_trip()
        ends[i].record()
    torch.cuda.synchronize()
    bench = [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)][1:]
    settle()

    # Kernel time: a sleep kernel holds the stream while the host queues the calls and the events.
    k_disp, k_comb = [], []
    for _ in range(args.iters):
        settle()
        e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
        torch.cuda._sleep(args.sleep_cycles)
        e0.record()
        _, _, handle, _, _ = dispatch()
        e1.record()
        combine(handle)
        e2.record()
        torch.cuda.synchronize()
        k_disp.append(e0.elapsed_time(e1) / 1e3)
        k_comb.append(e1.elapsed_time(e2) / 1e3)
    settle()
    buf.destroy()
    dist.barrier()
    dist.destroy_process_group()
    med = statistics.median
    return {
        "module": impl.__file__,
        "host_us": us(med(t_pair)), "host_dispatch_us": us(med(t_disp)), "host_combine_us": us(med(t_comb)),
        "host_hook_pair_us": us(med(t_hook)),
        "bench_us": us(statistics.mean(bench)), "bench_min_us": us(min(bench)), "bench_max_us": us(max(bench)),
        "kernel_dispatch_us": us(med(k_disp)), "kernel_combine_us": us(med(k_comb)),
    }


def main():
    p = argparse.ArgumentParser(description=__doc__, formatter_class=argparse.RawDescriptionHelpFormatter)
    p.add_argument("--processes", type=int, default=1)
    p.add_argument("--gpus", type=int, default=1, help="GPUs the processes share (rank r on GPU r %% gpus)")
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=288)
    p.add_argument("--iters", type=int, default=200)
    p.add_argument("--warmup", type=int, default=20)
    p.add_argument("--sleep-cycles", type=int, default=2_000_000,
                   help="cycles of the sleep kernel that hides the launches in the kernel-time loop")
    p.add_argument("--impl", choices=("anyep", "deep_ep"), default="anyep")
    args = p.parse_args()
    if args.gpus > torch.cuda.device_count():
        sys.exit(f"bench_host: --gpus {args.gpus}, {torch.cuda.device_count()} visible")
    print(f"command: {' '.join([os.path.basename(sys.executable)] + sys.argv)}")
    print(f"machine: {machine()}")
    print(f"ANYEP_LL_CHECK_INPUTS={os.environ.get('ANYEP_LL_CHECK_INPUTS', '(unset: 0)')} "
          f"ANYEP_LL_SMS={os.environ.get('ANYEP_LL_SMS', '(unset: 0)')}", flush=True)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.processes, args.gpus, port, args, queue))
             for r in range(args.processes)]
    for proc in procs:
        proc.start()
    results = {}
    deadline = time.time() + float(os.environ.get("ANYEP_BENCH_TIMEOUT_S", "600"))
    while len(results) < args.processes and time.time() < deadline:
        try:
            rank, res = queue.get(timeout=2)
            results[rank] = res
        except queue_mod.Empty:
            if any(proc.exitcode not in (None, 0) for proc in procs):
                break
    for proc in procs:
        proc.join(timeout=10)
        if proc.is_alive():
            proc.kill()
    failed = False
    for rank in range(args.processes):
        res = results.get(rank, {"error": "no result (crashed or timed out)"})
        if "error" in res:
            print(f"rank {rank}: {res['error']}")
            failed = True
            continue
        print(f"rank {rank} ({args.impl}: {res['module']}), {args.tokens} tokens, hidden {args.hidden}, "
              f"top-{args.topk}, {args.experts} experts, {args.processes} process(es) on {args.gpus} GPU(s):")
        print(f"  host per call, GPU idle:     dispatch + combine {res['host_us']:.1f} us "
              f"(dispatch {res['host_dispatch_us']:.1f}, combine {res['host_combine_us']:.1f}); "
              f"hook mode pair {res['host_hook_pair_us']:.1f} us")
        print(f"  DeepEP bench() per call:     {res['bench_us']:.1f} us "
              f"(min {res['bench_min_us']:.1f}, max {res['bench_max_us']:.1f})")
        print(f"  kernel (CUDA events):        dispatch {res['kernel_dispatch_us']:.1f} us, "
              f"combine {res['kernel_combine_us']:.1f} us")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
