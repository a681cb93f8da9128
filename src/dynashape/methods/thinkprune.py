"""ThinkPrune's length-capped correctness and its schedule of caps (Hou et al., arXiv 2504.01296).

Layer 1: `thinkprune_reward`, r = 1[correct and length <= L], then GRPO.
Layer 2: `CapSchedule`, the cap L at each training step (4000 -> 3000 -> 2000 in the paper), whose state is the
number of steps taken.

Official code: UCSB-NLP-Chang/ThinkPrune, commit 0f7449b1. There is no reward function of its own: the cap is verl's
`data.max_response_length` (`local_scripts/multi_node_run_4k.sh`, LENGTH=4000;
`local_scripts/multi_node_run_3k_from4k.sh`, LENGTH=3000 from the 4000 run's step-180 checkpoint), so a
response longer than L is cut at L, has no parsed answer and scores 0. The paper runs one RL job per round; the
schedule here runs the rounds inside one run. With a true cut no length exceeds L; the reward also accepts
uncut lengths and scores those over L as 0, the same outcome.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.checks import require_range
from dynashape.methods._inputs import as_correct, as_lengths, capped_correct, check_rows, require_int

__all__ = ["CapSchedule", "ThinkPruneConfig", "thinkprune_reward"]


@dataclass(frozen=True, kw_only=True)
class ThinkPruneConfig:
    """ThinkPrune's cap, fixed or by training step."""

    max_length: int = 4000
    """The cap L in tokens from step 0 (the paper's first round: 4000). >= 1."""
    schedule: tuple[tuple[int, int], ...] = ()
    """Later rounds as (first step, cap) pairs with strictly increasing steps >= 1, e.g. ((180, 3000),
    (360, 2000)). Empty: the cap stays max_length."""

    def __post_init__(self) -> None:
        require_int("max_length", self.max_length, 1)
        object.__setattr__(self, "schedule", tuple(tuple(p) for p in self.schedule))
        previous = 0
        for i, pair in enumerate(self.schedule):
            if len(pair) != 2:
                raise ValueError(f"schedule[{i}]={pair!r} must be a (step, cap) pair")
            step, cap = pair
            require_int(f"schedule[{i}] step", step, previous + 1)
            require_int(f"schedule[{i}] cap", cap, 1)
            previous = step


def thinkprune_reward(correct: torch.Tensor, lengths: torch.Tensor, *, max_length: float) -> torch.Tensor:
    """ThinkPrune reward r = 1[correct and length <= L] (ThinkPrune Sec. 3: a response cut at L gets 0).

    Args:
        correct: BoolTensor or 0/1 Tensor [N]. lengths: LongTensor [N], response tokens.
        max_length: the cap L (inclusive: a response of exactly L tokens that is correct scores 1).
    Returns: float64 Tensor [N] of 0/1.
    """
    require_range("max_length", max_length, 0.0, None, low_open=True)
    check_rows(correct=correct, lengths=lengths)
    return capped_correct(as_correct(correct), as_lengths(lengths), max_length)


class CapSchedule:
    """The cap of each training step: max_length, then each schedule pair's cap from its step on.

    Learned state: `steps_` (int), the number of `advance()` calls so far; the cap of the step about to be
    shaped is `cap()`. Call `cap()` for the batch, then `advance()` once.
    """

    def __init__(self, config: ThinkPruneConfig | None = None) -> None:
        self.config = config or ThinkPruneConfig()
        self.reset()

    def reset(self) -> None:
        """Back to step 0."""
        self.steps_ = 0

    def cap(self) -> int:
        """The cap L for the current step."""
        current = self.config.max_length
        for step, cap in self.config.schedule:
            if self.steps_ >= step:
                current = cap
        return current

    def advance(self) -> None:
        """Move to the next step."""
        self.steps_ += 1

    def state_dict(self) -> dict[str, Any]:
        return {"steps": self.steps_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        steps = state.get("steps") if isinstance(state, dict) else None
        require_int("cap schedule state 'steps'", steps, 0)
        self.steps_ = steps
