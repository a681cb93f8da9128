"""LEAD's Potential-Scaled-Instability (PSI) controller (arXiv 2605.09806; docs/algorithms.md "LEAD").

Layer 1: `psi_target_weights` turns per-channel batch statistics into target weights (pure).
Layer 2: `PSIController` keeps the EMA of those targets across steps (scikit-learn style state ending in `_`).

Paper: LEAD, arXiv 2605.09806, Eq. (4)-(7): CV_k = sigma_k / (|mu_k| + eps); potential
P_k = ((R_max - clip(mu_k)) / (R_max - R_min))^alpha; PSI D_k = CV_k / (sum_j CV_j + eps) * P_k; target
lambda*_k = D_k / (sum_j D_j + eps) (linear, not softmax); EMA with beta; floor lambda_0 >= lambda_min applied
to the used weights only, never written back into the EMA.
"""

from __future__ import annotations

from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

import torch

from dynashape.core.checks import require_range

__all__ = ["ControllerStep", "PSIController", "PSITargets", "psi_target_weights"]

_F64 = torch.float64
# The controller's state is a handful of floats: it lives on the CPU whatever the batch's device (one small
# host transfer of mu and sigma per step), and every tensor it makes names that device, so that a default
# device set by the caller (torch.set_default_device("cuda")) never splits it across devices.
_CPU = torch.device("cpu")


@dataclass(frozen=True)
class PSITargets:
    """Per-channel quantities of one PSI evaluation; every field is a float64 Tensor [K]."""

    cv: torch.Tensor
    cv_norm: torch.Tensor
    potential: torch.Tensor
    psi: torch.Tensor
    target: torch.Tensor


def psi_target_weights(
    mu: torch.Tensor,
    sigma: torch.Tensor,
    ranges: torch.Tensor,
    *,
    alpha: float = 1.0,
    eps: float = 1e-8,
) -> PSITargets:
    """Target weights from batch statistics (LEAD Eq. 5-7).

    Args:
        mu, sigma: float Tensor [K], each channel's batch mean and std (law of total variance).
        ranges: float Tensor [K, 2], each channel's declared [R_min, R_max] (correctness [0, 1], LEAD's
            efficiency reward [-1, 1]).
        alpha: sharpness of the potential near the ceiling. eps: the CV and normalisation regulariser.
    """
    mu = mu.to(_F64)
    sigma = sigma.to(_F64)
    r_min, r_max = ranges[:, 0].to(_F64), ranges[:, 1].to(_F64)
    cv = sigma / (mu.abs() + eps)
    cv_norm = cv / (cv.sum() + eps)
    headroom = (r_max - torch.minimum(torch.maximum(mu, r_min), r_max)) / (r_max - r_min)
    potential = headroom**alpha
    psi = cv_norm * potential
    target = psi / (psi.sum() + eps)
    return PSITargets(cv=cv, cv_norm=cv_norm, potential=potential, psi=psi, target=target)


@dataclass(frozen=True)
class ControllerStep:
    """What one controller update decided. `weights` [K] are the weights to use this step (sum 1)."""

    weights: torch.Tensor
    targets: PSITargets


class PSIController:
    """EMA of PSI target weights with a floor on channel 0 (correctness). Works for any K >= 2 channels.

    Two channels (the default, LEAD): ema starts at 0.5; each update ema = beta * ema + (1 - beta) * lambda*_c;
    used lambda_c = max(ema, lambda_min), lambda_l = 1 - lambda_c. K channels: the EMA runs per channel from
    1/K; channel 0 gets the floor and channels 1.. share 1 - lambda_0 in proportion to their EMA values (equal
    shares if those are all 0). `static_lambda_0=w` (the paper's Table 2 sweep): lambda_0 = w every step, no
    EMA, no floor; the other channels share 1 - w equally.

    Learned state: `ema_` (float64 Tensor [K], unfloored) and `n_updates_` (int).
    """

    def __init__(
        self,
        ranges: Sequence[tuple[float, float]] = ((0.0, 1.0), (-1.0, 1.0)),
        *,
        alpha: float = 1.0,
        beta: float = 0.95,
        lambda_min: float = 0.3,
        eps: float = 1e-8,
        static_lambda_0: float | None = None,
    ) -> None:
        ranges = tuple((float(lo), float(hi)) for lo, hi in ranges)
        if len(ranges) < 2:
            raise ValueError(f"ranges must declare at least 2 channels, got {len(ranges)}")
        for k, (lo, hi) in enumerate(ranges):
            if not hi > lo:
                raise ValueError(f"ranges[{k}]=({lo}, {hi}) must have R_max > R_min")
        require_range("alpha", alpha, 0.0, None, low_open=True)
        require_range("beta", beta, 0.0, 1.0, high_open=True)
        require_range("lambda_min", lambda_min, 0.0, 1.0)
        require_range("eps", eps, 0.0, None, low_open=True)
        if static_lambda_0 is not None:
            require_range("static_lambda_0", static_lambda_0, 0.0, 1.0)
        self.ranges = ranges
        self.alpha = alpha
        self.beta = beta
        self.lambda_min = lambda_min
        self.eps = eps
        self.static_lambda_0 = static_lambda_0
        self.reset()

    @property
    def num_channels(self) -> int:
        return len(self.ranges)

    def reset(self) -> None:
        """Forget all updates: ema back to 1/K."""
        k = self.num_channels
        self.ema_ = torch.full((k,), 1.0 / k, dtype=_F64, device=_CPU)
        self.n_updates_ = 0

    def update(self, mu: torch.Tensor, sigma: torch.Tensor) -> ControllerStep:
        """Advance the state by one batch and return the weights to use. mu, sigma: Tensor [K]."""
        if mu.shape != (self.num_channels,) or sigma.shape != (self.num_channels,):
            raise ValueError(
                f"mu and sigma must have shape ({self.num_channels},), got {tuple(mu.shape)} and {tuple(sigma.shape)}"
            )
        targets = psi_target_weights(
            mu.detach().cpu(),
            sigma.detach().cpu(),
            torch.tensor(self.ranges, dtype=_F64, device=_CPU),
            alpha=self.alpha,
            eps=self.eps,
        )
        if self.static_lambda_0 is not None:
            w0 = torch.tensor(self.static_lambda_0, dtype=_F64, device=_CPU)
            rest = torch.full((self.num_channels - 1,), 1.0, dtype=_F64, device=_CPU)
            # As the official code, the state holds the pair actually used, so checkpoints show it.
            self.ema_ = torch.cat([w0.reshape(1), (1.0 - w0) * rest / rest.sum()])
            weights = self.ema_.clone()
        else:
            self.ema_ = self.beta * self.ema_ + (1.0 - self.beta) * targets.target
            weights = self._floored(self.ema_)
        self.n_updates_ += 1
        return ControllerStep(weights=weights, targets=targets)

    def _floored(self, ema: torch.Tensor) -> torch.Tensor:
        w0 = torch.clamp(ema[0], min=self.lambda_min)
        others = ema[1:].clamp_min(0.0)
        total = others.sum()
        share = others / total if bool(total > 0) else torch.full_like(others, 1.0 / others.numel())
        return torch.cat([w0.reshape(1), (1.0 - w0) * share])

    def state_dict(self) -> dict[str, Any]:
        return {"ema": self.ema_.tolist(), "n_updates": self.n_updates_}

    def load_state_dict(self, state: dict[str, Any]) -> None:
        try:
            ema = torch.tensor([float(x) for x in state["ema"]], dtype=_F64, device=_CPU)
            n_updates = int(state["n_updates"])
        except (KeyError, TypeError, ValueError) as err:
            raise ValueError(f"controller state must hold 'ema' (list of floats) and 'n_updates' (int): {err}") from err
        if ema.shape != (self.num_channels,):
            raise ValueError(f"controller state ema has {ema.numel()} channels, expected {self.num_channels}")
        if not bool(torch.isfinite(ema).all()) or n_updates < 0:
            raise ValueError(f"controller state is corrupt: ema={ema.tolist()}, n_updates={n_updates}")
        self.ema_ = ema
        self.n_updates_ = n_updates
