"""One-process sweep of the HT kernels through the raw runtime binding (anyep._C.HTBuffer): the
time of dispatch (cached, BF16) and combine at DeepEP's shape for several Config values, with CUDA
events around the call only. One rank sends to itself: a kernel-path figure, not a link figure.
  python3 bench/ht/ht_kernel_sweep.py [--tokens 4096 --hidden 7168]"""
import argparse
import os

import torch
import torch.distributed as dist


def timed(fn, iters=10, warmup=3):
    for _ in range(warmup):
        fn()
    torch.cuda.synchronize()
    ts = []
    for _ in range(iters):
        a, b = torch.cuda.Event(enable_timing=True), torch.cuda.Event(enable_timing=True)
        a.record()
        fn()
        b.record()
        b.synchronize()
        ts.append(a.elapsed_time(b) * 1e3)
    ts.sort()
    return ts[len(ts) // 2]


def main():
    ap = argparse.ArgumentParser()
    ap.add_argument("--tokens", type=int, default=4096)
    ap.add_argument("--hidden", type=int, default=7168)
    ap.add_argument("--experts", type=int, default=256)
    ap.add_argument("--topk", type=int, default=8)
    args = ap.parse_args()
    dist.init_process_group("gloo", init_method="tcp://127.0.0.1:29599", rank=0, world_size=1)
    import anyep._C as C
    N, H, E, K = args.tokens, args.hidden, args.experts, args.topk
    buf = C.HTBuffer(0, 1, int(2e9))
    buf.connect([buf.local_info()])
    x = torch.randn(N, H, device="cuda").bfloat16()
    idx = torch.rand(N, E, device="cuda").topk(K, dim=1).indices.long()
    w = torch.rand(N, K, device="cuda")
    ntpr, ntpe, itir = buf.get_dispatch_layout(idx, E, 0)
    gb = N * H * 2 / 1e9
    print(f"one rank, {N} tokens, hidden {H}: {gb * 1e3:.1f} MB per call; times are medians of CUDA events")
    for sms in (24, 48):
        for cs, cr in ((6, 256), (2, 256), (8, 512), (16, 1024)):
            out = buf.dispatch(x, None, idx, w, ntpr, itir, ntpe, 0, None, None, 1, 0, sms, cs, cr, 0)
            recv_x, _, _, recv_w, _, rpm, cpm, rcpm, src, sh = out
            td = timed(lambda: buf.dispatch(x, None, None, None, None, itir, None, recv_x.shape[0], rpm, cpm, 1, 0,
                                            sms, cs, cr, 0))
            tc = timed(lambda: buf.combine(recv_x, None, None, None, src, rpm, rcpm, sh, sms, cs, cr, 0))
            tcw = timed(lambda: buf.combine(recv_x, recv_w, None, None, src, rpm, rcpm, sh, sms, cs, cr, 0))
            print(f"SMs {sms:3d} chunk {cs:2d}/{cr:4d}: dispatch {td:8.1f} us ({gb / td * 1e6:6.1f} GB/s)  "
                  f"combine {tc:8.1f} us ({gb / tc * 1e6:6.1f} GB/s)  combine+weights {tcw:8.1f} us", flush=True)
    buf.destroy()


if __name__ == "__main__":
    main()
