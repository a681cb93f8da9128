"""LEAD shaper (lead.md): decoupled normalisation + PSI controller + online per-prompt target length.

Paper: LEAD, arXiv 2605.09806, Algorithm 1; conventions of the official code (CrazyMint/LEAD,
`ray_trainer.compute_advantage`, branch `lead`). One call = one controller update.
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import torch

from dynashape._checks import require_choice, require_range
from dynashape.batch import RolloutBatch
from dynashape.controller import ControllerStep, PSIController
from dynashape.efficiency import EFFICIENCY_MODES, TARGET_MODES, efficiency_reward, target_lengths
from dynashape.groups import Groups, group_count, group_normalize, total_variance_stats
from dynashape.shapers._common import F64, WHITEN_MODES, batch_whiten, metrics_dict
from dynashape.shapers.base import Shaped, Shaper, ShaperNeeds
from dynashape.shapers.registry import register_shaper

__all__ = ["LeadConfig", "LeadShaper", "check_lead_batch", "lead_advantages"]

_STATE_VERSION = 1


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


@dataclass(frozen=True)
class LeadOutput:
    """Everything one LEAD step computed (float64 unless noted), for the shaper, tests and plots."""

    advantages: torch.Tensor  # [N], after whitening
    channels: torch.Tensor  # [N, K] raw channel rewards: correctness, r_l, extras
    channel_advantages: torch.Tensor  # [N, K] group-normalised
    targets: torch.Tensor  # [G] L*_q
    step: ControllerStep
    mu: torch.Tensor  # [K]
    sigma: torch.Tensor  # [K]
    groups: Groups


def check_lead_batch(batch: RolloutBatch, config: LeadConfig) -> None:
    """Refuse a batch LEAD cannot use, before any state moves: `rewards` columns must match `reward_ranges`."""
    if config.reward_ranges:
        if batch.rewards is None or batch.rewards.shape[1] != len(config.reward_ranges):
            got = None if batch.rewards is None else tuple(batch.rewards.shape)
            raise ValueError(
                f"lead reward_ranges declares {len(config.reward_ranges)} extra channels but batch rewards "
                f"has shape {got}"
            )
    elif batch.rewards is not None:
        raise ValueError(
            f"shaper 'lead' got rewards of shape {tuple(batch.rewards.shape)} but reward_ranges is empty; "
            "declare each column's [R_min, R_max] in reward_ranges to use them as channels"
        )


def lead_advantages(
    batch: RolloutBatch,
    correctness: torch.Tensor,
    controller: PSIController,
    config: LeadConfig,
) -> LeadOutput:
    """One LEAD step on a batch, with the correctness channel given (0/1, or minus MEDS's penalty).

    correctness: float Tensor [N]. Target lengths and the efficiency channel's controller mask always use the
    verifier's verdict `batch.correct`. Advances `controller` once, after `check_lead_batch` accepted the batch.
    """
    check_lead_batch(batch, config)
    groups = Groups.from_ids(batch.group_ids)
    correct = batch.correct
    targets = target_lengths(
        batch.lengths,
        correct,
        groups,
        mode=config.target,
        l_min=config.l_min,
        b_max=config.b_max,  # type: ignore[arg-type]
    )
    r_l = efficiency_reward(batch.lengths, groups.gather(targets), mode=config.efficiency)  # type: ignore[arg-type]
    columns = [correctness.to(F64), r_l]
    if batch.rewards is not None:
        columns += list(batch.rewards.to(F64).unbind(1))
    channels = torch.stack(columns, dim=1)
    # Decoupled normalisation (GDPO): each channel in its own group, Bessel std, eps 1e-6, over ALL rollouts.
    channel_adv = group_normalize(channels, groups, eps=1e-6)
    # Controller statistics on raw rewards: efficiency over the correct rollouts of solved prompts only.
    selected = torch.ones_like(channels, dtype=torch.bool)
    selected[:, 1] = correct
    mu, sigma = total_variance_stats(channels, groups, selected)
    step = controller.update(mu, sigma)
    combined = channel_adv @ step.weights.to(channel_adv.device)
    advantages = batch_whiten(combined, batch.lengths, config.whiten)  # type: ignore[arg-type]
    return LeadOutput(advantages, channels, channel_adv, targets, step, mu, sigma, groups)


def lead_metrics(out: LeadOutput, batch: RolloutBatch, prefix: str = "lead") -> dict[str, float]:
    """The metrics of lead.md section 8 (plus one lambda per extra channel)."""
    t = out.step.targets
    w = out.step.weights
    correct = batch.correct
    r_l = out.channels[:, 1]
    groups = out.groups
    n_correct = group_count(groups, correct)
    # Mean r_l over correct rollouts; 0 when none is correct (as the official metric).
    eff_correct = (r_l * correct).sum() / correct.sum().clamp_min(1)
    names = [
        "lambda_c", "lambda_l", "target_lambda_c", "cv_c", "cv_l", "potential_c", "potential_l", "psi_c",
        "psi_l", "mu_c", "mu_l", "target_len_mean", "target_len_min", "target_len_max", "efficiency_mean",
        "efficiency_correct_mean", "unsolved_frac", "solved_all_frac",
    ]  # fmt: skip
    values = [
        w[0], w[1], t.target[0], t.cv[0], t.cv[1], t.potential[0], t.potential[1], t.psi[0], t.psi[1],
        out.mu[0], out.mu[1], out.targets.mean(), out.targets.min(), out.targets.max(), r_l.mean(), eff_correct,
        (n_correct == 0).to(F64).mean(), (n_correct == groups.counts).to(F64).mean(),
    ]  # fmt: skip
    for j in range(2, w.numel()):
        names.append(f"lambda_r{j - 2}")
        values.append(w[j])
    return metrics_dict(prefix, names, values)


@register_shaper("lead")
class LeadShaper(Shaper):
    """LEAD: r_l from an online per-prompt target length, decoupled GRPO normalisation of correctness and
    r_l, PSI-controlled weights (EMA + floor), BatchWhiten. State: the controller's EMA."""

    config_cls = LeadConfig
    needs = ShaperNeeds(reward_channels="optional")

    def reset(self) -> None:
        self.controller_ = self.config.controller()

    def shape(self, batch: RolloutBatch) -> Shaped:
        out = lead_advantages(batch, batch.correct.to(F64), self.controller_, self.config)
        return Shaped(
            advantages=out.advantages.float(),
            rewards=out.channels.float(),
            metrics=lead_metrics(out, batch, self.name),
        )

    def state_dict(self) -> dict[str, Any]:
        return {"version": _STATE_VERSION, "controller": self.controller_.state_dict()}

    def load_state_dict(self, state: Mapping[str, Any]) -> None:
        if state.get("version") != _STATE_VERSION or "controller" not in state:
            raise ValueError(
                f"not a lead shaper state (version {state.get('version')!r}, keys {sorted(state)}); "
                f"expected version {_STATE_VERSION} with 'controller'"
            )
        self.controller_.load_state_dict(state["controller"])
