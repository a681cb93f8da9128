"""LEAD's per-prompt target length and efficiency reward (arXiv 2605.09806; docs/algorithms.md "LEAD").

Layer 1: pure tensor math.

Paper: LEAD, arXiv 2605.09806, Eq. (8) (target length L*_q) and Eq. (9) (efficiency reward r_l); conventions
of the official code (CrazyMint/LEAD, `compute_advantage`, branch `lead`).
"""

from __future__ import annotations

from typing import Literal

import torch

from dynashape.core.groups import Groups, group_count, group_mean, group_median, group_min

__all__ = ["EFFICIENCY_MODES", "TARGET_MODES", "efficiency_reward", "target_lengths"]

TargetMode = Literal["mean_correct", "min_correct", "median_correct", "mean_all"]
EfficiencyMode = Literal["symmetric", "upper_only"]
TARGET_MODES: tuple[str, ...] = ("mean_correct", "min_correct", "median_correct", "mean_all")
EFFICIENCY_MODES: tuple[str, ...] = ("symmetric", "upper_only")


def target_lengths(
    lengths: torch.Tensor,
    correct: torch.Tensor,
    groups: Groups,
    *,
    mode: TargetMode = "mean_correct",
    l_min: float,
    b_max: float,
) -> torch.Tensor:
    """Per-prompt target length L*_q (LEAD Eq. 8). Returns float64 Tensor [G].

    mean/min/median_correct: clip(aggregate of the correct rollouts' lengths, l_min, b_max) when the prompt has
    at least one correct rollout, else the sentinel b_max (no compression pressure on an unsolved prompt; b_max is
    also the upper clamp). mean_all: clip(mean over all rollouts, l_min, b_max), never the sentinel.
    The median of an even count is the mean of the two middle values.

    Args:
        lengths: LongTensor [N], response tokens. correct: BoolTensor [N]. groups: the batch's Groups.
    """
    lengths = lengths.to(torch.float64)
    if mode == "mean_all":
        return group_mean(lengths, groups).clamp(l_min, b_max)
    aggregate = {"mean_correct": group_mean, "min_correct": group_min, "median_correct": group_median}[mode]
    raw = aggregate(lengths, groups, correct).clamp(l_min, b_max)
    solved = group_count(groups, correct) > 0
    return torch.where(solved, raw, torch.full_like(raw, float(b_max)))


def efficiency_reward(
    lengths: torch.Tensor,
    targets: torch.Tensor,
    *,
    mode: EfficiencyMode = "symmetric",
) -> torch.Tensor:
    """Efficiency reward r_l of every rollout, correct or not (LEAD Eq. 9). Returns float64 Tensor [N].

    symmetric: max(-1, 1 - |l - L*| / L*): 1 at the target, falling linearly both ways, -1 at l = 0 or l >= 3 L*.
    upper_only: max(-1, min(0, 1 - l / L*)): 0 up to the target, only over-length is penalised.
    Lengths above b_max are legal and follow the same formula.

    Args:
        lengths: LongTensor [N]. targets: the rollout's prompt target L*_q broadcast to [N] (> 0).
    """
    length = lengths.to(torch.float64)
    if mode == "symmetric":
        return (1.0 - (length - targets).abs() / targets).clamp_min(-1.0)
    return (1.0 - length / targets).clamp(-1.0, 0.0)
