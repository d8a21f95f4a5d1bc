"""anyep: portable expert-parallel communication with a DeepEP-compatible Buffer."""
import torch

from .buffer import Buffer
from .config import Config
from .event import EventHandle, EventOverlap
from .utils import check_nvlink_connections


def _version():
    """project(anyep VERSION ...) of the top CMakeLists.txt, the version's one place: CMake writes it
    into _build_info.py next to anyep._C (the build folder, or the installed package); a source
    checkout without a build reads the CMakeLists.txt itself."""
    try:
        from ._build_info import version
        return version
    except ImportError:
        import os
        import re
        top = os.path.join(os.path.dirname(os.path.abspath(__file__)), "..", "..", "CMakeLists.txt")
        try:
            with open(top) as f:
                m = re.search(r"project\(anyep\s+VERSION\s+([0-9.]+)", f.read())
            return m.group(1) if m else "unknown"
        except OSError:
            return "unknown"


__version__ = _version()

# The dtype of topk_idx tensors (deep_ep.topk_idx_t): the kernels read 64-bit expert indices.
topk_idx_t = torch.int64

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "check_nvlink_connections", "topk_idx_t",
           "__version__"]
