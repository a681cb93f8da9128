"""The length rewards engines and papers already ship, as reward channels (stateless): cosine, Kimi k1.5's,
prime-rl's pass-rate penalty, GRPO-LEAD's z-score; and `SumRewardColumns`, the batch's further reward terms added
onto the method's reward as TRL sums its reward functions (``reward_weights`` 1 each).

Each writes one channel [N], its method's whole reward (the maths in `dynashape.methods`: `cosine`, `kimi`,
`pass_rate`, `length_zscore`), and logs the one number of its own that the method reports under `namespace`; a
`GroupNormalise` after them gives GRPO's advantages and the reward's metrics.
"""

from __future__ import annotations

from dataclasses import dataclass

import torch

from dynashape.methods.cosine import cosine_length_reward
from dynashape.methods.kimi import kimi_length_reward
from dynashape.methods.length_zscore import length_zscore_reward
from dynashape.methods.pass_rate import pass_rate_linear_penalty
from dynashape.shapers._common import F64, metrics_dict
from dynashape.shapers.parts.flow import Flow, Stateless

__all__ = ["CosineLength", "KimiLength", "LengthZscore", "PassRateLinear", "SumRewardColumns"]

FREE = (float("-inf"), float("inf"))


@dataclass(frozen=True)
class CosineLength(Stateless):
    """r = `cosine_length_reward` of the verdict and the length. Logs ``beyond_max_len_frac``, the share of
    rollouts with l >= max_len."""

    min_value_wrong: float
    max_value_wrong: float
    min_value_correct: float
    max_value_correct: float
    max_len: float
    exceed_length: float | None = None
    exceed_margin: float = 0.0
    namespace: str = "cosine"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch = flow.batch
        reward = cosine_length_reward(
            batch.correct,
            batch.lengths,
            min_value_wrong=self.min_value_wrong,
            max_value_wrong=self.max_value_wrong,
            min_value_correct=self.min_value_correct,
            max_value_correct=self.max_value_correct,
            max_len=self.max_len,
            exceed_length=self.exceed_length,
            exceed_margin=self.exceed_margin,
        )
        beyond = (batch.lengths.to(F64) >= self.max_len).to(F64).mean()
        flow = flow.with_channel(reward, FREE)
        return flow.but(metrics=metrics_dict(self.namespace, ["beyond_max_len_frac"], [beyond])), None


@dataclass(frozen=True)
class KimiLength(Stateless):
    """r = c + weight * `kimi_length_reward` (one channel: the sum is the method's reward, in this order).
    Logs ``length_reward_mean``."""

    weight: float = 1.0
    namespace: str = "kimi_length"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch = flow.batch
        length_reward = kimi_length_reward(batch.correct, batch.lengths, flow.groups)
        reward = batch.correct.to(F64) + self.weight * length_reward
        flow = flow.with_channel(reward, FREE)
        return flow.but(metrics=metrics_dict(self.namespace, ["length_reward_mean"], [length_reward.mean()])), None


@dataclass(frozen=True)
class PassRateLinear(Stateless):
    """r = c - `pass_rate_linear_penalty`. Logs ``penalty_mean``."""

    coef: float = 0.25
    budget: float = 2048
    only_correct: bool = False
    scale: str = "budget"
    namespace: str = "pass_rate_linear"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch = flow.batch
        penalty = pass_rate_linear_penalty(
            batch.correct,
            batch.lengths,
            flow.groups,
            coef=self.coef,
            budget=self.budget,
            only_correct=self.only_correct,
            scale=self.scale,
        )
        flow = flow.with_channel(batch.correct.to(F64) - penalty, FREE)
        return flow.but(metrics=metrics_dict(self.namespace, ["penalty_mean"], [penalty.mean()])), None


@dataclass(frozen=True)
class LengthZscore(Stateless):
    """r = `length_zscore_reward`. Logs ``correct_reward_mean``, the mean reward of the correct rollouts (0 when
    none is correct)."""

    alpha: float = 0.05
    wrong_reward: float = -1.0
    z_eps: float = 1e-6
    namespace: str = "length_zscore"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        batch, correct = flow.batch, flow.batch.correct
        reward = length_zscore_reward(
            correct, batch.lengths, flow.groups, alpha=self.alpha, wrong_reward=self.wrong_reward, z_eps=self.z_eps
        )
        mean = torch.where(correct, reward, 0.0).sum() / correct.sum().clamp_min(1)
        flow = flow.with_channel(reward, FREE)
        return flow.but(metrics=metrics_dict(self.namespace, ["correct_reward_mean"], [mean])), None


@dataclass(frozen=True)
class SumRewardColumns(Stateless):
    """r_0 + sum_j rewards[:, j]: the batch's further reward terms (format, DAPO's overlong, ...) added onto
    channel 0 with weight 1, as TRL sums its reward functions; a batch without ``rewards`` adds nothing."""

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        rewards = flow.batch.rewards
        if rewards is None:
            return flow, None
        channels = flow.require("channels", "SumRewardColumns").clone()
        channels[:, 0] = channels[:, 0] + rewards.to(F64).sum(dim=1)
        return flow.but(channels=channels, ranges=(FREE, *flow.ranges[1:])), None
