"""Length-based reward terms.

``overlong_penalty``: DAPO's soft overlong punishment (Yu et al., arXiv 2503.14476, Eq. 13), a reward channel
added to correctness (verl's ``dapo`` reward manager with ``overlong_buffer``).
``stop_properly_scale``: ProRL's stop-properly penalty, a multiplier on the score of a response that did not end
by itself (NVlabs/DLER ``verl-dler/verl/workers/reward_manager/dapo.py``, ``_apply_stop_properly_penalty``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence

import torch
from torch import Tensor

__all__ = ["OVERLONG_BUFFER", "OVERLONG_FACTOR", "STOP_PROPERLY_COEF", "overlong_penalty", "stop_properly_scale"]


#: DAPO's buffer L_cache and penalty factor (verl ``recipe/dapo`` scripts: ``overlong_buffer_len=$((1024 * 4))``,
#: ``overlong_penalty_factor=1.0``; DLER's script sets the same before turning the buffer off).
OVERLONG_BUFFER = 4096
OVERLONG_FACTOR = 1.0
#: The score multiplier of a truncated response (DLER's ``stop_properly_penalty.penalty_coef=0.1``, ProRL's).
STOP_PROPERLY_COEF = 0.1


def stop_properly_scale(truncated: Tensor, coef: float = STOP_PROPERLY_COEF) -> Tensor:
    """Per-rollout multiplier of the score: 1 for a response that stopped by itself, ``coef`` for a truncated one.

    The official code writes it as ``(1 - stop_properly) * coef + stop_properly`` over a float stop flag
    (NVlabs/DLER@ea7d4f7b, ``verl-dler/verl/workers/reward_manager/dapo.py``); this is the same number per row.

    Args:
        truncated: BoolTensor [N], True where the engine cut the response at its cap.
        coef: the truncated rows' multiplier, finite and >= 0 (official: 0.1).
    Returns: float64 Tensor [N] of 1 and ``coef``.
    """
    if isinstance(coef, bool) or not isinstance(coef, (int, float)) or not (math.isfinite(coef) and coef >= 0):
        raise ValueError(f"stop_properly coef must be a finite number >= 0, got {coef!r}")
    if truncated.dtype != torch.bool or truncated.dim() != 1:
        raise ValueError(f"truncated must be a 1-D BoolTensor [N], got {truncated.dtype} {tuple(truncated.shape)}")
    stop = (~truncated).to(torch.float64)
    return (1.0 - stop) * coef + stop


def overlong_penalty(
    lengths: Tensor | Sequence[int],
    max_len: int,
    buffer: int,
    factor: float = 1.0,
) -> Tensor:
    """DAPO soft overlong punishment (arXiv 2503.14476, Eq. 13), times ``factor``.

    With L_max = ``max_len`` and L_cache = ``buffer``, for a response of l tokens:
        R(l) = 0                                   if l <= L_max - L_cache
             = ((L_max - L_cache) - l) / L_cache   if L_max - L_cache < l <= L_max
             = -1                                  if l > L_max
    R is continuous and piecewise linear: 0 at the buffer's start, -1 at L_max, flat beyond. (verl's DAPO
    manager computes the middle line only, since its responses never exceed L_max; the flat -1 is the paper's.)

    Args:
        lengths: integer (or integral float) Tensor [N] of response lengths in tokens, each >= 0.
        max_len: L_max, the length at which the penalty reaches -1; > 0.
        buffer: L_cache, the width of the soft-penalty zone; 0 < buffer <= max_len.
        factor: scale of the penalty, finite, >= 0 (DAPO and MEDS: 1.0).

    Returns:
        float32 Tensor [N] on the device of ``lengths``, values in [-factor, 0].

    Example:
        >>> overlong_penalty(torch.tensor([10, 20, 25, 30, 40]), max_len=30, buffer=10)
        tensor([ 0.0000,  0.0000, -0.5000, -1.0000, -1.0000])
    """
    for name, value in (("max_len", max_len), ("buffer", buffer)):
        if isinstance(value, bool) or not isinstance(value, int):
            raise ValueError(f"{name} must be an int, got {value!r}")
    if max_len <= 0:
        raise ValueError(f"max_len must be > 0, got {max_len}")
    if not (0 < buffer <= max_len):
        raise ValueError(f"buffer must be in (0, max_len={max_len}], got {buffer}")
    if not (math.isfinite(factor) and factor >= 0):
        raise ValueError(f"factor must be a finite number >= 0, got {factor}")
    lens = lengths if isinstance(lengths, Tensor) else torch.as_tensor(lengths)
    if lens.dim() != 1:
        raise ValueError(f"lengths must be 1-D [N], got shape {tuple(lens.shape)}")
    if lens.dtype == torch.bool or lens.is_complex():
        raise ValueError(f"lengths must be an integer or float tensor, got dtype {lens.dtype}")
    lens = lens.to(torch.float64)  # exact for any realistic token count, and no int division surprises
    bad = (~torch.isfinite(lens) | (lens < 0)).nonzero()
    if bad.numel():
        i = int(bad[0])
        raise ValueError(f"lengths must be finite and >= 0, got {lens[i].item()} at index {i}")
    start = max_len - buffer
    # The middle line clamped to [-1, 0] is exactly the three pieces: <= 0 before the buffer is lifted to 0,
    # below -1 past L_max is held at -1.
    penalty = ((start - lens) / buffer).clamp(min=-1.0, max=0.0)
    return (factor * penalty).to(torch.float32)
