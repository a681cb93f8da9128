"""The reward columns a preset hands its shaper as ``RolloutBatch.rewards`` (``TrainConfig.reward_columns``;
the names are ``config.REWARD_COLUMNS``)."""

from __future__ import annotations

from collections.abc import Callable, Sequence

import torch

from dynashape.train.config import TrainConfig

__all__ = ["reward_columns"]


def reward_columns(
    names: Sequence[str], correct: torch.Tensor, lengths: torch.Tensor, cfg: TrainConfig
) -> torch.Tensor | None:
    """The ``RolloutBatch.rewards`` columns a preset asks for, [N, K] float32, or None for ``()``."""
    if not names:
        return None
    c = correct.float()
    columns: dict[str, Callable[[], torch.Tensor]] = {
        "correct": lambda: c,
        "overlong": lambda: _overlong(lengths, cfg),
        "correct_overlong": lambda: c + _overlong(lengths, cfg),
        "correct_short": lambda: c * (lengths <= cfg.length_threshold).float(),
    }
    return torch.stack([columns[name]() for name in names], dim=1)


def _overlong(lengths: torch.Tensor, cfg: TrainConfig) -> torch.Tensor:
    from dynashape.rewards.length import overlong_penalty

    return overlong_penalty(lengths, cfg.max_new_tokens, cfg.overlong.buffer, cfg.overlong.factor).float()
