"""One-process smoke run of the LL Buffer (world of 1), printing each step: the first thing to run
on a new machine, and the one to run under gdb when something crashes:
  gdb -batch -ex run -ex bt --args python3 tests/python/ll_smoke.py"""
import faulthandler
import os
import sys

faulthandler.enable()
import torch  # noqa: E402
import torch.distributed as dist  # noqa: E402


def step(*a):
    print("ll_smoke:", *a, flush=True)


def main():
    if not torch.cuda.is_available():
        step("skipped: no CUDA GPU visible")
        return 0
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{os.environ.get('LL_SMOKE_PORT', '29533')}",
                            rank=0, world_size=1)
    import anyep
    torch.cuda.set_device(0)
    T, H, K, E = 64, 2048, 4, 8
    size = anyep.Buffer.get_low_latency_rdma_size_hint(T, H, 1, E)
    buf = anyep.Buffer(dist.group.WORLD, 0, size, low_latency_mode=True)
    step("buffer", size)
    x = torch.randn(T, H, device="cuda").bfloat16()
    idx = torch.rand(T, E, device="cuda").topk(K, dim=1).indices
    w = torch.rand(T, K, device="cuda")
    try:
        buf.low_latency_dispatch(x.float(), idx, T, E)
        step("FAIL: float x accepted")
        return 1
    except ValueError as e:
        step("bad input raised:", e)
    recv, cnt, handle, _, _ = buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)
    step("dispatch launched")
    torch.cuda.synchronize()
    step("dispatch done, recv_count", cnt.tolist())
    out, _, _ = buf.low_latency_combine(recv, idx, w, handle)
    torch.cuda.synchronize()
    err = float((out.float() - x.float() * w.sum(1, keepdim=True)).abs().max())
    step("combine done, max abs error vs x * sum(w):", err)
    buf.check_async_error()
    return 0 if err < 0.1 else 1


if __name__ == "__main__":
    sys.exit(main())
