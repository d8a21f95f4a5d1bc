"""deep_ep._C: the names of DeepEP V2's compiled module that Python code imports from it
(`EventHandle`, `topk_idx_t`, `Config`), served by anyep. deep_ep.utils modules taken from a DeepEP
checkout (ANYEP_DEEPEP_UTILS, see deep_ep/utils.py) import them from here. DeepEP's NCCL and JIT
entry points (communicator handles, `init_jit`, `calculate_elastic_buffer_size`, ...) have no
counterpart: asking for one raises AttributeError naming it."""
import torch

from anyep.config import Config  # noqa: F401
from anyep.event import EventHandle  # noqa: F401

# The dtype of topk_idx tensors: the kernels read 64-bit expert indices.
topk_idx_t = torch.int64

__all__ = ["Config", "EventHandle", "topk_idx_t"]


def __getattr__(name):
    """
    Refuse the compiled entry points anyep does not have, naming them.

    Arguments:
        name: the attribute asked for.

    Raises:
        AttributeError: always (the name is one of DeepEP's compiled module only).
    """
    raise AttributeError(f"deep_ep._C.{name} belongs to DeepEP's compiled module (NCCL communicators, JIT); anyep "
                         "does not provide it: use deep_ep.ElasticBuffer and deep_ep.get_physical_domain_size / "
                         "get_logical_domain_size (docs/elastic.md)")
