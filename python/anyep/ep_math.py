"""Tensor functions deep_ep V2 ships as deep_ep.utils.math (the `deep_ep` package serves them under
that name): integer rounding, the per-token FP8 cast DeepEP's kernels expect and its inverse, a
similarity-based difference and byte counts."""
from typing import Tuple

import torch

from .elastic_plan import align, ceil_div

__all__ = ["align", "ceil_div", "safe_div", "calc_diff", "count_bytes", "per_token_cast_to_fp8",
           "per_token_cast_back"]

# The largest finite float8_e4m3fn value, and the amax floor that keeps all-zero groups finite.
FP8_MAX = 448.0
AMAX_FLOOR = 1e-4


def safe_div(a, b):
    """
    Divide, with 0 / 0 = 0.

    Arguments:
        a: the dividend.
        b: the divisor.

    Returns:
        quotient: a / b, or 0 when both are 0.

    Raises:
        ZeroDivisionError: `b` is 0 and `a` is not.
    """
    if b == 0 and a == 0:
        return 0
    return a / b


def calc_diff(x: torch.Tensor, y: torch.Tensor) -> float:
    """
    One minus the cosine-like similarity of `x + 1` and `y + 1` in float64 (0: identical).

    Arguments:
        x: a tensor.
        y: a tensor of the same shape.

    Returns:
        diff: the difference, a Python float.
    """
    a, b = x.double() + 1, y.double() + 1
    return float(1 - 2 * (a * b).sum() / (a * a + b * b).sum())


def count_bytes(*tensors) -> int:
    """
    Bytes of tensors, nested tuples and lists of them; None counts 0.

    Arguments:
        tensors: the tensors.

    Returns:
        size: the bytes.
    """
    total = 0
    for t in tensors:
        if isinstance(t, (tuple, list)):
            total += count_bytes(*t)
        elif t is not None:
            total += t.numel() * t.element_size()
    return total


def per_token_cast_to_fp8(x: torch.Tensor) -> Tuple[torch.Tensor, torch.Tensor]:
    """
    Cast `[m, n]` values to FP8 with one scale per token and 128 columns (the recipe DeepEP's
    kernels use): scale = max(amax, 1e-4) / 448.

    Arguments:
        x: `[m, n]` tensor (any float type).

    Returns:
        x_fp8: `[m, n]` `torch.float8_e4m3fn`.
        scales: `[m, ceil(n / 128)]` `torch.float`.
    """
    if x.dim() != 2:
        raise ValueError(f"per_token_cast_to_fp8: x must be 2-D, got {x.dim()}-D")
    m, n = x.shape
    padded = torch.nn.functional.pad(x, (0, align(n, 128) - n)).view(m, -1, 128)
    amax = padded.abs().float().amax(dim=2).clamp(min=AMAX_FLOOR)
    q = (padded.float() * (FP8_MAX / amax).unsqueeze(2)).to(torch.float8_e4m3fn)
    return q.view(m, -1)[:, :n].contiguous(), amax / FP8_MAX


def per_token_cast_back(x_fp8: torch.Tensor, x_scales: torch.Tensor) -> torch.Tensor:
    """
    Undo `per_token_cast_to_fp8` to BF16 (scales may be float, or int32 packing four UE8M0 bytes).

    Arguments:
        x_fp8: `[m, n]` `torch.float8_e4m3fn`.
        x_scales: `[m, ceil(n / 128)]` `torch.float` (any strides), or packed `torch.int`.

    Returns:
        x: `[m, n]` `torch.bfloat16`.
    """
    m, n = x_fp8.shape
    if x_scales.dtype == torch.int32:
        x_scales = (x_scales.contiguous().view(torch.uint8).to(torch.int32) << 23).view(torch.float32)
    padded = torch.nn.functional.pad(x_fp8.view(torch.uint8), (0, align(n, 128) - n)).view(torch.float8_e4m3fn)
    vals = padded.float().view(m, -1, 128) * x_scales.reshape(m, -1, 1)
    return vals.view(m, -1).to(torch.bfloat16)[:, :n].contiguous()
