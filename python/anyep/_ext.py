"""anyep._ext: the compiled extension anyep._C, loaded on first use by every module that calls into
it (buffer.py, config.py), so that none of them imports another to reach it."""
import importlib

_C = None


def ext():
    """anyep._C, loaded once. Raises ImportError saying what is missing (torch, or the compiled
    module: a build with -DANYEP_PYTHON=ON, or pip install ./python)."""
    global _C
    if _C is None:
        try:
            import torch  # noqa: F401  (anyep._C links libtorch: torch loads it and its CUDA libraries first)
        except ImportError as e:
            raise ImportError(f"anyep: the compiled extension anyep._C needs torch, which cannot be imported "
                              f"({e})") from e
        try:
            _C = importlib.import_module(f"{__package__}._C")
        except ImportError as e:
            raise ImportError(f"anyep: the compiled extension anyep._C is not available ({e}); build with "
                              "-DANYEP_PYTHON=ON or pip install ./python") from e
    return _C
