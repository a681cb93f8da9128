"""A study file's claims (``[[claims]]``) and how they are decided (``decide``), read into ``Claim`` and ``Part``.

Two decision rules, each the committed studies' own:

* ``decide = "interval"`` (the first comparison): each part is ``{ regime, treatment, control, metric, relation,
  bound }`` (bound default 0) and its 95 % t-interval over paired seeds decides it (``claims.verdict``);
* ``decide = "holm"`` (the follow-up): each part also has an ``id``, a ``margin`` and ``why`` (where the margin
  comes from), its bound follows from the margin (``decide.part_bound``), and a t-test per part with Holm's
  step-down over all parts at family-wise ``alpha`` decides (``preregistration.decide_claims``); ``v1_metric``
  optionally names the metric an earlier study's runs stand in with for the power analysis.

Every part must read rows of the study (or ``best_global``); every key is checked, and an error names the file,
the key and the value.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from typing import Any

from dynashape.study.claims import BEST_GLOBAL, METRICS, RELATIONS, Claim, Comparison, Part
from dynashape.study.decide import part_bound

__all__ = ["DECISION_RULES", "parse_claims"]

DECISION_RULES = ("interval", "holm")
CLAIM_KEYS = ("id", "text", "parts")
PART_KEYS = ("regime", "treatment", "control", "metric", "relation", "bound")
MARGIN_PART_KEYS = ("id", "regime", "treatment", "control", "metric", "relation", "margin", "why", "v1_metric")


def _error(where: str, key: str, value: Any, why: str) -> ValueError:
    from dynashape.study.plan_file import StudyFileError

    return StudyFileError(f"{where}: {key} = {value!r}: {why}")


def _number(where: str, key: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not math.isfinite(value):
        raise _error(where, key, value, "must be a finite number")
    return float(value)


def _comparison(where: str, key: str, entry: Any, rule: str, rows: Mapping[str, Sequence[str]]) -> Comparison:
    """One part's comparison, checked against the study's rows and the metrics a claim can read."""
    keys = MARGIN_PART_KEYS if rule == "holm" else PART_KEYS
    if not isinstance(entry, Mapping):
        raise _error(where, key, entry, f"a part is a table of {', '.join(keys)}")
    unknown = sorted(set(entry) - set(keys))
    if unknown:
        raise _error(where, f"{key}.{unknown[0]}", entry[unknown[0]], f"unknown key; a part has {', '.join(keys)}")
    needed = [k for k in keys if k not in ("bound", "v1_metric")]
    for k in needed:
        if k not in entry:
            raise _error(where, key, dict(entry), f"{k} is missing")
    regime, relation, metric = entry["regime"], entry["relation"], entry["metric"]
    if regime not in rows:
        raise _error(where, f"{key}.regime", regime, f"must be one of the study's regimes {sorted(rows)}")
    for side in ("treatment", "control"):
        if entry[side] not in (*rows[regime], BEST_GLOBAL):
            raise _error(where, f"{key}.{side}", entry[side], f"is not a row of the {regime} regime")
    if relation not in RELATIONS:
        raise _error(where, f"{key}.relation", relation, f"must be one of {', '.join(RELATIONS)}")
    if metric not in METRICS:
        raise _error(where, f"{key}.metric", metric, f"must be one of {', '.join(sorted(METRICS))}")
    if rule == "holm":
        bound = part_bound(relation, _number(where, f"{key}.margin", entry["margin"]))
    else:
        bound = _number(where, f"{key}.bound", entry.get("bound", 0.0))
    return Comparison(
        regime=regime, treatment=entry["treatment"], control=entry["control"], metric=metric, relation=relation,
        bound=bound,
    )  # fmt: skip


def _part(where: str, key: str, entry: Mapping[str, Any], comparison: Comparison) -> Part:
    for k in ("id", "why"):
        if not isinstance(entry[k], str) or not entry[k]:
            raise _error(where, f"{key}.{k}", entry[k], "must be non-empty text")
    v1_metric = entry.get("v1_metric")
    if v1_metric is not None and v1_metric not in METRICS:
        raise _error(where, f"{key}.v1_metric", v1_metric, f"must be one of {', '.join(sorted(METRICS))}")
    return Part(id=entry["id"], comparison=comparison, margin=float(entry["margin"]), why=entry["why"],
                v1_metric=v1_metric)  # fmt: skip


def parse_claims(
    where: str, entries: Any, rule: Any, rows: Mapping[str, Sequence[str]]
) -> tuple[tuple[Claim, ...], tuple[Part, ...]]:
    """The claims of a study file (``entries``: its ``claims`` array, ``rule``: its ``decide``) and, for
    ``decide = "holm"``, every part with its margin in the file's order."""
    if rule not in DECISION_RULES:
        raise _error(where, "decide", rule, f"must be one of {', '.join(DECISION_RULES)}")
    if not isinstance(entries, list) or not entries:
        raise _error(where, "claims", entries, "must be a non-empty array of tables ([[claims]])")
    claims, parts, seen = [], [], set()
    for i, entry in enumerate(entries):
        key = f"claims[{i}]"
        if not isinstance(entry, Mapping) or set(entry) != set(CLAIM_KEYS):
            raise _error(where, key, entry, f"a claim is a table of exactly {', '.join(CLAIM_KEYS)}")
        if not isinstance(entry["id"], str) or not entry["id"] or entry["id"] in seen:
            raise _error(where, f"{key}.id", entry["id"], "must be text naming no other claim")
        seen.add(entry["id"])
        if not isinstance(entry["text"], str) or not entry["text"]:
            raise _error(where, f"{key}.text", entry["text"], "must be non-empty text")
        if not isinstance(entry["parts"], list) or not entry["parts"]:
            raise _error(where, f"{key}.parts", entry["parts"], "must be a non-empty array of parts")
        mine = [_comparison(where, f"{key}.parts[{j}]", p, rule, rows) for j, p in enumerate(entry["parts"])]
        if rule == "holm":
            parts += [_part(where, f"{key}.parts[{j}]", p, c) for j, (p, c) in enumerate(zip(entry["parts"], mine))]
        claims.append(Claim(id=entry["id"], text=entry["text"], parts=tuple(mine)))
    ids = [p.id for p in parts]
    if len(set(ids)) != len(ids):
        raise _error(where, "claims", ids, "part ids must differ")
    return tuple(claims), tuple(parts)
