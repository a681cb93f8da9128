"""The numbers of a comparison folder, and ``write_results``: results.md, results.json and plots (``dynashape
results OUT``).

Reads only what the comparison runner wrote (``runs.json``, ``tuning.json``, ``comparison.json`` and each listed
run's ``eval.json``), never a checkpoint, so the report is a pure function of those files and works on partial
results (fewer seeds so far). The markdown keeps the section between ``<!-- claims:begin -->`` and
``<!-- claims:end -->`` of an existing file verbatim: the claims are written (and committed) before the runs, the
numbers after them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.io import state
from dynashape.study.claims import Claim, evaluate_claims, metric_per_problem, metric_value
from dynashape.study.results_page import TABLE_METRICS, kept_claims, results_markdown
from dynashape.study.roles import StudyRoles, roles_of
from dynashape.study.stats import hierarchical_bootstrap, mean_sd, paired_values, t_interval
from dynashape.study.tables import PUBLISHED

__all__ = [
    "SUMMARY_METRICS", "best_tuned", "build_results", "json_clean", "load_runs", "run_entry", "runs_by_row",
    "write_results",
]  # fmt: skip

RunMap = dict[tuple[str, str], dict[int, dict[str, Any]]]


def _read(path: Path, default: Any) -> Any:
    return state.read_json(path) if path.exists() else default


def load_runs(out: str | Path) -> list[dict[str, Any]]:
    """The comparison's run records (``out/runs.json``, an index), each with ``eval`` read from its run folder's
    eval.json (None for a run that failed; an older runs.json that embedded the eval is read as it is)."""
    out = Path(out)
    records = _read(out / "runs.json", [])
    for r in records:
        path = out / r["run_dir"] / "eval.json"
        if path.exists():
            r["eval"] = state.read_json(path)
        r.setdefault("eval", None)
    return records


def runs_by_row(records: Sequence[Mapping[str, Any]]) -> RunMap:
    """(regime, method) -> {seed: eval} of the finished test-split runs."""
    out: RunMap = {}
    for r in records:
        if r["split"] == "test" and r.get("eval") is not None:
            out.setdefault((r["regime"], r["method"]), {})[int(r["seed"])] = r["eval"]
    return out


def best_tuned(
    tuning: Mapping[str, Any], regime: str, among: Sequence[str] | None = None, exclude: Sequence[str] = ()
) -> str | None:
    """The tuned method of ``regime`` with the highest validation AES at its chosen value (``among``: only
    those names); ``exclude``: rows that are not baselines (the study's ``roles.not_baselines``, the method it
    studies)."""
    entries = {m: t for m, t in tuning.get(regime, {}).items() if isinstance(t, dict) and m not in exclude}
    if among is not None:
        entries = {m: t for m, t in entries.items() if m in among}
    scored = [(t.get("chosen_mean_aes"), m) for m, t in entries.items() if t.get("chosen_mean_aes") is not None]
    return max(scored)[1] if scored else None


SUMMARY_METRICS = (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest", "trap_pass@64", "wrong_eigen_ratio")


def _summary(runs: RunMap, n_boot: int, metrics: Sequence[str] = SUMMARY_METRICS) -> list[dict[str, Any]]:
    rows = []
    for (regime, method), by_seed in sorted(runs.items()):
        evs = [by_seed[s] for s in sorted(by_seed)]
        row: dict[str, Any] = {"regime": regime, "method": method, "seeds": sorted(by_seed), "n": len(evs)}
        for metric in metrics:
            values = [v for v in (metric_value(ev, metric) for ev in evs) if v is not None]
            if not values:
                continue
            m = mean_sd(values)
            entry: dict[str, Any] = {"mean": m.mean, "sd": None if m.sd != m.sd else m.sd, "n": m.n}
            per = [metric_per_problem(ev, metric) for ev in evs]
            if all(p is not None for p in per) and len({len(p) for p in per}) == 1:  # type: ignore[arg-type]
                boot = hierarchical_bootstrap([list(p) for p in per], n_boot=n_boot)  # type: ignore[union-attr]
                entry["bootstrap_interval"] = [boot.low, boot.high]
            row[metric] = entry
        row["base"] = {k: mean_sd([ev["base"][k] for ev in evs]).mean for k in ("accuracy", "mean_length")}
        rows.append(row)
    return rows


def _differences(
    runs: RunMap, controls: Mapping[str, Mapping[str, str]], n_boot: int, reference: str
) -> list[dict[str, Any]]:
    """Paired differences of every method against each named control of its regime; the study's control
    ``reference`` is no treatment."""
    out = []
    for (regime, method), a in sorted(runs.items()):
        for role, control in controls.get(regime, {}).items():
            b = runs.get((regime, control))
            if b is None or method in (control, reference):
                continue
            for metric in (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest"):
                diffs = paired_values(
                    {s: metric_value(ev, metric) for s, ev in a.items()},
                    {s: metric_value(ev, metric) for s, ev in b.items()},
                )
                if not diffs:
                    continue
                ti = t_interval(list(diffs.values()))
                entry: dict[str, Any] = {
                    "regime": regime,
                    "method": method,
                    "versus": control,
                    "role": role,
                    "metric": metric,
                    "estimate": ti.estimate,
                    "interval": [None if ti.low != ti.low else ti.low, None if ti.high != ti.high else ti.high],
                    "n": ti.n,
                }
                rows = [(metric_per_problem(a[s], metric), metric_per_problem(b[s], metric)) for s in diffs]
                if all(x is not None and y is not None and len(x) == len(y) for x, y in rows):
                    boot = hierarchical_bootstrap([list(x - y) for x, y in rows], n_boot=n_boot)  # type: ignore[operator]
                    entry["bootstrap_interval"] = [boot.low, boot.high]
                out.append(entry)
    return out


def _at_difficulty(ev: Mapping[str, Any], d: str) -> dict[str, np.ndarray] | None:
    """Per-problem accuracy and mean length of the problems of difficulty ``d`` (None without per_problem)."""
    final = ev["final"]
    pp = final.get("per_problem")
    if pp is None:
        return None
    keep = np.array([str(x) == d for x in pp["difficulty"]])
    return {
        "accuracy": np.array(pp["n_correct"], dtype=np.float64)[keep] / float(final["n_samples"]),
        "mean_length": np.array(pp["mean_length"], dtype=np.float64)[keep],
    }


def _boot(rows: Sequence[np.ndarray | None], n_boot: int) -> list[float] | None:
    if not rows or any(r is None or len(r) == 0 for r in rows) or len({len(r) for r in rows}) != 1:  # type: ignore[arg-type]
        return None
    b = hierarchical_bootstrap(np.stack(rows), n_boot=n_boot)  # type: ignore[arg-type]
    return [b.low, b.high]


def _per_difficulty(runs: RunMap, n_boot: int, reference: str) -> list[dict[str, Any]]:
    """Per regime, method and difficulty: accuracy and mean length (mean ± sd over seeds, bootstrap of seeds then
    problems) and, against the study's control ``reference`` (``vs_<reference>``), the paired difference
    (t-interval over seeds, bootstrap of per-problem differences)."""
    out = []
    for (regime, method), by_seed in sorted(runs.items()):
        control = runs.get((regime, reference)) if method != reference else None
        for d in sorted(next(iter(by_seed.values()))["final"]["per_difficulty"], key=int):
            entry: dict[str, Any] = {"regime": regime, "method": method, "difficulty": int(d)}
            for metric in ("accuracy", "mean_length"):
                values = {s: ev["final"]["per_difficulty"][d][metric] for s, ev in by_seed.items()
                          if d in ev["final"]["per_difficulty"]}  # fmt: skip
                m = mean_sd(list(values.values()))
                cell: dict[str, Any] = {"mean": m.mean, "sd": None if m.sd != m.sd else m.sd, "n": m.n}
                per = [_at_difficulty(by_seed[s], d) for s in values]
                cell["bootstrap_interval"] = _boot([None if p is None else p[metric] for p in per], n_boot)
                if control is not None:
                    other = {s: ev["final"]["per_difficulty"].get(d, {}).get(metric) for s, ev in control.items()}
                    diffs = paired_values(values, other)
                    if diffs:
                        ti = t_interval(list(diffs.values()))
                        pairs = [(_at_difficulty(by_seed[s], d), _at_difficulty(control[s], d)) for s in diffs]
                        rows = [None if a is None or b is None else a[metric] - b[metric] for a, b in pairs]
                        cell[f"vs_{reference}"] = {
                            "estimate": ti.estimate,
                            "interval": [None if ti.low != ti.low else ti.low, None if ti.high != ti.high else ti.high],
                            "n": ti.n,
                            "bootstrap_interval": _boot(rows, n_boot),
                        }
                entry[metric] = cell
            out.append(entry)
    return out


def run_entry(record: Mapping[str, Any]) -> dict[str, Any]:
    """One finished run's entry in results.json: its row, seed, base and final measures, AES and time."""
    ev = record["eval"]
    final = ev["final"]
    keep = ("accuracy", "mean_length", "pass_at_k", "per_difficulty", "pass_at_k_hard", "wrong_eigen_ratio")
    entry = {
        "method": record["method"],
        "regime": record["regime"],
        "seed": record["seed"],
        "point": record.get("point", ""),
        "base": {k: ev["base"][k] for k in ("accuracy", "mean_length")},
        "final": {k: final[k] for k in keep if k in final},
        "aes": ev.get("aes"),
        "wall_seconds": ev.get("wall_seconds"),
    }
    entry["final"]["trap_pass@64"] = metric_value(ev, "trap_pass@64")
    if "lambda_trajectory" in ev:
        entry["lambda_trajectory"] = ev["lambda_trajectory"]
    return entry


def build_results(
    out: str | Path,
    *,
    n_boot: int = 2000,
    summary_metrics: Sequence[str] = SUMMARY_METRICS,
    best_global: Mapping[str, str] | None = None,
    claims: Sequence[Claim] = (),
    roles: StudyRoles | None = None,
) -> dict[str, Any]:
    """Everything results.json holds, from the comparison folder ``out`` (``summary_metrics``: the per-row
    metrics of ``summary``; ``best_global``: regime -> the global-threshold control an earlier study chose, for a
    folder that tuned nothing; it is then a control of the paired differences; ``roles``: the study's control and
    the rows that are not baselines, None: those of the study the folder ran, ``roles_of_folder``)."""
    out = Path(out)
    if not out.is_dir():  # a mistyped folder must not rewrite a results page with nothing
        raise ValueError(f"out must be a comparison folder (dynashape compare --out), got {str(out)!r}")
    records = load_runs(out)
    tuning = _read(out / "tuning.json", {})
    meta = _read(out / "comparison.json", {})
    runs = runs_by_row(records)
    roles = roles or roles_of_folder(out, meta)
    regimes = sorted({r for r, _ in runs})
    given = dict(best_global or {})
    best_global = {r: tuning[r]["best_global"] for r in tuning if isinstance(tuning[r].get("best_global"), str)}
    for r in regimes:  # a regime whose rows were both global baselines without a best_global row
        best_global.setdefault(r, given.get(r) or best_tuned(tuning, r, roles.best_global_among) or "")
    best_global = {r: m for r, m in best_global.items() if m}
    controls: dict[str, dict[str, str]] = {}
    for r in regimes:
        controls[r] = {f"{roles.control} control": roles.control}
        best = best_tuned(tuning, r, exclude=roles.not_baselines)
        if best:
            controls[r]["best tuned baseline"] = best
        if r in given and (r, given[r]) in runs:
            controls[r]["best_global"] = given[r]
    return {
        "folder": str(out),
        "command": meta.get("command"),
        "wall_seconds": meta.get("wall_seconds"),
        "jobs": meta.get("jobs"),
        # the runs' own times (training and evaluation), test and tuning: the compute, whatever was killed when
        "run_seconds": sum(float(r["eval"].get("wall_seconds") or 0.0) for r in records if r.get("eval")),
        "finished_runs": sum(1 for r in records if r.get("eval")),
        "machine": meta.get("machine"),
        "seeds": meta.get("seeds"),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [run_entry(r) for r in records if r["split"] == "test" and r.get("eval") is not None],
        "tuning": tuning,
        "best_global": best_global,
        "controls": controls,
        "summary": _summary(runs, n_boot, summary_metrics),
        "differences": _differences(runs, controls, n_boot, roles.control),
        "per_difficulty": _per_difficulty(runs, n_boot, roles.control),
        "claims": evaluate_claims(runs, best_global, claims=claims, n_boot=n_boot),
        "published": dict(PUBLISHED),
    }


def write_results(
    out: str | Path,
    report: str | Path,
    *,
    n_boot: int = 2000,
    evaluation: Mapping[str, Any] | None = None,
    claims: Sequence[Claim] | None = None,
) -> list[Path]:
    """Write ``report`` (markdown), the JSON beside it (same stem) and its plots (folder of the same stem);
    returns the paths written. ``evaluation``: the plan's and the runs' own evaluation settings
    (``pages.evaluation_record``), kept in the JSON. ``claims``: the claims of the plan the folder ran (its
    study file's; None: an ad-hoc comparison, whose page has no claims, verdicts or tuning it did not run).
    ``pages.write_page`` chooses the page and checks the evaluation."""
    report = Path(report)
    registered = claims is not None
    roles = roles_of_folder(Path(out), _read(Path(out) / "comparison.json", {}))
    results = build_results(out, n_boot=n_boot, claims=claims or (), roles=roles)
    if evaluation is not None:
        results["evaluation"] = dict(evaluation)
    if not registered:
        results["claims"] = []
    state.make_folder(report.parent)
    plot_dir = report.with_suffix("")
    written = []
    try:
        from dynashape.study.results_plots import plot_results

        written = plot_results(results, plot_dir, control=roles.control)
    except ImportError:  # matplotlib missing: tables only
        pass
    rel = [str(p.relative_to(report.parent)) for p in written]
    claims_text = kept_claims(report, claims or ()) if registered else None
    json_path = report.with_suffix(".json")
    state.write_text(json_path, json.dumps(json_clean(results), indent=1, allow_nan=False))
    state.write_text(report, results_markdown(results, claims_text, rel, control=roles.control))
    return [report, json_path, *written]


def roles_of_folder(out: Path, meta: Mapping[str, Any]) -> StudyRoles:
    """The roles of the study the comparison folder ``out`` ran (its comparison.json ``meta``; an ad-hoc
    comparison's: the defaults)."""
    from dynashape.study.pages import study_of  # pages reads runs through this module

    return roles_of(study_of(out, meta))


def json_clean(x: Any) -> Any:
    """JSON has no NaN: undefined numbers become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): json_clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [json_clean(v) for v in x]
    return x
