"""Whether a comparison's runs were evaluated as its plan registered: each run's resolved evaluation settings
(its config.yaml, as the run wrote it) against the plan's.

A plan's evaluation that never reached the runs is invisible in their numbers (an accuracy from 4 samples reads
like one from 16), so ``dynashape results`` checks the files the runs wrote, never the plan object, before it
writes a verdict.
"""

from __future__ import annotations

from collections import Counter
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.train.config import EvalConfig

__all__ = [
    "CHECKED_FIELDS",
    "EvaluationDeviation",
    "EvaluationMismatchError",
    "evaluation_deviations",
    "registered_evaluation",
    "run_evaluation",
]

CHECKED_FIELDS: tuple[str, ...] = (
    "n_samples",
    "passk_samples",
    "passk_keys",
    "passk_hard",
    "passk_trap",
    "max_new_tokens",
    "temperature",
    "top_p",
    "max_problems",
)
"""The settings that change what an evaluation measures: samples, the pass@k subset and its samples, the cap,
the sampling, the problems. (The seed differs per paired seed by design; batch size changes no number.)"""


@dataclass(frozen=True)
class EvaluationDeviation:
    """One run whose ``field`` is ``actual`` where the plan registered ``expected``."""

    run_dir: str
    field: str
    expected: Any
    actual: Any


class EvaluationMismatchError(ValueError):
    """The runs were not evaluated as registered; the message names the fields, the values and the runs."""


def run_evaluation(out: Path, record: Mapping[str, Any]) -> dict[str, Any] | None:
    """The checked evaluation settings of a run, from the config.yaml its folder holds (None: no config)."""
    path = Path(out) / record["run_dir"] / "config.yaml"
    if not path.exists():
        return None
    written = state.read_yaml(path) or {}
    resolved = EvalConfig(**written.get("eval", {}))  # the defaults of fields an older layout did not write
    return {name: _plain(getattr(resolved, name)) for name in CHECKED_FIELDS}


def registered_evaluation(plan_eval: Mapping[str, Any] | None) -> dict[str, Any]:
    """The checked settings a plan registered: its ``eval`` fields over ``EvalConfig``'s defaults."""
    resolved = EvalConfig(**dict(plan_eval or {}))
    return {name: _plain(getattr(resolved, name)) for name in CHECKED_FIELDS}


def _plain(value: Any) -> Any:
    return list(value) if isinstance(value, tuple) else value


def _relevant(expected: Mapping[str, Any]) -> tuple[str, ...]:
    # passk_hard / passk_trap choose the subset only when no keys name it
    if expected.get("passk_keys") is not None:
        return tuple(f for f in CHECKED_FIELDS if f not in ("passk_hard", "passk_trap"))
    return CHECKED_FIELDS


def evaluation_deviations(
    out: str | Path, records: Sequence[Mapping[str, Any]], expected: Mapping[str, Any] | None
) -> list[EvaluationDeviation]:
    """Every (run, field) of the finished test-split runs in ``records`` whose written evaluation differs from
    ``expected`` (a plan's ``registered_evaluation``). ``expected`` None (a comparison without a plan): the runs
    must agree with each other, and each setting is checked against the value most of them have."""
    out = Path(out)
    settings = {
        r["run_dir"]: run_evaluation(out, r) for r in records if r.get("split", "test") == "test" and r.get("eval")
    }
    missing = [d for d, s in settings.items() if s is None]
    if missing:
        raise EvaluationMismatchError(f"{len(missing)} finished runs have no config.yaml, e.g. {missing[0]}")
    if expected is None:
        expected = _majority(list(settings.values()))
    out_list = []
    for run_dir, written in sorted(settings.items()):
        for name in _relevant(expected):
            if written[name] != expected[name]:  # type: ignore[index]
                out_list.append(EvaluationDeviation(run_dir, name, expected[name], written[name]))  # type: ignore[index]
    return out_list


def _majority(settings: Sequence[Mapping[str, Any]]) -> dict[str, Any]:
    out = {}
    for name in CHECKED_FIELDS:
        counts = Counter(repr(s[name]) for s in settings)
        top = counts.most_common(1)[0][0] if counts else None
        out[name] = next((s[name] for s in settings if repr(s[name]) == top), None)
    return out


def describe(value: Any) -> str:
    """A setting as a reader wants it: a key list by its length."""
    if isinstance(value, list):
        return f"{len(value)} keys"
    return "null" if value is None else str(value)


def summarize(deviations: Sequence[EvaluationDeviation], *, against: str = "the plan has") -> list[str]:
    """One line per (field, expected, actual): how many runs, and the first of them (``against``: what the
    expected value is, "the plan has" or, without a plan, "most runs have")."""
    groups: dict[tuple[str, str, str], list[str]] = {}
    for d in deviations:
        groups.setdefault((d.field, describe(d.expected), describe(d.actual)), []).append(d.run_dir)
    return [
        f"{name} {actual} where {against} {expected}: {len(runs)} runs ({', '.join(runs[:2])}"
        f"{', ...' if len(runs) > 2 else ''})"
        for (name, expected, actual), runs in sorted(groups.items())
    ]
