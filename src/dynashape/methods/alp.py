"""ALP, the adaptive length penalty scaled by the prompt's solve rate (Xiang et al., arXiv 2506.05256).
Layer 1: pure tensor math.

Paper, Eq. (2): r(y, q) = 1[answer(y) = y*] - (beta / N) * max(p_solved(q), 1/K) * |y|, where p_solved(q) is
the share of the K rollouts of q that are correct, N "a normalisation constant" and beta > 0 a global
coefficient. Easy prompts (high solve rate) pay more per token; an unsolved prompt still pays the floor 1/K. No
official code was found. beta / N is one parameter here (`beta`, penalty per token at solve rate 1).

Not settled (issue 49): the values of beta and N are given in the paper's experimental section, which could not
be read here (the search tools hold the arXiv text's opening and Eq. 2, not its setup). The default 1e-7 comes
from a secondary reading that takes 1e-7 as the per-token scale beta / N; a third party's notes read it the same
way; neither is the PDF. If the paper's beta = 1e-7 is divided by an N such as the 16k context, the per-token
scale is 1e-7 / N and the default is N times too strong. Check the PDF before relying on it. K is each group's
own size in the batch (groups may differ after filtering), the count the solve rate is measured on.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.checks import require_range
from dynashape.core.groups import Groups, group_mean
from dynashape.methods._inputs import as_correct, as_lengths, check_rows

__all__ = ["AlpConfig", "alp_reward"]


@dataclass(frozen=True, kw_only=True)
class AlpConfig:
    """ALP's penalty scale."""

    beta: float = 1e-7
    """Penalty per token at solve rate 1: the paper's beta / N folded into one number. >= 0. The default 1e-7 is
    a secondary reading, not checked against the paper's PDF (see the module docstring)."""

    def __post_init__(self) -> None:
        require_range("beta", self.beta, 0.0, None)


def alp_reward(correct: torch.Tensor, lengths: torch.Tensor, groups: Groups, *, beta: float = 1e-7) -> torch.Tensor:
    """ALP reward r = 1[correct] - beta * |y| * max(p_solved, 1/K) (ALP Eq. 2, beta standing for beta / N).

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N]. groups: the batch's Groups (K = the
            size of each rollout's group, p_solved its share of correct rollouts).
        beta: penalty per token at solve rate 1.
    Returns: float64 Tensor [N].
    """
    check_rows(correct=correct, lengths=lengths, group_index=groups.index)
    c, length = as_correct(correct), as_lengths(lengths)
    solve_rate = group_mean(c, groups)
    scale = torch.maximum(solve_rate, 1.0 / groups.counts.to(solve_rate.dtype))
    return c - beta * length * groups.gather(scale)
