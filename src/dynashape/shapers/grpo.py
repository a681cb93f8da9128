"""The GRPO family of baselines (docs/algorithms.md "Baselines"): grpo, grpo_length, gdpo, shorterbetter.

Each is a frozen keyword-only config plus a stateless chain of parts (`dynashape.shapers.parts`); the math is in
dynashape.core.groups.
"""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.core.checks import require_choice, require_range
from dynashape.shapers._common import WHITEN_MODES
from dynashape.shapers.base import ShaperNeeds
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts import (
    AdvantageAbsMean,
    BatchWhiten,
    Chain,
    Correctness,
    DecoupledNormalise,
    DistanceToShortest,
    GroupNormalise,
    LengthWithin,
    RewardColumns,
    ScalarReward,
    StaticWeights,
)
from dynashape.shapers.registry import register_shaper

__all__ = [
    "GdpoConfig",
    "GdpoShaper",
    "GrpoConfig",
    "GrpoLengthConfig",
    "GrpoLengthShaper",
    "GrpoShaper",
    "ShorterBetterConfig",
    "ShorterBetterShaper",
]


# ---------------------------------------------------------------------------------------------------- grpo
@dataclass(frozen=True, kw_only=True)
class GrpoConfig:
    std: str = "unbiased"
    """"unbiased": divide by the group's Bessel std + eps (GRPO); "none": centre only (Dr. GRPO)."""
    eps: float = 1e-6
    """Added to the std (outside the square root), as in verl; > 0 (0 would give NaN on a constant group)."""

    def __post_init__(self) -> None:
        require_choice("std", self.std, ("unbiased", "none"))
        require_range("eps", self.eps, 0.0, None, low_open=True)


@register_shaper("grpo")
class GrpoShaper(ComposedShaper):
    """GRPO: (r - mean_q r) / (std_q r + eps) of one scalar reward: rewards[:, 0] if given (K must be 1),
    else correctness as 0/1."""

    config_cls = GrpoConfig
    needs = ShaperNeeds(reward_channels="optional")

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(ScalarReward(self.name), GroupNormalise(cfg.std, cfg.eps, self.name))


# --------------------------------------------------------------------------------------------- grpo_length
@dataclass(frozen=True, kw_only=True)
class GrpoLengthConfig:
    mode: str = "classic"
    """"classic": r_len = 1[l <= threshold]; "conditioned": r_len = 1[correct and l <= threshold]."""
    threshold: float = 2000
    """Length budget T in tokens (LEAD's scalarised baseline uses the global budget)."""
    weights: tuple[float, float] = (1.0, 1.0)
    """(w_c, w_l) of r = w_c * c + w_l * r_len; the paper's sweep uses (1/(1+rho), rho/(1+rho))."""
    eps: float = 1e-6
    """Added to the group std; > 0 (0 would give NaN on a constant group)."""

    def __post_init__(self) -> None:
        require_choice("mode", self.mode, ("classic", "conditioned"))
        require_range("threshold", self.threshold, 0.0, None)
        weights = tuple(self.weights)
        if len(weights) != 2:
            raise ValueError(f"weights={self.weights!r} must be a pair (w_c, w_l)")
        for i, w in enumerate(weights):
            require_range(f"weights[{i}]", w, 0.0, None)
        object.__setattr__(self, "weights", weights)
        require_range("eps", self.eps, 0.0, None, low_open=True)


@register_shaper("grpo_length")
class GrpoLengthShaper(ComposedShaper):
    """Scalarised length baseline: r = w_c * c + w_l * r_len, then GRPO normalisation, no whitening."""

    config_cls = GrpoLengthConfig

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(
            Correctness(),
            LengthWithin(cfg.threshold, conditioned=cfg.mode == "conditioned"),
            StaticWeights(cfg.weights, self.name),
            GroupNormalise("unbiased", cfg.eps, self.name),
        )


# ---------------------------------------------------------------------------------------------------- gdpo
@dataclass(frozen=True, kw_only=True)
class GdpoConfig:
    weights: tuple[float, ...] | None = None
    """Static weight of each reward column (length K); None = 1.0 each."""
    whiten: str = "token"
    """BatchWhiten of the weighted sum: "token" (verl's masked_whiten), "sequence" (TRL), "none"."""
    eps: float = 1e-6
    """Added to each column's group std; > 0."""

    def __post_init__(self) -> None:
        if self.weights is not None:
            weights = tuple(self.weights)
            if not weights:
                raise ValueError("weights=() must name one weight per reward column")
            for i, w in enumerate(weights):
                require_range(f"weights[{i}]", w)
            object.__setattr__(self, "weights", weights)
        require_choice("whiten", self.whiten, WHITEN_MODES)
        require_range("eps", self.eps, 0.0, None, low_open=True)


@register_shaper("gdpo")
class GdpoShaper(ComposedShaper):
    """GDPO (NVlabs, arXiv 2601.05242): GRPO-normalise each reward column on its own, weighted sum, whiten."""

    config_cls = GdpoConfig
    needs = ShaperNeeds(reward_channels="required")

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(
            RewardColumns(self.name, required=True, metrics=True),
            StaticWeights(cfg.weights, self.name),
            DecoupledNormalise(cfg.eps, order="columns"),
            BatchWhiten(cfg.whiten),
            AdvantageAbsMean(self.name),
        )


# ------------------------------------------------------------------------------------------- shorterbetter
@dataclass(frozen=True, kw_only=True)
class ShorterBetterConfig:
    alpha: float = 2.0
    """Weight of correctness in r = alpha * c - beta * |l - SOL_q|."""
    beta: float = 0.001
    """Weight of the distance to the sample optimal length, per token."""
    eps: float = 1e-6
    """Added to the group std; > 0 (0 would give NaN on a constant group)."""

    def __post_init__(self) -> None:
        require_range("alpha", self.alpha, 0.0, None)
        require_range("beta", self.beta, 0.0, None)
        require_range("eps", self.eps, 0.0, None, low_open=True)


@register_shaper("shorterbetter")
class ShorterBetterShaper(ComposedShaper):
    """ShorterBetter (arXiv 2504.21370): SOL_q = shortest correct length of the group, or the group's mean
    length when none is correct; r = alpha * c - beta * |l - SOL_q|; GRPO normalisation."""

    config_cls = ShorterBetterConfig

    def chain(self) -> Chain:
        cfg = self.config
        return Chain(
            Correctness(),
            DistanceToShortest(self.name),
            StaticWeights((cfg.alpha, cfg.beta), self.name),
            GroupNormalise("unbiased", cfg.eps, self.name),
        )
