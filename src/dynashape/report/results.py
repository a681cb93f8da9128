"""results.md, results.json and the plots of a comparison folder (``dynashape results OUT``).

Reads only what the comparison runner wrote (``runs.json``, ``tuning.json``, ``comparison.json``), never the run
folders, so the report is a pure function of those files and works on partial results (fewer seeds so far). The
markdown keeps the section between ``<!-- claims:begin -->`` and ``<!-- claims:end -->`` of an existing file
verbatim: the claims are written (and committed) before the runs, the numbers after them.
"""

from __future__ import annotations

import json
import math
import time
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

import numpy as np

from dynashape.report.claims import CLAIMS, METRICS, MIN_SEEDS, evaluate_claims, metric_per_problem, metric_value
from dynashape.report.stats import hierarchical_bootstrap, mean_sd, paired_values, t_interval
from dynashape.report.tables import PUBLISHED_LEAD, PUBLISHED_MEDS

__all__ = ["CLAIMS_BEGIN", "CLAIMS_END", "build_results", "claims_section", "results_markdown", "write_results"]

CLAIMS_BEGIN, CLAIMS_END = "<!-- claims:begin -->", "<!-- claims:end -->"
GLOBAL_THRESHOLD = ("grpo_length", "gdpo")
TABLE_METRICS = ("accuracy", "mean_length", "aes")
RunMap = dict[tuple[str, str], dict[int, dict[str, Any]]]


def _read(path: Path, default: Any) -> Any:
    return json.loads(path.read_text()) if path.exists() else default


def _runs(records: Sequence[Mapping[str, Any]]) -> RunMap:
    """(regime, method) -> {seed: eval} of the finished test-split runs."""
    out: RunMap = {}
    for r in records:
        if r["split"] == "test" and r.get("eval") is not None:
            out.setdefault((r["regime"], r["method"]), {})[int(r["seed"])] = r["eval"]
    return out


def best_tuned(tuning: Mapping[str, Any], regime: str, among: Sequence[str] | None = None) -> str | None:
    """The tuned method of ``regime`` with the highest validation AES at its chosen value (``among``: only
    those names); lead presets are not baselines."""
    entries = {m: t for m, t in tuning.get(regime, {}).items() if isinstance(t, dict) and not m.startswith("lead")}
    if among is not None:
        entries = {m: t for m, t in entries.items() if m in among}
    scored = [(t.get("chosen_mean_aes"), m) for m, t in entries.items() if t.get("chosen_mean_aes") is not None]
    return max(scored)[1] if scored else None


def _fmt(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def _interval(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return "n/a" if lo is None or hi is None or lo != lo else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def _summary(runs: RunMap, n_boot: int) -> list[dict[str, Any]]:
    rows = []
    for (regime, method), by_seed in sorted(runs.items()):
        evs = [by_seed[s] for s in sorted(by_seed)]
        row: dict[str, Any] = {"regime": regime, "method": method, "seeds": sorted(by_seed), "n": len(evs)}
        for metric in (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest", "trap_pass@64", "wrong_eigen_ratio"):
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


def _differences(runs: RunMap, controls: Mapping[str, Mapping[str, str]], n_boot: int) -> list[dict[str, Any]]:
    """Paired differences of every method against each named control of its regime."""
    out = []
    for (regime, method), a in sorted(runs.items()):
        for role, control in controls.get(regime, {}).items():
            b = runs.get((regime, control))
            if b is None or control == method:
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


def _per_difficulty(runs: RunMap, n_boot: int) -> list[dict[str, Any]]:
    """Per regime, method and difficulty: accuracy and mean length (mean ± sd over seeds, bootstrap of seeds then
    problems) and, against grpo, the paired difference (t-interval over seeds, bootstrap of per-problem
    differences)."""
    out = []
    for (regime, method), by_seed in sorted(runs.items()):
        control = runs.get((regime, "grpo")) if method != "grpo" else None
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
                        cell["vs_grpo"] = {
                            "estimate": ti.estimate,
                            "interval": [None if ti.low != ti.low else ti.low, None if ti.high != ti.high else ti.high],
                            "n": ti.n,
                            "bootstrap_interval": _boot(rows, n_boot),
                        }
                entry[metric] = cell
            out.append(entry)
    return out


def _run_entry(record: Mapping[str, Any]) -> dict[str, Any]:
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


def build_results(out: str | Path, *, n_boot: int = 2000) -> dict[str, Any]:
    """Everything results.json holds, from the comparison folder ``out``."""
    out = Path(out)
    if not out.is_dir():  # a mistyped folder must not rewrite a results page with nothing
        raise ValueError(f"out must be a comparison folder (dynashape compare --out), got {str(out)!r}")
    records = _read(out / "runs.json", [])
    tuning = _read(out / "tuning.json", {})
    meta = _read(out / "comparison.json", {})
    runs = _runs(records)
    regimes = sorted({r for r, _ in runs})
    best_global = {r: tuning[r]["best_global"] for r in tuning if isinstance(tuning[r].get("best_global"), str)}
    for r in regimes:  # a regime whose rows were both global baselines without a best_global row
        best_global.setdefault(r, best_tuned(tuning, r, GLOBAL_THRESHOLD) or "")
    best_global = {r: m for r, m in best_global.items() if m}
    controls: dict[str, dict[str, str]] = {}
    for r in regimes:
        controls[r] = {"grpo control": "grpo"}
        best = best_tuned(tuning, r)
        if best:
            controls[r]["best tuned baseline"] = best
    return {
        "folder": str(out),
        "command": meta.get("command"),
        "wall_seconds": meta.get("wall_seconds"),
        "machine": meta.get("machine"),
        "seeds": meta.get("seeds"),
        "generated": time.strftime("%Y-%m-%dT%H:%M:%SZ", time.gmtime()),
        "runs": [_run_entry(r) for r in records if r["split"] == "test" and r.get("eval") is not None],
        "tuning": tuning,
        "best_global": best_global,
        "controls": controls,
        "summary": _summary(runs, n_boot),
        "differences": _differences(runs, controls, n_boot),
        "per_difficulty": _per_difficulty(runs, n_boot),
        "claims": evaluate_claims(runs, best_global, n_boot=n_boot),
        "published": {"lead": PUBLISHED_LEAD, "meds": PUBLISHED_MEDS},
    }


def claims_section() -> str:
    """The pre-registered claims as markdown (the default of the kept section)."""
    lines = [
        "## Claims (pre-registered)",
        "",
        "Written before the runs. Each comparison is `treatment - control <relation> bound` on one metric, per "
        "paired seed; its 95 % t-interval over seeds decides: **holds** when the whole interval satisfies the "
        "relation, **fails** when the whole interval satisfies its negation, **inconclusive** otherwise and "
        f"whenever fewer than {MIN_SEEDS} paired seeds exist. A claim holds when all its comparisons hold and fails "
        "when any fails. `best_global` = grpo_length or gdpo, whichever has the higher validation AES at its tuned "
        "threshold (never chosen on test numbers). A claim that fails is reported as failing, with the data; "
        "neither the world nor the method defaults are tuned to change a verdict.",
        "",
    ]
    for claim in CLAIMS:
        lines.append(f"- **({claim.id})** {claim.text}.")
        for p in claim.parts:
            lines.append(f"  - {p.regime}: {METRICS[p.metric]}: `{p.treatment} - {p.control} {p.relation} {p.bound:g}`")
    return "\n".join(lines) + "\n"


def _kept_claims(path: Path) -> str:
    text = path.read_text() if path.exists() else ""
    if CLAIMS_BEGIN in text and CLAIMS_END in text.split(CLAIMS_BEGIN, 1)[1]:
        return text.split(CLAIMS_BEGIN, 1)[1].split(CLAIMS_END, 1)[0].strip("\n") + "\n"
    return claims_section()


def _clock(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    h, rest = divmod(int(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def _difficulty_cell(entry: Mapping[str, Any]) -> str:
    acc, length = entry["accuracy"], entry["mean_length"]
    text = f"{acc['mean']:.2f} / {length['mean']:.0f}"
    if "vs_grpo" in acc and "vs_grpo" in length:
        a, b = acc["vs_grpo"], length["vs_grpo"]
        text += f"<br>Δ {a['estimate']:+.2f} {_interval(*a['interval'], digits=2)} / {b['estimate']:+.0f} "
        text += _interval(*b["interval"], digits=0)
    return text


def results_markdown(results: Mapping[str, Any], claims_text: str, plots: Sequence[str] = ()) -> str:
    """The markdown page of ``results`` (``build_results``), with ``claims_text`` kept verbatim on top."""
    seeds_of = {(r["regime"], r["method"]): r["n"] for r in results["summary"]}
    n_min = min(seeds_of.values(), default=0)
    lines = [
        "# Results of the pre-registered comparison",
        "",
        "Generated by `dynashape compare` / `dynashape results` ([comparison.md](comparison.md) says how); the claims "
        "section is kept verbatim, everything below it is rewritten from the runs.",
        "",
        CLAIMS_BEGIN,
        claims_text.rstrip("\n"),
        CLAIMS_END,
        "",
        "## Verdicts",
        "",
    ]
    if not seeds_of:
        lines += ["No runs yet: every claim stays inconclusive until the runs exist.", ""]
    elif n_min < MIN_SEEDS:
        lines += [f"Partial results: {n_min} seeds so far on the row with fewest (at least {MIN_SEEDS} needed).", ""]
    lines += [
        "| claim | verdict | estimate | 95 % t-interval | bootstrap | n | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in results["claims"]:
        boot = c["parts"][0].get("bootstrap_interval")
        verdict = c["verdict"] + (f" (n < {MIN_SEEDS})" if c["n"] < MIN_SEEDS else "")
        lines.append(
            f"| ({c['id']}) | **{verdict}** | {_fmt(c['estimate'])} | {_interval(*c['interval'])} | "
            f"{_interval(*(boot or (None, None)))} | {c['n']} | {c.get('reason', '')} |"
        )
        for p in c["parts"][1:] if len(c["parts"]) > 1 else []:
            lines.append(
                f"|  part: {p['metric']} {p['treatment']} - {p['control']} {p['relation']} {p['bound']:g} | "
                f"{p['verdict']} | {_fmt(p['estimate'])} | {_interval(*p['interval'])} | "
                f"{_interval(*(p.get('bootstrap_interval') or (None, None)))} | {p['n']} | |"
            )
    machine = results.get("machine") or {}
    lines += [
        "",
        "## How these numbers were made",
        "",
        f"- Command: `{results.get('command') or 'n/a'}`; regenerate this page from its runs with "
        f"`dynashape results {results.get('folder') or 'OUT'} --report <this page>`.",
        f"- Wall time (all invocations): {_clock(results.get('wall_seconds'))}; machine: "
        + (", ".join(f"{k} {v}" for k, v in machine.items()) or "n/a"),
        f"- Seeds per row: {', '.join(f'{m} ({r}) {n}' for (r, m), n in sorted(seeds_of.items())) or 'none yet'}.",
        "- Intervals: paired t-interval over seeds (95 %); bootstrap = seeds, then problems within each seed "
        "(2000 replicates, 95 % percentile).",
        "",
    ]
    tuning = results.get("tuning", {})
    if tuning:
        lines += [
            "## Tuning (validation split only)",
            "",
            "| regime | method | key | value: mean validation AES | chosen |",
        ]
        lines.append("|---|---|---|---|---|")
        for regime, methods in sorted(tuning.items()):
            for method, t in sorted(methods.items()):
                if not isinstance(t, dict):
                    continue
                cells = []
                for v in t["values"]:
                    aes = [a for a in v["aes"] if a is not None]
                    cells.append(f"{v['value']:g}: {_fmt(sum(aes) / len(aes) if aes else None)}")
                lines.append(f"| {regime} | {method} | {t['key']} | {'; '.join(cells)} | **{t['chosen']:g}** |")
            if isinstance(methods.get("best_global"), str):
                lines.append(f"| {regime} | best_global | | | **{methods['best_global']}** |")
        lines.append("")
    by_regime: dict[str, list[dict[str, Any]]] = {}
    for row in results["summary"]:
        by_regime.setdefault(row["regime"], []).append(row)
    for regime, rows in sorted(by_regime.items(), reverse=True):
        lines += [
            f"## {regime}: accuracy, length, AES (mean ± sd over seeds; bootstrap 95 %)",
            "",
            "| method | seeds | accuracy | mean length | AES | hardest acc. | easiest length | trap pass@64 |",
            "|---|---|---|---|---|---|---|---|",
        ]
        base = rows[0]["base"]
        lines.append(f"| base | | {base['accuracy']:.3f} | {base['mean_length']:.1f} | 0 | | | |")
        for row in rows:
            cells = []
            for metric in (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest", "trap_pass@64"):
                e = row.get(metric)
                if e is None:
                    cells.append("n/a")
                    continue
                digits = 1 if "length" in metric else 3
                text = f"{e['mean']:.{digits}f}" + ("" if e["sd"] is None else f" ± {e['sd']:.{digits}f}")
                if "bootstrap_interval" in e:
                    text += " " + _interval(*e["bootstrap_interval"], digits=digits)
                cells.append(text)
            lines.append(f"| {row['method']} | {row['n']} | " + " | ".join(cells) + " |")
        lines += ["", f"### {regime}: paired differences (method - control; t-interval over seeds; bootstrap)", ""]
        lines += ["| method | versus | Δ accuracy | Δ mean length | Δ AES | Δ hardest acc. | Δ easiest length |"]
        lines.append("|---|---|---|---|---|---|---|")
        diffs: dict[tuple[str, str], dict[str, dict[str, Any]]] = {}
        for d in results["differences"]:
            if d["regime"] == regime:
                diffs.setdefault((d["method"], d["versus"]), {})[d["metric"]] = d
        for (method, versus), per in sorted(diffs.items()):
            cells = []
            for metric in (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest"):
                d = per.get(metric)
                if d is None:
                    cells.append("n/a")
                    continue
                digits = 1 if "length" in metric else 3
                cells.append(f"{d['estimate']:+.{digits}f} {_interval(*d['interval'], digits=digits)}")
            lines.append(f"| {method} | {versus} | " + " | ".join(cells) + " |")
        lines += [
            "",
            f"### {regime}: per difficulty (accuracy / mean length, mean over seeds; Δ vs grpo with its t-interval)",
            "",
        ]
        pd = [r for r in results["per_difficulty"] if r["regime"] == regime]
        ds = sorted({r["difficulty"] for r in pd})
        lines += ["| method | " + " | ".join(f"d={d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
        cell = {(r["method"], r["difficulty"]): r for r in pd}
        for method in sorted({r["method"] for r in pd}):
            cells = [_difficulty_cell(cell[(method, d)]) if (method, d) in cell else "n/a" for d in ds]
            lines.append(f"| {method} | " + " | ".join(cells) + " |")
        lines.append("")
    lines += [
        "## The papers' published numbers (theirs, for context; other models, budgets and benchmarks)",
        "",
        "- LEAD (R1-Distill-Qwen-1.5B, 4K budget, 5-benchmark mean): "
        + "; ".join(
            f"{m}: acc {v['accuracy']}, {v['length']:.0f} tokens, AES +{v['aes']}" for m, v in PUBLISHED_LEAD.items()
        )
        + "; static decoupled ratios AES >= 0.27; scalarised GRPO at best 0.08.",
        "- MEDS: "
        + "; ".join(f"{m}: " + ", ".join(f"{k} {v}" for k, v in vals.items()) for m, vals in PUBLISHED_MEDS.items())
        + "; clustering ablation (Qwen2.5-Math-7B pass@1 / pass@128): single cluster 55.14 / 82.60, HDBSCAN "
        "(best) 56.47 / 84.00.",
        "",
    ]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def write_results(out: str | Path, report: str | Path, *, n_boot: int = 2000) -> list[Path]:
    """Write ``report`` (markdown), the JSON beside it (same stem) and its plots (folder of the same stem);
    returns the paths written."""
    report = Path(report)
    results = build_results(out, n_boot=n_boot)
    report.parent.mkdir(parents=True, exist_ok=True)
    plot_dir = report.with_suffix("")
    written = []
    try:
        from dynashape.report.results_plots import plot_results

        written = plot_results(results, plot_dir)
    except ImportError:  # matplotlib missing: tables only
        pass
    rel = [str(p.relative_to(report.parent)) for p in written]
    claims_text = _kept_claims(report)
    json_path = report.with_suffix(".json")
    json_path.write_text(json.dumps(_clean(results), indent=1, allow_nan=False))
    report.write_text(results_markdown(results, claims_text, rel))
    return [report, json_path, *written]


def _clean(x: Any) -> Any:
    """JSON has no NaN: undefined numbers become null."""
    if isinstance(x, float) and not math.isfinite(x):
        return None
    if isinstance(x, dict):
        return {str(k): _clean(v) for k, v in x.items()}
    if isinstance(x, (list, tuple)):
        return [_clean(v) for v in x]
    return x
