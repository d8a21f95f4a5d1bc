"""anyep.Buffer: deep_ep.Buffer's classic API over the anyep C++ runtime.

Python only marshals: it gathers the connection records through the torch.distributed group,
picks the stream and wraps events. Shape/dtype checks, layouts and kernels live in C++.
"""
from typing import Callable, Optional, Tuple, Union

import torch
import torch.distributed as dist

from .config import Config
from .event import EventOverlap

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
    """Expert-parallel communication buffer (deep_ep.Buffer compatible).

    Low-latency mode (`low_latency_mode=True`, `num_rdma_bytes` from
    `get_low_latency_rdma_size_hint`): direct stores through CUDA IPC to peers on this host, the
    CPU proxy for the others (ANYEP_LL_PATH picks the path, docs/ll.md). The high-throughput
    methods raise NotImplementedError.
    """

    num_sms: int = 20

    def __init__(self, group: dist.ProcessGroup, num_nvl_bytes: int = 0, num_rdma_bytes: int = 0,
                 low_latency_mode: bool = False, num_qps_per_rank: int = 24,
                 allow_nvlink_for_low_latency_mode: bool = True, allow_mnnvl: bool = False,
                 explicitly_destroy: bool = False, comm=None) -> None:
        self.group = group
        self.rank = group.rank()
        self.group_size = group.size()
        self.num_nvl_bytes = num_nvl_bytes
        self.num_rdma_bytes = num_rdma_bytes
        self.low_latency_mode = low_latency_mode
        self.explicitly_destroy = explicitly_destroy
        self.device = torch.cuda.current_device()
        self._comm_stream = torch.cuda.Stream()
        self._combine_buffers = {}
        self._ll = None
        self._destroyed = False
        if low_latency_mode:
            if num_rdma_bytes <= 0:
                raise ValueError("anyep: low_latency_mode needs num_rdma_bytes > 0 "
                                 "(see Buffer.get_low_latency_rdma_size_hint)")
            # Path: ANYEP_LL_PATH (docs/environment.md); no NVLink means every peer through the proxy.
            self._ll = _ext().LLBuffer(self.rank, self.group_size, int(num_rdma_bytes),
                                       allow_nvlink=bool(allow_nvlink_for_low_latency_mode))
            infos = [None] * self.group_size
            dist.all_gather_object(infos, self._ll.local_info(), group=group)
            self._ll.connect(list(infos), self._allgather_bytes)
            dist.barrier(group=group)

    def _allgather_bytes(self, mine: bytes) -> list:
        """Bootstrap for the C++ proxy set-up: allgather of bytes over the Buffer's group."""
        out = [None] * self.group_size
        dist.all_gather_object(out, bytes(mine), group=self.group)
        return out

    def describe_paths(self) -> str:
        """How this rank reaches its peers (direct stores / proxy and its transport)."""
        return self._low_latency().describe_paths()

    # ---- class helpers -------------------------------------------------------------------------
    @staticmethod
    def set_num_sms(new_num_sms: int) -> None:
        if new_num_sms <= 0 or new_num_sms % 2 != 0:
            raise ValueError(f"num_sms must be a positive even number, got {new_num_sms}")
        Buffer.num_sms = new_num_sms

    @staticmethod
    def capture() -> EventOverlap:
        """An EventOverlap recorded on the current stream."""
        return EventOverlap(torch.cuda.current_stream().record_event())

    @staticmethod
    def get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank: int, hidden: int, num_ranks: int,
                                       num_experts: int) -> int:
        return int(_ext().size_hint(num_max_dispatch_tokens_per_rank, hidden, num_ranks, num_experts))

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        return Config(Buffer.num_sms, 6, 256, 6, 128)

    def get_comm_stream(self) -> torch.cuda.Stream:
        return self._comm_stream

    def get_local_buffer_tensor(self, dtype: torch.dtype, size: Optional[torch.Size] = None, offset: int = 0,
                                use_rdma_buffer: bool = False) -> torch.Tensor:
        raise NotImplementedError("anyep: get_local_buffer_tensor is not supported (the LL buffer layout is private)")

    def destroy(self) -> None:
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

    def __del__(self):
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
        """Raise the error a previous LL kernel reported (timeout naming rank/expert/peer), if any."""
        self._low_latency().check_error()

    # ---- high-throughput mode (not implemented yet) ---------------------------------------------
    def get_dispatch_layout(self, topk_idx, num_experts, previous_event=None, async_finish=False,
                            allocate_on_comm_stream=False):
        raise NotImplementedError("anyep: high-throughput mode (get_dispatch_layout) is not implemented yet")

    def dispatch(self, *args, **kwargs):
        raise NotImplementedError("anyep: high-throughput mode (dispatch) is not implemented yet")

    def combine(self, *args, **kwargs):
        raise NotImplementedError("anyep: high-throughput mode (combine) is not implemented yet")

    # ---- low-latency mode -----------------------------------------------------------------------
    def _run(self, async_finish: bool, fn: Callable, tensors: Tuple):
        """Run `fn` on the current stream, or on the comm stream when async_finish."""
        if not async_finish:
            return fn(), EventOverlap(None)
        compute = torch.cuda.current_stream()
        self._comm_stream.wait_stream(compute)
        with torch.cuda.stream(self._comm_stream):
            result = fn()
        event = self._comm_stream.record_event()
        for t in tensors + tuple(x for x in _flatten(result) if isinstance(x, torch.Tensor)):
            t.record_stream(self._comm_stream)
        return result, EventOverlap(event, tensors)

    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        ll = self._low_latency()
        self.get_low_latency_rdma_size_hint(num_max_dispatch_tokens_per_rank, hidden, self.group_size, num_experts)
        ll.clean()
        dist.barrier(group=self.group)

    def low_latency_dispatch(self, x: torch.Tensor, topk_idx: torch.Tensor, num_max_dispatch_tokens_per_rank: int,
                             num_experts: int, cumulative_local_expert_recv_stats: Optional[torch.Tensor] = None,
                             dispatch_wait_recv_cost_stats: Optional[torch.Tensor] = None, use_fp8: bool = True,
                             round_scale: bool = False, use_ue8m0: bool = False, async_finish: bool = False,
                             return_recv_hook: bool = False) -> \
            Tuple[Union[Tuple[torch.Tensor, torch.Tensor], torch.Tensor], torch.Tensor, Tuple, EventOverlap, Callable]:
        ll = self._low_latency()
        (recv_x, recv_scales, recv_count, src_info, layout_range, hook), event = self._run(
            async_finish,
            lambda: ll.dispatch(x, topk_idx, num_max_dispatch_tokens_per_rank, num_experts,
                                cumulative_local_expert_recv_stats, dispatch_wait_recv_cost_stats, use_fp8,
                                round_scale, use_ue8m0, return_recv_hook),
            (x, topk_idx))
        handle = (src_info, layout_range, num_max_dispatch_tokens_per_rank, x.size(1), num_experts)
        packed = (recv_x, recv_scales) if use_fp8 else recv_x
        return packed, recv_count, handle, event, hook

    def low_latency_combine(self, x: torch.Tensor, topk_idx: torch.Tensor, topk_weights: torch.Tensor,
                            handle: tuple, use_logfmt: bool = False, zero_copy: bool = False,
                            async_finish: bool = False, return_recv_hook: bool = False,
                            out: Optional[torch.Tensor] = None,
                            combine_wait_recv_cost_stats: Optional[torch.Tensor] = None) -> \
            Tuple[torch.Tensor, EventOverlap, Callable]:
        ll = self._low_latency()
        if use_logfmt:
            raise NotImplementedError("anyep: use_logfmt combine is not supported; use BF16 (use_logfmt=False)")
        if not isinstance(handle, tuple) or len(handle) != 5:
            raise ValueError("anyep: handle must be the 5-tuple returned by low_latency_dispatch")
        src_info, layout_range, num_max_dispatch_tokens_per_rank, hidden, num_experts = handle
        if x.dim() == 3 and x.size(2) != hidden:
            raise ValueError(f"anyep: x has hidden {x.size(2)}, the handle was made for hidden {hidden}")
        # zero_copy: x may be the tensor from get_next_low_latency_combine_buffer; the kernels read
        # expert outputs straight from x either way, so both settings take the same path.
        (combined, hook), event = self._run(
            async_finish,
            lambda: ll.combine(x, topk_idx, topk_weights, src_info, layout_range, num_max_dispatch_tokens_per_rank,
                               num_experts, out, combine_wait_recv_cost_stats, return_recv_hook),
            (x, topk_idx, topk_weights, src_info, layout_range))
        return combined, event, hook

    def get_next_low_latency_combine_buffer(self, handle: tuple) -> torch.Tensor:
        """A [L, R*T, H] BF16 tensor the expert outputs may be written to (read in place by combine)."""
        self._low_latency()
        _, _, num_max_dispatch_tokens_per_rank, hidden, num_experts = handle
        key = (num_max_dispatch_tokens_per_rank, hidden, num_experts)
        if key not in self._combine_buffers:
            self._combine_buffers[key] = torch.empty(
                (num_experts // self.group_size, self.group_size * num_max_dispatch_tokens_per_rank, hidden),
                dtype=torch.bfloat16, device=f"cuda:{self.device}")
        return self._combine_buffers[key]


def _flatten(obj):
    if isinstance(obj, (tuple, list)):
        for o in obj:
            yield from _flatten(o)
    else:
        yield obj
