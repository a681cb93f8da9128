"""What the frontier page shows (``page = "frontiers"``), computed from a comparison folder's runs alone.

A study's rows are of two kinds: a sweep's rows (``<name>@<key>=<value>``), the strengths of one method, which
make its frontier; and single rows (GRPO, LEAD, the compute-matched controls), reference points. From the runs'
eval.json (the registered evaluation) and metrics.jsonl, per regime:

* ``rows``: each row's test accuracy and mean length (seed means, 95 % t-intervals over seeds), the tokens it
  sampled in training and its sampling rounds per step;
* ``frontiers``: per method, its strengths in the file's order, each with its point;
* ``matched``: at each matched length (``frontier_math.matched_lengths``), the accuracy of every method that enters
  there, and its paired difference from the best-mean one;
* ``versus_rows``: each frontier at each single row's own length, seed by seed, minus that row's accuracy;
* ``which_when``: per matched length, the best-mean method and those whose difference from it covers 0;
* ``at_budget``: L1's fixed-budget evaluation (eval.json ``at_budget``), per row and budget;
* ``trajectories``: the controllers' logged state per step (each shaper's declared trajectory), seed means;

and, for the whole study, the keys of the results schema (``results.build_results``: the folder, command, times,
``finished_runs``, ``machine``, ``seeds``, ``generated``, ``runs``: each finished run's entry) with ``planned_runs``,
and ``invocations``, from the runs' history.jsonl: the code commits they trained at, the machines, the runs resumed
from a checkpoint and the runs trained again from step 0 after an earlier start was cut off before its first
checkpoint (or on a machine without it).

Descriptive: no claim is decided. A study still running gets the page of the runs it has; each frontier uses the
seeds at which all its strengths finished, each paired difference the seeds both sides have.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.io import state
from dynashape.shapers import shaper_trajectory
from dynashape.study.controls_runs import history, read_jsonl
from dynashape.study.frontier_math import accuracy_at, interval_record, matched_lengths, spans_everywhere
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.results import load_runs, run_entry
from dynashape.train.presets import PRESETS
from dynashape.train.run_folder import read_metrics

__all__ = ["build_frontier_results", "frontier_of", "sweep_rows"]

Seeds = dict[int, Mapping[str, Any]]
"""seed -> a finished run's record (``load_runs``: ``eval`` read, ``run_dir``)."""
Frontier = dict[int, tuple[list[float], list[float]]]
"""seed -> (mean lengths [S], accuracies [S]) of a method's strengths at that seed."""


def frontier_of(row: str) -> str | None:
    """The method a sweep's row belongs to (``alp@beta=0.1`` -> ``alp``), None for a single row."""
    return row.split("@", 1)[0] if "@" in row else None


def sweep_rows(rows: Sequence[str]) -> dict[str, list[str]]:
    """method -> its strengths' rows, in the file's order."""
    out: dict[str, list[str]] = {}
    for row in rows:
        method = frontier_of(row)
        if method is not None:
            out.setdefault(method, []).append(row)
    return out


def _value(ev: Mapping[str, Any], measure: str) -> float | None:
    v = ev["final"].get(measure)
    return None if v is None or not math.isfinite(v) else float(v)


def _row(row: str, preset: str, runs: Seeds) -> dict[str, Any]:
    """One row: its seeds, accuracy and length (intervals over seeds), tokens sampled and rounds per step."""
    evs = {s: r["eval"] for s, r in runs.items()}
    entry: dict[str, Any] = {"row": row, "preset": preset, "seeds": sorted(evs)}
    for measure in ("accuracy", "mean_length"):
        entry[measure] = interval_record({s: _value(ev, measure) for s, ev in evs.items()})  # type: ignore[misc]
    tokens = {s: ev["tokens_sampled"] for s, ev in evs.items() if ev.get("tokens_sampled")}
    if tokens:
        entry["tokens_sampled"] = interval_record({s: float(t["prompt"] + t["response"]) for s, t in tokens.items()})
        entry["response_tokens"] = interval_record({s: float(t["response"]) for s, t in tokens.items()})
        entry["rounds_per_step"] = interval_record(
            {s: t["sampling_rounds"] / evs[s]["steps"] for s, t in tokens.items() if evs[s].get("steps")}
        )
    return entry


def _frontier_seeds(strengths: Sequence[str], runs: Mapping[str, Seeds]) -> Frontier:
    """seed -> its points, over the seeds at which every strength finished with both measures."""
    common = set.intersection(*(set(runs.get(r, {})) for r in strengths)) if strengths else set()
    out: Frontier = {}
    for s in sorted(common):
        points = [
            (_value(runs[r][s]["eval"], "mean_length"), _value(runs[r][s]["eval"], "accuracy")) for r in strengths
        ]
        if all(x is not None and y is not None for x, y in points):
            out[s] = ([float(x) for x, _ in points], [float(y) for _, y in points])  # type: ignore[arg-type]
    return out


def _at(frontier: Frontier, lengths: Mapping[int, float]) -> dict[int, float] | None:
    """The frontier's accuracy at each seed's length (seed -> length), over their common seeds; None unless every
    one of those seeds' frontiers spans its length (no extrapolation, and the pairing stays whole)."""
    seeds = sorted(set(frontier) & set(lengths))
    if not seeds or any(not spans_everywhere({s: frontier[s]}, lengths[s]) for s in seeds):
        return None
    return {s: accuracy_at(*frontier[s], lengths[s]) for s in seeds}


def _matched(frontiers: Mapping[str, Frontier]) -> list[dict[str, Any]]:
    """Per matched length: each entering method's accuracy and its paired difference from the best-mean one."""
    out = []
    for at in matched_lengths(frontiers):
        values = {m: _at(f, {s: float(at) for s in f}) for m, f in frontiers.items() if spans_everywhere(f, at)}
        entries = {m: interval_record(v) for m, v in values.items() if v}
        best = max(entries, key=lambda m: entries[m]["estimate"])  # type: ignore[arg-type, return-value]
        for m, e in entries.items():
            paired = {s: v - values[best][s] for s, v in values[m].items() if s in values[best]}  # type: ignore[index, union-attr]
            e["minus_best"] = interval_record(paired)
        out.append({"length": at, "best": best, "methods": entries})
    return out


def _which_when(matched: Sequence[Mapping[str, Any]]) -> list[dict[str, Any]]:
    """Per matched length: the best-mean method, and the others whose difference from it has an interval covering
    0 (or no interval: fewer than two seeds)."""
    out = []
    for m in matched:
        close = [
            name
            for name, e in m["methods"].items()
            if name != m["best"] and (e["minus_best"]["high"] is None or e["minus_best"]["high"] >= 0)
        ]
        out.append({"length": m["length"], "best": m["best"], "not_distinguished": sorted(close)})
    return out


def _versus_rows(frontiers: Mapping[str, Frontier], singles: Mapping[str, Seeds]) -> list[dict[str, Any]]:
    """Each frontier at each single row's own length, seed by seed, minus that row's accuracy (paired)."""
    out = []
    for row, runs in singles.items():
        lengths = {s: _value(r["eval"], "mean_length") for s, r in runs.items()}
        accs = {s: _value(r["eval"], "accuracy") for s, r in runs.items()}
        lengths = {s: v for s, v in lengths.items() if v is not None and accs[s] is not None}
        for method, frontier in frontiers.items():
            at = _at(frontier, lengths)  # type: ignore[arg-type]
            entry: dict[str, Any] = {"row": row, "method": method, "spanned": at is not None}
            if at is not None:
                entry["accuracy"] = interval_record(at)
                entry["minus_row"] = interval_record({s: v - accs[s] for s, v in at.items()})  # type: ignore[operator]
            out.append(entry)
    return out


def _at_budget(rows: Sequence[str], runs: Mapping[str, Seeds]) -> list[dict[str, Any]]:
    """L1's fixed-budget evaluation: per row and budget, each measure's seed mean and interval."""
    out = []
    for row in rows:
        evs = {s: r["eval"] for s, r in runs.get(row, {}).items() if r["eval"].get("at_budget")}
        budgets = sorted({b for ev in evs.values() for b in ev["at_budget"]}, key=int)
        for b in budgets:
            entry: dict[str, Any] = {"row": row, "budget": int(b)}
            for measure in ("accuracy", "mean_length", "following_error"):
                entry[measure] = interval_record(
                    {s: ev["at_budget"].get(b, {}).get(measure) for s, ev in evs.items()}  # type: ignore[misc]
                )
            out.append(entry)
    return out


def _trajectories(out: Path, rows: Sequence[str], presets: Mapping[str, str], runs: Mapping[str, Seeds]) -> list:
    """Per row whose shaper logs a controller (its declared ``Shaper.trajectory``): each key's seed mean per step.
    Where the declaration says a logged 0 stands for something else (``Trajectory.zero_means``), the means leave
    those seeds out (None where every seed is at it), ``zero_seeds`` counts them per step and ``zero_means`` says
    what they are."""
    result = []
    for row in rows:
        declared = shaper_trajectory(PRESETS[presets[row]]["shaper"])  # what the row's method says it logs
        keys = declared.keys if declared else ()
        if not keys or not runs.get(row):
            continue
        per_key: dict[str, dict[int, list[float]]] = {k: {} for k in keys}
        for r in runs[row].values():
            for line in read_metrics(out / r["run_dir"]):
                for k in keys:
                    if line.get(k) is not None and math.isfinite(line[k]):
                        per_key[k].setdefault(int(line["step"]), []).append(float(line[k]))
        for k, steps in per_key.items():
            if not steps:
                continue
            xs = sorted(steps)
            if declared.zero_means is None:
                result.append({"row": row, "key": k, "steps": xs, "mean": [float(np.mean(steps[x])) for x in xs]})
                continue
            values = [[v for v in steps[x] if v != 0] for x in xs]
            result.append({
                "row": row, "key": k, "steps": xs, "mean": [float(np.mean(v)) if v else None for v in values],
                "zero_seeds": [len(steps[x]) - len(v) for x, v in zip(xs, values, strict=True)],
                "zero_means": declared.zero_means,
            })  # fmt: skip
    return result


def _by_row(out: Path, regime: str) -> dict[str, Seeds]:
    runs: dict[str, Seeds] = {}
    for r in load_runs(out):
        if r["split"] == "test" and r["regime"] == regime and r.get("eval") is not None and r["status"] != "failed":
            runs.setdefault(r.get("row") or r["method"], {})[int(r["seed"])] = r
    return runs


def build_frontier_results(out: str | Path, plan: ComparisonPlan) -> dict[str, Any]:
    """Everything the frontier page shows, per regime of ``plan``, from the comparison folder ``out``."""
    out = Path(out)
    regimes = {}
    finished = {regime: _by_row(out, regime) for regime in plan.rows}  # regime -> row -> seed -> record
    for regime, rows in plan.rows.items():
        runs = finished[regime]
        presets = {row: plan.preset(row) for row in rows}
        sweeps = sweep_rows(rows)
        frontiers = {m: _frontier_seeds(strengths, runs) for m, strengths in sweeps.items()}
        frontiers = {m: f for m, f in frontiers.items() if f}
        singles = {row: runs[row] for row in rows if frontier_of(row) is None and runs.get(row)}
        matched = _matched(frontiers)
        regimes[regime] = {
            "rows": [_row(row, presets[row], runs[row]) for row in rows if runs.get(row)],
            "frontiers": {m: {"strengths": s, "seeds": sorted(frontiers.get(m, {}))} for m, s in sweeps.items()},
            "base": _base(runs),
            "matched": matched,
            "which_when": _which_when(matched),
            "versus_rows": _versus_rows(frontiers, singles),
            "at_budget": _at_budget(rows, runs),
            "trajectories": _trajectories(out, rows, presets, runs),
        }
    planned = sum(len(plan.seeds) if f"{r}/{row}" not in plan.row_seeds else plan.row_seeds[f"{r}/{row}"]
                  for r, rows in plan.rows.items() for row in rows)  # fmt: skip
    records = [rec for by_row in finished.values() for seeds in by_row.values() for rec in seeds.values()]
    meta = state.read_json(out / "comparison.json") if (out / "comparison.json").exists() else {}
    return {  # the results schema's keys (results.build_results), then the frontiers' own
        "folder": str(out),
        "command": meta.get("command"),
        "wall_seconds": meta.get("wall_seconds"),
        "jobs": meta.get("jobs"),
        "run_seconds": sum(float(r["eval"].get("wall_seconds") or 0.0) for r in records),
        "finished_runs": len(records),
        "planned_runs": planned,
        "failed": sorted(r["run_dir"] for r in load_runs(out) if r.get("status") == "failed"),
        "machine": meta.get("machine"),
        "seeds": list(plan.seeds),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "study": plan.name,
        "runs": [_run_record(r) for r in records],
        "invocations": _invocations(out, finished),
        "regimes": regimes,
    }


def _run_record(record: Mapping[str, Any]) -> dict[str, Any]:
    """One finished run as results.json lists it (``results.run_entry``), with its row, folder and tokens."""
    return run_entry(record) | {
        "row": record.get("row") or record["method"],
        "run_dir": record["run_dir"],
        "tokens_sampled": record["eval"].get("tokens_sampled"),
    }


def _invocations(out: Path, finished: Mapping[str, Mapping[str, Seeds]]) -> dict[str, Any]:
    """The finished runs' invocations (history.jsonl): ``commits`` (sorted), ``resumed`` (run -> the steps it
    resumed from) and ``restarted`` (run -> when each later start at step 0 began), runs named
    ``<regime>/<row>-seed<seed>``, in the file's order; ``machines``: each distinct CPU, its instruction set and torch
    that an invocation ran on (a fresh machine may round differently)."""
    commits: set[str] = set()
    machines: set[str] = set()
    resumed: dict[str, list[int]] = {}
    restarted: dict[str, list[str]] = {}
    for regime, by_row in finished.items():
        for row, seeds in by_row.items():
            for seed in sorted(seeds):
                folder = out / seeds[seed]["run_dir"]
                found = history({"dir": folder})
                commits |= set(found["commits"])
                machines |= {
                    f"{e.get('cpu', '?')} ({e.get('cpu_capability', '?')}, torch {e.get('torch', '?')})"
                    for e in read_jsonl(folder / "history.jsonl")
                }
                name = f"{regime}/{row}-seed{seed}"
                if found["resumes"]:
                    resumed[name] = found["resumes"]
                if found["restarts"]:
                    restarted[name] = found["restarts"]
    return {"commits": sorted(commits), "machines": sorted(machines), "resumed": resumed, "restarted": restarted}


def _base(runs: Mapping[str, Seeds]) -> dict[str, Any]:
    """The base model's accuracy and length on the test split (every run's eval.json ``base``; the same model and
    evaluation seeds at each seed), seed means."""
    per_seed: dict[int, Mapping[str, Any]] = {}
    for seeds in runs.values():
        for s, r in seeds.items():
            per_seed.setdefault(s, r["eval"]["base"])
    return {m: interval_record({s: b.get(m) for s, b in per_seed.items()}) for m in ("accuracy", "mean_length")}
