"""GRPO-LEAD's length-dependent accuracy reward (arXiv 2504.09696; aeroplanepaper/GRPO-LEAD `main_ppo.py`,
`get_reweight_rewards`). Layer 1: pure tensor math and its config."""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.checks import require_range
from dynashape.core.groups import Groups, group_count, group_mean, group_var
from dynashape.methods._inputs import check_norm

__all__ = ["LengthZscoreConfig", "length_zscore_reward"]


def length_zscore_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    groups: Groups,
    *,
    alpha: float,
    wrong_reward: float,
    z_eps: float,
) -> torch.Tensor:
    """GRPO-LEAD's length-dependent accuracy reward (arXiv 2504.09696, "length-dependent accuracy reward"), per group q:

        z = (l - mu_q) / (sigma_q + z_eps),   mu_q, sigma_q over the group's CORRECT answers only
        r = exp(-alpha * z) if correct,  wrong_reward otherwise

    sigma_q is Bessel's std (n_c - 1), and 1 when the group has at most one correct answer, as the official
    code (`main_ppo.py`, `get_reweight_rewards`) sets it; a lone correct answer has z = 0 and gets 1. Since
    |z| <= (n_c - 1) / sqrt(n_c), the reward stays finite. Invariant to a common shift and to a common positive
    scaling of a group's lengths (when sigma_q >> z_eps).

    Args:
        correct: BoolTensor [N]. lengths: Tensor [N], tokens. groups: `Groups` of the batch.
    Returns:
        float64 Tensor [N].
    """
    length = lengths.to(torch.float64)
    is_correct = correct.bool()
    n_correct = groups.gather(group_count(groups, is_correct))
    mu = groups.gather(group_mean(length, groups, is_correct))
    var = groups.gather(group_var(length, groups, is_correct, unbiased=True))
    sigma = torch.where(n_correct > 1, var.sqrt(), 1.0)
    z = (length - mu) / (sigma + z_eps)
    return torch.where(is_correct, torch.exp(-alpha * z), wrong_reward)


@dataclass(frozen=True, kw_only=True)
class LengthZscoreConfig:
    """Defaults: the official GRPO-LEAD code (aeroplanepaper/GRPO-LEAD): alpha 0.05, wrong answers -1
    (`rewards.append(-1)`), epsilon 1e-6, GRPO normalisation with Bessel's std."""

    alpha: float = 0.05
    """Strength of the length scaling exp(-alpha * z)."""
    wrong_reward: float = -1.0
    """Fixed reward of a wrong answer (GRPO-LEAD's explicit penalty)."""
    z_eps: float = 1e-6
    """Added to the correct answers' length std in the z-score."""
    std: str = "unbiased"
    """Group normalisation: "unbiased" (GRPO, the official code) or "none" (centre only)."""
    eps: float = 1e-6
    """Added to the group std of the reward."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_range("wrong_reward", self.wrong_reward)
        require_range("z_eps", self.z_eps, 0.0, None, low_open=True)
        check_norm(self.std, self.eps)
