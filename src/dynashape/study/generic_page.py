"""The results page of a study file with ``page = "generic"``: one table per regime, from the runs' eval.json.

Each row: its seeds, the mean ± sd over seeds (``stats.mean_sd``) of the final accuracy, mean length and AES, and
the paired difference against the file's ``baseline`` row, the mean of per-seed differences over the seeds both
rows finished with a 95 % Student's t-interval (``stats.paired_values``, ``stats.t_interval``). Descriptive: no
claims, no verdicts. Where the runs recorded them (eval.json's ``tokens_sampled``, ``train.loop.TokenCount``), a
column gives the tokens each row sampled in training, means over its seeds: prompt + response tokens of every
rollout drawn, and the sampling rounds; a page of runs that recorded none has no such column. The page and its
JSON (same stem) are a function of runs.json and the listed runs' eval.json.
"""

from __future__ import annotations

import math
import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.results import load_runs
from dynashape.study.stats import mean_sd, paired_values, t_interval

__all__ = ["METRICS", "build_generic_results", "write_generic_results"]

METRICS: Mapping[str, str] = {"accuracy": "accuracy", "mean_length": "length", "aes": "AES"}
"""eval.json's metric -> its column: ``final.accuracy``, ``final.mean_length`` and ``aes``."""

RowRuns = Mapping[int, Mapping[str, Any]]


def metric(ev: Mapping[str, Any], name: str) -> float | None:
    """``name`` of one run's eval.json (None: undefined, an AES without a length change)."""
    value = ev.get("aes") if name == "aes" else ev["final"][name]
    return None if value is None or value != value else float(value)


def _finite(x: float) -> float | None:
    return None if math.isnan(x) else x  # JSON has no NaN


def _row(row: str, runs: RowRuns, baseline: RowRuns) -> dict[str, Any]:
    """One row's means over its seeds and its paired differences against ``baseline`` (both {seed: eval.json})."""
    out: dict[str, Any] = {"row": row, "seeds": sorted(runs)}
    for name in METRICS:
        values = {s: metric(ev, name) for s, ev in runs.items()}
        present = [v for v in values.values() if v is not None]
        m = mean_sd(present) if present else None
        out[name] = {"mean": m and m.mean, "sd": m and _finite(m.sd), "n": len(present)}
        diffs = paired_values(values, {s: metric(ev, name) for s, ev in baseline.items()})
        t = t_interval(list(diffs.values())) if diffs else None
        out[f"{name}_vs_baseline"] = {
            "estimate": t and t.estimate,
            "low": t and _finite(t.low),
            "high": t and _finite(t.high),
            "n": len(diffs),
            "seeds": sorted(diffs),
        }
    tokens = _tokens_sampled(runs)
    if tokens is not None:  # only then: a page of runs without the counts is as it was
        out["tokens_sampled"] = tokens
    return out


def _tokens_sampled(runs: RowRuns) -> dict[str, Any] | None:
    """Means over the seeds that recorded them of eval.json's ``tokens_sampled`` (prompt, response, sampling
    rounds) and how many seeds did; None when none did."""
    recorded = [ev["tokens_sampled"] for ev in runs.values() if ev.get("tokens_sampled") is not None]
    if not recorded:
        return None
    means = {k: sum(t[k] for t in recorded) / len(recorded) for k in ("prompt", "response", "sampling_rounds")}
    return {**means, "n": len(recorded)}


def _tokens_cell(t: Mapping[str, Any] | None) -> str:
    if t is None:
        return "n/a"
    return f"{t['prompt'] / 1e3:,.1f}k + {t['response'] / 1e3:,.1f}k ({t['sampling_rounds']:.0f})"


def build_generic_results(out: str | Path, plan: ComparisonPlan) -> dict[str, Any]:
    """Everything the generic page shows, from the comparison folder ``out`` of study ``plan``."""
    by_row: dict[tuple[str, str], dict[int, Mapping[str, Any]]] = {}
    for r in load_runs(out):
        if r["split"] == "test" and r.get("eval") is not None and r["status"] != "failed":
            by_row.setdefault((r["regime"], r.get("row", r["method"])), {})[int(r["seed"])] = r["eval"]
    regimes = {}
    for regime, rows in plan.rows.items():
        baseline = by_row.get((regime, plan.baseline), {})  # type: ignore[arg-type]
        regimes[regime] = [_row(row, by_row[(regime, row)], baseline) for row in rows if (regime, row) in by_row]
    return {"study": plan.name, "baseline": plan.baseline, "seeds": list(plan.seeds), "regimes": regimes}


def _cell(m: Mapping[str, Any], digits: int) -> str:
    if m["mean"] is None:
        return "n/a"
    return f"{m['mean']:.{digits}f}" + ("" if m["sd"] is None else f" ± {m['sd']:.{digits}f}")


def _difference(d: Mapping[str, Any], digits: int) -> str:
    if d["estimate"] is None:
        return "n/a"
    interval = "" if d["low"] is None else f" [{d['low']:+.{digits}f}, {d['high']:+.{digits}f}]"
    return f"{d['estimate']:+.{digits}f}{interval} (n={d['n']})"


def markdown(results: Mapping[str, Any], written: str) -> str:
    """The page: one table per regime (means ± sd over seeds; paired differences with 95 % t-intervals), with a
    column of the tokens sampled when any row recorded them."""
    digits = {"accuracy": 3, "mean_length": 1, "aes": 3}
    lines = [
        f"# Results: {results['study']}",
        "",
        f"Written {written} by `dynashape results` from the runs' eval.json. Means ± sd over seeds; against "
        f"`{results['baseline']}`: the mean of per-seed differences over the seeds both rows finished, with a 95 % "
        "Student's t-interval (none below two seeds).",
    ]
    rows_of_all = [r for rows in results["regimes"].values() for r in rows]
    with_tokens = any("tokens_sampled" in r for r in rows_of_all)
    if with_tokens:
        lines[-1] += (
            " Tokens sampled in training, means over seeds: prompt + response tokens of every rollout drawn, in "
            "thousands, and (the sampling rounds)."
        )
    for regime, rows in results["regimes"].items():
        heads = [*METRICS.values(), *(f"{c} - {results['baseline']}" for c in METRICS.values())]
        heads += ["tokens sampled"] if with_tokens else []
        lines += ["", f"## {regime}", "", "| row | seeds | " + " | ".join(heads) + " |"]
        lines.append("|---" * (2 + len(heads)) + "|")
        for r in rows:
            cells = [_cell(r[m], digits[m]) for m in METRICS]
            if r["row"] == results["baseline"]:
                cells += ["(baseline)"] * len(METRICS)
            else:
                cells += [_difference(r[f"{m}_vs_baseline"], digits[m]) for m in METRICS]
            cells += [_tokens_cell(r.get("tokens_sampled"))] if with_tokens else []
            lines.append(f"| {r['row']} | {len(r['seeds'])} | " + " | ".join(cells) + " |")
    return "\n".join(lines) + "\n"


def write_generic_results(
    out: str | Path, report: str | Path, plan: ComparisonPlan, *, evaluation: Mapping[str, Any] | None = None
) -> list[Path]:
    """Write ``report`` (markdown) and its JSON (same stem) for the generic study ``plan`` run into ``out``;
    returns the paths written. ``evaluation``: the plan's and the runs' own settings (``pages.evaluation_record``)."""
    report = Path(report)
    results = build_generic_results(out, plan)
    if evaluation is not None:
        results["evaluation"] = dict(evaluation)
    state.make_folder(report.parent)
    json_path = report.with_suffix(".json")
    state.write_json(json_path, results, indent=1)
    state.write_text(report, markdown(results, time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime())))
    return [report, json_path]
