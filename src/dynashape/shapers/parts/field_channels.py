"""Reward channel parts of the field's length methods, over the pure functions of `dynashape.methods`.

Stateless: `BudgetDistance` (L1-Exact's -|n_gold - n_y|), `L1MaxScore`, `LengthPenalty` (-l, A-DLP's),
`CappedCorrect` (DLER's and ThinkPrune's 1[correct and l <= L]), `LaserBonus`, `SolveRateLength` (ALP).
Stateful, with plain-value state: `ScheduledCap` (ThinkPrune's cap by step), `LaserDBonus` (LASER-D's per-bucket
targets, refreshed from a monitor set handed in with ``observe(monitor=batch)``), `AalcReward` (AALC's last
validation accuracy, handed in with ``observe(validation_accuracy=a)``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any, ClassVar

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.methods.aalc import AalcConfig, AalcSchedule, aalc_reward
from dynashape.methods.alp import alp_reward
from dynashape.methods.dler import dler_boost, dler_reward
from dynashape.methods.l1 import l1_max_reward
from dynashape.methods.laser import UNFORMATTED_SCORE, LaserDConfig, LaserDTargets, laser_d_reward, laser_reward
from dynashape.methods.thinkprune import CapSchedule, ThinkPruneConfig, thinkprune_reward
from dynashape.shapers._common import F64
from dynashape.shapers.parts.flow import Flow, Holds, Stateless
from dynashape.shapers.parts.penalties import require_input

__all__ = [
    "AalcReward",
    "BudgetDistance",
    "CappedCorrect",
    "CorrectBoost",
    "L1MaxScore",
    "LaserBonus",
    "LaserDBonus",
    "LengthPenalty",
    "ScheduledCap",
    "SolveRateLength",
]

_FREE = (float("-inf"), float("inf"))


def _budgets(flow: Flow, namespace: str) -> torch.Tensor:
    budgets = flow.batch.budgets
    if budgets is None:
        raise ValueError(f"shaper {namespace!r} needs budgets [N] in the batch (each prompt's n_gold), got None")
    return budgets


@dataclass(frozen=True)
class BudgetDistance(Stateless):
    """-|n_gold - n_y|: minus the distance of each length from its prompt's budget (L1-Exact's length term,
    weighted alpha beside correctness). Reads ``batch.budgets``."""

    namespace: str = "l1_exact"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        budgets = _budgets(flow, self.namespace).to(F64)
        # Negated so that a positive weight alpha gives c - alpha |n_gold - n_y| (x + (-y) == x - y exactly).
        distance = -(budgets - flow.batch.lengths.to(F64)).abs()
        return flow.with_channel(distance, (float("-inf"), 0.0)), None


@dataclass(frozen=True)
class L1MaxScore(Stateless):
    """LCPO-Max's whole reward, correctness times (or plus) the budget score (`dynashape.methods.l1_max_reward`;
    its docstring says where code and paper differ). Reads ``batch.budgets``."""

    alpha: float = 3e-4
    delta: float = 0.5
    form: str = "code"
    namespace: str = "l1_max"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        b = flow.batch
        reward = l1_max_reward(
            b.correct, b.lengths, _budgets(flow, self.namespace), alpha=self.alpha, delta=self.delta, form=self.form
        )  # type: ignore[arg-type]
        return flow.with_channel(reward, _FREE), None


@dataclass(frozen=True)
class LengthPenalty(Stateless):
    """-l in tokens, a length channel whose weight a controller sets (A-DLP's lambda)."""

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        return flow.with_channel(-flow.batch.lengths.to(F64), (float("-inf"), 0.0)), None


@dataclass(frozen=True)
class CappedCorrect(Stateless):
    """1[correct and l <= max_length] (DLER's truncation reward, `dynashape.methods.dler_reward`); kept also as
    ``values["score"]``, the score before any penalty (DLER's `token_level_scores`, which its boost reads)."""

    max_length: float = 4000

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = dler_reward(flow.batch.correct, flow.batch.lengths, max_length=self.max_length)
        return flow.with_channel(reward, (0.0, 1.0)).but(values={"score": reward}), None


@dataclass(frozen=True)
class CorrectBoost(Stateless):
    """DLER's official advantage boost: A + value where the score before penalties (``values["score"]``) is at
    least 1 (`dynashape.methods.dler_boost`). Logs the share of boosted rollouts."""

    value: float = 0.1
    namespace: str = "dler"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        adv = flow.require("advantages", "CorrectBoost")
        score = flow.values.get("score")
        if score is None:
            raise ValueError("part 'CorrectBoost' needs values['score'] from CappedCorrect (check the chain's order)")
        boosted = dler_boost(adv, score, value=self.value)
        share = float((boosted != adv).to(F64).mean())
        return flow.but(advantages=boosted, metrics={f"{self.namespace}/boosted_frac": share}), None


def _laser_format(flow: Flow, base: str, namespace: str) -> torch.Tensor | None:
    """``batch.formatted`` for LASER's official base score (refused when missing), None for the 0/1 base."""
    if base == "binary":
        return None
    what = "whether each answer is in the asked \\boxed format; base='binary' reads none"
    return require_input(flow, "formatted", namespace, what)


def _laser_range(base: str, alpha: float) -> tuple[float, float]:
    return (UNFORMATTED_SCORE if base == "official" else 0.0, 1.0 + alpha)


@dataclass(frozen=True)
class LaserBonus(Stateless):
    """LASER's reward s + alpha 1[s = 1 and l <= L_T] (`dynashape.methods.laser_reward`), s the official
    1 / -0.5 / -1 base score (reads ``batch.formatted``) or, with base="binary", the 0/1 verdict."""

    alpha: float = 0.5
    target_length: float = 4096
    base: str = "official"
    namespace: str = "laser"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        b = flow.batch
        formatted = _laser_format(flow, self.base, self.namespace)
        reward = laser_reward(
            b.correct, b.lengths, target_length=self.target_length, alpha=self.alpha, formatted=formatted
        )
        return flow.with_channel(reward, _laser_range(self.base, self.alpha)), None


@dataclass(frozen=True)
class SolveRateLength(Stateless):
    """ALP's reward c - beta |y| max(p_solved, 1/K) (`dynashape.methods.alp_reward`)."""

    beta: float = 1e-7

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = alp_reward(flow.batch.correct, flow.batch.lengths, flow.groups, beta=self.beta)
        return flow.with_channel(reward, (float("-inf"), 1.0)), None


@dataclass(frozen=True)
class ScheduledCap(Holds):
    """ThinkPrune's 1[correct and l <= L_t] with L_t from a step schedule (`dynashape.methods.CapSchedule`,
    `thinkprune_reward`). State ``{"steps": int}``, advanced once per call. Logs ``namespace/max_length``."""

    config: ThinkPruneConfig
    namespace: str = "thinkprune"
    state_key: str | None = "schedule"

    def fresh(self) -> CapSchedule:
        return CapSchedule(self.config)

    def update(self, flow: Flow, state: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        schedule = self.held(state)
        cap = schedule.cap()
        reward = thinkprune_reward(flow.batch.correct, flow.batch.lengths, max_length=cap)
        schedule.advance()
        flow = flow.with_channel(reward, (0.0, 1.0)).but(metrics={f"{self.namespace}/max_length": float(cap)})
        return flow, schedule.state_dict()


@dataclass(frozen=True)
class LaserDBonus(Holds):
    """LASER-D's bonus with the target of each rollout's difficulty bucket (`dynashape.methods.laser_d_reward`).

    State ``{"targets": [low, medium, high], "refreshes": int}`` (a None target is the batch's longest
    response). ``observe(monitor=batch)`` re-chooses the targets from a monitor set's rollouts (a
    `RolloutBatch`: verdicts, lengths, groups), every ``refresh_every`` steps and before the first. Logs the
    three targets (0 for None) under `namespace`.
    """

    config: LaserDConfig
    namespace: str = "laser_d"
    state_key: str | None = "buckets"
    observes: ClassVar[tuple[str, ...]] = ("monitor",)

    def fresh(self) -> LaserDTargets:
        return LaserDTargets(self.config)

    def observe(self, state: Mapping[str, Any], *, monitor: RolloutBatch) -> dict[str, Any]:
        if not isinstance(monitor, RolloutBatch):
            raise TypeError(f"monitor must be a RolloutBatch of the monitor prompts' rollouts, got {monitor!r}")
        targets = self.held(state)
        targets.refresh(monitor.correct, monitor.lengths, monitor.group_ids)
        return targets.state_dict()

    def update(self, flow: Flow, state: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        chosen = self.held(state).targets_
        b, cfg = flow.batch, self.config
        formatted = _laser_format(flow, cfg.base, self.namespace)
        reward = laser_d_reward(b.correct, b.lengths, flow.groups, targets=chosen, alpha=cfg.alpha, formatted=formatted)
        names = ("target_low", "target_medium", "target_high")
        metrics = {f"{self.namespace}/{n}": float(t or 0) for n, t in zip(names, chosen, strict=True)}
        return flow.with_channel(reward, _laser_range(cfg.base, cfg.alpha)).but(metrics=metrics), dict(state)


@dataclass(frozen=True)
class AalcReward(Holds):
    """AALC's reward alpha_t c + c_len R_len under the last validation accuracy (`dynashape.methods.aalc_reward`;
    1[correct] before the first validation). AALC's schedule and its length term read the same accuracy, so
    the method stays one part. State ``{"val_accuracy": float | None}``, set by
    ``observe(validation_accuracy=a)``. Logs val_accuracy and alpha once known."""

    config: AalcConfig
    namespace: str = "aalc"
    state_key: str | None = "schedule"
    observes: ClassVar[tuple[str, ...]] = ("validation_accuracy",)

    def fresh(self) -> AalcSchedule:
        return AalcSchedule(self.config)

    def observe(self, state: Mapping[str, Any], *, validation_accuracy: float) -> dict[str, Any]:
        schedule = self.held(state)
        schedule.observe_validation(validation_accuracy)
        return schedule.state_dict()

    def update(self, flow: Flow, state: Mapping[str, Any]) -> tuple[Flow, dict[str, Any]]:
        schedule = self.held(state)
        cfg = self.config
        b = flow.batch
        reward = aalc_reward(b.correct, b.lengths, val_accuracy=schedule.val_accuracy_, beta=cfg.beta, c=cfg.c,
                             l_max=cfg.l_max, a_target=cfg.a_target, precision=cfg.precision)  # fmt: skip
        metrics = {f"{self.namespace}/{k.partition('/')[2]}": v for k, v in schedule.metrics.items()}
        return flow.with_channel(reward, _FREE).but(metrics=metrics), dict(state)
