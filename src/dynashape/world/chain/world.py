"""``ChainWorld``: the chain-arithmetic world behind the ``World`` interface, with its shipped base model."""

from __future__ import annotations

import dataclasses
import random
from collections.abc import Sequence
from functools import cached_property
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.world.base import Problem, Samples, Splits, World
from dynashape.world.chain.config import ERROR_MODES, WORLD_VERSION, ChainTaskConfig
from dynashape.world.chain.generator import world_splits
from dynashape.world.chain.labels import error_mode, is_shortcut
from dynashape.world.chain.teacher import teacher_trace

__all__ = ["BASE_MODEL_DIR", "BUDGET_BASE_MODEL_DIR", "ChainWorld", "hard_subset", "world_stats"]

BASE_MODEL_DIR = Path(__file__).with_name("base_model")
"""The shipped base model of the default chain world (``dynashape warmup`` rebuilds it)."""
BUDGET_BASE_MODEL_DIR = Path(__file__).with_name("base_model_budget")
"""The shipped base that tolerates a budget prompt (``warmup.BASES["budget"]``; ``dynashape warmup --base budget``
rebuilds it)."""


class ChainWorld(World):
    """Chain arithmetic where length and repeated errors matter (docs/world.md): W1-W7 by construction."""

    name = WORLD_VERSION
    labels_errors = True

    def __init__(self, cfg: ChainTaskConfig | None = None) -> None:
        self.cfg = cfg or ChainTaskConfig()

    @cached_property
    def _splits(self) -> Splits:
        return world_splits(self.cfg)

    def splits(self) -> Splits:
        return self._splits

    def identity(self) -> dict[str, Any]:
        return dataclasses.asdict(self.cfg)

    def build_tokenizer(self) -> Any:
        from dynashape.world.chain.tokenizer import build_char_tokenizer

        return build_char_tokenizer()

    def teacher_trace(self, problem: Problem, rng: random.Random) -> str:
        return teacher_trace(problem, rng, self.cfg).text

    def shipped_base(self) -> Path | None:
        return BASE_MODEL_DIR if (BASE_MODEL_DIR / "manifest.json").is_file() else None

    def shipped_bases(self) -> tuple[Path, ...]:
        budget = BUDGET_BASE_MODEL_DIR if (BUDGET_BASE_MODEL_DIR / "manifest.json").is_file() else None
        return tuple(d for d in (self.shipped_base(), budget) if d is not None)

    def error_mode(self, problem: Problem, response: str) -> str:
        return error_mode(problem, response)

    def stats(self, samples: Samples) -> dict[str, Any]:
        return world_stats(samples)

    def passk_subset(self, problems: Sequence[Problem], n_hard: int, n_trap: int) -> list[Problem]:
        return hard_subset(problems, n_hard, n_trap)


def hard_subset(problems: Sequence[Problem], n_hard: int, n_trap: int) -> list[Problem]:
    """A fixed subset for pass@k at large k: the first ``n_hard`` problems of the hardest difficulty and the
    first ``n_trap`` trap prompts (of any difficulty, not already taken), in the split's order."""
    hardest = max(p.difficulty for p in problems)
    hard = [p for p in problems if p.difficulty == hardest][:n_hard]
    trap = [p for p in problems if p.is_trap and p not in hard][:n_trap]
    return hard + trap


def _none_if_nan(x: float) -> float | None:
    """JSON has no NaN: an undefined value (no wrong answer, a single fingerprint) is stored as null."""
    return None if x != x else x


def world_stats(s: Samples) -> dict[str, Any]:
    """Shortcut rate (overall and ``shortcut_per_difficulty``), error modes, mode entropy and the wrong answers'
    eigen ratio of chain-world samples."""
    from dynashape.world.measures import mean_by, mode_entropy, wrong_eigen_ratio

    toy = [i for i, p in enumerate(s.problems) if p.operands]
    if not toy:
        return {}
    shortcut = [float(is_shortcut(s.texts[i])) for i in toy]
    modes = ["" if s.correct[i] else error_mode(s.problems[i], s.texts[i]) or "other" for i in toy]
    wrong = [m for m in modes if m]
    out: dict[str, Any] = {
        "shortcut_frac": sum(shortcut) / len(shortcut),
        "shortcut_per_difficulty": mean_by(shortcut, [s.problems[i].difficulty for i in toy]),
        "error_modes": {m: (wrong.count(m) / len(wrong) if wrong else 0.0) for m in ERROR_MODES},
        "mode_entropy": _none_if_nan(mode_entropy([s.problems[i].key for i in toy], modes)),
    }
    if s.fingerprints is not None:
        rows = [i for i in toy if not s.correct[i] and np.isfinite(s.fingerprints[i]).all()]
        out["wrong_eigen_ratio"] = _none_if_nan(wrong_eigen_ratio(s.fingerprints[rows])) if len(rows) >= 2 else None
        out["wrong_fingerprints"] = len(rows)
    return out
