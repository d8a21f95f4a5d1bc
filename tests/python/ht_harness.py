"""Multi-process harness for the HT (high-throughput) tests: every rank runs the same list of
checks against a pure-torch reference computed from all ranks' inputs. Each rank regenerates the
others' inputs from their seeds on the GPU (a cuda torch.Generator: the same numbers in every
process of the machine) and an all_gather of every rank's checksums proves that the regenerated
inputs are the ones the ranks used. Results come back as {check: "ok" | failure text} per rank."""
import datetime
import faulthandler
import os
import re
import sys
import time
import traceback
from collections import namedtuple

import torch
import torch.distributed as dist

from ll_harness import Ctx as LLCtx
from ll_harness import Progress, poison_like, run_check, select_checks, wait_gpu
from ll_harness import timeout_selected as ll_timeout_selected

FP8_MAX = 448.0
MAX_HIDDEN = 7168
# Config arguments (num_sms, nvl send chunk, nvl receive ring): two SM counts whose outputs must be
# identical; every Buffer here is sized for all of them and for the default tables.
CONFIG_A = (24, 8, 256)
CONFIG_B = (8, 4, 128)

# fmt: bf16 | fp8 (float scales, row-major) | fp8c (float scales, column-major as DeepEP's test
# makes them) | fp8i (packed int32 scales, carried as bytes). routing: random | skewed (expert 0
# is every token's choice) | nothing (no token routed to the last rank) | masked (every slot -1).
# L: experts per rank (0: 256 experts in all). bias: how many bias tensors combine adds.
Case = namedtuple("Case", "name T H K L routing fmt align topk bias")
CASES = [
    Case("bf16_random", 128, 2048, 8, 8, "random", "bf16", 1, True, 0),
    Case("bf16_top1_one_token", 1, 2048, 1, 8, "random", "bf16", 1, True, 1),
    Case("fp8_colmajor_scales", 256, 4096, 4, 8, "random", "fp8c", 4, True, 2),
    Case("fp8_skewed_hot_expert", 512, 7168, 6, 8, "skewed", "fp8", 128, True, 1),
    Case("fp8_packed_int_scales", 64, 2048, 3, 8, "random", "fp8i", 1, True, 0),
    Case("rank_receives_nothing", 200, 2048, 3, 8, "nothing", "bf16", 1, True, 2),
    Case("all_masked", 100, 2048, 4, 8, "masked", "bf16", 1, True, 1),
    Case("no_topk", 96, 3072, 5, 8, "random", "bf16", 1, False, 0),
    Case("deepep_shape_bf16", 4096, 7168, 8, 0, "random", "bf16", 1, True, 2),
    Case("deepep_shape_fp8", 4096, 7168, 8, 0, "random", "fp8c", 1, True, 0),
]


def ht_iters():
    """Iterations of c_back_to_back: ANYEP_TEST_HT_ITERS (default 20; the one-GPU worlds set fewer)."""
    v = os.environ.get("ANYEP_TEST_HT_ITERS", "20")
    if not v.isdigit() or int(v) < 1:
        raise ValueError(f"ANYEP_TEST_HT_ITERS={v!r}: expected a positive number of iterations")
    return int(v)


def num_experts_of(case, world):
    return 256 if case.L == 0 else case.L * world


def tokens_of(case, s):
    """Tokens of rank s: the ranks differ a little (at least 1)."""
    return max(1, case.T - (s % 3) * max(1, case.T // 10))


# ---- inputs ---------------------------------------------------------------------------------------
def make_inputs(seed, n, H, K, E, world, routing, fmt):
    """One rank's inputs: dict(x=bf16 tokens, send=what dispatch gets (tensor or (q, scales)),
    idx=int64 [n, K], w=float [n, K])."""
    g = torch.Generator(device="cuda").manual_seed(seed)
    x = torch.randn(n, H, generator=g, device="cuda") * (torch.rand(n, 1, generator=g, device="cuda") * 4 + 0.1)
    x = x.to(torch.bfloat16)
    scores = torch.rand(n, E, generator=g, device="cuda")
    L = E // world
    if routing == "skewed":
        scores[:, 0] = 2.0
    if routing == "nothing" and world > 1:
        scores[:, (world - 1) * L:] = -1.0
    idx = scores.topk(K, dim=1).indices.to(torch.int64)
    drop = torch.rand(n, K, generator=g, device="cuda") < 0.1
    if routing == "skewed":
        drop[:, 0] = False  # the hot expert (topk column 0, score 2) stays
    idx[drop] = -1
    if routing == "masked" or (routing == "nothing" and world == 1):
        idx.fill_(-1)
    w = torch.rand(n, K, generator=g, device="cuda").float() + 0.1
    if fmt == "bf16":
        send = x
    elif fmt == "fp8i":
        q = (x.float() * 0.5).to(torch.float8_e4m3fn)
        send = (q, torch.randint(-2**31, 2**31 - 1, (n, H // 512), generator=g, device="cuda", dtype=torch.int32))
    else:
        q, s = cast_to_fp8(x)
        send = (q, s.T.contiguous().T if fmt == "fp8c" else s)
    return {"x": x, "send": send, "idx": idx, "w": w, "n": n}


def cast_to_fp8(x):
    """Per-token, per-128-channel e4m3 cast with float scales (DeepEP's tests' per_token_cast_to_fp8)."""
    n, H = x.shape
    g = x.float().view(n, H // 128, 128)
    amax = g.abs().amax(dim=2).clamp(min=1e-4)
    q = (g * (FP8_MAX / amax[:, :, None])).to(torch.float8_e4m3fn).view(n, H)
    return q, amax / FP8_MAX


def as_bf16(sent):
    """The BF16 rows the expert computes on, from what was dispatched (or received): BF16 as is,
    FP8 dequantized with float scales, FP8 with packed scales taken at face value."""
    if isinstance(sent, torch.Tensor):
        return sent
    q, s = sent
    if s.dtype == torch.int32:
        return q.float().to(torch.bfloat16)
    n, H = q.shape
    return (q.float().view(n, H // 128, 128) * s.float()[:, :, None]).view(n, H).to(torch.bfloat16)


def rank_scale(r):
    """The factor rank r's 'expert' multiplies its rows by before combine (so every rank's share of
    a token's sum is distinguishable)."""
    return 0.5 + 0.25 * r


def expert_out(rows_bf16, r):
    return (rows_bf16.float() * rank_scale(r)).to(torch.bfloat16)


def in_rank_of(idx, L, world):
    """[n, world] bool: token goes to rank r (one of its experts lives there)."""
    owner = torch.where(idx >= 0, idx // L, torch.full_like(idx, world))
    m = torch.zeros(idx.size(0), world + 1, dtype=torch.bool, device=idx.device)
    m.scatter_(1, owner, True)
    return m[:, :world]


def align_up(v, a):
    return (v + a - 1) // a * a


def reference(me, world, E, inputs, align):
    """What rank `me` must receive: rows ordered by source rank, then token index."""
    L = E // world
    ref = {"me": me, "x": [], "idx": [], "w": [], "src": [], "counts": torch.zeros(world, world, dtype=torch.int64)}
    per_expert = torch.zeros(L, dtype=torch.int64, device="cuda")
    for s, inp in enumerate(inputs):
        m = in_rank_of(inp["idx"], L, world)
        ref["counts"][s] = m.sum(dim=0).cpu()
        toks = m[:, me].nonzero().flatten()
        idx = inp["idx"][toks]
        local = (idx >= me * L) & (idx < (me + 1) * L)
        ref["idx"].append(torch.where(local, idx - me * L, torch.full_like(idx, -1)))
        ref["w"].append(torch.where(local, inp["w"][toks], torch.zeros_like(inp["w"][toks])))
        ref["x"].append(sent_rows(inp["send"], toks))
        ref["src"].append(toks.to(torch.int32))
        valid = inp["idx"][inp["idx"] >= 0]
        per_expert += torch.bincount(valid, minlength=E)[me * L:(me + 1) * L]
    ref["idx"] = torch.cat(ref["idx"])
    ref["w"] = torch.cat(ref["w"])
    ref["src"] = torch.cat(ref["src"])
    ref["x"] = cat_sent(ref["x"])
    ref["M"] = int(ref["src"].numel())
    ref["list"] = [align_up(int(v), align) for v in per_expert.tolist()]
    ref["rank_prefix"] = ref["counts"].cumsum(dim=0).to(torch.int32)
    return ref


def sent_rows(sent, toks):
    if isinstance(sent, torch.Tensor):
        return sent[toks]
    return sent[0][toks], sent[1][toks]


def cat_sent(parts):
    if isinstance(parts[0], torch.Tensor):
        return torch.cat(parts)
    return torch.cat([p[0] for p in parts]), torch.cat([p[1] for p in parts])


def combine_reference(mine, L, world, biases):
    """The combined rows of this rank's tokens: the sum over the ranks a token went to of that
    rank's expert output (in float), plus the biases."""
    base = as_bf16(mine["send"])
    m = in_rank_of(mine["idx"], L, world)
    out = torch.zeros(base.shape, dtype=torch.float32, device="cuda")
    for r in range(world):
        out += m[:, r, None].float() * expert_out(base, r).float()
    for b in biases:
        out += b.float()
    # combined_topk_weights: each (token, slot) comes back from the one rank owning its expert,
    # scaled there by rank_scale (0 for a -1 slot).
    idx = mine["idx"]
    owner = idx.clamp(min=0) // L
    scale = (0.5 + 0.25 * owner.float()) * (idx >= 0)
    return out, mine["w"] * scale


# ---- checks of outputs ------------------------------------------------------------------------------
def same_sent(got, want, what):
    if isinstance(want, torch.Tensor):
        assert isinstance(got, torch.Tensor), f"{what}: recv_x is a {type(got).__name__}, expected a tensor"
        assert got.dtype == want.dtype and got.shape == want.shape, \
            f"{what}: recv_x {got.dtype} {tuple(got.shape)}, expected {want.dtype} {tuple(want.shape)}"
        assert torch.equal(got.view(torch.uint8) if got.dtype.itemsize == 1 else got,
                           want.view(torch.uint8) if want.dtype.itemsize == 1 else want), f"{what}: recv_x differs"
        return
    assert isinstance(got, tuple) and len(got) == 2, f"{what}: recv_x must be a (tokens, scales) tuple"
    same_sent(got[0], want[0], what + " (tokens)")
    assert got[1].dtype == want[1].dtype and got[1].shape == want[1].shape, \
        f"{what}: scales {got[1].dtype} {tuple(got[1].shape)}, expected {want[1].dtype} {tuple(want[1].shape)}"
    assert torch.equal(got[1], want[1]), f"{what}: received scales differ"


def head_rows(sent, m):
    if isinstance(sent, torch.Tensor):
        return sent[:m]
    return sent[0][:m], sent[1][:m]


def check_dispatch(out, ref, case, world, what, layout):
    recv_x, recv_idx, recv_w, lst, handle, _ = out
    num_tokens_per_rank, is_token_in_rank = layout
    M = ref["M"]
    same_sent(recv_x, ref["x"], what)
    if case.topk:
        assert recv_idx is not None and recv_w is not None, f"{what}: no recv_topk_idx/recv_topk_weights"
        assert recv_idx.dtype == torch.int64 and recv_w.dtype == torch.float32, f"{what}: top-k dtypes"
        assert torch.equal(recv_idx, ref["idx"]), f"{what}: recv_topk_idx differs"
        assert torch.equal(recv_w, ref["w"]), f"{what}: recv_topk_weights differ (0 expected where the id is -1)"
    else:
        assert recv_idx is None and recv_w is None, f"{what}: top-k outputs without topk_idx"
    assert list(lst) == ref["list"], f"{what}: num_recv_tokens_per_expert_list {list(lst)}, expected {ref['list']}"
    check_handle(handle, ref, world, what, num_tokens_per_rank, is_token_in_rank, M)


def check_handle(handle, ref, world, what, num_tokens_per_rank, is_token_in_rank, rows):
    assert isinstance(handle, tuple) and len(handle) == 6, f"{what}: handle is not a 6-tuple"
    rank_prefix, chan_prefix, recv_chan_prefix, src_idx, itir, send_head = handle
    assert torch.equal(rank_prefix.cpu(), ref["rank_prefix"]), \
        f"{what}: rank_prefix_matrix {rank_prefix.tolist()}, expected {ref['rank_prefix'].tolist()}"
    assert src_idx.numel() == rows, f"{what}: recv_src_idx has {src_idx.numel()} rows, expected {rows}"
    assert torch.equal(src_idx[:ref["M"]].to(torch.int32), ref["src"]), f"{what}: recv_src_idx differs"
    assert torch.equal(itir, is_token_in_rank), f"{what}: handle[4] is not the is_token_in_rank given"
    assert tuple(send_head.shape) == tuple(is_token_in_rank.shape), f"{what}: send_head shape {tuple(send_head.shape)}"
    assert chan_prefix.dim() == 2 and chan_prefix.size(0) == world and recv_chan_prefix.shape == chan_prefix.shape, \
        f"{what}: channel prefix matrices {tuple(chan_prefix.shape)} / {tuple(recv_chan_prefix.shape)}"
    cp = chan_prefix.cpu().long()
    assert bool((cp[:, 1:] >= cp[:, :-1]).all()), f"{what}: channel_prefix_matrix rows are not prefix sums"
    assert torch.equal(cp[:, -1], num_tokens_per_rank.cpu().long()), \
        f"{what}: channel_prefix_matrix's last column {cp[:, -1].tolist()} != num_tokens_per_rank"
    rp = recv_chan_prefix.cpu().long()
    me_counts = ref["counts"][:, ref["me"]]
    assert bool((rp[:, 0] == 0).all()) and bool((rp[:, 1:] >= rp[:, :-1]).all()) and \
        bool((rp[:, -1] <= me_counts).all()), f"{what}: recv_channel_prefix_matrix {rp.tolist()} is not a start table"


def check_combine(combined, combined_w, ref_x, ref_w, with_w, what):
    assert combined.dtype == torch.bfloat16 and combined.shape == ref_x.shape, \
        f"{what}: combined_x {combined.dtype} {tuple(combined.shape)}, expected bf16 {tuple(ref_x.shape)}"
    got = combined.float()
    assert not bool(torch.isnan(got).any()), f"{what}: combined_x has NaN"
    diff = calc_diff(got, ref_x)
    assert diff < 5e-6, f"{what}: combined_x calc_diff {diff:.3g} >= 5e-6"
    # One BF16 rounding of a float sum: within 2^-8 relative, plus rounding of the bias terms.
    torch.testing.assert_close(got, ref_x, rtol=2 ** -7, atol=2e-3, msg=lambda m: f"{what}: {m}")
    if with_w:
        assert combined_w is not None and combined_w.dtype == torch.float32, f"{what}: combined_topk_weights"
        torch.testing.assert_close(combined_w, ref_w, rtol=1e-6, atol=1e-7,
                                   msg=lambda m: f"{what}: combined_topk_weights: {m}")
    else:
        assert combined_w is None, f"{what}: combined_topk_weights without topk_weights"


def calc_diff(x, y):
    """DeepEP's tests' similarity measure (1 - cosine-like similarity of x+1 and y+1)."""
    x, y = x.double() + 1, y.double() + 1
    return float(1 - 2 * (x * y).sum() / (x * x + y * y).sum())


# ---- the context of a world -------------------------------------------------------------------------
class HTCtx:
    def __init__(self, me, world, buf, anyep):
        self.me, self.world, self.buf, self.anyep = me, world, buf, anyep
        self.cfg_a = anyep.Config(*CONFIG_A)
        self.cfg_b = anyep.Config(*CONFIG_B)

    def inputs(self, seed, case, n_of=None):
        """Every rank's inputs for a case (regenerated here), verified against the ranks' own."""
        E = num_experts_of(case, self.world)
        n_of = n_of or (lambda s: tokens_of(case, s))
        inputs = [make_inputs(seed * 1009 + s, n_of(s), case.H, case.K, E, self.world, case.routing, case.fmt)
                  for s in range(self.world)]
        sums = [checksum(inp) for inp in inputs]
        theirs = [None] * self.world
        dist.all_gather_object(theirs, sums[self.me])
        assert theirs == sums, f"regenerated inputs differ from the ranks' own: {theirs} vs {sums}"
        return inputs, E

    def layout(self, inp, E, **kw):
        per_rank, per_rdma, per_expert, in_rank, ev = self.buf.get_dispatch_layout(inp["idx"], E, **kw)
        assert per_rdma is None, "num_tokens_per_rdma_rank must be None (intranode)"
        return per_rank, per_expert, in_rank, ev

    def dispatch(self, inp, layout, case, config, **kw):
        per_rank, per_expert, in_rank = layout[:3]
        args = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                    expert_alignment=case.align, config=config)
        if case.topk:
            args.update(topk_idx=inp["idx"], topk_weights=inp["w"])
        args.update(kw)
        return self.buf.dispatch(inp["send"], **args)


def checksum(inp):
    x = inp["x"].double().sum().item()
    return (round(x, 6), int(inp["idx"].sum().item()), round(inp["w"].double().sum().item(), 6), inp["n"])


def biases_for(case, inp, seed):
    g = torch.Generator(device="cuda").manual_seed(seed)
    b = [torch.randn(inp["n"], case.H, generator=g, device="cuda").to(torch.bfloat16) for _ in range(case.bias)]
    return b, (None if case.bias == 0 else b[0] if case.bias == 1 else (b[0], b[1]))


def run_case(c, case, seed):
    """Layout, dispatch (two SM counts), cached dispatch, num_worst_tokens dispatch, combine (with
    the exact and the worst-case handles), each against the reference."""
    me, world = c.me, c.world
    inputs, E = c.inputs(seed, case)
    L = E // world
    mine = inputs[me]
    ref = reference(me, world, E, inputs, case.align)

    # Layout.
    per_rank, per_expert, in_rank, _ = c.layout(mine, E)
    want_in_rank = in_rank_of(mine["idx"], L, world)
    assert per_rank.dtype == torch.int32 and per_expert.dtype == torch.int32 and in_rank.dtype == torch.bool
    assert torch.equal(in_rank, want_in_rank), "is_token_in_rank differs"
    assert torch.equal(per_rank.long(), want_in_rank.sum(dim=0)), "num_tokens_per_rank differs"
    valid = mine["idx"][mine["idx"] >= 0]
    assert torch.equal(per_expert.long(), torch.bincount(valid, minlength=E)), "num_tokens_per_expert differs"
    layout = (per_rank, per_expert, in_rank)

    # Dispatch at two SM counts: both right, and identical.
    poison_like((max(ref["M"], 1), case.H), torch.bfloat16 if case.fmt == "bf16" else torch.float8_e4m3fn)
    out_a = c.dispatch(mine, layout, case, c.cfg_a)
    check_dispatch(out_a, ref, case, world, f"dispatch {CONFIG_A}", (per_rank, in_rank))
    out_b = c.dispatch(mine, layout, case, c.cfg_b)
    check_dispatch(out_b, ref, case, world, f"dispatch {CONFIG_B}", (per_rank, in_rank))
    handle = out_a[4]

    # Cached dispatch (the handle's layout, no top-k; the handle's SM count).
    cached = c.buf.dispatch(mine["send"], handle=handle, config=c.cfg_a)
    assert cached[1:5] == (None, None, None, None), "a cached dispatch returns None for top-k, list and handle"
    same_sent(cached[0], ref["x"], "cached dispatch")

    # Combine with the exact handle, both configs.
    biases, bias_arg = biases_for(case, mine, seed + 7)
    ref_x, ref_w = combine_reference(mine, L, world, biases)
    y = expert_out(as_bf16(out_a[0]), me)
    w_in = out_a[2] * rank_scale(me) if case.topk else None
    # Each dispatch's handle with its own config (the channel tables are [R, channels of num_sms]).
    for cfg, name, h in ((c.cfg_a, CONFIG_A, handle), (c.cfg_b, CONFIG_B, out_b[4])):
        combined, combined_w, _ = c.buf.combine(y, h, topk_weights=w_in, bias=bias_arg, config=cfg)
        check_combine(combined, combined_w, ref_x, ref_w, case.topk, f"combine {name}, {case.bias} bias")

    if not case.topk:
        return
    # num_worst_tokens: no host sync; the first M rows are the exact path's, the rest have id -1.
    worst = sum(inp["n"] for inp in inputs)
    out_w = c.dispatch(mine, layout, case, c.cfg_a, num_worst_tokens=worst)
    recv_w_x, recv_w_idx, recv_w_w, lst, handle_w, _ = out_w
    assert list(lst) == [], f"num_worst_tokens: the list must be empty, got {lst}"
    rows = recv_w_idx.size(0)
    assert rows == worst and recv_w_w.size(0) == worst, f"num_worst_tokens: {rows} rows, expected {worst}"
    same_sent(head_rows(recv_w_x, ref["M"]), ref["x"], "num_worst_tokens dispatch")
    assert torch.equal(recv_w_idx[:ref["M"]], ref["idx"]), "num_worst_tokens: recv_topk_idx prefix differs"
    assert torch.equal(recv_w_w[:ref["M"]], ref["w"]), "num_worst_tokens: recv_topk_weights prefix differs"
    assert bool((recv_w_idx[ref["M"]:] == -1).all()), "num_worst_tokens: rows past the count must have topk -1"
    check_handle(handle_w, ref, world, "num_worst_tokens handle", per_rank, in_rank, worst)
    # Combine through the worst-case handle: rows past the count are ignored (garbage here).
    y_w = torch.full((worst, case.H), float("nan"), dtype=torch.bfloat16, device="cuda")
    y_w[:ref["M"]] = y
    w_w = torch.full((worst, case.K), float("nan"), dtype=torch.float32, device="cuda")
    w_w[:ref["M"]] = w_in
    combined, combined_w, _ = c.buf.combine(y_w, handle_w, topk_weights=w_w, bias=bias_arg, config=c.cfg_a)
    check_combine(combined, combined_w, ref_x, ref_w, True, "combine through the num_worst_tokens handle")


def case_check(case, seed):
    def check(c):
        run_case(c, case, seed)
    check.__name__ = f"c_case_{case.name}"
    return check


# ---- other checks -------------------------------------------------------------------------------------
SMALL = Case("small", 96, 2048, 4, 8, "random", "bf16", 1, True, 1)


def c_default_config(c):
    """config=None takes get_dispatch_config / get_combine_config (DeepEP's table, or the next
    larger rank count's row); the tables and the fallback."""
    B, Config = c.anyep.Buffer, c.anyep.Config
    for n, want in ((1, (24, 256)), (2, (24, 256)), (3, (6, 256)), (8, (6, 256)), (9, (36, 288)), (200, (28, 720))):
        got = B.get_dispatch_config(n)
        assert isinstance(got, Config) and got.num_sms == B.num_sms, f"get_dispatch_config({n})"
        assert (got.num_max_nvl_chunked_send_tokens, got.num_max_nvl_chunked_recv_tokens) == want, \
            f"get_dispatch_config({n}): {got.num_max_nvl_chunked_send_tokens}, {got.num_max_nvl_chunked_recv_tokens}"
    assert B.get_combine_config(2).num_max_nvl_chunked_send_tokens == 10
    assert B.get_combine_config(5).num_max_nvl_chunked_send_tokens == 4
    inputs, E = c.inputs(31, SMALL)
    mine = inputs[c.me]
    ref = reference(c.me, c.world, E, inputs, 1)
    per_rank, per_expert, in_rank, _ = c.layout(mine, E)
    out = c.dispatch(mine, (per_rank, per_expert, in_rank), SMALL, None)
    check_dispatch(out, ref, SMALL, c.world, "dispatch with config=None", (per_rank, in_rank))
    biases, bias_arg = biases_for(SMALL, mine, 38)
    ref_x, ref_w = combine_reference(mine, E // c.world, c.world, biases)
    combined, combined_w, _ = c.buf.combine(expert_out(out[0], c.me), out[4], topk_weights=out[2] * rank_scale(c.me),
                                            bias=bias_arg)
    check_combine(combined, combined_w, ref_x, ref_w, True, "combine with config=None")


def delayed_copy(dst, src):
    """Write `src` into `dst` on the current stream behind a ~50 ms GPU sleep: a call that does
    not wait for the current stream (or the previous_event) reads the old contents."""
    sleep = getattr(torch.cuda, "_sleep", None)
    if sleep is not None:
        sleep(50_000_000)
    dst.copy_(src)


def c_async_previous_event(c):
    """previous_event, async_finish and allocate_on_comm_stream on layout, dispatch and combine:
    the inputs are written behind a GPU sleep on the current stream just before each call, so a
    call that did not wait for the event (or the current stream) reads stale data."""
    me, world = c.me, c.world
    inputs, E = c.inputs(41, SMALL)
    mine = inputs[me]
    L = E // world
    ref = reference(me, world, E, inputs, 1)
    buf = c.buf
    idx_in = torch.full_like(mine["idx"], -1)
    x_in = torch.zeros_like(mine["x"])
    for mode in ("default", "previous_event", "allocate_on_comm_stream"):
        kw = {}
        idx_in.fill_(-1)
        x_in.zero_()
        delayed_copy(idx_in, mine["idx"])
        if mode != "default":
            kw = dict(previous_event=buf.capture(), async_finish=True,
                      allocate_on_comm_stream=(mode == "allocate_on_comm_stream"))
        per_rank, _, per_expert, in_rank, ev = buf.get_dispatch_layout(idx_in, E, **kw)
        if kw:
            assert ev.event is not None, "async_finish returned no event"
            ev.current_stream_wait()
        else:
            assert ev.event is None, "a call without async_finish returned an event"
        assert torch.equal(in_rank, in_rank_of(mine["idx"], L, world)), f"{mode}: layout read stale topk_idx"
        delayed_copy(x_in, mine["x"])
        if kw:
            kw["previous_event"] = buf.capture()
        recv_x, recv_idx, recv_w, lst, handle, ev = buf.dispatch(
            x_in, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=mine["idx"], topk_weights=mine["w"], config=c.cfg_a, **kw)
        if kw:
            ev.current_stream_wait()
            assert ev.extra_tensors is not None and any(t is recv_x for t in ev.extra_tensors), \
                "the async event does not keep the outputs alive"
        check_dispatch((recv_x, recv_idx, recv_w, lst, handle, ev), ref, SMALL, world, f"{mode} dispatch",
                       (per_rank, in_rank))
        y = torch.zeros_like(recv_x)
        delayed_copy(y, expert_out(recv_x, me))
        if kw:
            kw["previous_event"] = buf.capture()
        combined, combined_w, ev = buf.combine(y, handle, topk_weights=recv_w * rank_scale(me), config=c.cfg_a, **kw)
        if kw:
            ev.current_stream_wait()
        ref_x, ref_w = combine_reference(mine, L, world, [])
        check_combine(combined, combined_w, ref_x, ref_w, True, f"{mode} combine")
    expect_raises(ValueError, "allocate_on_comm_stream",
                  lambda: buf.get_dispatch_layout(mine["idx"], E, async_finish=True, allocate_on_comm_stream=True))
    expect_raises(ValueError, "allocate_on_comm_stream",
                  lambda: buf.dispatch(mine["x"], handle=handle, previous_event=buf.capture(),
                                       allocate_on_comm_stream=True))


def c_cuda_graph(c):
    """get_dispatch_layout + num_worst_tokens dispatch + combine captured in one CUDA graph, then
    replayed with fresh data copied into the captured inputs; every replay checked."""
    me, world = c.me, c.world
    case = Case("graph", 128, 2048, 4, 8, "random", "bf16", 1, True, 1)
    E = num_experts_of(case, world)
    L = E // world
    T, H, K = case.T, case.H, case.K
    worst = T * world
    x_s = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")
    idx_s = torch.full((T, K), -1, dtype=torch.int64, device="cuda")
    w_s = torch.zeros(T, K, dtype=torch.float32, device="cuda")
    b_s = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")

    def step():
        per_rank, _, per_expert, in_rank, _ = c.buf.get_dispatch_layout(idx_s, E)
        recv_x, recv_idx, recv_w, _, handle, _ = c.buf.dispatch(
            x_s, num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
            topk_idx=idx_s, topk_weights=w_s, num_worst_tokens=worst, config=c.cfg_a)
        combined, combined_w, _ = c.buf.combine(expert_out(recv_x, me), handle, topk_weights=recv_w * rank_scale(me),
                                                bias=b_s, config=c.cfg_a)
        return recv_x, recv_idx, recv_w, handle, combined, combined_w

    side = torch.cuda.Stream()  # warm-up outside the graph, as torch recommends
    side.wait_stream(torch.cuda.current_stream())
    with torch.cuda.stream(side):
        step()
    torch.cuda.current_stream().wait_stream(side)
    wait_gpu()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        recv_x, recv_idx, recv_w, handle, combined, combined_w = step()
    for it in range(3):
        inputs, _ = c.inputs(600 + it, case, n_of=lambda s: T)
        mine = inputs[me]
        ref = reference(me, world, E, inputs, 1)
        biases, _ = biases_for(case, mine, 650 + it)
        x_s.copy_(mine["x"])
        idx_s.copy_(mine["idx"])
        w_s.copy_(mine["w"])
        b_s.copy_(biases[0])
        combined.fill_(float("nan"))
        graph.replay()
        wait_gpu()
        M = ref["M"]
        assert torch.equal(recv_x[:M], ref["x"]), f"graph replay {it}: recv_x differs"
        assert torch.equal(recv_idx[:M], ref["idx"]) and bool((recv_idx[M:] == -1).all()), \
            f"graph replay {it}: recv_topk_idx differs"
        assert torch.equal(recv_w[:M], ref["w"]), f"graph replay {it}: recv_topk_weights differ"
        assert torch.equal(handle[0].cpu(), ref["rank_prefix"]), f"graph replay {it}: rank_prefix_matrix differs"
        ref_x, ref_w = combine_reference(mine, L, world, biases)
        check_combine(combined, combined_w, ref_x, ref_w, True, f"graph replay {it} combine")
    wait_gpu()
    dist.barrier()
    del graph


def c_back_to_back(c):
    """ht_iters() round trips with fresh data, token counts changing every call, BF16 and FP8
    alternating, the two configs alternating."""
    for it in range(ht_iters()):
        fmt = ("bf16", "fp8c")[it % 2]
        case = Case("b2b", 160, 2048, 4, 8, "random", fmt, 1 + (it % 3), True, it % 3)
        inputs, E = c.inputs(2000 + it, case, n_of=lambda s, it=it: 1 + (it * 37 + s * 101) % case.T)
        mine = inputs[c.me]
        ref = reference(c.me, c.world, E, inputs, case.align)
        cfg = (c.cfg_a, c.cfg_b)[it % 2]
        per_rank, per_expert, in_rank, _ = c.layout(mine, E)
        out = c.dispatch(mine, (per_rank, per_expert, in_rank), case, cfg)
        check_dispatch(out, ref, case, c.world, f"iteration {it} dispatch", (per_rank, in_rank))
        biases, bias_arg = biases_for(case, mine, 2500 + it)
        ref_x, ref_w = combine_reference(mine, E // c.world, c.world, biases)
        combined, combined_w, _ = c.buf.combine(expert_out(as_bf16(out[0]), c.me), out[4],
                                                topk_weights=out[2] * rank_scale(c.me), bias=bias_arg, config=cfg)
        check_combine(combined, combined_w, ref_x, ref_w, True, f"iteration {it} combine")


def c_both_modes_one_buffer(c):
    """One Buffer with both regions: an LL round trip (checked by the LL harness) between HT round
    trips, each right."""
    T, H, K = 32, 2048, 4
    E = 8 * c.world
    anyep = c.anyep
    ll_bytes = anyep.Buffer.get_low_latency_rdma_size_hint(T, H, c.world, E)
    buf = anyep.Buffer(dist.group.WORLD, buffer_bytes(anyep, c.world), ll_bytes, low_latency_mode=True,
                       explicitly_destroy=True)
    try:
        paths = buf.describe_paths()
        assert "high-throughput: " in paths, f"describe_paths does not name the HT peers: {paths}"
        ht = HTCtx(c.me, c.world, buf, anyep)
        run_case(ht, SMALL, 71)
        LLCtx(c.me, c.world, buf, anyep).roundtrip(72, T, H, K, E)
        run_case(ht, SMALL._replace(fmt="fp8c"), 73)
        wait_gpu()
        buf.check_async_error()
    finally:
        wait_gpu()
        dist.barrier()
        buf.destroy()


def expect_raises(exc, pattern, fn):
    """fn() raises exc with a message matching the regex `pattern` (case-insensitive)."""
    try:
        fn()
    except exc as e:
        assert re.search(pattern, str(e), re.I), f"error message {str(e)!r} does not name /{pattern}/"
        return e
    raise AssertionError(f"expected {exc.__name__} matching /{pattern}/")


def raised_now_or_later(exc, pattern, call, buf):
    """A device-detected bad input: the call raises exc at once, or it completes and the error
    surfaces at check_async_error (the contract: 'the next call (or check_async_error) raises')."""
    try:
        call()
    except exc as e:
        assert re.search(pattern, str(e), re.I), f"error message {str(e)!r} does not name /{pattern}/"
        return
    wait_gpu()
    expect_raises(exc, pattern, buf.check_async_error)


def small_ht_buffer(c, env=None):
    """A Buffer of its own (a collective call), built with `env` applied and restored after."""
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return c.anyep.Buffer(dist.group.WORLD, buffer_bytes(c.anyep, c.world, hidden=2048), explicitly_destroy=True)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def c_bad_input(c):
    """Bad arguments raise ValueError naming the argument before any kernel runs (every rank makes
    the same bad call, so nobody waits); afterwards a correct round trip works. Then the errors the
    kernels find (an expert id >= num_experts, num_worst_tokens too small) on buffers of their own."""
    me, world, b = c.me, c.world, c.buf
    inputs, E = c.inputs(81, SMALL)
    mine = inputs[me]
    x, idx, w = mine["x"], mine["idx"], mine["w"]
    per_rank, per_expert, in_rank, _ = c.layout(mine, E)
    base = dict(num_tokens_per_rank=per_rank, is_token_in_rank=in_rank, num_tokens_per_expert=per_expert,
                topk_idx=idx, topk_weights=w, config=c.cfg_a)

    def disp(xx=x, **kw):
        return lambda: b.dispatch(xx, **{**base, **kw})

    expect_raises(ValueError, r"topk_idx", lambda: b.get_dispatch_layout(idx.int(), E))
    if world > 1:
        expect_raises(ValueError, r"num_experts", lambda: b.get_dispatch_layout(idx, E + 1))
    expect_raises(ValueError, r"\bx\b", disp(x.float()))
    expect_raises(ValueError, r"\bx\b", disp(x[:, :100].contiguous()))
    q, s = cast_to_fp8(x)
    expect_raises(ValueError, r"scale", disp((q, s[:-1].contiguous())))
    expect_raises(ValueError, r"scale", disp((q, s.double())))
    expect_raises(ValueError, r"topk_weights", disp(topk_weights=w.double()))
    expect_raises(ValueError, r"topk_weights", disp(topk_weights=w[:, :-1].contiguous()))
    expect_raises(ValueError, r"topk_idx", disp(topk_idx=idx.int()))
    expect_raises(ValueError, r"is_token_in_rank", disp(is_token_in_rank=in_rank[:-1].contiguous()))
    expect_raises(ValueError, r"num_tokens_per_rank", disp(num_tokens_per_rank=None))
    expect_raises(ValueError, r"expert_alignment", disp(expert_alignment=0))
    expect_raises(ValueError, r"num_worst_tokens", disp(num_worst_tokens=-1))
    expect_raises(ValueError, r"\bx\b", disp((x, s)))  # BF16 tokens with scales
    expect_raises(RuntimeError, r"num_nvl_bytes.*get_nvl_buffer_size_hint|get_nvl_buffer_size_hint.*num_nvl_bytes",
                  lambda: c.no_ht_buffer.get_dispatch_layout(idx, E))
    expect_raises(ValueError, r"one node; call dispatch", lambda: b.internode_dispatch(x))
    expect_raises(ValueError, r"one node; call combine", lambda: b.internode_combine(x))
    # A real handle, wrong combine inputs.
    recv_x, recv_idx, recv_w, _, handle, _ = b.dispatch(x, **base)
    expect_raises(ValueError, r"topk_idx", lambda: b.dispatch(x, handle=handle, topk_idx=idx))
    expect_raises(ValueError, r"\bx\b", lambda: b.combine(recv_x.float(), handle))
    expect_raises(ValueError, r"\bx\b", lambda: b.combine(torch.cat([recv_x, recv_x[:1]]), handle))
    expect_raises(ValueError, r"topk_weights", lambda: b.combine(recv_x, handle, topk_weights=recv_w[:-1]))
    expect_raises(ValueError, r"bias", lambda: b.combine(recv_x, handle, bias=x[:, :-128].contiguous()))
    expect_raises(ValueError, r"bias", lambda: b.combine(recv_x, handle, bias=(x, x, x)))
    expect_raises(ValueError, r"handle", lambda: b.combine(recv_x, handle[:5]))
    # The buffer is sized for the configs above: one with 64 SMs and 1024-token rings needs more.
    expect_raises(ValueError, r"too small|num_nvl_bytes", disp(config=c.anyep.Config(64, 8, 1024)))
    # Still consistent: a correct round trip works.
    ref = reference(me, world, E, inputs, 1)
    out = b.dispatch(x, **base)
    check_dispatch(out, ref, SMALL, world, "dispatch after bad input", (per_rank, in_rank))
    ref_x, ref_w = combine_reference(mine, E // world, world, [])
    combined, combined_w, _ = b.combine(expert_out(out[0], me), out[4], topk_weights=out[2] * rank_scale(me),
                                        config=c.cfg_a)
    check_combine(combined, combined_w, ref_x, ref_w, True, "combine after bad input")

    # An expert id >= num_experts: found by the layout kernel.
    small = small_ht_buffer(c)
    try:
        bad = idx.clone()
        bad[0, 0] = E
        raised_now_or_later(ValueError, rf"topk_idx|expert {E}\b|\b{E}\b", lambda: small.get_dispatch_layout(bad, E),
                            small)
    finally:
        wait_gpu()
        dist.barrier()
        small.destroy()
    # num_worst_tokens smaller than what a rank receives: every token to every rank, 1 worst row.
    small = small_ht_buffer(c)
    try:
        L = E // world
        T = 8
        every = torch.tensor([[r * L for r in range(world)]] * T, dtype=torch.int64, device="cuda")
        xs = x[:T].contiguous()
        pr, _, pe, ir, _ = small.get_dispatch_layout(every, E)
        raised_now_or_later(ValueError, r"num_worst_tokens", lambda: small.dispatch(
            xs, num_tokens_per_rank=pr, is_token_in_rank=ir, num_tokens_per_expert=pe, topk_idx=every,
            topk_weights=torch.ones(T, world, device="cuda"), num_worst_tokens=1, config=c.cfg_a), small)
    finally:
        wait_gpu()
        dist.barrier()
        small.destroy()


def c_timeout(me, world, anyep):
    """Only rank 0 dispatches: it gives up after ANYEP_TIMEOUT_S=1 with a TimeoutError (at once or
    at check_async_error) naming a silent peer. Run last, on its own buffer."""
    saved = os.environ.get("ANYEP_TIMEOUT_S")
    os.environ["ANYEP_TIMEOUT_S"] = "1"
    try:
        buf = anyep.Buffer(dist.group.WORLD, buffer_bytes(anyep, world, hidden=2048), explicitly_destroy=True)
    finally:
        os.environ["ANYEP_TIMEOUT_S"] = saved if saved is not None else "5"
    try:
        if me == 0:
            E = 2 * world
            idx = torch.tensor([[r * 2] for r in range(world)] * 4, dtype=torch.int64, device="cuda")
            x = torch.ones(idx.size(0), 2048, dtype=torch.bfloat16, device="cuda")
            pr, _, pe, ir, _ = buf.get_dispatch_layout(idx, E)
            t0 = time.time()
            err = None
            try:
                buf.dispatch(x, num_tokens_per_rank=pr, is_token_in_rank=ir, num_tokens_per_expert=pe, topk_idx=idx,
                             topk_weights=torch.ones(idx.shape, device="cuda"), config=anyep.Config(*CONFIG_A))
                wait_gpu()
                buf.check_async_error()
            except TimeoutError as e:
                err = e
            assert err is not None, "a dispatch with silent peers did not time out"
            assert time.time() - t0 < 60, f"the timeout took {time.time() - t0:.0f} s"
            peer = re.search(r"rank (\d+)", str(err))
            assert peer and any(int(p) != 0 for p in re.findall(r"rank (\d+)", str(err))), \
                f"the timeout does not name a silent peer: {err}"
        dist.barrier()
    finally:
        buf.destroy()


def buffer_bytes(anyep, world, hidden=MAX_HIDDEN):
    """num_nvl_bytes for every config the checks use, at `hidden` BF16."""
    B, Config = anyep.Buffer, anyep.Config
    configs = [Config(*CONFIG_A), Config(*CONFIG_B), B.get_dispatch_config(world), B.get_combine_config(world)]
    return max(cfg.get_nvl_buffer_size_hint(hidden * 2, world) for cfg in configs)


ALL_CHECKS = [c_bad_input] + [case_check(case, 100 + i) for i, case in enumerate(CASES)] + \
    [c_default_config, c_async_previous_event, c_cuda_graph, c_back_to_back, c_both_modes_one_buffer]


def timeout_selected():
    return ll_timeout_selected("ANYEP_TEST_HT_CHECKS")


CHECKS = select_checks(ALL_CHECKS, "ANYEP_TEST_HT_CHECKS")


def settle(buf, progress):
    """After a check: wait, and report (not raise) a device error, so the next check starts clean
    as far as this rank can tell; every rank meets at a barrier."""
    wait_gpu()
    try:
        buf.check_async_error()
    except Exception as e:  # the check itself reports it
        progress(f"device error after the check: {e}")
    dist.barrier()


def worker(rank, world, ngpus, port, queue, env=None):
    """One rank of a world: `world` processes on `ngpus` GPUs, rank r on GPU r % ngpus. Puts
    (rank, {check: "ok" | failure text}) on `queue`."""
    os.environ.update(env or {})
    results = {}
    progress = Progress(rank, world, prefix="ht")
    faulthandler.enable(file=progress.f or sys.stderr)
    faulthandler.dump_traceback_later(int(os.environ.get("ANYEP_TEST_STACKS_AFTER_S", "240")), exit=False,
                                      file=progress.f or sys.stderr)
    try:
        torch.cuda.set_device(rank % ngpus)
        os.environ.setdefault("ANYEP_TIMEOUT_S", "10")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        import anyep
        import deep_ep
        assert deep_ep.Buffer is anyep.Buffer
        size = buffer_bytes(anyep, world)
        buf = deep_ep.Buffer(dist.group.WORLD, size, 0, explicitly_destroy=True)
        progress(f"HT buffer of {size} bytes connected on GPU {rank % ngpus}: {buf.describe_paths()}")
        ctx = HTCtx(rank, world, buf, anyep)
        ctx.no_ht_buffer = anyep.Buffer(dist.group.WORLD, 0, 0)  # neither region: HT calls must refuse
        for check in CHECKS:
            run_check(check, ctx, buf, progress, results)
            settle(buf, progress)
        if timeout_selected():
            t0 = time.time()
            try:
                if world > 1:
                    c_timeout(rank, world, anyep)
                results["c_timeout"] = "ok"
            except Exception:
                results["c_timeout"] = traceback.format_exc()
            progress(f"c_timeout: {'ok' if results['c_timeout'] == 'ok' else 'FAILED'} ({time.time() - t0:.1f} s)")
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
