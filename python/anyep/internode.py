"""The internode high-throughput path (docs/ht.md, "Internode"): ranks on several nodes.

The stages run in C++ (anyep._C.HTInternode, src/runtime/ht/internode.h), as the C API runs them.
A dispatch routes first: each rank sends every token once to each node that hosts one of its
top-k experts, to the rank with its own local index there (its rail peer), through the CPU proxy
(the rail exchange); the token's own node keeps it. The top-k ids go first (the host waits for the
rows each rank forwards, then for the node's counts), then x, its scales and weights along the
same routes, and on every node the intranode kernels forward the rows each rank holds to the
ranks of the node that host their experts. Combine retraces the path: the intranode combine sums a
token's rows inside the node on the rank that forwarded it, the rail exchange takes that one row
per node home, and home sums the nodes' rows in float, adds the biases and rounds to BF16 once.
"""
import time
from typing import NamedTuple

import torch


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` on the host once the current stream reaches it, waiting by polling an event. Every
    kernel wait ends within ANYEP_TIMEOUT_S, so this loop does too."""
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    while not ev.query():
        time.sleep(0)
    return out


class InternodeHandle(NamedTuple):
    """What combine and a cached dispatch need from an internode dispatch (anyep's own tuple;
    DeepEP's internode handle has other fields: pass it back as it came)."""
    num_tokens: int  # tokens this rank dispatched
    route: object    # anyep._C.InternodePass: the pass's routing and tables


class Internode:
    """The internode half of a Buffer: anyep._C.HTInternode (the rail exchange and the node's
    intranode buffer)."""

    def __init__(self, rank: int, num_ranks: int, runtime):
        self.rt = runtime
        self.k = runtime.ranks_per_node()
        self.nodes = runtime.nodes()
        self.rank, self.R = rank, num_ranks

    def describe_paths(self) -> str:
        return self.rt.describe_paths()

    # ---- layout -------------------------------------------------------------------------------
    def layout(self, topk_idx: torch.Tensor, num_experts: int):
        """get_dispatch_layout over all ranks: (num_tokens_per_rank, num_tokens_per_rdma_rank,
        num_tokens_per_expert, is_token_in_rank). Torch ops on the current stream; one host wait
        (event polling) checks that every expert index is in range."""
        if topk_idx.dtype != torch.int64 or topk_idx.dim() != 2 or not topk_idx.is_cuda:
            raise ValueError("anyep: topk_idx must be a CUDA torch.int64 [num_tokens, num_topk] tensor, got "
                             f"{topk_idx.dtype} {tuple(topk_idx.shape)} on {topk_idx.device}")
        if num_experts <= 0 or num_experts % self.R != 0:
            raise ValueError(f"anyep: num_experts={num_experts} must be a positive multiple of the {self.R} ranks")
        if topk_idx.numel() > 0 and bool(_to_host(((topk_idx < -1) | (topk_idx >= num_experts)).any())):
            raise ValueError(f"anyep: topk_idx holds an expert outside [-1, {num_experts})")
        n = topk_idx.size(0)
        L = num_experts // self.R
        owner = torch.where(topk_idx >= 0, topk_idx // L, torch.full_like(topk_idx, self.R))
        in_rank = torch.zeros(n, self.R + 1, dtype=torch.bool, device=topk_idx.device)
        in_rank.scatter_(1, owner, True)
        is_token_in_rank = in_rank[:, :self.R].contiguous()
        per_rank = is_token_in_rank.sum(0, dtype=torch.int32)
        per_node = is_token_in_rank.view(n, self.nodes, self.k).any(2).sum(0, dtype=torch.int32)
        slots = torch.where(topk_idx >= 0, topk_idx, torch.full_like(topk_idx, num_experts)).flatten()
        per_expert = torch.zeros(num_experts + 1, dtype=torch.int32, device=topk_idx.device)
        per_expert.scatter_add_(0, slots, torch.ones_like(slots, dtype=torch.int32))
        return per_rank, per_node, per_expert[:num_experts].contiguous(), is_token_in_rank

    # ---- dispatch and combine ----------------------------------------------------------------
    def dispatch(self, x, x_scales, topk_idx, topk_weights, is_token_in_rank, num_experts: int,
                 expert_alignment: int, num_worst_tokens: int, tuning, stream: int):
        """Non-cached dispatch. Returns (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights,
        num_recv_tokens_per_expert_list, handle). Tokens are routed from topk_idx (is_token_in_rank,
        from get_dispatch_layout, says the same and is checked for its shape only)."""
        if topk_idx is None:
            raise ValueError("anyep: an internode dispatch without a handle needs topk_idx (the tokens are routed "
                             "node by node from it)")
        n = x.size(0)
        if tuple(is_token_in_rank.shape) != (n, self.R) or is_token_in_rank.dtype != torch.bool:
            raise ValueError(f"anyep: is_token_in_rank must be torch.bool [{n}, {self.R}], got "
                             f"{is_token_in_rank.dtype} {tuple(is_token_in_rank.shape)}")
        recv_x, recv_s, recv_idx, recv_w, lst, route = self.rt.dispatch(
            x, x_scales, topk_idx, topk_weights, int(num_experts), int(expert_alignment), int(num_worst_tokens),
            *tuning, stream)
        return recv_x, recv_s, recv_idx, recv_w, lst, InternodeHandle(n, route)

    def cached_dispatch(self, x, x_scales, handle: InternodeHandle, expert_alignment: int, num_worst_tokens: int,
                        tuning, stream: int):
        """A dispatch with an earlier dispatch's routing: (recv_x, recv_x_scales)."""
        if x.size(0) != handle.num_tokens:
            raise ValueError(f"anyep: x has {x.size(0)} tokens, the handle's dispatch had {handle.num_tokens}")
        return self.rt.cached_dispatch(x, x_scales, handle.route, stream)

    def combine(self, x, handle: InternodeHandle, topk_weights, bias_0, bias_1, tuning, stream: int):
        """(combined_x, combined_topk_weights): the sum over every rank a token went to."""
        return self.rt.combine(x, topk_weights, bias_0, bias_1, handle.route, *tuning, stream)
