"""anyep: portable expert-parallel communication with a DeepEP-compatible Buffer."""
import torch

from .buffer import Buffer
from .config import Config
from .event import EventHandle, EventOverlap
from .utils import check_nvlink_connections

# Kept equal to the version in python/setup.py.
__version__ = "0.1.0"

# The dtype of topk_idx tensors (deep_ep.topk_idx_t): the kernels read 64-bit expert indices.
topk_idx_t = torch.int64

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "check_nvlink_connections", "topk_idx_t",
           "__version__"]
