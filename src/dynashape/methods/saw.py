"""SAW, stage-aware dynamic weighting of reward channels by their coefficient of variation (arXiv 2606.07705).
Layer 1: pure tensor math (the weights are recomputed from every batch; there is no state).

CV_k = std_B(r_k) / (|mean_B(r_k)| + eps) over the whole batch; w_k = K * CV_k / (sum_j CV_j + eps), detached.
mode 'grpo' (the code's `grpo-h`): GRPO normalisation of sum_k w_k r_k. mode 'gdpo' (`gdpo-h`): sum_k w_k A_k with
A_k the GRPO normalisation of channel k alone, then batch-whitened.

Official code: Zhaolutuan/SAW, commit 119951f6 (its parent 2da50f09 holds the same code),
`verl/trainer/ppo/ray_trainer.py` (`compute_advantage`, branches 'grpo-h' and 'gdpo-h'), with the scores of
`rlla.py` (ToolRL's reward: a graded correctness in [-3, 3] and a format score). Conventions kept from it:
- Channel 0 is the graded correctness when the batch carries it (`SawConfig.correctness_column`, a column of
  ``batch.rewards`` with values in [-3, 3], as ToolRL's): the +3 shift below makes it non-negative before its CV.
  Without it, channel 0 is the 0/1 verdict (the documented fallback), whose +3 shift lowers its CV: on one batch
  the weights can move far (issue 49: correctness [3, -1.5, .5, -3], format [1, 1, 0, 1] weigh (1.17, .83)
  graded and (.40, 1.60) as 0/1 verdicts [1, 0, 1, 0]).
- std is torch's default, with Bessel's correction over the N rollouts (not token-weighted).
- Channel 0 (correctness) is shifted by +3 before its CV only (`offset_corr = seq_scores_corr + 3.0`); the
  rewards that are combined stay unshifted. Other channels are not shifted.
- eps = 1e-8 sits beside |mean| and beside the sum of CVs. When every CV is 0 (a constant batch) every weight
  is 0 / eps = 0 and so is every advantage. With one rollout the code's std would be NaN; here it is 0, giving
  weights 0.
- 'gdpo' whitens with verl's masked_whiten (token-weighted, eps 1e-8 in the root): `lengths` gives that; None
  counts each rollout once.
The per-channel and combined GRPO normalisation is the library's (`group_normalize`, unbiased std, eps 1e-6
beside the std, 0 for a group of one); the code's older verl GRPO instead gives a group of one r / (1 + eps).
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups, group_normalize, whiten
from dynashape.methods._inputs import as_lengths, as_rewards, check_rows, require_int

__all__ = ["GRADED_RANGE", "SAW_MODES", "SawConfig", "SawResult", "graded_correctness", "saw_advantages", "saw_weights"]

#: ToolRL's correctness score range (`rlla.py`), which the official +3 shift makes non-negative.
GRADED_RANGE: tuple[float, float] = (-3.0, 3.0)

SawMode = Literal["grpo", "gdpo"]
SAW_MODES: tuple[str, ...] = ("grpo", "gdpo")


@dataclass(frozen=True, kw_only=True)
class SawConfig:
    """SAW's weighting and normalisation."""

    mode: SawMode = "grpo"
    """'grpo': GRPO on the weighted sum of channels; 'gdpo': weighted sum of per-channel GRPO advantages, then
    batch whitening."""
    eps: float = 1e-8
    """The CV's regulariser beside |mean| and beside the sum of CVs (code: 1e-8). > 0."""
    correctness_offset: float = 3.0
    """Added to channel 0 before its CV is measured (code: +3). Any finite number."""
    grpo_eps: float = 1e-6
    """eps beside the group std in the GRPO normalisations. > 0."""
    whiten_eps: float = 1e-8
    """eps inside the square root of the 'gdpo' batch whitening. > 0."""
    correctness_column: int | None = None
    """The column of ``batch.rewards`` holding a graded correctness in [-3, 3] (ToolRL's, the official channel 0);
    the other columns are the further channels. None: channel 0 is the 0/1 verdict. >= 0."""

    def __post_init__(self) -> None:
        if self.correctness_column is not None:
            require_int("correctness_column", self.correctness_column, 0)
        require_choice("mode", self.mode, SAW_MODES)
        require_range("eps", self.eps, 0.0, None, low_open=True)
        require_range("correctness_offset", self.correctness_offset)
        require_range("grpo_eps", self.grpo_eps, 0.0, None, low_open=True)
        require_range("whiten_eps", self.whiten_eps, 0.0, None, low_open=True)


@dataclass(frozen=True)
class SawResult:
    """SAW's outputs: advantages [N], weights [K] and cv [K], all float64."""

    advantages: torch.Tensor
    weights: torch.Tensor
    cv: torch.Tensor

    @property
    def metrics(self) -> dict[str, float]:
        out = {f"saw/weight_{k}": float(w) for k, w in enumerate(self.weights.tolist())}
        out.update({f"saw/cv_{k}": float(c) for k, c in enumerate(self.cv.tolist())})
        return out


def graded_correctness(rewards: torch.Tensor, column: int) -> tuple[torch.Tensor, torch.Tensor]:
    """Split ``rewards`` [N, K] into the graded correctness column [N] (values in [-3, 3], else ValueError naming
    the row) and the other columns [N, K - 1] (float64)."""
    r = _as_channels(rewards)
    if column >= r.shape[1]:
        raise ValueError(f"correctness_column={column} but rewards has {r.shape[1]} columns")
    graded = r[:, column]
    low, high = GRADED_RANGE
    outside = (graded < low) | (graded > high)
    if bool(outside.any()):
        i = int(torch.nonzero(outside)[0, 0])
        raise ValueError(f"rewards[{i}, {column}]={graded[i].item()} is a graded correctness outside [-3, 3]")
    others = torch.cat([r[:, :column], r[:, column + 1 :]], dim=1)
    return graded, others


def _as_channels(rewards: torch.Tensor) -> torch.Tensor:
    if rewards.dim() != 2 or rewards.shape[1] < 1:
        raise ValueError(f"rewards must be [N, K] with K >= 1 channels, got shape {tuple(rewards.shape)}")
    return as_rewards("rewards", rewards)


def saw_weights(
    rewards: torch.Tensor, *, eps: float = 1e-8, correctness_offset: float = 3.0
) -> tuple[torch.Tensor, torch.Tensor]:
    """SAW's channel weights w_k = K * CV_k / (sum_j CV_j + eps), CV_k = std(r_k) / (|mean(r_k)| + eps).

    The eps in the sum is the official code's (``total_cv = cv_c + cv_f + eps``, Zhaolutuan/SAW ray_trainer.py);
    the paper's formula leaves it out. It keeps channels that are all constant at weight 0
    instead of 0/0; otherwise it moves a weight by about 1e-8 (an independent check outside the project found
    the weights equal to 1e-15 with it, 8e-8 apart without it).

    Args: rewards: float Tensor [N, K], channel 0 being correctness (shifted by correctness_offset for its CV).
    Returns: (weights [K], cv [K]), float64, detached.
    """
    r = _as_channels(rewards).detach()
    n, k = r.shape
    shift = torch.zeros(k, dtype=r.dtype, device=r.device)
    shift[0] = correctness_offset
    shifted = r + shift
    std = shifted.std(dim=0) if n > 1 else torch.zeros(k, dtype=r.dtype, device=r.device)
    cv = std / (shifted.mean(dim=0).abs() + eps)
    return k * cv / (cv.sum() + eps), cv


def saw_advantages(
    rewards: torch.Tensor,
    groups: Groups,
    lengths: torch.Tensor | None = None,
    *,
    mode: SawMode = "grpo",
    eps: float = 1e-8,
    correctness_offset: float = 3.0,
    grpo_eps: float = 1e-6,
    whiten_eps: float = 1e-8,
) -> SawResult:
    """SAW advantages (grpo-h / gdpo-h of the official code); see the module docstring.

    Args:
        rewards: float Tensor [N, K] of reward channels, channel 0 correctness. groups: the batch's Groups.
        lengths: LongTensor [N] for token-weighted whitening in 'gdpo', or None (each rollout once).
    Returns: SawResult with advantages [N].
    """
    require_choice("mode", mode, SAW_MODES)
    r = _as_channels(rewards)
    check_rows(rewards=r, lengths=lengths, group_index=groups.index)
    weights, cv = saw_weights(r, eps=eps, correctness_offset=correctness_offset)
    if mode == "grpo":
        advantages = group_normalize(r @ weights, groups, eps=grpo_eps)
    else:
        per_channel = group_normalize(r, groups, eps=grpo_eps)
        token_weights = None if lengths is None else as_lengths(lengths)
        advantages = whiten(per_channel @ weights, token_weights, eps=whiten_eps)
    return SawResult(advantages=advantages, weights=weights, cv=cv)
