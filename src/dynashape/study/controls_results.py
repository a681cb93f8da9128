"""The field comparison's results (``dynashape results OUT`` on a folder of ``--plan field``): results-field.json in
results.json's schema and its page, whose plan block (``<!-- plan:begin -->`` ... ``<!-- plan:end -->``) was
committed before the first run and is kept byte for byte.

Descriptive only (the plan says so): means over seeds with 95 % t-intervals, paired differences against GRPO and
LEAD with theirs, the controllers' trajectories, L1 at its fixed budgets. No test, no verdict.

The controls are not in the study's folder: they are another study's runs ``<controls>/runs/<regime>/<row>-seed<s>``
of the rows its file's ``controls.rows`` names, by default in the sibling folder ``controls.folder`` (the field
study's: the follow-up's grpo and lead runs in ``comparison-v2``; ``--controls DIR`` names another).
Every seed a field run finished at needs both controls, evaluated as the field runs were (the checked fields of
config.yaml's eval section, ``evaluation_check``) and paired with them (the same evaluation seed, training seed,
budget and base model); otherwise nothing is written.

A pure function of the files the runners wrote (runs.json, comparison.json, each run's config.yaml, eval.json,
metrics.jsonl, history.jsonl), so partial results regenerate at any time.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from types import MappingProxyType
from typing import Any

from dynashape.io import state
from dynashape.shapers import available_shapers, shaper_trajectory
from dynashape.study.caveats import add_holm, caveats
from dynashape.study.claims import metric_value
from dynashape.study.controls_runs import (
    PAIRED_ON,
    Rows,
    RunRef,
    field_rows,
    history,
    load_controls,
    read_jsonl,
)
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.results import json_clean, load_runs
from dynashape.study.roles import roles_of
from dynashape.study.stats import mean_sd, paired_values, t_interval

__all__ = [
    "FIELD_MEASURES",
    "ROW_MEASURES",
    "TRAJECTORIES",
    "build_controls_results",
    "measure_value",
    "trajectory_keys",
    "write_controls_results",
]

FIELD_MEASURES: tuple[str, ...] = ("accuracy", "mean_length", "truncated_frac", "aes", "trap_pass@32")
"""The five measures of the plan's rows and paired differences (``truncated_frac``: cut at the evaluation's cap)."""
ROW_MEASURES: tuple[str, ...] = (*FIELD_MEASURES, "truncated_at_budget")
"""The rows add the share of responses longer than the regime's training budget B (the evaluation's cap, 256, is
far above B, so few responses are cut there)."""
AT_BUDGET_MEASURES: tuple[str, ...] = ("accuracy", "mean_length", "following_error", "truncated_frac")
TRAJECTORIES: Mapping[str, tuple[str, ...]] = MappingProxyType(
    {n: t.keys for n in available_shapers() if (t := shaper_trajectory(n)) is not None}
)
"""shaper -> the metric keys of its controller state, each built-in shaper's own declaration (``Trajectory``) as
registered at import; ``trajectory_keys`` reads a run's (its config.yaml's shaper, a user's recipe included)."""


def trajectory_keys(ref: RunRef) -> tuple[str, ...]:
    """The metrics.jsonl keys of the controller state a run's shaper logs (its config.yaml's ``train.shaper``
    and that shaper's declared ``Trajectory``); none for a shaper without a controller or no longer registered."""
    shaper = (ref["config"].get("train") or {}).get("shaper")
    trajectory = shaper_trajectory(shaper) if shaper in available_shapers() else None
    return trajectory.keys if trajectory is not None else ()


def measure_value(run_eval: Mapping[str, Any], measure: str, *, base: bool = False) -> float | None:
    """``measure`` of one eval.json (``base``: of the base model's evaluation in it; the base's AES is 0 by
    definition, AES being measured against it); None when undefined."""
    ev = {"final": run_eval["base"], "aes": 0.0} if base else run_eval
    if measure in ("truncated_frac", "truncated_at_budget"):
        value = ev["final"].get(measure)
        return None if value is None else float(value)
    value = metric_value(ev, measure)
    return None if value is None else float(value)


def _interval_entry(values: Mapping[int, float | None]) -> dict[str, Any] | None:
    """{mean, sd, n, interval, seeds} of the finite ``values`` (seed -> value); None when there are none."""
    kept = {s: float(v) for s, v in sorted(values.items()) if v is not None and math.isfinite(v)}
    if not kept:
        return None
    ti = t_interval(list(kept.values()))
    sd = mean_sd(list(kept.values())).sd
    return {
        "mean": ti.estimate,
        "sd": sd if math.isfinite(sd) else None,
        "n": ti.n,
        "interval": [ti.low, ti.high] if math.isfinite(ti.low) else None,
        "seeds": list(kept),
    }


# ----------------------------------------------------------------------------------------------- numbers
def _summary(rows: Rows, sources: Mapping[tuple[str, str], str]) -> list[dict[str, Any]]:
    """Per (regime, method): each measure's mean over seeds with its t-interval, and (as results.json's rows) the
    base's mean accuracy and length over the row's seeds."""
    out = []
    for (regime, method), by_seed in sorted(rows.items()):
        row: dict[str, Any] = {"regime": regime, "method": method, "source": sources[(regime, method)],
                               "seeds": sorted(by_seed), "n": len(by_seed)}  # fmt: skip
        for measure in ROW_MEASURES:
            entry = _interval_entry({s: measure_value(r["eval"], measure) for s, r in by_seed.items()})
            if entry is not None:
                row[measure] = entry
        row["base"] = {
            m: sum(measure_value(r["eval"], m, base=True) or 0.0 for r in by_seed.values()) / len(by_seed)
            for m in ("accuracy", "mean_length")
        }
        out.append(row)
    return out


def _base(rows: Rows) -> dict[str, dict[str, Any]]:
    """Per regime, the base model's measures over the seeds' base evaluations (one per seed; the field runs' and
    the controls' of one seed are the same evaluation)."""
    per: dict[str, dict[int, Mapping[str, Any]]] = {}
    for (regime, _), by_seed in sorted(rows.items()):
        for seed, ref in by_seed.items():
            per.setdefault(regime, {}).setdefault(seed, ref["eval"])
    out = {}
    for regime, evs in per.items():
        out[regime] = {"seeds": sorted(evs)}
        for measure in ROW_MEASURES:
            entry = _interval_entry({s: measure_value(ev, measure, base=True) for s, ev in evs.items()})
            if entry is not None:
                out[regime][measure] = entry
    return out


def _differences(field: Rows, controls: Rows, methods: Sequence[str]) -> list[dict[str, Any]]:
    """Each field method minus each control at the same seed, per measure: the per-seed differences and their
    mean with its 95 % t-interval."""
    out = []
    for (regime, method), by_seed in sorted(field.items()):
        for control in methods:
            other = controls.get((regime, control), {})
            for measure in FIELD_MEASURES:
                diffs = paired_values(
                    {s: measure_value(r["eval"], measure) for s, r in by_seed.items()},
                    {s: measure_value(r["eval"], measure) for s, r in other.items()},
                )
                if not diffs:
                    continue
                ti = t_interval(list(diffs.values()))
                out.append({
                    "regime": regime, "method": method, "versus": control, "role": f"{control} control",
                    "metric": measure, "estimate": ti.estimate,
                    "interval": [ti.low, ti.high] if math.isfinite(ti.low) else None,
                    "n": ti.n, "seeds": list(diffs), "differences": list(diffs.values()),
                })  # fmt: skip
    return out


def _trajectories(rows: Rows) -> list[dict[str, Any]]:
    """Per (regime, method, metric) of its runs' trajectory (``trajectory_keys``): per step, the mean over the
    seeds that logged it and its 95 % t-interval (the band; None where fewer than two seeds logged the step)."""
    out = []
    for (regime, method), by_seed in sorted(rows.items()):
        keys = list(dict.fromkeys(k for ref in by_seed.values() for k in trajectory_keys(ref)))
        if not keys:
            continue
        logged = {seed: read_jsonl(ref["dir"] / "metrics.jsonl") for seed, ref in by_seed.items()}
        for metric in keys:
            per_step: dict[int, dict[int, float]] = {}
            for seed, lines in logged.items():
                for line in lines:
                    if metric in line and "step" in line and line[metric] is not None:
                        per_step.setdefault(int(line["step"]), {})[seed] = float(line[metric])
            if not per_step:
                continue
            steps = sorted(per_step)
            stats = [_interval_entry(per_step[s]) for s in steps]
            out.append({
                "regime": regime, "method": method, "metric": metric, "steps": steps,
                "mean": [e["mean"] for e in stats],  # type: ignore[index]
                "interval": [e["interval"] for e in stats],  # type: ignore[index]
                "n": [e["n"] for e in stats],  # type: ignore[index]
            })  # fmt: skip
    return out


def _at_budget(field: Rows) -> list[dict[str, Any]]:
    """The fixed-budget evaluation of the rows that have one (eval.json ``at_budget``: a method that reads budget
    prompts, ``EvalConfig``'s budgets): per regime, method and budget, each measure's mean over seeds with its 95 %
    t-interval."""
    out = []
    for (regime, method), by_seed in sorted(field.items()):
        budgets = sorted({b for r in by_seed.values() for b in (r["eval"].get("at_budget") or {})}, key=int)
        for budget in budgets:
            entry: dict[str, Any] = {"regime": regime, "method": method, "budget": int(budget)}
            for measure in AT_BUDGET_MEASURES:
                values = {
                    s: (r["eval"].get("at_budget") or {}).get(budget, {}).get(measure) for s, r in by_seed.items()
                }
                cell = _interval_entry(values)
                if cell is not None:
                    entry[measure] = cell
            out.append(entry)
    return out


def _run_entry(regime: str, method: str, seed: int, ref: RunRef, source: str, root: Path) -> dict[str, Any]:
    ev = ref["eval"]
    entry = {
        "method": method, "regime": regime, "seed": seed, "source": source,
        "run_dir": str(ref["dir"].relative_to(root)) if ref["dir"].is_relative_to(root) else str(ref["dir"]),
        "final": {m: measure_value(ev, m) for m in ROW_MEASURES},
        "base": {m: measure_value(ev, m, base=True) for m in ROW_MEASURES},
        "aes": ev.get("aes"), "wall_seconds": ev.get("wall_seconds"), **history(ref),
    }  # fmt: skip
    if ev.get("at_budget"):
        entry["at_budget"] = ev["at_budget"]
    return entry


def _plan_rows(plan: ComparisonPlan) -> list[str]:
    """Every row the plan trains, in any regime: each gets one plot style whether or not it has finished runs."""
    return sorted({row for rows in plan.rows.values() for row in rows})


def build_controls_results(
    out: str | Path,
    plan: ComparisonPlan,
    *,
    controls: str | Path | None = None,
    evaluation: Mapping[str, Any] | None = None,
) -> dict[str, Any]:
    """Everything results-field.json holds, from the field folder ``out`` and the controls' folder ``controls``
    (None: ``out``'s sibling ``plan.controls['folder']``); ``evaluation``: the plan's and each run's evaluation settings
    (``pages.evaluation_record``), whose ``plan`` the controls are checked against."""
    out = Path(out)
    controls_dir = Path(controls) if controls is not None else out.parent / plan.controls["folder"]
    methods = tuple(plan.controls["rows"])
    records = load_runs(out)
    meta = state.read_json(out / "comparison.json") if (out / "comparison.json").exists() else {}
    field = field_rows(out, records)
    if evaluation is not None and "plan" in evaluation:
        expected = evaluation["plan"]
    else:  # the plan's registered evaluation
        from dynashape.study.evaluation_check import registered_evaluation

        expected = registered_evaluation(plan.eval)
    control_rows = load_controls(controls_dir, field, expected, methods)
    both: Rows = {**field, **control_rows}
    sources = {key: "field" for key in field} | {key: "controls" for key in control_rows}
    roots = {"field": out, "controls": controls_dir}
    runs = [
        _run_entry(regime, method, seed, ref, sources[(regime, method)], roots[sources[(regime, method)]])
        for (regime, method), by_seed in sorted(both.items())
        for seed, ref in sorted(by_seed.items())
    ]
    differences = _differences(field, control_rows, methods)
    roles = roles_of(plan)
    add_holm(differences, roles.control)
    control_commits = sorted({c for r in runs if r["source"] == "controls" for c in r["commits"]})
    results: dict[str, Any] = {
        "folder": str(out),
        "command": meta.get("command"),
        "wall_seconds": meta.get("wall_seconds"),
        "jobs": meta.get("jobs"),
        "run_seconds": sum(float(r["wall_seconds"] or 0.0) for r in runs if r["source"] == "field"),
        "finished_runs": sum(len(v) for v in field.values()),
        "planned_runs": sum(len(rows) for rows in (meta.get("rows") or {}).values()) * len(meta.get("seeds") or [])
        or None,
        "unfinished": sorted(r["run_dir"] for r in records if r.get("eval") is None and r.get("split") == "test"),
        "failed": sorted(r["run_dir"] for r in records if r.get("status") == "failed"),
        "machine": meta.get("machine"),
        "seeds": meta.get("seeds"),
        "rows": meta.get("rows"),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "measures": list(FIELD_MEASURES),
        "row_measures": list(ROW_MEASURES),
        "controls": {
            "folder": str(controls_dir),
            "default": controls is None,
            "methods": list(methods),
            "roles": {regime: {f"{c} control": c for c in methods} for regime in sorted({r for r, _ in field})},
            "commits": control_commits,
            "field_commits": sorted({c for r in runs if r["source"] == "field" for c in r["commits"]}),
            "paired_on": list(PAIRED_ON),
        },
        "runs": runs,
        "base": _base(both),
        "summary": _summary(both, sources),
        "differences": differences,
        "trajectories": _trajectories(both),
        "at_budget": _at_budget(field),
    }
    results["caveats"] = caveats(field, control_rows, controls_dir, results, roles)
    if evaluation is not None:
        results["evaluation"] = dict(evaluation)
    return results


def write_controls_results(
    out: str | Path,
    report: str | Path,
    plan: ComparisonPlan,
    *,
    controls: str | Path | None = None,
    evaluation: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write the field page ``report`` (its plan block kept verbatim), its JSON (same stem) and plots (folder of the
    same stem); returns the paths written.

    Raises:
        ValueError: ``report`` has no plan block (``<!-- plan:begin -->`` ... ``<!-- plan:end -->``) to keep.
        ControlsError, EvaluationMismatchError: see ``load_controls``.
    """
    from dynashape.study.controls_page import controls_markdown, kept_head
    from dynashape.study.results_page import NOTES_BEGIN, NOTES_END, kept_block

    report = Path(report)
    head = kept_head(report)  # refuses before anything is computed or written
    notes = kept_block(report, NOTES_BEGIN, NOTES_END)
    results = build_controls_results(out, plan, controls=controls, evaluation=evaluation)
    roles = roles_of(plan)
    plot_dir = report.with_suffix("")
    written: list[Path] = []
    try:
        from dynashape.study.controls_plots import plot_controls

        written = plot_controls(results, plot_dir, rows=_plan_rows(plan), roles=roles)
    except ImportError:  # matplotlib missing: tables only
        pass
    rel = [str(p.relative_to(report.parent)) for p in written]
    state.write_text(report.with_suffix(".json"), json.dumps(json_clean(results), indent=1, allow_nan=False))
    state.write_text(report, controls_markdown(results, head, rel, roles, report=str(report), notes=notes))
    return [report, report.with_suffix(".json"), *written]
