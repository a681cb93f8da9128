"""The difficulty-aware linear length penalty of prime-rl (`LinearLengthPenaltyConfig`, PR #2702). Layer 1: pure
tensor math and its config."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_max, group_mean
from dynashape.methods._inputs import check_norm

__all__ = ["PassRateLinearConfig", "pass_rate_linear_penalty"]


def pass_rate_linear_penalty(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    coef: float,
    budget: float,
    only_correct: bool = False,
    scale: str = "budget",
) -> torch.Tensor:
    """Difficulty-aware linear length penalty (prime-rl's `LinearLengthPenaltyConfig`, PR #2702):

        penalty = coef * p_q * l / budget,     p_q = the group's mean correctness (its pass rate)

    times correct when `only_correct` (prime-rl's `gate_by_correctness`). An easy prompt (p_q near 1) is pushed
    hard towards short answers, a hard one barely, an unsolved one (p_q = 0) not at all. scale="group_max"
    divides by the group's longest length (at least 1) instead of the budget, as prime-rl's later
    `GRPOAlgorithm` (PR #2901) does.

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N] >= 0, the amount to subtract from the reward.
    """
    length = lengths.to(torch.float64)
    c = correct.to(torch.float64)
    pass_rate = groups.gather(group_mean(c, groups))
    denom = groups.gather(group_max(length, groups)).clamp_min(1.0) if scale == "group_max" else budget
    penalty = coef * pass_rate * (length / denom)
    return penalty * c if only_correct else penalty


@dataclass(frozen=True, kw_only=True)
class PassRateLinearConfig:
    """Defaults: prime-rl's (coef 0.25, not gated, mean baseline without std); budget = its orchestrator's
    default `seq_len` of 2048, the divisor of that version."""

    coef: float = 0.25
    """Penalty at l = budget for a prompt that is always solved."""
    budget: float = 2048
    """Tokens that l is divided by (scale="budget")."""
    only_correct: bool = False
    """Penalise correct answers only (prime-rl's gate_by_correctness)."""
    scale: str = "budget"
    """"budget": l / budget (the issue, prime-rl PR #2702); "group_max": l / max_q l (prime-rl PR #2901)."""
    std: str = "none"
    """"none": reward minus the group mean (prime-rl's GRPO, Dr. GRPO style); "unbiased": GRPO normalisation."""
    eps: float = 1e-6
    """Added to the group std when std="unbiased"."""

    def __post_init__(self) -> None:
        require_range("coef", self.coef, 0.0, None)
        require_range("budget", self.budget, 0.0, None, low_open=True)
        if not isinstance(self.only_correct, bool):
            raise ValueError(f"only_correct={self.only_correct!r} must be a bool")
        require_choice("scale", self.scale, ("budget", "group_max"))
        check_norm(self.std, self.eps)
