"""A study as a data file: a TOML file (``studies/<name>.toml``, or a user's own) read into a ``ComparisonPlan``.

The format, with a copyable example, is in docs/comparison.md ("A study is a data file"). In short::

    name = "my-study"          # recorded in comparison.json
    page = "generic"           # the results page: claims, holm, controls or generic
    baseline = "grpo"          # generic page: the row every other is compared with, per seed
    seeds = [0, 1]             # paired seeds of every row
    tune = false               # tune rows with a tuning grid on the validation split (default true)
    tuning_seeds = 2
    [eval]                     # EvalConfig fields of every run
    n_samples = 4
    [rows]                     # regime -> rows: a preset's name, or a table
    tight = ["grpo", { method = "alp", sweep = { "shaper_kwargs.beta" = [0.1, 0.2] } }]

A row table has ``method`` (a preset), and optionally ``fixed`` (``make_train_config`` overrides the row trains at:
``{ shaper_kwargs.threshold = 25 }``), ``seeds`` (how many of the study's seeds it trains: the first n) and
``sweep`` (one parameter and a list of values: one row per value, named ``<method>@<key>=<value>``, its run folder
``runs/<regime>/<method>@<key>=<value>-seed<s>``; a plain row keeps ``<method>-seed<s>``). ``controls`` names
another study's runs this one pairs with (``folder``, ``rows``). Every key is checked; an error names the file,
the key and the value.

TOML is read with the standard library's ``tomllib`` (Python >= 3.11) or, on 3.10, with ``tomli``, the same
parser before it joined the standard library (a dependency on 3.10 only): ``dynashape results`` needs the
committed studies' plans on every Python the package supports.
"""

from __future__ import annotations

import dataclasses
import re
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dynashape.study.claim_entries import parse_claims
from dynashape.study.claims import BEST_GLOBAL, Claim, Part

if sys.version_info >= (3, 11):
    import tomllib
else:  # pragma: no cover - Python 3.10
    import tomli as tomllib

__all__ = [
    "PAGE_KINDS",
    "ComparisonPlan",
    "StudyFileError",
    "committed_plans",
    "find_plan",
    "load_plan_file",
    "parse_plan",
    "studies_dir",
]

PAGE_KINDS = ("claims", "holm", "controls", "generic")
"""The results pages a study can ask for (``study.pages``): the three committed studies' and a generic table."""
TOP_KEYS = (
    "name", "page", "report", "description", "seeds", "tune", "tuning_seeds", "eval", "rows", "baseline", "controls",
    "decide", "alpha", "best_global", "claims", "frozen",
)  # fmt: skip
ROW_KEYS = ("method", "fixed", "sweep", "seeds")
CONTROL_KEYS = ("folder", "rows")
NAME = re.compile(r"^[A-Za-z0-9][A-Za-z0-9_.-]*$")
RESERVED = {
    "method": "the row's preset",
    "shaper": "the row's preset",
    "regime": "the key of rows it is listed under",
    "seed": "the study's paired seeds",
}
"""TrainConfig fields a row cannot fix or sweep: the study sets them."""


@dataclass(frozen=True, kw_only=True)
class ComparisonPlan:
    """Rows per budget regime (a preset's name, a sweep's row ``<preset>@<key>=<value>``, or ``BEST_GLOBAL``) and
    the paired seeds of every row: what a study file declares (``load_plan_file``), or an ad-hoc comparison's."""

    rows: Mapping[str, tuple[str, ...]]
    seeds: tuple[int, ...] = (0, 1, 2, 3, 4)
    tuning_seeds: int = 2
    row_seeds: Mapping[str, int] = field(default_factory=dict)
    """"regime/row" -> how many of ``seeds`` that row trains: its first ones, so every row stays paired with
    the others (absent: all of them)."""
    fixed: Mapping[str, Mapping[str, Any]] = field(default_factory=dict)
    """"regime/row" -> the ``make_train_config`` overrides that row trains at, fixed before the study (a value
    an earlier study tuned, a sweep's value): no tuning runs for it."""
    eval: Mapping[str, Any] = field(default_factory=dict)
    """``EvalConfig`` fields of every run of the plan (its evaluation protocol)."""
    tune: bool = True
    """Whether rows with a tuning grid and no fixed value are tuned (on the validation split)."""
    name: str | None = None
    """The study's name (its file's ``name``), recorded in comparison.json; None for an ad-hoc comparison."""
    page: str = "claims"
    """Which results page ``dynashape results`` writes (``study.pages.PAGE_KINDS``)."""
    presets: Mapping[str, str] = field(default_factory=dict)
    """row -> its preset, for rows named otherwise than their preset (a sweep's rows, ``alp@beta=0.1``)."""
    baseline: str | None = None
    """The row every other is compared with on a generic page (paired differences per seed)."""
    report: str | None = None
    """The study's committed results page (``docs/results-v2.md``), where ``dynashape results`` writes it."""
    controls: Mapping[str, Any] = field(default_factory=dict)
    """Runs of another study this one pairs with instead of training them (``folder``: that study's folder, a
    sibling of this one's; ``rows``: its rows read at this study's seeds); empty: none."""

    claims: tuple[Claim, ...] = ()
    """The claims registered before the runs (the file's ``[[claims]]``, ``claim_entries``); none: descriptive."""
    decide: str | None = None
    """How the claims are decided: ``interval`` or ``holm`` (``claim_entries.DECISION_RULES``)."""
    parts: tuple[Part, ...] = ()
    """``decide = "holm"``: every claim part with its margin, in the file's order."""
    alpha: float = 0.05
    """``decide = "holm"``: the family-wise level of Holm's step-down."""
    frozen: str | None = None
    """A JSON file of data fixed before the runs, beside the committed studies (``preregistration.frozen_data``)."""
    best_global: Mapping[str, str] = field(default_factory=dict)
    """regime -> the global-threshold baseline an earlier study chose, a control on the page (``BEST_GLOBAL``)."""

    def preset(self, row: str) -> str:
        """The preset ``row`` trains (its own name unless ``presets`` names another)."""
        return self.presets.get(row, row)


class StudyFileError(ValueError):
    """A study file that cannot be a plan: the message names the file, the key and the value."""


def studies_dir() -> Path:
    """The committed study files: ``studies/`` at the repository's root, in the package as ``dynashape/studies``
    (a link in a checkout, the files themselves in a wheel)."""
    return Path(str(resources.files("dynashape") / "studies"))


def committed_plans() -> dict[str, ComparisonPlan]:
    """name -> plan of every committed study file (``studies/*.toml``)."""
    plans = {}
    for path in sorted(studies_dir().glob("*.toml")):
        plan = load_plan_file(path)
        if plan.name in plans:
            raise StudyFileError(f"{path}: name {plan.name!r} is also another committed study's")
        plans[plan.name] = plan  # type: ignore[index]
    return plans


def find_plan(text: str) -> tuple[ComparisonPlan, Path | None]:
    """``--plan``'s plan: a committed study's name (``full``, ``v2``, ``field``; no path returned) or a study
    file's path (``*.toml``)."""
    from dynashape.study.compare import COMPARISON_PLAN

    if text in COMPARISON_PLAN and not text.endswith(".toml"):
        return COMPARISON_PLAN[text], None
    path = Path(text)
    if path.suffix != ".toml" or not path.is_file():
        raise StudyFileError(
            f"--plan {text!r}: neither a committed study ({', '.join(sorted(COMPARISON_PLAN))}) nor a study file "
            "(PATH.toml)"
        )
    return load_plan_file(path), path


def load_plan_file(path: str | Path) -> ComparisonPlan:
    """The plan of the study file ``path`` (TOML), every key checked (``StudyFileError``)."""
    path = Path(path)
    try:
        data = tomllib.loads(path.read_text())
    except tomllib.TOMLDecodeError as err:
        raise StudyFileError(f"{path}: not TOML: {err}") from None
    return parse_plan(data, str(path))


def _fail(where: str, key: str, value: Any, why: str) -> StudyFileError:
    return StudyFileError(f"{where}: {key} = {value!r}: {why}")


def _int(where: str, key: str, value: Any, *, low: int) -> int:
    if isinstance(value, bool) or not isinstance(value, int) or value < low:
        raise _fail(where, key, value, f"must be an integer >= {low}")
    return value


def _str(where: str, key: str, value: Any) -> str:
    if not isinstance(value, str) or not NAME.match(value):
        raise _fail(where, key, value, "must be a name (letters, digits, _ . -)")
    return value


def parse_plan(data: Mapping[str, Any], where: str) -> ComparisonPlan:
    """The plan of a study file's parsed ``data`` (``where``: the file, for the errors)."""
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise _fail(where, unknown[0], data[unknown[0]], f"unknown key; a study file has {', '.join(TOP_KEYS)}")
    for key in ("name", "page", "seeds", "rows"):
        if key not in data:
            raise StudyFileError(f"{where}: {key} is missing (a study file needs name, page, seeds and rows)")
    name = _str(where, "name", data["name"])
    if data["page"] not in PAGE_KINDS:
        raise _fail(where, "page", data["page"], f"must be one of {', '.join(PAGE_KINDS)}")
    if not isinstance(data.get("description", ""), str):
        raise _fail(where, "description", data["description"], "must be text")
    report = data.get("report")
    if report is not None and (not isinstance(report, str) or not report.endswith(".md")):
        raise _fail(where, "report", report, "must be a markdown page's path (PAGE.md)")
    seeds = _seeds(where, data["seeds"])
    tune = data.get("tune", True)
    if not isinstance(tune, bool):
        raise _fail(where, "tune", tune, "must be true or false")
    rows, presets, fixed, row_seeds = _rows(where, data["rows"], len(seeds))
    if presets and data["page"] != "generic":  # those pages read runs by preset: a sweep's rows would merge
        raise _fail(where, "page", data["page"], f"a sweep's rows ({', '.join(presets)}) need page = 'generic'")
    if data["page"] == "generic" and any(BEST_GLOBAL in names for names in rows.values()):
        raise _fail(where, "rows", BEST_GLOBAL, "the generic page reads rows by name; name the baseline you mean")
    baseline = _baseline(where, data.get("baseline"), data["page"], rows)
    claims, parts = ((), ())
    if "claims" in data or "decide" in data:
        claims, parts = parse_claims(where, data.get("claims"), data.get("decide"), rows)
    return ComparisonPlan(
        rows=rows,
        seeds=seeds,
        tuning_seeds=_int(where, "tuning_seeds", data.get("tuning_seeds", 2), low=1),
        row_seeds=row_seeds,
        fixed=fixed,
        eval=_eval(where, data.get("eval", {})),
        tune=tune,
        name=name,
        page=data["page"],
        presets=presets,
        baseline=baseline,
        report=report,
        controls=_controls(where, data.get("controls")),
        claims=claims,
        decide=data.get("decide"),
        parts=parts,
        alpha=_alpha(where, data.get("alpha", 0.05)),
        best_global=_best_global(where, data.get("best_global", {}), rows),
        frozen=_frozen(where, data.get("frozen")),
    )


def _frozen(where: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not (studies_dir() / value).is_file()):
        raise _fail(where, "frozen", value, f"must name a JSON file in {studies_dir()}")
    return value


def _alpha(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise _fail(where, "alpha", value, "must be a level in (0, 1)")
    return float(value)


def _best_global(where: str, value: Any, rows: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise _fail(where, "best_global", value, "must be a table of regime = row")
    for regime, row in value.items():
        if regime not in rows or row not in rows[regime]:
            raise _fail(where, f"best_global.{regime}", row, "must name a row of that regime")
    return dict(value)


def _seeds(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise _fail(where, "seeds", value, "must be a non-empty list of integers")
    seeds = tuple(_int(where, "seeds", s, low=0) for s in value)
    if len(set(seeds)) != len(seeds):
        raise _fail(where, "seeds", value, "must be distinct")
    return seeds


def _eval(where: str, value: Any) -> dict[str, Any]:
    """``EvalConfig`` fields (lists as tuples, as the config holds them), checked by ``EvalConfig`` itself."""
    from dynashape.train.config import EvalConfig

    if not isinstance(value, dict):
        raise _fail(where, "eval", value, "must be a table of EvalConfig fields")
    fields = [f.name for f in dataclasses.fields(EvalConfig)]
    for key, v in value.items():
        if key not in fields:
            raise _fail(where, f"eval.{key}", v, f"unknown key; EvalConfig has {', '.join(fields)}")
    out = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    try:
        EvalConfig(**out)
    except (TypeError, ValueError) as err:
        raise StudyFileError(f"{where}: eval: {err}") from None
    return out


def _controls(where: str, value: Any) -> dict[str, Any]:
    from dynashape.train.presets import PRESETS

    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) != set(CONTROL_KEYS):
        raise _fail(where, "controls", value, f"must be a table with exactly {', '.join(CONTROL_KEYS)}")
    folder = _str(where, "controls.folder", value["folder"])
    rows = value["rows"]
    if not isinstance(rows, list) or not rows or any(r not in PRESETS for r in rows):
        raise _fail(where, "controls.rows", rows, "must be a non-empty list of preset names")
    return {"folder": folder, "rows": tuple(rows)}


def _baseline(where: str, value: Any, page: str, rows: Mapping[str, tuple[str, ...]]) -> str | None:
    if page != "generic":
        if value is not None:
            raise _fail(where, "baseline", value, f"only a generic page reads a baseline (page = {page!r})")
        return None
    if value is None:
        raise StudyFileError(f"{where}: baseline is missing (a generic page compares every row with it)")
    lacking = [r for r, ms in rows.items() if value not in ms]
    if lacking:
        raise _fail(where, "baseline", value, f"must be a row of every regime; {', '.join(lacking)} lacks it")
    return value


# ---------------------------------------------------------------------------------------------------- rows
Rows = tuple[dict[str, tuple[str, ...]], dict[str, str], dict[str, dict[str, Any]], dict[str, int]]


def _rows(where: str, value: Any, n_seeds: int) -> Rows:
    """(regime -> row names, row -> preset where they differ, "regime/row" -> fixed overrides, "regime/row" ->
    seed count) of the file's ``rows`` table."""
    from dynashape.train.presets import REGIMES

    if not isinstance(value, dict) or not value:
        raise _fail(where, "rows", value, "must be a table: regime -> list of rows")
    rows: dict[str, tuple[str, ...]] = {}
    presets: dict[str, str] = {}
    fixed: dict[str, dict[str, Any]] = {}
    row_seeds: dict[str, int] = {}
    for regime, entries in value.items():
        if regime not in REGIMES:
            raise _fail(where, f"rows.{regime}", entries, f"unknown regime; regimes are {', '.join(REGIMES)}")
        if not isinstance(entries, list) or not entries:
            raise _fail(where, f"rows.{regime}", entries, "must be a non-empty list of rows")
        names: list[str] = []
        for entry in entries:
            for row, preset, overrides, n in _expand(where, f"rows.{regime}", regime, entry, n_seeds):
                if row in names:
                    raise _fail(where, f"rows.{regime}", row, "names a row twice")
                names.append(row)
                if row != preset:
                    presets[row] = preset
                if overrides:
                    fixed[f"{regime}/{row}"] = overrides
                if n is not None:
                    row_seeds[f"{regime}/{row}"] = n
        rows[regime] = tuple(names)
    return rows, presets, fixed, row_seeds


def _expand(
    where: str, key: str, regime: str, entry: Any, n_seeds: int
) -> list[tuple[str, str, dict[str, Any], int | None]]:
    """One row entry as (row, preset, fixed overrides, seed count or None) per row it makes (a sweep: several)."""
    from dynashape.train.presets import PRESETS

    if isinstance(entry, str):
        entry = {"method": entry}
    if not isinstance(entry, dict):
        raise _fail(where, key, entry, "a row is a preset's name or a table with method")
    unknown = sorted(set(entry) - set(ROW_KEYS))
    if unknown:
        raise _fail(where, f"{key}.{unknown[0]}", entry[unknown[0]], f"unknown key; a row has {', '.join(ROW_KEYS)}")
    method = entry.get("method")
    if method != BEST_GLOBAL and method not in PRESETS:
        raise _fail(where, f"{key}.method", method, f"unknown method; presets are {', '.join(PRESETS)}")
    if method == BEST_GLOBAL and set(entry) != {"method"}:
        raise _fail(where, key, entry, f"{BEST_GLOBAL} is chosen by tuning: it takes no fixed, sweep or seeds")
    n = None if "seeds" not in entry else _int(where, f"{key}.{method}.seeds", entry["seeds"], low=1)
    if n is not None and n > n_seeds:
        raise _fail(where, f"{key}.{method}.seeds", n, f"a row takes the first n of the study's {n_seeds} seeds")
    fixed = entry.get("fixed", {})
    if not isinstance(fixed, dict):
        raise _fail(where, f"{key}.{method}.fixed", fixed, "must be a table of make_train_config overrides")
    fixed = _nested_all(fixed)  # { "shaper_kwargs.x" = 1 } as { shaper_kwargs = { x = 1 } }
    if set(fixed) & set(RESERVED):
        taken = sorted(set(fixed) & set(RESERVED))[0]
        raise _fail(where, f"{key}.{method}.fixed.{taken}", fixed[taken], "is set by the study: " + RESERVED[taken])
    if "sweep" not in entry:
        _check_overrides(where, f"{key}.{method}.fixed", method, regime, fixed)
        return [(method, method, fixed, n)]
    sweep_key, values = _sweep(where, f"{key}.{method}.sweep", method, entry["sweep"])
    if _leaf(fixed, sweep_key) is not None:
        raise _fail(where, f"{key}.{method}.sweep", sweep_key, "is also fixed: a parameter is either")
    out = []
    for v in values:
        overrides = _merge(fixed, _nested(sweep_key, v))
        _check_overrides(where, f"{key}.{method}.sweep", method, regime, overrides)
        name = f"{method}@{sweep_key.removeprefix('shaper_kwargs.')}={_text(where, f'{key}.{method}.sweep', v)}"
        out.append((name, method, overrides, n))
    return out


def _sweep(where: str, key: str, method: str, value: Any) -> tuple[str, list[Any]]:
    """(the swept key in --set form, its values): one parameter the preset has, a non-empty list of values."""
    from dynashape.shapers import config_class
    from dynashape.train.config import TrainConfig, train_sections
    from dynashape.train.presets import PRESETS

    leaves = _leaves(value) if isinstance(value, dict) else {}
    if len(leaves) != 1:
        raise _fail(where, key, value, 'must be one parameter and its values: { "shaper_kwargs.beta" = [0.1, 0.2] }')
    ((path, values),) = leaves.items()
    if not isinstance(values, list) or not values:
        raise _fail(where, f"{key}.{path}", values, "must be a non-empty list of values")
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
        raise _fail(where, key, path, f"{method!r} has no such parameter; it has {', '.join(have)}")
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
        raise _fail(where, key, dict(overrides), str(err)) from None


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
    raise _fail(where, key, value, "a swept value must be a number, true/false or a name")
