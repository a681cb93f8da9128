"""The frontier study's arithmetic: a method's frontier at one seed, accuracy interpolated along it, the matched
lengths where frontiers overlap, and paired differences with Student's t-intervals. Pure: arrays in, arrays out.

A frontier at one seed is a method's points (mean length, accuracy), one per strength, sorted by length; where two
strengths land on the same length their accuracies are averaged (a curve has one value per length). Accuracy at a
length l inside the frontier's span is linear between the two points around it; outside the span it is undefined
(NaN): a frontier is never extrapolated.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence

import numpy as np

from dynashape.study.stats import t_interval

__all__ = [
    "MATCHED_STEP",
    "accuracy_at",
    "interval_record",
    "matched_lengths",
    "spans_everywhere",
]

MATCHED_STEP = 4
"""The matched lengths are the multiples of this many tokens (studies/frontiers.toml, fixed before the runs)."""


def _curve(lengths: Sequence[float], accuracies: Sequence[float]) -> tuple[np.ndarray, np.ndarray]:
    """The frontier of one seed: distinct lengths ascending, the mean accuracy at each.

    Args: lengths, accuracies: [S] (one point per strength).
    Returns: (x [U], y [U]) with U <= S distinct lengths.
    """
    x = np.asarray(lengths, dtype=np.float64)
    y = np.asarray(accuracies, dtype=np.float64)
    if x.shape != y.shape or x.ndim != 1 or x.size == 0:
        raise ValueError(f"lengths {x.shape} and accuracies {y.shape} must be equal 1-d shapes with a point")
    if not (np.isfinite(x).all() and np.isfinite(y).all()):
        raise ValueError(f"a frontier's points must be finite, got lengths {x.tolist()}, accuracies {y.tolist()}")
    ux, inverse = np.unique(x, return_inverse=True)
    uy = np.bincount(inverse, weights=y) / np.bincount(inverse)
    return ux, uy


def accuracy_at(lengths: Sequence[float], accuracies: Sequence[float], at: float) -> float:
    """Accuracy at length ``at`` along one seed's frontier (``lengths``, ``accuracies``: [S]); NaN outside its
    span."""
    x, y = _curve(lengths, accuracies)
    if not x[0] <= at <= x[-1]:
        return math.nan
    return float(np.interp(at, x, y))


def spans_everywhere(frontiers: Mapping[int, tuple[Sequence[float], Sequence[float]]], at: float) -> bool:
    """Whether every seed's frontier (seed -> (lengths, accuracies)) spans length ``at``: only then does the method
    enter at ``at``, so that its value there is paired over all its seeds."""
    return bool(frontiers) and all(min(ls) <= at <= max(ls) for ls, _ in frontiers.values())


def matched_lengths(frontiers: Mapping[str, Mapping[int, tuple[Sequence[float], Sequence[float]]]]) -> list[int]:
    """The multiples of ``MATCHED_STEP`` at which at least two methods enter (``spans_everywhere``), ascending.

    Args: frontiers: method -> seed -> (lengths [S], accuracies [S]).
    """
    candidates: set[int] = set()
    for seeds in frontiers.values():
        if not seeds:
            continue
        low = max(min(ls) for ls, _ in seeds.values())
        high = min(max(ls) for ls, _ in seeds.values())
        candidates.update(range(math.ceil(low / MATCHED_STEP) * MATCHED_STEP, math.floor(high) + 1, MATCHED_STEP))
    return sorted(at for at in candidates if sum(spans_everywhere(f, at) for f in frontiers.values()) >= 2)


def interval_record(values: Mapping[int, float]) -> dict[str, float | int | list[int] | None]:
    """Mean over seeds with a 95 % Student's t-interval (none below two seeds), and the seeds: seed -> value."""
    finite = {s: v for s, v in values.items() if v is not None and math.isfinite(v)}
    if not finite:
        return {"estimate": None, "low": None, "high": None, "n": 0, "seeds": []}
    t = t_interval(list(finite.values()))
    low, high = (None, None) if math.isnan(t.low) else (t.low, t.high)
    return {"estimate": t.estimate, "low": low, "high": high, "n": len(finite), "seeds": sorted(finite)}
