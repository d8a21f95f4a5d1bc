"""CPU checks of ElasticBuffer's torch-free half (python/anyep/elastic_plan.py) and of the
deep_ep.utils switch ANYEP_DEEPEP_UTILS, with plain python3: no torch, no GPU, no pytest (ctest runs
the file as a script; pytest collects it too).

- argument checks: each bad constructor, dispatch or combine argument is refused with a ValueError
  (or NotImplementedError) naming it; a cached handle fills and pins the dispatch's settings;
- size and SM/QP hints: what the size hint hands the extension's size function (faked here) and
  that the result is a multiple of 2 MiB; the automatic SM counts; deep_ep's QP arithmetic;
- the summation order of combine: a token's result computed in the order anyep uses
  (`combine_order`: each rank's partial at its last top-k slot, after the bias) is bitwise the
  result of deep_ep V2's reference procedure (group the slots by rank with a stable sort, sum each
  group in slot order, place the BF16 sum at the group's last slot, zeros elsewhere, then add every
  slot in order to the bias), written out here with FP32/BF16 rounding emulated exactly; and the
  rank-ascending order of anyep's HT combine kernel is shown to differ, which is why ElasticBuffer
  does not use that kernel;
- ANYEP_DEEPEP_UTILS: deep_ep.utils.<name> comes from the named checkout's deep_ep/utils folder
  (run in a child process with a minimal stand-in for torch), and a folder without DeepEP's utils is
  refused naming the variable."""
import os
import random
import subprocess
import sys
import tempfile
import textwrap

ROOT = os.path.abspath(os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", ".."))
sys.path.insert(0, os.path.join(ROOT, "python"))

from anyep import elastic_plan as plan  # noqa: E402

MIB2 = 2 << 20


def raises(exc, fn, *args, words=(), **kwargs):
    """fn(*args, **kwargs) raises exc whose message holds every word of `words`."""
    try:
        fn(*args, **kwargs)
    except exc as e:
        missing = [w for w in words if w not in str(e)]
        assert not missing, f"{exc.__name__} message {str(e)!r} lacks {missing}"
        return
    raise AssertionError(f"{fn.__name__}{args} did not raise {exc.__name__}")


# ---- constructor ---------------------------------------------------------------------------------
def construction(**kw):
    args = dict(num_bytes=None, num_cpu_bytes=0, num_max_tokens_per_rank=4096, hidden=7168, num_topk=8,
                num_allocated_qps=0, num_cpu_timeout_secs=300, num_gpu_timeout_secs=100)
    args.update(kw)
    plan.check_construction(**args)


def test_constructor_checks():
    construction()
    construction(num_bytes=1 << 30, num_max_tokens_per_rank=0, hidden=0)  # a size given: no shape needed
    raises(NotImplementedError, construction, num_cpu_bytes=MIB2, words=("num_cpu_bytes", "engram"))
    raises(ValueError, construction, num_max_tokens_per_rank=0, words=("num_bytes", "num_max_tokens_per_rank"))
    raises(ValueError, construction, hidden=0, words=("hidden",))
    raises(ValueError, construction, hidden=7164, words=("hidden", "multiple of 8"))
    construction(hidden=7176)  # BF16 rows of 16-byte multiples
    raises(ValueError, construction, num_topk=17, words=("num_topk",))
    raises(ValueError, construction, num_topk=-1, words=("num_topk",))
    raises(ValueError, construction, num_bytes=0, words=("num_bytes",))
    raises(ValueError, construction, num_gpu_timeout_secs=0, words=("num_gpu_timeout_secs",))
    raises(ValueError, construction, num_cpu_timeout_secs=-5, words=("num_cpu_timeout_secs",))
    raises(ValueError, construction, num_allocated_qps=-1, words=("num_allocated_qps",))
    raises(ValueError, construction, hidden=7168.0, words=("hidden", "int"))
    raises(ValueError, construction, num_max_tokens_per_rank=True, words=("num_max_tokens_per_rank", "int"))


# ---- size and SM / QP hints ----------------------------------------------------------------------
def test_buffer_size_asks_for_bf16_rows_and_aligns():
    calls = []

    def fake_size(hidden_bytes, num_ranks, num_sms, chunk_recv):
        calls.append((hidden_bytes, num_ranks, num_sms, chunk_recv))
        return 306_578_688 + hidden_bytes  # any size that is not a multiple of 2 MiB

    size = plan.buffer_size(8, 7168, 48, 256, fake_size)
    assert calls == [(2 * 7168, 8, 48, 256)], calls
    assert size % MIB2 == 0 and size >= 306_578_688 + 2 * 7168 and size - (306_578_688 + 2 * 7168) < MIB2, size
    exact = plan.buffer_size(2, 4096, 24, 256, lambda *a: 64 * MIB2)
    assert exact == 64 * MIB2, exact
    raises(ValueError, plan.buffer_size, 8, 100, 24, 256, fake_size, words=("hidden",))
    raises(ValueError, plan.buffer_size, 0, 7168, 24, 256, fake_size, words=("num_ranks",))
    raises(ValueError, plan.buffer_size, 8, 7168, 0, 256, fake_size, words=("num_sms",))


def test_automatic_sm_counts():
    assert plan.automatic_num_sms(True, 132) == plan.OVERLAP_NUM_SMS == 24
    assert plan.automatic_num_sms(False, 132) == plan.MAX_NUM_SMS == 48
    assert plan.automatic_num_sms(False, 40) == 40
    assert plan.automatic_num_sms(False, 41) == 40  # even: sender and receiver blocks in pairs
    assert plan.automatic_num_sms(True, 3) == 2
    assert plan.theoretical_num_sms(False, 132, 8, 256, 8) == 48
    raises(ValueError, plan.theoretical_num_sms, True, 132, 8, 250, 8, words=("num_experts", "250"))
    raises(ValueError, plan.theoretical_num_sms, True, 132, 8, 256, 0, words=("num_topk",))
    raises(ValueError, plan.theoretical_num_sms, True, 132, 8, 256, 17, words=("num_topk",))
    raises(ValueError, plan.theoretical_num_sms, True, 132, 1, 2048, 8, words=("experts per rank",))


def test_qp_arithmetic():
    assert plan.default_num_allocated_qps(True) == 129
    assert plan.default_num_allocated_qps(False) == 17
    assert plan.theoretical_num_qps(24, False, 17) == 9
    assert plan.theoretical_num_qps(4, False, 17) == 4
    assert plan.theoretical_num_qps(24, True, 129) == 129
    assert plan.theoretical_num_qps(4, True, 129) == 65


def test_worst_case_rows():
    # 8 ranks x 4096 tokens; top-6 over 32 local experts; alignment 128: padding 127 per expert.
    rows, expanded = plan.worst_case_rows(8, 4096, 6, 32, 128)
    assert rows == 8 * 4096
    assert expanded == plan.align(8 * 4096 * 6 + 127 * 32, 128) and expanded % 128 == 0
    assert plan.worst_case_rows(2, 10, 8, 3, 1) == (20, 60)  # top-8 over 3 local experts: 3 each


# ---- dispatch arguments --------------------------------------------------------------------------
class FakeHandle:
    """The EPHandle fields dispatch_args reads."""

    def __init__(self, do_expand=False):
        self.do_expand = do_expand
        self.num_experts = 64
        self.expert_alignment = 128
        self.num_max_tokens_per_rank = 512


def args(**kw):
    a = dict(num_ranks=8, num_tokens=100, num_topk=8, has_topk_idx=True, handle=None, num_experts=64,
             num_max_tokens_per_rank=None, default_max_tokens=256, expert_alignment=None, do_cpu_sync=None,
             do_expand=False, do_zero_padding=False, num_sms=0, num_qps=0, previous_event_given=False,
             allocate_on_comm_stream=False)
    a.update(kw)
    return plan.dispatch_args(**a)


def test_dispatch_defaults_and_handle():
    assert args() == (64, 256, 1, True)
    assert args(do_cpu_sync=False, expert_alignment=4, num_max_tokens_per_rank=128) == (64, 128, 4, False)
    # A handle supplies the settings and turns the CPU sync off.
    assert args(has_topk_idx=False, handle=FakeHandle(), num_experts=None) == (64, 512, 128, False)
    assert args(has_topk_idx=False, handle=FakeHandle(), num_experts=64, expert_alignment=128) == (64, 512, 128, False)
    assert args(has_topk_idx=False, handle=FakeHandle(True), do_expand=True, num_experts=None)[3] is False


def test_dispatch_refusals():
    raises(ValueError, args, has_topk_idx=False, words=("topk_idx",))
    raises(ValueError, args, num_experts=None, words=("num_experts",))
    raises(ValueError, args, num_experts=60, words=("num_experts=60", "multiple"))
    raises(ValueError, args, num_tokens=300, words=("300", "num_max_tokens_per_rank=256"))
    raises(ValueError, args, num_topk=0, words=("num_topk",))
    raises(ValueError, args, num_topk=17, words=("num_topk",))
    raises(ValueError, args, expert_alignment=0, words=("expert_alignment",))
    raises(ValueError, args, num_sms=3, words=("num_sms", "even"))
    raises(ValueError, args, num_sms=-2, words=("num_sms",))
    raises(ValueError, args, num_qps=-1, words=("num_qps",))
    raises(ValueError, args, previous_event_given=True, words=("previous_event", "allocate_on_comm_stream"))
    assert args(previous_event_given=True, allocate_on_comm_stream=True)[0] == 64
    raises(ValueError, args, do_zero_padding=True, words=("do_zero_padding", "do_expand"))
    handle = FakeHandle()
    raises(ValueError, args, handle=handle, words=("topk_idx",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=None, do_cpu_sync=True,
           words=("CPU sync",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=None, do_expand=True,
           words=("do_expand",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=128, words=("num_experts=128",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=None, expert_alignment=1,
           words=("expert_alignment=1",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=None, num_max_tokens_per_rank=64,
           words=("num_max_tokens_per_rank=64",))
    raises(ValueError, args, has_topk_idx=False, handle=handle, num_experts=None, num_tokens=600,
           words=("600",))


# ---- the summation order of combine --------------------------------------------------------------
def add32(a, b):
    return plan.f32(a + b)


def v2_reference_token(slot_values, owners, bias):
    """deep_ep V2's reference combine for one token, the procedure stated in the module docstring.
    slot_values[j]: the BF16 value of slot j (0 where the slot's expert is -1); owners[j]: its rank
    (-1: none); bias: the FP32 start (0.0 without bias)."""
    k = len(owners)
    order = sorted(range(k), key=lambda j: owners[j])  # stable
    placed = [0.0] * k
    acc = 0.0
    for n, j in enumerate(order):
        acc = add32(acc, slot_values[j])
        if n == k - 1 or owners[order[n + 1]] != owners[j]:
            placed[j] = plan.bf16(acc)  # the group's sum at its last slot (stable order: last in slot order)
            acc = 0.0
    total = bias
    for j in range(k):
        total = add32(total, placed[j])
    return plan.bf16(total)


def anyep_order_token(partials, owners, bias):
    """ElasticBuffer's combine for one token: partials[r] is rank r's BF16 row; each slot adds its
    owner's partial at the owner's last slot and +0.0 elsewhere (combine_order)."""
    adds = dict(plan.combine_order(owners))
    total = bias
    for j in range(len(owners)):
        total = add32(total, partials[adds[j]] if j in adds else 0.0)
    return plan.bf16(total)


def rank_ascending_token(partials, owners, bias):
    """anyep's HT combine kernel today: the bias, then each rank that got the token in rank order."""
    total = bias
    for r in sorted({o for o in owners if o >= 0}):
        total = add32(total, partials[r])
    return plan.bf16(total)


def random_case(rng, num_ranks, k):
    owners = [rng.randrange(num_ranks) if rng.random() > 0.1 else -1 for _ in range(k)]
    # Values of very different magnitudes, so that the order of FP32 additions shows.
    slot_values = [0.0 if o < 0 else plan.bf16(plan.f32(rng.uniform(-1, 1) * 2.0 ** rng.randint(-30, 30)))
                   for o in owners]
    bias = 0.0
    if rng.random() < 0.6:
        bias = plan.f32(plan.bf16(plan.f32(rng.gauss(0, 1))) + plan.bf16(plan.f32(rng.gauss(0, 1))))
    return owners, slot_values, bias


def test_combine_order_matches_v2_reference():
    rng = random.Random(7)
    differs_from_rank_order = 0
    for case in range(20000):
        num_ranks, k = rng.choice([(2, 2), (4, 6), (8, 8), (16, 16), (3, 5)])
        owners, slot_values, bias = random_case(rng, num_ranks, k)
        # What each rank sends back: the FP32 sum of its slots in slot order, rounded to BF16 (the
        # expert rank's pre-reduction in the V2 test, and ElasticBuffer's expanded combine).
        partials = {}
        for r in set(owners) - {-1}:
            acc = 0.0
            for j in range(k):
                if owners[j] == r:
                    acc = add32(acc, slot_values[j])
            partials[r] = plan.bf16(acc)
        want = v2_reference_token(slot_values, owners, bias)
        got = anyep_order_token(partials, owners, bias)
        assert (want, str(want)) == (got, str(got)), f"case {case}: owners {owners} bias {bias}: {got} != {want}"
        if rank_ascending_token(partials, owners, bias) != want:
            differs_from_rank_order += 1
    assert differs_from_rank_order > 0, "the rank-ascending order never differed: the cases are too easy"


def test_combine_order_examples():
    assert plan.combine_order([2, 0, 2, -1, 1]) == [(1, 0), (2, 2), (4, 1)]
    assert plan.combine_order([-1, -1]) == []
    assert plan.combine_order([3, 3, 3]) == [(2, 3)]


def test_rounding_functions():
    assert plan.f32(0.1) != 0.1 and plan.f32(plan.f32(0.1)) == plan.f32(0.1)
    assert plan.bf16(1.0 + 2.0 ** -8) == 1.0  # a tie rounds to even
    assert plan.bf16(1.0 + 3 * 2.0 ** -8) == 1.0 + 2.0 ** -6
    assert plan.bf16(-2.0) == -2.0 and str(plan.bf16(-0.0)) == "-0.0"
    assert plan.bf16(plan.f32(3.0e38)) == 3.00405527047391e38
    assert plan.bf16(plan.f32(3.4028234663852886e38)) == float("inf")  # FP32's largest rounds up past BF16's


# ---- ANYEP_DEEPEP_UTILS --------------------------------------------------------------------------
# A child process: a minimal stand-in for torch (what anyep.event and anyep.utils touch when their
# modules load), the deep_ep package folder without running its __init__.py, then deep_ep.utils.
CHILD = textwrap.dedent("""
    import importlib, sys, types
    torch = types.ModuleType("torch")
    torch.cuda = types.SimpleNamespace(Stream=object, Event=object)
    dist = types.ModuleType("torch.distributed")
    dist.ProcessGroup = object
    torch.distributed = dist
    sys.modules.update({"torch": torch, "torch.distributed": dist})
    sys.path.insert(0, sys.argv[1])
    pkg = types.ModuleType("deep_ep")
    pkg.__path__ = [sys.argv[1] + "/deep_ep"]
    sys.modules["deep_ep"] = pkg
    import deep_ep.utils
    from deep_ep.utils.math import MARK
    from deep_ep.utils import refs
    print(MARK, refs.__file__)
""")


def run_child(env_value):
    env = dict(os.environ, ANYEP_DEEPEP_UTILS=env_value)
    return subprocess.run([sys.executable, "-c", CHILD, os.path.join(ROOT, "python")], env=env,
                          capture_output=True, text=True, timeout=60)


def test_deepep_utils_switch():
    with tempfile.TemporaryDirectory() as top:
        utils = os.path.join(top, "deep_ep", "utils")
        os.makedirs(utils)
        with open(os.path.join(utils, "math.py"), "w") as f:
            f.write("MARK = 'from-the-checkout'\n")
        with open(os.path.join(utils, "refs.py"), "w") as f:
            f.write("from .math import MARK\n")
        # The checkout's deep_ep/__init__.py must not run.
        with open(os.path.join(top, "deep_ep", "__init__.py"), "w") as f:
            f.write("raise RuntimeError('the checkout package ran')\n")
        r = run_child(top)
        assert r.returncode == 0, r.stderr
        assert r.stdout.split() == ["from-the-checkout", os.path.join(utils, "refs.py")], r.stdout
        r = run_child(os.path.join(top, "nowhere"))
        assert r.returncode != 0 and "ANYEP_DEEPEP_UTILS" in r.stderr and "refs.py" in r.stderr, r.stderr


def main():
    tests = [(name, fn) for name, fn in sorted(globals().items()) if name.startswith("test_") and callable(fn)]
    failed = 0
    for name, fn in tests:
        try:
            fn()
            print(f"PASSED {name}")
        except Exception as e:  # report every failure, then exit non-zero
            failed += 1
            print(f"FAILED {name}: {type(e).__name__}: {e}")
    print(f"{len(tests) - failed} passed, {failed} failed")
    return 1 if failed else 0


if __name__ == "__main__":
    sys.exit(main())
