"""Worlds: where problems come from and what is known about them (``World``), below the trainer and the study.

``get_world(task, data_path)`` is the one place that picks a world: a real dataset (``DatasetWorld``, no teacher)
when ``data_path`` is given, else the chain world of ``task`` (``ChainWorld``).
"""

from __future__ import annotations

from dynashape.world.base import BOXED_INSTRUCTION, Problem, Samples, Splits, World
from dynashape.world.chain import ChainTaskConfig, ChainWorld
from dynashape.world.datasets import DatasetWorld

__all__ = [
    "BOXED_INSTRUCTION",
    "ChainTaskConfig",
    "ChainWorld",
    "DatasetWorld",
    "Problem",
    "Samples",
    "Splits",
    "World",
    "get_world",
]


def get_world(task: ChainTaskConfig | None = None, data_path: str | None = None) -> World:
    """The world of a run: the dataset at ``data_path`` (split with ``task.seed``), else the chain world."""
    task = task or ChainTaskConfig()
    if data_path is not None:
        return DatasetWorld(data_path, seed=task.seed)
    return ChainWorld(task)
