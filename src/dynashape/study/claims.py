"""A study's pre-registered claims (its file's ``[[claims]]``, ``claim_entries``), the metrics they read, and their
verdicts by interval (``decide = "interval"``; ``decide = "holm"`` is ``study.preregistration``'s).

A claim is one or more *comparisons*: ``treatment - control  relation  bound`` on one metric in one regime,
where the difference is taken per paired seed and its 95 % t-interval over seeds decides (``verdict``):

* **holds** when the whole interval satisfies the relation,
* **fails** when the whole interval satisfies its negation,
* **inconclusive** otherwise, and always when fewer than ``MIN_SEEDS`` paired seeds exist (``n < 5``).

A claim of several comparisons holds when all hold and fails when any fails. The hierarchical bootstrap
interval (seeds, then problems) is reported beside the t-interval where the metric has per-problem values; the
verdict reads the t-interval only. ``best_global`` is the global-threshold baseline (grpo_length or gdpo) with the
higher validation AES after tuning (``tuning.json``), never chosen on test numbers. A comparison on a fraction
(accuracy, pass@k) whose arms both sit at 0 or 1 on every paired seed keeps the rule's verdict and gets a note
saying so: the data cannot show a difference there, whichever way the relation points.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from typing import Any

import numpy as np

from dynashape.study.decide import part_bound
from dynashape.study.stats import Interval, hierarchical_bootstrap, paired_values, t_interval

__all__ = [
    "BEST_GLOBAL",
    "MIN_SEEDS",
    "Claim",
    "Comparison",
    "Part",
    "evaluate_claims",
    "metric_per_problem",
    "metric_value",
    "verdict",
]

MIN_SEEDS = 5
RELATIONS = (">", ">=", "<", "<=")
BEST_GLOBAL = "best_global"
"""A claim's (and the comparison plan's) control that stands for the better-tuned (validation AES) of the study's
candidates, its ``roles.best_global_among``."""
# Metrics that are fractions in [0, 1]: where both arms sit at an end on every paired seed the difference is 0 by
# construction, so the verdict (which still follows the rule) says nothing about the methods; the page says so.
BOUNDED_METRICS = frozenset({"accuracy", "accuracy@hardest", "trap_pass@64", "trap_pass@32", "trap_pass@8"})


@dataclass(frozen=True, kw_only=True)
class Comparison:
    """``metric(treatment) - metric(control)  relation  bound`` in ``regime``, per paired seed."""

    regime: str
    treatment: str
    control: str
    """A preset name or ``best_global``."""
    metric: str
    """A name of ``METRICS``."""
    relation: str
    bound: float = 0.0
    text: str = ""

    def __post_init__(self) -> None:
        if self.relation not in RELATIONS:
            raise ValueError(f"relation must be one of {RELATIONS}, got {self.relation!r}")
        if self.metric not in METRICS:
            raise ValueError(f"metric must be one of {sorted(METRICS)}, got {self.metric!r}")
        if not math.isfinite(self.bound):
            raise ValueError(f"bound must be finite, got {self.bound}")


@dataclass(frozen=True, kw_only=True)
class Part:
    """One comparison of a claim decided with a margin (``decide = "holm"``): ``treatment - control  relation
    bound``, the bound ``decide.part_bound(relation, margin)``."""

    id: str
    comparison: Comparison
    margin: float
    """Superiority: the smallest effect of interest; non-inferiority: the margin (in the metric's units)."""
    why: str
    """Where the margin comes from."""
    v1_metric: str | None = None
    """The metric of an earlier study's runs that stands in for the part's own in the power analysis (None: the
    same)."""

    def __post_init__(self) -> None:
        want = part_bound(self.comparison.relation, self.margin)
        if self.comparison.bound != want:
            raise ValueError(f"part {self.id}: bound {self.comparison.bound} is not the margin's bound {want}")


@dataclass(frozen=True, kw_only=True)
class Claim:
    id: str
    text: str
    parts: tuple[Comparison, ...]


# ---------------------------------------------------------------------------------------------- metrics
def _hardest(ev: Mapping[str, Any]) -> str:
    return max(ev["final"]["per_difficulty"], key=int)


def _easiest(ev: Mapping[str, Any]) -> str:
    return min(ev["final"]["per_difficulty"], key=int)


def _pass_at_k(n: int, c: np.ndarray, k: int) -> np.ndarray:
    """Unbiased pass@k per problem, 1 - C(n - c, k) / C(n, k) (Chen et al. 2021), float [P]."""
    return np.array([1.0 - math.comb(n - int(ci), k) / math.comb(n, k) for ci in c])


def _trap_pass(ev: Mapping[str, Any], k: int) -> np.ndarray | None:
    """pass@k at k = min(``k``, subset samples) per trap prompt of the pass@k subset (None without traps)."""
    hard = ev["final"].get("per_problem_hard")
    if not hard:
        return None
    trap = np.array(hard["is_trap"], dtype=bool)
    if not trap.any():
        return None
    n = int(hard["n_samples"])
    return _pass_at_k(n, np.array(hard["n_correct"])[trap], min(k, n))


# trap pass@k metrics: name -> k (v1's claim (d) reads pass@64; the follow-up's reads pass@32 of a larger subset)
TRAP_PASS_K: Mapping[str, int] = {"trap_pass@64": 64, "trap_pass@32": 32, "trap_pass@8": 8}


def metric_per_problem(ev: Mapping[str, Any], metric: str) -> np.ndarray | None:
    """The per-problem values whose mean is ``metric`` (float [P]), or None for a metric that has none (AES,
    eigen ratio) or an evaluation without ``per_problem``."""
    final = ev["final"]
    pp = final.get("per_problem")
    if metric in TRAP_PASS_K:
        return _trap_pass(ev, TRAP_PASS_K[metric])
    if pp is None or metric not in ("accuracy", "mean_length", "accuracy@hardest", "mean_length@easiest"):
        return None
    acc = np.array(pp["n_correct"], dtype=np.float64) / float(final["n_samples"])
    length = np.array(pp["mean_length"], dtype=np.float64)
    difficulty = np.array([str(d) for d in pp["difficulty"]])
    if metric == "accuracy":
        return acc
    if metric == "mean_length":
        return length
    if metric == "accuracy@hardest":
        return acc[difficulty == _hardest(ev)]
    return length[difficulty == _easiest(ev)]


def metric_value(ev: Mapping[str, Any], metric: str) -> float | None:
    """``metric`` of one run's evaluation (``eval.json``); None when undefined (no AES, no trap prompt...)."""
    final = ev["final"]
    if metric == "aes":
        return ev.get("aes")
    if metric == "accuracy":
        return final["accuracy"]
    if metric == "mean_length":
        return final["mean_length"]
    if metric == "accuracy@hardest":
        return final["per_difficulty"][_hardest(ev)]["accuracy"]
    if metric == "mean_length@easiest":
        return final["per_difficulty"][_easiest(ev)]["mean_length"]
    if metric == "wrong_eigen_ratio":
        return final.get("wrong_eigen_ratio")
    values = _trap_pass(ev, TRAP_PASS_K[metric])
    return None if values is None else float(values.mean())


METRICS: Mapping[str, str] = {
    "aes": "AES (LEAD's accuracy-efficiency score vs the base)",
    "accuracy": "accuracy (avg@n = pass@1) on the test split",
    "mean_length": "mean response length (tokens)",
    "accuracy@hardest": "accuracy on the hardest difficulty",
    "mean_length@easiest": "mean length on the easiest difficulty",
    "trap_pass@64": "pass@64 on the trap prompts of the pass@k subset",
    "trap_pass@32": "pass@32 on the trap prompts of the pass@k subset",
    "trap_pass@8": "pass@8 on the trap prompts of the pass@k subset",
    "wrong_eigen_ratio": "top-1 eigen ratio of the wrong answers' fingerprints",
}


def verdict(interval: Interval, relation: str, bound: float = 0.0) -> str:
    """holds / fails / inconclusive of ``difference relation bound`` from the interval (module docstring)."""
    low, high = interval.low, interval.high
    if not (math.isfinite(low) and math.isfinite(high)):
        return "inconclusive"
    holds = {">": low > bound, ">=": low >= bound, "<": high < bound, "<=": high <= bound}[relation]
    fails = {">": high <= bound, ">=": high < bound, "<": low >= bound, "<=": low > bound}[relation]
    return "holds" if holds else "fails" if fails else "inconclusive"


def _nan_none(x: float) -> float | None:
    return None if x != x else x


def _at_an_end(metric: str, values: list[float | None]) -> float | None:
    """0.0 or 1.0 when every value of a bounded metric sits at that end of [0, 1], else None."""
    if metric not in BOUNDED_METRICS or not values or any(v is None for v in values):
        return None
    for end in (0.0, 1.0):
        if all(v == end for v in values):
            return end
    return None


def _compare(
    part: Comparison,
    runs: Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]],
    best_global: Mapping[str, str],
    *,
    n_boot: int,
) -> dict[str, Any]:
    control = best_global.get(part.regime) if part.control == BEST_GLOBAL else part.control
    a = runs.get((part.regime, part.treatment), {})
    b = runs.get((part.regime, control), {}) if control else {}
    values_a = {s: metric_value(ev, part.metric) for s, ev in a.items()}
    values_b = {s: metric_value(ev, part.metric) for s, ev in b.items()}
    diffs = paired_values(values_a, values_b)
    interval = t_interval(list(diffs.values())) if diffs else Interval(math.nan, math.nan, math.nan, 0)
    out: dict[str, Any] = {
        "regime": part.regime,
        "treatment": part.treatment,
        "control": control or part.control,
        "metric": part.metric,
        "relation": part.relation,
        "bound": part.bound,
        "estimate": _nan_none(interval.estimate),
        "interval": [_nan_none(interval.low), _nan_none(interval.high)],
        "n": interval.n,
        "seeds": sorted(diffs),
        "verdict": verdict(interval, part.relation, part.bound) if interval.n >= MIN_SEEDS else "inconclusive",
    }
    if part.control == BEST_GLOBAL and control is None:
        out["reason"] = "best_global not chosen yet (its tuning has not finished)"
    elif interval.n < MIN_SEEDS:
        out["reason"] = f"n = {interval.n} < {MIN_SEEDS} paired seeds"
    ceiling = _at_an_end(part.metric, [values_a[s] for s in diffs] + [values_b[s] for s in diffs])
    if ceiling is not None:
        note = f"{part.metric}: both arms at {ceiling:g} on every paired seed (no difference can show)"
        out["reason"] = f"{out['reason']}; {note}" if "reason" in out else note
    rows = [(metric_per_problem(a[s], part.metric), metric_per_problem(b[s], part.metric)) for s in diffs]
    if rows and all(x is not None and y is not None and len(x) == len(y) for x, y in rows):
        boot = hierarchical_bootstrap(np.stack([x - y for x, y in rows]), n_boot=n_boot)  # type: ignore[operator]
        out["bootstrap_interval"] = [boot.low, boot.high]
    return out


def evaluate_claims(
    runs: Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]],
    best_global: Mapping[str, str],
    *,
    claims: Sequence[Claim],
    n_boot: int = 2000,
) -> list[dict[str, Any]]:
    """Every claim's verdict, estimate and interval (those of its first comparison) and its parts.

    Args:
        runs: (regime, method) -> {seed: eval.json of the test-split run}.
        best_global: regime -> the chosen global-threshold baseline.
        claims: the study file's claims (``ComparisonPlan.claims``).
    """
    out = []
    for claim in claims:
        parts = [_compare(p, runs, best_global, n_boot=n_boot) for p in claim.parts]
        verdicts = [p["verdict"] for p in parts]
        overall = "fails" if "fails" in verdicts else "holds" if all(v == "holds" for v in verdicts) else "inconclusive"
        entry = {
            "id": claim.id,
            "text": claim.text,
            "verdict": overall,
            "estimate": parts[0]["estimate"],
            "interval": parts[0]["interval"],
            "n": min(p["n"] for p in parts),
            "parts": parts,
        }
        reasons = sorted({r for p in parts if "reason" in p for r in p["reason"].split("; ")})
        if reasons:
            entry["reason"] = "; ".join(reasons)
        out.append(entry)
    return out
