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
import sys
from collections.abc import Mapping
from dataclasses import dataclass, field
from importlib import resources
from pathlib import Path
from typing import Any

from dynashape.study.claim_entries import parse_claims
from dynashape.study.claims import BEST_GLOBAL, Claim, Part
from dynashape.study.plan_checks import StudyFileError, as_int, as_name, fail
from dynashape.study.plan_rows import parse_fixed, parse_rows
from dynashape.study.roles import StudyRoles, parse_roles

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

PAGE_KINDS = ("claims", "holm", "controls", "generic", "frontiers")
"""The results pages a study can ask for (``study.pages``): claims decided by intervals or by Holm, rows beside
another study's controls, a table against a baseline row, and each method's frontier through a sweep."""
NAMED_ROW_PAGES = ("generic", "frontiers")
"""The pages that read a run's row by its name, so a row may be named otherwise than its preset (a sweep, a
control such as GRPO with 16 rollouts)."""
TOP_KEYS = (
    "name", "page", "report", "description", "seeds", "tune", "tuning_seeds", "eval", "rows", "baseline", "controls",
    "decide", "alpha", "best_global", "claims", "frozen", "fixed", "warmup", "roles",
)  # fmt: skip
CONTROL_KEYS = ("folder", "rows")


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
    warmup: Mapping[str, Any] = field(default_factory=dict)
    """``WarmupConfig`` fields of every run: the base model every row starts from (``budget_prompt_share = 0.5``:
    the budget-tolerant base); empty: the default base."""
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
    roles: StudyRoles | None = None
    """What the study compares against (its ``[roles]`` table, ``study.roles``); None: an ad-hoc comparison's
    defaults."""

    def preset(self, row: str) -> str:
        """The preset ``row`` trains (its own name unless ``presets`` names another)."""
        return self.presets.get(row, row)


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


def parse_plan(data: Mapping[str, Any], where: str) -> ComparisonPlan:
    """The plan of a study file's parsed ``data`` (``where``: the file, for the errors)."""
    unknown = sorted(set(data) - set(TOP_KEYS))
    if unknown:
        raise fail(where, unknown[0], data[unknown[0]], f"unknown key; a study file has {', '.join(TOP_KEYS)}")
    for key in ("name", "page", "seeds", "rows"):
        if key not in data:
            raise StudyFileError(f"{where}: {key} is missing (a study file needs name, page, seeds and rows)")
    name = as_name(where, "name", data["name"])
    if data["page"] not in PAGE_KINDS:
        raise fail(where, "page", data["page"], f"must be one of {', '.join(PAGE_KINDS)}")
    if not isinstance(data.get("description", ""), str):
        raise fail(where, "description", data["description"], "must be text")
    report = data.get("report")
    if report is not None and (not isinstance(report, str) or not report.endswith(".md")):
        raise fail(where, "report", report, "must be a markdown page's path (PAGE.md)")
    seeds = _seeds(where, data["seeds"])
    tune = data.get("tune", True)
    if not isinstance(tune, bool):
        raise fail(where, "tune", tune, "must be true or false")
    study_fixed = parse_fixed(where, "fixed", data.get("fixed", {}))
    rows, presets, fixed, row_seeds = parse_rows(where, data["rows"], len(seeds), study_fixed)
    if presets and data["page"] not in NAMED_ROW_PAGES:  # those pages read runs by preset: named rows would merge
        raise fail(
            where,
            "page",
            data["page"],
            f"rows named otherwise than their preset ({', '.join(presets)}) need "
            f"page = {' or '.join(map(repr, NAMED_ROW_PAGES))}",
        )
    if data["page"] == "generic" and any(BEST_GLOBAL in names for names in rows.values()):
        raise fail(where, "rows", BEST_GLOBAL, "the generic page reads rows by name; name the baseline you mean")
    baseline = _baseline(where, data.get("baseline"), data["page"], rows)
    controls = _controls(where, data.get("controls"))
    claims, parts = ((), ())
    if "claims" in data or "decide" in data:
        claims, parts = parse_claims(where, data.get("claims"), data.get("decide"), rows)
    return ComparisonPlan(
        rows=rows,
        seeds=seeds,
        tuning_seeds=as_int(where, "tuning_seeds", data.get("tuning_seeds", 2), low=1),
        row_seeds=row_seeds,
        fixed=fixed,
        eval=_section(where, "eval", data.get("eval", {})),
        warmup=_section(where, "warmup", data.get("warmup", {})),
        tune=tune,
        name=name,
        page=data["page"],
        presets=presets,
        baseline=baseline,
        report=report,
        controls=controls,
        claims=claims,
        decide=data.get("decide"),
        parts=parts,
        alpha=_alpha(where, data.get("alpha", 0.05)),
        best_global=_best_global(where, data.get("best_global", {}), rows),
        frozen=_frozen(where, data.get("frozen")),
        roles=parse_roles(where, data.get("roles"), rows, controls.get("rows", ())),
    )


def _frozen(where: str, value: Any) -> str | None:
    if value is not None and (not isinstance(value, str) or not (studies_dir() / value).is_file()):
        raise fail(where, "frozen", value, f"must name a JSON file in {studies_dir()}")
    return value


def _alpha(where: str, value: Any) -> float:
    if isinstance(value, bool) or not isinstance(value, int | float) or not 0 < value < 1:
        raise fail(where, "alpha", value, "must be a level in (0, 1)")
    return float(value)


def _best_global(where: str, value: Any, rows: Mapping[str, tuple[str, ...]]) -> dict[str, str]:
    if not isinstance(value, Mapping):
        raise fail(where, "best_global", value, "must be a table of regime = row")
    for regime, row in value.items():
        if regime not in rows or row not in rows[regime]:
            raise fail(where, f"best_global.{regime}", row, "must name a row of that regime")
    return dict(value)


def _seeds(where: str, value: Any) -> tuple[int, ...]:
    if not isinstance(value, list) or not value:
        raise fail(where, "seeds", value, "must be a non-empty list of integers")
    seeds = tuple(as_int(where, "seeds", s, low=0) for s in value)
    if len(set(seeds)) != len(seeds):
        raise fail(where, "seeds", value, "must be distinct")
    return seeds


def _section(where: str, key: str, value: Any) -> dict[str, Any]:
    """A RunConfig section's fields (``eval``: ``EvalConfig``; ``warmup``: ``WarmupConfig``) every run shares
    (lists as tuples, as the config holds them), checked by the config class itself."""
    from dynashape.train.config import SECTIONS

    klass = SECTIONS[key]
    if not isinstance(value, dict):
        raise fail(where, key, value, f"must be a table of {klass.__name__} fields")
    fields = [f.name for f in dataclasses.fields(klass)]
    for name, v in value.items():
        if name not in fields:
            raise fail(where, f"{key}.{name}", v, f"unknown key; {klass.__name__} has {', '.join(fields)}")
    out = {k: tuple(v) if isinstance(v, list) else v for k, v in value.items()}
    try:
        klass(**out)
    except (TypeError, ValueError) as err:
        raise StudyFileError(f"{where}: {key}: {err}") from None
    return out


def _controls(where: str, value: Any) -> dict[str, Any]:
    from dynashape.train.presets import PRESETS

    if value is None:
        return {}
    if not isinstance(value, dict) or set(value) != set(CONTROL_KEYS):
        raise fail(where, "controls", value, f"must be a table with exactly {', '.join(CONTROL_KEYS)}")
    folder = as_name(where, "controls.folder", value["folder"])
    rows = value["rows"]
    if not isinstance(rows, list) or not rows or any(r not in PRESETS for r in rows):
        raise fail(where, "controls.rows", rows, "must be a non-empty list of preset names")
    return {"folder": folder, "rows": tuple(rows)}


def _baseline(where: str, value: Any, page: str, rows: Mapping[str, tuple[str, ...]]) -> str | None:
    if page != "generic":
        if value is not None:
            raise fail(where, "baseline", value, f"only a generic page reads a baseline (page = {page!r})")
        return None
    if value is None:
        raise StudyFileError(f"{where}: baseline is missing (a generic page compares every row with it)")
    lacking = [r for r, ms in rows.items() if value not in ms]
    if lacking:
        raise fail(where, "baseline", value, f"must be a row of every regime; {', '.join(lacking)} lacks it")
    return value
