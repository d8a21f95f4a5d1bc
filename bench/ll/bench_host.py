"""Per-call host cost of LL dispatch + combine, next to kernel time, at DeepEP's test shape.

  python bench/ll/bench_host.py [--processes 1 --gpus 1] [--tokens 128 --hidden 7168 --topk 8
                                 --experts 288] [--iters 200 --warmup 20] [--impl anyep|deep_ep]
                                 [--baseline DIR]

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

--baseline DIR measures DeepEP in the same process: DIR holds DeepEP's built `deep_ep` package (e.g.
the build folder scripts/gpu/deepep.sh makes from a DeepEP checkout). Every measurement alternates the two
implementations call by call, so both see the same process and machine state (host times of
separate processes on one machine differ by up to 1.5x from run to run), and the ratios
anyep/DeepEP are printed last. --impl deep_ep instead imports `deep_ep` as installed (DeepEP itself
when it is ahead of anyep's build on sys.path; the module path is printed) and measures it alone.
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


def load_impls(args):
    """[(name, module)] to measure: anyep (or DeepEP with --impl deep_ep), then the --baseline
    package, which is DeepEP's `deep_ep` imported from its own folder into the same process."""
    add_build_path(args.impl)
    if args.impl == "deep_ep":
        import deep_ep
        return [("deep_ep", deep_ep)]
    import anyep
    impls = [("anyep", anyep)]
    if args.baseline:
        base = os.path.abspath(args.baseline)
        sys.path.insert(0, base)
        import deep_ep
        if deep_ep.Buffer is anyep.Buffer or not os.path.abspath(deep_ep.__file__).startswith(base + os.sep):
            raise RuntimeError(f"--baseline {base}: `import deep_ep` gave {deep_ep.__file__}, not a package in that folder")
        impls.append(("DeepEP", deep_ep))
    return impls


def run(rank, world, ngpus, port, args):
    torch.cuda.set_device(rank % ngpus)
    # gloo: the barriers between timed calls stay off the GPU.
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world)
    impls = load_impls(args)
    T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
    L = E // world
    g = torch.Generator(device="cuda").manual_seed(rank + 1)
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
    idx = torch.rand(T, E, device="cuda", generator=g).topk(K, dim=1).indices.to(torch.int64)
    w = torch.rand(T, K, device="cuda", generator=g)
    y = torch.randn(L, world * T, H, device="cuda", generator=g).to(torch.bfloat16)

    class Calls:  # one implementation's buffer and calls, shaped as DeepEP's test_func
        def __init__(self, mod):
            self.buf = mod.Buffer(dist.group.WORLD, 0, mod.Buffer.get_low_latency_rdma_size_hint(T, H, world, E),
                                  low_latency_mode=True, num_qps_per_rank=L, explicitly_destroy=True)

        def dispatch(self, hook=False):
            return self.buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, async_finish=False, return_recv_hook=hook)

        def combine(self, handle, hook=False):
            return self.buf.low_latency_combine(y, idx, w, handle, return_recv_hook=hook)

        def round_trip(self):
            _, _, handle, _, _ = self.dispatch()
            self.combine(handle)

    calls = {name: Calls(mod) for name, mod in impls}

    def settle():
        torch.cuda.synchronize()
        dist.barrier()

    for c in calls.values():
        for _ in range(args.warmup):
            c.round_trip()
    settle()

    # Every measurement alternates the implementations call by call (or chunk by chunk for
    # bench()), so both see the same process, machine state and drift.
    res = {name: {k: [] for k in ("disp", "comb", "pair", "hook", "bench", "kdisp", "kcomb")} for name in calls}

    # Host time per call, GPU idle before each call.
    for _ in range(args.iters):
        for name, c in calls.items():
            settle()
            t0 = time.perf_counter()
            _, _, handle, _, _ = c.dispatch()
            t1 = time.perf_counter()
            c.combine(handle)
            t2 = time.perf_counter()
            res[name]["disp"].append(t1 - t0)
            res[name]["comb"].append(t2 - t1)
            res[name]["pair"].append(t2 - t0)
    for _ in range(args.iters):
        for name, c in calls.items():
            settle()
            t0 = time.perf_counter()
            _, _, handle, _, hk = c.dispatch(hook=True)
            hk()
            _, _, hk2 = c.combine(handle, hook=True)
            hk2()
            res[name]["hook"].append(time.perf_counter() - t0)
    settle()

    # DeepEP's bench(): events around back-to-back calls, in chunks of `chunk` calls.
    chunk = 20
    for _ in range(max(1, args.iters // chunk)):
        for name, c in calls.items():
            starts = [torch.cuda.Event(enable_timing=True) for _ in range(chunk)]
            ends = [torch.cuda.Event(enable_timing=True) for _ in range(chunk)]
            for i in range(chunk):
                starts[i].record()
                c.round_trip()
                ends[i].record()
            torch.cuda.synchronize()
            res[name]["bench"] += [s.elapsed_time(e) / 1e3 for s, e in zip(starts, ends)][1:]
    settle()

    # Kernel time: a sleep kernel holds the stream while the host queues the calls and the events.
    for _ in range(args.iters):
        for name, c in calls.items():
            settle()
            e0, e1, e2 = (torch.cuda.Event(enable_timing=True) for _ in range(3))
            torch.cuda._sleep(args.sleep_cycles)
            e0.record()
            _, _, handle, _, _ = c.dispatch()
            e1.record()
            c.combine(handle)
            e2.record()
            torch.cuda.synchronize()
            res[name]["kdisp"].append(e0.elapsed_time(e1) / 1e3)
            res[name]["kcomb"].append(e1.elapsed_time(e2) / 1e3)
    settle()
    for c in calls.values():
        c.buf.destroy()
    dist.barrier()
    dist.destroy_process_group()
    med = statistics.median
    mods = dict(impls)
    return {
        name: {
            "module": mods[name].__file__,
            "host_us": us(med(r["pair"])), "host_dispatch_us": us(med(r["disp"])), "host_combine_us": us(med(r["comb"])),
            "host_hook_pair_us": us(med(r["hook"])),
            "bench_us": us(statistics.mean(r["bench"])), "bench_min_us": us(min(r["bench"])),
            "bench_max_us": us(max(r["bench"])),
            "kernel_dispatch_us": us(med(r["kdisp"])), "kernel_combine_us": us(med(r["kcomb"])),
        } for name, r in res.items()
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
    p.add_argument("--baseline", metavar="DIR",
                   help="folder holding DeepEP's built `deep_ep` package: measured in the same process as anyep, "
                        "the calls alternating, and the ratios printed")
    args = p.parse_args()
    if args.baseline and args.impl != "anyep":
        sys.exit("bench_host: --baseline compares DeepEP with anyep; leave --impl at anyep")
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
    ratios = (("host per call, dispatch + combine", "host_us"), ("host per call, dispatch", "host_dispatch_us"),
              ("host per call, combine", "host_combine_us"), ("host per call, hook mode pair", "host_hook_pair_us"),
              ("DeepEP bench() per call", "bench_us"), ("kernel dispatch", "kernel_dispatch_us"),
              ("kernel combine", "kernel_combine_us"))
    for rank in range(args.processes):
        out = results.get(rank, {"error": "no result (crashed or timed out)"})
        if "error" in out:
            print(f"rank {rank}: {out['error']}")
            failed = True
            continue
        for name, res in out.items():
            print(f"rank {rank} ({name}: {res['module']}), {args.tokens} tokens, hidden {args.hidden}, "
                  f"top-{args.topk}, {args.experts} experts, {args.processes} process(es) on {args.gpus} GPU(s):")
            print(f"  host per call, GPU idle:     dispatch + combine {res['host_us']:.1f} us "
                  f"(dispatch {res['host_dispatch_us']:.1f}, combine {res['host_combine_us']:.1f}); "
                  f"hook mode pair {res['host_hook_pair_us']:.1f} us")
            print(f"  DeepEP bench() per call:     {res['bench_us']:.1f} us "
                  f"(min {res['bench_min_us']:.1f}, max {res['bench_max_us']:.1f})")
            print(f"  kernel (CUDA events):        dispatch {res['kernel_dispatch_us']:.1f} us, "
                  f"combine {res['kernel_combine_us']:.1f} us")
        if "DeepEP" in out:
            a, d = out["anyep"], out["DeepEP"]
            print(f"rank {rank}, same process, calls alternating:  {'anyep':>8s} {'DeepEP':>8s}  anyep/DeepEP")
            for label, key in ratios:
                print(f"  {label:36s} {a[key]:8.1f} {d[key]:8.1f}  {a[key] / d[key]:.3f}")
    sys.exit(1 if failed else 0)


if __name__ == "__main__":
    main()
