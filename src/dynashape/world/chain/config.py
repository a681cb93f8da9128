"""The chain world's parameters (``ChainTaskConfig``), its version and its vocabularies of traits and modes."""

from __future__ import annotations

from dataclasses import dataclass

__all__ = ["ERROR_MODES", "SHORTCUTS", "VERBOSITY", "WORLD_VERSION", "ChainTaskConfig"]

WORLD_VERSION = "chain-v3"
"""Bump when the meaning of a problem, a trace or a label changes (it keys the saved budget rules)."""
VERBOSITY: tuple[str, ...] = ("terse", "plain", "chatty")
SHORTCUTS: tuple[str, ...] = ("none", "direct", "merged")
ERROR_MODES: tuple[str, ...] = ("carry", "borrow", "parenthesis", "shortcut", "truncated", "other")


@dataclass(frozen=True, kw_only=True)
class ChainTaskConfig:
    """Parameters of the toy world; the world's identity (it keys the cached base model)."""

    min_ops: int = 1
    """Fewest operations of a problem (its difficulty)."""
    max_ops: int = 8
    """Most operations of a problem."""
    n_train: int = 20000
    """Distinct training problems (warm-up and RL prompts), uniform over difficulties."""
    n_validation_per_difficulty: int = 25
    """Validation problems per difficulty (baselines are tuned on these only)."""
    n_test_per_difficulty: int = 25
    """Held-out test problems per difficulty."""
    seed: int = 0
    """Seed of problem generation."""
    trap_prob: float = 0.3
    """Share of problems with >= 2 operations that hold a parenthesised pair after a minus (trap prompts)."""
    slip_prob: float = 0.15
    """Per step with a carry or a borrow: probability that the teacher slips (forgets the carry / borrow)."""
    check_prob: float = 0.5
    """Share of careful teacher traces: they check every carry / borrow step and repair a slip."""
    paren_prob: float = 0.3
    """On a trap prompt: probability that the teacher drops the parentheses (the misconception)."""
    direct_prob_easy: float = 0.3
    """Share of teacher traces that give the bare answer on the easiest problems (``min_ops``)."""
    direct_prob_hard: float = 0.04
    """Share of teacher traces that give the bare answer on the hardest problems (``max_ops``); linear between."""
    merged_prob: float = 0.08
    """Share of teacher traces that merge two chain operations per line."""
    # The filler per verbosity trait (W2): probability of restating the problem first, and of repeating the
    # result after each step (``so 55``).
    restate_terse: float = 0.0
    """Terse problems: probability of restating the problem."""
    restate_plain: float = 0.5
    """Plain problems: probability of restating the problem."""
    restate_chatty: float = 1.0
    """Chatty problems: probability of restating the problem."""
    repeat_terse: float = 0.0
    """Terse problems: per step, probability of repeating the result."""
    repeat_plain: float = 0.25
    """Plain problems: per step, probability of repeating the result."""
    repeat_chatty: float = 0.7
    """Chatty problems: per step, probability of repeating the result."""

    def __post_init__(self) -> None:
        if not 1 <= self.min_ops <= self.max_ops:
            raise ValueError(f"min_ops must be in [1, max_ops={self.max_ops}], got {self.min_ops}")
        if self.max_ops > 12:
            raise ValueError(f"max_ops must be <= 12, got {self.max_ops}")
        if self.n_train < 1:
            raise ValueError(f"n_train must be >= 1, got {self.n_train}")
        for name in ("n_validation_per_difficulty", "n_test_per_difficulty"):
            if getattr(self, name) < 1:
                raise ValueError(f"{name} must be >= 1, got {getattr(self, name)}")
        probs = (
            "trap_prob",
            "slip_prob",
            "check_prob",
            "paren_prob",
            "direct_prob_easy",
            "direct_prob_hard",
            "merged_prob",
        )
        fillers = tuple(f"{kind}_{trait}" for kind in ("restate", "repeat") for trait in VERBOSITY)
        for name in probs + fillers:
            value = getattr(self, name)
            if not 0.0 <= value <= 1.0:
                raise ValueError(f"{name} must be in [0, 1], got {value}")
        for name in ("direct_prob_easy", "direct_prob_hard"):
            if getattr(self, name) + self.merged_prob > 1.0:
                raise ValueError(f"{name} + merged_prob must be <= 1, got {getattr(self, name)} + {self.merged_prob}")

    def direct_prob(self, difficulty: int) -> float:
        """Share of bare answers among the teacher's traces at ``difficulty`` operations (linear in it)."""
        if self.max_ops == self.min_ops:
            return self.direct_prob_easy
        t = (min(max(difficulty, self.min_ops), self.max_ops) - self.min_ops) / (self.max_ops - self.min_ops)
        return self.direct_prob_easy + t * (self.direct_prob_hard - self.direct_prob_easy)

    @property
    def difficulties(self) -> tuple[int, ...]:
        return tuple(range(self.min_ops, self.max_ops + 1))
