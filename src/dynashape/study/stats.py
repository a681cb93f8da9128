"""Statistics of a paired-seed comparison: mean ± sd over seeds, paired t-intervals, a hierarchical bootstrap.

Every method is run at the same seeds (``train.compare``): seed s fixes the prompts, the sampling generators and
the evaluation draws, so method differences are taken *per seed* (paired) before they are averaged.

* ``mean_sd``: mean and Bessel-corrected standard deviation over seeds.
* ``t_interval``: mean ± t_{n-1, (1 + level) / 2} · sd / sqrt(n) (Student's t, ``scipy.stats.t``); applied to
  per-seed differences it is the paired t-interval.
* ``hierarchical_bootstrap``: resample seeds with replacement, then within each drawn seed resample its problems
  with replacement, and take the mean; the percentile interval of B such means. It adds the evaluation's own
  sampling noise (which problems were drawn) to the seed-to-seed noise. Vectorised over the B replicates.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import NamedTuple

import numpy as np

__all__ = ["Interval", "MeanSd", "bootstrap_means", "hierarchical_bootstrap", "mean_sd", "paired_values", "t_interval"]


class MeanSd(NamedTuple):
    mean: float
    sd: float  # Bessel-corrected; NaN for a single value
    n: int


class Interval(NamedTuple):
    """An estimate with its interval ``[low, high]`` at ``level``; NaN bounds when ``n`` is too small."""

    estimate: float
    low: float
    high: float
    n: int
    level: float = 0.95


def _finite(values: Sequence[float], name: str) -> np.ndarray:
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 1:
        raise ValueError(f"{name} must be one-dimensional, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError(f"{name} must be finite, got {x.tolist()}")
    return x


def mean_sd(values: Sequence[float]) -> MeanSd:
    """Mean and sample standard deviation (n - 1) of ``values`` (at least one, all finite)."""
    x = _finite(values, "values")
    if len(x) == 0:
        raise ValueError("values must not be empty")
    return MeanSd(float(x.mean()), float(x.std(ddof=1)) if len(x) > 1 else math.nan, len(x))


def t_interval(values: Sequence[float], level: float = 0.95) -> Interval:
    """Student's t-interval for the mean of ``values``; NaN bounds for fewer than two values."""
    from scipy.stats import t

    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    m = mean_sd(values)
    if m.n < 2:
        return Interval(m.mean, math.nan, math.nan, m.n, level)
    half = float(t.ppf((1 + level) / 2, m.n - 1)) * m.sd / math.sqrt(m.n)
    return Interval(m.mean, m.mean - half, m.mean + half, m.n, level)


def paired_values(a: Mapping[int, float | None], b: Mapping[int, float | None]) -> dict[int, float]:
    """Per-seed differences ``a[s] - b[s]`` over the seeds both have a value for (None and NaN skipped)."""
    seeds = sorted(set(a) & set(b))
    out = {}
    for s in seeds:
        x, y = a[s], b[s]
        if x is not None and y is not None and math.isfinite(x) and math.isfinite(y):
            out[s] = float(x) - float(y)
    return out


def hierarchical_bootstrap(
    values: np.ndarray | Sequence[Sequence[float]],
    *,
    n_boot: int = 2000,
    level: float = 0.95,
    seed: int = 0,
) -> Interval:
    """Percentile interval of the mean of ``values`` [S seeds, P problems], resampling seeds then problems.

    Each replicate draws S seeds with replacement and, independently for each drawn seed, P of that seed's
    problems with replacement; its statistic is the mean of the S x P drawn values. The estimate is the plain
    mean of ``values``. Seeded by ``seed`` (numpy PCG64), so the interval is reproducible.

    Args:
        values: float [S, P], one row per seed (per-problem accuracies, lengths, or paired differences of two
            methods on the same problems); every seed has the same P problems.
        n_boot: replicates B (>= 1).
    """
    x = np.asarray(values, dtype=np.float64)
    if x.ndim != 2 or x.shape[0] < 1 or x.shape[1] < 1:
        raise ValueError(f"values must be [seeds, problems] with both >= 1, got shape {x.shape}")
    if not np.isfinite(x).all():
        raise ValueError("values must be finite")
    if n_boot < 1:
        raise ValueError(f"n_boot must be >= 1, got {n_boot}")
    if not 0 < level < 1:
        raise ValueError(f"level must be in (0, 1), got {level}")
    means = bootstrap_means(x, n_boot=n_boot, seed=seed)
    alpha = (1 - level) / 2
    low, high = np.quantile(means, [alpha, 1 - alpha])
    return Interval(float(x.mean()), float(low), float(high), x.shape[0], level)


def bootstrap_means(values: np.ndarray, *, n_boot: int, seed: int = 0) -> np.ndarray:
    """The B replicate means of ``hierarchical_bootstrap`` (float [B]); ``values`` float [S, P]."""
    s, p = values.shape
    rng = np.random.default_rng(seed)
    seeds = rng.integers(0, s, size=(n_boot, s))  # [B, S] which seed fills each slot
    problems = rng.integers(0, p, size=(n_boot, s, p))  # [B, S, P] which of its problems
    # chunks keep the [b, S, P] gather small for large B x S x P
    out = np.empty(n_boot)
    step = max(1, 2_000_000 // (s * p))
    for start in range(0, n_boot, step):
        sl = slice(start, start + step)
        out[sl] = values[seeds[sl, :, None], problems[sl]].mean(axis=(1, 2))
    return out
