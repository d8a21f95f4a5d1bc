"""deep_ep.utils: EventOverlap, EventHandle and check_nvlink_connections (anyep's), and the
submodules of DeepEP V2's deep_ep.utils package an API user imports:
`deep_ep.utils.math` (align, ceil_div, safe_div, calc_diff, count_bytes, per_token_cast_to_fp8,
per_token_cast_back), `deep_ep.utils.event` (EventHandle, EventOverlap) and `deep_ep.utils.envs`
(get_physical_domain_size, get_logical_domain_size, check_nvlink_connections).

For running DeepEP's own tests against anyep: with ANYEP_DEEPEP_UTILS=<a DeepEP V2 checkout>, every
`deep_ep.utils.<name>` submodule (math, gate, envs, refs, testing, ...) is loaded from that
checkout's deep_ep/utils/ folder instead, without running the checkout's deep_ep/__init__.py; those
modules import `deep_ep._C`, which anyep serves (deep_ep/_C.py). Nothing of DeepEP is part of anyep."""
import os
import sys
import types

from anyep.event import EventHandle, EventOverlap
from anyep.utils import check_nvlink_connections

__all__ = ["EventHandle", "EventOverlap", "check_nvlink_connections"]

# The one place ANYEP_DEEPEP_UTILS is read (docs/environment.md).
_CHECKOUT = os.environ.get("ANYEP_DEEPEP_UTILS", "")


def _checkout_utils(root: str) -> str:
    """The deep_ep/utils folder of a DeepEP checkout (or the folder itself), checked."""
    for folder in (os.path.join(root, "deep_ep", "utils"), root):
        if os.path.isfile(os.path.join(folder, "math.py")) and os.path.isfile(os.path.join(folder, "refs.py")):
            return os.path.abspath(folder)
    raise ImportError(f"ANYEP_DEEPEP_UTILS={root!r}: no deep_ep/utils/math.py and refs.py there (name a DeepEP V2 "
                      "checkout, or its deep_ep/utils folder)")


def _serve(name: str, doc: str, **attrs) -> types.ModuleType:
    """Register anyep's objects as the submodule deep_ep.utils.<name>."""
    module = types.ModuleType(f"{__name__}.{name}", doc)
    module.__dict__.update(attrs)
    module.__all__ = sorted(attrs)
    sys.modules[module.__name__] = module
    return module


if _CHECKOUT:
    # Submodules come from the checkout (a module with __path__ is searched like a package).
    __path__ = [_checkout_utils(_CHECKOUT)]
else:
    from anyep import ep_math as _ep_math
    from anyep.elastic import get_logical_domain_size, get_physical_domain_size

    math = _serve("math", "anyep.ep_math under deep_ep V2's name.",
                  **{n: getattr(_ep_math, n) for n in _ep_math.__all__})
    event = _serve("event", "EventHandle and EventOverlap (anyep.event).", EventHandle=EventHandle,
                   EventOverlap=EventOverlap)
    envs = _serve("envs", "Domain sizes and the connection check (anyep.elastic, anyep.utils).",
                  get_physical_domain_size=get_physical_domain_size,
                  get_logical_domain_size=get_logical_domain_size,
                  check_nvlink_connections=check_nvlink_connections)
