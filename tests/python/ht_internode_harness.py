"""Multi-process harness of the internode HT path (anyep/internode.py): `world` processes as
nodes of ANYEP_HT_RANKS_PER_NODE ranks, on one machine. Every rank checks its outputs against a
pure-torch reference from all ranks' inputs (ht_harness.make_inputs: the same numbers in every
process). The received order is the one docs/ht.md ("Internode") states: by the rank of this node
that forwarded the row, then by source node, then by token."""
import datetime
import faulthandler
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

from ht_harness import (as_bf16, cast_to_fp8, cat_sent, combine_reference, expert_out, in_rank_of, make_inputs,
                        rank_scale, same_sent, sent_rows)
from ll_harness import Progress, run_check, select_checks, wait_gpu

HIDDEN = 2048
NVL_BYTES = 256 << 20
RDMA_BYTES = 128 << 20


def internode_reference(me, world, k, E, inputs, align):
    """What rank `me` receives: rows by forwarding local rank f, then source node, then token."""
    L = E // world
    nodes = world // k
    my_node = me // k
    ref = {"x": [], "idx": [], "w": []}
    per_expert = torch.zeros(L, dtype=torch.int64, device="cuda")
    for f in range(k):
        for j in range(nodes):
            s = j * k + f
            inp = inputs[s]
            m = in_rank_of(inp["idx"], L, world)
            # The token reached node my_node's rank f (its rail peer) when any rank of my_node needs it.
            at_node = m[:, my_node * k:(my_node + 1) * k].any(1)
            toks = (at_node & m[:, me]).nonzero().flatten()
            idx = inp["idx"][toks]
            local = (idx >= me * L) & (idx < (me + 1) * L)
            ref["idx"].append(torch.where(local, idx - me * L, torch.full_like(idx, -1)))
            ref["w"].append(torch.where(local, inp["w"][toks], torch.zeros_like(inp["w"][toks])))
            ref["x"].append(sent_rows(inp["send"], toks))
    for inp in inputs:
        valid = inp["idx"][inp["idx"] >= 0]
        per_expert += torch.bincount(valid, minlength=E)[me * L:(me + 1) * L]
    ref["idx"] = torch.cat(ref["idx"])
    ref["w"] = torch.cat(ref["w"])
    ref["x"] = cat_sent(ref["x"])
    ref["list"] = [(int(v) + align - 1) // align * align for v in per_expert.tolist()]
    return ref


class Ctx:
    def __init__(self, rank, world, k, buf):
        self.rank, self.world, self.k, self.buf = rank, world, k, buf


def run_case(c, seed, T, K, L, fmt, align, bias_n, iters=1):
    me, world, k, buf = c.rank, c.world, c.k, c.buf
    E = L * world
    inputs = [make_inputs(seed + s, max(1, T - (s % 3) * max(1, T // 10)), HIDDEN, K, E, world, "random", fmt)
              for s in range(world)]
    mine = inputs[me]
    ref = internode_reference(me, world, k, E, inputs, align)
    # A cached dispatch may change x's format (DeepEP allows it): BF16 handle, FP8 tokens.
    ref_fp8 = None
    if fmt == "bf16":
        ref_fp8 = internode_reference(me, world, k, E, [{**inp, "send": cast_to_fp8(inp["x"])} for inp in inputs],
                                      align)["x"]
    wait_gpu()
    for it in range(iters):
        per_rank, per_node, per_expert, in_rank, _ = buf.get_dispatch_layout(mine["idx"], E)
        wait_gpu()
        m = in_rank_of(mine["idx"], L, world)
        assert torch.equal(in_rank, m), f"iter {it}: is_token_in_rank differs"
        assert torch.equal(per_rank.cpu(), m.sum(0).int().cpu()), f"iter {it}: num_tokens_per_rank differs"
        want_node = m.view(m.size(0), world // k, k).any(2).sum(0).int()
        assert per_node is not None and torch.equal(per_node.cpu(), want_node.cpu()), \
            f"iter {it}: num_tokens_per_rdma_rank {per_node} != {want_node}"
        recv_x, recv_idx, recv_w, lst, handle, _ = buf.dispatch(
            mine["send"], num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=mine["idx"], topk_weights=mine["w"], expert_alignment=align)
        wait_gpu()
        same_sent(recv_x, ref["x"], f"iter {it} dispatch")
        assert torch.equal(recv_idx, ref["idx"]), f"iter {it}: recv_topk_idx differs"
        assert torch.equal(recv_w, ref["w"]), f"iter {it}: recv_topk_weights differs"
        assert lst == ref["list"], f"iter {it}: num_recv_tokens_per_expert_list {lst} != {ref['list']}"
        cached = buf.dispatch(mine["send"], handle=handle)
        wait_gpu()
        same_sent(cached[0], ref["x"], f"iter {it} cached dispatch")
        if ref_fp8 is not None:
            cached_fp8 = buf.dispatch(cast_to_fp8(mine["x"]), handle=handle)
            wait_gpu()
            same_sent(cached_fp8[0], ref_fp8, f"iter {it} cached dispatch of FP8 tokens on a BF16 handle")
        biases = [torch.randn(mine["n"], HIDDEN, device="cuda").to(torch.bfloat16) for _ in range(bias_n)]
        bias = None if bias_n == 0 else (biases[0] if bias_n == 1 else tuple(biases))
        y = expert_out(as_bf16(recv_x), me)
        combined, combined_w, _ = buf.combine(y, handle, topk_weights=recv_w * rank_scale(me), bias=bias)
        wait_gpu()
        want_x, want_w = combine_reference(mine, L, world, biases)
        # Sums of bf16 rows in float, rounded once here; the node's partial sum is rounded once more.
        diff = (combined.float() - want_x).abs().max().item() if combined.numel() else 0.0
        scale = want_x.abs().max().item() if want_x.numel() else 1.0
        assert diff <= 2e-2 * max(scale, 1.0), f"iter {it}: combined_x off by {diff} (scale {scale})"
        assert torch.allclose(combined_w, want_w, rtol=1e-5, atol=1e-6), f"iter {it}: combined_topk_weights differ"


def c_bf16(c):
    run_case(c, 300, 96, 8, 4, "bf16", 1, 1)


def c_fp8_scales(c):
    run_case(c, 400, 64, 4, 4, "fp8", 4, 0)


def c_top1_two_bias(c):
    run_case(c, 500, 33, 1, 2, "bf16", 1, 2)


def c_back_to_back(c):
    """Several calls in a row: the exchange's credits and sequence numbers carry over."""
    run_case(c, 600, 48, 6, 4, "bf16", 1, 0, iters=int(os.environ.get("ANYEP_TEST_HT_ITERS", "4")))


def c_describe_paths(c):
    d = c.buf.describe_paths()
    assert "rail exchange" in d and f"{c.world // c.k} nodes of {c.k}" in d, d


def c_stalled_node(c):
    """Only node 0 dispatches: its ranks give up after ANYEP_TIMEOUT_S=2 with a TimeoutError naming
    their rail peer on the silent node. Run last, on its own buffer (a timed-out exchange is not
    reused)."""
    import deep_ep
    saved = os.environ.get("ANYEP_TIMEOUT_S")
    os.environ["ANYEP_TIMEOUT_S"] = "2"
    try:
        buf = deep_ep.Buffer(dist.group.WORLD, NVL_BYTES, RDMA_BYTES, explicitly_destroy=True)
    finally:
        os.environ["ANYEP_TIMEOUT_S"] = saved if saved is not None else "20"
    try:
        if c.rank < c.k:
            E = 2 * c.world
            idx = torch.tensor([[r * 2] for r in range(c.world)] * 4, dtype=torch.int64, device="cuda")
            x = torch.ones(idx.size(0), HIDDEN, dtype=torch.bfloat16, device="cuda")
            pr, _, pe, ir, _ = buf.get_dispatch_layout(idx, E)
            wait_gpu()
            t0 = time.time()
            err = None
            try:
                buf.dispatch(x, num_tokens_per_rank=pr, is_token_in_rank=ir, num_tokens_per_expert=pe, topk_idx=idx,
                             topk_weights=torch.ones(idx.shape, device="cuda"))
                wait_gpu()
                buf.check_async_error()
            except TimeoutError as e:
                err = e
            assert err is not None, "a dispatch with a silent node did not time out"
            assert time.time() - t0 < 60, f"the timeout took {time.time() - t0:.0f} s"
            peer = c.k + c.rank  # the rail peer on node 1
            assert f"rank {peer}" in str(err), f"the timeout does not name rank {peer}: {err}"
        dist.barrier()
    finally:
        buf.destroy()


ALL_CHECKS = [c_describe_paths, c_bf16, c_fp8_scales, c_top1_two_bias, c_back_to_back, c_stalled_node]
CHECKS = select_checks(ALL_CHECKS, "ANYEP_TEST_HTN_CHECKS")


def worker(rank, world, ngpus, port, queue, env=None):
    os.environ.update(env or {})
    results = {}
    progress = Progress(rank, world, prefix="htn")
    faulthandler.enable(file=progress.f or sys.stderr)
    faulthandler.dump_traceback_later(int(os.environ.get("ANYEP_TEST_STACKS_AFTER_S", "240")), exit=False,
                                      file=progress.f or sys.stderr)
    try:
        torch.cuda.set_device(rank % ngpus)
        os.environ.setdefault("ANYEP_TIMEOUT_S", "20")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        import deep_ep
        k = int(os.environ["ANYEP_HT_RANKS_PER_NODE"])
        buf = deep_ep.Buffer(dist.group.WORLD, NVL_BYTES, RDMA_BYTES, explicitly_destroy=True)
        progress(f"internode HT buffer on GPU {rank % ngpus}: {buf.describe_paths()}")
        ctx = Ctx(rank, world, k, buf)
        for check in CHECKS:
            run_check(check, ctx, buf, progress, results)
            dist.barrier()
        buf.destroy()
        dist.destroy_process_group()
    except Exception:
        results["setup"] = traceback.format_exc()
        progress("setup failed")
    for name, r in results.items():
        if r != "ok":
            progress(f"{name} failure:\n{r}")
    faulthandler.cancel_dump_traceback_later()
    queue.put((rank, results))
