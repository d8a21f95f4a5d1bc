"""Drive the LL kernels of a timeline build (cmake -DANYEP_LL_TIMELINE=ON; docs/ll.md "Timeline of a
call") at DeepEP's shape, one process on one GPU; the kernels' per-block timeline prints at exit.

  ANYEP_BUILD_DIR=build-timeline python bench/ll/ll_timeline.py [--mode fused|hook|hookgemm] [--iters 220]

--mode fused: dispatch and combine as one kernel each; hook: the send and receive halves as two
(return_recv_hook); hookgemm: the same with an 8192 x 8192 GEMM before each receive, as DeepEP's
harness runs them (the receive then finds L2 cold). The first 20 calls of each kernel are warm-up
and left out of the medians. A timeline build synchronizes after every call: its times say where a
call spends its time, not how long it takes (take those from bench_ll.py or DeepEP's harness on a
normal build).
"""
import argparse
import os
import socket
import sys
import time

import torch
import torch.distributed as dist

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, os.path.join(os.path.abspath(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build"))),
                                "python"))


def main():
    p = argparse.ArgumentParser()
    p.add_argument("--mode", choices=("fused", "hook", "hookgemm"), default="fused")
    p.add_argument("--iters", type=int, default=220)
    p.add_argument("--tokens", type=int, default=128)
    p.add_argument("--hidden", type=int, default=7168)
    p.add_argument("--topk", type=int, default=8)
    p.add_argument("--experts", type=int, default=288)
    args = p.parse_args()
    T, H, K, E = args.tokens, args.hidden, args.topk, args.experts
    os.environ.setdefault("ANYEP_LL_CHECK_INPUTS", "0")
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    torch.cuda.set_device(0)
    dist.init_process_group("nccl", init_method=f"tcp://127.0.0.1:{port}", rank=0, world_size=1,
                            device_id=torch.device("cuda", 0))
    import anyep
    g = torch.Generator(device="cuda").manual_seed(1)
    x = torch.randn(T, H, device="cuda", generator=g).to(torch.bfloat16)
    idx = (torch.randn(T, E, device="cuda", generator=g).abs() + 1).topk(K, dim=1).indices.to(torch.int64)
    w = torch.rand(T, K, device="cuda", generator=g)
    y = torch.randn(E, T, H, device="cuda", generator=g).to(torch.bfloat16)
    buf = anyep.Buffer(dist.group.WORLD, 0, anyep.Buffer.get_low_latency_rdma_size_hint(T, H, 1, E),
                       low_latency_mode=True, explicitly_destroy=True)
    lhs = torch.randn(8192, 8192, device="cuda") if args.mode == "hookgemm" else None
    t0 = time.time()
    for _ in range(args.iters):
        hook_mode = args.mode != "fused"
        _, _, handle, _, hook = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, return_recv_hook=hook_mode)
        if hook_mode:
            if lhs is not None:
                lhs @ lhs
            hook()
        _, _, hook = buf.low_latency_combine(y, idx, w, handle, return_recv_hook=hook_mode)
        if hook_mode:
            if lhs is not None:
                lhs @ lhs
            hook()
    torch.cuda.synchronize()
    buf.check_async_error()
    print(f"ll_timeline: {args.mode}, {args.iters} iterations in {time.time() - t0:.1f} s on "
          f"{torch.cuda.get_device_name()}; command: {' '.join(sys.argv)}", flush=True)
    buf.destroy()
    dist.destroy_process_group()


if __name__ == "__main__":
    main()
