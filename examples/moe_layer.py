"""A small MoE layer on anyep's high-throughput dispatch and combine, trained-style: forward and
backward through a torch.autograd.Function, checked against the same layer computed on one rank
without communication.

  python examples/moe_layer.py --processes 2        (processes share GPU 0 when there is one GPU)

The layer: a gate (softmax over experts, top-k, weights renormalized), dispatch of each token to
the ranks owning its experts (`Buffer.dispatch`), per-expert GEMMs on the received tokens
(silu(x W1) W2, weighted by the token's top-k weights for this rank's experts), and combine
(`Buffer.combine`, an unweighted sum on the token's home rank). Backward: dispatch's gradient is a
combine (the gradients of a token's copies summed at home; the top-k weights' gradients ride
along), combine's gradient is a cached dispatch (the handle) of the output gradient.

Every rank regenerates all ranks' tokens from their seeds, runs the reference layer over all of
them, and compares: its output, the gradient of its tokens, of its experts' weights, and of the
gate (summed over ranks). Exits 1 on a mismatch.
"""
import argparse
import datetime
import os
import queue as queue_mod
import socket
import sys
import time
import traceback

import torch
import torch.distributed as dist
import torch.multiprocessing as mp
import torch.nn.functional as F

HERE = os.path.dirname(os.path.abspath(__file__))
# The build's python/ folder (ANYEP_BUILD_DIR, default <repo>/build) holds anyep._C and the packages.
sys.path.insert(0, os.path.join(os.path.abspath(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "build"))),
                                "python"))


class Dispatch(torch.autograd.Function):
    """Tokens and their top-k weights to the ranks of their experts; backward is a combine."""

    @staticmethod
    def forward(ctx, x, topk_weights, topk_idx, buffer, num_experts, state):
        per_rank, _, per_expert, in_rank, _ = buffer.get_dispatch_layout(topk_idx, num_experts)
        recv_x, recv_idx, recv_w, _, handle, _ = buffer.dispatch(
            x, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=topk_idx, topk_weights=topk_weights)
        ctx.buffer, ctx.handle, ctx.hidden = buffer, handle, x.size(1)
        state["handle"] = handle  # for Combine (a tuple of tensors is no autograd output)
        ctx.save_for_backward(recv_idx)
        ctx.mark_non_differentiable(recv_idx)
        return recv_x, recv_idx, recv_w

    @staticmethod
    def backward(ctx, grad_recv_x, _grad_idx, grad_recv_w):
        (recv_idx,) = ctx.saved_tensors
        if grad_recv_x is None:
            grad_recv_x = torch.zeros(recv_idx.size(0), ctx.hidden, dtype=torch.bfloat16, device=recv_idx.device)
        if grad_recv_w is None:
            grad_recv_w = torch.zeros(recv_idx.shape, dtype=torch.float32, device=recv_idx.device)
        # A received weight is the sender's weight only where the id is local (elsewhere a constant 0).
        grad_recv_w = grad_recv_w.float().masked_fill(recv_idx < 0, 0.0).contiguous()
        grad_x, grad_w, _ = ctx.buffer.combine(grad_recv_x.to(torch.bfloat16).contiguous(), ctx.handle,
                                               topk_weights=grad_recv_w)
        return grad_x, grad_w, None, None, None, None


class Combine(torch.autograd.Function):
    """Expert outputs back to their tokens' home ranks, summed; backward is a cached dispatch."""

    @staticmethod
    def forward(ctx, y, buffer, handle):
        ctx.buffer, ctx.handle = buffer, handle
        combined, _, _ = buffer.combine(y, handle)
        return combined

    @staticmethod
    def backward(ctx, grad_out):
        grad_y = ctx.buffer.dispatch(grad_out.to(torch.bfloat16).contiguous(), handle=ctx.handle)[0]
        return grad_y, None, None


def gate(x, w_gate, k):
    """Softmax over experts, top-k, weights renormalized (differentiable in x and w_gate)."""
    probs = torch.softmax(x.float() @ w_gate, dim=1)
    w, idx = probs.topk(k, dim=1)
    return w / w.sum(dim=1, keepdim=True), idx.to(torch.int64)


def expert(x, w1, w2):
    return F.silu(x @ w1) @ w2


def experts_on_rows(rows, idx, w, w1s, w2s):
    """sum over slots k with an expert e = idx[:, k] of w[:, k] * expert_e(rows), in float; idx
    holds ids into w1s / w2s (-1 or an id of another rank's expert: no term here)."""
    out = torch.zeros(rows.size(0), w2s.size(2), dtype=torch.float32, device=rows.device)
    for e in range(w1s.size(0)):
        sel = idx == e
        tok = sel.any(dim=1).nonzero().flatten()
        if tok.numel() == 0:
            continue
        weight = (w * sel).sum(dim=1)[tok]
        out = out.index_add(0, tok, weight[:, None] * expert(rows[tok].float(), w1s[e], w2s[e]))
    return out


def moe_distributed(x, w_gate, w1_local, w2_local, buffer, k, num_experts):
    topk_w, topk_idx = gate(x, w_gate, k)
    state = {}
    recv_x, recv_idx, recv_w = Dispatch.apply(x, topk_w, topk_idx, buffer, num_experts, state)
    y = experts_on_rows(recv_x, recv_idx, recv_w, w1_local, w2_local)  # recv_idx: ids local to this rank
    return Combine.apply(y.to(torch.bfloat16), buffer, state["handle"])


def moe_reference(x, sizes, w_gate, w1, w2, k):
    """The same layer on one rank, no communication: every token meets its experts here. The gate
    runs per source rank's block of `sizes` rows, as in the distributed run (the same GEMM shapes,
    so the same top-k choices even where two scores nearly tie)."""
    gated = [gate(part, w_gate, k) for part in torch.split(x, sizes)]
    topk_w = torch.cat([g[0] for g in gated])
    topk_idx = torch.cat([g[1] for g in gated])
    return experts_on_rows(x, topk_idx, topk_w, w1, w2).to(torch.bfloat16)


def rel_err(got, want):
    got, want = got.double(), want.double()
    return float((got - want).norm() / want.norm().clamp(min=1e-30))


def run(rank, world, ngpus, port, args, failures):
    torch.cuda.set_device(rank % ngpus)
    dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                            timeout=datetime.timedelta(seconds=120))
    import anyep
    H, F_, E, K, T = args.hidden, args.ffn, args.experts * world, args.topk, args.tokens
    L = E // world
    dev = "cuda"
    g = torch.Generator(device=dev).manual_seed(1234)  # parameters: the same on every rank
    w_gate = (torch.randn(H, E, generator=g, device=dev) / H ** 0.5).requires_grad_()
    w1 = torch.randn(E, H, F_, generator=g, device=dev) / H ** 0.5
    w2 = torch.randn(E, F_, H, generator=g, device=dev) / F_ ** 0.5
    xs = [torch.randn(T - s, H, generator=torch.Generator(device=dev).manual_seed(99 + s), device=dev)
          .to(torch.bfloat16) for s in range(world)]  # every rank's tokens (rank s has T - s)
    grads_out = [torch.randn(T - s, H, generator=torch.Generator(device=dev).manual_seed(77 + s), device=dev)
                 for s in range(world)]

    hint = max(cfg.get_nvl_buffer_size_hint(H * 2, world)
               for cfg in (anyep.Buffer.get_dispatch_config(world), anyep.Buffer.get_combine_config(world)))
    buffer = anyep.Buffer(dist.group.WORLD, hint, explicitly_destroy=True)
    try:
        # Distributed: this rank's tokens, its experts.
        x = xs[rank].clone().requires_grad_()
        w1_local = w1[rank * L:(rank + 1) * L].clone().requires_grad_()
        w2_local = w2[rank * L:(rank + 1) * L].clone().requires_grad_()
        wg = w_gate.detach().clone().requires_grad_()
        out = moe_distributed(x, wg, w1_local, w2_local, buffer, K, E)
        (out.float() * grads_out[rank]).sum().backward()
        torch.cuda.synchronize()
        grad_gate = wg.grad.cpu()
        dist.all_reduce(grad_gate)  # the gate is replicated: its gradient is the sum over ranks

        # Reference: all tokens, all experts, one rank.
        x_all = torch.cat(xs).requires_grad_()
        w1_r, w2_r, wg_r = w1.clone().requires_grad_(), w2.clone().requires_grad_(), w_gate.detach().clone()
        wg_r.requires_grad_()
        out_r = moe_reference(x_all, [T - s for s in range(world)], wg_r, w1_r, w2_r, K)
        (out_r.float() * torch.cat(grads_out)).sum().backward()
        lo = sum(T - s for s in range(rank))
        hi = lo + T - rank
        checks = {
            "output": rel_err(out, out_r[lo:hi]),
            "grad x": rel_err(x.grad, x_all.grad[lo:hi]),
            "grad W1 (local experts)": rel_err(w1_local.grad, w1_r.grad[rank * L:(rank + 1) * L]),
            "grad W2 (local experts)": rel_err(w2_local.grad, w2_r.grad[rank * L:(rank + 1) * L]),
            "grad gate (summed over ranks)": rel_err(grad_gate, wg_r.grad.cpu()),
        }
        for name, err in checks.items():
            ok = err < args.tol
            print(f"rank {rank}: {name:30s} relative error {err:.2e} {'ok' if ok else 'MISMATCH'}", flush=True)
            if not ok:
                failures.append(f"rank {rank}: {name} relative error {err:.2e} >= {args.tol}")
        assert out.shape == (T - rank, H)
        dist.barrier()
    finally:
        buffer.destroy()
        dist.destroy_process_group()


def worker(rank, world, ngpus, port, args, queue):
    failures = []
    try:
        run(rank, world, ngpus, port, args, failures)
    except Exception:
        failures.append(f"rank {rank}:\n{traceback.format_exc()}")
    queue.put((rank, failures))


def main():
    p = argparse.ArgumentParser(description=__doc__.split("\n\n")[0])
    p.add_argument("--processes", type=int, default=2, help="ranks (processes); they share the visible GPUs")
    p.add_argument("--tokens", type=int, default=256, help="tokens of rank 0 (rank s has tokens - s)")
    p.add_argument("--hidden", type=int, default=1024)
    p.add_argument("--ffn", type=int, default=512, help="expert hidden size")
    p.add_argument("--experts", type=int, default=4, help="experts per rank")
    p.add_argument("--topk", type=int, default=3)
    p.add_argument("--tol", type=float, default=2e-2, help="largest relative (L2) error accepted")
    p.add_argument("--timeout", type=float, default=300, help="seconds before the run counts as hung")
    args = p.parse_args()
    if not torch.cuda.is_available():
        print("moe_layer: no CUDA GPU visible; nothing run", file=sys.stderr)
        return 2
    ngpus = min(torch.cuda.device_count(), args.processes)
    with socket.socket() as s:
        s.bind(("127.0.0.1", 0))
        port = s.getsockname()[1]
    ctx = mp.get_context("spawn")
    queue = ctx.Queue()
    procs = [ctx.Process(target=worker, args=(r, args.processes, ngpus, port, args, queue))
             for r in range(args.processes)]
    for pr in procs:
        pr.start()
    failures, reported = [], set()
    deadline = time.time() + args.timeout
    while len(reported) < args.processes and time.time() < deadline:
        try:
            rank, f = queue.get(timeout=2)
            reported.add(rank)
            failures += f
        except queue_mod.Empty:
            dead = [r for r, pr in enumerate(procs) if pr.exitcode not in (None, 0) and r not in reported]
            for r in dead:  # died without reporting (a crash)
                failures.append(f"rank {r} exited with code {procs[r].exitcode} without reporting")
                reported.add(r)
    missing = sorted(set(range(args.processes)) - reported)
    if missing:
        failures.append(f"ranks {missing} did not report within {args.timeout} s")
    for pr in procs:
        pr.join(timeout=10)
        if pr.is_alive():
            pr.kill()
    print(f"moe_layer: {args.processes} ranks on {ngpus} GPU(s): "
          f"{'PASSED' if not failures else 'FAILED'}", flush=True)
    for f in failures:
        print(f, file=sys.stderr)
    return 1 if failures else 0


if __name__ == "__main__":
    sys.exit(main())
