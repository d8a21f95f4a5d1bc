"""deep_ep.utils's helpers that are not events: check_nvlink_connections."""
from typing import Optional

import torch.distributed as dist


def check_nvlink_connections(group: Optional[dist.ProcessGroup]) -> None:
    """
    Accept any GPU connection (deep_ep's check, kept for compatibility). deep_ep asserts that
    every pair of PCIe GPUs in the group has NVLink, because its kernels store to every peer
    directly. anyep does not need NVLink: a peer on this host whose GPU is reachable through CUDA
    IPC (NVLink or PCIe peer access) gets direct stores, every other peer goes through the CPU
    proxy (docs/ll.md, "Proxy path"), so there is nothing to refuse here.
    `Buffer.describe_paths()` says which path each peer takes.

    Arguments:
        group: the communication group (or None, as with `Buffer(group=None, comm=...)`).
    """
    del group  # every connection works; see the docstring
