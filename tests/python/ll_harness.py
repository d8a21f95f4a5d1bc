"""Multi-process harness for the LL tests: every rank runs the same list of checks against a
torch reference computed from all ranks' inputs (each rank regenerates the others' inputs from
their seeds). Results come back as {check: "ok" | failure text} per rank."""
import datetime
import faulthandler
import os
import sys
import time
import traceback

import torch
import torch.distributed as dist

FP8_MAX = 448.0


def make_inputs(seed, n, hidden, k, num_experts, drop=0.15, exclude=None, device="cuda", x_scale=1.0):
    """Tokens, routing (distinct experts per token, some -1, some tokens routed nowhere), weights.
    x_scale scales the tokens (small tokens: most LogFMT groups encode)."""
    g = torch.Generator().manual_seed(seed)
    x = torch.randn(n, hidden, generator=g) * (torch.rand(n, 1, generator=g) * 4 + 0.1) * x_scale
    scores = torch.rand(n, num_experts, generator=g)
    if exclude is not None:
        scores[:, exclude] = -1.0
    idx = scores.topk(k, dim=1).indices.to(torch.int64)
    idx[torch.rand(n, k, generator=g) < drop] = -1
    if n > 2:
        idx[1] = -1  # a token that goes nowhere
    w = torch.rand(n, k, generator=g).float()
    return x.to(torch.bfloat16).to(device), idx.to(device), w.to(device)


def expert_scale(num_experts, device="cuda"):
    return (0.5 + (torch.arange(num_experts, device=device) % 5).float() * 0.25)


def ref_scales(x_rows, round_scale):
    g = x_rows.float().view(x_rows.size(0), -1, 128)
    s = g.abs().amax(dim=2).clamp(min=1e-4) / FP8_MAX
    if round_scale:
        s = torch.exp2(torch.ceil(torch.log2(s)))
    return s


def unpack_ue8m0(packed):
    """int32 [rows, G/4] -> float scales [rows, G]."""
    p = packed.to(torch.int64) & 0xFFFFFFFF
    b = torch.stack([(p >> (8 * j)) & 0xFF for j in range(4)], dim=2).reshape(p.size(0), -1)
    return torch.exp2(b.float() - 127.0)


def check_dispatch(me, world, L, T, inputs, recv, recv_count, handle, mode, masked=()):
    """inputs[s] = (x, idx, w) of rank s; mode in bf16 / fp8 / ue8m0; a rank in `masked` sends
    nothing (shrink mode)."""
    src_info, layout_range = handle[0], handle[1]
    assert handle[2] == T and handle[4] == L * world, f"handle tail {handle[2:]}"
    rc = recv_count.cpu()
    lr = layout_range.cpu()
    si = src_info.cpu()
    for l in range(L):
        e = me * L + l
        spans = []
        for s in range(world):
            x_s, idx_s, _ = inputs[s]
            tokens = (idx_s == e).any(dim=1).nonzero().flatten().cpu()
            if s in masked:
                tokens = tokens[:0]
            begin, count = int(lr[l, s]) >> 32, int(lr[l, s]) & 0xFFFFFFFF
            assert count == tokens.numel(), f"expert {e} from rank {s}: count {count}, expected {tokens.numel()}"
            rows = si[l, begin:begin + count]
            assert sorted(rows.tolist()) == tokens.tolist(), f"expert {e} from rank {s}: wrong source tokens"
            spans.append((begin, count))
            if count == 0:
                continue
            ref = x_s[rows.to(x_s.device)]
            if mode == "bf16":
                got = recv[l, begin:begin + count]
                assert torch.equal(got, ref), f"expert {e} from rank {s}: BF16 payload differs"
            else:
                q, sc = recv
                got = q[l, begin:begin + count].float()
                if mode == "fp8":
                    scales = sc[l, begin:begin + count].float()
                    want = ref_scales(ref, False)
                    assert torch.allclose(scales, want, rtol=1e-5, atol=0), f"expert {e} from rank {s}: scales differ"
                else:
                    scales = unpack_ue8m0(sc[l, begin:begin + count])
                    want = ref_scales(ref, True)
                    assert torch.equal(scales, want), f"expert {e} from rank {s}: UE8M0 scales differ"
                full = scales.repeat_interleave(128, dim=1)
                deq = got * full
                err = (deq - ref.float()).abs()
                bound = 0.0625 * ref.float().abs() + full * 2.0 ** -7
                assert bool((err <= bound).all()), f"expert {e} from rank {s}: FP8 payload off by {float(err.max())}"
        spans.sort()
        pos = 0
        for b, c in spans:
            assert b == pos, f"expert {e}: layout ranges not packed: {spans}"
            pos += c
        assert int(rc[l]) == pos, f"expert {e}: recv_count {int(rc[l])}, expected {pos}"


def expert_outputs(me, L, recv_bf16, scale):
    return (recv_bf16.float() * scale[me * L:(me + 1) * L, None, None]).to(torch.bfloat16)


def combine_ref(x, idx, w, scale):
    valid = idx >= 0
    s = scale[idx.clamp(min=0)]  # [N, K]
    contrib = (x.float()[:, None, :] * s[:, :, None]).to(torch.bfloat16).float()
    return (contrib * (w * valid)[:, :, None]).sum(dim=1)


def without_masked(idx, masked, L):
    """topk_idx as the combine of a shrink-mode buffer sees it: experts of masked ranks contribute
    nothing (as -1 entries)."""
    if not masked:
        return idx
    out = idx.clone()
    owner = idx.clamp(min=0) // L
    for m in masked:
        out[(idx >= 0) & (owner == m)] = -1
    return out


def check_combine(out, x, idx, w, scale, what):
    ref = combine_ref(x, idx, w, scale)
    torch.testing.assert_close(out.float(), ref, rtol=2e-2, atol=2e-2, msg=lambda m: f"{what}: {m}")


# ---- LogFMT (use_logfmt=True combine): a torch reference of the format (src/kernels/ll/logfmt.h) ----
LOGFMT_GROUP, LOGFMT_STEPS, LOGFMT_RANGE = 128, 510, 32.0


def logfmt_round_trip(rows):
    """What LogFMT makes of BF16 rows [..., H] (float32 result): per group of 128 values with
    amax < 1, log2(amin) > log2(amax) - 32 clipped, amin < amax, all finite: values rounded to the
    nearest of 511 log-spaced levels between amin and amax (or 0); other groups unchanged. torch's
    log2/exp2 differ from the GPU's approximations, so a value near the middle of two levels may land
    on the other one: compare with a tolerance. Also returns the per-group "encoded" mask."""
    v = rows.float().reshape(*rows.shape[:-1], -1, LOGFMT_GROUP)
    a = v.abs()
    finite = torch.isfinite(v).all(dim=-1, keepdim=True)
    amax = a.amax(dim=-1, keepdim=True)
    amin = a.amin(dim=-1, keepdim=True)
    log_amax = torch.log2(amax)
    log_amin = torch.maximum(torch.log2(amin), log_amax - LOGFMT_RANGE)
    enc = finite & (log_amax < 0) & (log_amin < log_amax)
    step = torch.where(enc, (log_amax - log_amin) / LOGFMT_STEPS, torch.ones_like(amax))
    bias = 2 - torch.log2((1 + torch.exp2(step)) / 2) / step - log_amin / step
    code = torch.floor(torch.clamp(torch.log2(a) / step + bias, min=0, max=LOGFMT_STEPS + 1))
    dec = torch.where(code > 0, torch.exp2((code - 1) * step + log_amin), torch.zeros_like(a)) * torch.sign(v)
    out = torch.where(enc, dec, v)
    return out.reshape(rows.shape), enc.squeeze(-1)


def calc_diff(x, y):
    """DeepEP's accuracy measure (tests/utils.py at 567632d): 1 - cosine-like similarity of x+1, y+1."""
    x, y = x.double() + 1, y.double() + 1
    return (1 - 2 * (x * y).sum() / (x * x + y * y).sum()).item()


def combine_ref_logfmt(x, idx, w, scale):
    """combine_ref with every expert output row through logfmt_round_trip; also the fraction of
    the rows' groups that encode."""
    valid = idx >= 0
    s = scale[idx.clamp(min=0)]
    rows = (x.float()[:, None, :] * s[:, :, None]).to(torch.bfloat16)  # what each expert returns
    dec, enc = logfmt_round_trip(rows)
    frac = float(enc[valid].float().mean()) if bool(valid.any()) else 0.0
    return (dec * (w * valid)[:, :, None]).sum(dim=1), frac


def check_combine_logfmt(out, x, idx, w, scale, what):
    """A LogFMT combine against (1) the exact reference with DeepEP's bound for a BF16 dispatch
    (calc_diff < 1e-5, tests/test_low_latency.py), (2) the torch LogFMT reference: the output must
    follow the LogFMT levels (much closer to it than to the exact sum), which shows that the rows
    travelled encoded, and no NaN."""
    assert not bool(torch.isnan(out).any()), f"{what}: NaN in the output"
    exact = combine_ref(x, idx, w, scale)
    emul, frac = combine_ref_logfmt(x, idx, w, scale)
    diff = calc_diff(exact, out.float())
    assert diff < 1e-5, f"{what}: calc_diff {diff:.3g} >= 1e-5 (DeepEP's bound for a BF16 dispatch)"
    # Elementwise: the BF16 rounding of the output, plus a level (4.4%) where torch's log2 and the
    # GPU's disagree about the nearest level.
    torch.testing.assert_close(out.float(), emul, rtol=5e-2, atol=1e-3, msg=lambda m: f"{what} (LogFMT reference): {m}")
    # Groups that no row of the token encodes travel as BF16: only the output's rounding remains.
    _, enc = logfmt_round_trip((x.float()[:, None, :] * scale[idx.clamp(min=0)][:, :, None]).to(torch.bfloat16))
    plain = ~((enc & (idx >= 0)[:, :, None]).any(dim=1))  # [N, G]
    plain = plain.repeat_interleave(LOGFMT_GROUP, dim=1)
    torch.testing.assert_close(out.float()[plain], exact[plain], rtol=1e-2, atol=1e-4,
                               msg=lambda m: f"{what} (groups left in BF16): {m}")
    if frac > 0.5:
        # Both references rounded to BF16 as the output is: what is left against the LogFMT one is
        # a level that torch's log2 placed otherwise, against the exact one the LogFMT rounding.
        e_exact = float(((out.float() - exact.to(torch.bfloat16).float()) ** 2).sum())
        e_emul = float(((out.float() - emul.to(torch.bfloat16).float()) ** 2).sum())
        assert e_emul < 0.1 * e_exact, \
            f"{what}: output does not follow the LogFMT levels ({frac:.0%} of groups encode; " \
            f"squared error {e_emul:.3g} vs LogFMT reference, {e_exact:.3g} vs exact)"
    return diff, frac


def poison_like(shape, dtype, device="cuda"):
    """Fill, then free, a block of the size the next output will take: the caching allocator
    hands the poisoned block back, so stale data cannot pass for new output."""
    t = torch.empty(shape, dtype=torch.uint8 if dtype.itemsize == 1 else dtype, device=device)
    t.view(torch.uint8).fill_(0xFF)
    del t


def wait_gpu():
    """Wait for the current stream's work, with a blocking call as an application would (the
    cuda-ipc worlds too: docs/transport.md, "CUDA calls in the proxy")."""
    torch.cuda.current_stream().synchronize()


class Ctx:
    def __init__(self, me, world, buf, anyep):
        self.me, self.world, self.buf, self.anyep = me, world, buf, anyep

    def all_inputs(self, seed, n_of, H, K, E, **kw):
        return [make_inputs(seed * 131 + s, n_of(s), H, K, E, **kw) for s in range(self.world)]

    def roundtrip(self, seed, T, H, K, E, mode="bf16", n_of=None, exclude=None, hook=False, async_finish=False,
                  check_comb=True, buf=None, masked=(), logfmt=False, x_scale=1.0):
        """Dispatch and combine on `buf` (default: the world's buffer) and check both against the
        reference; ranks in `masked` (shrink mode) sit the call out and are left out of it.
        logfmt: the combine sends LogFMT (checked with check_combine_logfmt)."""
        me, world, L = self.me, self.world, E // self.world
        buf = buf or self.buf
        n_of = n_of or (lambda s: T - (s % 3))
        inputs = self.all_inputs(seed, n_of, H, K, E, exclude=exclude, x_scale=x_scale)
        x, idx, w = inputs[me]
        poison_like((L, world * T, H), torch.bfloat16 if mode == "bf16" else torch.float8_e4m3fn)
        stats = torch.full((L,), 7, dtype=torch.int32, device="cuda")  # the call adds to what is there
        recv, cnt, handle, ev, hk = buf.low_latency_dispatch(
            x, idx, T, E, use_fp8=(mode != "bf16"), round_scale=(mode == "ue8m0"), use_ue8m0=(mode == "ue8m0"),
            async_finish=async_finish, return_recv_hook=hook, cumulative_local_expert_recv_stats=stats)
        if hook:
            assert hk is not None
            hk()
        else:
            assert hk is None
        if async_finish:
            ev.current_stream_wait()
        wait_gpu()
        check_dispatch(me, world, L, T, inputs, recv, cnt, handle, mode, masked)
        assert torch.equal(stats, cnt.to(torch.int32) + 7), \
            f"cumulative_local_expert_recv_stats {stats.tolist()} != 7 + the received counts {cnt.tolist()}"
        if not check_comb:
            return
        scale = expert_scale(E)
        recv_bf16 = recv if mode == "bf16" else None
        if recv_bf16 is None:
            return
        y = expert_outputs(me, L, recv_bf16, scale)
        out = torch.full((x.size(0), H), float("nan"), dtype=torch.bfloat16, device="cuda")
        comb, ev2, hk2 = buf.low_latency_combine(y, idx, w, handle, async_finish=async_finish,
                                                       return_recv_hook=hook, out=out, use_logfmt=logfmt)
        if hook:
            hk2()
        if async_finish:
            ev2.current_stream_wait()
        wait_gpu()
        assert comb.data_ptr() == out.data_ptr()
        if logfmt:
            return check_combine_logfmt(comb, x, without_masked(idx, masked, L), w, scale, f"LogFMT combine seed {seed}")
        check_combine(comb, x, without_masked(idx, masked, L), w, scale, f"combine seed {seed}")


# ---- checks ---------------------------------------------------------------------------------------
H_SMALL, T_SMALL, K_SMALL = 2048, 64, 6


def e_small(world):
    return 6 * world


def c_bf16_random(c):
    c.roundtrip(1, T_SMALL, H_SMALL, K_SMALL, e_small(c.world))


def c_fp8_float_scales(c):
    c.roundtrip(2, T_SMALL, H_SMALL, K_SMALL, e_small(c.world), mode="fp8")


def c_fp8_ue8m0(c):
    c.roundtrip(3, T_SMALL, H_SMALL, K_SMALL, e_small(c.world), mode="ue8m0")


def c_receive_nothing(c):
    E = e_small(c.world)
    L = E // c.world
    last = list(range((c.world - 1) * L, E))  # the last rank's experts receive nothing
    c.roundtrip(4, T_SMALL, H_SMALL, K_SMALL, E, exclude=last + [0], n_of=lambda s: 0 if s == 0 else T_SMALL - s)


def c_hook(c):
    c.roundtrip(5, T_SMALL, H_SMALL, K_SMALL, e_small(c.world), hook=True)


def c_logfmt(c):
    """LogFMT combine (use_logfmt=True), plain, hook and async: small tokens (most groups encode,
    some stay BF16) and full-size ones (most stay BF16), against the exact reference with DeepEP's
    bound (calc_diff < 1e-5) and against a torch model of the format; then a BF16 combine on the
    same buffer is whole again."""
    E = e_small(c.world)
    c.roundtrip(30, T_SMALL, H_SMALL, K_SMALL, E, logfmt=True, x_scale=0.15)
    c.roundtrip(31, T_SMALL, H_SMALL, K_SMALL, E, logfmt=True, x_scale=0.15, hook=True)
    c.roundtrip(32, T_SMALL, H_SMALL, K_SMALL, E, logfmt=True, x_scale=0.05, async_finish=True)
    c.roundtrip(33, T_SMALL, H_SMALL, K_SMALL, E, logfmt=True)
    c.roundtrip(34, T_SMALL, H_SMALL, K_SMALL, E)
    # The same call twice gives the same bits, BF16 and LogFMT (the receive sums the slots in slot
    # order; DeepEP's --pressure-test compares hashes of 20 reruns). A dispatch per combine: through
    # the proxy, combines of one handle stage their rows in the same dispatch slots.
    L = E // c.world
    x, idx, w = c.all_inputs(35, lambda s: T_SMALL, H_SMALL, K_SMALL, E, x_scale=0.15)[c.me]
    outs = []
    for lf in (False, False, True, True):
        recv, _, handle, _, _ = c.buf.low_latency_dispatch(x, idx, T_SMALL, E, use_fp8=False)
        outs.append(c.buf.low_latency_combine(expert_outputs(c.me, L, recv, expert_scale(E)), idx, w, handle,
                                              use_logfmt=lf)[0])
    wait_gpu()
    assert torch.equal(outs[0], outs[1]), "two equal BF16 combines differ"
    assert torch.equal(outs[2], outs[3]), "two equal LogFMT combines differ"
    assert not torch.equal(outs[0], outs[2]), "LogFMT and BF16 combines are identical: nothing was encoded"


def small_shape(c):
    """(E, T, H, K, L, per-expert scale) of the small checks."""
    E = e_small(c.world)
    return E, T_SMALL, H_SMALL, K_SMALL, E // c.world, expert_scale(E)


def c_hook_two_microbatches(c):
    """Two staged dispatches in flight (double buffering), received and combined afterwards."""
    E, T, H, K, L, scale = small_shape(c)
    mbs = []
    for seed in (61, 62):
        inputs = c.all_inputs(seed, lambda s: T - s, H, K, E)
        r = c.buf.low_latency_dispatch(inputs[c.me][0], inputs[c.me][1], T, E, use_fp8=False, return_recv_hook=True)
        mbs.append((inputs, r))
    for _, r in mbs:
        r[4]()
    wait_gpu()
    outs = []
    for inputs, (recv, cnt, handle, _, _) in mbs:
        check_dispatch(c.me, c.world, L, T, inputs, recv, cnt, handle, "bf16")
        x, idx, w = inputs[c.me]
        comb, _, hk = c.buf.low_latency_combine(expert_outputs(c.me, L, recv, scale), idx, w, handle,
                                                return_recv_hook=True)
        outs.append((comb, hk, inputs))
    for comb, hk, inputs in outs:
        hk()
    wait_gpu()
    for comb, hk, inputs in outs:
        x, idx, w = inputs[c.me]
        check_combine(comb, x, idx, w, scale, "two micro-batches")


def c_async(c):
    c.roundtrip(6, T_SMALL, H_SMALL, K_SMALL, e_small(c.world), async_finish=True)


def c_cuda_graph(c):
    E, T, H, K, L, scale = small_shape(c)
    x_s = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")
    idx_s = torch.full((T, K), -1, dtype=torch.int64, device="cuda")
    w_s = torch.zeros(T, K, dtype=torch.float32, device="cuda")

    def step():
        recv, cnt, handle, _, _ = c.buf.low_latency_dispatch(x_s, idx_s, T, E, use_fp8=False)
        out, _, _ = c.buf.low_latency_combine(expert_outputs(c.me, L, recv, scale), idx_s, w_s, handle)
        return recv, cnt, handle, out

    wait_gpu()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        recv, cnt, handle, out = step()
    for it in range(4):
        inputs = c.all_inputs(700 + it, lambda s: T, H, K, E)
        x, idx, w = inputs[c.me]
        x_s.copy_(x)
        idx_s.copy_(idx)
        w_s.copy_(w)
        out.fill_(float("nan"))
        graph.replay()
        wait_gpu()
        check_dispatch(c.me, c.world, L, T, inputs, recv, cnt, handle, "bf16")
        check_combine(out, x, idx, w, scale, f"graph replay {it}")
    del graph


def c_cuda_graph_replay(c):
    """Dispatch + combine, plain and in hook mode, captured in one CUDA graph and replayed 100 times;
    before each replay fresh inputs are copied into the captured input tensors; every 10th replay
    (and the last) is checked against the reference."""
    E, T, H, K, L, scale = small_shape(c)
    x_s = torch.zeros(T, H, dtype=torch.bfloat16, device="cuda")
    idx_s = torch.full((T, K), -1, dtype=torch.int64, device="cuda")
    w_s = torch.zeros(T, K, dtype=torch.float32, device="cuda")

    def step(hook):
        recv, cnt, handle, _, hk = c.buf.low_latency_dispatch(x_s, idx_s, T, E, use_fp8=False, return_recv_hook=hook)
        if hook:
            hk()
        out, _, hk2 = c.buf.low_latency_combine(expert_outputs(c.me, L, recv, scale), idx_s, w_s, handle,
                                                 return_recv_hook=hook)
        if hook:
            hk2()
        return recv, cnt, handle, out

    wait_gpu()
    dist.barrier()
    graph = torch.cuda.CUDAGraph()
    with torch.cuda.graph(graph):
        results = [step(False), step(True)]
    replays = 100
    for it in range(replays):
        checked = it % 10 == 9 or it == replays - 1
        # Every replay gets fresh inputs; the other ranks' inputs (regenerated on the CPU, the slow
        # part) are needed only for the reference of a checked replay.
        if checked:
            inputs = c.all_inputs(900 + it, lambda s: T, H, K, E)
            x, idx, w = inputs[c.me]
        else:
            x, idx, w = make_inputs((900 + it) * 131 + c.me, T, H, K, E)
        x_s.copy_(x)
        idx_s.copy_(idx)
        w_s.copy_(w)
        for r in results:
            r[3].fill_(float("nan"))
        graph.replay()
        if checked:
            wait_gpu()
            for (recv, cnt, handle, out), what in zip(results, ("plain", "hook")):
                check_dispatch(c.me, c.world, L, T, inputs, recv, cnt, handle, "bf16")
                check_combine(out, x, idx, w, scale, f"graph replay {it} ({what})")
    wait_gpu()
    del graph


def small_buffer(c, T, H, E, env=None, **kw):
    """A Buffer of its own for shape (T, H, E) (a collective call), built with `env` applied (the
    runtime reads ANYEP_TIMEOUT_S, ANYEP_LL_CHECK_INPUTS at construction) and restored after."""
    saved = {k: os.environ.get(k) for k in (env or {})}
    os.environ.update(env or {})
    try:
        return c.anyep.Buffer(dist.group.WORLD, 0, c.anyep.Buffer.get_low_latency_rdma_size_hint(T, H, c.world, E),
                              low_latency_mode=True, explicitly_destroy=True, **kw)
    finally:
        for k, v in saved.items():
            if v is None:
                os.environ.pop(k, None)
            else:
                os.environ[k] = v


def query_mask(buf, world):
    status = torch.full((world,), 7, dtype=torch.int32, device="cuda")
    buf.low_latency_query_mask_buffer(status)
    return status.tolist()


def c_mask_rank(c):
    """Shrink mode (enable_shrink=True), rank masking: the last rank is masked by the others, who
    run dispatch + combine (plain and hook) without it and get results that leave it out (its
    tokens and its experts); query reports it; unmasking (update with mask=False, and clean)
    restores it, and after clean_low_latency_buffer a round trip with every rank is whole again.
    Without shrink mode the mask calls raise."""
    E, T, H, K = e_small(c.world), 32, 1024, 4
    zeros = [0] * c.world
    expect_error(ValueError, "enable_shrink=True", lambda: c.buf.low_latency_update_mask_buffer(0, True))
    expect_error(ValueError, "enable_shrink=True",
                 lambda: c.buf.low_latency_query_mask_buffer(torch.zeros(c.world, dtype=torch.int32, device="cuda")))
    expect_error(ValueError, "enable_shrink=True", c.buf.low_latency_clean_mask_buffer)
    buf = small_buffer(c, T, H, E, enable_shrink=True)
    try:
        assert query_mask(buf, c.world) == zeros, "a new buffer has a rank masked"
        expect_error(ValueError, "rank_to_mask", lambda: buf.low_latency_update_mask_buffer(c.world, True))
        expect_error(ValueError, "rank_to_mask", lambda: buf.low_latency_update_mask_buffer(-1, True))
        expect_error(ValueError, "mask_status must be Int",
                     lambda: buf.low_latency_query_mask_buffer(torch.zeros(c.world, dtype=torch.int64, device="cuda")))
        m = c.world - 1
        if c.world > 1 and c.me != m:
            buf.low_latency_update_mask_buffer(m, True)
            assert query_mask(buf, c.world) == [int(r == m) for r in range(c.world)]
            # An even number of calls: the buffer halves stay in step with rank m, which sits out.
            for it in range(2):
                c.roundtrip(800 + it, T, H, K, E, buf=buf, masked={m}, hook=(it == 1))
            assert query_mask(buf, c.world) == [int(r == m) for r in range(c.world)]
            buf.low_latency_update_mask_buffer(m, False)
            assert query_mask(buf, c.world) == zeros, "update_mask_buffer(mask=False) did not unmask"
            buf.low_latency_update_mask_buffer(m, True)
            buf.low_latency_clean_mask_buffer()
            assert query_mask(buf, c.world) == zeros, "clean_mask_buffer did not unmask"
        elif c.world == 1:
            buf.low_latency_update_mask_buffer(0, True)
            assert query_mask(buf, 1) == [1]
            buf.low_latency_clean_mask_buffer()
            assert query_mask(buf, 1) == [0]
        wait_gpu()
        buf.check_async_error()
        buf.clean_low_latency_buffer(T, H, E)  # every rank, rank m included
        c.roundtrip(810, T, H, K, E, buf=buf)
        c.roundtrip(811, T, H, K, E, buf=buf, hook=True)
        wait_gpu()
        buf.check_async_error()
    finally:
        dist.barrier()
        buf.destroy()


def dead_rank_setup(c):
    """(E, T, H, K, the rank that plays dead: the last, its own shrink-mode Buffer with a 2 s timeout)."""
    E, T, H = e_small(c.world), 32, 1024
    return E, T, H, 4, c.world - 1, small_buffer(c, T, H, E, env={"ANYEP_TIMEOUT_S": "2"}, enable_shrink=True)


def c_dead_rank(c):
    """Shrink mode, a dead rank: the last rank skips a dispatch and its combine; the others (a 2 s
    timeout) finish the call with it masked, no error, and results without it; then every rank
    cleans and a round trip with every rank is whole again. Needs 2 or more ranks."""
    if c.world < 2:
        return
    E, T, H, K, d, buf = dead_rank_setup(c)
    try:
        if c.me != d:
            t0 = time.time()
            # Rank d's counts never come: the wait times out after 2 s and masks it.
            c.roundtrip(820, T, H, K, E, buf=buf, masked={d})
            assert query_mask(buf, c.world) == [int(r == d) for r in range(c.world)], "the dead rank is not masked"
            buf.check_async_error()  # masked, not failed
            assert time.time() - t0 < 60, f"the survivors took {time.time() - t0:.0f} s"
            buf.low_latency_clean_mask_buffer()
        dist.barrier()  # rank d comes back once the survivors are done
        buf.clean_low_latency_buffer(T, H, E)
        c.roundtrip(821, T, H, K, E, buf=buf)
        wait_gpu()
        buf.check_async_error()
        assert query_mask(buf, c.world) == [0] * c.world
    finally:
        dist.barrier()
        buf.destroy()


def c_dead_rank_clean(c):
    """Shrink mode, a rank dead during clean_low_latency_buffer: the last rank skips a clean; the
    others' clean (a 2 s timeout) masks it instead of hanging, with no error, and round trips
    without it work; then it is unmasked, every rank cleans (the survivors took back their arrival
    at the barrier it missed, so the counts agree) and a round trip with every rank is whole again.
    Needs 2 or more ranks."""
    if c.world < 2:
        return
    E, T, H, K, d, buf = dead_rank_setup(c)
    try:
        c.roundtrip(830, T, H, K, E, buf=buf)
        wait_gpu()
        if c.me != d:
            t0 = time.time()
            buf.clean_low_latency_buffer(T, H, E)  # rank d does not come: masked after the timeout
            assert time.time() - t0 < 60, f"the survivors' clean took {time.time() - t0:.0f} s"
            assert query_mask(buf, c.world) == [int(r == d) for r in range(c.world)], "the dead rank is not masked"
            buf.check_async_error()  # masked, not failed
            for it in range(2):  # an even number of calls: the halves stay in step
                c.roundtrip(831 + it, T, H, K, E, buf=buf, masked={d}, logfmt=(it == 1), x_scale=0.15)
            wait_gpu()
            buf.low_latency_clean_mask_buffer()
        dist.barrier()  # rank d comes back once the survivors are done
        buf.clean_low_latency_buffer(T, H, E)
        assert query_mask(buf, c.world) == [0] * c.world, "a rank was masked in the clean with every rank"
        c.roundtrip(833, T, H, K, E, buf=buf)
        wait_gpu()
        buf.check_async_error()
    finally:
        dist.barrier()
        buf.destroy()


def ll_iters():
    """Round trips of c_200_iterations: ANYEP_TEST_LL_ITERS (default 200). The one-GPU worlds set
    a few: their processes are time-sliced on one GPU (slow but correct)."""
    v = os.environ.get("ANYEP_TEST_LL_ITERS", "200")
    if not v.isdigit() or int(v) < 1:
        raise ValueError(f"ANYEP_TEST_LL_ITERS={v!r}: expected a positive number of round trips")
    return int(v)


def c_200_iterations(c):
    """Many back-to-back round trips (ll_iters(), 200 unless the world asks for fewer), both formats,
    token counts changing every call."""
    E, T, H, K = e_small(c.world), 32, 1024, 4
    modes = ["bf16", "fp8"]
    for it in range(ll_iters()):
        c.roundtrip(10_000 + it, T, H, K, E, mode=modes[it % 2], n_of=lambda s, it=it: (it * 7 + s * 5) % (T + 1))


def c_deepep_shape(c):
    """128 tokens/rank, hidden 7168, top-8, 288 experts: FP8 dispatch, then BF16 round trip."""
    c.roundtrip(20, 128, 7168, 8, 288, mode="fp8")
    c.roundtrip(21, 128, 7168, 8, 288, mode="bf16")
    c.roundtrip(22, 128, 7168, 8, 288, mode="bf16", logfmt=True, x_scale=0.15)  # 56 groups: two mask words


def expect_error(exc, fragment, fn):
    try:
        fn()
    except exc as e:
        assert fragment in str(e), f"error message {str(e)!r} does not name {fragment!r}"
        return
    raise AssertionError(f"expected {exc.__name__} mentioning {fragment!r}")


def c_bad_input(c):
    E, T, H, K = e_small(c.world), T_SMALL, H_SMALL, K_SMALL
    x, idx, w = make_inputs(9, T, H, K, E)
    b = c.buf
    expect_error(ValueError, "x must be BFloat16", lambda: b.low_latency_dispatch(x.float(), idx, T, E))
    expect_error(ValueError, "dimensions", lambda: b.low_latency_dispatch(x[0], idx, T, E))
    expect_error(ValueError, "topk_idx must be Long", lambda: b.low_latency_dispatch(x, idx.int(), T, E))
    expect_error(ValueError, "hidden must be a multiple of 128",
                 lambda: b.low_latency_dispatch(x[:, :100].contiguous(), idx, T, E))
    bad = idx.clone()
    bad[3, 0] = E
    # The host check of topk_idx values is opt-in (ANYEP_LL_CHECK_INPUTS=1: a copy and a sync per
    # call); a buffer built with it refuses before any kernel runs.
    checked = small_buffer(c, T, H, E, env={"ANYEP_LL_CHECK_INPUTS": "1"})
    try:
        expect_error(ValueError, "topk_idx holds values", lambda: checked.low_latency_dispatch(x, bad, T, E))
        bad_low = bad.clone()
        bad_low[3, 0] = -2
        expect_error(ValueError, "topk_idx holds values", lambda: checked.low_latency_dispatch(x, bad_low, T, E))
    finally:
        dist.barrier()
        checked.destroy()
    # Without it (the default) the kernels refuse the expert and the next call raises; every rank
    # makes the same call, so the dispatch itself completes.
    b.low_latency_dispatch(x, bad, T, E, use_fp8=False)
    wait_gpu()
    expect_error(ValueError, f"topk_idx holds expert {E}", b.check_async_error)
    b.clean_low_latency_buffer(T, H, E)
    x_big, idx_big, _ = make_inputs(9, T + 1, H, K, E)
    expect_error(ValueError, "more than num_max_dispatch_tokens_per_rank",
                 lambda: b.low_latency_dispatch(x_big, idx_big, T, E))
    expect_error(ValueError, "buffer too small", lambda: b.low_latency_dispatch(x, idx, 100_000, E))
    expect_error(ValueError, "use_ue8m0 needs", lambda: b.low_latency_dispatch(x, idx, T, E, use_ue8m0=True))
    expect_error(ValueError, "cannot be combined",
                 lambda: b.low_latency_dispatch(x, idx, T, E, async_finish=True, return_recv_hook=True))
    if c.world > 1:  # with one rank every expert count is a multiple of the rank count
        expect_error(ValueError, "not a multiple", lambda: b.low_latency_dispatch(x, idx, T, E + 1))
    # Combine: a real handle, wrong tensors.
    recv, cnt, handle, _, _ = b.low_latency_dispatch(x, idx, T, E, use_fp8=False)
    wait_gpu()
    # One row short of [L, R*T, H] (recv[:, :T] would be the whole tensor with one rank).
    expect_error(ValueError, "x must have shape", lambda: b.low_latency_combine(recv[:, 1:].contiguous(), idx, w, handle))
    expect_error(ValueError, "topk_weights must be Float", lambda: b.low_latency_combine(recv, idx, w.double(), handle))
    expect_error(ValueError, "handle", lambda: b.low_latency_combine(recv, idx, w, (handle[0].clone(),) + handle[1:]))
    expect_error(ValueError, "use_logfmt and zero_copy",
                 lambda: b.low_latency_combine(recv, idx, w, handle, use_logfmt=True, zero_copy=True))
    # The state is still consistent: a correct combine for that dispatch works.
    scale = expert_scale(E)
    out, _, _ = b.low_latency_combine(expert_outputs(c.me, E // c.world, recv, scale), idx, w, handle)
    wait_gpu()
    check_combine(out, x, idx, w, scale, "combine after bad input")


ALL_CHECKS = [c_bad_input, c_bf16_random, c_fp8_float_scales, c_fp8_ue8m0, c_receive_nothing, c_hook, c_logfmt,
              c_hook_two_microbatches, c_async, c_cuda_graph, c_cuda_graph_replay, c_mask_rank, c_dead_rank,
              c_dead_rank_clean, c_200_iterations, c_deepep_shape]


def run_check(check, ctx, buf, progress, results):
    """Run check(ctx), wait for the GPU and raise a device error it left; record "ok" or the
    traceback under the check's name in `results` and log the outcome with its time (the HT
    harnesses use it too)."""
    t0 = time.time()
    try:
        check(ctx)
        wait_gpu()
        buf.check_async_error()
        results[check.__name__] = "ok"
    except Exception:
        results[check.__name__] = traceback.format_exc()
    progress(f"{check.__name__}: {'ok' if results[check.__name__] == 'ok' else 'FAILED'} ({time.time() - t0:.1f} s)")


def select_checks(all_checks, env_name):
    """`env_name`=name,name,... runs only those checks (a short device run); unset: all of
    `all_checks`. c_timeout is named that way too (timeout_selected). Shared with ht_harness."""
    names = [n.strip() for n in os.environ.get(env_name, "").split(",") if n.strip()]
    if not names:
        return list(all_checks)
    by_name = {c.__name__: c for c in all_checks}
    unknown = [n for n in names if n not in by_name and n != "c_timeout"]
    if unknown:
        raise ValueError(f"{env_name} names unknown checks {unknown}; known: {sorted(by_name)} and c_timeout")
    return [by_name[n] for n in names if n in by_name]


def timeout_selected(env_name="ANYEP_TEST_LL_CHECKS"):
    names = os.environ.get(env_name, "")
    return not names.strip() or "c_timeout" in names.split(",")


CHECKS = select_checks(ALL_CHECKS, "ANYEP_TEST_LL_CHECKS")


def c_timeout(me, world, anyep):
    """Only rank 0 dispatches: its kernel gives up after ANYEP_TIMEOUT_S and the next call names the
    silent peer. Run last, on its own small buffer."""
    os.environ["ANYEP_TIMEOUT_S"] = "1"
    E, T, H = 2 * world, 8, 256
    buf = anyep.Buffer(dist.group.WORLD, 0, anyep.Buffer.get_low_latency_rdma_size_hint(T, H, world, E),
                       low_latency_mode=True, explicitly_destroy=True)
    try:
        if me == 0:
            x, idx, _ = make_inputs(5, T, H, 2, E, drop=0.0)
            buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)
            wait_gpu()
            expect_error(TimeoutError, "from rank", buf.check_async_error)
            try:
                buf.check_async_error()
            except TimeoutError as e:
                peer = int(str(e).split("from rank ")[1].split()[0])
                assert peer != 0, f"timeout names rank {peer}, expected a silent peer: {e}"
        dist.barrier()
        buf.clean_low_latency_buffer(T, H, E)
        buf.check_async_error()  # cleared
    finally:
        buf.destroy()


KILLED_CHECKS = ("c_killed_shrink", "c_killed_plain")


def _names_rank(msg, r):
    """Whether an error text names rank r as the peer ("... from rank 1", "to rank 1", ...)."""
    import re
    return re.search(rf"\brank {r}\b(?!:)", msg) is not None


def _raised(exc, fn):
    """The exception `fn` raised, which must be an `exc` (a type or a tuple of types)."""
    try:
        fn()
    except exc as e:
        return e
    names = " or ".join(t.__name__ for t in (exc if isinstance(exc, tuple) else (exc,)))
    raise AssertionError(f"expected {names}, nothing was raised")


def killed_rank(c, victim, events, progress):
    """A process of the world is killed (SIGKILL, by the test process) between LL calls.

    Every rank builds a second, shrink-mode buffer, and both buffers make a few round trips with
    every rank. Then, between calls, `victim` sets events[0] and waits to be killed; the test
    process kills it and sets events[1]. The survivors, without any collective from then on:
      c_killed_shrink: the shrink buffer's next round trip completes within ANYEP_TIMEOUT_S + 10 s
        with the victim masked (query_mask, no error, results without it), and the one after it
        takes less than ANYEP_TIMEOUT_S (a masked rank is not waited for);
      c_killed_plain: the plain buffer's next dispatch ends within ANYEP_TIMEOUT_S + 10 s and
        check_async_error raises TimeoutError naming the victim (over the proxy the failed post to
        it may come first: RuntimeError naming it), and the call after it raises the same before
        launching anything.
    Returns {check: "ok" | failure text} for this rank (the victim only returns if it was not
    killed within 60 s)."""
    ready, killed = events
    timeout_s = float(os.environ["ANYEP_TIMEOUT_S"])
    E, T, H, K = e_small(c.world), 32, 1024, 4
    sbuf = small_buffer(c, T, H, E, enable_shrink=True)  # collective: before the kill
    for it in range(3):
        c.roundtrip(870 + it, T, H, K, E)
        c.roundtrip(875 + it, T, H, K, E, buf=sbuf, hook=(it == 1))
    wait_gpu()
    c.buf.check_async_error()
    sbuf.check_async_error()
    dist.barrier()  # every rank is between calls
    if c.me == victim:
        progress("3 round trips on each buffer done; waiting to be killed (SIGKILL)")
        ready.set()
        time.sleep(60)
        return {k: f"rank {victim} was not killed within 60 s of asking" for k in KILLED_CHECKS}
    if not killed.wait(timeout=90):
        return {k: f"the test process did not report rank {victim} killed within 90 s" for k in KILLED_CHECKS}
    progress(f"rank {victim} was killed; next calls (ANYEP_TIMEOUT_S={timeout_s:g})")
    out = {}
    try:
        t0 = time.time()
        c.roundtrip(880, T, H, K, E, buf=sbuf, masked={victim})
        first = time.time() - t0
        assert query_mask(sbuf, c.world) == [int(r == victim) for r in range(c.world)], \
            f"rank {victim} is not masked: {query_mask(sbuf, c.world)}"
        sbuf.check_async_error()  # masked, not failed
        assert first < timeout_s + 10, f"the call that masked rank {victim} took {first:.1f} s"
        t0 = time.time()
        c.roundtrip(881, T, H, K, E, buf=sbuf, masked={victim}, hook=True)
        second = time.time() - t0
        sbuf.check_async_error()
        assert second < timeout_s, f"the call after the mask took {second:.1f} s: the masked rank was waited for"
        progress(f"c_killed_shrink: rank {victim} masked, the call completed in {first:.1f} s, the next in {second:.1f} s")
        out["c_killed_shrink"] = "ok"
    except Exception:
        out["c_killed_shrink"] = traceback.format_exc()
    try:
        x, idx, _ = make_inputs(885 * 131 + c.me, T, H, K, E, drop=0.0)
        t0 = time.time()
        c.buf.low_latency_dispatch(x, idx, T, E, use_fp8=False)
        wait_gpu()
        # Over the proxy a post to the dead process can fail before the kernel's wait times out.
        plain_exc = TimeoutError if os.environ.get("ANYEP_LL_PATH", "auto") == "auto" else (TimeoutError, RuntimeError)
        err = _raised(plain_exc, c.buf.check_async_error)
        took = time.time() - t0
        progress(f"c_killed_plain: after {took:.1f} s: {err}")
        assert _names_rank(str(err), victim), f"the error does not name rank {victim}: {err}"
        assert took < timeout_s + 10, f"the failing call ended after {took:.1f} s (bound {timeout_s + 10:g} s)"
        err2 = _raised(plain_exc, lambda: c.buf.low_latency_dispatch(x, idx, T, E, use_fp8=False))
        assert _names_rank(str(err2), victim), f"the next call's error does not name rank {victim}: {err2}"
        out["c_killed_plain"] = "ok"
    except Exception:
        out["c_killed_plain"] = traceback.format_exc()
    sbuf.destroy()
    return out


class Progress:
    """Per-rank progress lines, flushed at once (a killed run still shows how far it got)."""

    def __init__(self, rank, world, prefix="ll"):
        # The world's name (test_ll.py sets it): worlds with the same process count keep their own logs.
        self.name = os.environ.get("ANYEP_TEST_WORLD") or f"w{world}"
        d = os.environ.get("ANYEP_TEST_LOG_DIR", "")
        self.f = open(os.path.join(d, f"{prefix}_{self.name}_r{rank}.log"), "w") if d else None
        self.rank = rank

    def __call__(self, msg):
        line = f"{time.strftime('%H:%M:%S')} {self.name} rank {self.rank}: {msg}"
        print(line, flush=True)
        if self.f:
            self.f.write(line + "\n")
            self.f.flush()


def settle(buf, progress):
    """After a check: if any rank saw a device error, every rank cleans its buffer, so one failure
    costs one timeout instead of cascading into the following checks."""
    wait_gpu()
    err = 0
    try:
        buf.check_async_error()
    except Exception as e:  # reported by the check itself
        progress(f"device error: {e}")
        err = 1
    flag = torch.tensor([err])
    dist.all_reduce(flag)
    if int(flag) > 0:
        progress("cleaning the buffer after a device error on some rank")
        buf.clean_low_latency_buffer(8, 128, 2 * dist.get_world_size())
    dist.barrier()


def worker(rank, world, ngpus, port, queue, env=None, events=None):
    """One rank of a world: `world` processes on `ngpus` GPUs, rank r on GPU r % ngpus (ngpus=1:
    every rank shares GPU 0). `env` is applied before anyep reads it (path, provider, chaos seed,
    iteration count). Puts (rank, {check: "ok" | failure text}) on `queue`. With
    ANYEP_TEST_KILL_RANK set (a killed-rank world), runs killed_rank(..., events) instead of the
    checks, and no collective after it (a rank is dead)."""
    os.environ.update(env or {})  # before anyep reads it (path, provider)
    results = {}
    progress = Progress(rank, world)
    faulthandler.enable(file=progress.f or sys.stderr)
    faulthandler.dump_traceback_later(int(os.environ.get("ANYEP_TEST_STACKS_AFTER_S", "240")), exit=False,
                                      file=progress.f or sys.stderr)
    try:
        torch.cuda.set_device(rank % ngpus)
        os.environ.setdefault("ANYEP_TIMEOUT_S", "5")
        dist.init_process_group("gloo", init_method=f"tcp://127.0.0.1:{port}", rank=rank, world_size=world,
                                timeout=datetime.timedelta(seconds=120))
        import anyep
        import deep_ep
        assert deep_ep.Buffer is anyep.Buffer
        size = max(anyep.Buffer.get_low_latency_rdma_size_hint(128, 7168, world, 288),
                   anyep.Buffer.get_low_latency_rdma_size_hint(T_SMALL, H_SMALL, world, e_small(world)))
        buf = deep_ep.Buffer(dist.group.WORLD, 0, size, low_latency_mode=True, num_qps_per_rank=1)
        paths = buf.describe_paths()
        progress(f"buffer of {size} bytes connected on GPU {rank % ngpus}: {paths}")
        # The world really takes the path it names (a proxy world must not fall back to NVLink),
        # and a chaos world's proxy endpoints really are wrapped (the transport factory applies
        # ANYEP_CHAOS_SEED; the chaos transport names itself "chaos(<inner>)").
        want_proxy = (env or {}).get("ANYEP_LL_PATH", "auto") != "auto" and world > 1
        want_chaos = want_proxy and bool(os.environ.get("ANYEP_CHAOS_SEED"))  # the world's or inherited
        assert ("proxy (" in paths) == want_proxy and ("direct stores to ranks" in paths), paths
        assert ("chaos(" in paths) == want_chaos, f"chaos wrapper {'missing' if want_chaos else 'unexpected'}: {paths}"
        # A world whose provider registers GPU memory (the emulated NIC with its GPU mover) must keep
        # the LL buffer in GPU memory instead of falling back to host staging.
        if (env or {}).get("ANYEP_TEST_LL_GPU_MEMORY") == "1":
            assert "host-staged buffer" not in paths, f"LL buffer host-staged, expected GPU memory (FI_HMEM): {paths}"
        ctx = Ctx(rank, world, buf, anyep)
        victim = os.environ.get("ANYEP_TEST_KILL_RANK")
        if victim:
            results.update(killed_rank(ctx, int(victim), events, progress))
            for check in KILLED_CHECKS:
                progress(f"{check}: {'ok' if results[check] == 'ok' else 'FAILED'}")
        for check in [] if victim else CHECKS:
            run_check(check, ctx, buf, progress, results)
            settle(buf, progress)
        if not victim and timeout_selected():
            t0 = time.time()
            try:
                if world > 1:
                    c_timeout(rank, world, anyep)
                results["c_timeout"] = "ok"
            except Exception:
                results["c_timeout"] = traceback.format_exc()
            progress(f"c_timeout: {'ok' if results['c_timeout'] == 'ok' else 'FAILED'} ({time.time() - t0:.1f} s)")
        if not victim:  # after a kill the process group has a dead member: no collective
            dist.barrier()
            del buf
            dist.destroy_process_group()
    except Exception:
        results["setup"] = traceback.format_exc()
        progress("setup failed")
    for name, r in results.items():
        if r != "ok":
            progress(f"{name} failure:\n{r}")
    faulthandler.cancel_dump_traceback_later()
    queue.put((rank, results))
