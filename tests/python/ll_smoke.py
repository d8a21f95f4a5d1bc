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
    buf.check_async_error()
    step("dispatch done, recv_count", cnt.tolist())
    want = torch.zeros(E, dtype=torch.int64, device="cuda").scatter_add_(
        0, idx.flatten(), torch.ones(idx.numel(), dtype=torch.int64, device="cuda"))
    if cnt.tolist() != want.tolist():
        step("FAIL: recv_count", cnt.tolist(), "expected", want.tolist())
        return 1
    out, _, _ = buf.low_latency_combine(recv, idx, w, handle)
    torch.cuda.synchronize()
    buf.check_async_error()
    # Identity experts: out = x * sum(w), up to the BF16 rounding of the result.
    ref = x.float() * w.sum(1, keepdim=True)
    err = float((out.float() - ref).abs().max())
    step("combine done, max abs error vs x * sum(w):", err)
    if not torch.allclose(out.float(), ref, rtol=1e-2, atol=1e-2):
        step("FAIL: combine result differs")
        return 1
    (q, scales), cnt8, _, _, hook = buf.low_latency_dispatch(x, idx, T, E, use_fp8=True, return_recv_hook=True)
    step("FP8 dispatch send launched (hook mode)")
    hook()
    torch.cuda.synchronize()
    buf.check_async_error()
    step("FP8 dispatch received, recv_count", cnt8.tolist(), "scales", tuple(scales.shape), "stride", scales.stride())
    if cnt8.tolist() != want.tolist():
        step("FAIL: FP8 recv_count differs")
        return 1
    step("ok")
    return 0


if __name__ == "__main__":
    sys.exit(main())
