"""The configs of the GRPO family of baselines (docs/algorithms.md "Baselines"): GRPO (DeepSeekMath, arXiv
2402.03300), LEAD's scalarised length baseline, GDPO (NVlabs, arXiv 2601.05242). Their maths is the group
statistics of `dynashape.core.groups`."""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.core.checks import require_choice, require_range
from dynashape.methods._inputs import WHITEN_MODES

__all__ = ["GdpoConfig", "GrpoConfig", "GrpoLengthConfig"]


@dataclass(frozen=True, kw_only=True)
class GrpoConfig:
    std: str = "unbiased"
    """"unbiased": divide by the group's Bessel std + eps (GRPO); "none": centre only (Dr. GRPO)."""
    eps: float = 1e-6
    """Added to the std (outside the square root), as in verl; > 0 (0 would give NaN on a constant group)."""

    def __post_init__(self) -> None:
        require_choice("std", self.std, ("unbiased", "none"))
        require_range("eps", self.eps, 0.0, None, low_open=True)


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
