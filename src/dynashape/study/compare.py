"""The pre-registered comparison: which runs, with which seeds, tuned how; the runner does the rest.

    out/comparison.json                       the command, plan, seeds, machine, wall time (all invocations)
    out/runs/<regime>/<row>-seed<s>/           test-split runs (``train``'s run folders; a plain row is its preset)
    out/tuning/<regime>/<method>/<key>=<v>-seed<s>/   validation-split tuning runs
    out/tuning.json                           every grid value's validation numbers and the value chosen
    out/runs.json                             an index, one line per finished run (its numbers: the run's eval.json)

Paired seeds: seed ``s`` is ``TrainConfig.seed`` (prompt order, sampling generator, shaper) and the evaluation
seed ``eval_seed(base, s) = base + 1000 s`` (evaluation samples), for every method alike, so two methods with
the same seed see the same prompts in the same order and the same base evaluation; seeds are independent
replicates of RL and evaluation on one shared base model (the warm-up is not replicated).

Tuning: each row whose preset has a grid (``presets.tuning_grids``) trains every grid value on
``tuning_seeds`` seeds (``TUNING_SEED_OFFSET + i``, disjoint from the test seeds, so a test run never shares a
trajectory with the run its value was picked on) and evaluates on the *validation* split; ``choose`` picks the
value. The test split never feeds tuning. ``best_global`` is whichever of ``GLOBAL_THRESHOLD_BASELINES`` has the
higher validation AES at its chosen value.
"""

from __future__ import annotations

import dataclasses
import json
import math
import platform
import sys
import time
from collections.abc import Callable, Mapping, Sequence
from dataclasses import dataclass, field
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dynashape.core.text import counted
from dynashape.io import state
from dynashape.study.claims import BEST_GLOBAL, GLOBAL_THRESHOLD_BASELINES
from dynashape.study.plan_file import ComparisonPlan, committed_plans
from dynashape.study.ray_tasks import Placement, default_jobs, require_ray
from dynashape.study.scheduler import Job, Outcome, prepare, run_jobs
from dynashape.train.config import RunConfig
from dynashape.train.presets import make_train_config, tuning_grids, tuning_overrides
from dynashape.train.run_folder import read_history

__all__ = [
    "BEST_GLOBAL",
    "COMPARISON_PLAN",
    "GLOBAL_THRESHOLD_BASELINES",
    "TUNING_SEED_OFFSET",
    "ComparisonPlan",
    "RunSpec",
    "choose",
    "eval_seed",
    "run_comparison",
    "spec_config",
]

TUNING_SEED_OFFSET = 100
STUDY_FILE = "study.toml"
"""A user's study file, as the comparison folder keeps it (committed studies are found by name)."""
EVAL_SEED_STRIDE = 1000  # evaluate() also uses eval seed + 1 (pass@k subset): strides keep the streams apart


COMPARISON_PLAN: Mapping[str, ComparisonPlan] = MappingProxyType(committed_plans())
"""The committed studies by name (``full``: docs/results.md, ``v2``: docs/results-v2.md, ``field``:
docs/results-field.md), read from their files, ``studies/*.toml`` (``study.plan_file``): no code builds a plan."""


def eval_seed(base: int, seed: int) -> int:
    """The evaluation seed of paired seed ``seed`` (``base`` = ``EvalConfig.seed``; seed 0 keeps it)."""
    return base + EVAL_SEED_STRIDE * seed


@dataclass(frozen=True, kw_only=True)
class RunSpec:
    """One run of the comparison: a preset in a regime at a seed, on a split, with tuned overrides."""

    method: str
    regime: str
    seed: int
    split: str = "test"
    overrides: Mapping[str, Any] = field(default_factory=dict)
    """``make_train_config`` overrides of a grid point (``{"shaper_kwargs": {"beta": 0.03}}``)."""
    row: str | None = None
    """The row's name where it is not the preset's (a sweep's row, ``alp@beta=0.1``): its run folder's name."""

    @property
    def name(self) -> str:
        """The row's name: ``row``, else the preset's."""
        return self.row or self.method

    @property
    def point(self) -> str:
        """``key=value`` of the grid point ('' for none)."""
        items = [(f"{k}.{kk}", vv) for k, v in self.overrides.items() if isinstance(v, dict) for kk, vv in v.items()]
        items += [(k, v) for k, v in self.overrides.items() if not isinstance(v, dict)]
        return ",".join(f"{k.removeprefix('shaper_kwargs.')}={_point_text(v)}" for k, v in items)

    def folder(self) -> Path:
        if self.split == "test":
            return Path("runs", self.regime, f"{self.name}-seed{self.seed}")
        return Path("tuning", self.regime, self.method, f"{self.point or 'preset'}-seed{self.seed}")

    def label(self) -> str:
        point = f" [{self.point}]" if self.point and not self.row else ""  # a sweep's row names its point
        return f"{self.name}{point} {self.regime} seed {self.seed}" + ("" if self.split == "test" else " (tuning)")


def _point_text(value: Any) -> str:
    """A grid point's value as ``RunSpec.point`` writes it: a number ``%g``, true/false, text as it is, a list
    (a schedule, a grid) bracketed."""
    if isinstance(value, bool):
        return "true" if value else "false"
    if isinstance(value, int | float):
        return f"{value:g}"
    if isinstance(value, list | tuple):
        return "[" + ",".join(_point_text(v) for v in value) + "]"
    return str(value)


def spec_config(spec: RunSpec, template: RunConfig, train_overrides: Mapping[str, Any] | None = None) -> RunConfig:
    """The RunConfig of ``spec``: ``template`` (model, warm-up, task, eval...) with the preset's training
    config, ``train_overrides`` (e.g. ``steps``) and the grid point on top; the paired evaluation seed."""
    kw = dict(train_overrides or {})
    shaper_kwargs = {**kw.pop("shaper_kwargs", {}), **spec.overrides.get("shaper_kwargs", {})}
    kw.update({k: v for k, v in spec.overrides.items() if k != "shaper_kwargs"})
    train = make_train_config(spec.method, regime=spec.regime, seed=spec.seed, shaper_kwargs=shaper_kwargs, **kw)
    ev = dataclasses.replace(template.eval, seed=eval_seed(template.eval.seed, spec.seed), split=spec.split)
    return dataclasses.replace(template, train=train, eval=ev)


# ------------------------------------------------------------------------------------------------ tuning
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


# --------------------------------------------------------------------------------------------- the plan
def plan_rows(
    plan: ComparisonPlan | None, *, methods: Sequence[str] | None, regimes: Sequence[str] | None
) -> dict[str, tuple[str, ...]]:
    """regime -> rows: the plan's (filtered by ``methods`` and ``regimes`` when given) or ``methods`` alone."""
    if plan is None:
        if not methods:
            raise ValueError("methods must name at least one preset when no plan is given")
        return {r: tuple(methods) for r in (regimes or ("tight",))}
    rows = {r: rows for r, rows in plan.rows.items() if not regimes or r in regimes}
    if methods:  # a preset's name keeps its sweep's rows too
        rows = {r: tuple(m for m in ms if m in methods or plan.preset(m) in methods) for r, ms in rows.items()}
    return {r: ms for r, ms in rows.items() if ms}


def _tuned_methods(rows: Sequence[str], tune: bool) -> list[str]:
    grids = tuning_grids(64)  # which presets have a grid (the values do not matter here)
    out = [m for m in rows if m in grids] if tune else []
    if BEST_GLOBAL in rows:
        out += [m for m in GLOBAL_THRESHOLD_BASELINES if m not in out]
    return out


class _Tuning:
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
    ) -> None:
        row_seeds, fixed, presets = row_seeds or {}, fixed or {}, presets or {}
        self.ready: list[RunSpec] = []
        self.groups: dict[tuple[str, str], list[RunSpec]] = {}  # (regime, method) -> its tuning runs
        self.waiting: dict[tuple[str, str], list[int]] = {}  # (regime, tuned method or BEST_GLOBAL) -> test seeds
        self.done: dict[tuple[str, str, str, int], dict[str, Any]] = {}  # (regime, method, point, seed) -> record
        self.results: dict[tuple[str, str], dict[str, Any]] = {}
        self.out = previous  # tuning.json: regime -> method -> result (and best_global)
        for regime, methods in rows.items():
            tuned = [m for m in _tuned_methods(methods, tune) if f"{regime}/{m}" not in fixed]
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
        """The global-threshold baseline with the higher mean validation AES (a tie: the first named)."""
        found = [self.results.get((regime, m)) for m in GLOBAL_THRESHOLD_BASELINES]
        if any(f is None for f in found):
            return None
        scores = [-math.inf if f["chosen_mean_aes"] is None else f["chosen_mean_aes"] for f in found]  # type: ignore[index]
        return GLOBAL_THRESHOLD_BASELINES[scores.index(max(scores))]


def _joins(placement: Placement | None) -> bool:
    """Whether the study joins a Ray cluster (else it starts a local one)."""
    return placement is not None and placement.address is not None


def _placement_record(placement: Placement | None) -> dict[str, Any]:
    placement = placement or Placement()
    return {
        "address": placement.address or "local",
        "cpus_per_run": placement.cpus_per_run,
        "gpus_per_run": placement.gpus_per_run,
    }


def machine() -> dict[str, Any]:
    import torch

    return {
        "platform": platform.platform(),
        "processor": platform.processor() or platform.machine(),
        "cpus": default_jobs(),
        "python": platform.python_version(),
        "torch": torch.__version__,
    }


def _write_json(path: Path, data: Any, *, compact: bool = False) -> None:
    """Write atomically (``dynashape.io.state``); ``compact``: one line per list item (runs.json, one line per run,
    diffs well in git)."""
    if compact:
        state.write_text(path, "[\n" + ",\n".join(json.dumps(x, separators=(",", ":")) for x in data) + "\n]\n")
    else:
        state.write_json(path, data, indent=1)


def _record(outcome: Outcome, spec: RunSpec, out: Path) -> dict[str, Any]:
    return {
        "method": spec.method,
        **({"row": spec.row} if spec.row else {}),  # a sweep's row; a plain row is its method (records unchanged)
        "regime": spec.regime,
        "seed": spec.seed,
        "split": spec.split,
        "point": spec.point,
        "overrides": dict(spec.overrides),
        "run_dir": str(outcome.job.run_dir.relative_to(out)),
        "status": outcome.status,
        "seconds": outcome.seconds,
        **_trained_by(outcome.job.run_dir),
        "eval": outcome.eval,
    }


def _trained_by(run_dir: Path) -> dict[str, Any]:
    """From the run's history.jsonl: ``resumes``, the step of every invocation that began mid-run (a run that
    was killed and resumed, however many times and whichever invocation of the study finished it), and
    ``commits``, the code of every invocation that trained it (``"<sha>+dirty"`` for uncommitted source)."""
    history = read_history(run_dir)
    commits = []
    for entry in history:
        name = f"{entry.get('commit')}{'+dirty' if entry.get('dirty') else ''}"
        if name not in commits:
            commits.append(name)
    return {"resumes": [e["from_step"] for e in history if e["from_step"] > 0], "commits": commits}


def run_comparison(
    out: str | Path,
    *,
    rows: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    template: RunConfig,
    train_overrides: Mapping[str, Any] | None = None,
    tuning_seeds: int = 2,
    tune: bool = True,
    row_seeds: Mapping[str, int] | None = None,
    fixed: Mapping[str, Mapping[str, Any]] | None = None,
    presets: Mapping[str, str] | None = None,
    workers: int | None = None,
    placement: Placement | None = None,
    progress: bool = False,
    log: Callable[[str], None] = lambda _: None,
    command: str | None = None,
    plan_name: str | None = None,
    study_file: str | Path | None = None,
    dry_run: bool = False,
) -> dict[str, Any]:
    """Tune, train and evaluate every row at every seed into ``out``; returns ``{"runs", "tuning", "failed"}``.

    Untuned rows and tuning runs start together; a tuned row's test runs start as soon as its tuning has
    finished (``BEST_GLOBAL``'s when both candidates' have). ``dry_run`` only lists the runs (as ``log`` lines).
    ``row_seeds`` ("regime/method" -> n) trains a row at the first n of ``seeds`` only; ``fixed`` ("regime/method"
    -> overrides) trains a row at a value fixed beforehand, untuned (``ComparisonPlan``); ``presets`` (row ->
    preset) names the preset of a row named otherwise (a sweep's row: every such row has a fixed value);
    ``plan_name`` (a key of ``COMPARISON_PLAN``, or a study file's name) is recorded in comparison.json, where
    ``dynashape results`` reads which page to write; ``study_file`` (a user's study file) is copied to
    ``out/study.toml`` and named there (``plan_file``), so the folder's page needs nothing outside it.
    ``workers`` runs at once (None: the machine's cores, or what the cluster holds) on Ray, placed by
    ``placement`` (default: a local Ray); ``progress``: the study's progress bar.

    The folder is locked for the whole study (``state.FolderLock``): a second comparison on it is refused with
    ``FolderBusyError`` naming the holder, since both would rewrite runs.json and tuning.json whole.
    """
    out = Path(out)
    if not seeds:
        raise ValueError("seeds must name at least one seed")
    if tuning_seeds < 1:
        raise ValueError(f"tuning_seeds must be >= 1, got {tuning_seeds}")
    if workers is not None and workers < 1:
        raise ValueError(f"workers must be >= 1, got {workers}")
    named = {f"{r}/{m}" for r, ms in rows.items() for m in ms if m in (presets or {})}
    unnamed = sorted(named - set(fixed or {}))
    if unnamed:
        raise ValueError(f"rows named otherwise than their preset need a fixed value (fixed), got {unnamed}")
    unknown = sorted(set(row_seeds or {}) - {f"{r}/{m}" for r, ms in rows.items() for m in ms})
    if unknown:
        raise ValueError(f"row_seeds names rows the comparison does not have: {unknown}")
    bad = {k: n for k, n in (row_seeds or {}).items() if n < 1}
    if bad:
        raise ValueError(f"row_seeds must be >= 1 (a row takes the first n seeds, at most all), got {bad}")

    def plan() -> _Tuning:  # reads the tuning an earlier invocation left (under the lock when running)
        previous = _previous_tuning(out)
        return _Tuning(rows, seeds, tuning_seeds, tune, previous, row_seeds=row_seeds, fixed=fixed, presets=presets)

    if dry_run:
        return _dry_run(plan(), out, workers, log)
    require_ray()  # before the folder, its lock and comparison.json
    with state.FolderLock(out, what="a comparison (dynashape compare)"):
        if study_file is not None:
            state.write_text(out / STUDY_FILE, Path(study_file).read_text())
        return _run_locked(
            out, plan(), rows, seeds, template, train_overrides, tuning_seeds, tune, workers, placement, progress, log,
            command, {"plan": plan_name, "row_seeds": dict(row_seeds or {}), "fixed": dict(fixed or {})}
            | ({"presets": dict(presets)} if presets else {}) | ({"plan_file": STUDY_FILE} if study_file else {}),
        )  # fmt: skip


def _previous_tuning(out: Path) -> dict:
    previous = out / "tuning.json"
    return state.read_json(previous) if previous.exists() else {}


def _dry_run(plan: _Tuning, out: Path, workers: int | None, log: Callable[[str], None]) -> dict[str, Any]:
    """List the plan's runs as ``log`` lines (with tuning results a previous invocation left in ``out``)."""
    for spec in plan.ready:
        log(f"run {spec.label()} -> {spec.folder()}")
    for (regime, method), s in plan.waiting.items():
        log(f"run {method} {regime} seeds {','.join(map(str, s))} at the tuned value (after tuning)")
    later = plan.expected - len(plan.ready)
    jobs = default_jobs() if workers is None else workers
    log(f"{plan.expected} runs in all ({len(plan.ready)} ready, {later} after tuning), {jobs} jobs")
    return {"runs": [], "tuning": {}, "failed": [], "expected": plan.expected}


def _run_locked(
    out: Path,
    plan: _Tuning,
    rows: Mapping[str, Sequence[str]],
    seeds: Sequence[int],
    template: RunConfig,
    train_overrides: Mapping[str, Any] | None,
    tuning_seeds: int,
    tune: bool,
    workers: int | None,
    placement: Placement | None,
    progress: bool,
    log: Callable[[str], None],
    command: str | None,
    rows_setup: Mapping[str, Any],
) -> dict[str, Any]:
    """``run_comparison`` past its checks, with ``out`` locked."""
    expected = plan.expected
    meta_path = out / "comparison.json"
    meta = state.read_json(meta_path) if meta_path.exists() else {"invocations": []}
    meta.update(
        {
            "command": command or " ".join(sys.argv),
            "rows": {r: list(m) for r, m in rows.items()},
            "seeds": list(seeds),
            "tuning_seeds": tuning_seeds,
            "tuned": tune,
            **rows_setup,
            "jobs": workers if workers is not None or _joins(placement) else default_jobs(),
            "ray": _placement_record(placement),
            "machine": machine(),
            "selection_rule": SELECTION_RULE,
        }
    )
    invocation = {"started": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()), "wall_seconds": None}
    meta["invocations"].append(invocation)
    _write_json(meta_path, meta)
    start = time.perf_counter()

    def record_wall_time() -> None:
        # after every finished run, not only at the end: a comparison is long, gets killed and resumed, and a
        # killed invocation must still count up to its last finished run
        invocation["wall_seconds"] = time.perf_counter() - start
        meta["wall_seconds"] = sum(i["wall_seconds"] or 0.0 for i in meta["invocations"])
        _write_json(meta_path, meta)

    by_job: dict[Path, RunSpec] = {}

    def job(spec: RunSpec) -> Job:
        run_dir = out / spec.folder()
        by_job[run_dir] = spec
        return Job(spec.label(), spec_config(spec, template, train_overrides), run_dir)

    # every run of the plan shares the base model; each seed and split has its own base evaluation
    every = [job(s) for s in plan.ready] + [
        job(RunSpec(method="grpo", regime=r, seed=s)) for (r, _), ss in plan.waiting.items() for s in ss
    ]
    where = f"Ray at {placement.address}" if _joins(placement) else "a local Ray"  # type: ignore[union-attr]
    jobs = "as many" if workers is None else str(workers)
    log(f"{expected} runs in all, {jobs} at once on {where}; preparing the base model and base evaluations")
    prepare((j.cfg for j in every), log=log)

    records: list[dict[str, Any]] = []
    # finished runs recorded by earlier invocations stay in runs.json while their eval.json exists, also those
    # this invocation will reach again (reused: the same record then replaces them): a comparison killed before
    # it gets back to them must not drop them
    old = state.read_json(out / "runs.json") if (out / "runs.json").exists() else []
    kept = [r for r in old if (out / r["run_dir"] / "eval.json").exists()]
    failed: list[str] = []

    def then(outcome: Outcome) -> list[Job]:
        spec = by_job[outcome.job.run_dir]
        records.append(_record(outcome, spec, out))
        if outcome.status == "failed":
            failed.append(f"{outcome.job.label}: {outcome.error}")
        merged = {r["run_dir"]: r for r in kept} | {r["run_dir"]: r for r in records}
        ordered = sorted(merged.values(), key=lambda r: (r["split"], r["regime"], r["method"], r["seed"], r["point"]))
        # an index: each run's numbers stay in its own eval.json (kept in git too), not repeated here
        _write_json(out / "runs.json", [{k: v for k, v in r.items() if k != "eval"} for r in ordered], compact=True)
        settled = len(plan.results)
        new = plan.finished(spec, records[-1], log)
        if len(plan.results) > settled:
            _write_json(out / "tuning.json", plan.out)
        record_wall_time()
        return [job(s) for s in new]

    try:
        run_jobs(
            [job(s) for s in plan.ready],
            workers=workers,
            log=log,
            then=then,
            expected=expected,
            placement=placement,
            progress=progress,
        )
    finally:  # also when interrupted: this invocation's wall time counts up to now
        record_wall_time()
    for (regime, method), ss in plan.waiting.items():  # tuning that never finished (a failed run): said aloud
        failed.append(f"{method} {regime} seeds {ss}: not run, its tuning did not finish")
    record_wall_time()
    runs, problems = counted(len(records), "run"), counted(len(failed), "problem")
    log(f"comparison {'complete' if not failed else 'incomplete'}: {runs}, {problems}")
    for line in failed:
        log(f"  {line}")
    return {"runs": records, "tuning": plan.out, "failed": failed, "expected": expected}
