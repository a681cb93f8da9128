"""The training prompts a run draws: an endless seeded pass over the problems, resumable from its position."""

from __future__ import annotations

import random
from collections.abc import Sequence

from dynashape.world.base import Problem

__all__ = ["PromptStream"]


class PromptStream:
    """Endless seeded pass over the training problems: epoch e visits a permutation drawn from (seed, e).

    The position (epoch, index) is all its state, so a resumed run draws the same prompts.
    """

    def __init__(self, problems: Sequence[Problem], seed: int) -> None:
        if not problems:
            raise ValueError("problems must not be empty")
        self.problems = problems
        self.seed = seed
        self.epoch = 0
        self.index = 0
        self._order = self._permutation(0)

    def _permutation(self, epoch: int) -> list[int]:
        return random.Random(f"prompts-{self.seed}-{epoch}").sample(range(len(self.problems)), len(self.problems))

    def take(self, count: int) -> list[Problem]:
        out = []
        for _ in range(count):
            if self.index == len(self._order):
                self.epoch, self.index = self.epoch + 1, 0
                self._order = self._permutation(self.epoch)
            out.append(self.problems[self._order[self.index]])
            self.index += 1
        return out

    def state_dict(self) -> dict[str, int]:
        return {"epoch": self.epoch, "index": self.index}

    def load_state_dict(self, state: dict[str, int]) -> None:
        self.epoch, self.index = int(state["epoch"]), int(state["index"])
        self._order = self._permutation(self.epoch)
