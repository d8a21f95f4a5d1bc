"""Config: the high-throughput tuning record of deep_ep.Config (kept for API compatibility)."""


class Config:
    """
    Tuning of the high-throughput kernels, as deep_ep.Config (kept for compatibility: anyep has no
    high-throughput mode yet, so nothing reads it but the size hints below).

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
        Compute the NVLink buffer size of the high-throughput mode: one receive ring per (channel,
        rank), each holding `num_max_nvl_chunked_recv_tokens` tokens of `hidden_bytes` plus
        per-token metadata.

        Arguments:
            hidden_bytes: the bytes of one token's hidden vector.
            num_ranks: the number of ranks in the group.

        Returns:
            size: the buffer size in bytes, a multiple of 128.
        """
        channels = self.num_sms // 2
        per_token = hidden_bytes + 256
        size = channels * num_ranks * self.num_max_nvl_chunked_recv_tokens * per_token + channels * num_ranks * 4 * 4
        return (size + 127) // 128 * 128

    def get_rdma_buffer_size_hint(self, hidden_bytes: int, num_ranks: int) -> int:
        """
        Compute the RDMA buffer size of the high-throughput mode: send and receive rings per
        (channel, node), nodes of 8 ranks.

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
