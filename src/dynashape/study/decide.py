"""Decision rules for claims with margins (a study file's ``decide = "holm"``): a margin per part, the ceiling
rule, Holm's step-down over all parts, and the power a number of paired seeds gives (pure functions; the study file
holds the parts, ``study.preregistration`` applies them).

A *part* is ``treatment - control  relation  bound`` on per-seed paired differences d_1..d_n. Its margin m > 0
fixes the bound:

* superiority (``>`` / ``<``): bound 0; m is the smallest effect of interest, the effect the power is planned at;
* non-inferiority (``>=`` / ``<=``): bound -m / +m; the power is planned at a true difference of 0, which is m
  away from the bound.

So for every part the planned effect is m: the distance between the bound and the difference the part hopes for.

Test of a part: the two-sided one-sample t-test of H0: E[d] = bound, t = (mean - bound) / (sd / sqrt(n)),
p = 2 P(T_{n-1} > |t|). Holm's step-down over the study's m parts at family-wise level alpha: sort the p-values
ascending and reject p_(i) while p_(i) <= alpha / (m - i + 1); the adjusted p-value is
max_{j <= i} min(1, (m - j + 1) p_(j)), rejected iff <= alpha. A rejected part **holds** when its mean lies on the
relation's side of the bound and **fails** when it lies on the other side; a part not rejected is
**inconclusive**. A part that cannot be tested (fewer than ``MIN_SEEDS`` paired seeds, or every paired difference
equal: the ceiling rule, e.g. both arms at pass@k = 1 on every seed) is inconclusive and enters Holm with p = 1,
so it still counts in m (the family is fixed before the runs).

Power (planning): the probability that the two-sided t-test at level a rejects, with n paired seeds, when the
true mean difference is m away from the bound and the per-seed sd is sd: the noncentral t with n - 1 degrees of
freedom and noncentrality m sqrt(n) / sd (``scipy.stats.nct``).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from typing import NamedTuple

import numpy as np

__all__ = [
    "MIN_SEEDS",
    "PartTest",
    "assess_part",
    "holm",
    "part_bound",
    "power",
    "seeds_for_power",
]

MIN_SEEDS = 5
RELATIONS = (">", ">=", "<", "<=")


def part_bound(relation: str, margin: float) -> float:
    """The bound a part's differences are tested against: 0 for ``>`` / ``<``, -margin for ``>=``, +margin for
    ``<=`` (the module docstring)."""
    if relation not in RELATIONS:
        raise ValueError(f"relation must be one of {RELATIONS}, got {relation!r}")
    if not (math.isfinite(margin) and margin > 0):
        raise ValueError(f"margin must be a finite number > 0, got {margin}")
    return {">": 0.0, "<": 0.0, ">=": -margin, "<=": margin}[relation]


class PartTest(NamedTuple):
    """A part's t-test before the multiplicity step."""

    estimate: float
    """Mean paired difference (NaN without differences)."""
    p_value: float
    """Two-sided p-value of H0: E[d] = bound; 1.0 for an untestable part."""
    n: int
    sd: float
    """Bessel sd of the differences (NaN for n < 2)."""
    reason: str
    """Why the part cannot be tested ('' when it can)."""


def assess_part(differences: Sequence[float], bound: float, *, min_seeds: int = MIN_SEEDS) -> PartTest:
    """The t-test of one part on its paired differences (float [n], finite)."""
    from scipy.stats import t

    d = np.asarray(differences, dtype=np.float64)
    if d.ndim != 1 or not np.isfinite(d).all():
        raise ValueError(f"differences must be a finite 1-d sequence, got {d.tolist()}")
    n = len(d)
    estimate = float(d.mean()) if n else math.nan
    sd = float(d.std(ddof=1)) if n > 1 else math.nan
    if n < min_seeds:
        return PartTest(estimate, 1.0, n, sd, f"n = {n} < {min_seeds} paired seeds")
    if np.all(d == d[0]):
        # the ceiling rule: identical differences (both arms pinned at an end of a bounded metric, typically) carry
        # no evidence of a difference either way, whatever the relation says
        return PartTest(estimate, 1.0, n, sd, "every paired difference is equal (ceiling rule)")
    stat = (estimate - bound) / (sd / math.sqrt(n))
    return PartTest(estimate, float(min(1.0, 2.0 * t.sf(abs(stat), n - 1))), n, sd, "")


def holm(p_values: Sequence[float], alpha: float = 0.05) -> tuple[np.ndarray, np.ndarray]:
    """Holm's step-down: (adjusted p-values float [m], rejected bool [m]) in the input order."""
    p = np.asarray(p_values, dtype=np.float64)
    if p.ndim != 1 or len(p) == 0 or not np.all((p >= 0) & (p <= 1)):
        raise ValueError(f"p_values must be a non-empty 1-d sequence in [0, 1], got {p.tolist()}")
    if not 0 < alpha < 1:
        raise ValueError(f"alpha must be in (0, 1), got {alpha}")
    m = len(p)
    order = np.argsort(p, kind="stable")
    scaled = np.minimum(1.0, (m - np.arange(m)) * p[order])  # (m - i + 1) p_(i) for i = 1..m
    adjusted = np.empty(m)
    adjusted[order] = np.maximum.accumulate(scaled)
    return adjusted, adjusted <= alpha


def power(n: int, sd: float, effect: float, alpha: float) -> float:
    """Power of the two-sided one-sample t-test at level ``alpha`` with ``n`` seeds, per-seed sd ``sd``, when
    the true difference is ``effect`` away from the bound."""
    from scipy.stats import nct, t

    if n < 2:
        return 0.0
    if not (sd > 0 and math.isfinite(sd)):
        raise ValueError(f"sd must be finite and > 0, got {sd}")
    critical = float(t.ppf(1 - alpha / 2, n - 1))
    ncp = abs(effect) * math.sqrt(n) / sd
    upper = float(nct.sf(critical, n - 1, ncp))
    lower = float(nct.cdf(-critical, n - 1, ncp))
    # scipy's nct.cdf far in the tail opposite a large noncentrality underflows to NaN (scipy 1.17): that mass is
    # below double precision, so it is 0
    return upper + (lower if math.isfinite(lower) else 0.0)


def seeds_for_power(sd: float, effect: float, alpha: float, *, target: float = 0.8, limit: int = 1000) -> int | None:
    """The fewest seeds (>= 2) whose ``power`` reaches ``target``; None when even ``limit`` seeds do not."""
    for n in range(2, limit + 1):
        if power(n, sd, effect, alpha) >= target:
            return n
    return None
