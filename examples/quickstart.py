"""anyep quickstart: one low-latency dispatch and combine through the DeepEP-style Buffer, checked.

    python3 -m torch.distributed.run --nproc-per-node 2 examples/quickstart.py

Every rank sends 8 tokens to 2 experts each; the experts are the identity and the weights 0.5 and
0.5, so every token must come back unchanged. `import deep_ep` gives the same Buffer. Exits 77 with
the reason where torch or a GPU is missing.
"""
import os
import sys


def main() -> int:
    try:
        import torch
        import torch.distributed as dist
    except ImportError as e:
        print(f"quickstart: needs torch ({e})")
        return 77
    if not torch.cuda.is_available():
        print("quickstart: no GPU visible to torch")
        return 77
    import anyep

    for k, v in {"RANK": "0", "WORLD_SIZE": "1", "MASTER_ADDR": "127.0.0.1", "MASTER_PORT": "29533"}.items():
        os.environ.setdefault(k, v)  # a plain `python3 quickstart.py` is a world of one
    dist.init_process_group("gloo")
    rank, ranks = dist.get_rank(), dist.get_world_size()
    torch.cuda.set_device(int(os.environ.get("LOCAL_RANK", rank)) % torch.cuda.device_count())

    tokens, hidden, experts, topk = 8, 1024, 4 * ranks, 2
    size = anyep.Buffer.get_low_latency_rdma_size_hint(tokens, hidden, ranks, experts)
    buf = anyep.Buffer(dist.group.WORLD, num_rdma_bytes=size, low_latency_mode=True,
                       num_qps_per_rank=experts // ranks)

    # Token t of rank r holds the value r * tokens + t + 1 and goes to two different experts.
    values = torch.arange(tokens, device="cuda", dtype=torch.float32) + rank * tokens + 1
    x = values[:, None].expand(tokens, hidden).to(torch.bfloat16).contiguous()
    first = (torch.arange(tokens, device="cuda") + rank) % experts
    topk_idx = torch.stack([first, (first + 1) % experts], dim=1)
    weights = torch.full((tokens, topk), 0.5, device="cuda")

    recv_x, recv_count, handle, _, _ = buf.low_latency_dispatch(x, topk_idx, tokens, experts, use_fp8=False)
    expert_out = recv_x  # the experts would run here, on recv_x's first recv_count[l] rows per expert l
    out, _, _ = buf.low_latency_combine(expert_out, topk_idx, weights, handle)
    torch.cuda.synchronize()

    # Every (token, expert) pair of every rank is received once somewhere.
    received = torch.tensor([int(recv_count.sum())])
    dist.all_reduce(received)
    ok = torch.equal(out, x) and int(received) == ranks * tokens * topk
    print(f"quickstart rank {rank}/{ranks}: {'every token came back unchanged' if ok else 'FAILED'}")
    dist.destroy_process_group()
    return 0 if ok else 1


if __name__ == "__main__":
    sys.exit(main())
