"""A study file's rows: per regime, a list of a preset's name or a table (``ROW_KEYS``) that fixes or sweeps its
parameters, each made into named rows with their ``make_train_config`` overrides.

A row table: ``method`` (a preset); ``name`` (the row's name when it is not its preset's, for a control such as
GRPO with 16 rollouts: ``{ name = "grpo_g16", method = "grpo", fixed = { group_size = 16 } }``); ``fixed``
(overrides); ``seeds`` (how many of the study's seeds it trains: the first n); ``sweep`` (one parameter and its
values: one row per value, ``<name>@<key>=<value>``) and ``labels`` (the sweep's values as they appear in its rows'
names, where a value is not a number or a name: a schedule). The study's own ``fixed`` applies to every row; a
parameter it fixes no row may fix or sweep again.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from typing import Any

from dynashape.study.claims import BEST_GLOBAL
from dynashape.study.plan_checks import NAME, as_int, as_name, fail

__all__ = ["RESERVED", "ROW_KEYS", "Rows", "parse_fixed", "parse_rows"]

ROW_KEYS = ("method", "name", "fixed", "sweep", "labels", "seeds")
RESERVED = {
    "method": "the row's preset",
    "shaper": "the row's preset",
    "regime": "the key of rows it is listed under",
    "seed": "the study's paired seeds",
}
"""TrainConfig fields a row cannot fix or sweep: the study sets them."""

Rows = tuple[dict[str, tuple[str, ...]], dict[str, str], dict[str, dict[str, Any]], dict[str, int]]


def parse_rows(where: str, value: Any, n_seeds: int, study_fixed: Mapping[str, Any] | None = None) -> Rows:
    """(regime -> row names, row -> preset where they differ, "regime/row" -> fixed overrides, "regime/row" ->
    seed count) of the file's ``rows`` table."""
    from dynashape.train.presets import REGIMES

    if not isinstance(value, dict) or not value:
        raise fail(where, "rows", value, "must be a table: regime -> list of rows")
    rows: dict[str, tuple[str, ...]] = {}
    presets: dict[str, str] = {}
    fixed: dict[str, dict[str, Any]] = {}
    row_seeds: dict[str, int] = {}
    for regime, entries in value.items():
        if regime not in REGIMES:
            raise fail(where, f"rows.{regime}", entries, f"unknown regime; regimes are {', '.join(REGIMES)}")
        if not isinstance(entries, list) or not entries:
            raise fail(where, f"rows.{regime}", entries, "must be a non-empty list of rows")
        names: list[str] = []
        for entry in entries:
            for row, preset, overrides, n in _expand(
                where, f"rows.{regime}", regime, entry, n_seeds, study_fixed or {}
            ):
                if row in names:
                    raise fail(where, f"rows.{regime}", row, "names a row twice")
                names.append(row)
                if row != preset:
                    presets[row] = preset
                if overrides:
                    fixed[f"{regime}/{row}"] = overrides
                if n is not None:
                    row_seeds[f"{regime}/{row}"] = n
        rows[regime] = tuple(names)
    return rows, presets, fixed, row_seeds


def parse_fixed(where: str, key: str, value: Any) -> dict[str, Any]:
    """A ``fixed`` table (the study's or a row's) as nested ``make_train_config`` overrides, none of them a field
    the study sets (``RESERVED``)."""
    if not isinstance(value, dict):
        raise fail(where, key, value, "must be a table of make_train_config overrides")
    fixed = _nested_all(value)  # { "shaper_kwargs.x" = 1 } as { shaper_kwargs = { x = 1 } }
    if set(fixed) & set(RESERVED):
        taken = sorted(set(fixed) & set(RESERVED))[0]
        raise fail(where, f"{key}.{taken}", fixed[taken], "is set by the study: " + RESERVED[taken])
    return fixed


def _expand(
    where: str, key: str, regime: str, entry: Any, n_seeds: int, study_fixed: Mapping[str, Any]
) -> list[tuple[str, str, dict[str, Any], int | None]]:
    """One row entry as (row, preset, fixed overrides, seed count or None) per row it makes (a sweep: several)."""
    from dynashape.train.presets import PRESETS

    if isinstance(entry, str):
        entry = {"method": entry}
    if not isinstance(entry, dict):
        raise fail(where, key, entry, "a row is a preset's name or a table with method")
    unknown = sorted(set(entry) - set(ROW_KEYS))
    if unknown:
        raise fail(where, f"{key}.{unknown[0]}", entry[unknown[0]], f"unknown key; a row has {', '.join(ROW_KEYS)}")
    method = entry.get("method")
    if method != BEST_GLOBAL and method not in PRESETS:
        raise fail(where, f"{key}.method", method, f"unknown method; presets are {', '.join(PRESETS)}")
    if method == BEST_GLOBAL and (set(entry) != {"method"} or study_fixed):
        raise fail(where, key, entry, f"{BEST_GLOBAL} is chosen by tuning: it takes no fixed, sweep or seeds")
    name = _row_name(where, key, entry, method)
    key = f"{key}.{name}"
    n = None if "seeds" not in entry else as_int(where, f"{key}.seeds", entry["seeds"], low=1)
    if n is not None and n > n_seeds:
        raise fail(where, f"{key}.seeds", n, f"a row takes the first n of the study's {n_seeds} seeds")
    own = parse_fixed(where, f"{key}.fixed", entry.get("fixed", {}))
    for path in _leaves(own):
        if _leaf(study_fixed, path) is not None:
            raise fail(
                where, f"{key}.fixed", path, "is fixed for every row by the study's fixed: a parameter is either"
            )
    fixed = _merge(study_fixed, own)
    if "sweep" not in entry:
        if "labels" in entry:
            raise fail(where, f"{key}.labels", entry["labels"], "names a sweep's values: the row has no sweep")
        _check_overrides(where, f"{key}.fixed", method, regime, fixed)
        return [(name, method, fixed, n)]
    sweep_key, values = _sweep(where, f"{key}.sweep", method, entry["sweep"])
    if _leaf(fixed, sweep_key) is not None:
        raise fail(where, f"{key}.sweep", sweep_key, "is also fixed: a parameter is either")
    labels = _labels(where, f"{key}.labels", entry.get("labels"), values)
    out = []
    for v, label in zip(values, labels, strict=True):
        overrides = _merge(fixed, _nested(sweep_key, v))
        _check_overrides(where, f"{key}.sweep", method, regime, overrides)
        out.append((f"{name}@{sweep_key.removeprefix('shaper_kwargs.')}={label}", method, overrides, n))
    return out


def _row_name(where: str, key: str, entry: Mapping[str, Any], method: str) -> str:
    """The row's ``name``, or its preset's; a name may not be another preset's (its runs would read as that one's)."""
    from dynashape.train.presets import PRESETS

    if "name" not in entry:
        return method
    name = as_name(where, f"{key}.{method}.name", entry["name"])
    if name != method and name in PRESETS:
        raise fail(where, f"{key}.{method}.name", name, "is another preset's name")
    if "@" in name:
        raise fail(where, f"{key}.{method}.name", name, "'@' marks a sweep's value")
    return name


def _labels(where: str, key: str, value: Any, values: list[Any]) -> list[str]:
    """The sweep's values in its rows' names: ``labels`` when given (distinct names, one per value), else the
    values themselves (``_text``)."""
    if value is None:
        return [_text(where, key.removesuffix(".labels") + ".sweep", v) for v in values]
    if not isinstance(value, list) or len(value) != len(values):
        raise fail(where, key, value, f"must be a list of {len(values)} names, one per swept value")
    labels = [as_name(where, key, v) for v in value]
    if len(set(labels)) != len(labels):
        raise fail(where, key, value, "must be distinct")
    return labels


def _sweep(where: str, key: str, method: str, value: Any) -> tuple[str, list[Any]]:
    """(the swept key in --set form, its values): one parameter the preset has, a non-empty list of values."""
    from dynashape.shapers import config_class
    from dynashape.train.config import TrainConfig, train_sections
    from dynashape.train.presets import PRESETS

    leaves = _leaves(value) if isinstance(value, dict) else {}
    if len(leaves) != 1:
        raise fail(where, key, value, 'must be one parameter and its values: { "shaper_kwargs.beta" = [0.1, 0.2] }')
    ((path, values),) = leaves.items()
    if not isinstance(values, list) or not values:
        raise fail(where, f"{key}.{path}", values, "must be a non-empty list of values")
    head, _, tail = path.partition(".")
    sections = dict(train_sections())
    if head == "shaper_kwargs":
        have = [f.name for f in dataclasses.fields(config_class(PRESETS[method]["shaper"]))]
    elif head in sections:
        have = [f.name for f in dataclasses.fields(sections[head])]
    else:  # a plain TrainConfig field: nothing after it
        have = [f.name for f in dataclasses.fields(TrainConfig) if f.name not in sections and f.name not in RESERVED]
        have.remove("shaper_kwargs")
        tail = head if not tail else path  # "lr" names a field; "lr.x" names none
    if tail not in have:
        raise fail(where, key, path, f"{method!r} has no such parameter; it has {', '.join(have)}")
    return path, values


def _check_overrides(where: str, key: str, method: str, regime: str, overrides: Mapping[str, Any]) -> None:
    """Refuse what the row's runs would refuse: ``make_train_config`` and the shaper's own config."""
    if not overrides:
        return
    from dynashape.shapers import config_class
    from dynashape.train.presets import make_train_config

    try:
        cfg = make_train_config(method, regime=regime, **{k: v for k, v in overrides.items()})
        config_class(cfg.shaper)(**cfg.shaper_kwargs)
    except (TypeError, ValueError) as err:
        raise fail(where, key, dict(overrides), str(err)) from None


def _leaves(table: Mapping[str, Any], prefix: str = "") -> dict[str, Any]:
    """{"a.b": v} of a nested table (a quoted dotted key stays as written)."""
    out: dict[str, Any] = {}
    for k, v in table.items():
        out |= _leaves(v, f"{prefix}{k}.") if isinstance(v, dict) else {f"{prefix}{k}": v}
    return out


def _leaf(table: Mapping[str, Any], path: str) -> Any:
    return _leaves(table).get(path)


def _nested_all(table: Mapping[str, Any]) -> dict[str, Any]:
    out: dict[str, Any] = {}
    for path, value in _leaves(table).items():
        out = _merge(out, _nested(path, value))
    return out


def _nested(path: str, value: Any) -> dict[str, Any]:
    head, _, tail = path.partition(".")
    return {head: _nested(tail, value) if tail else value}


def _merge(a: Mapping[str, Any], b: Mapping[str, Any]) -> dict[str, Any]:
    out = dict(a)
    for k, v in b.items():
        out[k] = _merge(out[k], v) if isinstance(v, dict) and isinstance(out.get(k), dict) else v
    return out


def _text(where: str, key: str, value: Any) -> str:
    """A swept value in a row's name: numbers as RunSpec.point writes them (``%g``), true/false, text as it is."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, (int, float)):
        return f"{value:g}"
    if isinstance(value, str) and NAME.match(value):
        return value
    raise fail(where, key, value, "a swept value must be a number, true/false or a name")
