"""What every world gives the trainer, the evaluation, the audit and the study: the ``World`` interface.

A world is data plus, where it has one, a generator: problems with their metadata (difficulty, hidden traits,
which error modes each invites), split into train / validation / test; a teacher that writes warm-up traces
(the chain world; a real dataset has none); a labeller that names the mode of a wrong answer (evaluation only);
and the world's own metrics of sampled responses. Nothing above this layer asks which world it has.
"""

from __future__ import annotations

import random
from abc import ABC, abstractmethod
from collections.abc import Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any, NamedTuple

import numpy as np

__all__ = ["BOXED_INSTRUCTION", "SPLITS", "Problem", "Samples", "Splits", "World"]

BOXED_INSTRUCTION = "\nPlease reason step by step, and put your final answer within \\boxed{}."
"""The suffix that asks a real model for a boxed answer (the prompt the LEAD and MEDS recipes use)."""
SPLITS: tuple[str, ...] = ("train", "validation", "test")


@dataclass(frozen=True)
class Problem:
    """One problem: the prompt the policy sees, the gold answer, and the world's metadata.

    ``operands``, ``ops`` and ``group`` describe a chain problem (``group`` is the index i of the first operand
    of the parenthesised pair ``(operands[i] ops[i] operands[i+1])`` on trap prompts, then ``ops[i-1] == "-"``,
    else None). ``verbosity`` is the problem's trait (hidden from the methods; the phrasing of the prompt shows
    it). Problems of a real dataset have no operands and an empty trait. ``budget`` is set only on prompts that
    name a token budget (``world.budget_prompts``, off by default).
    """

    prompt: str
    answer: str
    difficulty: int
    key: str
    operands: tuple[int, ...] = ()
    ops: tuple[str, ...] = ()
    group: int | None = None
    verbosity: str = ""
    budget: int | None = None
    """The token budget the prompt asks for (L1's "Think for N tokens."), or None when it asks for none
    (``world.budget_prompts``)."""

    @property
    def is_trap(self) -> bool:
        """A prompt built to invite a recurring error mode (the chain world's parenthesised pair)."""
        return self.group is not None


class Splits(NamedTuple):
    """Disjoint problem splits: train (warm-up and RL prompts), validation (tuning), test (held out)."""

    train: list[Problem]
    validation: list[Problem]
    test: list[Problem]


@dataclass
class Samples:
    """``n`` sampled responses per problem, flattened problem-major (row ``i * n + j`` = problem i, draw j).

    Attributes:
        problems: the problems, one per row.
        texts: decoded responses.
        correct: bool [R], verdict and not truncated.
        lengths: int [R], response tokens (EOS included).
        truncated: bool [R], no EOS within the cap.
        fingerprints: float [R, layers] MEDS fingerprints of the wrong responses with a boxed answer (NaN
            elsewhere), or None when not asked for.
    """

    problems: list[Problem]
    texts: list[str]
    correct: np.ndarray
    lengths: np.ndarray
    truncated: np.ndarray
    fingerprints: np.ndarray | None


class World(ABC):
    """A source of problems and the knowledge of them that evaluation may use (never the reward)."""

    name: str = "world"
    """Short name, recorded with every run."""
    prompt_suffix: str = ""
    """Appended to every prompt unless the run's prompt config says otherwise."""
    labels_errors: bool = False
    """True when ``error_mode`` names the modes of wrong answers (then evaluation also takes the wrong answers'
    MEDS fingerprints, for the world's diversity metrics)."""

    @abstractmethod
    def splits(self) -> Splits:
        """The world's train / validation / test problems (validation may be empty)."""

    def split(self, name: str) -> list[Problem]:
        """One split by name; a clear error for an empty one."""
        if name not in SPLITS:
            raise ValueError(f"split must be one of {SPLITS}, got {name!r}")
        problems = getattr(self.splits(), name)
        if not problems:
            raise ValueError(f"split {name!r}: the {self.name} world has none")
        return problems

    def identity(self) -> dict[str, Any] | None:
        """What determines a base model warmed up on this world (it keys the cache); None without a teacher."""
        return None

    def build_tokenizer(self) -> Any:
        """The tokenizer a warmed-up base model of this world uses (worlds with a teacher only)."""
        raise ValueError(f"the {self.name} world has no tokenizer of its own: give a model (--model)")

    def teacher_trace(self, problem: Problem, rng: random.Random) -> str:
        """One warm-up trace of ``problem`` (worlds with a teacher only)."""
        raise ValueError(f"the {self.name} world has no teacher: give a model (--model) instead of a warm-up")

    def shipped_base(self) -> Path | None:
        """The folder of the base model that ships with this world, or None."""
        return None

    def shipped_bases(self) -> tuple[Path, ...]:
        """Every base model folder that ships with this world (each with its manifest's key): ``shipped_base()``
        and any others (a base warmed up with other settings)."""
        base = self.shipped_base()
        return () if base is None else (base,)

    def error_mode(self, problem: Problem, response: str) -> str:
        """The mode of a wrong response ("" when right): evaluation only (worlds with ``labels_errors``)."""
        raise ValueError(f"the {self.name} world has no error labeller")

    def stats(self, samples: Samples) -> dict[str, Any]:
        """The world's own metrics of sampled responses (JSON-ready); {} for a world without them."""
        return {}

    def passk_subset(self, problems: Sequence[Problem], n_hard: int, n_trap: int) -> list[Problem]:
        """A fixed subset for pass@k at large k; [] for a world without one."""
        return []
