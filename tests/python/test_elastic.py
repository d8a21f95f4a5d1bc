"""Device tests of deep_ep.ElasticBuffer on anyep (pytest). Each world spawns its processes once
(rank r on GPU r % GPUs; the one-GPU worlds share GPU 0) and runs every check below on one buffer;
each check is reported as its own test. Skips as test_ll.py does: without torch, without a GPU,
without the compiled extension (one that is built but fails to import is an error), or when the
machine has fewer GPUs than a world needs.

Every rank's inputs are gathered (gloo) so each rank computes its expected outputs with plain torch:
the received rows (ordered by source rank, then source token), the handle's fields, and combine's
result by deep_ep V2's reference procedure, written out here: per token, the slots are grouped by the
rank owning their expert (a stable sort), each group summed in FP32 in slot order and rounded to BF16
at the group's last slot (zeros at the others), then every slot added in slot order to the bias in
FP32 and rounded to BF16. Combine must equal it bitwise (torch.equal), as deep_ep's test demands.
ANYEP_TEST_ELASTIC_CHECKS=name,... runs a subset."""
import datetime
import faulthandler
import os
import sys
import time
import traceback

import pytest

HERE = os.path.dirname(os.path.abspath(__file__))
sys.path.insert(0, HERE)
_BUILD_PY = os.path.join(os.environ.get("ANYEP_BUILD_DIR", os.path.join(HERE, "..", "..", "build")), "python")
if os.path.isdir(_BUILD_PY):
    sys.path.insert(0, os.path.abspath(_BUILD_PY))

torch = pytest.importorskip("torch", reason="torch is not installed")

import torch.distributed as dist  # noqa: E402

from test_ll import REASON, assert_check_passed, run_processes  # noqa: E402

pytestmark = pytest.mark.skipif(REASON is not None, reason=REASON or "")

T_MAX, H, K, L = 192, 512, 6, 8  # token bound, hidden, top-k, experts per rank

WORLDS = {
    "1proc_1gpu": (1, 1, {}),
    "2proc_1gpu": (2, 1, {}),
    "2proc_2gpu": (2, 2, {}),
}


# ---- inputs and references ------------------------------------------------------------------------
def make_inputs(rank, world):
    """Rank `rank`'s tokens: x, topk_idx (about 10% of the slots -1), weights (0 where -1), two biases."""
    g = torch.Generator(device="cuda").manual_seed(1000 + rank)
    n = max(1, T_MAX - 37 * rank)
    E = L * world
    x = (torch.randn(n, H, generator=g, device="cuda") * 3).to(torch.bfloat16)
    scores = torch.rand(n, E, generator=g, device="cuda")
    idx = scores.topk(K, dim=1, sorted=False).indices.to(torch.int64)
    idx[torch.rand(n, K, generator=g, device="cuda") < 0.1] = -1
    w = torch.rand(n, K, generator=g, device="cuda", dtype=torch.float32)
    w[idx < 0] = 0
    bias = tuple((torch.randn(n, H, generator=g, device="cuda")).to(torch.bfloat16) for _ in range(2))
    return dict(x=x, idx=idx, w=w, bias=bias)


def slot_values(gid, j_count):
    """The expert output of (global token id, slot j): values of very different magnitudes per
    slot, so that the order of FP32 additions shows in the result. `gid`: [n] int64."""
    j = torch.arange(j_count, device="cuda", dtype=torch.float32)
    col = torch.arange(H, device="cuda", dtype=torch.float32)
    phase = gid.to(torch.float32).view(-1, 1, 1) * 0.731 + j.view(1, -1, 1) * 1.37 + col.view(1, 1, -1) * 0.013
    # Exponents spread over 2^-20..2^19 per (token, slot): FP32 sums of such BF16 values round, so
    # an addition order other than V2's shows in the BF16 result.
    expo = (gid.view(-1, 1) * 7 + torch.arange(j_count, device="cuda").view(1, -1) * 11) % 40 - 20
    scale = torch.pow(2.0, expo.to(torch.float32)).unsqueeze(2)
    return (torch.sin(phase) * scale).to(torch.bfloat16)  # [n, K, H]


def v2_reference_combine(y, owners, bias, per_rank):
    """deep_ep V2's reference combine procedure (see the module docstring). y: [n, K, H] BF16
    (zeros where the slot has no expert); owners: [n, K] (-1: none); bias: None, a tensor or two."""
    n, k, h = y.shape
    if per_rank:
        sorted_owner, order = torch.sort(owners, dim=1, stable=True)
        placed = torch.zeros_like(y)
        acc = torch.zeros(n, h, dtype=torch.float32, device="cuda")
        rows = torch.arange(n, device="cuda")
        for p in range(k):
            j = order[:, p]
            acc = acc + y[rows, j].float()
            brk = torch.ones(n, dtype=torch.bool, device="cuda") if p == k - 1 else \
                sorted_owner[:, p] != sorted_owner[:, p + 1]
            placed[rows[brk], j[brk]] = acc[brk].to(torch.bfloat16)
            acc[brk] = 0
        y = placed
    if bias is None:
        total = torch.zeros(n, h, dtype=torch.float32, device="cuda")
    elif isinstance(bias, tuple):
        total = bias[0].float() + bias[1].float()
    else:
        total = bias.float().clone()
    for j in range(k):
        total = total + y[:, j].float()
    return total.to(torch.bfloat16)


class Ctx:
    """What the checks share: the buffer, every rank's inputs, this rank's expected receive side."""

    def __init__(self, buf, rank, world):
        import deep_ep
        self.deep_ep, self.buf, self.rank, self.world = deep_ep, buf, rank, world
        self.E = L * world
        mine = make_inputs(rank, world)
        gathered = [None] * world
        dist.all_gather_object(gathered, {k: (v.cpu() if torch.is_tensor(v) else tuple(t.cpu() for t in v))
                                          for k, v in mine.items()})
        self.inputs = [{k: (v.cuda() if torch.is_tensor(v) else tuple(t.cuda() for t in v)) for k, v in g.items()}
                       for g in gathered]
        self.me = self.inputs[rank]
        lo, hi = rank * L, (rank + 1) * L
        xs, idxs, ws, gids, counts = [], [], [], [], []
        for s, inp in enumerate(self.inputs):
            local = (inp["idx"] >= lo) & (inp["idx"] < hi)
            t = local.any(dim=1).nonzero().view(-1)
            xs.append(inp["x"][t])
            idxs.append(torch.where(local[t], inp["idx"][t] - lo, torch.full_like(inp["idx"][t], -1)))
            ws.append(torch.where(local[t], inp["w"][t], torch.zeros_like(inp["w"][t])))
            gids.append(s * T_MAX + t)
            counts.append(t.numel())
        self.ref_x, self.ref_idx, self.ref_w = torch.cat(xs), torch.cat(idxs), torch.cat(ws)
        self.ref_gid, self.ref_per_rank = torch.cat(gids), counts
        self.n_recv = self.ref_x.size(0)
        self.owners = torch.div(self.me["idx"], L, rounding_mode="floor")
        # Expert outputs: this rank's tokens' slot values (the reference) and the received rows'.
        n = self.me["x"].size(0)
        y = slot_values(rank * T_MAX + torch.arange(n, device="cuda"), K)
        y[self.me["idx"] < 0] = 0
        self.y = y
        y_recv = slot_values(self.ref_gid, K)
        y_recv[self.ref_idx < 0] = 0
        self.y_recv = y_recv

    def tokens_per_source(self):
        """Per source rank, the indices of its tokens that come to this rank."""
        lo, hi = self.rank * L, (self.rank + 1) * L
        return [((inp["idx"] >= lo) & (inp["idx"] < hi)).any(dim=1).nonzero().view(-1) for inp in self.inputs]

    def dispatch(self, **kw):
        args = dict(x=self.me["x"], topk_idx=self.me["idx"], topk_weights=self.me["w"], num_experts=self.E)
        args.update(kw)
        return self.buf.dispatch(**args)

    def partials(self, rows):
        """The received rows' combine input: each row's local slots summed in FP32, in slot order."""
        out = torch.zeros(rows, H, dtype=torch.bfloat16, device="cuda")
        acc = torch.zeros(self.n_recv, H, dtype=torch.float32, device="cuda")
        for j in range(K):
            acc = torch.where((self.ref_idx[:, j] >= 0).unsqueeze(1), acc + self.y_recv[:, j].float(), acc)
        out[:self.n_recv] = acc.to(torch.bfloat16)
        return out


def eq(a, b, what):
    assert a.shape == b.shape, f"{what}: shape {tuple(a.shape)} != {tuple(b.shape)}"
    assert torch.equal(a, b), f"{what}: {int((a != b).sum())} of {a.numel()} elements differ"


def align(x, a):
    return (x + a - 1) // a * a


# ---- checks -------------------------------------------------------------------------------------------
def c_dispatch_fields(c):
    stats = torch.zeros(L, dtype=torch.int32, device="cuda")
    recv_x, recv_idx, recv_w, h, _ = c.dispatch(expert_alignment=4, cumulative_local_expert_recv_stats=stats)
    eq(recv_x, c.ref_x, "recv_x")
    eq(recv_idx, c.ref_idx, "recv_topk_idx")
    eq(recv_w, c.ref_w, "recv_topk_weights")
    eq(h.recv_src_metadata[:, 0], c.ref_gid.to(torch.int32), "recv_src_metadata[:, 0]")
    eq(h.recv_src_metadata[:, 1], torch.arange(c.n_recv, dtype=torch.int32, device="cuda"), "recv_src_metadata[:, 1]")
    assert bool((h.recv_src_metadata[:, 2:] == -1).all()), "non-expanded metadata slots must be -1"
    psum = torch.tensor(c.ref_per_rank, dtype=torch.int32, device="cuda").cumsum(0).to(torch.int32)
    eq(h.psum_num_recv_tokens_per_scaleup_rank, psum, "psum_num_recv_tokens_per_scaleup_rank")
    counts = torch.stack([(c.ref_idx == e).sum() for e in range(L)]).to(torch.int32)
    eq(stats, counts, "cumulative_local_expert_recv_stats")
    assert h.num_recv_tokens_per_expert_list == [align(int(v), 4) for v in counts.tolist()]
    eq(h.psum_num_recv_tokens_per_expert, align(counts, 4).cumsum(0).to(torch.int32), "psum_num_recv_tokens_per_expert")
    assert h.num_recv_tokens == c.n_recv and (h.topk_idx.data_ptr() != c.me["idx"].data_ptr())
    # dst_buffer_slot_idx: where each of my tokens landed at each rank, checked against the gathered order.
    for r in range(c.world):
        sent = ((c.me["idx"] >= r * L) & (c.me["idx"] < (r + 1) * L)).any(dim=1)
        base = sum(int(((c.inputs[s]["idx"] >= r * L) & (c.inputs[s]["idx"] < (r + 1) * L)).any(dim=1).sum())
                   for s in range(c.rank))
        want = torch.full_like(sent, -1, dtype=torch.int32)
        want[sent] = base + torch.arange(int(sent.sum()), dtype=torch.int32, device="cuda")
        eq(h.dst_buffer_slot_idx[:, r], want, f"dst_buffer_slot_idx[:, {r}]")


def c_combine_bitwise(c):
    _, _, recv_w, h, _ = c.dispatch()
    for bias in (None, c.me["bias"][0], c.me["bias"]):
        out, out_w, _ = c.buf.combine(c.partials(h.num_recv_tokens), h, topk_weights=recv_w, bias=bias)
        eq(out, v2_reference_combine(c.y, c.owners, bias, True), f"combined_x (bias {type(bias).__name__})")
        eq(out_w, c.me["w"], "combined_topk_weights")
    out, out_w, _ = c.buf.combine(c.partials(h.num_recv_tokens), h)
    assert out_w is None
    eq(out, v2_reference_combine(c.y, c.owners, None, True), "combined_x without weights")


def c_expand(c):
    A = 4
    recv_x, recv_idx, recv_w, h, _ = c.dispatch(do_expand=True, expert_alignment=A, do_zero_padding=True)
    assert recv_idx is None and recv_w.dim() == 1 and h.do_expand
    counts = torch.stack([(c.ref_idx == e).sum() for e in range(L)]).to(torch.int64)
    starts = align(counts, A).cumsum(0) - align(counts, A)
    eq(h.num_unaligned_recv_tokens_per_expert, counts.to(torch.int32), "num_unaligned_recv_tokens_per_expert")
    eq(h.psum_num_recv_tokens_per_expert, (starts + counts).to(torch.int32), "expanded psum")
    assert recv_x.size(0) == h.num_expanded_tokens == int(align(counts, A).sum())
    pos = h.recv_src_metadata[:, 2:].to(torch.int64)
    valid = c.ref_idx >= 0
    eq(pos >= 0, valid, "expanded slots exist exactly for local experts")
    e = c.ref_idx.clamp(min=0)
    inside = (pos >= starts[e]) & (pos < starts[e] + counts[e])
    assert bool(inside[valid].all()), "an expanded row lies outside its expert's range"
    rows = torch.arange(c.n_recv, device="cuda").view(-1, 1).expand(-1, K)
    eq(recv_x[pos[valid]], c.ref_x[rows[valid]], "expanded rows")
    eq(recv_w[pos[valid]], c.ref_w[valid], "expanded weights")
    pad = torch.ones(recv_x.size(0), dtype=torch.bool, device="cuda")
    pad[pos[valid]] = False
    assert bool((recv_x[pad] == 0).all()) and bool((recv_w[pad] == 0).all()), "padding rows are not zero"
    # Expanded combine: one row per (token, local slot), reduced per rank or slot by slot.
    x_in = torch.zeros(recv_x.size(0), H, dtype=torch.bfloat16, device="cuda")
    x_in[pos[valid]] = c.y_recv[valid]
    multiple = c.buf.allow_multiple_reduction
    try:
        for per_rank in (True, False):
            c.buf.allow_multiple_reduction = per_rank
            out, out_w, _ = c.buf.combine(x_in, h, topk_weights=recv_w, bias=c.me["bias"])
            eq(out, v2_reference_combine(c.y, c.owners, c.me["bias"], per_rank),
               f"expanded combine (allow_multiple_reduction={per_rank})")
            eq(out_w, c.me["w"], "expanded combined_topk_weights")
    finally:
        c.buf.allow_multiple_reduction = multiple


def c_no_cpu_sync(c):
    recv_x, recv_idx, recv_w, h, _ = c.dispatch(do_cpu_sync=False)
    worst = c.world * T_MAX
    assert recv_x.size(0) == worst == h.num_recv_tokens and h.num_recv_tokens_per_expert_list == []
    n = int(h.psum_num_recv_tokens_per_scaleup_rank[-1])
    assert n == c.n_recv
    eq(recv_x[:n], c.ref_x, "recv_x (no CPU sync)")
    eq(recv_idx[:n], c.ref_idx, "recv_topk_idx (no CPU sync)")
    eq(h.recv_src_metadata[:n, 0], c.ref_gid.to(torch.int32), "recv_src_metadata (no CPU sync)")
    out, _, _ = c.buf.combine(c.partials(worst), h, bias=c.me["bias"])
    eq(out, v2_reference_combine(c.y, c.owners, c.me["bias"], True), "combine (no CPU sync)")


def c_cached_and_fp8(c):
    from deep_ep.utils.math import per_token_cast_to_fp8
    _, _, _, h, _ = c.dispatch()
    again, idx_again, w_again, h_again, _ = c.buf.dispatch(c.me["x"], handle=h)
    assert h_again is h and w_again is None
    eq(again, c.ref_x, "cached recv_x")
    eq(idx_again, c.ref_idx, "cached recv_topk_idx")
    _, _, w_cached, _, _ = c.buf.dispatch(c.me["x"], handle=h, topk_weights=c.me["w"])
    eq(w_cached, c.ref_w, "cached recv_topk_weights")
    q, s = per_token_cast_to_fp8(c.me["x"])
    ref_q = torch.cat([per_token_cast_to_fp8(inp["x"])[0][t] for inp, t in zip(c.inputs, c.tokens_per_source())])
    ref_s = torch.cat([per_token_cast_to_fp8(inp["x"])[1][t] for inp, t in zip(c.inputs, c.tokens_per_source())])
    for col_major in (False, True):
        (rq, rs), _, _, _, _ = c.dispatch(x=(q, s), use_tma_aligned_col_major_sf=col_major)
        eq(rq.view(torch.uint8), ref_q.view(torch.uint8), "FP8 recv_x")
        eq(rs, ref_s, "FP8 scales")
        if col_major:
            assert rs.stride(0) == 1 and rs.stride(1) == align(rs.size(0), 4), rs.stride()
        (cq, cs), _, _, _, _ = c.buf.dispatch((q, s), handle=h, use_tma_aligned_col_major_sf=col_major)
        eq(cq.view(torch.uint8), ref_q.view(torch.uint8), "cached FP8 recv_x")
        eq(cs, ref_s, "cached FP8 scales")


def c_async_events(c):
    for async_, alloc, prev in ((True, False, False), (True, True, True), (False, True, True), (False, True, False)):
        kw = dict(async_with_compute_stream=async_, allocate_on_comm_stream=alloc)
        if prev:
            kw["previous_event"] = c.buf.capture()
        recv_x, _, recv_w, h, ev = c.dispatch(**kw)
        if async_:
            ev.current_stream_wait()
        eq(recv_x, c.ref_x, f"recv_x {kw}")
        if prev:
            kw["previous_event"] = c.buf.capture()
        out, _, ev = c.buf.combine(c.partials(h.num_recv_tokens), h, bias=c.me["bias"], **kw)
        if async_:
            with ev:
                pass
        eq(out, v2_reference_combine(c.y, c.owners, c.me["bias"], True), f"combine {kw}")


def c_bad_input(c):
    def refused(exc, fn, words):
        try:
            fn()
        except exc as e:
            assert all(w in str(e) for w in words), f"{exc.__name__} {e} lacks {words}"
            return
        raise AssertionError(f"no {exc.__name__} for {words}")

    big = torch.zeros(T_MAX + 1, H, dtype=torch.bfloat16, device="cuda")
    refused(ValueError, lambda: c.buf.dispatch(big, topk_idx=torch.zeros(T_MAX + 1, K, dtype=torch.int64,
                                                                            device="cuda"), num_experts=c.E),
            ("num_max_tokens_per_rank",))
    refused(ValueError, lambda: c.dispatch(num_sms=3), ("num_sms",))
    refused(ValueError, lambda: c.dispatch(previous_event=c.buf.capture()), ("allocate_on_comm_stream",))
    refused(ValueError, lambda: c.dispatch(num_experts=0), ("num_experts",))
    refused(ValueError, lambda: c.dispatch(do_zero_padding=True), ("do_zero_padding",))
    refused(ValueError, lambda: c.buf.combine(c.me["x"], object()), ("handle",))
    refused(NotImplementedError, lambda: c.buf.engram_write(c.me["x"]), ("engram_write",))
    refused(NotImplementedError, lambda: c.buf.pp_send(c.me["x"], 0), ("pp_send",))
    refused(NotImplementedError, lambda: c.buf.all_gather(c.me["x"]), ("all_gather",))
    assert c.buf.get_logical_domain_size() == (1, c.world)
    assert c.buf.get_theoretical_num_sms(c.E, K) % 2 == 0


ALL_CHECKS = [c_dispatch_fields, c_combine_bitwise, c_expand, c_no_cpu_sync, c_cached_and_fp8, c_async_events,
              c_bad_input]
_names = [n.strip() for n in os.environ.get("ANYEP_TEST_ELASTIC_CHECKS", "").split(",") if n.strip()]
CHECKS = [c for c in ALL_CHECKS if not _names or c.__name__ in _names]


def worker(rank, world, ngpus, port, queue, env=None):
    """One rank: builds an ElasticBuffer, runs CHECKS, puts (rank, {check: "ok" | traceback})."""
    os.environ.update(env or {})
    results = {}
    faulthandler.dump_traceback_later(240, exit=False)
    try:
        torch.cuda.set_device(rank % ngpus)
        os.environ.setdefault("ANYEP_TIMEOUT_S", "10")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        import deep_ep
        buf = deep_ep.ElasticBuffer(dist.group.WORLD, num_max_tokens_per_rank=T_MAX, hidden=H, num_topk=K,
                                    explicitly_destroy=True)
        ctx = Ctx(buf, rank, world)
        for check in CHECKS:
            t0 = time.time()
            try:
                check(ctx)
                torch.cuda.synchronize()
                buf.check_async_error()
                results[check.__name__] = "ok"
            except Exception:
                results[check.__name__] = traceback.format_exc()
            print(f"rank {rank}: {check.__name__} {'ok' if results[check.__name__] == 'ok' else 'FAILED'} "
                  f"({time.time() - t0:.1f} s)", flush=True)
            dist.barrier()
        buf.destroy()
    except Exception:
        results["setup"] = traceback.format_exc()
    queue.put((rank, results))


_cache = {}


def run_world(name):
    if name not in _cache:
        world, ngpus, env = WORLDS[name]
        _cache[name] = run_processes(worker, world, ngpus, {**env, "ANYEP_TEST_WORLD": name})
    return _cache[name]


@pytest.mark.parametrize("world", list(WORLDS))
@pytest.mark.parametrize("check", [c.__name__ for c in CHECKS])
def test_elastic(world, check):
    nranks, ngpus, _ = WORLDS[world]
    visible = torch.cuda.device_count()
    if visible < ngpus:
        pytest.skip(f"{world} needs {ngpus} GPUs, {visible} visible")
    assert_check_passed(run_world(world), check, nranks)
