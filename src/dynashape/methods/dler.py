"""DLER: truncation-capped correctness with batch-whitened, group-centred advantages (Liu et al., arXiv
2510.15110). Layer 1: pure tensor math.

Official code: NVlabs/DLER, commit ea7d4f7b: `dler_slurm.sh` (adv_estimator=reinforce_plus_plus_baseline,
max_response_length=4000, n = 16, reward_manager=dapo with the overlong buffer off) and
`verl-dler/verl/trainer/ppo/core_algos.py` (`compute_reinforce_plus_plus_baseline_outcome_advantage`), with
`verl-dler/verl/utils/torch_functional.py` (`masked_whiten`).

Conventions of that code, kept here:
- A group of one rollout is not centred: its mean is taken as 0, so its raw reward goes into the whitening
  (verl's `id2mean[idx] = 0.0` for a single score), where the library's GRPO would give 0.
- Whitening is over response tokens (each rollout counted l_i times), variance with Bessel's correction over
  tokens, eps = 1e-8 inside the square root, mean shifted out. `whiten="sequence"` counts each rollout once.
- The reward is the truncation penalty: a response cut at 4000 tokens has no answer and scores as wrong. The
  code's scorer (math_dapo) pays +1 / -1, not 1 / 0; group centring and whitening remove that affine change
  except through eps, so the 0/1 reward here gives the same advantages to within eps.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_mean, whiten
from dynashape.methods._inputs import as_correct, as_lengths, as_rewards, capped_correct, check_rows, require_int

__all__ = ["DlerConfig", "dler_advantages", "dler_reward"]

WhitenKind = Literal["token", "sequence"]


@dataclass(frozen=True, kw_only=True)
class DlerConfig:
    """DLER's cap and whitening."""

    max_length: int = 4000
    """The truncation cap L in tokens (dler_slurm.sh: max_response_length=4000). >= 1."""
    whiten: WhitenKind = "token"
    """'token': every response token counts once (verl's masked_whiten); 'sequence': every rollout once."""
    eps: float = 1e-8
    """Added to the variance inside the square root (masked_whiten). > 0."""

    def __post_init__(self) -> None:
        require_int("max_length", self.max_length, 1)
        require_choice("whiten", self.whiten, ("token", "sequence"))
        require_range("eps", self.eps, 0.0, None, low_open=True)


def dler_reward(correct: torch.Tensor, lengths: torch.Tensor, *, max_length: float = 4000) -> torch.Tensor:
    """DLER reward r = 1[correct] * 1[length <= L] (DLER Sec. 3, the truncation penalty).

    Args: correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N]. max_length: L (inclusive).
    Returns: float64 Tensor [N] of 0/1.
    """
    require_range("max_length", max_length, 0.0, None, low_open=True)
    check_rows(correct=correct, lengths=lengths)
    return capped_correct(as_correct(correct), as_lengths(lengths), max_length)


def dler_advantages(
    rewards: torch.Tensor,
    groups: Groups,
    lengths: torch.Tensor | None = None,
    *,
    eps: float = 1e-8,
) -> torch.Tensor:
    """REINFORCE++-baseline advantages: A = whiten(r - mean_q r) over the batch (verl
    `compute_reinforce_plus_plus_baseline_outcome_advantage`; DLER Eq. 3).

    mean_q is the group's mean, or 0 for a group of one rollout (the code's convention). The whitening weights
    each rollout by its token count when `lengths` is given (verl's masked_whiten over the response mask; a
    rollout of 0 tokens gets 0), and each rollout once when it is None.

    Args:
        rewards: float Tensor [N]. groups: the batch's Groups. lengths: LongTensor [N] or None. eps: inside
            the square root.
    Returns: float64 Tensor [N].
    """
    check_rows(rewards=rewards, lengths=lengths, group_index=groups.index)
    r = as_rewards("rewards", rewards)
    mean = torch.where(groups.counts > 1, group_mean(r, groups), torch.zeros((), dtype=r.dtype, device=r.device))
    centred = r - groups.gather(mean)
    weights = None if lengths is None else as_lengths(lengths)
    return whiten(centred, weights, eps=eps)
