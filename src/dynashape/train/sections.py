"""The trainer's per-method sections (``TrainConfig.overlong``, ``.entropy_advantage``, ``.drpo``) and the budget
prompt's (``.budget_prompt``): frozen keyword-only dataclasses validated on construction, one per method's own
settings, as verl's algorithm config nests them.
"""

from __future__ import annotations

import math
from dataclasses import dataclass

__all__ = ["BudgetPromptConfig", "DrpoConfig", "EntropyAdvantageConfig", "OverlongConfig"]


def _positive(name: str, value: float, *, allow_zero: bool = False) -> None:
    ok = math.isfinite(value) and (value >= 0 if allow_zero else value > 0)
    if not ok:
        raise ValueError(f"{name} must be a finite number {'>=' if allow_zero else '>'} 0, got {value}")


@dataclass(frozen=True, kw_only=True)
class OverlongConfig:
    """DAPO's overlong penalty (arXiv 2503.14476, Eq. 13), read by the ``overlong`` and ``correct_overlong``
    reward columns: 0 up to ``max_new_tokens - buffer``, then linear down to -factor at ``max_new_tokens``."""

    buffer: int = 10
    """L_cache: the last this many tokens of the budget where the penalty ramps (<= max_new_tokens)."""
    factor: float = 1.0
    """Scale of the penalty."""

    def __post_init__(self) -> None:
        if isinstance(self.buffer, bool) or not isinstance(self.buffer, int) or self.buffer < 1:
            raise ValueError(f"overlong.buffer must be an int >= 1, got {self.buffer!r}")
        _positive("overlong.factor", self.factor, allow_zero=True)


@dataclass(frozen=True, kw_only=True)
class EntropyAdvantageConfig:
    """The entropy advantage of the clip loss (Cheng et al., "Reasoning with Exploration: An Entropy
    Perspective"): every token's advantage A becomes A + min(alpha * H_t.detach(), |A| / kappa)."""

    enabled: bool = False
    """Add the entropy term to the advantages."""
    alpha: float = 0.4
    """Weight of the token entropy."""
    kappa: float = 2.0
    """The term is capped at |A| / kappa, so it never flips an advantage's sign."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"entropy_advantage.enabled must be true or false, got {self.enabled!r}")
        _positive("entropy_advantage.alpha", self.alpha, allow_zero=True)
        _positive("entropy_advantage.kappa", self.kappa)


@dataclass(frozen=True, kw_only=True)
class DrpoConfig:
    """The DRPO objective (arXiv 2510.04474), used by ``loss="drpo"``."""

    tau: float = 10.0
    """Soft-max temperature over the wrong rollouts of a group."""
    lam: float = 0.1
    """Temperature lambda of the length weights over the correct rollouts (larger = weaker preference)."""
    beta: float = 1e3
    """Trust-region penalty weight."""
    delta: float = 1e-4
    """Trust-region KL threshold."""

    def __post_init__(self) -> None:
        _positive("drpo.tau", self.tau)
        _positive("drpo.lam", self.lam)
        _positive("drpo.beta", self.beta, allow_zero=True)
        _positive("drpo.delta", self.delta, allow_zero=True)


@dataclass(frozen=True, kw_only=True)
class BudgetPromptConfig:
    """Prompts that name a token budget, as L1 trains with (``world.budget_prompts``; off by default, so no
    run without it changes). Each training problem asks for its own budget, drawn once from low..high; the
    held-out and validation prompts ask for ``eval_budget``, or for none. The trainer hands every rollout's
    budget to the shaper (``RolloutBatch.budgets``), which the ``l1_exact`` and ``l1_max`` shapers read."""

    enabled: bool = False
    """Put a budget into the prompts."""
    form: str = "exact"
    """L1's words: "exact" ("Think for N tokens.", L1-Exact) or "maximum" ("Think for maximum N tokens.",
    L1-Max)."""
    low: int | None = None
    """Smallest training budget in tokens; None: L1's 100 of its 4096-token context, scaled to
    ``max_new_tokens`` (at least 1)."""
    high: int | None = None
    """Largest training budget in tokens; None: L1's 4000 of 4096, scaled to ``max_new_tokens``."""
    eval_budget: int | None = None
    """The budget the held-out and validation prompts name (L1 evaluates at fixed budgets); None: they name none."""
    eval_budgets: tuple[int, ...] = ()
    """After the final evaluation, one more held-out evaluation per budget here, every prompt naming it (L1's
    fixed-budget evaluation): accuracy, mean length and the length-following error mean |length - budget| /
    budget, in eval.json's ``at_budget``. Evaluation only: it leaves the training (and its hash) alone."""

    def __post_init__(self) -> None:
        if not isinstance(self.enabled, bool):
            raise ValueError(f"budget_prompt.enabled must be true or false, got {self.enabled!r}")
        from dynashape.world.budget_prompts import BUDGET_FORMS

        if self.form not in BUDGET_FORMS:
            raise ValueError(f"budget_prompt.form must be one of {tuple(BUDGET_FORMS)}, got {self.form!r}")
        for name in ("low", "high", "eval_budget"):
            value = getattr(self, name)
            if value is not None and (isinstance(value, bool) or not isinstance(value, int) or value < 1):
                raise ValueError(f"budget_prompt.{name} must be an integer >= 1 or null, got {value!r}")
        object.__setattr__(self, "eval_budgets", tuple(self.eval_budgets))
        for value in self.eval_budgets:
            if isinstance(value, bool) or not isinstance(value, int) or value < 1:
                raise ValueError(f"budget_prompt.eval_budgets must hold integers >= 1, got {self.eval_budgets!r}")
        if len(set(self.eval_budgets)) != len(self.eval_budgets):
            raise ValueError(f"budget_prompt.eval_budgets must not repeat a budget, got {self.eval_budgets!r}")
        if self.low is not None and self.high is not None and self.low > self.high:
            raise ValueError(f"budget_prompt.low={self.low} must be <= budget_prompt.high={self.high}")

    def budget_range(self, max_new_tokens: int) -> tuple[int, int]:
        """(low, high) of the training budgets at training cap ``max_new_tokens``."""
        low = self.low if self.low is not None else max(1, round(max_new_tokens * 100 / 4096))
        high = self.high if self.high is not None else max(low, round(max_new_tokens * 4000 / 4096))
        if low > high:
            raise ValueError(f"budget_prompt: low={low} must be <= high={high} (max_new_tokens={max_new_tokens})")
        return low, high
