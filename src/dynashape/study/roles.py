"""What a study compares against, declared in its data file (a ``[roles]`` table), so that no page names a method:
which row is the control of every paired difference, which rows are not baselines, and what the field page's
caveats read. What a method *is* (its display name, the controller state it logs, whether it samples dynamically
or reads budget prompts) is the method's own declaration (``dynashape.shapers``) or its run's config.yaml.

The table, with every key optional::

    [roles]
    control = "grpo"               # the row every paired difference is against (default: the reference method,
                                   # dynashape.shapers.reference_shaper)
    not_baselines = ["lead_static"]  # tuned rows the best tuned baseline is never chosen from (the method studied)
    best_global_among = ["grpo_length", "gdpo"]  # the presets a best_global row is tuned from, the one of higher
                                   # validation AES chosen (required by a best_global row)
    sampling_control = "dapo"      # controls page: a row of the controls' study that samples as the dynamic
                                   # samplers do, without a length term
    horizon = "adlp/lambda"        # controls page: the trajectory whose last steps the caveats read
    example = { regime = "loose", rows = ["alp", "saw"] }  # controls page: two rows whose points the caveats quote
    labels = { dapo = "DAPO" }     # how a page names a row that is not a registered method's own name

Every key is checked against the study's rows; an error names the file, the key and the value.
``plan_file.parse_plan`` reads the table into ``ComparisonPlan.roles``.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from dataclasses import dataclass, field
from typing import Any

from dynashape.study.plan_checks import fail

__all__ = ["ROLE_KEYS", "StudyRoles", "parse_roles", "roles_of"]

ROLE_KEYS = ("control", "not_baselines", "best_global_among", "sampling_control", "horizon", "example", "labels")


@dataclass(frozen=True, kw_only=True)
class StudyRoles:
    """A study's roles (the module docstring); ``parse_roles`` makes them from its ``[roles]`` table."""

    control: str
    """The row every paired difference is against (the claims page's "<control> control", the controls page's
    Holm family, generation ratios and zoom)."""
    not_baselines: tuple[str, ...] = ()
    """Tuned rows that ``results.best_tuned`` never picks as the best tuned baseline."""
    best_global_among: tuple[str, ...] = ()
    """The presets a ``best_global`` row is chosen from: each is tuned, the one of higher validation AES trains
    (``tuning.RunOrder``) and is the page's best_global control."""
    sampling_control: str | None = None
    """A row of the controls' study: the control with the dynamic samplers' sampling, without a length term."""
    horizon: str | None = None
    """A trajectory's metric key (``Shaper.trajectory``) whose last steps the caveats read."""
    example: tuple[str, tuple[str, ...]] | None = None
    """(regime, two rows) whose points the caveats quote as lying on one curve at other strengths."""
    labels: Mapping[str, str] = field(default_factory=dict)
    """row -> how a page names it, for rows that are not a registered method's own name."""

    def label(self, row: str) -> str:
        """How a page names ``row``: the study's label, else its method's display name, else the row itself."""
        from dynashape.shapers import available_shapers, display_name

        if row in self.labels:
            return self.labels[row]
        return display_name(row) if row in available_shapers() else row


def _rows(where: str, key: str, value: Any, allowed: Sequence[str], what: str) -> tuple[str, ...]:
    if not isinstance(value, list) or not all(isinstance(v, str) for v in value):
        raise fail(where, key, value, "must be a list of row names")
    for v in value:
        if v not in allowed:
            raise fail(where, key, v, f"is not {what}")
    return tuple(value)


def _example(where: str, value: Any, rows: Mapping[str, Sequence[str]]) -> tuple[str, tuple[str, ...]]:
    if not isinstance(value, Mapping) or set(value) != {"regime", "rows"}:
        raise fail(where, "roles.example", value, "must be a table with exactly regime and rows")
    regime = value["regime"]
    if regime not in rows:
        raise fail(where, "roles.example.regime", regime, f"must be one of the study's regimes {sorted(rows)}")
    pair = _rows(where, "roles.example.rows", value["rows"], rows[regime], f"a row of the {regime} regime")
    if len(pair) != 2:
        raise fail(where, "roles.example.rows", value["rows"], "must name two rows")
    return regime, pair


def _best_global_among(where: str, value: Any, rows: Mapping[str, Sequence[str]]) -> tuple[str, ...]:
    from dynashape.study.claims import BEST_GLOBAL
    from dynashape.train.presets import PRESETS

    among = _rows(where, "roles.best_global_among", value, sorted(PRESETS), "a preset")
    if any(BEST_GLOBAL in names for names in rows.values()) and not among:
        raise fail(where, "roles.best_global_among", value, f"must name the presets a {BEST_GLOBAL} row is tuned from")
    if len(set(among)) != len(among):
        raise fail(where, "roles.best_global_among", value, "must name each preset once")
    return among


def _horizon(where: str, value: Any) -> str:
    from dynashape.shapers import available_shapers, shaper_trajectory

    declared = {k for n in available_shapers() if shaper_trajectory(n) for k in shaper_trajectory(n).keys}
    if value not in declared:
        raise fail(where, "roles.horizon", value, f"must be a declared trajectory key ({', '.join(sorted(declared))})")
    return value


def parse_roles(where: str, value: Any, rows: Mapping[str, Sequence[str]], controls: Sequence[str] = ()) -> StudyRoles:
    """The roles of a study file's ``[roles]`` table ``value`` (None: every default), checked against its
    ``rows`` (regime -> rows) and the rows ``controls`` it reads from another study (``controls.rows``)."""
    from dynashape.shapers import reference_shaper
    from dynashape.train.presets import PRESETS

    value = {} if value is None else value
    if not isinstance(value, Mapping):
        raise fail(where, "roles", value, f"must be a table of {', '.join(ROLE_KEYS)}")
    unknown = sorted(set(value) - set(ROLE_KEYS))
    if unknown:
        raise fail(where, f"roles.{unknown[0]}", value[unknown[0]], f"unknown key; roles has {', '.join(ROLE_KEYS)}")
    every = sorted({r for names in rows.values() for r in names})
    control = value.get("control", reference_shaper())
    if "control" in value and not (control in controls or all(control in names for names in rows.values())):
        raise fail(where, "roles.control", control, "must be a row of every regime or one of controls.rows")
    sampling = value.get("sampling_control")
    if sampling is not None and (not controls or sampling not in PRESETS):
        raise fail(where, "roles.sampling_control", sampling, "must be a preset the controls' study ran (controls)")
    labels = value.get("labels", {})
    if not isinstance(labels, Mapping) or not all(isinstance(v, str) and v for v in labels.values()):
        raise fail(where, "roles.labels", labels, "must be a table of row = display name")
    return StudyRoles(
        control=control,
        not_baselines=_rows(where, "roles.not_baselines", value.get("not_baselines", []), every, "a row of the study"),
        best_global_among=_best_global_among(where, value.get("best_global_among", []), rows),
        sampling_control=sampling,
        horizon=_horizon(where, value["horizon"]) if "horizon" in value else None,
        example=_example(where, value["example"], rows) if "example" in value else None,
        labels=dict(labels),
    )


def roles_of(plan: Any) -> StudyRoles:
    """The roles of ``plan`` (a ``ComparisonPlan``; None for an ad-hoc comparison: every default)."""
    if plan is None or plan.roles is None:
        return parse_roles("an ad-hoc comparison", None, {} if plan is None else plan.rows)
    return plan.roles
