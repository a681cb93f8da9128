"""Entropy-based advantage shaping (Cheng et al., "Reasoning with Exploration: An Entropy Perspective",
arXiv 2506.14758), the MEDS paper's baseline: a bonus from the policy's token entropy, capped by the advantage.

Layer 1: a pure function, tensors in, a named result out. Precision as the losses': float32 or wider.
"""

from __future__ import annotations

import math
from typing import NamedTuple

import torch
from torch import Tensor

from dynashape.losses.tokens import broadcast_advantages, compute_dtype

__all__ = ["EntropyAdvantage", "entropy_advantage"]


class EntropyAdvantage(NamedTuple):
    """Result of :func:`entropy_advantage`."""

    advantages: Tensor
    """[B, T]: A + bonus."""
    bonus: Tensor
    """[B, T]: min(alpha * H.detach(), |A| / kappa) >= 0."""
    capped: Tensor
    """[B, T] bool: True where the |A| / kappa cap is the smaller term."""


def entropy_advantage(
    advantages: Tensor,
    entropy: Tensor,
    *,
    alpha: float = 0.4,
    kappa: float = 2.0,
) -> EntropyAdvantage:
    """Entropy-based advantage shaping (Cheng et al., "Reasoning with Exploration: An Entropy Perspective",
    arXiv 2506.14758; the MEDS paper's baseline): A_t <- A_t + min(alpha * H_t.detach(), |A_t| / kappa).

    The bonus is a constant for the gradient (entropy detached) and never exceeds |A| / kappa, so it can never
    flip the sign of a nonzero advantage (kappa > 1) and adds nothing where A = 0.

    Args:
        advantages: float Tensor [B] (broadcast over tokens) or [B, T].
        entropy: float Tensor [B, T], per-token entropy of the policy.
        alpha: entropy scale, >= 0 (paper: 0.4).
        kappa: cap divisor, > 0 (paper: 2).

    Returns:
        :class:`EntropyAdvantage`.
    """
    if not (alpha >= 0.0 and math.isfinite(alpha)):
        raise ValueError(f"alpha must be a finite number >= 0, got {alpha}")
    if not (kappa > 0.0 and math.isfinite(kappa)):
        raise ValueError(f"kappa must be a finite number > 0, got {kappa}")
    if entropy.dim() != 2:
        raise ValueError(f"entropy must be 2-D [B, T], got shape {tuple(entropy.shape)}")
    dtype = compute_dtype(entropy.dtype)
    adv = broadcast_advantages(advantages, entropy).to(dtype)
    scaled_entropy = alpha * entropy.detach().to(dtype)
    cap = adv.abs() / kappa
    bonus = torch.minimum(scaled_entropy, cap)
    return EntropyAdvantage(advantages=adv + bonus, bonus=bonus, capped=cap < scaled_entropy)
