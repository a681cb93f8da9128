"""L1 / LCPO's budget rewards (Aggarwal and Welleck, arXiv 2503.04697). Layer 1: pure tensor math.

The prompt asks for a budget n_gold ("Think for n tokens." / "Think for maximum n tokens."); the reward scores
the response's correctness and how its length n_y meets the budget. Official code: cmu-l3/l1, `math_reward.py`
(`get_delta_score_linear`, `get_delta_score_linear_both`, `math_reward_fn`), commit 93dd3301; training scripts
`scripts/train/run_l1_exact.sh` (alpha = 0.0003, linear_reward=True, multiplier_reward=False) and
`scripts/train/run_l1_max.sh`. The code marks a Max prompt by a negative budget; here the budget is always the
positive token count and the form is chosen by the function.

Where code and paper differ (LCPO-Max):
- paper: r = 1[correct] * clip(alpha * (n_gold - n_y) + delta, 0, 1).
- code: (sc + 1) / 2 with sc = clip(alpha * (n_gold - n_y), -1, 1), i.e. clip(0.5 + (alpha / 2) * (n_gold - n_y),
  0, 1): half the paper's slope, the offset fixed at 0.5. `math_reward_fn` then multiplies it by correctness
  (`multiplier_reward=True`) or adds it to correctness (`linear_reward=True`, the flag the Exact script sets).
  The published Max script sets neither flag, so with the YAML defaults it trains on correctness alone.
  The default here is the code's multiplied form (form="code"), the form the paper's equation describes.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dynashape.core.checks import require_choice, require_range
from dynashape.methods._inputs import as_correct, as_lengths, check_rows

__all__ = ["L1_MAX_FORMS", "L1ExactConfig", "L1MaxConfig", "l1_exact_reward", "l1_max_reward"]

L1MaxForm = Literal["code", "code_additive", "paper"]
L1_MAX_FORMS: tuple[str, ...] = ("code", "code_additive", "paper")


@dataclass(frozen=True, kw_only=True)
class L1ExactConfig:
    """LCPO-Exact's hyperparameters."""

    alpha: float = 3e-4
    """Reward lost per token of distance from the budget (run_l1_exact.sh: 0.0003). >= 0."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)


@dataclass(frozen=True, kw_only=True)
class L1MaxConfig:
    """LCPO-Max's hyperparameters."""

    alpha: float = 3e-4
    """Slope of the budget score per token under the budget (the paper's alpha; the code's slope is alpha / 2).
    >= 0."""
    delta: float = 0.5
    """Offset of the budget score at length = budget, in [0, 1]. The code's value is 0.5."""
    form: L1MaxForm = "code"
    """'code': correct * clip(delta + alpha/2 * (budget - length), 0, 1) (get_delta_score_linear_both with
    multiplier_reward); 'code_additive': correct + clip(...) (the same score with linear_reward); 'paper':
    correct * clip(delta + alpha * (budget - length), 0, 1)."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_range("delta", self.delta, 0.0, 1.0)
        require_choice("form", self.form, L1_MAX_FORMS)


def _budget_inputs(correct: torch.Tensor, lengths: torch.Tensor, budgets: torch.Tensor):
    check_rows(correct=correct, lengths=lengths, budgets=budgets)
    return as_correct(correct), as_lengths(lengths), as_lengths(budgets, "budgets")


def l1_exact_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    budgets: torch.Tensor,
    *,
    alpha: float = 3e-4,
) -> torch.Tensor:
    """LCPO-Exact reward r = 1[correct] - alpha * |n_gold - n_y| (L1 Eq. 1; code: correctness +
    `get_delta_score_linear`, whose 1 - z - 1 is -alpha |n_gold - n_y|). Code and paper agree.

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N], response tokens.
        budgets: LongTensor [N], the budget n_gold the rollout's prompt asked for (>= 0).
        alpha: penalty per token of distance.
    Returns: float64 Tensor [N], unbounded below (a wrong answer far from its budget goes negative).
    """
    c, n_y, n_gold = _budget_inputs(correct, lengths, budgets)
    return c - alpha * (n_gold - n_y).abs()


def l1_max_reward(
    correct: torch.Tensor,
    lengths: torch.Tensor,
    budgets: torch.Tensor,
    *,
    alpha: float = 3e-4,
    delta: float = 0.5,
    form: L1MaxForm = "code",
) -> torch.Tensor:
    """LCPO-Max reward (L1 Eq. 2): a budget score s in [0, 1] that is delta at the budget and rises for shorter
    responses, combined with correctness. See the module docstring for where code and paper differ.

    form='code': r = 1[correct] * clip(delta + (alpha / 2) (n_gold - n_y), 0, 1).
    form='code_additive': r = 1[correct] + clip(delta + (alpha / 2) (n_gold - n_y), 0, 1).
    form='paper': r = 1[correct] * clip(delta + alpha (n_gold - n_y), 0, 1).

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N]. budgets: LongTensor [N] (>= 0).
    Returns: float64 Tensor [N].
    """
    require_choice("form", form, L1_MAX_FORMS)
    c, n_y, n_gold = _budget_inputs(correct, lengths, budgets)
    slope = alpha if form == "paper" else alpha / 2.0
    score = (delta + slope * (n_gold - n_y)).clamp(0.0, 1.0)
    return c + score if form == "code_additive" else c * score
