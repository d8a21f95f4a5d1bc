"""The torch-free half of ElasticBuffer (anyep/elastic.py): argument checks, the buffer size and SM
and QP hints, and the order in which combine adds a token's contributions. Nothing here imports
torch or the compiled extension, so the CPU tests (tests/unit/python_elastic) run it with plain
python3; elastic.py calls these functions and passes the extension's size function in."""
import math
import struct
from typing import Callable, List, Optional, Sequence, Tuple

# Buffer sizes are multiples of 2 MiB, as deep_ep.ElasticBuffer's hints are.
BUFFER_ALIGNMENT = 2 << 20
# SMs of the high-throughput kernels (anyep's HT intranode path): the count that leaves SMs to
# overlapped compute (DeepEP's test configs), and the count past which they stop scaling
# (docs/bench/ht.md, "SMs").
OVERLAP_NUM_SMS = 24
MAX_NUM_SMS = 48
# Top-k and local-expert limits of the HT kernels (src/kernels/ht/layout.h).
MAX_TOPK = 16
MAX_LOCAL_EXPERTS = 1024


def ceil_div(x: int, y: int) -> int:
    """
    Divide rounding up.

    Arguments:
        x: the dividend (>= 0).
        y: the divisor (> 0).

    Returns:
        quotient: the smallest integer q with q * y >= x.
    """
    return (x + y - 1) // y


def align(x: int, y: int) -> int:
    """
    Round up to a multiple.

    Arguments:
        x: the value (>= 0).
        y: the multiple (> 0).

    Returns:
        aligned: the smallest multiple of y that is >= x.
    """
    return ceil_div(x, y) * y


def _int(name: str, value, low: Optional[int] = None) -> int:
    if isinstance(value, bool) or not isinstance(value, int):
        raise ValueError(f"anyep ElasticBuffer: {name} must be an int, got {type(value).__name__} {value!r}")
    if low is not None and value < low:
        raise ValueError(f"anyep ElasticBuffer: {name} must be >= {low}, got {value}")
    return value


def check_hidden(hidden: int) -> int:
    """
    Check a hidden size for the HT kernels: BF16 rows of a multiple of 16 bytes (an FP8 dispatch
    needs a multiple of 16 elements, which the dispatch itself checks).

    Arguments:
        hidden: the hidden size.

    Returns:
        hidden: the same value.

    Raises:
        ValueError: not a positive multiple of 8.
    """
    _int("hidden", hidden, 1)
    if hidden % 8 != 0:
        raise ValueError(f"anyep ElasticBuffer: hidden must be a multiple of 8 (16-byte BF16 rows), got {hidden}")
    return hidden


def check_construction(num_bytes: Optional[int], num_cpu_bytes: int, num_max_tokens_per_rank: int, hidden: int,
                       num_topk: int, num_allocated_qps: int, num_cpu_timeout_secs: int,
                       num_gpu_timeout_secs: int) -> None:
    """
    Check ElasticBuffer's constructor arguments before anything is allocated.

    Arguments:
        num_bytes: the buffer size, or None (then it comes from the MoE settings).
        num_cpu_bytes: the CPU buffer size (Engram storage), which anyep does not provide: must be 0.
        num_max_tokens_per_rank: the most tokens a rank dispatches per call.
        hidden: the hidden size (0 allowed when `num_bytes` is given).
        num_topk: top-k (0: not known yet).
        num_allocated_qps: accepted QP count (>= 0).
        num_cpu_timeout_secs: host-side timeout (> 0).
        num_gpu_timeout_secs: device-side timeout (> 0).

    Raises:
        ValueError: a negative or zero count where a positive one is needed, no way to size the
            buffer (neither `num_bytes` nor `num_max_tokens_per_rank` and `hidden`).
        NotImplementedError: `num_cpu_bytes` > 0 (the CPU buffer of Engram is not provided).
    """
    _int("num_cpu_bytes", num_cpu_bytes, 0)
    if num_cpu_bytes > 0:
        raise NotImplementedError("anyep ElasticBuffer: num_cpu_bytes > 0 (the CPU buffer of engram_write/"
                                  "engram_fetch) is not provided; pass num_cpu_bytes=0")
    _int("num_max_tokens_per_rank", num_max_tokens_per_rank, 0)
    _int("num_topk", num_topk, 0)
    if num_topk > MAX_TOPK:
        raise ValueError(f"anyep ElasticBuffer: num_topk must be in [0, {MAX_TOPK}], got {num_topk}")
    _int("num_allocated_qps", num_allocated_qps, 0)
    _int("num_cpu_timeout_secs", num_cpu_timeout_secs, 1)
    _int("num_gpu_timeout_secs", num_gpu_timeout_secs, 1)
    if num_bytes is None:
        if num_max_tokens_per_rank <= 0 or hidden <= 0:
            raise ValueError("anyep ElasticBuffer: give num_bytes, or num_max_tokens_per_rank > 0 and hidden > 0 "
                             f"to size the buffer (got num_max_tokens_per_rank={num_max_tokens_per_rank}, "
                             f"hidden={hidden})")
        check_hidden(hidden)
    else:
        _int("num_bytes", num_bytes, 1)


def buffer_size(num_ranks: int, hidden: int, num_sms: int, chunk_recv: int,
                size_fn: Callable[[int, int, int, int], int]) -> int:
    """
    Bytes of the HT region one ElasticBuffer needs: dispatch and combine both move rows of at most
    `2 * hidden` bytes (BF16; an FP8 row and its scales are smaller) plus top-k ids and weights
    through the HT rings, so one size serves both; rounded up to 2 MiB.

    Arguments:
        num_ranks: ranks of the group (1..16).
        hidden: the hidden size.
        num_sms: the most SMs a call will use.
        chunk_recv: the receive ring of the dispatch config, in tokens.
        size_fn: the extension's `ht_size_hint(hidden_bytes, num_ranks, num_sms, chunk_recv)`.

    Returns:
        size: the region size in bytes, a multiple of 2 MiB.

    Raises:
        ValueError: a bad hidden size or rank count.
    """
    check_hidden(hidden)
    _int("num_ranks", num_ranks, 1)
    _int("num_sms", num_sms, 2)
    return align(int(size_fn(2 * hidden, num_ranks, num_sms, chunk_recv)), BUFFER_ALIGNMENT)


def theoretical_num_sms(prefer_overlap_with_compute: bool, device_sms: int, num_ranks: int, num_experts: int,
                        num_topk: int) -> int:
    """
    The SM count of a dispatch or combine for a MoE shape (`automatic_num_sms`: the count does not
    depend on the shape on one node), after checking the shape.

    Arguments:
        prefer_overlap_with_compute: leave SMs to compute running beside the call.
        device_sms: SMs of the device.
        num_ranks: ranks of the group.
        num_experts: experts over all ranks.
        num_topk: top-k.

    Returns:
        num_sms: an even SM count in [2, device_sms].

    Raises:
        ValueError: `num_experts` not a positive multiple of `num_ranks`, or `num_topk` outside [1, 16].
    """
    check_experts(num_experts, num_ranks)
    _int("num_topk", num_topk, 1)
    if num_topk > MAX_TOPK:
        raise ValueError(f"anyep ElasticBuffer: num_topk must be in [1, {MAX_TOPK}], got {num_topk}")
    return automatic_num_sms(prefer_overlap_with_compute, device_sms)


def default_num_allocated_qps(allow_hybrid_mode: bool) -> int:
    """
    The QP count deep_ep.ElasticBuffer allocates by default (65 with hybrid mode on a NIC with fast
    atomics, else 129; 17 without hybrid mode). anyep opens no queue pairs; the value is kept so
    that code that checks `num_qps <= num_allocated_qps` runs. Without the NIC probe, hybrid mode
    counts as the larger number.

    Arguments:
        allow_hybrid_mode: whether hybrid mode was allowed.

    Returns:
        num_qps: the count.
    """
    return 129 if allow_hybrid_mode else 17


def theoretical_num_qps(num_sms: int, allow_hybrid_mode: bool, num_allocated_qps: int) -> int:
    """
    The QP count deep_ep.ElasticBuffer would use with `num_sms` SMs (one per channel and one for
    notify in hybrid mode, else at most 9), capped by `num_allocated_qps`. anyep's intranode path
    uses no QPs; this keeps deep_ep's arithmetic for code that sizes things by it.

    Arguments:
        num_sms: SMs of the call.
        allow_hybrid_mode: whether hybrid mode was allowed.
        num_allocated_qps: the buffer's QP count.

    Returns:
        num_qps: the count.
    """
    _int("num_sms", num_sms, 1)
    want = num_sms * 16 + 1 if allow_hybrid_mode else min(num_sms, 9)
    return min(want, num_allocated_qps)


def check_experts(num_experts, num_ranks: int) -> int:
    """
    Check an expert count.

    Arguments:
        num_experts: experts over all ranks.
        num_ranks: ranks of the group.

    Returns:
        num_experts: the same value.

    Raises:
        ValueError: not a positive multiple of `num_ranks`, or more than 1024 experts per rank.
    """
    _int("num_experts", num_experts, 1)
    if num_experts % num_ranks != 0:
        raise ValueError(f"anyep ElasticBuffer: num_experts={num_experts} must be a multiple of the number of "
                         f"ranks {num_ranks}")
    if num_experts // num_ranks > MAX_LOCAL_EXPERTS:
        raise ValueError(f"anyep ElasticBuffer: {num_experts // num_ranks} experts per rank exceed "
                         f"{MAX_LOCAL_EXPERTS}")
    return num_experts


def check_call(num_sms: int, num_qps: int, previous_event_given: bool, allocate_on_comm_stream: bool) -> None:
    """
    Check what dispatch and combine share: the SM and QP counts and the stream arguments.

    Arguments:
        num_sms: SMs (0: automatic; else positive and even).
        num_qps: QPs (accepted, >= 0).
        previous_event_given: whether `previous_event` was given.
        allocate_on_comm_stream: whether outputs are allocated on the communication stream.

    Raises:
        ValueError: the first argument that breaks deep_ep's rules, named.
    """
    _int("num_qps", num_qps, 0)
    _int("num_sms", num_sms, 0)
    if num_sms % 2 != 0:
        raise ValueError(f"anyep ElasticBuffer: num_sms must be 0 (automatic) or a positive even number, got "
                         f"{num_sms}")
    if previous_event_given and not allocate_on_comm_stream:
        raise ValueError("anyep ElasticBuffer: previous_event needs allocate_on_comm_stream=True (as in deep_ep)")


def automatic_num_sms(prefer_overlap_with_compute: bool, device_sms: int) -> int:
    """
    The SM count of a call with `num_sms=0`: `OVERLAP_NUM_SMS` when compute is to overlap the
    communication, else `MAX_NUM_SMS` (where the HT kernels stop scaling); at most the device's
    SMs, even, at least 2.

    Arguments:
        prefer_overlap_with_compute: leave SMs to compute running beside the call.
        device_sms: SMs of the device.

    Returns:
        num_sms: an even SM count.
    """
    want = OVERLAP_NUM_SMS if prefer_overlap_with_compute else MAX_NUM_SMS
    return max(2, min(want, device_sms - device_sms % 2))


def dispatch_args(num_ranks: int, num_tokens: int, num_topk: int, has_topk_idx: bool, handle,
                  num_experts: Optional[int], num_max_tokens_per_rank: Optional[int], default_max_tokens: int,
                  expert_alignment: Optional[int], do_cpu_sync: Optional[bool], do_expand: bool,
                  do_zero_padding: bool, num_sms: int, num_qps: int, previous_event_given: bool,
                  allocate_on_comm_stream: bool) -> Tuple[int, int, int, bool]:
    """
    Check a dispatch's arguments and fill in the defaults the way deep_ep.ElasticBuffer.dispatch
    does: a handle supplies num_experts, expert_alignment and num_max_tokens_per_rank (given
    values must agree with it) and turns the CPU sync off.

    Arguments:
        num_ranks: ranks of the group.
        num_tokens: rows of `x`.
        num_topk: columns of `topk_idx` (or of the handle's).
        has_topk_idx: whether `topk_idx` was given.
        handle: the cached EPHandle, or None.
        num_experts: experts over all ranks, or None.
        num_max_tokens_per_rank: the call's token bound, or None.
        default_max_tokens: the buffer's `num_max_tokens_per_rank`.
        expert_alignment: the per-expert alignment, or None (1).
        do_cpu_sync: whether to wait for the receive counts, or None.
        do_expand: whether the expanded layout was asked for.
        do_zero_padding: whether to zero the expanded layout's padding.
        num_sms: SMs (0: automatic; else positive and even).
        num_qps: QPs (accepted, >= 0).
        previous_event_given: whether `previous_event` was given.
        allocate_on_comm_stream: whether outputs are allocated on the communication stream.

    Returns:
        num_experts: the expert count.
        num_max_tokens_per_rank: the token bound.
        expert_alignment: the alignment.
        do_cpu_sync: whether the host waits for the receive counts.

    Raises:
        ValueError: the first argument that breaks deep_ep's rules, named.
    """
    check_call(num_sms, num_qps, previous_event_given, allocate_on_comm_stream)
    if do_zero_padding and not do_expand:
        raise ValueError("anyep ElasticBuffer: do_zero_padding needs do_expand=True")
    if handle is not None:
        if has_topk_idx:
            raise ValueError("anyep ElasticBuffer: a cached dispatch (handle given) takes topk_idx from the handle; "
                             "pass topk_idx=None")
        if do_cpu_sync:
            raise ValueError("anyep ElasticBuffer: a cached dispatch cannot do a CPU sync (do_cpu_sync=True with a "
                             "handle)")
        if do_expand != handle.do_expand:
            raise ValueError(f"anyep ElasticBuffer: do_expand={do_expand}, but the handle was made with "
                             f"do_expand={handle.do_expand}")
        given = {"num_experts": num_experts, "expert_alignment": expert_alignment,
                 "num_max_tokens_per_rank": num_max_tokens_per_rank}
        for name, value in given.items():
            if value is not None and value != getattr(handle, name):
                raise ValueError(f"anyep ElasticBuffer: {name}={value} differs from the handle's "
                                 f"{getattr(handle, name)}")
        num_experts, expert_alignment = handle.num_experts, handle.expert_alignment
        num_max_tokens_per_rank = handle.num_max_tokens_per_rank
        do_cpu_sync = False
    else:
        if not has_topk_idx:
            raise ValueError("anyep ElasticBuffer: dispatch needs topk_idx (or a handle from an earlier dispatch)")
        if num_experts is None:
            raise ValueError("anyep ElasticBuffer: dispatch needs num_experts (or a handle)")
    check_experts(num_experts, num_ranks)
    num_max_tokens_per_rank = default_max_tokens if num_max_tokens_per_rank is None else num_max_tokens_per_rank
    _int("num_max_tokens_per_rank", num_max_tokens_per_rank, 1)
    expert_alignment = 1 if expert_alignment is None else expert_alignment
    _int("expert_alignment", expert_alignment, 1)
    if num_tokens > num_max_tokens_per_rank:
        raise ValueError(f"anyep ElasticBuffer: x has {num_tokens} tokens, more than num_max_tokens_per_rank="
                         f"{num_max_tokens_per_rank}")
    if not 1 <= num_topk <= MAX_TOPK:
        raise ValueError(f"anyep ElasticBuffer: num_topk must be in [1, {MAX_TOPK}], got {num_topk}")
    return num_experts, num_max_tokens_per_rank, expert_alignment, True if do_cpu_sync is None else bool(do_cpu_sync)


def worst_case_rows(num_ranks: int, num_max_tokens_per_rank: int, num_topk: int, num_local_experts: int,
                    expert_alignment: int) -> Tuple[int, int]:
    """
    Rows of a dispatch's outputs without a CPU sync (deep_ep's worst case): every rank's tokens
    may arrive; expanded, each of them once per local expert it chose, plus each expert's padding.

    Arguments:
        num_ranks: ranks of the group.
        num_max_tokens_per_rank: the token bound.
        num_topk: top-k.
        num_local_experts: experts of this rank.
        expert_alignment: the per-expert alignment.

    Returns:
        num_recv_rows: rows of the non-expanded outputs.
        num_expanded_rows: rows of the expanded outputs.
    """
    rows = num_ranks * num_max_tokens_per_rank
    expanded = rows * min(num_topk, num_local_experts) + (expert_alignment - 1) * num_local_experts
    return rows, align(expanded, expert_alignment)


def combine_order(owner_ranks: Sequence[int]) -> List[Tuple[int, int]]:
    """
    The order in which combine adds one token's contributions, deep_ep.ElasticBuffer's: each rank
    that got the token contributes once (its partial sum), at the position of the LAST top-k slot
    whose expert it owns; the contributions are added in slot order after the bias. Slots whose
    expert is -1 contribute nothing.

    Arguments:
        owner_ranks: per top-k slot, the rank owning the slot's expert (-1: no expert).

    Returns:
        order: (slot, rank) pairs in the order they are added.
    """
    order = []
    for j, r in enumerate(owner_ranks):
        if r >= 0 and all(owner_ranks[k] != r for k in range(j + 1, len(owner_ranks))):
            order.append((j, r))
    return order


def f32(x: float) -> float:
    """
    Round a Python float to the nearest FP32 value (ties to even).

    Arguments:
        x: the value.

    Returns:
        rounded: the FP32 value, as a Python float.
    """
    return struct.unpack("<f", struct.pack("<f", x))[0]


def bf16(x: float) -> float:
    """
    Round an FP32 value to the nearest BF16 value (ties to even; NaN stays NaN).

    Arguments:
        x: an FP32 value (as returned by `f32`).

    Returns:
        rounded: the BF16 value, as a Python float.
    """
    if math.isnan(x):
        return x
    bits = struct.unpack("<I", struct.pack("<f", x))[0]
    bits = (bits + 0x7FFF + ((bits >> 16) & 1)) & 0xFFFF0000
    return struct.unpack("<f", struct.pack("<I", bits))[0]
