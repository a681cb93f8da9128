"""Pieces several shapers share: the whitening switch, float64 inputs, tidy metrics."""

from __future__ import annotations

from typing import Literal

import torch

from dynashape.core.batch import RolloutBatch
from dynashape.core.groups import Groups, group_max, group_min, whiten
from dynashape.methods._inputs import WHITEN_MODES

__all__ = ["F64", "WHITEN_MODES", "batch_whiten", "metrics_dict", "reject_rewards", "zero_advantage_frac"]

WhitenMode = Literal["token", "sequence", "none"]
F64 = torch.float64


def batch_whiten(
    advantages: torch.Tensor, lengths: torch.Tensor, mode: WhitenMode, *, eps: float = 1e-8
) -> torch.Tensor:
    """BatchWhiten per `mode`: "token" weights rollouts by length (verl's masked_whiten over the response
    mask), "sequence" weights them equally (TRL), "none" returns the input. eps sits inside the square root."""
    if mode == "token":
        return whiten(advantages, lengths, eps=eps)
    if mode == "sequence":
        return whiten(advantages, eps=eps)
    return advantages


def reject_rewards(name: str, batch: RolloutBatch) -> None:
    """Shapers that do not read `rewards` refuse them rather than silently ignoring a channel."""
    if batch.rewards is not None:
        raise ValueError(
            f"shaper {name!r} does not use rewards (got shape {tuple(batch.rewards.shape)}); "
            "use gdpo or lead with reward_ranges for extra channels"
        )


def require_rewards(name: str, batch: RolloutBatch) -> torch.Tensor:
    if batch.rewards is None:
        raise ValueError(f"shaper {name!r} needs rewards [N, K] in the batch, got rewards=None")
    return batch.rewards.to(F64)


def zero_advantage_frac(values: torch.Tensor, groups: Groups) -> torch.Tensor:
    """Share of rollouts whose group has one distinct reward (they get advantage 0)."""
    constant = group_max(values, groups) == group_min(values, groups)
    return groups.gather(constant).to(F64).mean()


def metrics_dict(prefix: str, names: list[str], values: list[torch.Tensor]) -> dict[str, float]:
    """Namespaced float metrics from 0-d tensors, with one host transfer for all of them."""
    stacked = torch.stack([v.detach().to(F64).reshape(()) for v in values]).cpu().tolist()
    return {f"{prefix}/{n}": float(x) for n, x in zip(names, stacked, strict=True)}
