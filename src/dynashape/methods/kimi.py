"""Kimi k1.5's length reward (arXiv 2501.12599, "Length Penalty"). Layer 1: pure tensor math and its config."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.checks import require_range
from dynashape.core.groups import Groups, group_max, group_min
from dynashape.methods._inputs import check_norm

__all__ = ["KimiLengthConfig", "kimi_length_reward"]


def kimi_length_reward(correct: torch.Tensor, lengths: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Kimi k1.5 length reward (arXiv 2501.12599, "Length Penalty"), per group q:

        lambda = 0.5 - (l - min_q l) / (max_q l - min_q l)
        len_reward = lambda if correct else min(0, lambda);   0 for the whole group when max_q l = min_q l

    lambda runs from 0.5 (the group's shortest) to -0.5 (its longest); a wrong answer is never rewarded for
    being short, only punished for being long. Invariant to a common shift of a group's lengths, and to a
    common positive scaling.

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N] in [-0.5, 0.5].
    """
    length = lengths.to(torch.float64)
    lo = groups.gather(group_min(length, groups))
    span = groups.gather(group_max(length, groups)) - lo
    # span > 0 only where lengths differ; the clamp keeps the unused branch of where() finite
    lam = torch.where(span > 0, 0.5 - (length - lo) / span.clamp_min(1e-300), 0.0)
    return torch.where(correct.bool(), lam, lam.clamp_max(0.0))


@dataclass(frozen=True, kw_only=True)
class KimiLengthConfig:
    """Kimi k1.5 gives no value for the weight; 1.0 is what open-r1's `len_reward` gets beside its accuracy
    reward under TRL's default `reward_weights`."""

    weight: float = 1.0
    """Weight of the length reward in r = correct + weight * len_reward (Kimi ramps it up during a warm-up;
    schedule it from outside if wanted)."""
    std: str = "unbiased"
    """"unbiased": GRPO normalisation (open-r1 under TRL's GRPOTrainer); "none": centre only, closer to Kimi's
    own mean-baseline policy gradient."""
    eps: float = 1e-6
    """Added to the group std."""

    def __post_init__(self) -> None:
        require_range("weight", self.weight, 0.0, None)
        check_norm(self.std, self.eps)
