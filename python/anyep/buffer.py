"""anyep.Buffer: deep_ep.Buffer's classic API over the anyep C++ runtime.

Python only marshals: it gathers the connection records through the torch.distributed group (or
an mpi4py communicator), picks the stream and wraps events. Shape/dtype checks, layouts and
kernels live in C++. The per-call path does no host synchronization and no work that could be
done once at construction (docs/ll.md, "Per-call host cost").
"""
import contextlib
from typing import Callable, List, Optional, Tuple, Union

import torch
import torch.distributed as dist

from ._ext import ext as _ext
from .config import Config
from .event import EventHandle, EventOverlap
from .utils import check_nvlink_connections


# DeepEP's recommended configs (deep_ep/buffer.py at 567632d), per rank count: NVLink send chunk,
# NVLink receive ring, RDMA send chunk, RDMA receive ring (tokens); the SM count is Buffer.num_sms.
_DISPATCH_CONFIGS = {
    2: (24, 256, 6, 128), 4: (6, 256, 6, 128), 8: (6, 256, 6, 128), 16: (36, 288, 20, 128),
    24: (32, 288, 8, 128), 32: (32, 288, 8, 128), 48: (32, 288, 8, 128), 64: (32, 288, 8, 128),
    96: (20, 480, 12, 128), 128: (20, 560, 12, 128), 144: (32, 720, 12, 128), 160: (28, 720, 12, 128),
}
_COMBINE_CONFIGS = {
    2: (10, 256, 6, 128), 4: (9, 256, 6, 128), 8: (4, 256, 6, 128), 16: (4, 288, 12, 128),
    24: (1, 288, 8, 128), 32: (1, 288, 8, 128), 48: (1, 288, 8, 128), 64: (1, 288, 8, 128),
    96: (1, 480, 8, 128), 128: (1, 560, 8, 128), 144: (2, 720, 8, 128), 160: (2, 720, 8, 128),
}

class Buffer:
    """
    Expert-parallel communication buffer for MoE layers, with deep_ep.Buffer's interface. One
    Buffer serves both modes, each in its own region (docs/ht.md, "Memory"):

    High-throughput mode (DeepEP's normal mode: `get_dispatch_layout`, `dispatch`, `combine`;
    `num_nvl_bytes` from `Config.get_nvl_buffer_size_hint`): 1..16 ranks that reach each other by
    direct stores (CUDA IPC: NVLink or PCIe peer access, or processes sharing a GPU), docs/ht.md.
    Ranks on several nodes (hosts, or ANYEP_HT_RANKS_PER_NODE): the same calls run the internode
    path, a rail exchange through the CPU proxy in `num_rdma_bytes` and the intranode kernels
    inside each node (docs/ht.md, "Internode").

    Low-latency mode (`low_latency_mode=True`, `num_rdma_bytes` from
    `get_low_latency_rdma_size_hint`): direct stores through CUDA IPC to peers on this host, the
    CPU proxy for the others (ANYEP_LL_PATH picks the path, docs/ll.md).

    Rank masking (`enable_shrink=True`, DeepEP's elastic mode): `low_latency_update_mask_buffer`
    masks a rank; dispatch and combine skip masked ranks, and a peer that does not answer within
    ANYEP_TIMEOUT_S is masked instead of failing the call.

    Attributes:
        num_sms: SMs of the high-throughput kernels in the default configs (`get_dispatch_config`,
            `get_combine_config`; see `set_num_sms`).
        group: the torch.distributed group the buffer spans (the mpi4py communicator when built
            with `group=None, comm=...`).
        rank: this process's rank in `group`.
        group_size: the number of ranks in `group`.
        num_nvl_bytes: the size of the high-throughput region in bytes (0: no high-throughput mode).
        num_rdma_bytes: the size of the low-latency buffer in bytes.
        low_latency_mode: whether the low-latency buffer was created.
        explicitly_destroy: whether resources are released by `destroy()` rather than by the destructor.
        enable_shrink: whether the rank mask exists (rank masking and elastic timeouts).
        runtime: the C++ runtime object, not deep_ep_cpp.Buffer: anyep._C.LLBuffer with
            `low_latency_mode`, else anyep._C.HTBuffer when `num_nvl_bytes > 0`, else None.
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
            num_nvl_bytes: the size of the high-throughput region (0: none), at least
                `Config.get_nvl_buffer_size_hint(hidden_bytes, group_size)` for every Config used;
                the same on every rank.
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
            ValueError: neither `group` nor `comm`, `low_latency_mode` with `num_rdma_bytes <= 0`, or
                `num_nvl_bytes` negative or smaller than the high-throughput control area.
            NotImplementedError: `num_nvl_bytes > 0` with more than 16 ranks on one node, a peer
                of this node not reachable by direct stores, or nodes of unequal size.
            ValueError: ranks on several nodes with `num_nvl_bytes > 0` but `num_rdma_bytes <= 0`.
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
        self._ht = None
        self._internode = None
        self.runtime = None
        self._destroyed = False
        if num_nvl_bytes < 0:
            raise ValueError(f"anyep: num_nvl_bytes must be >= 0, got {num_nvl_bytes}")
        if num_nvl_bytes > 0:
            # The HT region: separate from the LL one, so both modes work in one Buffer. Nodes: the
            # hosts, or ANYEP_HT_RANKS_PER_NODE (emulated nodes on one machine).
            k = _ext().ht_ranks_per_node(self._allgather(_ext().host_identity()))
            if k == self.group_size:
                self._ht = _ext().HTBuffer(self.rank, self.group_size, int(num_nvl_bytes))
                self._ht.connect(self._allgather(self._ht.local_info()))
            else:
                self._build_internode(k, int(num_nvl_bytes), int(num_rdma_bytes))
            self.runtime = self._ht
            self._barrier()
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

    def _build_internode(self, k: int, num_nvl_bytes: int, num_rdma_bytes: int) -> None:
        """The internode HT path (anyep/internode.py): the rail exchange over the proxy in
        `num_rdma_bytes`, and an intranode buffer over this node's `k` ranks in `num_nvl_bytes`."""
        if num_rdma_bytes <= 0:
            raise ValueError(f"anyep: the ranks span {self.group_size // k} nodes of {k}: high-throughput mode "
                             "between nodes needs num_rdma_bytes > 0 for its exchange region (docs/ht.md, "
                             "\"Internode\")")
        from .internode import Internode
        rt = _ext().HTInternode(self.rank, self.group_size, k, num_nvl_bytes, num_rdma_bytes)
        self._ht = rt
        rt.connect(self._allgather(rt.local_info()), self._allgather_bytes)
        self._internode = Internode(self.rank, self.group_size, rt)

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
                the proxy, with the proxy's transport, thread and ring counts; then, on a Buffer with
                a high-throughput region, its peers (after "high-throughput: ").

        Raises:
            RuntimeError: the Buffer has neither mode, or was destroyed.
        """
        if self._destroyed:
            raise RuntimeError("anyep: the Buffer was destroyed")
        if self._ll is None and self._ht is None:
            raise RuntimeError("anyep: the Buffer has neither a low-latency nor a high-throughput region")
        parts = [self._ll.describe_paths()] if self._ll is not None else []
        if self._internode is not None:
            parts.append(f"high-throughput: {self._internode.describe_paths()}")
        elif self._ht is not None:
            parts.append(f"high-throughput: {self._ht.describe_paths()}")
        return "; ".join(parts)

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
    def _config_of(table: dict, num_ranks: int) -> Config:
        if num_ranks < 1:
            raise ValueError(f"anyep: num_ranks must be >= 1, got {num_ranks}")
        # A count not in DeepEP's table takes the next larger one's row (the largest past its end).
        key = min((n for n in table if n >= num_ranks), default=max(table))
        return Config(Buffer.num_sms, *table[key])

    @staticmethod
    def get_dispatch_config(num_ranks: int) -> Config:
        """
        Get the recommended high-throughput dispatch configuration: DeepEP's table per rank count
        (NVLink send/receive chunks, RDMA send/receive chunks) with `Buffer.num_sms` SMs. For a rank
        count not in the table, where DeepEP asserts, it takes the row of the next larger count in
        the table (1 rank: the 2-rank row; 3: the 4-rank row; more than 160: the 160-rank row).

        Arguments:
            num_ranks: the number of ranks in the group.

        Returns:
            config: the recommended Config.

        Raises:
            ValueError: `num_ranks` < 1.
        """
        return Buffer._config_of(_DISPATCH_CONFIGS, num_ranks)

    @staticmethod
    def get_combine_config(num_ranks: int) -> Config:
        """
        Get the recommended high-throughput combine configuration: DeepEP's table per rank count
        with `Buffer.num_sms` SMs; a rank count not in the table takes the row of the next larger
        count (as `get_dispatch_config`).

        Arguments:
            num_ranks: the number of ranks in the group.

        Returns:
            config: the recommended Config.

        Raises:
            ValueError: `num_ranks` < 1.
        """
        return Buffer._config_of(_COMBINE_CONFIGS, num_ranks)

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
        Not supported: deep_ep returns a view of its raw buffer; anyep's buffer layouts are private.

        Arguments:
            dtype: the element type of the view.
            size: the shape of the view.
            offset: the byte offset into the buffer.
            use_rdma_buffer: whether to view the RDMA buffer instead of the NVLink buffer.

        Raises:
            NotImplementedError: always.
        """
        raise NotImplementedError("anyep: get_local_buffer_tensor is not supported: the LL and HT buffer layouts "
                                  "are private (rings and counters that the kernels own)")

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
        if self._internode is not None:
            self._internode = None  # its runtime is self._ht, destroyed below
        if self._ht is not None:
            self._ht.destroy()
            self._ht = None
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
        Raise the error a previous kernel (low-latency or high-throughput) or the proxy reported,
        if any (anyep only).

        Raises:
            TimeoutError: a kernel or the proxy gave up waiting; the message names the rank, the
                expert, channel or proxy tag, and the peer waited for.
            ValueError: a high-throughput kernel refused its input (an expert index >= num_experts,
                a `num_worst_tokens` smaller than the tokens received).
            RuntimeError: another proxy error, e.g. a rejected command; or the Buffer was destroyed.
        """
        if self._destroyed:
            raise RuntimeError("anyep: the Buffer was destroyed")
        if self._ll is None and self._ht is None:
            raise RuntimeError("anyep: the Buffer has neither a low-latency nor a high-throughput region")
        if self._ht is not None:
            self._ht.check_error()
        if self._ll is not None:
            self._ll.check_error()

    # ---- high-throughput mode (intranode: ranks reached by direct stores) ------------------------
    def _high_throughput(self):
        if self._destroyed:
            raise RuntimeError("anyep: the Buffer was destroyed")
        if self._ht is None:
            raise RuntimeError("anyep: high-throughput calls (get_dispatch_layout, dispatch, combine) need a Buffer "
                               "built with num_nvl_bytes > 0, at least Config.get_nvl_buffer_size_hint(hidden_bytes, "
                               "num_ranks) for every Config used; this one has num_nvl_bytes="
                               f"{self.num_nvl_bytes}")
        return self._ht

    def _ht_begin(self, previous_event: Optional[EventOverlap], async_finish: bool,
                  allocate_on_comm_stream: bool):
        """Order the comm stream after `previous_event` (or the current stream) and return the
        context the outputs are allocated in (the comm stream's with `allocate_on_comm_stream`)."""
        event = getattr(previous_event, "event", None)
        if allocate_on_comm_stream and (event is None or not async_finish):
            raise ValueError("anyep: allocate_on_comm_stream=True needs previous_event and async_finish=True "
                             "(as in deep_ep)")
        if event is not None:
            self._comm_stream.wait_event(event.event)
        else:
            self._comm_stream.wait_stream(torch.cuda.current_stream())
        return torch.cuda.stream(self._comm_stream) if allocate_on_comm_stream else contextlib.nullcontext()

    def _ht_end(self, async_finish: bool, tensors: tuple) -> EventOverlap:
        """The event of an HT call: async, an event on the comm stream that keeps `tensors` alive
        (no record_stream: capturable); otherwise the current stream waits for the comm stream."""
        if async_finish:
            return EventOverlap(EventHandle(self._comm_stream), tensors)
        torch.cuda.current_stream().wait_stream(self._comm_stream)
        return EventOverlap()

    @staticmethod
    def _unpack_bias(bias) -> tuple:
        if bias is None:
            return None, None
        if isinstance(bias, torch.Tensor):
            return bias, None
        if isinstance(bias, (tuple, list)) and len(bias) == 2:
            return bias[0], bias[1]
        raise ValueError("anyep: bias must be None, a tensor, or a tuple of two tensors, got "
                         f"{type(bias).__name__}{'' if not isinstance(bias, (tuple, list)) else f' of {len(bias)}'}")

    @staticmethod
    def _unpack_handle(handle) -> tuple:
        if not isinstance(handle, (tuple, list)) or len(handle) != 6:
            raise ValueError("anyep: handle must be the 6-tuple returned by dispatch (rank_prefix_matrix, "
                             "channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, "
                             "send_head)")
        return tuple(handle)

    def get_dispatch_layout(self, topk_idx: torch.Tensor, num_experts: int,
                            previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                            allocate_on_comm_stream: bool = False) -> \
            Tuple[torch.Tensor, Optional[torch.Tensor], torch.Tensor, torch.Tensor, EventOverlap]:
        """
        Compute the layout `dispatch` needs from the top-k expert indices (high-throughput mode; one
        kernel on the communication stream, no host synchronization, no communication).

        Arguments:
            topk_idx: `[num_tokens, num_topk]` `torch.int64` (`topk_idx_t`) expert indices in
                [0, num_experts), or -1 for a slot that selects no expert.
            num_experts: the number of experts over all ranks, a multiple of the group size.
            previous_event: an EventOverlap the communication stream waits for first (default: the
                current stream's work so far).
            async_finish: if True, the current stream does not wait for the kernel; wait for the
                returned event instead.
            allocate_on_comm_stream: allocate the outputs on the communication stream (needs
                `previous_event` and `async_finish`, as in deep_ep).

        Returns:
            num_tokens_per_rank: `[num_ranks]` `torch.int`, the number of tokens sent to each rank.
            num_tokens_per_rdma_rank: None (intranode: every rank is reached by direct stores).
            num_tokens_per_expert: `[num_experts]` `torch.int`, the number of tokens sent to each expert.
            is_token_in_rank: `[num_tokens, num_ranks]` `torch.bool`, whether a token goes to a rank.
            event: an EventOverlap to wait for (`async_finish`), else an empty one.

        Raises:
            ValueError: a bad input (dtype, shape, `num_experts`), or `allocate_on_comm_stream`
                without `previous_event` and `async_finish`. An expert index >= `num_experts` is
                found by the kernel: the next call (or `check_async_error`) raises ValueError.
            RuntimeError: the Buffer has no high-throughput region (`num_nvl_bytes` was 0).
        """
        ht = self._high_throughput()
        num_tokens_per_rdma_rank = None
        with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
            if self._internode is not None:
                with torch.cuda.stream(self._comm_stream):
                    num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank = \
                        self._internode.layout(topk_idx, int(num_experts))
            else:
                num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank = ht.get_dispatch_layout(
                    topk_idx, int(num_experts), self._comm_stream_ptr)
        event = self._ht_end(async_finish, (topk_idx, num_tokens_per_rank, num_tokens_per_expert, is_token_in_rank))
        return num_tokens_per_rank, num_tokens_per_rdma_rank, num_tokens_per_expert, is_token_in_rank, event

    def dispatch(self, x: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor]], handle: Optional[Tuple] = None,
                 num_tokens_per_rank: Optional[torch.Tensor] = None,
                 num_tokens_per_rdma_rank: Optional[torch.Tensor] = None,
                 is_token_in_rank: Optional[torch.Tensor] = None, num_tokens_per_expert: Optional[torch.Tensor] = None,
                 topk_idx: Optional[torch.Tensor] = None, topk_weights: Optional[torch.Tensor] = None,
                 expert_alignment: int = 1, num_worst_tokens: int = 0, config: Optional[Config] = None,
                 previous_event: Optional[EventOverlap] = None, async_finish: bool = False,
                 allocate_on_comm_stream: bool = False) -> \
            Tuple[Union[Tuple[torch.Tensor, torch.Tensor], torch.Tensor], Optional[torch.Tensor],
                  Optional[torch.Tensor], List[int], Tuple, EventOverlap]:
        """
        Send each token to every rank that owns one of its top-k experts (high-throughput mode,
        intranode: every rank of the group reached by direct stores). Every rank of the group must
        call it. The received tokens are ordered by source rank, then by source token index, for
        any `config.num_sms`. Without `num_worst_tokens` the host waits for the received counts
        (exact-size outputs); with it there is no host synchronization (CUDA-graph capturable).

        Arguments:
            x: `[num_tokens, hidden]` `torch.bfloat16` tokens, or a tuple of `[num_tokens, hidden]`
                `torch.float8_e4m3fn` tokens and their scales (`[num_tokens, hidden / 128]` `torch.float`,
                any strides, e.g. column-major as DeepEP's tests make them; or packed `torch.int`).
            handle: the handle of an earlier `dispatch` with the same routing: a cached dispatch that
                skips the layout exchange (then `topk_idx`, `topk_weights` and the layout tensors are
                not given, and only `recv_x` is returned). Use the `config.num_sms` of that dispatch
                (the handle's channel tables are sized by it, as in deep_ep).
            num_tokens_per_rank: `[num_ranks]` `torch.int` from `get_dispatch_layout`.
            num_tokens_per_rdma_rank: accepted for compatibility; ignored (intranode only).
            is_token_in_rank: `[num_tokens, num_ranks]` `torch.bool` from `get_dispatch_layout`.
            num_tokens_per_expert: `[num_experts]` `torch.int` from `get_dispatch_layout`.
            topk_idx: optional `[num_tokens, num_topk]` `torch.int64` expert indices (-1: none), sent
                with the tokens as ids local to the receiver.
            topk_weights: optional `[num_tokens, num_topk]` `torch.float` weights, sent with the tokens.
            expert_alignment: each entry of `num_recv_tokens_per_expert_list` is rounded up to a
                multiple of it (>= 1).
            num_worst_tokens: if > 0, the outputs have this many rows (at least the number of tokens
                this rank can receive), there is no host synchronization, the returned list is
                empty, and rows past the received count have `recv_topk_idx` -1.
            config: the tuning (SMs, chunk sizes); default `get_dispatch_config(group_size)`. The
                buffer must be at least `config.get_nvl_buffer_size_hint(...)` for it.
            previous_event: an EventOverlap the communication stream waits for first (default: the
                current stream's work so far).
            async_finish: if True, the current stream does not wait for the kernels; wait for the
                returned event instead (it keeps the inputs and outputs alive).
            allocate_on_comm_stream: allocate the outputs on the communication stream (needs
                `previous_event` and `async_finish`, as in deep_ep).

        Returns:
            recv_x: the received tokens, `[num_recv_tokens, hidden]` (or `[num_worst_tokens, hidden]`),
                of `x`'s type: a tensor, or a tuple of tokens and row-major scales.
            recv_topk_idx: `[num_recv_tokens, num_topk]` `torch.int64` expert ids local to this rank
                (-1 for an expert of another rank), or None (no `topk_idx`, or a cached dispatch).
            recv_topk_weights: `[num_recv_tokens, num_topk]` `torch.float` (0 where the id is -1), or None.
            num_recv_tokens_per_expert_list: the tokens received by each local expert, each rounded up
                to `expert_alignment` (empty with `num_worst_tokens`), or None for a cached dispatch.
            handle: the tuple `combine` and a cached dispatch need (DeepEP's order: rank_prefix_matrix,
                channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank,
                send_head), or None for a cached dispatch.
            event: an EventOverlap to wait for (`async_finish`), else an empty one.

        Raises:
            ValueError: a bad input (dtype, shape, missing layout tensors, `topk_idx` with `handle`,
                a buffer too small for the shape and config, `expert_alignment` < 1,
                `num_worst_tokens` < 0), before any kernel runs; or `allocate_on_comm_stream`
                without `previous_event` and `async_finish`. A `num_worst_tokens` smaller than the
                count received is found by the kernel: the next call (or `check_async_error`) raises.
            TimeoutError: a peer did not take part in time (the message names it).
            RuntimeError: the Buffer has no high-throughput region (`num_nvl_bytes` was 0).
        """
        ht = self._high_throughput()
        config = self.get_dispatch_config(self.group_size) if config is None else config
        if isinstance(x, (tuple, list)):
            if len(x) != 2:
                raise ValueError(f"anyep: x must be a tensor or a tuple (tokens, scales), got a tuple of {len(x)}")
            x, x_scales = x
        else:
            x_scales = None
        if expert_alignment < 1:
            raise ValueError(f"anyep: expert_alignment must be >= 1, got {expert_alignment}")
        if num_worst_tokens < 0:
            raise ValueError(f"anyep: num_worst_tokens must be >= 0, got {num_worst_tokens}")
        del num_tokens_per_rdma_rank  # recomputed from is_token_in_rank (internode) or unused (intranode)
        tuning = (config.num_sms, config.num_max_nvl_chunked_send_tokens, config.num_max_nvl_chunked_recv_tokens)
        if self._internode is not None:
            return self._dispatch_internode(x, x_scales, handle, is_token_in_rank, num_tokens_per_expert, topk_idx,
                                            topk_weights, expert_alignment, num_worst_tokens, tuning, previous_event,
                                            async_finish, allocate_on_comm_stream)
        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("anyep: a cached dispatch (handle given) takes no topk_idx or topk_weights "
                                 "(as in deep_ep)")
            rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank, \
                send_head = self._unpack_handle(handle)
            with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
                recv_x, recv_x_scales = ht.dispatch(
                    x, x_scales, None, None, None, is_token_in_rank, None, recv_src_idx.size(0), rank_prefix_matrix,
                    channel_prefix_matrix, int(expert_alignment), int(num_worst_tokens), *tuning,
                    self._comm_stream_ptr)[:2]
            event = self._ht_end(async_finish, (x, x_scales, recv_x, recv_x_scales) + tuple(handle))
            return (recv_x, recv_x_scales) if x_scales is not None else recv_x, None, None, None, None, event
        missing = [name for name, t in (("num_tokens_per_rank", num_tokens_per_rank),
                                        ("is_token_in_rank", is_token_in_rank),
                                        ("num_tokens_per_expert", num_tokens_per_expert)) if t is None]
        if missing:
            raise ValueError(f"anyep: dispatch without a handle needs {', '.join(missing)} (from get_dispatch_layout)")
        with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
            recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, num_recv_tokens_per_expert_list, \
                rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, send_head = \
                ht.dispatch(x, x_scales, topk_idx, topk_weights, num_tokens_per_rank, is_token_in_rank,
                            num_tokens_per_expert, 0, None, None, int(expert_alignment), int(num_worst_tokens),
                            *tuning, self._comm_stream_ptr)
        handle = (rank_prefix_matrix, channel_prefix_matrix, recv_channel_prefix_matrix, recv_src_idx, is_token_in_rank,
                  send_head)
        event = self._ht_end(async_finish, (x, x_scales, topk_idx, topk_weights, num_tokens_per_rank,
                                            num_tokens_per_expert, recv_x, recv_x_scales, recv_topk_idx,
                                            recv_topk_weights) + handle)
        return (recv_x, recv_x_scales) if x_scales is not None else recv_x, recv_topk_idx, recv_topk_weights, \
            num_recv_tokens_per_expert_list, handle, event

    def combine(self, x: torch.Tensor, handle: Tuple, topk_weights: Optional[torch.Tensor] = None,
                bias: Union[torch.Tensor, Tuple[torch.Tensor, torch.Tensor], None] = None,
                config: Optional[Config] = None, previous_event: Optional[EventOverlap] = None,
                async_finish: bool = False, allocate_on_comm_stream: bool = False) -> \
            Tuple[torch.Tensor, Optional[torch.Tensor], EventOverlap]:
        """
        Send the received tokens (expert outputs) back to the ranks they came from and sum them
        there, **without** weights (high-throughput mode, intranode). Every rank of the group must
        call it. The sum is taken in float and rounded to BF16 once.

        Arguments:
            x: `[num_recv_tokens, hidden]` `torch.bfloat16`, one row per row of the dispatch's
                `recv_x` (the dispatch's `num_worst_tokens` rows when it used them).
            handle: the handle returned by the (non-cached) `dispatch`; `config.num_sms` must be the
                dispatch's (the handle's channel tables are sized by it, as in deep_ep).
            topk_weights: optional `[num_recv_tokens, num_topk]` `torch.float`, summed like `x`.
            bias: None, one `[num_tokens, hidden]` `torch.bfloat16` tensor, or a tuple of two, added to
                the result.
            config: the tuning (SMs, chunk sizes); default `get_combine_config(group_size)`.
            previous_event: an EventOverlap the communication stream waits for first (default: the
                current stream's work so far).
            async_finish: if True, the current stream does not wait for the kernels; wait for the
                returned event instead (it keeps the inputs and outputs alive).
            allocate_on_comm_stream: allocate the outputs on the communication stream (needs
                `previous_event` and `async_finish`, as in deep_ep).

        Returns:
            combined_x: `[num_tokens, hidden]` `torch.bfloat16`, for each token of this rank the sum
                of its rows over the ranks it went to, plus the bias.
            combined_topk_weights: `[num_tokens, num_topk]` `torch.float`, the same sum of the
                `topk_weights` rows, or None.
            event: an EventOverlap to wait for (`async_finish`), else an empty one.

        Raises:
            ValueError: a bad input (dtype, shape, a handle not made by `dispatch`, a bias that is
                not one tensor or two), before any kernel runs; or `allocate_on_comm_stream`
                without `previous_event` and `async_finish`.
            TimeoutError: a peer did not take part in time (the message names it).
            RuntimeError: the Buffer has no high-throughput region (`num_nvl_bytes` was 0).
        """
        ht = self._high_throughput()
        config = self.get_combine_config(self.group_size) if config is None else config
        if self._internode is not None:
            from .internode import InternodeHandle
            if not isinstance(handle, InternodeHandle):
                raise ValueError("anyep: handle must be the handle returned by this Buffer's (internode) dispatch")
            bias_0, bias_1 = self._unpack_bias(bias)
            tuning = (config.num_sms, config.num_max_nvl_chunked_send_tokens, config.num_max_nvl_chunked_recv_tokens)
            with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
                with torch.cuda.stream(self._comm_stream):
                    combined_x, combined_topk_weights = self._internode.combine(
                        x, handle, topk_weights, bias_0, bias_1, tuning, self._comm_stream_ptr)
            event = self._ht_end(async_finish, (x, topk_weights, bias_0, bias_1, combined_x, combined_topk_weights))
            return combined_x, combined_topk_weights, event
        # The sender-side channel_prefix_matrix (handle[1]) belongs to the dispatch; combine walks
        # the receiver side (handle[2]), as deep_ep does.
        rank_prefix_matrix, _, recv_channel_prefix_matrix, src_idx, _, send_head = self._unpack_handle(handle)
        bias_0, bias_1 = self._unpack_bias(bias)
        with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
            combined_x, combined_topk_weights = ht.combine(
                x, topk_weights, bias_0, bias_1, src_idx, rank_prefix_matrix, recv_channel_prefix_matrix, send_head,
                config.num_sms, config.num_max_nvl_chunked_send_tokens, config.num_max_nvl_chunked_recv_tokens,
                self._comm_stream_ptr)
        event = self._ht_end(async_finish, (x, topk_weights, bias_0, bias_1, combined_x, combined_topk_weights)
                             + tuple(handle))
        return combined_x, combined_topk_weights, event

    def _dispatch_internode(self, x, x_scales, handle, is_token_in_rank, num_tokens_per_expert, topk_idx,
                            topk_weights, expert_alignment, num_worst_tokens, tuning, previous_event, async_finish,
                            allocate_on_comm_stream):
        """dispatch() when the ranks span nodes (anyep/internode.py); the same returns."""
        from .internode import InternodeHandle
        if handle is not None:
            if topk_idx is not None or topk_weights is not None:
                raise ValueError("anyep: a cached dispatch (handle given) takes no topk_idx or topk_weights "
                                 "(as in deep_ep)")
            if not isinstance(handle, InternodeHandle):
                raise ValueError("anyep: handle must be the handle returned by this Buffer's (internode) dispatch")
            with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
                with torch.cuda.stream(self._comm_stream):
                    recv_x, recv_x_scales = self._internode.cached_dispatch(
                        x, x_scales, handle, expert_alignment, num_worst_tokens, tuning, self._comm_stream_ptr)
            event = self._ht_end(async_finish, (x, x_scales, recv_x, recv_x_scales))
            return (recv_x, recv_x_scales) if x_scales is not None else recv_x, None, None, None, None, event
        missing = [name for name, t in (("is_token_in_rank", is_token_in_rank),
                                        ("num_tokens_per_expert", num_tokens_per_expert)) if t is None]
        if missing:
            raise ValueError(f"anyep: dispatch without a handle needs {', '.join(missing)} (from get_dispatch_layout)")
        with self._ht_begin(previous_event, async_finish, allocate_on_comm_stream):
            with torch.cuda.stream(self._comm_stream):
                recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights, lst, handle = self._internode.dispatch(
                    x, x_scales, topk_idx, topk_weights, is_token_in_rank, num_tokens_per_expert.numel(),
                    expert_alignment, num_worst_tokens, tuning, self._comm_stream_ptr)
        event = self._ht_end(async_finish, (x, x_scales, topk_idx, topk_weights, recv_x, recv_x_scales, recv_topk_idx,
                                            recv_topk_weights))
        return (recv_x, recv_x_scales) if x_scales is not None else recv_x, recv_topk_idx, recv_topk_weights, \
            lst, handle, event

    def internode_dispatch(self, *args, **kwargs):
        """
        deep_ep's internode dispatch entry (its `dispatch` calls it when the ranks span nodes): the
        same as `dispatch`, which picks the internode path itself on a Buffer whose ranks span nodes.

        Arguments:
            args: `dispatch`'s positional arguments.
            kwargs: `dispatch`'s keyword arguments.

        Returns:
            result: the tuple `dispatch` returns.

        Raises:
            ValueError: the Buffer's ranks are on one node (call `dispatch`), or what `dispatch` raises.
        """
        if self._internode is None:
            raise ValueError("anyep: internode_dispatch on a Buffer whose ranks are on one node; call dispatch")
        return self.dispatch(*args, **kwargs)

    def internode_combine(self, *args, **kwargs):
        """
        deep_ep's internode combine entry: the same as `combine` (see `internode_dispatch`).

        Arguments:
            args: `combine`'s positional arguments.
            kwargs: `combine`'s keyword arguments.

        Returns:
            result: the tuple `combine` returns.

        Raises:
            ValueError: the Buffer's ranks are on one node (call `combine`), or what `combine` raises.
        """
        if self._internode is None:
            raise ValueError("anyep: internode_combine on a Buffer whose ranks are on one node; call combine")
        return self.combine(*args, **kwargs)

    # ---- low-latency mode -----------------------------------------------------------------------
    def clean_low_latency_buffer(self, num_max_dispatch_tokens_per_rank: int, hidden: int, num_experts: int) -> None:
        """
        Reset the low-latency buffer's signals, counters and error record, and zero its data
        regions (combine rows carry flags that count calls from the reset on) (a collective call:
        every rank finishes its GPU work, then barrier, clean, barrier). Use it after an error, and
        after unmasking a rank, before the next call. The rank mask is kept. With
        `enable_shrink=True` the barriers run over the low-latency buffer itself, skip masked
        ranks and mask a rank that does not arrive within ANYEP_TIMEOUT_S (as DeepEP's clean
        kernel does), so a dead rank costs one timeout instead of a hang; without it they run over
        the group (torch.distributed or the mpi4py comm) and wait for every rank.

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
        if self.enable_shrink:
            ll.clean_elastic()
            return
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
            use_logfmt: whether to send the expert outputs as LogFMT-10 (DeepEP's format: per group
                of 128 values with amax < 1, 9-bit log-spaced magnitudes between the group's min and
                max plus a sign bit, 160 bytes instead of 256; other groups stay BF16); every rank
                must pass the same value. The weighted sum is still taken in FP32.
            zero_copy: accepted; has no effect (combine reads `x` in place either way); cannot be
                combined with `use_logfmt` (as in deep_ep).
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
            ValueError: a bad input or a handle not made by anyep's `low_latency_dispatch`,
                `async_finish` with `return_recv_hook`, or `use_logfmt` with `zero_copy`.
        """
        ll = self._ll if self._ll is not None else self._low_latency()
        if use_logfmt and zero_copy:
            raise ValueError("anyep: use_logfmt and zero_copy cannot be combined (as in deep_ep)")
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
                                    num_experts, out, combine_wait_recv_cost_stats, return_recv_hook, stream,
                                    bool(use_logfmt))
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

