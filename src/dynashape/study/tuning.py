"""Tuning a comparison's rows on the validation split, and the order the comparison's runs can start in.

Each row whose preset has a grid (``presets.tuning_grids``) trains every grid value on ``tuning_seeds`` seeds
(``TUNING_SEED_OFFSET + i``, disjoint from the test seeds, so a test run never shares a trajectory with the run its
value was picked on) and evaluates on the *validation* split; ``choose`` picks the value (``SELECTION_RULE``). The
test split never feeds tuning. ``best_global`` is whichever of the study's candidates (``roles.best_global_among``)
has the higher validation AES at its chosen value. ``RunOrder`` releases a tuned row's test runs once its tuning has
settled.
"""

from __future__ import annotations

import math
from collections.abc import Callable, Mapping, Sequence
from typing import Any

from dynashape.study.claims import BEST_GLOBAL
from dynashape.study.run_spec import TUNING_SEED_OFFSET, RunSpec
from dynashape.train.presets import make_train_config, tuning_grids, tuning_overrides

__all__ = ["SELECTION_RULE", "RunOrder", "choose"]


def _grid(method: str, regime: str) -> tuple[str, list[dict[str, Any]]]:
    """(key in --set form, overrides of each grid point) of ``method`` in ``regime``."""
    from dynashape.train.presets import regime_budget

    ((key, _),) = tuning_grids(regime_budget(regime))[method].items()
    return key, tuning_overrides(method, regime=regime)


def _point_value(overrides: Mapping[str, Any]) -> Any:
    ((k, v),) = overrides.items()
    return next(iter(v.values())) if k == "shaper_kwargs" else v


def _preset_value(method: str, regime: str, key: str) -> Any:
    cfg = make_train_config(method, regime=regime)
    return cfg.shaper_kwargs.get(key.split(".", 1)[1]) if key.startswith("shaper_kwargs.") else getattr(cfg, key)


SELECTION_RULE = (
    "highest mean validation AES over the tuning seeds (a run without an AES counts as -inf); an exact tie goes "
    "to the preset's own value, then to the earlier grid value"
)


def choose(values: Sequence[Any], aes_per_value: Sequence[Sequence[float | None]], preset_value: Any) -> int:
    """Index of the chosen grid value (``SELECTION_RULE``).

    Args:
        values: the grid values.
        aes_per_value: for each value, the validation AES of each tuning seed (None: undefined).
        preset_value: the preset's own value (wins exact ties).
    """
    if len(values) != len(aes_per_value) or not values:
        raise ValueError(f"values and aes_per_value must be non-empty and of one length, got {len(values)}")

    def mean(xs: Sequence[float | None]) -> float:
        clean = [-math.inf if x is None or x != x else float(x) for x in xs]
        return sum(clean) / len(clean) if clean and -math.inf not in clean else -math.inf

    keys = [(-mean(a), 0 if v == preset_value else 1, i) for i, (v, a) in enumerate(zip(values, aes_per_value))]
    return min(keys)[2]


def _tuned_methods(rows: Sequence[str], tune: bool, best_global_among: Sequence[str]) -> list[str]:
    grids = tuning_grids(64)  # which presets have a grid (the values do not matter here)
    out = [m for m in rows if m in grids] if tune else []
    if BEST_GLOBAL in rows:
        out += [m for m in best_global_among if m not in out]
    return out


class RunOrder:
    """The plan's runs in the order they can start: untuned test rows and tuning runs at once, a tuned row's test
    runs when its tuning has settled (``BEST_GLOBAL``'s when both candidates' have)."""

    def __init__(
        self,
        rows: Mapping[str, Sequence[str]],
        seeds: Sequence[int],
        tuning_seeds: int,
        tune: bool,
        previous: dict,
        row_seeds: Mapping[str, int] | None = None,
        fixed: Mapping[str, Mapping[str, Any]] | None = None,
        presets: Mapping[str, str] | None = None,
        best_global_among: Sequence[str] = (),
    ) -> None:
        row_seeds, fixed, presets = row_seeds or {}, fixed or {}, presets or {}
        if any(BEST_GLOBAL in methods for methods in rows.values()) and not best_global_among:
            raise ValueError(
                f"a {BEST_GLOBAL} row needs its candidates (the study's roles.best_global_among), got none"
            )
        self.best_global_among = tuple(best_global_among)
        self.ready: list[RunSpec] = []
        self.groups: dict[tuple[str, str], list[RunSpec]] = {}  # (regime, method) -> its tuning runs
        self.waiting: dict[tuple[str, str], list[int]] = {}  # (regime, tuned method or BEST_GLOBAL) -> test seeds
        self.done: dict[tuple[str, str, str, int], dict[str, Any]] = {}  # (regime, method, point, seed) -> record
        self.results: dict[tuple[str, str], dict[str, Any]] = {}
        self.out = previous  # tuning.json: regime -> method -> result (and best_global)
        for regime, methods in rows.items():
            tuned = [m for m in _tuned_methods(methods, tune, self.best_global_among) if f"{regime}/{m}" not in fixed]
            for method in tuned:
                self.groups[(regime, method)] = [
                    RunSpec(method=method, regime=regime, seed=TUNING_SEED_OFFSET + i, split="validation", overrides=p)
                    for p in _grid(method, regime)[1]
                    for i in range(tuning_seeds)
                ]
                self.ready += self.groups[(regime, method)]
            for method in methods:
                row = list(seeds[: row_seeds.get(f"{regime}/{method}", len(seeds))])
                if f"{regime}/{method}" in fixed:
                    point, named = dict(fixed[f"{regime}/{method}"]), presets.get(method)
                    self.ready += [
                        RunSpec(method=named or method, regime=regime, seed=s, overrides=point, row=named and method)
                        for s in row
                    ]
                elif method in tuned or method == BEST_GLOBAL:
                    self.waiting[(regime, method)] = row
                else:
                    self.ready += [RunSpec(method=method, regime=regime, seed=s) for s in row]
        # Seed-major start order (a stable sort on the seed's rank: every row's first seed, then every row's
        # second...), so that a comparison stopped part-way holds paired seeds across rows, not five seeds of a few.
        rank = {s: i for i, s in enumerate(seeds)} | {TUNING_SEED_OFFSET + i: i for i in range(tuning_seeds)}
        self.ready.sort(key=lambda spec: rank[spec.seed])
        self.expected = len(self.ready) + sum(len(s) for s in self.waiting.values())

    def finished(self, spec: RunSpec, record: dict[str, Any], log: Callable[[str], None]) -> list[RunSpec]:
        """Note a finished run; the test runs its tuning result releases."""
        key = (spec.regime, spec.method)
        if spec.split != "validation" or key in self.results:
            return []
        self.done[(spec.regime, spec.method, spec.point, spec.seed)] = record
        result = self._settle(*key)
        if result is None:
            return []
        self.results[key] = result
        self.out.setdefault(spec.regime, {})[spec.method] = result
        log(f"tuned {spec.method} {spec.regime}: {result['key']} = {result['chosen']} (grid {result['grid']})")
        new = [
            RunSpec(method=spec.method, regime=spec.regime, seed=s, overrides=result["chosen_overrides"])
            for s in self.waiting.pop(key, [])
        ]
        best = self._best_global(spec.regime)
        if best is not None and (spec.regime, BEST_GLOBAL) in self.waiting:
            self.out[spec.regime][BEST_GLOBAL] = best
            log(f"best global-threshold baseline {spec.regime}: {best}")
            chosen = self.results[(spec.regime, best)]["chosen_overrides"]
            seeds = self.waiting.pop((spec.regime, BEST_GLOBAL))
            new += [RunSpec(method=best, regime=spec.regime, seed=s, overrides=chosen) for s in seeds]
        return new

    def _settle(self, regime: str, method: str) -> dict[str, Any] | None:
        """The tuning result of (regime, method) once all its runs have finished; None while some have not, or
        when one failed (a failed run must not lose its grid value the choice: a rerun finishes the tuning)."""
        group = self.groups[(regime, method)]
        records = [self.done.get((regime, method, s.point, s.seed)) for s in group]
        if any(r is None or r["status"] == "failed" for r in records):
            return None
        key, points = _grid(method, regime)
        values = [_point_value(p) for p in points]
        per_value = []
        for p, v in zip(points, values):
            runs = [r for s, r in zip(group, records) if s.overrides == p]
            per_value.append(
                {
                    "value": v,
                    "overrides": p,
                    "aes": [r["eval"].get("aes") for r in runs],  # type: ignore[index]
                    "accuracy": [r["eval"]["final"]["accuracy"] for r in runs],  # type: ignore[index]
                    "mean_length": [r["eval"]["final"]["mean_length"] for r in runs],  # type: ignore[index]
                    "seeds": [r["seed"] for r in runs],  # type: ignore[index]
                }
            )
        preset = _preset_value(method, regime, key)
        i = choose(values, [r["aes"] for r in per_value], preset)
        aes = [a for a in per_value[i]["aes"] if a is not None]
        return {
            "key": key,
            "grid": values,
            "preset_value": preset,
            "chosen": values[i],
            "chosen_overrides": points[i],
            "chosen_mean_aes": sum(aes) / len(aes) if len(aes) == len(per_value[i]["aes"]) else None,
            "values": per_value,
            "rule": SELECTION_RULE,
            "split": "validation",
        }

    def _best_global(self, regime: str) -> str | None:
        """The candidate (``best_global_among``) with the higher mean validation AES (a tie: the first named)."""
        found = [self.results.get((regime, m)) for m in self.best_global_among]
        if not found or any(f is None for f in found):
            return None
        scores = [-math.inf if f["chosen_mean_aes"] is None else f["chosen_mean_aes"] for f in found]  # type: ignore[index]
        return self.best_global_among[scores.index(max(scores))]
