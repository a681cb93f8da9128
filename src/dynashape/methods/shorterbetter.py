"""ShorterBetter's config (arXiv 2504.21370): r = alpha c - beta |l - SOL_q|; its channel is
`dynashape.shapers.parts.DistanceToShortest`."""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.core.checks import require_range

__all__ = ["ShorterBetterConfig"]


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
