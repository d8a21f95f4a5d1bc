"""anyep.ElasticBuffer and EPHandle: deep_ep V2's ElasticBuffer API over anyep's high-throughput
intranode runtime, the same anyep._C.HTBuffer that anyep.Buffer drives (an ElasticBuffer holds one
anyep.Buffer). Dispatch is the HT dispatch plus a layout step in torch (V2's handle fields, the
expanded layout); combine sends each received row back with the HT dispatch kernel run in reverse
and adds the contributions in deep_ep V2's order, so the result is bitwise deep_ep's. docs/elastic.md
maps every call and says what differs. The checks and hints that need no torch live in
anyep/elastic_plan.py."""
import contextlib
from typing import Callable, List, Optional, Sequence, Tuple, Union

import torch
import torch.distributed as dist

from . import elastic_plan as plan
from ._ext import ext as _ext
from .buffer import Buffer
from .event import EventHandle, EventOverlap

# TMA needs 16-byte aligned columns: a column-major FP32 scale tensor pads its rows to 4.
_TMA_ROW_ALIGNMENT = 4


class ElasticEventOverlap(EventOverlap):
    """
    The event of an ElasticBuffer call, with deep_ep V2's additions to EventOverlap: a hook run
    after the wait, and `with event(release_handle=True)`.

    Attributes:
        event: the EventHandle, or None for a call that did not run asynchronously.
        extra_tensors: tensors kept alive until the event completes.
        hook_after_wait: a callable run once after `current_stream_wait`, or None.
    """

    __slots__ = ("hook_after_wait", "_release_on_exit")

    def __init__(self, event: Optional[EventHandle] = None, extra_tensors: Optional[tuple] = None) -> None:
        """
        Wrap an event.

        Arguments:
            event: the EventHandle, or None.
            extra_tensors: tensors to keep alive until the event completes.
        """
        super().__init__(event, extra_tensors)
        self.hook_after_wait = None
        self._release_on_exit = False

    def current_stream_wait(self, release_handle: bool = False) -> None:
        """
        Make the current stream wait for the event, then run the hook registered after the wait.

        Arguments:
            release_handle: drop the event (and the tensors it keeps) after the wait.
        """
        super().current_stream_wait()
        if self.hook_after_wait is not None:
            hook, self.hook_after_wait = self.hook_after_wait, None
            hook()
        if release_handle:
            self.event = None
            self.extra_tensors = None

    def register_hook_after_wait(self, hook_after_wait: Callable) -> None:
        """
        Register a callable that `current_stream_wait` runs once after the wait.

        Arguments:
            hook_after_wait: the callable.

        Raises:
            ValueError: a hook is already registered.
        """
        if self.hook_after_wait is not None:
            raise ValueError("anyep: a hook is already registered on this event")
        self.hook_after_wait = hook_after_wait

    def __call__(self, release_handle: bool = False) -> "ElasticEventOverlap":
        """
        Set what leaving the next `with` block does (`with event(release_handle=True): ...`).

        Arguments:
            release_handle: drop the event after the wait at the block's end.

        Returns:
            self: this event.
        """
        self._release_on_exit = release_handle
        return self

    def __exit__(self, exc_type, exc_val, exc_tb) -> None:
        """
        Leave a `with` block: the current stream waits for the event, if there is one.

        Arguments:
            exc_type: the type of the exception leaving the block, or None.
            exc_val: the exception, or None.
            exc_tb: its traceback, or None.
        """
        if self.event is not None:
            self.current_stream_wait(release_handle=self._release_on_exit)
        self._release_on_exit = False


class _Route:
    """What anyep keeps of a dispatch for its cached dispatches and its combine (not deep_ep's)."""

    __slots__ = ("owner", "num_tokens", "num_recv_rows", "num_send_rows", "is_token_in_rank", "num_tokens_per_rank",
                 "num_tokens_per_expert", "ht_handle", "recv_topk_idx", "src_rank", "send_pos", "send_offsets",
                 "owner_rank", "counts", "positions")


class EPHandle:
    """
    The routing of one `ElasticBuffer.dispatch`, as deep_ep V2's EPHandle: reuse it for a cached
    dispatch (no layout step, no CPU sync) and pass it to `combine`. Rows of the received tensors are
    ordered by source rank, then source token index (so `recv_src_metadata[:, 0]` is ascending over
    the received tokens), deterministically for every setting.

    Attributes:
        do_expand: whether the expanded layout (one row per received token and local expert) is used.
        num_experts: experts over all ranks.
        expert_alignment: each local expert's received count is padded to a multiple of it.
        num_max_tokens_per_rank: the token bound of the dispatch.
        num_sms: SMs of the dispatch (combine's default).
        topk_idx: `[num_tokens, num_topk]` expert indices of the dispatch (a copy with `do_handle_copy`).
        num_recv_tokens: rows of the received (non-expanded) tensors: exact with a CPU sync, else the
            worst case (`num_ranks * num_max_tokens_per_rank`).
        num_expanded_tokens: rows of the expanded tensors (exact with a CPU sync, else the worst case).
        num_recv_tokens_per_expert_list: per local expert, received tokens rounded up to
            `expert_alignment` (empty without a CPU sync).
        psum_num_recv_tokens_per_scaleup_rank: `[num_ranks]` `torch.int`, inclusive prefix sum of the
            tokens received from each rank (its last entry is the number received).
        psum_num_recv_tokens_per_expert: `[num_local_experts]` `torch.int`: the inclusive prefix sum of
            the aligned counts; expanded, each expert's aligned start plus its unaligned count.
        num_unaligned_recv_tokens_per_expert: `[num_local_experts]` `torch.int` received tokens per
            local expert (expanded layout only, else None).
        recv_src_metadata: `[num_recv_tokens, 2 + num_topk]` `torch.int`: the source token's global
            index (`src_rank * num_max_tokens_per_rank + src_token`), the row of the received
            tensors, then per top-k slot the row of the expanded tensors (-1: none, or not expanded);
            rows past the received count hold -1.
        dst_buffer_slot_idx: `[num_tokens, num_ranks]` `torch.int`, the row each of this rank's tokens
            takes in each destination's received tensors (-1: not sent there).
        token_metadata_at_forward: None (hybrid mode's, not used on one node).
        channel_linked_list: None (hybrid mode's, not used on one node).
    """

    def __init__(self, do_expand: bool, num_experts: int, expert_alignment: int, num_max_tokens_per_rank: int,
                 num_sms: int, topk_idx: torch.Tensor, num_recv_tokens: int, num_expanded_tokens: int,
                 num_recv_tokens_per_expert_list: list, psum_num_recv_tokens_per_scaleup_rank: torch.Tensor,
                 psum_num_recv_tokens_per_expert: torch.Tensor,
                 num_unaligned_recv_tokens_per_expert: Optional[torch.Tensor], recv_src_metadata: torch.Tensor,
                 dst_buffer_slot_idx: torch.Tensor, token_metadata_at_forward: Optional[torch.Tensor] = None,
                 channel_linked_list: Optional[torch.Tensor] = None) -> None:
        """
        Record a dispatch's routing (made by `ElasticBuffer.dispatch`; see the class attributes).

        Arguments:
            do_expand: see the attributes.
            num_experts: see the attributes.
            expert_alignment: see the attributes.
            num_max_tokens_per_rank: see the attributes.
            num_sms: see the attributes.
            topk_idx: see the attributes.
            num_recv_tokens: see the attributes.
            num_expanded_tokens: see the attributes.
            num_recv_tokens_per_expert_list: see the attributes.
            psum_num_recv_tokens_per_scaleup_rank: see the attributes.
            psum_num_recv_tokens_per_expert: see the attributes.
            num_unaligned_recv_tokens_per_expert: see the attributes.
            recv_src_metadata: see the attributes.
            dst_buffer_slot_idx: see the attributes.
            token_metadata_at_forward: see the attributes.
            channel_linked_list: see the attributes.
        """
        self.do_expand = do_expand
        self.num_experts = num_experts
        self.expert_alignment = expert_alignment
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_sms = num_sms
        self.topk_idx = topk_idx
        self.num_recv_tokens = num_recv_tokens
        self.num_expanded_tokens = num_expanded_tokens
        self.num_recv_tokens_per_expert_list = num_recv_tokens_per_expert_list
        self.psum_num_recv_tokens_per_scaleup_rank = psum_num_recv_tokens_per_scaleup_rank
        self.psum_num_recv_tokens_per_expert = psum_num_recv_tokens_per_expert
        self.num_unaligned_recv_tokens_per_expert = num_unaligned_recv_tokens_per_expert
        self.recv_src_metadata = recv_src_metadata
        self.dst_buffer_slot_idx = dst_buffer_slot_idx
        self.token_metadata_at_forward = token_metadata_at_forward
        self.channel_linked_list = channel_linked_list
        self._route = None


def _torch_event(event) -> Optional[torch.cuda.Event]:
    """The torch.cuda.Event inside an EventHandle, an EventOverlap or a torch.cuda.Event."""
    if event is None or isinstance(event, torch.cuda.Event):
        return event
    inner = getattr(event, "event", None)
    if isinstance(event, EventOverlap):
        if inner is None:
            raise ValueError("anyep ElasticBuffer: previous_event is an EventOverlap without an event")
        return inner.event
    if isinstance(inner, torch.cuda.Event):
        return inner
    raise ValueError(f"anyep ElasticBuffer: an event must be an EventHandle (ElasticBuffer.capture()), an "
                     f"EventOverlap or a torch.cuda.Event, got {type(event).__name__}")


def _not_provided(name: str, what: str):
    raise NotImplementedError(f"anyep ElasticBuffer: {name} is not provided ({what} is not part of anyep; "
                              "docs/elastic.md, \"Not provided\")")


def _expect(t, name: str, dtype: torch.dtype, dim: int) -> None:
    if not isinstance(t, torch.Tensor):
        raise ValueError(f"anyep ElasticBuffer: {name} must be a torch.Tensor, got {type(t).__name__}")
    if t.dtype != dtype or t.dim() != dim or not t.is_cuda:
        raise ValueError(f"anyep ElasticBuffer: {name} must be a {dim}-D CUDA {dtype} tensor, got {t.dim()}-D "
                         f"{t.dtype} on {t.device}")


class ElasticBuffer:
    """
    deep_ep V2's ElasticBuffer on anyep: dispatch and combine with V2's arguments, returns and
    handle, over anyep's high-throughput intranode path (1..16 ranks of one node that reach each
    other by direct stores: NVLink, PCIe peer access, or processes sharing a GPU). Combine adds each
    token's contributions in deep_ep V2's order (bias first, then each rank's partial sum at its
    last top-k slot), so its result is bitwise V2's. Engram, pipeline-parallel send/recv and AGRS
    are not provided (their calls raise NotImplementedError naming them).

    Attributes:
        group: the torch.distributed group.
        rank_idx: this rank in the group.
        num_ranks: ranks of the group.
        allow_hybrid_mode: accepted (one node has no hybrid mode).
        allow_multiple_reduction: whether an expanded combine adds each rank's slots into one partial
            sum before sending it (else every slot is sent and added at the source).
        prefer_overlap_with_compute: use fewer SMs (`get_theoretical_num_sms`).
        deterministic: accepted; anyep's outputs are always deterministic.
        num_bytes: bytes of the high-throughput region.
        num_max_tokens_per_rank: the default token bound of `dispatch`.
        num_allocated_qps: accepted QP count (anyep opens no queue pairs).
        num_scaleout_ranks: 1 (one node).
        num_scaleup_ranks: ranks of the group.
        scaleout_rank_idx: 0.
        scaleup_rank_idx: this rank.
        num_rdma_ranks: 1.
        num_nvlink_ranks: ranks of the group.
        explicitly_destroy: whether `destroy()` releases the resources (else the destructor does).
        runtime: the anyep.Buffer underneath (its `runtime` is the anyep._C.HTBuffer).
    """

    def __init__(self, group: dist.ProcessGroup, num_bytes: Optional[int] = None, num_cpu_bytes: int = 0,
                 num_max_tokens_per_rank: int = 0, hidden: int = 0, num_topk: int = 0,
                 use_fp8_dispatch: bool = False, deterministic: bool = False, allow_hybrid_mode: bool = True,
                 allow_multiple_reduction: bool = True, prefer_overlap_with_compute: bool = True, sl_idx: int = 3,
                 num_allocated_qps: int = 0, num_cpu_timeout_secs: int = 300, num_gpu_timeout_secs: int = 100,
                 explicitly_destroy: bool = False) -> None:
        """
        Create the buffer and connect it to every rank of `group` (a collective call).

        Arguments:
            group: the torch.distributed group; every rank constructs its buffer.
            num_bytes: the region size in bytes; None: sized from the MoE settings below
                (`get_buffer_size_hint` with this buffer's SM count).
            num_cpu_bytes: the CPU buffer of Engram: must be 0 (not provided).
            num_max_tokens_per_rank: the default token bound of `dispatch` (and of the sizing).
            hidden: the hidden size, a multiple of 8 (for the sizing).
            num_topk: top-k (0: not known; the sizing covers top-k 16).
            use_fp8_dispatch: accepted (a BF16 row is the larger; the sizing covers both).
            deterministic: accepted; received rows are always ordered by source rank and token.
            allow_hybrid_mode: accepted (one node has no hybrid mode).
            allow_multiple_reduction: see the attributes.
            prefer_overlap_with_compute: see the attributes.
            sl_idx: accepted; anyep sets no RDMA service level.
            num_allocated_qps: accepted (0: deep_ep's default count); anyep opens no queue pairs.
            num_cpu_timeout_secs: accepted, must be positive; the host's waits use ANYEP_TIMEOUT_S.
            num_gpu_timeout_secs: accepted, must be positive; the kernels' waits use ANYEP_TIMEOUT_S.
            explicitly_destroy: if True, `destroy()` releases the resources; otherwise the destructor.

        Raises:
            ValueError: a bad argument (named) or a group of more than 16 ranks.
            NotImplementedError: `num_cpu_bytes` > 0, or ranks on several nodes.
        """
        plan.check_construction(num_bytes, num_cpu_bytes, num_max_tokens_per_rank, hidden, num_topk,
                                num_allocated_qps, num_cpu_timeout_secs, num_gpu_timeout_secs)
        self.group = group
        self.rank_idx, self.num_ranks = group.rank(), group.size()
        self.allow_hybrid_mode = bool(allow_hybrid_mode)
        self.allow_multiple_reduction = bool(allow_multiple_reduction)
        self.prefer_overlap_with_compute = bool(prefer_overlap_with_compute)
        self.deterministic = bool(deterministic)
        self.use_fp8_dispatch = bool(use_fp8_dispatch)
        self.sl_idx = sl_idx
        self.num_cpu_timeout_secs, self.num_gpu_timeout_secs = num_cpu_timeout_secs, num_gpu_timeout_secs
        self.num_max_tokens_per_rank = num_max_tokens_per_rank
        self.num_allocated_qps = num_allocated_qps or plan.default_num_allocated_qps(self.allow_hybrid_mode)
        self.explicitly_destroy = bool(explicitly_destroy)
        self._device_sms = torch.cuda.get_device_properties(torch.cuda.current_device()).multi_processor_count
        if num_bytes is None:
            num_sms = plan.automatic_num_sms(self.prefer_overlap_with_compute, self._device_sms)
            num_bytes = self._size(self.num_ranks, hidden, num_sms)
        self.num_bytes = int(num_bytes)
        self.runtime = None
        self.runtime = Buffer(group, num_nvl_bytes=self.num_bytes, explicitly_destroy=True)
        if self.runtime._internode is not None:
            self.runtime.destroy()
            self.runtime = None
            raise NotImplementedError("anyep ElasticBuffer: the ranks span several nodes; ElasticBuffer serves the "
                                      "ranks of one node (anyep.Buffer serves several: docs/ht.md, \"Internode\")")
        self._comm = self.runtime.get_comm_stream()
        self._comm_ptr = self._comm.cuda_stream
        self._chunks = Buffer.get_dispatch_config(self.num_ranks)
        self.num_scaleout_ranks, self.num_scaleup_ranks = 1, self.num_ranks
        self.scaleout_rank_idx, self.scaleup_rank_idx = 0, self.rank_idx
        self.num_rdma_ranks, self.num_nvlink_ranks = 1, self.num_ranks
        torch.cuda.synchronize()
        dist.barrier(group=group)

    # ---- sizes and hints ---------------------------------------------------------------------------
    @staticmethod
    def _size(num_ranks: int, hidden: int, num_sms: int) -> int:
        cfg = Buffer.get_dispatch_config(num_ranks)
        return plan.buffer_size(num_ranks, hidden, num_sms, cfg.num_max_nvl_chunked_recv_tokens,
                                lambda hb, r, s, q: _ext().ht_size_hint(hb, r, s, q))

    @staticmethod
    def get_buffer_size_hint(group: dist.ProcessGroup, num_max_tokens_per_rank: int, hidden: int, num_topk: int = 0,
                             use_fp8_dispatch: bool = False, allow_hybrid_mode: bool = True,
                             allow_multiple_reduction: bool = True) -> int:
        """
        Get the buffer size for a MoE shape without building a buffer, a multiple of 2 MiB. It
        covers calls with up to the automatic SM count without `prefer_overlap_with_compute` (the
        larger one); the rings are reused, so the size does not grow with the token count.

        Arguments:
            group: the group (its size is what matters).
            num_max_tokens_per_rank: the token bound (> 0).
            hidden: the hidden size, a multiple of 8.
            num_topk: top-k (0..16; the size covers 16).
            use_fp8_dispatch: accepted (a BF16 row is the larger).
            allow_hybrid_mode: accepted (one node).
            allow_multiple_reduction: accepted (combine moves rows of the same size either way).

        Returns:
            size: bytes to pass as `num_bytes`.

        Raises:
            ValueError: a bad argument, named.
        """
        plan.check_construction(None, 0, num_max_tokens_per_rank, hidden, num_topk, 0, 1, 1)
        return ElasticBuffer._size(group.size(), hidden, plan.MAX_NUM_SMS)

    def get_theoretical_num_sms(self, num_experts: int, num_topk: int, num_scaleout_topk: int = 0,
                                rdma_gbs: float = 0, nvlink_gbs: float = 0, sm_read_gbs: float = 200,
                                sm_write_gbs: float = 50) -> int:
        """
        Get the SM count of a dispatch or combine: 24 with `prefer_overlap_with_compute` (SMs left
        to compute), else 48, where anyep's HT kernels stop scaling (docs/bench/ht.md); at most the
        device's SMs, even.

        Arguments:
            num_experts: experts over all ranks (a multiple of the group size).
            num_topk: top-k (1..16).
            num_scaleout_topk: must be 0 (as in deep_ep).
            rdma_gbs: accepted (one node: no RDMA).
            nvlink_gbs: accepted (the count follows the kernels' measured scaling).
            sm_read_gbs: accepted.
            sm_write_gbs: accepted.

        Returns:
            num_sms: an even SM count.

        Raises:
            ValueError: a bad expert count or top-k, or `num_scaleout_topk` != 0.
        """
        if num_scaleout_topk != 0:
            raise ValueError(f"anyep ElasticBuffer: num_scaleout_topk must be 0, got {num_scaleout_topk}")
        return plan.theoretical_num_sms(self.prefer_overlap_with_compute, self._device_sms, self.num_ranks,
                                        num_experts, num_topk)

    def get_theoretical_num_qps(self, num_sms: int) -> int:
        """
        Get deep_ep's QP count for `num_sms` SMs, capped by `num_allocated_qps` (anyep opens no queue
        pairs; the number is kept for code that sizes by it).

        Arguments:
            num_sms: SMs of the call.

        Returns:
            num_qps: the count.
        """
        return plan.theoretical_num_qps(num_sms, self.allow_hybrid_mode, self.num_allocated_qps)

    def get_physical_domain_size(self) -> Tuple[int, int]:
        """
        Get the physical domain sizes.

        Returns:
            num_rdma_ranks: 1 (one node).
            num_nvlink_ranks: ranks of the group.
        """
        return self.num_rdma_ranks, self.num_nvlink_ranks

    def get_logical_domain_size(self) -> Tuple[int, int]:
        """
        Get the logical domain sizes.

        Returns:
            num_scaleout_ranks: 1 (one node).
            num_scaleup_ranks: ranks of the group.
        """
        return self.num_scaleout_ranks, self.num_scaleup_ranks

    # ---- streams, barrier, lifetime ----------------------------------------------------------------
    @staticmethod
    def capture() -> EventHandle:
        """
        Record an event on the current stream.

        Returns:
            event: the EventHandle.
        """
        return EventHandle()

    def get_comm_stream(self) -> torch.cuda.Stream:
        """
        Get the communication stream the calls run on.

        Returns:
            stream: the stream.
        """
        return self._comm

    def barrier(self, use_comm_stream: bool = True, with_cpu_sync: bool = False, sequential: bool = True) -> None:
        """
        Barrier over the group: the chosen stream's work finishes, then every rank meets on the host
        (stronger than deep_ep's GPU barrier: it blocks the host).

        Arguments:
            use_comm_stream: wait for the communication stream (else the current stream).
            with_cpu_sync: also synchronize the whole device before and after.
            sequential: accepted (the host barrier is one step).
        """
        self._live()
        if with_cpu_sync:
            torch.cuda.synchronize()
        (self._comm if use_comm_stream else torch.cuda.current_stream()).synchronize()
        self.runtime._barrier()
        if with_cpu_sync:
            torch.cuda.synchronize()

    def destroy(self) -> None:
        """
        Release the buffer's resources (needs `explicitly_destroy=True`); a second call does nothing.

        Raises:
            RuntimeError: the buffer was built with `explicitly_destroy=False`.
        """
        if not self.explicitly_destroy:
            raise RuntimeError("anyep ElasticBuffer: destroy() is only for buffers built with explicitly_destroy=True")
        if self.runtime is not None:
            self.runtime.destroy()
            self.runtime = None

    def __del__(self):
        """
        Release the resources of a buffer built with `explicitly_destroy=False`; errors are ignored.
        """
        if not getattr(self, "explicitly_destroy", True) and getattr(self, "runtime", None) is not None:
            try:
                self.runtime.destroy()
            except Exception:
                pass
            self.runtime = None

    def check_async_error(self) -> None:
        """
        Raise the error an earlier kernel reported, if any (anyep only; see anyep.Buffer).

        Raises:
            TimeoutError: a kernel gave up waiting for a peer (named).
            ValueError: a kernel refused its input.
        """
        self._live().check_async_error()

    def _live(self) -> Buffer:
        if self.runtime is None:
            raise RuntimeError("anyep ElasticBuffer: the buffer was destroyed")
        return self.runtime

    def _begin(self, previous_event, allocate_on_comm_stream: bool):
        """The comm stream waits for `previous_event` (or the current stream); returns the current
        stream and the stream the outputs are allocated on."""
        compute = torch.cuda.current_stream()
        ev = _torch_event(previous_event)
        if ev is not None:
            self._comm.wait_event(ev)
        else:
            self._comm.wait_stream(compute)
        return compute, (self._comm if allocate_on_comm_stream else compute)

    def _end(self, compute: torch.cuda.Stream, async_with_compute_stream: bool, keep: tuple) -> ElasticEventOverlap:
        """An async call's event keeps `keep` alive (no record_stream: capturable); otherwise the
        current stream waits for the comm stream."""
        if async_with_compute_stream:
            return ElasticEventOverlap(EventHandle(self._comm), tuple(t for t in keep if t is not None))
        compute.wait_stream(self._comm)
        return ElasticEventOverlap()

    # ---- dispatch ----------------------------------------------------------------------------------
    def dispatch(self, x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]],
                 topk_idx: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None,
                 cumulative_local_expert_recv_stats: Optional[torch.Tensor] = None,
                 num_experts: Optional[int] = None, num_max_tokens_per_rank: Optional[int] = None,
                 expert_alignment: Optional[int] = None, num_sms: int = 0, num_qps: int = 0,
                 previous_event=None, previous_event_before_epilogue=None, async_with_compute_stream: bool = False,
                 allocate_on_comm_stream: bool = False, handle: Optional[EPHandle] = None,
                 do_handle_copy: bool = True, do_cpu_sync: Optional[bool] = None, do_expand: bool = False,
                 do_zero_padding: bool = False, use_tma_aligned_col_major_sf: bool = False) -> \
            Tuple[Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]], Optional[torch.Tensor],
                  Optional[torch.Tensor], EPHandle, ElasticEventOverlap]:
        """
        Send each token to the ranks owning its top-k experts (every rank of the group calls it).
        Received rows are ordered by source rank, then source token index.

        Arguments:
            x: `[num_tokens, hidden]` `torch.bfloat16`, or a tuple of `[num_tokens, hidden]`
                `torch.float8_e4m3fn` and its `[num_tokens, hidden / 128]` scales (`torch.float`, or
                packed `torch.int`); `num_tokens` at most `num_max_tokens_per_rank`.
            topk_idx: `[num_tokens, num_topk]` `torch.int64` expert indices (-1: none); None with a handle.
            topk_weights: `[num_tokens, num_topk]` `torch.float` weights, or None.
            cumulative_local_expert_recv_stats: `[num_local_experts]` `torch.int`; the tokens each local
                expert receives are added to it.
            num_experts: experts over all ranks (from the handle when one is given).
            num_max_tokens_per_rank: the token bound (default: the buffer's, or the handle's).
            expert_alignment: each local expert's count is padded to a multiple of it (default 1).
            num_sms: SMs (0: `get_theoretical_num_sms`); a cached dispatch uses the handle's.
            num_qps: accepted (no queue pairs).
            previous_event: an event the communication stream waits for first (needs
                `allocate_on_comm_stream`).
            previous_event_before_epilogue: an event waited for before the layout step that follows
                the kernels.
            async_with_compute_stream: the current stream does not wait; wait for the returned event.
            allocate_on_comm_stream: allocate the outputs on the communication stream.
            handle: an EPHandle of an earlier dispatch with the same routing (a cached dispatch).
            do_handle_copy: keep a copy of `topk_idx` in the handle (else the tensor itself).
            do_cpu_sync: wait for the received counts and return exact-size outputs (default True;
                False with a handle): without it the outputs have the worst-case row counts.
            do_expand: the expanded layout: one row per received token and local expert it chose,
                grouped by expert, each group padded to `expert_alignment`.
            do_zero_padding: zero the expanded layout's padding rows (needs `do_expand`).
            use_tma_aligned_col_major_sf: return FP8 scales column-major with rows padded to 4.

        Returns:
            recv_x: the received tokens, of `x`'s kind (a tensor, or a tuple of tokens and scales).
            recv_topk_idx: `[rows, num_topk]` `torch.int64` local expert ids (-1: not this rank's), or
                None in the expanded layout.
            recv_topk_weights: `[rows, num_topk]` `torch.float` (0 where the id is -1), `[rows]`
                expanded, or None without `topk_weights`.
            handle: the EPHandle (the one given, for a cached dispatch).
            event: the event to wait for with `async_with_compute_stream`, else an empty one.

        Raises:
            ValueError: a bad argument (named), before any kernel runs.
            TimeoutError: a peer did not take part in time (named).
        """
        rt = self._live()
        ht = rt._ht
        x, sf = (x[0], x[1]) if isinstance(x, (tuple, list)) else (x, None)
        if handle is not None and (not isinstance(handle, EPHandle) or handle._route is None
                                   or handle._route.owner is not self):
            raise ValueError("anyep ElasticBuffer: handle must be an EPHandle made by this buffer's dispatch")
        if not isinstance(x, torch.Tensor) or x.dim() != 2:
            raise ValueError("anyep ElasticBuffer: x must be a 2-D tensor (or a tuple of tokens and scales)")
        source_idx = handle.topk_idx if handle is not None else topk_idx
        if not isinstance(source_idx, torch.Tensor) and handle is None and topk_idx is not None:
            raise ValueError(f"anyep ElasticBuffer: topk_idx must be a torch.Tensor, got {type(topk_idx).__name__}")
        num_topk = source_idx.size(1) if isinstance(source_idx, torch.Tensor) and source_idx.dim() == 2 else 0
        num_experts, num_max, alignment, do_cpu_sync = plan.dispatch_args(
            self.num_ranks, x.size(0), num_topk, topk_idx is not None, handle, num_experts, num_max_tokens_per_rank,
            self.num_max_tokens_per_rank, expert_alignment, do_cpu_sync, do_expand, do_zero_padding, num_sms, num_qps,
            previous_event is not None, allocate_on_comm_stream)
        if topk_weights is not None:
            _expect(topk_weights, "topk_weights", torch.float32, 2)
        if cumulative_local_expert_recv_stats is not None:
            _expect(cumulative_local_expert_recv_stats, "cumulative_local_expert_recv_stats", torch.int32, 1)
        R, dev = self.num_ranks, x.device
        if handle is not None:
            num_sms = handle.num_sms
        elif num_sms == 0:
            num_sms = self.get_theoretical_num_sms(num_experts, num_topk)
        tuning = (num_sms, self._chunks.num_max_nvl_chunked_send_tokens, self._chunks.num_max_nvl_chunked_recv_tokens)
        compute, alloc = self._begin(previous_event, allocate_on_comm_stream)

        def empty(shape, dtype):
            with torch.cuda.stream(alloc):
                return torch.empty(shape, dtype=dtype, device=dev)

        route = handle._route if handle is not None else _Route()
        with torch.cuda.stream(alloc):
            if handle is None:
                ntpr, ntpe, itir = ht.get_dispatch_layout(topk_idx, num_experts, self._comm_ptr)
                with torch.cuda.stream(self._comm):
                    weights = topk_weights if topk_weights is not None else torch.zeros(
                        topk_idx.shape, dtype=torch.float32, device=dev)
                    if do_cpu_sync:
                        # The rows this rank sends (combine's row count), copied to the host before the
                        # dispatch kernels: read once the dispatch has waited for the counts anyway.
                        sent_host = torch.empty(1, dtype=torch.int64, device="cpu", pin_memory=True)
                        sent_host.copy_(ntpr.sum().to(torch.int64).reshape(1), non_blocking=True)
                        sent_ready = torch.cuda.Event()
                        sent_ready.record(self._comm)
                worst = 0 if do_cpu_sync else R * num_max
                recv_x, recv_sf, recv_idx, recv_w, per_expert, rpm, cpm, rcpm, recv_src_idx, send_head = ht.dispatch(
                    x, sf, topk_idx, weights, ntpr, itir, ntpe, 0, None, None, alignment, worst, *tuning,
                    self._comm_ptr)
                if topk_weights is None:
                    recv_w = None
            elif topk_weights is None:
                rpm, cpm = route.ht_handle[0], route.ht_handle[1]
                recv_x, recv_sf = ht.dispatch(x, sf, None, None, None, route.is_token_in_rank, None,
                                              route.num_recv_rows, rpm, cpm, alignment, 0, *tuning, self._comm_ptr)[:2]
                recv_idx, recv_w = route.recv_topk_idx, None
            else:
                # A cached dispatch that carries weights: the full dispatch with the handle's layout,
                # sized by the handle (no CPU sync).
                M = route.num_recv_rows
                recv_x, recv_sf, _, recv_w = ht.dispatch(
                    x, sf, handle.topk_idx, topk_weights, route.num_tokens_per_rank, route.is_token_in_rank,
                    route.num_tokens_per_expert, 0, None, None, alignment, max(1, M), *tuning, self._comm_ptr)[:4]
                recv_x, recv_w = recv_x[:M], recv_w[:M]
                recv_sf = recv_sf[:M] if recv_sf is not None else None
                recv_idx = route.recv_topk_idx
        ev = _torch_event(previous_event_before_epilogue)
        if ev is not None:
            self._comm.wait_event(ev)
        with torch.cuda.stream(self._comm):
            if handle is None:
                self._make_route(route, topk_idx, itir, ntpr, ntpe, (rpm, cpm, rcpm, recv_src_idx, itir, send_head),
                                 recv_idx, num_experts, do_expand, alignment, num_topk)
                if do_cpu_sync:
                    sent_ready.synchronize()
                    route.num_send_rows = int(sent_host.item())
                else:
                    route.num_send_rows = x.size(0) * min(R, num_topk)
                handle = self._make_handle(route, empty, do_expand, num_experts, alignment, num_max, num_sms,
                                           topk_idx.clone() if do_handle_copy else topk_idx, per_expert, do_cpu_sync,
                                           recv_src_idx, rpm, itir, num_topk)
            if cumulative_local_expert_recv_stats is not None:
                cumulative_local_expert_recv_stats.add_(route.counts)
            if do_expand:
                recv_x, recv_sf, recv_w = self._expand(route, handle.num_expanded_tokens, recv_x, recv_sf, recv_w,
                                                       do_zero_padding, use_tma_aligned_col_major_sf, empty)
                recv_idx = None
            elif recv_sf is not None and use_tma_aligned_col_major_sf:
                recv_sf = self._col_major(recv_sf, empty)
        keep = (x, sf, topk_idx, topk_weights, cumulative_local_expert_recv_stats, recv_x, recv_sf, recv_idx, recv_w,
                handle.topk_idx, handle.recv_src_metadata, handle.dst_buffer_slot_idx,
                handle.psum_num_recv_tokens_per_scaleup_rank, handle.psum_num_recv_tokens_per_expert)
        event = self._end(compute, async_with_compute_stream, keep)
        return (recv_x, recv_sf) if recv_sf is not None else recv_x, recv_idx, recv_w, handle, event

    def _make_route(self, route: _Route, topk_idx, itir, ntpr, ntpe, ht_handle, recv_idx, num_experts, do_expand,
                    alignment, num_topk) -> None:
        """A dispatch's routing tables, on the comm stream (temporaries there)."""
        R, L = self.num_ranks, num_experts // self.num_ranks
        dev = topk_idx.device
        route.owner = self
        route.num_tokens = topk_idx.size(0)
        route.is_token_in_rank, route.num_tokens_per_rank, route.num_tokens_per_expert = itir, ntpr, ntpe
        route.ht_handle = ht_handle
        route.recv_topk_idx = recv_idx
        M = recv_idx.size(0)
        route.num_recv_rows = M
        rpm = ht_handle[0]
        psum = rpm[:, self.rank_idx].to(torch.int64)
        route.src_rank = torch.searchsorted(psum, torch.arange(M, dtype=torch.int64, device=dev), right=True)
        # Position of each token in the list sent to each rank (the order the receiver keeps).
        sent = itir.to(torch.int32)
        route.send_pos = torch.where(itir, torch.cumsum(sent, dim=0, dtype=torch.int32) - 1,
                                     torch.full_like(sent, -1))
        route.send_offsets = torch.cumsum(ntpr.to(torch.int64), 0) - ntpr.to(torch.int64)
        # The rank owning each slot's expert (-1: none); floor division keeps -1 at -1.
        route.owner_rank = torch.div(topk_idx, L, rounding_mode="floor")
        valid = recv_idx >= 0
        slot_expert = torch.where(valid, recv_idx, torch.full_like(recv_idx, L))
        counts = torch.zeros(L + 1, dtype=torch.int64, device=dev)
        counts.scatter_add_(0, slot_expert.reshape(-1), torch.ones(slot_expert.numel(), dtype=torch.int64, device=dev))
        route.counts = counts[:L].to(torch.int32)
        route.positions = None
        if do_expand:
            # Row of (received token i, slot j) in the expanded layout: its expert's aligned start
            # plus its rank among that expert's tokens in received order.
            c = counts[:L]
            aligned = (c + alignment - 1) // alignment * alignment
            start = torch.cumsum(aligned, 0) - aligned
            before = torch.cumsum(c, 0) - c
            n = slot_expert.numel()
            flat = torch.arange(n, dtype=torch.int64, device=dev)
            keys, order = torch.sort(slot_expert.reshape(-1) * n + flat)
            e = torch.div(keys, n, rounding_mode="floor")
            ec = e.clamp(max=L - 1)
            rows = start[ec] + (torch.arange(n, dtype=torch.int64, device=dev) - before[ec])
            rows = torch.where(e < L, rows, torch.full_like(rows, -1))
            pos = torch.empty(n, dtype=torch.int64, device=dev)
            pos.scatter_(0, order, rows)
            route.positions = pos.view(M, num_topk)

    def _make_handle(self, route: _Route, empty, do_expand, num_experts, alignment, num_max, num_sms, topk_idx,
                     per_expert, do_cpu_sync, recv_src_idx, rpm, itir, num_topk) -> EPHandle:
        R, me, L = self.num_ranks, self.rank_idx, num_experts // self.num_ranks
        M, dev = route.num_recv_rows, recv_src_idx.device
        psum_rank = empty((R,), torch.int32)
        psum_rank.copy_(rpm[:, me])
        valid = route.src_rank < R
        meta = empty((M, num_topk + 2), torch.int32)
        meta[:, 0].copy_(torch.where(valid, route.src_rank * num_max + recv_src_idx.to(torch.int64),
                                     torch.full_like(route.src_rank, -1)))
        meta[:, 1].copy_(torch.where(valid, torch.arange(M, dtype=torch.int64, device=dev),
                                     torch.full_like(route.src_rank, -1)))
        if do_expand:
            meta[:, 2:].copy_(route.positions)
        else:
            meta[:, 2:].fill_(-1)
        base = rpm[me - 1].to(torch.int32) if me > 0 else torch.zeros(R, dtype=torch.int32, device=dev)
        dst = empty(tuple(itir.shape), torch.int32)
        dst.copy_(torch.where(itir, base.unsqueeze(0) + route.send_pos, route.send_pos))
        counts = route.counts.to(torch.int64)
        aligned = (counts + alignment - 1) // alignment * alignment
        psum_expert = empty((L,), torch.int32)
        unaligned = None
        if do_expand:
            psum_expert.copy_(torch.cumsum(aligned, 0) - aligned + counts)
            unaligned = empty((L,), torch.int32)
            unaligned.copy_(route.counts)
        else:
            psum_expert.copy_(torch.cumsum(aligned, 0))
        per_expert = list(per_expert) if do_cpu_sync else []
        if do_cpu_sync:
            num_expanded = sum(per_expert)
        else:
            num_expanded = plan.worst_case_rows(R, num_max, num_topk, L, alignment)[1]
        handle = EPHandle(do_expand, num_experts, alignment, num_max, num_sms, topk_idx, M, num_expanded, per_expert,
                          psum_rank, psum_expert, unaligned, meta, dst)
        handle._route = route
        return handle

    @staticmethod
    def _col_major(sf: torch.Tensor, empty) -> torch.Tensor:
        rows, cols = sf.shape
        store = empty((cols, plan.align(max(rows, 1), _TMA_ROW_ALIGNMENT)), sf.dtype)
        out = store[:, :rows].t()
        out.copy_(sf)
        return out

    def _expand(self, route: _Route, num_rows: int, recv_x, recv_sf, recv_w, zero, col_major, empty):
        """The expanded layout from the received rows, on the comm stream. A spare last row takes
        the (row, slot) pairs that select no local expert."""
        pos = route.positions
        M, K = pos.shape
        target = torch.where(pos >= 0, pos, torch.full_like(pos, num_rows)).t().contiguous()
        store_x = empty((num_rows + 1, recv_x.size(1)), recv_x.dtype)
        # One-byte rows (FP8) are moved as bytes: the index kernels need not know FP8.
        bytes_of = (lambda t: t.view(torch.uint8)) if recv_x.element_size() == 1 else (lambda t: t)
        if zero:
            bytes_of(store_x).zero_()
        for j in range(K):
            bytes_of(store_x).index_copy_(0, target[j], bytes_of(recv_x))
        out_x = store_x[:num_rows]
        out_sf = out_w = None
        if recv_sf is not None:
            tmp = torch.zeros((num_rows + 1, recv_sf.size(1)), dtype=recv_sf.dtype, device=recv_sf.device)
            for j in range(K):
                tmp.index_copy_(0, target[j], recv_sf)
            if col_major:
                out_sf = self._col_major(tmp[:num_rows], empty)
            else:
                out_sf = empty((num_rows, recv_sf.size(1)), recv_sf.dtype)
                out_sf.copy_(tmp[:num_rows])
        if recv_w is not None:
            store_w = empty((num_rows + 1,), torch.float32)
            if zero:
                store_w.zero_()
            for j in range(K):
                store_w.index_copy_(0, target[j], recv_w[:, j].contiguous())
            out_w = store_w[:num_rows]
        return out_x, out_sf, out_w

    # ---- combine -----------------------------------------------------------------------------------
    @staticmethod
    def _unpack_bias(bias) -> Tuple[Optional[torch.Tensor], Optional[torch.Tensor]]:
        if bias is None:
            return None, None
        if isinstance(bias, torch.Tensor):
            return bias, None
        if isinstance(bias, (tuple, list)) and len(bias) == 2:
            return bias[0], bias[1]
        raise ValueError(f"anyep ElasticBuffer: bias must be None, a tensor or a tuple of two tensors, got "
                         f"{type(bias).__name__}")

    def combine(self, x: torch.Tensor, handle: EPHandle, topk_weights: Optional[torch.Tensor] = None,
                bias: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor], None] = None, num_sms: int = 0,
                num_qps: int = 0, previous_event=None, previous_event_before_epilogue=None,
                async_with_compute_stream: bool = False, allocate_on_comm_stream: bool = False) -> \
            Tuple[torch.Tensor, Optional[torch.Tensor], ElasticEventOverlap]:
        """
        Send the received rows back to the ranks the tokens came from and sum them there, without
        weights (every rank of the group calls it). Each token's result is deep_ep V2's, bitwise: in
        FP32, the bias (the sum of both tensors when two), then for each rank that got the token its
        row, at the position of the token's last top-k slot owned by that rank, in slot order; then
        rounded to BF16 once. Expanded, a rank's row is first the FP32 sum of its slots in slot
        order rounded to BF16 (`allow_multiple_reduction`), or each slot is added on its own.

        Arguments:
            x: `[rows, hidden]` `torch.bfloat16`, rows as the dispatch's received tensors (expanded
                rows for an expanded handle).
            handle: the EPHandle of the dispatch.
            topk_weights: `[rows, num_topk]` `torch.float` (`[rows]` expanded), or None; the result's
                slot j is the weight sent back by the rank owning slot j's expert.
            bias: None, one `[num_tokens, hidden]` `torch.bfloat16` tensor, or a tuple of two.
            num_sms: SMs (0: the handle's).
            num_qps: accepted (no queue pairs).
            previous_event: an event the communication stream waits for first (needs
                `allocate_on_comm_stream`).
            previous_event_before_epilogue: an event waited for before the final sum.
            async_with_compute_stream: the current stream does not wait; wait for the returned event.
            allocate_on_comm_stream: allocate the outputs on the communication stream.

        Returns:
            combined_x: `[num_tokens, hidden]` `torch.bfloat16`.
            combined_topk_weights: `[num_tokens, num_topk]` `torch.float`, or None.
            event: the event to wait for with `async_with_compute_stream`, else an empty one.

        Raises:
            ValueError: a bad argument (named), before any kernel runs.
            TimeoutError: a peer did not take part in time (named).
        """
        rt = self._live()
        ht = rt._ht
        if not isinstance(handle, EPHandle) or handle._route is None or handle._route.owner is not self:
            raise ValueError("anyep ElasticBuffer: handle must be an EPHandle made by this buffer's dispatch")
        route = handle._route
        rows = handle.num_expanded_tokens if handle.do_expand else route.num_recv_rows
        _expect(x, "x", torch.bfloat16, 2)
        if x.size(0) != rows or not x.is_contiguous():
            raise ValueError(f"anyep ElasticBuffer: x must be contiguous with {rows} rows (the dispatch's), got "
                             f"{tuple(x.shape)}")
        hidden = x.size(1)
        M, K = route.recv_topk_idx.shape
        if topk_weights is not None:
            _expect(topk_weights, "topk_weights", torch.float32, 1 if handle.do_expand else 2)
            want = (rows,) if handle.do_expand else (M, K)
            if tuple(topk_weights.shape) != want:
                raise ValueError(f"anyep ElasticBuffer: topk_weights must have shape {want}, got "
                                 f"{tuple(topk_weights.shape)}")
        bias_0, bias_1 = self._unpack_bias(bias)
        for name, b in (("bias[0]", bias_0), ("bias[1]", bias_1)):
            if b is not None:
                _expect(b, name, torch.bfloat16, 2)
                if tuple(b.shape) != (route.num_tokens, hidden):
                    raise ValueError(f"anyep ElasticBuffer: {name} must have shape {(route.num_tokens, hidden)}, "
                                     f"got {tuple(b.shape)}")
        plan.check_call(num_sms, num_qps, previous_event is not None, allocate_on_comm_stream)
        num_sms = num_sms or handle.num_sms
        tuning = (num_sms, self._chunks.num_max_nvl_chunked_send_tokens, self._chunks.num_max_nvl_chunked_recv_tokens)
        compute, alloc = self._begin(previous_event, allocate_on_comm_stream)
        R, dev = self.num_ranks, x.device
        with torch.cuda.stream(self._comm):
            valid_row = route.src_rank < R
            pos = route.positions
            # Per received row: the weights to send back ([M, K]; zeros without weights, so that
            # every rank's rows have the same top-k width whatever the others pass).
            if topk_weights is None:
                back_w = torch.zeros((M, K), dtype=torch.float32, device=dev)
            elif handle.do_expand:
                back_w = torch.where(pos >= 0, topk_weights[pos.clamp(min=0)], torch.zeros_like(pos, dtype=torch.float32))
            else:
                back_w = topk_weights
            back_idx = torch.where(valid_row, route.src_rank, torch.full_like(route.src_rank, -1))
            back_idx = back_idx.unsqueeze(1).expand(M, back_w.size(1)).contiguous()
            layout = ht.get_dispatch_layout(back_idx, R, self._comm_ptr)
            if not handle.do_expand:
                passes = [x]
            elif self.allow_multiple_reduction:
                acc = torch.zeros((M, hidden), dtype=torch.float32, device=dev)
                for j in range(K):
                    got = x.index_select(0, pos[:, j].clamp(min=0)).float()
                    acc = torch.where((pos[:, j] >= 0).unsqueeze(1), acc + got, acc)
                passes = [acc.to(torch.bfloat16)]
            else:
                passes = [torch.where((pos[:, j] >= 0).unsqueeze(1), x.index_select(0, pos[:, j].clamp(min=0)),
                                      torch.zeros((), dtype=torch.bfloat16, device=dev)) for j in range(K)]
            back = []
            for rows_out in passes:
                got_x, _, _, got_w = ht.dispatch(rows_out, None, back_idx, back_w, layout[0], layout[2], layout[1], 0,
                                                 None, None, 1, max(1, route.num_send_rows), *tuning,
                                                 self._comm_ptr)[:4]
                back.append((got_x, got_w))
        ev = _torch_event(previous_event_before_epilogue)
        if ev is not None:
            self._comm.wait_event(ev)
        with torch.cuda.stream(self._comm):
            combined_x, combined_w = self._sum_back(route, back, hidden, bias_0, bias_1, topk_weights is not None,
                                                    alloc, not handle.do_expand or self.allow_multiple_reduction)
        keep = (x, topk_weights, bias_0, bias_1, combined_x, combined_w, handle)
        event = self._end(compute, async_with_compute_stream, keep)
        return combined_x, combined_w, event

    def _sum_back(self, route: _Route, back, hidden, bias_0, bias_1, with_weights, alloc, per_rank):
        """The source side of combine, on the comm stream: each contribution is picked from the rows
        sent back (ordered by sending rank, then by this rank's token order) and added in V2's order."""
        owner = route.owner_rank
        N, K = owner.shape
        dev = owner.device
        R = self.num_ranks
        # Row of (token t, rank r) among the rows sent back: rank r's block, then t's place in it.
        row_of = route.send_offsets.unsqueeze(0) + route.send_pos.to(torch.int64)
        has = owner >= 0
        r = owner.clamp(min=0, max=R - 1)
        rows = row_of.gather(1, r).clamp(min=0)
        if per_rank:
            # A rank adds its partial once, at its last slot.
            later = torch.zeros_like(has)
            for j in range(K - 2, -1, -1):
                later[:, j] = (owner[:, j + 1:] == owner[:, j:j + 1]).any(dim=1)
            adds = has & ~later
        else:
            adds = has
        if bias_0 is not None:
            acc = bias_0.float() + bias_1.float() if bias_1 is not None else bias_0.float()
        else:
            acc = torch.zeros((N, hidden), dtype=torch.float32, device=dev)
        # Every slot adds a value, +0.0 where it contributes nothing: the same FP32 operations as
        # deep_ep's reference, so even the sign of a zero result matches.
        zero = torch.zeros((), dtype=torch.float32, device=dev)
        for j in range(K):
            got_x = back[0][0] if per_rank else back[j][0]
            vals = got_x.index_select(0, rows[:, j]).float()
            acc = acc + torch.where(adds[:, j:j + 1], vals, zero)
        with torch.cuda.stream(alloc):
            combined_x = torch.empty((N, hidden), dtype=torch.bfloat16, device=dev)
            combined_w = torch.empty((N, K), dtype=torch.float32, device=dev) if with_weights else None
        combined_x.copy_(acc)
        if with_weights:
            picked = back[0][1][rows, torch.arange(K, dtype=torch.int64, device=dev)]
            combined_w.copy_(torch.where(has, picked, torch.zeros((), dtype=torch.float32, device=dev)))
        return combined_x, combined_w

    # ---- not provided ------------------------------------------------------------------------------
    @staticmethod
    def get_engram_storage_size_hint(num_entries: int, hidden: int, num_max_tokens_per_rank: int,
                                     dtype: torch.dtype = torch.bfloat16) -> Tuple[int, int]:
        """
        Not provided: Engram storage is not part of anyep.

        Arguments:
            num_entries: entries of the storage.
            hidden: hidden size of an entry.
            num_max_tokens_per_rank: the token bound.
            dtype: the entry type.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("get_engram_storage_size_hint", "Engram (remote KV fetch over RDMA)")

    @staticmethod
    def get_pp_buffer_size_hint(num_max_tensor_bytes: int, num_max_inflight_tensors: int) -> int:
        """
        Not provided: pipeline-parallel send/recv is not part of anyep.

        Arguments:
            num_max_tensor_bytes: bytes of the largest tensor.
            num_max_inflight_tensors: tensors in flight.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("get_pp_buffer_size_hint", "pipeline-parallel send/recv")

    @staticmethod
    def get_agrs_num_max_session_bytes(group: dist.ProcessGroup, shapes, dtype: torch.dtype) -> int:
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Arguments:
            group: the group.
            shapes: the tensor shapes.
            dtype: the tensor type.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("get_agrs_num_max_session_bytes", "all-gather reduce-scatter (AGRS)")

    @staticmethod
    def get_agrs_buffer_size_hint(group: dist.ProcessGroup, num_max_session_bytes: int) -> int:
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Arguments:
            group: the group.
            num_max_session_bytes: bytes gathered per AGRS scope.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("get_agrs_buffer_size_hint", "all-gather reduce-scatter (AGRS)")

    def engram_write(self, storage: torch.Tensor, sf: Optional[torch.Tensor] = None) -> None:
        """
        Not provided: Engram is not part of anyep.

        Arguments:
            storage: the storage tensor.
            sf: its scaling factors.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("engram_write", "Engram (remote KV fetch over RDMA)")

    def engram_fetch(self, indices: torch.Tensor, num_qps: int = 0, use_tma_aligned_col_major_sf: bool = False):
        """
        Not provided: Engram is not part of anyep.

        Arguments:
            indices: entry indices.
            num_qps: QPs.
            use_tma_aligned_col_major_sf: the scale layout.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("engram_fetch", "Engram (remote KV fetch over RDMA)")

    def pp_set_config(self, num_max_tensor_bytes: int, num_max_inflight_tensors: int) -> None:
        """
        Not provided: pipeline-parallel send/recv is not part of anyep.

        Arguments:
            num_max_tensor_bytes: bytes of the largest tensor.
            num_max_inflight_tensors: tensors in flight.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("pp_set_config", "pipeline-parallel send/recv")

    def pp_send(self, t: torch.Tensor, dst_rank_idx: int, num_sms: int = 0) -> None:
        """
        Not provided: pipeline-parallel send/recv is not part of anyep.

        Arguments:
            t: the tensor.
            dst_rank_idx: the destination rank.
            num_sms: SMs.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("pp_send", "pipeline-parallel send/recv")

    def pp_recv(self, t: torch.Tensor, src_rank_idx: int, num_sms: int = 0) -> None:
        """
        Not provided: pipeline-parallel send/recv is not part of anyep.

        Arguments:
            t: the output tensor.
            src_rank_idx: the source rank.
            num_sms: SMs.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("pp_recv", "pipeline-parallel send/recv")

    def create_agrs_session(self) -> None:
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("create_agrs_session", "all-gather reduce-scatter (AGRS)")

    def destroy_agrs_session(self) -> None:
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("destroy_agrs_session", "all-gather reduce-scatter (AGRS)")

    @contextlib.contextmanager
    def agrs_new_session(self, enabled: bool = True):
        """
        A no-op when not enabled (as in deep_ep); enabled, not provided.

        Arguments:
            enabled: whether an AGRS scope is wanted.

        Raises:
            NotImplementedError: `enabled` is True.
        """
        if enabled:
            _not_provided("agrs_new_session", "all-gather reduce-scatter (AGRS)")
        yield

    def agrs_set_config(self, num_max_session_bytes: int, num_max_all_gathers_per_session: int) -> None:
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Arguments:
            num_max_session_bytes: bytes gathered per AGRS scope.
            num_max_all_gathers_per_session: all-gathers per AGRS scope.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("agrs_set_config", "all-gather reduce-scatter (AGRS)")

    def agrs_get_inplace_tensor(self, shapes, dtype: torch.dtype):
        """
        Not provided: all-gather reduce-scatter (AGRS) is not part of anyep.

        Arguments:
            shapes: the tensor shapes.
            dtype: the tensor type.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("agrs_get_inplace_tensor", "all-gather reduce-scatter (AGRS)")

    def all_gather(self, t: Union[torch.Tensor, Sequence[torch.Tensor]]):
        """
        Not provided: the all-gather of AGRS is not part of anyep.

        Arguments:
            t: the tensor or tensors.

        Raises:
            NotImplementedError: always.
        """
        _not_provided("all_gather", "all-gather reduce-scatter (AGRS)")


def _ranks_per_node(group: dist.ProcessGroup) -> int:
    ids: List[Optional[str]] = [None] * group.size()
    dist.all_gather_object(ids, _ext().host_identity(), group=group)
    return int(_ext().ht_ranks_per_node(ids))


def get_physical_domain_size(group: dist.ProcessGroup) -> Tuple[int, int]:
    """
    Get the physical domain sizes of a group (a collective call): nodes are hosts, or
    ANYEP_HT_RANKS_PER_NODE ranks each.

    Arguments:
        group: the group.

    Returns:
        num_rdma_ranks: the number of nodes.
        num_nvlink_ranks: ranks per node.
    """
    k = _ranks_per_node(group)
    return group.size() // k, k


def get_logical_domain_size(group: dist.ProcessGroup, allow_hybrid_mode: bool = True) -> Tuple[int, int]:
    """
    Get the logical domain sizes of a group (a collective call).

    Arguments:
        group: the group.
        allow_hybrid_mode: with it, nodes are the scale-out domain; without, every rank is one
            scale-up domain.

    Returns:
        num_scaleout_ranks: scale-out ranks.
        num_scaleup_ranks: scale-up ranks.
    """
    if not allow_hybrid_mode:
        return 1, group.size()
    return get_physical_domain_size(group)
