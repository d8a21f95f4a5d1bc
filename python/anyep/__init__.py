"""anyep: portable expert-parallel communication with a DeepEP-compatible Buffer.

The API names load on first use (PEP 562 __getattr__): `anyep.Buffer`, `from anyep import Buffer`
and deep_ep's imports work as before, while `anyep.__version__` and the `anyep` command
(anyep/cli.py) also work where torch is not installed."""
import importlib

# Public name -> the module that defines it.
_API = {"Buffer": ".buffer", "Config": ".config", "EventHandle": ".event", "EventOverlap": ".event",
        "check_nvlink_connections": ".utils", "ElasticBuffer": ".elastic", "EPHandle": ".elastic"}


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


def __getattr__(name):
    """The API's names, imported on first use (and kept in the module from then on)."""
    if name in _API:
        value = getattr(importlib.import_module(_API[name], __name__), name)
    elif name == "topk_idx_t":
        # The dtype of topk_idx tensors (deep_ep.topk_idx_t): the kernels read 64-bit expert indices.
        value = importlib.import_module("torch").int64
    else:
        raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
    globals()[name] = value
    return value


__all__ = ["Buffer", "Config", "EPHandle", "ElasticBuffer", "EventHandle", "EventOverlap", "check_nvlink_connections",
           "topk_idx_t", "__version__"]
