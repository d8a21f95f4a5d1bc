"""The internode high-throughput path (docs/ht.md, "Internode"): ranks on several nodes.

A dispatch runs in two stages. (1) The rail exchange (anyep._C.HTNet, src/runtime/ht_net.h): each
rank sends every token once to each node that hosts one of its top-k experts, to the rank with
its own local index there (its rail peer), through the CPU proxy; the token's own node keeps it.
(2) On every node, the intranode kernels (anyep._C.HTBuffer over the node's ranks, direct stores)
forward the tokens each rank holds now to the ranks of the node that host their experts. Combine
retraces the path: the intranode combine sums a token's rows inside the node on the rank that
forwarded it, the rail exchange takes that one row per node home, and home sums the nodes'
rows in float and rounds to BF16 once.

Rows of the rail exchange are bytes: Python packs tokens into them here; the exchange never knows
what a row holds.
"""
import time
from typing import List, NamedTuple, Optional

import torch

_ROW_ALIGN = 16  # the exchange moves rows in 16-byte units


def _pad16(n: int) -> int:
    return (n + _ROW_ALIGN - 1) // _ROW_ALIGN * _ROW_ALIGN


def _to_host(t: torch.Tensor) -> torch.Tensor:
    """`t` on the host once the current stream reaches it, waiting by polling an event: a host
    thread blocked in a synchronous CUDA call would stall the CUDA calls of this process's proxy
    threads (the cuda-ipc transport's copies; docs/ll.md), and the kernels wait for those. Every
    kernel wait ends within ANYEP_TIMEOUT_S, so this loop does too."""
    out = torch.empty(t.shape, dtype=t.dtype, pin_memory=True)
    out.copy_(t, non_blocking=True)
    ev = torch.cuda.Event()
    ev.record()
    while not ev.query():
        time.sleep(0)
    return out


def _bytes_of(t: torch.Tensor) -> torch.Tensor:
    """[rows, ...] -> uint8 [rows, bytes per row] (a copy only when `t` is not row-major)."""
    return t.contiguous().view(torch.uint8).reshape(t.size(0), -1)


class InternodeHandle(NamedTuple):
    """What combine and a cached dispatch need from an internode dispatch (anyep's own tuple;
    DeepEP's internode handle has other fields: pass it back as it came)."""
    num_tokens: int               # tokens this rank dispatched
    pairs_token: torch.Tensor     # int64 [P]: token of each (node, token) pair, node by node
    pairs_node: torch.Tensor      # int64 [P]
    pairs_pos: torch.Tensor       # int64 [P]: the pair's row in its node's block
    send_rows: torch.Tensor       # int64 [nodes] (device): rows this rank sent each node
    recv_rows: torch.Tensor       # int64 [nodes] (device): rows this rank got from each node
    recv_rows_host: List[int]
    node_handle: tuple            # the intranode dispatch's 6-tuple, over the node's ranks
    num_topk: int


class Internode:
    """The internode half of a Buffer: the rail exchange and the node's intranode buffer."""

    def __init__(self, rank: int, num_ranks: int, net, node_ht):
        self.net, self.ht = net, node_ht
        self.k = net.ranks_per_node()
        self.nodes = net.nodes()
        self.rank, self.R = rank, num_ranks
        self.node = rank // self.k
        self._region = net.region()
        self._block = net.block_bytes()
        self._hdr = net.header_bytes()
        self._send0 = net.send_off(0)

    def describe_paths(self) -> str:
        return (f"internode: {self.net.describe_paths()}; inside node {self.node}: {self.ht.describe_paths()}")

    # ---- the rail exchange --------------------------------------------------------------------
    def _send_view(self, row_bytes: int) -> torch.Tensor:
        """The send area as uint8 [nodes, rows a block holds, row_bytes]."""
        cap = (self._block - self._hdr) // row_bytes
        return self._region.as_strided((self.nodes, cap, row_bytes), (self._block, row_bytes, 1),
                                       self._send0 + self._hdr)

    def _exchange(self, rows: torch.Tensor, node: torch.Tensor, pos: torch.Tensor, send_rows: torch.Tensor,
                  expect_rows: Optional[torch.Tensor], total: Optional[int], stream: int):
        """Send row i of `rows` (uint8 [P, row_bytes]) to node node[i] at position pos[i]; returns
        the rows every node sent here (node by node, this node's own block first in its place),
        their count per node (device) and, when `total` is None (wait for the counts), on the host."""
        row_bytes = rows.size(1)
        self.net.begin(stream)
        if rows.size(0) > 0:
            self._send_view(row_bytes)[node, pos] = rows
        recv_rows = torch.zeros(self.nodes, dtype=torch.int64, device=rows.device)
        self.net.send(send_rows, expect_rows, recv_rows, row_bytes, stream)
        recv_host = None
        if total is None:
            recv_host = _to_host(recv_rows)  # the host waits for the rail peers' counts
            self.net.check_error()  # a peer that did not send: its TimeoutError, not a count of 0
            total = int(recv_host.sum())
        out = torch.empty((total, row_bytes), dtype=torch.uint8, device=rows.device)
        self.net.finish(recv_rows, out, row_bytes, stream)
        return out, recv_rows, recv_host

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

    # ---- dispatch -----------------------------------------------------------------------------
    def dispatch(self, x, x_scales, topk_idx, topk_weights, is_token_in_rank, num_experts: int,
                 expert_alignment: int, num_worst_tokens: int, tuning, stream: int):
        """Non-cached dispatch. Returns (recv_x, recv_x_scales, recv_topk_idx, recv_topk_weights,
        num_recv_tokens_per_expert_list, handle)."""
        if topk_idx is None:
            raise ValueError("anyep: an internode dispatch without a handle needs topk_idx (the tokens are routed "
                             "node by node from it)")
        n, K = x.size(0), topk_idx.size(1)
        if tuple(is_token_in_rank.shape) != (n, self.R) or is_token_in_rank.dtype != torch.bool:
            raise ValueError(f"anyep: is_token_in_rank must be torch.bool [{n}, {self.R}], got "
                             f"{is_token_in_rank.dtype} {tuple(is_token_in_rank.shape)}")
        dev = x.device
        weights = topk_weights if topk_weights is not None else torch.zeros(n, K, dtype=torch.float32, device=dev)
        # Row: token bytes | scales | top-k ids (int64) | weights | (source token, source rank) | pad.
        parts = [_bytes_of(x)]
        if x_scales is not None:
            parts.append(_bytes_of(x_scales))
        src = torch.stack([torch.arange(n, dtype=torch.int32, device=dev),
                           torch.full((n,), self.rank, dtype=torch.int32, device=dev)], 1)
        parts += [_bytes_of(topk_idx), _bytes_of(weights.float()), _bytes_of(src)]
        widths = [p.size(1) for p in parts]
        row = sum(widths)
        if _pad16(row) != row:
            parts.append(torch.zeros(n, _pad16(row) - row, dtype=torch.uint8, device=dev))
        rows = torch.cat(parts, 1)
        # Each token once per node that hosts one of its experts (the dedup across a node).
        in_node = is_token_in_rank.view(n, self.nodes, self.k).any(2)
        send_rows = in_node.sum(0, dtype=torch.int64)
        send_host = _to_host(send_rows)
        self.net.check_fits(int(send_host.max()), rows.size(1), "dispatch")
        # (node, token) pairs, node by node: the blocks' order (a static size: no blocking copy).
        pairs = torch.nonzero_static(in_node.t(), size=int(send_host.sum()))
        pairs_node, pairs_token = pairs[:, 0].contiguous(), pairs[:, 1].contiguous()
        starts = torch.cumsum(send_rows, 0) - send_rows
        pairs_pos = torch.arange(pairs.size(0), device=dev) - starts[pairs_node]
        got, recv_rows, recv_host = self._exchange(rows[pairs_token], pairs_node, pairs_pos, send_rows, None, None,
                                                   stream)
        recv_rows_host = recv_host.tolist()
        # Unpack what this rank forwards inside its node.
        cols, off = [], 0
        for w in widths:
            cols.append(got[:, off:off + w])
            off += w
        m1 = got.size(0)
        x1 = cols[0].contiguous().view(x.dtype).reshape(m1, x.size(1))
        c = 1
        s1 = None
        if x_scales is not None:
            s1 = cols[c].contiguous().view(x_scales.dtype).reshape(m1, -1)
            c += 1
        idx1 = cols[c].contiguous().view(torch.int64).reshape(m1, K)
        w1 = cols[c + 1].contiguous().view(torch.float32).reshape(m1, K)
        # Experts of this node, numbered from 0 inside it; the others are -1 (another node's).
        L = num_experts // self.R
        base, span = self.node * self.k * L, self.k * L
        idx_node = torch.where((idx1 >= base) & (idx1 < base + span), idx1 - base, torch.full_like(idx1, -1))
        ntpr, ntpe, itir = self.ht.get_dispatch_layout(idx_node, span, stream)
        recv_x, recv_s, recv_idx, recv_w, lst, rpm, cpm, rcpm, src_idx, send_head = self.ht.dispatch(
            x1, s1, idx_node, w1, ntpr, itir, ntpe, 0, None, None, int(expert_alignment), int(num_worst_tokens),
            *tuning, stream)
        handle = InternodeHandle(n, pairs_token, pairs_node, pairs_pos, send_rows, recv_rows, recv_rows_host,
                                 (rpm, cpm, rcpm, src_idx, itir, send_head), K)
        return recv_x, recv_s, recv_idx, (recv_w if topk_weights is not None else None), lst, handle

    def cached_dispatch(self, x, x_scales, handle: InternodeHandle, expert_alignment: int, num_worst_tokens: int,
                        tuning, stream: int):
        """A dispatch with an earlier dispatch's routing: (recv_x, recv_x_scales)."""
        if x.size(0) != handle.num_tokens:
            raise ValueError(f"anyep: x has {x.size(0)} tokens, the handle's dispatch had {handle.num_tokens}")
        parts = [_bytes_of(x)] + ([_bytes_of(x_scales)] if x_scales is not None else [])
        widths = [p.size(1) for p in parts]
        row = sum(widths)
        if _pad16(row) != row:
            parts.append(torch.zeros(x.size(0), _pad16(row) - row, dtype=torch.uint8, device=x.device))
        rows = torch.cat(parts, 1)
        self.net.check_fits(max(handle.recv_rows_host + [0]), rows.size(1), "cached dispatch")
        got, _, _ = self._exchange(rows[handle.pairs_token], handle.pairs_node, handle.pairs_pos, handle.send_rows,
                                   handle.recv_rows, sum(handle.recv_rows_host), stream)
        m1 = got.size(0)
        x1 = got[:, :widths[0]].contiguous().view(x.dtype).reshape(m1, x.size(1))
        s1 = None
        if x_scales is not None:
            s1 = got[:, widths[0]:widths[0] + widths[1]].contiguous().view(x_scales.dtype).reshape(m1, -1)
        rpm, cpm, _, src_idx, itir, _ = handle.node_handle
        recv_x, recv_s = self.ht.dispatch(x1, s1, None, None, None, itir, None, src_idx.size(0), rpm, cpm,
                                          int(expert_alignment), int(num_worst_tokens), *tuning, stream)[:2]
        return recv_x, recv_s

    # ---- combine ------------------------------------------------------------------------------
    def combine(self, x, handle: InternodeHandle, topk_weights, bias_0, bias_1, tuning, stream: int):
        """(combined_x, combined_topk_weights): the sum over every rank a token went to."""
        n = handle.num_tokens
        for b in (bias_0, bias_1):
            if b is not None and (b.dim() != 2 or b.size(0) != n or b.dtype != torch.bfloat16):
                raise ValueError(f"anyep: bias must be torch.bfloat16 [{n}, hidden], got {b.dtype} {tuple(b.shape)}")
        rpm, _, rcpm, src_idx, _, send_head = handle.node_handle
        # Inside the node: one row per token this rank forwarded, summed over the node's ranks.
        y1, w1 = self.ht.combine(x, topk_weights, None, None, src_idx, rpm, rcpm, send_head, *tuning, stream)
        hidden = y1.size(1)
        parts = [_bytes_of(y1)] + ([_bytes_of(w1)] if w1 is not None else [])
        row = sum(p.size(1) for p in parts)
        m1 = y1.size(0)
        if _pad16(row) != row:
            parts.append(torch.zeros(m1, _pad16(row) - row, dtype=torch.uint8, device=y1.device))
        rows = torch.cat(parts, 1)
        # Row j of y1 came from node node1[j] (blocks are node by node), position pos1[j] there.
        counts = handle.recv_rows
        node1 = torch.repeat_interleave(torch.arange(self.nodes, device=y1.device), counts, output_size=m1)
        starts = torch.cumsum(counts, 0) - counts
        pos1 = torch.arange(m1, device=y1.device) - starts[node1]
        self.net.check_fits(max(handle.recv_rows_host + [0]), rows.size(1), "combine")
        back, _, _ = self._exchange(rows, node1, pos1, counts, handle.send_rows, handle.pairs_token.size(0), stream)
        # Home: the nodes' rows in float, summed per token, rounded once.
        out = torch.zeros(n, hidden, dtype=torch.float32, device=y1.device)
        bx = back[:, :2 * hidden].contiguous().view(torch.bfloat16).reshape(-1, hidden)
        out.index_add_(0, handle.pairs_token, bx.float())
        for b in (bias_0, bias_1):
            if b is not None:
                out += b.float()
        out_w = None
        if w1 is not None:
            K = w1.size(1)
            bw = back[:, 2 * hidden:2 * hidden + 4 * K].contiguous().view(torch.float32).reshape(-1, K)
            out_w = torch.zeros(n, K, dtype=torch.float32, device=y1.device)
            out_w.index_add_(0, handle.pairs_token, bw)
        return out.to(torch.bfloat16), out_w

    def destroy(self) -> None:
        self._region = None
        self.net.destroy()
        self.ht.destroy()
