"""Reward channel parts: each appends one or more raw reward columns [N] to the flow (stateless).

A channel declares its value range (R_min, R_max), which controllers that need it read (LEAD's potential), and
the rollouts its batch statistics read (LEAD's efficiency channel: the correct ones).
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.core.groups import group_count, group_mean, group_min
from dynashape.methods.lead.efficiency import efficiency_reward, target_lengths
from dynashape.shapers._common import F64, metrics_dict
from dynashape.shapers.parts.flow import Flow, Stateless

__all__ = [
    "Correctness",
    "DistanceToShortest",
    "EfficiencyMetrics",
    "GradedCorrectness",
    "LeadEfficiency",
    "LengthWithin",
    "RewardColumns",
    "ScalarReward",
]


@dataclass(frozen=True)
class Correctness(Stateless):
    """c_i in {0, 1}: the verifier's verdict (range [0, 1])."""

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        return flow.with_channel(flow.batch.correct.to(F64), (0.0, 1.0)), None


@dataclass(frozen=True)
class ScalarReward(Stateless):
    """GRPO's one scalar reward: the batch's single ``rewards`` column when given (more columns are refused),
    else correctness as 0/1."""

    namespace: str = "grpo"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        rewards = flow.batch.rewards
        if rewards is None:
            return flow.with_channel(flow.batch.correct.to(F64), (0.0, 1.0)), None
        if rewards.shape[1] != 1:
            raise ValueError(
                f"shaper {self.namespace!r} takes one reward column, got rewards of shape {tuple(rewards.shape)}; "
                "use gdpo for several"
            )
        return flow.with_channel(rewards[:, 0].to(F64), (float("-inf"), float("inf"))), None


@dataclass(frozen=True)
class RewardColumns(Stateless):
    """Every column of the batch's ``rewards`` [N, K] as a channel.

    ranges: the declared (R_min, R_max) of each column; () when no controller reads them (the columns' count
    is then free). required: refuse a batch without ``rewards`` (GDPO); otherwise a batch without them adds
    nothing. metrics: log ``namespace/reward_mean_j`` of each column. declared: `ranges` is the method's whole
    declaration (LEAD's ``reward_ranges``): a batch must carry exactly that many columns, none when it is empty.
    """

    namespace: str = "gdpo"
    ranges: tuple[tuple[float, float], ...] = ()
    required: bool = True
    metrics: bool = True
    declared: bool = False

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        rewards = flow.batch.rewards
        if self.declared:
            self._check_declared(rewards)
        if rewards is None:
            if self.required:
                raise ValueError(f"shaper {self.namespace!r} needs rewards [N, K] in the batch, got rewards=None")
            return flow, None
        if self.ranges and rewards.shape[1] != len(self.ranges):
            raise ValueError(
                f"{self.namespace} reward_ranges declares {len(self.ranges)} extra channels but batch rewards "
                f"has shape {tuple(rewards.shape)}"
            )
        cols = rewards.to(F64)
        free = (float("-inf"), float("inf"))
        for j in range(cols.shape[1]):  # K columns (a handful), never rollouts
            flow = flow.with_channel(cols[:, j], self.ranges[j] if self.ranges else free)
        if self.metrics:
            k = cols.shape[1]
            names = [f"reward_mean_{j}" for j in range(k)]
            flow = flow.but(metrics=metrics_dict(self.namespace, names, list(cols.mean(0).unbind())))
        return flow, None

    def _check_declared(self, rewards: torch.Tensor | None) -> None:
        if self.ranges and (rewards is None or rewards.shape[1] != len(self.ranges)):
            got = None if rewards is None else tuple(rewards.shape)
            raise ValueError(
                f"{self.namespace} reward_ranges declares {len(self.ranges)} extra channels but batch rewards "
                f"has shape {got}"
            )
        if not self.ranges and rewards is not None:
            raise ValueError(
                f"shaper {self.namespace!r} got rewards of shape {tuple(rewards.shape)} but reward_ranges is empty; "
                "declare each column's [R_min, R_max] in reward_ranges to use them as channels"
            )


@dataclass(frozen=True)
class GradedCorrectness(Stateless):
    """SAW's official channel 0: a graded correctness column of ``batch.rewards`` in [-3, 3] (ToolRL's score,
    `dynashape.methods.saw.graded_correctness`), then the batch's other reward columns as further channels."""

    column: int = 0
    namespace: str = "saw"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        from dynashape.methods.saw import GRADED_RANGE, graded_correctness

        rewards = flow.batch.rewards
        if rewards is None:
            raise ValueError(
                f"shaper {self.namespace!r} reads its graded correctness from rewards[:, {self.column}], "
                "got rewards=None"
            )
        graded, others = graded_correctness(rewards, self.column)
        flow = flow.with_channel(graded, GRADED_RANGE)
        free = (float("-inf"), float("inf"))
        for j in range(others.shape[1]):  # K columns (a handful), never rollouts
            flow = flow.with_channel(others[:, j], free)
        return flow, None


@dataclass(frozen=True)
class LengthWithin(Stateless):
    """1[l <= threshold] ("classic"), or 1[correct and l <= threshold] ("conditioned"); range [0, 1]."""

    threshold: float
    conditioned: bool = False

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch = flow.batch
        within = (batch.lengths <= self.threshold).to(F64)
        column = within * batch.correct.to(F64) if self.conditioned else within
        return flow.with_channel(column, (0.0, 1.0)), None


@dataclass(frozen=True)
class DistanceToShortest(Stateless):
    """ShorterBetter's length channel -|l - SOL_q|: SOL_q is the group's shortest correct length, or its mean
    length when none is correct (arXiv 2504.21370). Logs ``namespace/sol_mean``."""

    namespace: str = "shorterbetter"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch, groups = flow.batch, flow.groups
        length = batch.lengths.to(F64)
        solved = group_count(groups, batch.correct) > 0
        sol = torch.where(solved, group_min(length, groups, batch.correct), group_mean(length, groups))
        # Negated so that a positive weight beta gives alpha * c - beta * |l - SOL| (x + (-y) == x - y exactly).
        distance = -(length - groups.gather(sol)).abs()
        flow = flow.with_channel(distance, (float("-inf"), 0.0))
        return flow.but(metrics={f"{self.namespace}/sol_mean": float(sol.mean())}), None


@dataclass(frozen=True)
class LeadEfficiency(Stateless):
    """LEAD's efficiency channel r_l (arXiv 2605.09806; docs/algorithms.md "LEAD"): the per-prompt target L*_q
    from the correct rollouts' lengths (clamped to [l_min, b_max], b_max on an unsolved prompt), then
    r_l = max(-1, 1 - |l - L*| / L*) (symmetric) or max(-1, min(0, 1 - l / L*)) (upper_only); range [-1, 1].

    Its batch statistics read the correct rollouts only. Keeps the targets as ``values["targets"]`` [G] and
    logs LEAD's target metrics (docs/algorithms.md "LEAD") under `namespace` (`EfficiencyMetrics` logs r_l's).
    """

    l_min: float = 1000
    b_max: float = 4000
    target: str = "mean_correct"
    efficiency: str = "symmetric"
    namespace: str = "lead"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch, groups = flow.batch, flow.groups
        correct = batch.correct
        targets = target_lengths(
            batch.lengths,
            correct,
            groups,
            mode=self.target,  # type: ignore[arg-type]
            l_min=self.l_min,
            b_max=self.b_max,
        )
        efficiency = efficiency_reward(batch.lengths, groups.gather(targets), mode=self.efficiency)  # type: ignore[arg-type]
        flow = flow.with_channel(efficiency, (-1.0, 1.0), stats_mask=correct)
        n_correct = group_count(groups, correct)
        names = ["target_len_mean", "target_len_min", "target_len_max", "unsolved_frac", "solved_all_frac"]
        values = [targets.mean(), targets.min(), targets.max(), (n_correct == 0).to(F64).mean(),
                  (n_correct == groups.counts).to(F64).mean()]  # fmt: skip
        column = flow.require("channels", "LeadEfficiency").shape[1] - 1
        flow = flow.but(values={"targets": targets, "efficiency_column": column})
        return flow.but(metrics=metrics_dict(self.namespace, names, values)), None


@dataclass(frozen=True)
class EfficiencyMetrics(Stateless):
    """Logs LEAD's efficiency_mean (r_l over all rollouts) and efficiency_correct_mean (over correct ones, 0
    when none is) under `namespace`. Place it after the last channel part: it reads r_l as a column of the
    finished channels matrix, the strided view LEAD's metrics have always read (torch reduces a view of
    another stride, or a contiguous copy, in another order, which changes the mean's last bit)."""

    namespace: str = "lead"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        r_l = flow.require("channels", "EfficiencyMetrics")[:, flow.values["efficiency_column"]]
        correct = flow.batch.correct
        # Mean r_l over correct rollouts; 0 when none is correct (as the official metric).
        eff_correct = (r_l * correct).sum() / correct.sum().clamp_min(1)
        names = ["efficiency_mean", "efficiency_correct_mean"]
        return flow.but(metrics=metrics_dict(self.namespace, names, [r_l.mean(), eff_correct])), None
