"""Token tensors as every loss takes them: the checks, the compute precision, the masked mean, the kept rows.

Shapes: ``B`` sequences (rollouts) of ``T`` response positions; ``response_mask`` [B, T] is 1 (or True) on the
tokens that count. Shared by :mod:`dynashape.losses.policy`, :mod:`dynashape.losses.drpo` and
:mod:`dynashape.losses.entropy`.
"""

from __future__ import annotations

import torch
from torch import Tensor

__all__ = ["broadcast_advantages", "check_token_tensors", "compute_dtype", "kept_mask", "masked_mean"]


def compute_dtype(dtype: torch.dtype) -> torch.dtype:
    """The dtype the losses compute in: ``dtype`` if it is float32 or wider, else float32 (bf16, float16)."""
    return torch.promote_types(dtype, torch.float32)


def check_token_tensors(response_mask: Tensor, **tensors: Tensor) -> Tensor:
    """Check that every tensor is [B, T] like ``response_mask``; return the mask as a float tensor of the
    compute dtype (float32 or wider, so that token counts are exact)."""
    if response_mask.dim() != 2:
        raise ValueError(f"response_mask must be 2-D [B, T], got shape {tuple(response_mask.shape)}")
    for name, value in tensors.items():
        if value.shape != response_mask.shape:
            raise ValueError(
                f"{name} must have the shape of response_mask {tuple(response_mask.shape)}, got {tuple(value.shape)}"
            )
    dtype = next(iter(tensors.values())).dtype if tensors else torch.float32
    return response_mask.to(compute_dtype(dtype))


def masked_mean(values: Tensor, mask: Tensor) -> Tensor:
    """Mean of ``values`` over the positions where ``mask`` is nonzero; 0 when the mask is empty.

    Args:
        values: float Tensor, any shape.
        mask: Tensor broadcastable to ``values`` (0/1 or bool).

    Returns:
        0-dim tensor.
    """
    values = values.to(compute_dtype(values.dtype))
    mask = mask.to(values.dtype)
    # clamp(min=1) instead of verl's +1e-8: same value for a non-empty mask, exactly 0 for an empty one.
    return (values * mask).sum() / mask.sum().clamp(min=1.0)


def kept_mask(response_mask: Tensor, keep: Tensor | None) -> Tensor:
    """The response mask of the rows a filter keeps (GFPO's ``Shaped.keep``): a dropped row loses every token.

    A dropped row then carries no loss term at all and its tokens leave every normaliser (token-mean counts
    only kept tokens; the seq-mean modes skip the empty row). A zero advantage would not do that: its tokens
    would still count in the token-mean's denominator and its KL and entropy terms would remain.

    Args:
        response_mask: Tensor [B, T], 1 / True on valid tokens.
        keep: BoolTensor [B], or None (every row kept: the mask is returned as it is).

    Returns:
        Tensor [B, T] of the mask's dtype.
    """
    if keep is None:
        return response_mask
    if keep.dtype != torch.bool or keep.dim() != 1 or keep.shape[0] != response_mask.shape[0]:
        raise ValueError(
            f"keep must be a BoolTensor [{response_mask.shape[0]}], got dtype {keep.dtype} and shape "
            f"{tuple(keep.shape)}"
        )
    return response_mask * keep.to(response_mask.device).unsqueeze(-1).to(response_mask.dtype)


def broadcast_advantages(advantages: Tensor, response_mask: Tensor) -> Tensor:
    """Advantages as [B, T]: a [B] tensor repeated over each row's tokens, a [B, T] one as it is."""
    if advantages.dim() == 1 and advantages.shape[0] == response_mask.shape[0]:
        return advantages.unsqueeze(-1).expand_as(response_mask)
    if advantages.shape != response_mask.shape:
        raise ValueError(
            f"advantages must be [B] or [B, T] = {tuple(response_mask.shape)}, got {tuple(advantages.shape)}"
        )
    return advantages
