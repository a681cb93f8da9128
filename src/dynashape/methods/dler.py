"""DLER: truncation-capped correctness with batch-whitened, group-centred advantages (Liu et al., arXiv
2510.15110). Layer 1: pure tensor math.

Official code: NVlabs/DLER, commit ea7d4f7b: `dler_slurm.sh` (adv_estimator=reinforce_plus_plus_baseline,
max_response_length=4000, n = 16, reward_manager=dapo with the overlong buffer off) and
`verl-dler/verl/trainer/ppo/core_algos.py` (`compute_reinforce_plus_plus_baseline_outcome_advantage`), with
`verl-dler/verl/utils/torch_functional.py` (`masked_whiten`).

The reward, as the official run computes it (NVlabs/DLER@ea7d4f7b, the reward manager
`verl-dler/verl/workers/reward_manager/dapo.py` selected by `reward_model.reward_manager=dapo`, with
`stop_properly_penalty.penalty_coef=0.1` in `dler_slurm.sh` and the overlong buffer off):
- The truncation penalty is the engine's cap: vLLM stops a response at max_response_length = L tokens, and the
  reward manager multiplies the score of a response whose finish reason is not "stop" by 0.1
  (`_apply_stop_properly_penalty`). A cut response judged correct scores 0.1, not 1 and not 0. Here: the
  `stop_properly_coef` (default 0.1) on ``truncated`` rows; None drops it (the paper's 0/1 truncation reward,
  which needs no truncation input).
- The code compares no length with L: no response is longer than the cap, and one that ends with EOS at exactly
  L tokens stopped properly and keeps its full score. The cap here is therefore inclusive (l <= L scores, l > L
  scores 0, which only a longer engine cap can produce: the paper's truncation penalty).
- The multiplier is not affine-invariant: centring and whitening do not remove it, so the advantages differ
  from the 0/1 reward's (hand-worked in tests/methods/test_dler.py).
- The official run adds 0.1 to the advantage of every response whose score (before the stop-properly
  multiplier, `token_level_scores`) is at least 1 - 1e-5 (`actor.correct_sample_advantage_boost_value=0.1` in
  `dler_slurm.sh`, `boost_high_score_advantages` in `verl-dler/verl/workers/actor/dp_actor.py`, applied to the
  whitened advantages before the update). Here `correct_boost` (default 0.1; 0 for the paper's advantages).
- The official script also turns on DAPO's group filter (`algorithm.filter_groups.enable=True`, metric
  `seq_reward`): groups whose rewards are all equal are dropped and resampled. That is the trainer's dynamic
  sampling (the reference trainer's `dynamic_sampling`), not part of the shaper.
- The score is the verifier's verdict as 0/1 here; the official scorer is picked by the data source
  (`default_compute_score`), which for math_dapo data pays +1 / -1. Under a +1 / -1 score a cut wrong answer
  gets -0.1, above an uncut wrong answer's -1, a difference the 0/1 verdict does not have.

Conventions of the advantage code, kept here:
- A group of one rollout is not centred: its mean is taken as 0, so its raw reward goes into the whitening
  (verl's `id2mean[idx] = 0.0` for a single score), where the library's GRPO would give 0.
- Whitening is over response tokens (each rollout counted l_i times), variance with Bessel's correction over
  tokens, eps = 1e-8 inside the square root, mean shifted out. `whiten="sequence"` counts each rollout once.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_mean, whiten
from dynashape.methods._inputs import as_correct, as_lengths, as_rewards, capped_correct, check_rows, require_int

__all__ = ["BOOST_THRESHOLD", "DlerConfig", "dler_advantages", "dler_boost", "dler_reward"]

#: The score a response needs for the official advantage boost (`correct_sample_advantage_boost_threshold`).
BOOST_THRESHOLD = 1.0

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
    stop_properly_coef: float | None = 0.1
    """The score multiplier of a truncated response (``batch.truncated``), applied after the cap; official 0.1
    (`stop_properly_penalty.penalty_coef`). None: no multiplier, the paper's reward (no truncation input read)."""

    correct_boost: float = 0.1
    """Added to the advantage of a response scoring at least 1 before the multiplier (the official
    `correct_sample_advantage_boost_value=0.1`); 0: none, the paper's advantages. >= 0."""

    def __post_init__(self) -> None:
        require_int("max_length", self.max_length, 1)
        require_range("correct_boost", self.correct_boost, 0.0, None)
        if self.stop_properly_coef is not None:
            require_range("stop_properly_coef", self.stop_properly_coef, 0.0, None)
        require_choice("whiten", self.whiten, ("token", "sequence"))
        require_range("eps", self.eps, 0.0, None, low_open=True)


def dler_reward(correct: torch.Tensor, lengths: torch.Tensor, *, max_length: float = 4000) -> torch.Tensor:
    """DLER's capped score r = 1[correct] * 1[length <= L] (DLER Sec. 3, the truncation penalty), before the
    stop-properly multiplier (`dynashape.rewards.stop_properly_scale`, applied by the `dler` shaper).

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


def dler_boost(advantages: torch.Tensor, scores: torch.Tensor, *, value: float = 0.1) -> torch.Tensor:
    """The official run's advantage boost: A + value where score >= 1 - 1e-5 (NVlabs/DLER@ea7d4f7b,
    `verl-dler/verl/workers/actor/dp_actor.py`, `boost_high_score_advantages`, threshold 1.0, its tolerance).

    Args: advantages: float Tensor [N]. scores: float Tensor [N], the score before the stop-properly multiplier.
        value: the boost (official 0.1), >= 0.
    Returns: float64 Tensor [N].
    """
    require_range("value", value, 0.0, None)
    check_rows(advantages=advantages, scores=scores)
    a, s = as_rewards("advantages", advantages), as_rewards("scores", scores)
    return a + value * (s >= BOOST_THRESHOLD - 1e-5).to(a.dtype)
