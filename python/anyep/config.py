"""Config: the high-throughput tuning record of deep_ep.Config."""
from ._ext import ext


class Config:
    """
    Tuning of the high-throughput kernels, as deep_ep.Config: `dispatch` and `combine` read
    `num_sms` and the NVLink chunk sizes (the kernels run `num_sms / 2` sender and as many receiver
    blocks); the RDMA fields belong to the internode path, which anyep does not have yet ("High-
    throughput mode, part 2"), and are kept for compatibility.

    Attributes:
        num_sms: SMs of the high-throughput kernels (two per channel).
        num_max_nvl_chunked_send_tokens: tokens sent per NVLink chunk.
        num_max_nvl_chunked_recv_tokens: capacity in tokens of an NVLink receive ring.
        num_max_rdma_chunked_send_tokens: tokens sent per RDMA chunk.
        num_max_rdma_chunked_recv_tokens: capacity in tokens of an RDMA receive ring.
    """

    def __init__(self, num_sms: int = 20, num_max_nvl_chunked_send_tokens: int = 6,
                 num_max_nvl_chunked_recv_tokens: int = 256, num_max_rdma_chunked_send_tokens: int = 6,
                 num_max_rdma_chunked_recv_tokens: int = 256):
        """
        Create a configuration.

        Arguments:
            num_sms: SMs of the high-throughput kernels, a positive even number.
            num_max_nvl_chunked_send_tokens: tokens sent per NVLink chunk.
            num_max_nvl_chunked_recv_tokens: capacity in tokens of an NVLink receive ring.
            num_max_rdma_chunked_send_tokens: tokens sent per RDMA chunk.
            num_max_rdma_chunked_recv_tokens: capacity in tokens of an RDMA receive ring.

        Raises:
            ValueError: `num_sms` is not positive and even.
        """
        if num_sms <= 0 or num_sms % 2 != 0:
            raise ValueError(f"Config: num_sms must be a positive even number, got {num_sms}")
        self.num_sms = num_sms
        self.num_max_nvl_chunked_send_tokens = num_max_nvl_chunked_send_tokens
        self.num_max_nvl_chunked_recv_tokens = num_max_nvl_chunked_recv_tokens
        self.num_max_rdma_chunked_send_tokens = num_max_rdma_chunked_send_tokens
        self.num_max_rdma_chunked_recv_tokens = num_max_rdma_chunked_recv_tokens

    def get_nvl_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """
        Compute the size of the high-throughput region (`Buffer(num_nvl_bytes=...)`) this config
        needs: the fixed control area plus one receive ring per (channel, source rank) of
        `num_max_nvl_chunked_recv_tokens / lanes` slots, each large enough for a dispatched token
        of `hidden_bytes` (payload, FP8 scales, top-k ids and weights, source index) and for a
        combine row (the formula is in src/kernels/ht/layout.h; docs/ht.md gives figures).

        Arguments:
            hidden_bytes: the bytes of one token's hidden vector as deep_ep counts it:
                `hidden * max(x.element_size(), 2)` (BF16 size also for FP8 input).
            num_ranks: the number of ranks in the group (1..16).

        Returns:
            size: the region size in bytes.

        Raises:
            ValueError: a shape or config the high-throughput mode does not support (the message
                names the field).
            ImportError: the compiled extension anyep._C is missing.
        """
        return int(ext().ht_size_hint(int(hidden_bytes), int(num_ranks), self.num_sms,
                                       self.num_max_nvl_chunked_recv_tokens))

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """
        Compute the RDMA buffer size of DeepEP's internode high-throughput path: send and receive
        rings per (channel, node), nodes of 8 ranks (DeepEP's formula, kept so that code sizing
        DeepEP's buffers runs). anyep's internode path (docs/ht.md, "Internode") uses
        `num_rdma_bytes` for its rail exchange, whose need grows with the tokens per call rather
        than with the rings: a call that does not fit raises ValueError naming the size it needs.

        Arguments:
            hidden_bytes: the bytes of one token's hidden vector.
            num_ranks: the number of ranks in the group.

        Returns:
            size: the buffer size in bytes, a multiple of 128.
        """
        channels = self.num_sms // 2
        nodes = max(1, (num_ranks + 7) // 8)
        per_token = hidden_bytes + 256
        size = 2 * channels * nodes * self.num_max_rdma_chunked_recv_tokens * per_token
        return (size + 127) // 128 * 128
