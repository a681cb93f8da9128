"""The frontier study's rule for three strengths of each field method's main knob (studies/frontiers.toml).

A length-control method is a family indexed by its strength; one point mixes the method with the strength its
scaling rule happened to give it. The frontier study therefore trains each of the field's methods at three values
of its main knob, set by this rule before any run and never tuned toward a method:

* the middle value is the paper's own setting, carried to the training budget B by ``field_presets``' rules;
* one step is a factor of 2 on the knob, towards strength on one side and away from it on the other: a
  coefficient that penalises length is halved (weaker) and doubled (stronger); a length (a cap, a target, a
  threshold, a grid of targets) or a count of kept rollouts is doubled (weaker) and halved (stronger); integers
  round half up (20.5 -> 21);
* where the weaker step would leave the method inert at this budget (a cap or threshold at or beyond B constrains
  nothing; GFPO keeping all 16 of its 16 rollouts is GRPO with 16), the three values are the paper's setting and
  two stronger steps.

Each method declares its knob (``Shaper.strength``, in ``shapers/recipes.py``), and the rule reads only its kind
(``shapers.base.STRENGTH_KINDS``). The knobs are the ones the issue that asked for the study names (ALP's beta,
A-DLP's eta, LASER's target, SAW's second channel, DLER's cap, GFPO's k, L1's alpha, ThinkPrune's final cap), and
for the two it does not name: LASER-D's grid of targets (its targets are chosen from the grid;
``expected_n_correct`` is not a strength: the code floors ``coverage * n_b``, so 0.5 and 1 choose alike) and
AALC's length weight ``c``.
ThinkPrune's rounds step from B to the final cap: its middle round's cap is their midpoint (the paper's 4000 ->
3000 -> 2000 is B -> 3B/4 -> B/2).
"""

from __future__ import annotations

import math
from collections.abc import Sequence
from dataclasses import dataclass
from typing import Any

from dynashape.shapers import Strength, shaper_strength
from dynashape.train.field_presets import scaled_length
from dynashape.train.presets import preset_values

__all__ = ["Strengths", "knob", "strengths", "toml_row"]


@dataclass(frozen=True)
class Strengths:
    """Three values of a method's knob, weakest first, and their names in the rows (None: the value itself)."""

    knob: Strength
    values: tuple[Any, ...]
    labels: tuple[str, ...] | None
    factors: tuple[float, ...]
    """Each value's factor on the paper's setting (the knob's own scale: 2 = doubled)."""


def _round(x: float) -> int:
    return max(1, math.floor(x + 0.5))


def knob(method: str) -> Strength:
    """Preset ``method``'s main knob: its shaper's declaration (``Shaper.strength``)."""
    shaper = preset_values(method, 8)["shaper"]
    declared = shaper_strength(shaper)
    if declared is None:
        raise ValueError(f"method {method!r} (shaper {shaper!r}) declares no strength to sweep (Shaper.strength)")
    return declared


def strengths(method: str, budget: int) -> Strengths:
    """The three strengths of preset ``method``'s knob at training budget ``budget`` by the module's rule."""
    k = knob(method)
    preset = preset_values(method, budget)
    if k.kind == "penalty":
        paper = _get(preset, k.key)
        return Strengths(k, (paper / 2, paper, paper * 2), None, (0.5, 1.0, 2.0))
    factors: tuple[float, ...] = (2.0, 1.0, 0.5)
    if k.kind == "grid":  # its smallest target (B/4 at the paper's scale) is never inert
        return _grid_strengths(k, budget, factors)
    if k.kind == "final_cap":
        schedule = _get(preset, k.key)
        final = schedule[-1][1]
        if _round(2 * final) >= budget:
            factors = (1.0, 0.5, 0.25)
        caps = [_round(final * f) for f in factors]
        rounds = [s for s, _ in schedule]
        values = tuple(((rounds[0], _round((budget + c) / 2)), (rounds[1], c)) for c in caps)
        return Strengths(k, values, tuple(str(c) for c in caps), factors)
    paper = _get(preset, k.key)
    inert_at = preset.get("group_size", 8) if k.kind == "kept" else budget  # keeping all; a cap at the budget
    if _round(2 * paper) >= inert_at:
        factors = (1.0, 0.5, 0.25)
    return Strengths(k, tuple(_round(paper * f) for f in factors), None, factors)


def _grid_strengths(knob: Strength, budget: int, factors: Sequence[float]) -> Strengths:
    """LASER-D: the paper's grid (4096..16384 by 1024 of 16384) scaled by each factor, then carried to B; its
    smallest target (B/4 at the paper's scale) is never inert, so the weaker step is always a doubling."""
    grids = tuple(
        tuple(sorted({scaled_length(g * f, 16384, budget) for g in range(4096, 16384 + 1, 1024)})) for f in factors
    )
    return Strengths(knob, grids, tuple(f"x{f:g}" for f in factors), tuple(factors))


def _get(values: dict[str, Any], key: str) -> Any:
    head, _, tail = key.partition(".")
    return values[head][tail] if tail else values[head]


def toml_row(method: str, budget: int, fixed: dict[str, Any] | None = None) -> dict[str, Any]:
    """The study file's row of ``method``'s three strengths (the table ``parse_plan`` reads)."""
    s = strengths(method, budget)
    row: dict[str, Any] = {"method": method, "sweep": {s.knob.key: [_plain(v) for v in s.values]}}
    if s.labels:
        row["labels"] = list(s.labels)
    if fixed:
        row["fixed"] = fixed
    return row


def _plain(value: Any) -> Any:
    """Tuples as lists, as TOML writes them."""
    return [_plain(v) for v in value] if isinstance(value, tuple) else value
