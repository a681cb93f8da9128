"""The GRPO family of baselines (baselines.md): grpo, grpo_length, gdpo, shorterbetter.

Each is a frozen keyword-only config plus a stateless shaper; the math is in dynashape.groups.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape._checks import require_choice, require_range
from dynashape.batch import RolloutBatch
from dynashape.groups import Groups, group_count, group_mean, group_min, group_normalize
from dynashape.shapers._common import (
    F64,
    WHITEN_MODES,
    batch_whiten,
    metrics_dict,
    reject_rewards,
    require_rewards,
    zero_advantage_frac,
)
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds
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


def _scalar_shaped(name: str, reward: torch.Tensor, groups: Groups, std: str, eps: float) -> Shaped:
    """GRPO-normalise one scalar reward [N] and package it with its metrics."""
    adv = group_normalize(reward, groups, std=std, eps=eps)  # type: ignore[arg-type]
    metrics = metrics_dict(
        name,
        ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac"],
        [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, groups)],
    )
    return Shaped(advantages=adv.float(), rewards=reward.float().unsqueeze(1), metrics=metrics)


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
class GrpoShaper(Shaper):
    """GRPO: (r - mean_q r) / (std_q r + eps) of one scalar reward: rewards[:, 0] if given (K must be 1),
    else correctness as 0/1."""

    config_cls = GrpoConfig
    needs = ShaperNeeds(reward_channels="optional")

    def shape(self, batch: RolloutBatch) -> Shaped:
        if batch.rewards is not None:
            if batch.rewards.shape[1] != 1:
                raise ValueError(
                    f"shaper 'grpo' takes one reward column, got rewards of shape {tuple(batch.rewards.shape)}; "
                    "use gdpo for several"
                )
            reward = batch.rewards[:, 0].to(F64)
        else:
            reward = batch.correct.to(F64)
        groups = Groups.from_ids(batch.group_ids)
        return _scalar_shaped(self.name, reward, groups, self.config.std, self.config.eps)


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
class GrpoLengthShaper(Shaper):
    """Scalarised length baseline: r = w_c * c + w_l * r_len, then GRPO normalisation, no whitening."""

    config_cls = GrpoLengthConfig

    def shape(self, batch: RolloutBatch) -> Shaped:
        reject_rewards(self.name, batch)
        cfg = self.config
        correct = batch.correct.to(F64)
        within = (batch.lengths <= cfg.threshold).to(F64)
        r_len = within * correct if cfg.mode == "conditioned" else within
        reward = cfg.weights[0] * correct + cfg.weights[1] * r_len
        groups = Groups.from_ids(batch.group_ids)
        return _scalar_shaped(self.name, reward, groups, "unbiased", cfg.eps)


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
class GdpoShaper(Shaper):
    """GDPO (NVlabs, arXiv 2601.05242): GRPO-normalise each reward column on its own, weighted sum, whiten."""

    config_cls = GdpoConfig
    needs = ShaperNeeds(reward_channels="required")

    def shape(self, batch: RolloutBatch) -> Shaped:
        rewards = require_rewards(self.name, batch)
        k = rewards.shape[1]
        weights = self.config.weights or (1.0,) * k
        if len(weights) != k:
            raise ValueError(f"gdpo weights has {len(weights)} entries but rewards has {k} columns")
        groups = Groups.from_ids(batch.group_ids)
        combined = torch.zeros(rewards.shape[0], dtype=F64, device=rewards.device)
        for j, w in enumerate(weights):  # K columns (a handful), never rollouts
            combined = combined + w * group_normalize(rewards[:, j], groups, eps=self.config.eps)
        adv = batch_whiten(combined, batch.lengths, self.config.whiten)  # type: ignore[arg-type]
        names = [f"reward_mean_{j}" for j in range(k)] + ["advantage_abs_mean"]
        metrics = metrics_dict(self.name, names, [*rewards.mean(0).unbind(), adv.abs().mean()])
        return Shaped(advantages=adv.float(), rewards=rewards.float(), metrics=metrics)


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
class ShorterBetterShaper(Shaper):
    """ShorterBetter (arXiv 2504.21370): SOL_q = shortest correct length of the group, or the group's mean
    length when none is correct; r = alpha * c - beta * |l - SOL_q|; GRPO normalisation."""

    config_cls = ShorterBetterConfig

    def shape(self, batch: RolloutBatch) -> Shaped:
        reject_rewards(self.name, batch)
        cfg = self.config
        groups = Groups.from_ids(batch.group_ids)
        length = batch.lengths.to(F64)
        solved = group_count(groups, batch.correct) > 0
        sol = torch.where(solved, group_min(length, groups, batch.correct), group_mean(length, groups))
        reward = cfg.alpha * batch.correct.to(F64) - cfg.beta * (length - groups.gather(sol)).abs()
        shaped = _scalar_shaped(self.name, reward, groups, "unbiased", cfg.eps)
        shaped.metrics[f"{self.name}/sol_mean"] = float(sol.mean())
        return shaped
