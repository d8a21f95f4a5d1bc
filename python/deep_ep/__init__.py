"""deep_ep compatibility package: `import deep_ep` gets anyep's DeepEP-compatible API.

DeepEP V1's public names (`Buffer`, `Config`, `EventOverlap`, `topk_idx_t`, and `deep_ep.buffer` /
`deep_ep.utils` with `EventHandle` and `check_nvlink_connections`) and V2's (`ElasticBuffer`,
`EPHandle`, `get_physical_domain_size`, `get_logical_domain_size`, `deep_ep._C` with `EventHandle`,
`topk_idx_t` and `Config`, and `deep_ep.utils.math` / `.event` / `.envs`), plus `__version__`
(anyep's). `deep_ep.Buffer` is `anyep.Buffer`: the high-throughput calls (`get_dispatch_layout`,
`dispatch`, `combine`, `get_dispatch_config`, `get_combine_config`) and the low-latency ones go
straight to anyep's; the high-throughput calls serve ranks on several nodes too (docs/ht.md,
"Internode"). `deep_ep.ElasticBuffer` is `anyep.elastic.ElasticBuffer` on the same runtime, for the
ranks of one node (docs/elastic.md). What anyep does not implement raises NotImplementedError naming
it (`get_local_buffer_tensor`; Engram, pipeline-parallel send/recv and AGRS of ElasticBuffer).
DeepEP V1's compiled module `deep_ep_cpp` has no counterpart.
"""
from anyep import (Buffer, Config, EventHandle, EventOverlap, __version__, check_nvlink_connections,
                   topk_idx_t)
from anyep.elastic import EPHandle, ElasticBuffer, get_logical_domain_size, get_physical_domain_size

from . import _C, buffer, utils  # noqa: F401  (deep_ep._C.EventHandle, deep_ep.utils.math, ...)

__all__ = ["Buffer", "Config", "EPHandle", "ElasticBuffer", "EventHandle", "EventOverlap", "check_nvlink_connections",
           "get_logical_domain_size", "get_physical_domain_size", "topk_idx_t", "__version__"]
