"""LEAD shaper (arXiv 2605.09806; docs/algorithms.md "LEAD"): decoupled normalisation + PSI controller +
online per-prompt target length.

Paper: LEAD, arXiv 2605.09806, Algorithm 1; conventions of the official code (CrazyMint/LEAD,
`ray_trainer.compute_advantage`, branch `lead`). One call = one controller update.

A chain of parts: Correctness, LeadEfficiency, RewardColumns (the declared extras), EfficiencyMetrics,
PSIWeights, DecoupledNormalise, BatchWhiten.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.checks import require_choice, require_range
from dynashape.core.groups import Groups
from dynashape.methods.lead.efficiency import EFFICIENCY_MODES, TARGET_MODES
from dynashape.methods.lead.psi import ControllerStep, PSIController
from dynashape.shapers._common import F64, WHITEN_MODES
from dynashape.shapers.base import Shaped, ShaperNeeds
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts import (
    BatchWhiten,
    Chain,
    Correctness,
    DecoupledNormalise,
    EfficiencyMetrics,
    Flow,
    LeadEfficiency,
    PSIWeights,
    RewardColumns,
    start,
)
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

    def parts(self, namespace: str = "lead") -> tuple[LeadEfficiency, RewardColumns, PSIWeights]:
        """LEAD's channel, extra-column and controller parts under this config (correctness comes first)."""
        return (
            LeadEfficiency(self.l_min, self.b_max, self.target, self.efficiency, namespace),
            RewardColumns(namespace, ranges=self.reward_ranges, required=False, metrics=False),
            PSIWeights(
                alpha=self.alpha,
                beta=self.beta,
                lambda_min=self.lambda_min,
                eps=self.eps,
                static_lambda_0=self.static_lambda_c,
                channels=2 + len(self.reward_ranges),
                namespace=namespace,
            ),
        )

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
    metrics: dict[str, float]  # LEAD's logged metrics (docs/algorithms.md "LEAD"), namespaced "lead/"


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


def lead_chain(config: LeadConfig, *, correctness: bool = True) -> Chain:
    """LEAD as parts: [Correctness], LeadEfficiency, extra columns, PSI weights, decoupled normalisation (one
    matrix-vector product, as the official code), BatchWhiten. Without `correctness` the chain expects the
    correctness channel already in the flow (MEDS puts its penalised correctness there)."""
    efficiency, extras, psi = config.parts()
    head = (Correctness(),) if correctness else ()
    return Chain(
        *head,
        efficiency,
        extras,
        EfficiencyMetrics(efficiency.namespace),
        psi,
        DecoupledNormalise(1e-6, order="matmul"),
        BatchWhiten(config.whiten),
    )


def _lead_output(flow: Flow) -> LeadOutput:
    values = flow.values
    return LeadOutput(
        advantages=flow.require("advantages", "lead"),
        channels=flow.require("channels", "lead"),
        channel_advantages=values["channel_advantages"],
        targets=values["targets"],
        step=values["controller_step"],
        mu=values["mu"],
        sigma=values["sigma"],
        groups=flow.groups,
        metrics=dict(flow.metrics),
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
    chain = lead_chain(config, correctness=False)
    head = start(batch).with_channel(correctness.to(F64), (0.0, 1.0))
    state = tuple(controller.state_dict() if p.state_key else None for p in chain.parts)
    flow, state = chain.update(head, state)
    controller.load_state_dict(chain.state_dict(state)["controller"])
    return _lead_output(flow)


def lead_metrics(out: LeadOutput, batch: RolloutBatch, prefix: str = "lead") -> dict[str, float]:
    """LEAD's logged metrics (docs/algorithms.md "LEAD") (plus one lambda per extra channel), under `prefix`."""
    return {f"{prefix}/{key.partition('/')[2]}": value for key, value in out.metrics.items()}


@register_shaper("lead")
class LeadShaper(ComposedShaper):
    """LEAD: r_l from an online per-prompt target length, decoupled GRPO normalisation of correctness and
    r_l, PSI-controlled weights (EMA + floor), BatchWhiten. State: the controller's EMA."""

    config_cls = LeadConfig
    needs = ShaperNeeds(reward_channels="optional")
    state_version = _STATE_VERSION

    def chain(self) -> Chain:
        return lead_chain(self.config)

    def shape(self, batch: RolloutBatch) -> Shaped:
        check_lead_batch(batch, self.config)
        return self.run(start(batch)).shaped()

    @property
    def controller_(self) -> PSIController:
        """A snapshot of the controller's state as a `PSIController` (to read its ``ema_`` and ``n_updates_``)."""
        controller = self.config.controller()
        controller.load_state_dict(self.chain_.state_dict(self.state_)["controller"])
        return controller
