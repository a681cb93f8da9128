"""One run of a comparison (``RunSpec``): a preset in a regime at a seed, on a split, at a grid point; its folder,
its label and its config (``spec_config``).

Paired seeds: seed ``s`` is ``TrainConfig.seed`` (prompt order, sampling generator, shaper) and the evaluation
seed ``eval_seed(base, s) = base + 1000 s`` (evaluation samples), for every method alike, so two methods with
the same seed see the same prompts in the same order and the same base evaluation. Tuning runs take the seeds
``TUNING_SEED_OFFSET + i``, disjoint from the test seeds.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass, field
from pathlib import Path
from typing import Any

from dynashape.train.config import RunConfig
from dynashape.train.presets import make_train_config

__all__ = ["EVAL_SEED_STRIDE", "TUNING_SEED_OFFSET", "RunSpec", "eval_seed", "spec_config"]

TUNING_SEED_OFFSET = 100
EVAL_SEED_STRIDE = 1000  # evaluate() also uses eval seed + 1 (pass@k subset): strides keep the streams apart


def eval_seed(base: int, seed: int) -> int:
    """The evaluation seed of paired seed ``seed`` (``base`` = ``EvalConfig.seed``; seed 0 keeps it)."""
    return base + EVAL_SEED_STRIDE * seed


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run of the comparison: a preset in a regime at a seed, on a split, with tuned overrides."""

    method: str
    regime: str
    seed: int
    split: str = "test"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """``make_train_config`` overrides of a grid point (``{"shaper_kwargs": {"beta": 0.03}}``)."""
    row: str | None = None
    """The row's name where it is not the preset's (a sweep's row, ``alp@beta=0.1``): its run folder's name."""

    @property
    def name(self) -> str:
        """The row's name: ``row``, else the preset's."""
        return self.row or self.method

    @property
    def point(self) -> str:
        """``key=value`` of the grid point ('' for none)."""
        items = [(f"{k}.{kk}", vv) for k, v in self.overrides.items() if isinstance(v, dict) for kk, vv in v.items()]
        items += [(k, v) for k, v in self.overrides.items() if not isinstance(v, dict)]
        return ",".join(f"{k.removeprefix('shaper_kwargs.')}={_point_text(v)}" for k, v in items)

    def folder(self) -> Path:
        if self.split == "test":
            return Path("runs", self.regime, f"{self.name}-seed{self.seed}")
        return Path("tuning", self.regime, self.method, f"{self.point or 'preset'}-seed{self.seed}")

    def label(self) -> str:
        point = f" [{self.point}]" if self.point and not self.row else ""  # a sweep's row names its point
        return f"{self.name}{point} {self.regime} seed {self.seed}" + ("" if self.split == "test" else " (tuning)")


def _point_text(value: Any) -> str:
    """A grid point's value as ``RunSpec.point`` writes it: a number ``%g``, true/false, text as it is, a list
    (a schedule, a grid) bracketed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_point_text(v) for v in value) + "]"
    return str(value)


def spec_config(spec: RunSpec, template: RunConfig, train_overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The RunConfig of ``spec``: ``template`` (model, warm-up, task, eval...) with the preset's training
    config, ``train_overrides`` (e.g. ``steps``) and the grid point on top; the paired evaluation seed."""
    kw = dict(train_overrides or {})
    shaper_kwargs = {**kw.pop("shaper_kwargs", {}), **spec.overrides.get("shaper_kwargs", {})}
    kw.update({k: v for k, v in spec.overrides.items() if k != "shaper_kwargs"})
    train = make_train_config(spec.method, regime=spec.regime, seed=spec.seed, shaper_kwargs=shaper_kwargs, **kw)
    ev = dataclasses.replace(template.eval, seed=eval_seed(template.eval.seed, spec.seed), split=spec.split)
    return dataclasses.replace(template, train=train, eval=ev)
