"""Normalisation parts (stateless): they turn the weighted channels into advantages [N].

- `GroupNormalise`: scalarise r = sum_k w_k r_k, then GRPO's (r - mean_q r) / (std_q r + eps) per group.
- `DecoupledNormalise`: GDPO's sum_k w_k (r_k - mean_q r_k) / (std_q r_k + eps), each channel in its own group.
- `BatchWhiten`: (A - mu) / sqrt(var + 1e-8) over the batch, by token or by sequence.
- `BaselineWhiten`: REINFORCE++-baseline, whiten(r - mean_q r) (DLER).
- `Float32GroupNormalise`: GRPO in float32 as AALC's verl computes it (a group of one: r / (1 + eps)).
- `AdvantageAbsMean`: a probe that logs mean |A|.
"""

from __future__ import annotations

from dataclasses import dataclass
from typing import Literal

import torch

from dynashape.core.groups import Groups, group_normalize
from dynashape.methods.aalc import aalc_grpo_float32
from dynashape.methods.dler import dler_advantages
from dynashape.shapers._common import F64, batch_whiten, metrics_dict, zero_advantage_frac
from dynashape.shapers.parts.flow import Flow, Stateless

__all__ = [
    "AdvantageAbsMean",
    "BaselineWhiten",
    "BatchWhiten",
    "DecoupledNormalise",
    "Float32GroupNormalise",
    "GroupNormalise",
    "kept_group_normalize",
    "weighted_sum",
]

SumOrder = Literal["columns", "matmul"]


def weighted_sum(values: torch.Tensor, weights: torch.Tensor, *, order: SumOrder = "columns") -> torch.Tensor:
    """sum_k w_k x_k of values [N, K] with weights [K]. Returns [N].

    The two orders are the same sum; they may differ in the last bit from five channels on (the matrix-vector
    product then adds in another order), so each method keeps the order of its reference code: "columns" adds
    w_0 x_0 + w_1 x_1 + ... column by column (GDPO's loop, the scalarised rewards), "matmul" is one
    matrix-vector product (LEAD's official code).
    """
    if order == "matmul":
        return values @ weights
    total = weights[0] * values[:, 0]
    for k in range(1, values.shape[1]):  # K channels (a handful), never rollouts
        total = total + weights[k] * values[:, k]
    return total


def kept_group_normalize(
    values: torch.Tensor, groups: Groups, keep: torch.Tensor, *, std: str = "unbiased", eps: float = 1e-6
) -> torch.Tensor:
    """GRPO normalisation over the kept rows of each group only (GFPO Eq. 2: mean_S and std_S of the kept set
    S), exactly 0 on the dropped rows. values: float [N]; keep: BoolTensor [N]. Returns [N]."""
    rows = torch.nonzero(keep).squeeze(1)
    kept_groups = Groups.from_ids(groups.index.index_select(0, rows))
    normalised = group_normalize(values.index_select(0, rows), kept_groups, std=std, eps=eps)  # type: ignore[arg-type]
    return torch.zeros_like(values).index_copy_(0, rows, normalised)


def scalarise(flow: Flow, part: str, order: SumOrder = "columns") -> torch.Tensor:
    """The flow's channels as one reward [N]: sum_k w_k r_k, or the only channel when no weights were set."""
    channels = flow.require("channels", part)
    if flow.weights is None:
        if channels.shape[1] != 1:
            raise ValueError(f"{part} got {channels.shape[1]} channels and no weights to sum them")
        return channels[:, 0]
    return weighted_sum(channels, flow.weights, order=order)


@dataclass(frozen=True)
class GroupNormalise(Stateless):
    """GRPO on the scalarised reward r = sum_k w_k r_k (the only channel when no weights were set).

    std "unbiased" divides by the group's Bessel std + eps, "none" only centres (Dr. GRPO). When a filter set
    the flow's ``keep``, the statistics are those of each group's kept rows and a dropped row gets 0 (GFPO).
    Logs reward_mean, reward_std (population), advantage_abs_mean and zero_advantage_frac under `namespace`;
    the flow's ``reward`` becomes the scalar reward (the shaped reward the shaper reports). `order`: see
    `weighted_sum`.
    """

    std: str = "unbiased"
    eps: float = 1e-6
    namespace: str = "grpo"
    order: SumOrder = "columns"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = scalarise(flow, "GroupNormalise", self.order)
        if flow.keep is None:
            adv = group_normalize(reward, flow.groups, std=self.std, eps=self.eps)  # type: ignore[arg-type]
        else:
            adv = kept_group_normalize(reward, flow.groups, flow.keep, std=self.std, eps=self.eps)
        metrics = metrics_dict(
            self.namespace,
            ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac"],
            [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, flow.groups)],
        )
        return flow.but(reward=reward, advantages=adv, metrics=metrics), None


@dataclass(frozen=True)
class Float32GroupNormalise(Stateless):
    """GRPO on the single reward channel in float32, as the verl of AALC's repository computes it
    (`dynashape.methods.aalc_grpo_float32`): (r - mean) / (Bessel std + eps) per group, a group of one r / (1 + eps).
    Its rounding is part of AALC's official numbers (the all-correct group's std is ~1e-7). Logs as
    `GroupNormalise`."""

    eps: float = 1e-6
    namespace: str = "grpo"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = scalarise(flow, "Float32GroupNormalise")
        adv = aalc_grpo_float32(reward, flow.groups, eps=self.eps)
        metrics = metrics_dict(
            self.namespace,
            ["reward_mean", "reward_std", "advantage_abs_mean", "zero_advantage_frac"],
            [reward.mean(), reward.std(unbiased=False), adv.abs().mean(), zero_advantage_frac(reward, flow.groups)],
        )
        return flow.but(reward=reward, advantages=adv, metrics=metrics), None


@dataclass(frozen=True)
class DecoupledNormalise(Stateless):
    """GDPO's decoupled normalisation (NVlabs, arXiv 2601.05242; LEAD section 3): every channel GRPO-normalised
    in its own group (Bessel std + eps), then sum_k w_k A_k in the given `order` (see `weighted_sum`).
    Keeps the per-channel advantages [N, K] as ``values["channel_advantages"]``."""

    eps: float = 1e-6
    order: SumOrder = "columns"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        channels = flow.require("channels", "DecoupledNormalise")
        weights = flow.weights
        if weights is None:
            weights = torch.ones(channels.shape[1], dtype=F64, device=channels.device)
        channel_adv = group_normalize(channels, flow.groups, eps=self.eps)
        combined = weighted_sum(channel_adv, weights, order=self.order)
        return flow.but(advantages=combined, values={"channel_advantages": channel_adv}), None


@dataclass(frozen=True)
class BatchWhiten(Stateless):
    """BatchWhiten (A - mu) / sqrt(var + 1e-8): "token" weights each rollout by its length (verl's
    masked_whiten), "sequence" weights rollouts equally (TRL), "none" leaves A as it is."""

    mode: str = "token"
    eps: float = 1e-8

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        adv = flow.require("advantages", "BatchWhiten")
        whitened = batch_whiten(adv, flow.batch.lengths, self.mode, eps=self.eps)  # type: ignore[arg-type]
        return flow.but(advantages=whitened), None


@dataclass(frozen=True)
class BaselineWhiten(Stateless):
    """REINFORCE++ with a group baseline (verl's ``reinforce_plus_plus_baseline``, DLER Eq. 3):
    A = whiten(r - mean_q r) over the batch, by token ("token") or by rollout ("sequence"); a group of one
    rollout is not centred (its mean is taken as 0, as verl). The flow's ``reward`` becomes the scalar reward."""

    mode: str = "token"
    eps: float = 1e-8
    namespace: str = "dler"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        reward = scalarise(flow, "BaselineWhiten")
        lengths = flow.batch.lengths if self.mode == "token" else None
        adv = dler_advantages(reward, flow.groups, lengths, eps=self.eps)
        metrics = metrics_dict(self.namespace, ["reward_mean", "advantage_abs_mean"], [reward.mean(), adv.abs().mean()])
        return flow.but(reward=reward, advantages=adv, metrics=metrics), None


@dataclass(frozen=True)
class AdvantageAbsMean(Stateless):
    """Logs ``namespace/advantage_abs_mean``, the mean |A| of the advantages so far."""

    namespace: str = "gdpo"

    def update(self, flow: Flow, state: None) -> tuple[Flow, None]:
        adv = flow.require("advantages", "AdvantageAbsMean")
        return flow.but(metrics=metrics_dict(self.namespace, ["advantage_abs_mean"], [adv.abs().mean()])), None
