"""LEAD's config (arXiv 2605.09806, Algorithm 1; CrazyMint/LEAD `ray_trainer.compute_advantage`, branch `lead`):
the target length, the efficiency reward, the PSI controller and the whitening, one field each."""

from __future__ import annotations

from dataclasses import dataclass

from dynashape.core.checks import require_choice, require_range
from dynashape.methods._inputs import WHITEN_MODES
from dynashape.methods.lead.efficiency import EFFICIENCY_MODES, TARGET_MODES
from dynashape.methods.lead.psi import PSIController

__all__ = ["LeadConfig"]


@dataclass(frozen=True, kw_only=True)
class LeadConfig:
    l_min: float = 1000
    """Lower clamp of the target length L*_q in tokens (keeps r_l well-conditioned for very short answers)."""
    b_max: float = 4000
    """Training budget in tokens: upper clamp of L*_q and the sentinel of an unsolved prompt."""
    alpha: float = 1.0
    """Sharpness of the potential P_k = (headroom)^alpha."""
    beta: float = 0.95
    """EMA factor of the controller: ema = beta * ema + (1 - beta) * lambda*_c (horizon ~ 1 / (1 - beta))."""
    lambda_min: float = 0.3
    """Floor of the correctness weight actually used (never written back into the EMA)."""
    eps: float = 1e-8
    """Regulariser of the CV denominator and the PSI normalisations."""
    target: str = "mean_correct"
    """Target length aggregator: mean_correct (paper), min_correct, median_correct, mean_all."""
    efficiency: str = "symmetric"
    """Efficiency reward: symmetric max(-1, 1 - |l - L*| / L*) (paper) or upper_only max(-1, min(0, 1 - l/L*))."""
    static_lambda_c: float | None = None
    """If set, lambda_c is this constant every step: no EMA, no floor (the paper's Table 2 static ratios)."""
    whiten: str = "token"
    """BatchWhiten after aggregation: token (official, verl's masked_whiten), sequence (TRL) or none."""
    reward_ranges: tuple[tuple[float, float], ...] = ()
    """Extension: the declared [R_min, R_max] of each column of the batch's `rewards`, which then become
    extra decoupled channels weighted by the controller. Empty (default) = the paper's two channels, and a
    batch carrying `rewards` is refused."""

    def __post_init__(self) -> None:
        require_range("l_min", self.l_min, 0.0, None, low_open=True)
        require_range("b_max", self.b_max, 0.0, None, low_open=True)
        if self.b_max < self.l_min:
            raise ValueError(
                f"b_max={self.b_max!r} must be >= l_min={self.l_min!r}; l_min defaults to the paper's 1000 "
                f"(for b_max=4000): set both, e.g. l_min={self.b_max / 4:g} (b_max / 4, the paper's ratio)"
            )
        require_range("alpha", self.alpha, 0.0, None, low_open=True)
        require_range("beta", self.beta, 0.0, 1.0, high_open=True)
        require_range("lambda_min", self.lambda_min, 0.0, 1.0)
        require_range("eps", self.eps, 0.0, None, low_open=True)
        require_choice("target", self.target, TARGET_MODES)
        require_choice("efficiency", self.efficiency, EFFICIENCY_MODES)
        if self.static_lambda_c is not None:
            require_range("static_lambda_c", self.static_lambda_c, 0.0, 1.0)
        require_choice("whiten", self.whiten, WHITEN_MODES)
        ranges = tuple((float(lo), float(hi)) for lo, hi in self.reward_ranges)
        for k, (lo, hi) in enumerate(ranges):
            if not hi > lo:
                raise ValueError(f"reward_ranges[{k}]=({lo}, {hi}) must have R_max > R_min")
        object.__setattr__(self, "reward_ranges", ranges)

    def controller(self) -> PSIController:
        return PSIController(
            ((0.0, 1.0), (-1.0, 1.0), *self.reward_ranges),
            alpha=self.alpha,
            beta=self.beta,
            lambda_min=self.lambda_min,
            eps=self.eps,
            static_lambda_0=self.static_lambda_c,
        )
