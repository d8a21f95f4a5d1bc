"""anyep.Buffer: deep_ep.Buffer's classic API over the anyep C++ runtime.

Python only marshals: it gathers the connection records through the torch.distributed group (or
an mpi4py communicator), picks the stream and wraps events. Shape/dtype checks, layouts and
kernels live in C++. The per-call path does no host synchronization and no work that could be
done once at construction (docs/ll.md, "Per-call host cost").
"""
from typing import Callable, Optional, Tuple, Union

import torch
import torch.distributed as dist

from .config import Config
from .event import EventHandle, EventOverlap
from .utils import check_nvlink_connections

# The issue that brings the high-throughput (normal) mode.
_HT_ISSUE = 'the "High-throughput mode, part 1" issue'

try:
    from . import _C
except ImportError as _e:  # pragma: no cover - reported when a Buffer is built
    _C = None
    _C_IMPORT_ERROR = _e


def _ext():
    if _C is None:
        raise ImportError(f"anyep: the compiled extension anyep._C is not available ({_C_IMPORT_ERROR}); "
                          "build with -DANYEP_PYTHON=ON or pip install python/")
    return _C


class Buffer:
    """
    Expert-parallel communication buffer for MoE layers, with deep_ep.Buffer's interface.

    Low-latency mode (`low_latency_mode=True`, `num_rdma_bytes` from
    `get_low_latency_rdma_size_hint`): direct stores through CUDA IPC to peers on this host, the
    CPU proxy for the others (ANYEP_LL_PATH picks the path, docs/ll.md). The high-throughput
    methods raise NotImplementedError.

    Rank masking (`enable_shrink=True`, DeepEP's elastic mode): `low_latency_update_mask_buffer`
    masks a rank; dispatch and combine skip masked ranks, and a peer that does not answer within
    ANYEP_TIMEOUT_S is masked instead of failing the call.

    Attributes:
        num_sms: SMs of the high-throughput kernels (kept for compatibility; see `set_num_sms`).
        group: the torch.distributed group the buffer spans (the mpi4py communicator when built
            with `group=None, comm=...`).
        rank: this process's rank in `group`.
        group_size: the number of ranks in `group`.
        num_nvl_bytes: the NVLink buffer size asked for (unused: there is no high-throughput mode yet).
        num_rdma_bytes: the size of the low-latency buffer in bytes.
        low_latency_mode: whether the low-latency buffer was created.
        explicitly_destroy: whether resources are released by `destroy()` rather than by the destructor.
        enable_shrink: whether the rank mask exists (rank masking and elastic timeouts).
        runtime: the C++ runtime object (anyep._C.LLBuffer, not deep_ep_cpp.Buffer), None unless
            `low_latency_mode`.
        device: the CUDA device the buffer lives on (the current device at construction).
    """

    num_sms: int = 20

    def __init__(self, group: Optional[dist.ProcessGroup], num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 use_fabric: bool = False, explicitly_destroy: bool = False, enable_shrink: bool = False,
                 comm=None) -> None:
        """
        Create the buffer and connect it to every rank of `group` (a collective call).

        Arguments:
            group: the torch.distributed process group; every rank of it must construct its Buffer.
                None: use `comm`.
            num_nvl_bytes: the NVLink buffer size of the high-throughput mode; recorded, not allocated.
            num_rdma_bytes: the low-latency buffer size in bytes, at least
                `get_low_latency_rdma_size_hint(...)` for the largest shape used; the same on every rank.
            low_latency_mode: whether to create the low-latency buffer (dispatch/combine need it).
            num_qps_per_rank: accepted for compatibility; anyep's transports have no queue pairs to size.
            allow_nvlink_for_low_latency_mode: False sends every peer through the CPU proxy (the
                `proxy-libfabric` path unless ANYEP_LL_PATH names another proxy path).
            allow_mnnvl: accepted for compatibility; ignored (peers on other hosts go through the proxy).
            use_fabric: accepted for compatibility; ignored (the buffer is a cudaMalloc allocation
                shared through CUDA IPC, or pinned host memory on a host-staged proxy path).
            explicitly_destroy: if True, resources are released only by `destroy()`; otherwise by the
                destructor.
            enable_shrink: allocate the rank mask (the `low_latency_*_mask_buffer` methods): masked
                ranks are skipped, and a peer that times out in a low-latency wait is masked instead
                of failing the call. Without it, such a timeout is an error naming the peer.
            comm: an mpi4py communicator (`Get_rank`, `Get_size`, `allgather`, `Barrier`), used when
                `group` is None.

        Raises:
            ValueError: neither `group` nor `comm`, or `low_latency_mode` with `num_rdma_bytes <= 0`.
            ImportError: the compiled extension anyep._C is missing.
        """
        check_nvlink_connections(group)
        if group is not None:
            self.rank, self.group_size = group.rank(), group.size()
        elif comm is not None:
            for method in ("Get_rank", "Get_size", "allgather", "Barrier"):
                if not callable(getattr(comm, method, None)):
                    raise ValueError(f"anyep: comm has no {method}(); pass an mpi4py communicator or a "
                                     "torch.distributed group")
            self.rank, self.group_size = comm.Get_rank(), comm.Get_size()
        else:
            raise ValueError("anyep: Buffer needs a torch.distributed group or an mpi4py comm")
        self.group = group if group is not None else comm
        self._comm = comm if group is None else None
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self.enable_shrink = enable_shrink
        self.device = torch.cuda.current_device()
        self._comm_stream = torch.cuda.Stream()
        self._comm_stream_ptr = self._comm_stream.cuda_stream  # the launch stream of async_finish calls
        self._combine_buffers = {}
        self._ll = None
        self.runtime = None
        self._destroyed = False
        if low_latency_mode:
            if num_rdma_bytes <= 0:
                raise ValueError("anyep: low_latency_mode needs num_rdma_bytes > 0 "
                                 "(see Buffer.get_low_latency_rdma_size_hint)")
            # Path: ANYEP_LL_PATH (docs/environment.md); no NVLink means every peer through the proxy.
            self._ll = _ext().LLBuffer(self.rank, self.group_size, int(num_rdma_bytes),
                                       allow_nvlink=bool(allow_nvlink_for_low_latency_mode),
                                       enable_shrink=bool(enable_shrink))
            self.runtime = self._ll
            self._ll.connect(self._allgather(self._ll.local_info()), self._allgather_bytes)
            self._barrier()

    def _allgather(self, obj) -> list:
        """Every rank's `obj`, indexed by rank, over the group (or the mpi4py comm)."""
        if self._comm is not None:
            return list(self._comm.allgather(obj))
        out = [None] * self.group_size
        dist.all_gather_object(out, obj, group=self.group)
        return out

    def _barrier(self) -> None:
        if self._comm is not None:
            self._comm.Barrier()
        else:
            dist.barrier(group=self.group)

    def _allgather_bytes(self, mine: bytes) -> list:
        """
        Bootstrap for the C++ proxy set-up: allgather of bytes over the Buffer's group.

        Arguments:
            mine: this rank's bytes.

        Returns:
            gathered: every rank's bytes, indexed by rank.
        """
        return self._allgather(bytes(mine))

    def describe_paths(self) -> str:
        """
        Describe how this rank reaches its peers (anyep only, not in deep_ep).

        Returns:
            description: the LL path, the ranks reached by direct stores and those reached through
                the proxy, with the proxy's transport, thread and ring counts.
        """
        return self._low_latency().describe_paths()

    # ---- class helpers -------------------------------------------------------------------------
    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        """
        Set the SM count of the high-throughput kernels (kept for compatibility: the low-latency
        kernels use one block per SM, capped by ANYEP_LL_SMS).

        Arguments:
            new_num_sms: the new count, a positive even number.

        Raises:
            ValueError: the count is not positive and even.
        """
        if new_num_sms <= 0 or new_num_sms % 2 != 0:
            raise ValueError(f"num_sms must be a positive even number, got {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def is_sm90_compiled() -> bool:
        """
        Say whether the SM90-only features are available (deep_ep gates its FP8 paths on this).
        anyep's FP8 casts compile for every architecture it is built for, so they always are.

        Returns:
            compiled: True.
        """
        return True

    @staticmethod
    def capture() -> EventOverlap:
        """
        Record an event on the current stream (`torch.cuda.current_stream()`).

        Returns:
            event: an EventOverlap holding the recorded EventHandle.
        """
        return EventOverlap(EventHandle())

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        """
        Compute the smallest low-latency buffer for a shape (BF16 and FP8 messages both fit).

        Arguments:
            num_max_dispatch_tokens_per_rank: the most tokens one rank dispatches per call; the same on
                every rank.
            hidden: the hidden size of a token, a multiple of 128.
            num_ranks: the number of ranks in the group.
            num_experts: the number of experts over all ranks, a multiple of `num_ranks`.

        Returns:
            size: the number of bytes to pass as `num_rdma_bytes`.
        """
        return int(_ext().size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts))

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """
        Get the recommended high-throughput dispatch configuration (kept for compatibility).

        Arguments:
            num_ranks: the number of ranks in the group.

        Returns:
            config: a Config with `Buffer.num_sms` SMs and the default chunk sizes.
        """
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """
        Get the recommended high-throughput combine configuration (kept for compatibility).

        Arguments:
            num_ranks: the number of ranks in the group.

        Returns:
            config: a Config with `Buffer.num_sms` SMs and the default chunk sizes.
        """
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    def get_comm_stream(self) -> torch.cuda.Stream:
        """
        Get the communication stream (used by calls with `async_finish=True`).

        Returns:
            stream: the buffer's communication stream.
        """
        return self._comm_stream

    def get_local_buffer_tensor(self, dtype: torch.dtype, size: Optional[torch.Size] = None, offset: int = 0,
                                use_rdma_buffer: bool = False) -> torch.Tensor:
        """
        Not supported: deep_ep returns a view of its raw buffer; anyep's LL buffer layout is private.

        Arguments:
            dtype: the element type of the view.
            size: the shape of the view.
            offset: the byte offset into the buffer.
            use_rdma_buffer: whether to view the RDMA buffer instead of the NVLink buffer.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("anyep: get_local_buffer_tensor is not supported: the LL buffer layout is private, "
                                  f"and the NVLink buffer belongs to the high-throughput mode ({_HT_ISSUE})")

    def destroy(self) -> None:
        """
        Release the buffer's resources (proxy threads, device and pinned memory). Only for buffers
        built with `explicitly_destroy=True`; every rank should call it. A second call does nothing.

        Raises:
            RuntimeError: the buffer was built with `explicitly_destroy=False`.
        """
        if not self.explicitly_destroy:
            raise RuntimeError("anyep: destroy() is only for Buffers built with explicitly_destroy=True")
        self._destroy()

    def _destroy(self) -> None:
        if self._destroyed:
            return
        self._destroyed = True
        if self._ll is not None:
            self._ll.destroy()
            self._ll = None
            self.runtime = None

    def __del__(self):
        """
        Release the resources of a buffer built with `explicitly_destroy=False`; errors are ignored.
        """
        if not getattr(self, "explicitly_destroy", True):
            try:
                self._destroy()
            except Exception:
                pass

    def _low_latency(self):
        if self._destroyed:
            raise RuntimeError("anyep: the Buffer was destroyed")
        if self._ll is None:
            raise RuntimeError("anyep: low-latency calls need a Buffer built with low_latency_mode=True")
        return self._ll

    def check_async_error(self) -> None:
        """
        Raise the error a previous low-latency kernel or the proxy reported, if any (anyep only).

        Raises:
            TimeoutError: a kernel or the proxy gave up waiting; the message names the rank, the
                expert (or the proxy's tag) and the peer waited for.
            RuntimeError: another proxy error, e.g. a rejected command.
        """
        self._low_latency().check_error()

    # ---- high-throughput mode (not implemented yet) ---------------------------------------------
    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        """
        High-throughput dispatch layout: not implemented yet.

        Arguments:
            topk_idx: `[num_tokens, num_topk]` expert indices.
            num_experts: the number of experts over all ranks.
            previous_event: an event to wait for first.
            async_finish: whether to run on the communication stream.
            allocate_on_comm_stream: whether to allocate the outputs on the communication stream.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"anyep: high-throughput mode (get_dispatch_layout) is not implemented yet ({_HT_ISSUE})")

    def dispatch(self, *args, **kwargs):
        """
        High-throughput dispatch: not implemented yet.

        Arguments:
            args: deep_ep.Buffer.dispatch's positional arguments.
            kwargs: deep_ep.Buffer.dispatch's keyword arguments.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"anyep: high-throughput mode (dispatch) is not implemented yet ({_HT_ISSUE})")

    def combine(self, *args, **kwargs):
        """
        High-throughput combine: not implemented yet.

        Arguments:
            args: deep_ep.Buffer.combine's positional arguments.
            kwargs: deep_ep.Buffer.combine's keyword arguments.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"anyep: high-throughput mode (combine) is not implemented yet ({_HT_ISSUE})")

    def internode_dispatch(self, *args, **kwargs):
        """
        High-throughput internode dispatch (deep_ep calls it from `dispatch`): not implemented yet.

        Arguments:
            args: deep_ep.Buffer.internode_dispatch's positional arguments.
            kwargs: deep_ep.Buffer.internode_dispatch's keyword arguments.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"anyep: high-throughput mode (internode_dispatch) is not implemented yet ({_HT_ISSUE})")

    def internode_combine(self, *args, **kwargs):
        """
        High-throughput internode combine (deep_ep calls it from `combine`): not implemented yet.

        Arguments:
            args: deep_ep.Buffer.internode_combine's positional arguments.
            kwargs: deep_ep.Buffer.internode_combine's keyword arguments.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError(f"anyep: high-throughput mode (internode_combine) is not implemented yet ({_HT_ISSUE})")

    # ---- low-latency mode -----------------------------------------------------------------------
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """
        Reset the low-latency buffer's signals, counters and error record (a collective call:
        every rank finishes its GPU work, then barrier, clean, barrier over the group). Use it after
        an error, and after unmasking a rank, before the next call. The rank mask is kept. A rank
        that stopped calling (a dead rank) blocks the barriers: anyep's clean is not elastic yet.

        Arguments:
            num_max_dispatch_tokens_per_rank: the largest token count per rank the buffer is used with.
            hidden: the hidden size used with the buffer.
            num_experts: the number of experts over all ranks.

        Raises:
            ValueError: the shape does not fit the buffer's rules (see `get_low_latency_rdma_size_hint`).
        """
        ll = self._low_latency()
        self.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, self.group_size, num_experts)
        # No rank may clean while a peer's kernel can still write into its buffer.
        torch.cuda.synchronize(self.device)
        self._barrier()
        ll.clean()
        self._barrier()

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Optional[torch.Tensor] = None,
                             dispatch_wait_recv_cost_stats: Optional[torch.Tensor] = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> \
            Tuple[Union[Tuple[torch.Tensor, torch.Tensor], torch.Tensor], torch.Tensor, Tuple, EventOverlap, Callable]:
        """
        Send each token to the ranks owning its top-k experts (low-latency mode). Every rank of the
        group must call it with the same `num_max_dispatch_tokens_per_rank` and `num_experts`. The
        outputs live in one of two buffer halves: at most two dispatch/combine results may be held
        at a time.

        Arguments:
            x: `[num_tokens, hidden]` `torch.bfloat16` tokens on this rank's GPU; `num_tokens` at most
                `num_max_dispatch_tokens_per_rank`, `hidden` a multiple of 128.
            topk_idx: `[num_tokens, num_topk]` `torch.int64` expert indices in [0, num_experts), or -1
                for a slot that selects no expert.
            num_max_dispatch_tokens_per_rank: the most tokens any rank dispatches; the same on every rank.
            num_experts: the number of experts over all ranks, a multiple of the group size.
            cumulative_local_expert_recv_stats: optional `[num_local_experts]` `torch.int32` tensor; the
                number of tokens each local expert receives is added to it.
            dispatch_wait_recv_cost_stats: optional `[num_ranks]` `torch.int64` tensor; the nanoseconds
                spent waiting for each source rank are added to it.
            use_fp8: whether to send FP8 (e4m3) data with per-128-channel scales instead of BF16.
            round_scale: whether to round the FP8 scales up to powers of two.
            use_ue8m0: whether to pack the scales as UE8M0 (needs `use_fp8`, `round_scale` and a hidden
                size that is a multiple of 512).
            async_finish: whether to run on the communication stream and return an event to wait for.
            return_recv_hook: if True, launch only the send half and return a hook that receives; the
                outputs are valid once the hook was called (and the stream got past it).

        Returns:
            recv_x: `[num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank, hidden]`
                `torch.bfloat16` received tokens; with `use_fp8`, a tuple of that tensor in
                `torch.float8_e4m3fn` and its scales (`[.., .., hidden / 128]` `torch.float`, or
                `[.., .., hidden / 512]` `torch.int32` with `use_ue8m0`; column-major as DeepEP's).
            recv_count: `[num_local_experts]` `torch.int32` number of tokens each local expert received.
            handle: the tuple `low_latency_combine` needs to send the results back.
            event: an EventOverlap to wait for (`async_finish`), else an empty one.
            hook: the receive hook (`return_recv_hook`), else None.

        Raises:
            ValueError: a bad input (dtype, shape, hidden, too many tokens, a buffer too small for
                the shape; `topk_idx` values too with ANYEP_LL_CHECK_INPUTS=1), before any kernel runs;
                or `async_finish` with `return_recv_hook`.
        """
        ll = self._ll if self._ll is not None else self._low_latency()
        stream = 0  # the current stream
        if async_finish:
            if return_recv_hook:  # the hook's receive half runs on the current stream, not the comm stream
                raise ValueError("anyep: async_finish and return_recv_hook cannot be combined (as in deep_ep)")
            # As deep_ep: outputs are allocated on the current stream, the kernels run on the comm
            # stream, and the EventOverlap keeps every tensor alive (no record_stream: capturable).
            self._comm_stream.wait_stream(torch.cuda.current_stream())
            stream = self._comm_stream_ptr
        recv_x, recv_scales, recv_count, src_info, layout_range, hook = ll.dispatch(
            x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts, cumulative_local_expert_recv_stats,
            dispatch_wait_recv_cost_stats, use_fp8, round_scale, use_ue8m0, return_recv_hook, stream)
        handle = (src_info, layout_range, num_max_dispatch_tokens_per_rank, x.size(1), num_experts)
        if async_finish:
            event = EventOverlap(EventHandle(self._comm_stream),
                                 (x, topk_idx, recv_x, recv_scales, recv_count, src_info, layout_range,
                                  cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats))
        else:
            event = EventOverlap()
        return (recv_x, recv_scales) if use_fp8 else recv_x, recv_count, handle, event, hook

    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                            handle: tuple, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: Optional[torch.Tensor] = None,
                            combine_wait_recv_cost_stats: Optional[torch.Tensor] = None) -> \
            Tuple[torch.Tensor, EventOverlap, Callable]:
        """
        Send the expert outputs back to the ranks the tokens came from and reduce them with the
        top-k weights (low-latency mode). Every rank of the group must call it.

        Arguments:
            x: `[num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank, hidden]`
                `torch.bfloat16` expert outputs, laid out as the dispatch's `recv_x`.
            topk_idx: `[num_tokens, num_topk]` `torch.int64`, the `topk_idx` given to the dispatch.
            topk_weights: `[num_tokens, num_topk]` `torch.float` weights of the reduction.
            handle: the handle returned by `low_latency_dispatch`.
            use_logfmt: LogFMT compression; not supported (True raises NotImplementedError).
            zero_copy: accepted; has no effect (combine reads `x` in place either way).
            async_finish: whether to run on the communication stream and return an event to wait for.
            return_recv_hook: if True, launch only the send half and return a hook that receives; the
                output is valid once the hook was called (and the stream got past it).
            out: optional `[num_tokens, hidden]` `torch.bfloat16` tensor to write the result into.
            combine_wait_recv_cost_stats: optional `[num_ranks]` `torch.int64` tensor; the nanoseconds
                spent waiting for each rank are added to it.

        Returns:
            combined_x: `[num_tokens, hidden]` `torch.bfloat16`, the weighted sum of each token's expert
                outputs (`out` when given).
            event: an EventOverlap to wait for (`async_finish`), else an empty one.
            hook: the receive hook (`return_recv_hook`), else None.

        Raises:
            ValueError: a bad input or a handle not made by anyep's `low_latency_dispatch`, or
                `async_finish` with `return_recv_hook`.
            NotImplementedError: `use_logfmt=True`.
        """
        ll = self._ll if self._ll is not None else self._low_latency()
        if use_logfmt:
            raise NotImplementedError("anyep: use_logfmt combine is not supported; use BF16 (use_logfmt=False)")
        if not isinstance(handle, tuple) or len(handle) != 5:
            raise ValueError("anyep: handle must be the 5-tuple returned by low_latency_dispatch")
        src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden, num_experts = handle
        if x.dim() == 3 and x.size(2) != hidden:
            raise ValueError(f"anyep: x has hidden {x.size(2)}, the handle was made for hidden {hidden}")
        # zero_copy: x may be the tensor from get_next_low_latency_combine_buffer; the kernels read
        # expert outputs straight from x either way, so both settings take the same path.
        stream = 0  # the current stream
        if async_finish:  # as in low_latency_dispatch
            if return_recv_hook:
                raise ValueError("anyep: async_finish and return_recv_hook cannot be combined (as in deep_ep)")
            self._comm_stream.wait_stream(torch.cuda.current_stream())
            stream = self._comm_stream_ptr
        combined, hook = ll.combine(x, topk_idx, topk_weights, src_info, layout_range, num_max_dispatch_tokens_per_rank,
                                    num_experts, out, combine_wait_recv_cost_stats, return_recv_hook, stream)
        if async_finish:
            event = EventOverlap(EventHandle(self._comm_stream),
                                 (x, topk_idx, topk_weights, src_info, layout_range, combined,
                                  combine_wait_recv_cost_stats))
        else:
            event = EventOverlap()
        return combined, event, hook

    def low_latency_update_mask_buffer(self, rank_to_mask: int, mask: bool = False) -> None:
        """
        Mask or unmask a rank for the low-latency calls (needs `enable_shrink=True`). A masked rank
        gets no tokens from dispatch and no results from combine, and is not waited for: its tokens
        count as none and its experts contribute nothing. Stream-ordered on the current stream.
        After unmasking a rank, call `clean_low_latency_buffer` on every rank before the next call.

        Arguments:
            rank_to_mask: the rank, in [0, group_size).
            mask: True masks the rank, False unmasks it.

        Raises:
            ValueError: the buffer was built without `enable_shrink=True`, or the rank is out of range.
        """
        self._low_latency().update_mask(rank_to_mask, mask)

    def low_latency_query_mask_buffer(self, mask_status: torch.Tensor) -> None:
        """
        Copy the mask of every rank into `mask_status` (needs `enable_shrink=True`): 1 for a rank
        masked (by `low_latency_update_mask_buffer`, or because it timed out in a low-latency wait),
        0 otherwise. Stream-ordered on the current stream.

        Arguments:
            mask_status: `[group_size]` `torch.int32` tensor on the buffer's device.

        Raises:
            ValueError: the buffer was built without `enable_shrink=True`, or `mask_status` has the
                wrong dtype, shape or device.
        """
        self._low_latency().query_mask(mask_status)

    def low_latency_clean_mask_buffer(self) -> None:
        """
        Unmask every rank (needs `enable_shrink=True`). Stream-ordered on the current stream.

        Raises:
            ValueError: the buffer was built without `enable_shrink=True`.
        """
        self._low_latency().clean_mask()

    def get_next_low_latency_combine_buffer(self, handle: tuple) -> torch.Tensor:
        """
        Get a tensor the expert outputs may be written to before `low_latency_combine` (which reads
        them in place). The tensor is cached per shape: the next call with the same shape returns it
        again.

        Arguments:
            handle: the handle returned by `low_latency_dispatch`.

        Returns:
            buffer: `[num_local_experts, num_ranks * num_max_dispatch_tokens_per_rank, hidden]`
                `torch.bfloat16` tensor on the buffer's device.
        """
        self._low_latency()
        _, _, num_max_dispatch_tokens_per_rank, hidden, num_experts = handle
        key = (num_max_dispatch_tokens_per_rank, hidden, num_experts)
        if key not in self._combine_buffers:
            self._combine_buffers[key] = torch.empty(
                (num_experts // self.group_size, self.group_size * num_max_dispatch_tokens_per_rank, hidden),
                dtype=torch.bfloat16, device=f"cuda:{self.device}")
        return self._combine_buffers[key]

