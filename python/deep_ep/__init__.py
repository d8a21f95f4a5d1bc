"""deep_ep compatibility package: `import deep_ep` gets anyep's DeepEP-compatible API.

Every public name of DeepEP V1's `deep_ep` package is here (`Buffer`, `Config`, `EventOverlap`,
`topk_idx_t`, and `deep_ep.buffer` / `deep_ep.utils` with `EventHandle` and
`check_nvlink_connections`), plus `__version__` (anyep's). `deep_ep.Buffer` is `anyep.Buffer`, so
the high-throughput calls (`get_dispatch_layout`, `dispatch`, `combine`, `get_dispatch_config`,
`get_combine_config`) and the low-latency ones go straight to anyep's. What anyep does not implement
yet raises NotImplementedError naming it (`get_local_buffer_tensor`); the high-throughput calls
serve ranks on several nodes too (anyep's internode path, docs/ht.md "Internode"). DeepEP's compiled module `deep_ep_cpp` has no counterpart.
"""
from anyep import (Buffer, Config, EventHandle, EventOverlap, __version__, check_nvlink_connections,
                   topk_idx_t)

from . import buffer, utils  # noqa: F401  (deep_ep.buffer.Buffer, deep_ep.utils.EventOverlap, ...)

__all__ = ["Buffer", "Config", "EventHandle", "EventOverlap", "check_nvlink_connections", "topk_idx_t",
           "__version__"]
