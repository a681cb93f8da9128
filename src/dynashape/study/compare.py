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
value. The test split never feeds tuning. ``best_global`` is whichever of the study's candidates
(``roles.best_global_among``) has the higher validation AES at its chosen value.
"""

from __future__ import annotations

import sys
from collections.abc import Callable, Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dynashape.core.text import counted
from dynashape.io import state
from dynashape.shapers import reference_shaper
from dynashape.study.claims import BEST_GLOBAL
from dynashape.study.comparison_folder import ComparisonRecord, RunIndex, machine, placement_record
from dynashape.study.plan_file import ComparisonPlan, committed_plans
from dynashape.study.ray_tasks import Placement, default_jobs, require_ray
from dynashape.study.run_spec import TUNING_SEED_OFFSET, RunSpec, eval_seed, spec_config
from dynashape.study.scheduler import Job, Outcome, prepare, run_jobs
from dynashape.study.tuning import SELECTION_RULE, RunOrder, choose
from dynashape.train.config import RunConfig

__all__ = [
    "BEST_GLOBAL",
    "COMPARISON_PLAN",
    "TUNING_SEED_OFFSET",
    "ComparisonPlan",
    "RunSpec",
    "choose",
    "eval_seed",
    "run_comparison",
    "spec_config",
]

STUDY_FILE = "study.toml"
"""A user's study file, as the comparison folder keeps it (committed studies are found by name)."""


COMPARISON_PLAN: Mapping[str, ComparisonPlan] = MappingProxyType(committed_plans())
"""The committed studies by name (``full``: docs/results.md, ``v2``: docs/results-v2.md, ``field``:
docs/results-field.md), read from their files, ``studies/*.toml`` (``study.plan_file``): no code builds a plan."""


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


def _joins(placement: Placement | None) -> bool:
    """Whether the study joins a Ray cluster (else it starts a local one)."""
    return placement is not None and placement.address is not None


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
    best_global_among: Sequence[str] = (),
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
    finished (``BEST_GLOBAL``'s when all its candidates' have). ``dry_run`` only lists the runs (as ``log`` lines).
    ``row_seeds`` ("regime/method" -> n) trains a row at the first n of ``seeds`` only; ``fixed`` ("regime/method"
    -> overrides) trains a row at a value fixed beforehand, untuned (``ComparisonPlan``); ``presets`` (row ->
    preset) names the preset of a row named otherwise (a sweep's row: every such row has a fixed value);
    ``best_global_among``: the candidates a ``BEST_GLOBAL`` row is chosen from (the study's roles);
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

    def plan() -> RunOrder:  # reads the tuning an earlier invocation left (under the lock when running)
        previous = _previous_tuning(out)
        return RunOrder(
            rows, seeds, tuning_seeds, tune, previous, row_seeds=row_seeds, fixed=fixed, presets=presets,
            best_global_among=best_global_among,
        )  # fmt: skip

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


def _dry_run(plan: RunOrder, out: Path, workers: int | None, log: Callable[[str], None]) -> dict[str, Any]:
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
    plan: RunOrder,
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
    record = ComparisonRecord(
        out / "comparison.json",
        {
            "command": command or " ".join(sys.argv),
            "rows": {r: list(m) for r, m in rows.items()},
            "seeds": list(seeds),
            "tuning_seeds": tuning_seeds,
            "tuned": tune,
            **rows_setup,
            "jobs": workers if workers is not None or _joins(placement) else default_jobs(),
            "ray": placement_record(placement),
            "machine": machine(),
            "selection_rule": SELECTION_RULE,
        },
    )
    by_job: dict[Path, RunSpec] = {}

    def job(spec: RunSpec) -> Job:
        run_dir = out / spec.folder()
        by_job[run_dir] = spec
        return Job(spec.label(), spec_config(spec, template, train_overrides), run_dir)

    # every run of the plan shares the base model; each seed and split has its own base evaluation
    every = [job(s) for s in plan.ready] + [
        job(RunSpec(method=reference_shaper(), regime=r, seed=s)) for (r, _), ss in plan.waiting.items() for s in ss
    ]
    where = f"Ray at {placement.address}" if _joins(placement) else "a local Ray"  # type: ignore[union-attr]
    jobs = "as many" if workers is None else str(workers)
    log(f"{plan.expected} runs in all, {jobs} at once on {where}; preparing the base model and base evaluations")
    prepare((j.cfg for j in every), log=log)
    index = RunIndex(out)

    def then(outcome: Outcome) -> list[Job]:
        spec = by_job[outcome.job.run_dir]
        settled = len(plan.results)
        new = plan.finished(spec, index.add(outcome, spec), log)
        if len(plan.results) > settled:
            state.write_json(out / "tuning.json", plan.out, indent=1)
        record.record_wall_time()
        return [job(s) for s in new]

    try:
        run_jobs(
            [job(s) for s in plan.ready],
            workers=workers,
            log=log,
            then=then,
            expected=plan.expected,
            placement=placement,
            progress=progress,
        )
    finally:  # also when interrupted: this invocation's wall time counts up to now
        record.record_wall_time()
    failed = index.failed
    for (regime, method), ss in plan.waiting.items():  # tuning that never finished (a failed run): said aloud
        failed.append(f"{method} {regime} seeds {ss}: not run, its tuning did not finish")
    record.record_wall_time()
    runs, problems = counted(len(index.records), "run"), counted(len(failed), "problem")
    log(f"comparison {'complete' if not failed else 'incomplete'}: {runs}, {problems}")
    for line in failed:
        log(f"  {line}")
    return {"runs": index.records, "tuning": plan.out, "failed": failed, "expected": plan.expected}
