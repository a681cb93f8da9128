"""The follow-up comparison's results (``dynashape results OUT`` on a folder of ``--plan v2``): results-v2.json in
results.json's schema with the follow-up's claims (``followup.decide_claims``: every part's seeds, per-seed
differences, n, p, Holm's p, power), its page (the pre-registration kept verbatim) and its plots.

A pure function of the files the runner wrote (runs.json, comparison.json, each run's eval.json), so partial
results regenerate at any time ("n seeds so far").
"""

from __future__ import annotations

import json
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape import state
from dynashape.study import followup
from dynashape.study.claims import METRICS, metric_value
from dynashape.study.decide import MIN_SEEDS
from dynashape.study.results import SUMMARY_METRICS, build_results, json_clean, load_runs, runs_by_row
from dynashape.study.results_page import (
    CLAIMS_BEGIN,
    CLAIMS_END,
    fmt_clock,
    fmt_interval,
    fmt_value,
    kept_claims,
    summary_cells,
)

__all__ = ["FOLLOWUP_METRICS", "V1_BEST_GLOBAL", "build_followup_results", "write_followup_results"]

V1_BEST_GLOBAL: Mapping[str, str] = {"tight": "grpo_length", "loose": "gdpo"}
"""v1's best_global per regime (validation AES, docs/results.json), the control the follow-up's parts name."""
FOLLOWUP_METRICS = (
    *(m for m in SUMMARY_METRICS if m != "trap_pass@64"),
    "trap_pass@8",
    "trap_pass@32",
)


def build_followup_results(out: str | Path, *, n_boot: int = 2000) -> dict[str, Any]:
    """Everything results-v2.json holds, from the follow-up's folder ``out``."""
    results = build_results(out, n_boot=n_boot, summary_metrics=FOLLOWUP_METRICS, best_global=V1_BEST_GLOBAL)
    runs = runs_by_row(load_runs(out))
    meta = state.read_json(Path(out) / "comparison.json")
    plan = followup.load_plan()
    for entry in results["runs"]:  # the subset's pass@k at the claims' k, beside v1's pass@64
        ev = runs[(entry["regime"], entry["method"])][entry["seed"]]
        for metric in ("trap_pass@8", "trap_pass@32"):
            entry["final"][metric] = metric_value(ev, metric)
    results.update(
        {
            "plan": {
                "name": meta.get("plan"),
                "row_seeds": meta.get("row_seeds"),
                "fixed": meta.get("fixed"),
                "evaluation": {k: v for k, v in followup.eval_overrides().items() if k != "passk_keys"},
                "passk_keys": plan["subset"]["keys"],
                "subset_rule": plan["subset"]["rule"],
                "base_sha256": plan["subset"]["candidates"]["base_sha256"],
                "power": plan["power"],
            },
            "best_global": dict(V1_BEST_GLOBAL),
            "claims": followup.decide_claims(runs),
            "rules": {
                "test": "two-sided one-sample t-test of the mean paired difference against the part's bound",
                "multiplicity": f"Holm's step-down over {len(followup.PARTS)} parts, family-wise alpha "
                f"{followup.ALPHA}",
                "ceiling": "all paired differences equal: inconclusive (p = 1 in Holm)",
                "min_seeds": MIN_SEEDS,
            },
        }
    )
    results.pop("tuning", None)  # nothing is tuned: the fixed values are in plan.fixed
    results.pop("published", None)
    return results


def _verdict_lines(results: Mapping[str, Any]) -> list[str]:
    lines = [
        "| claim / part | comparison | estimate | 95 % t-interval | bound (margin) | p | Holm p | n | power "
        "| verdict |",
        "|---|---|---|---|---|---|---|---|---|---|",
    ]
    for c in results["claims"]:
        lines.append(f"| **({c['id']})** | | | | | | | | | **{c['verdict']}** |")
        for p in c["parts"]:
            digits = 1 if "length" in p["metric"] else 3
            interval = p["interval"] or (None, None)
            note = f" ({p['reason']})" if p.get("reason") else ""
            lines.append(
                f"| {p['part']} | {p['regime']}: {p['metric']} {p['treatment']} - {p['control']} {p['relation']} | "
                f"{fmt_value(p['estimate'], digits)} | {fmt_interval(*interval, digits=digits)} | {p['bound']:g} "
                f"({p['margin']:g}) | {fmt_value(p['p_value'], 4)} | {fmt_value(p['p_adjusted'], 4)} | {p['n']} | "
                f"{fmt_value(p['power'], 2)} | {p['verdict']}{note} |"
            )
    return lines


def _summary_lines(results: Mapping[str, Any]) -> list[str]:
    lines: list[str] = []
    names = {
        "accuracy": "accuracy",
        "mean_length": "mean length",
        "aes": "AES",
        "accuracy@hardest": "hardest acc.",
        "mean_length@easiest": "easiest length",
        "trap_pass@8": "trap pass@8",
        "trap_pass@32": "trap pass@32",
        "wrong_eigen_ratio": "eigen ratio",
    }
    by_regime: dict[str, list[Mapping[str, Any]]] = {}
    for row in results["summary"]:
        by_regime.setdefault(row["regime"], []).append(row)
    for regime, rows in sorted(by_regime.items(), reverse=True):
        lines += [
            "",
            f"### {regime}: mean ± sd over seeds (bootstrap 95 %, seeds then problems)",
            "",
            "| method | seeds | " + " | ".join(names.values()) + " |",
            "|---|---|" + "---|" * len(names),
        ]
        base = rows[0]["base"]
        lines.append(f"| base | | {base['accuracy']:.3f} | {base['mean_length']:.1f} | 0 |" + " |" * (len(names) - 3))
        for row in rows:
            lines.append(f"| {row['method']} | {row['n']} | " + " | ".join(summary_cells(row, tuple(names))) + " |")
    return lines


def followup_markdown(results: Mapping[str, Any], kept: str, plots: Sequence[str] = ()) -> str:
    """The follow-up's page: ``kept`` (the pre-registration) verbatim, then verdicts, tables and plots."""
    seeds_of = {(r["regime"], r["method"]): r["n"] for r in results["summary"]}
    machine = results.get("machine") or {}
    lines = [
        "# Results of the follow-up comparison (v2)",
        "",
        "The first comparison ([results.md](results.md), 187 runs) could decide one part of one claim. This one asks "
        "the same questions with margins, a power analysis, a quieter evaluation and more seeds, all fixed in the "
        "section below before its first run. Generated by `dynashape results results/comparison-v2 --report "
        "docs/results-v2.md`; the pre-registered section is kept verbatim, everything below it is rewritten from "
        "the runs.",
        "",
        CLAIMS_BEGIN,
        kept.rstrip("\n"),
        CLAIMS_END,
        "",
        "## Verdicts",
        "",
    ]
    planned = sum((results["plan"].get("row_seeds") or {}).values())
    done = results.get("finished_runs", 0)
    if done < planned:
        lines += [f"Partial results: {done} of the {planned} planned runs so far; verdicts are provisional.", ""]
    lines += _verdict_lines(results)
    lines += [
        "",
        "Power: what the part's seeds gave at its margin with its own observed sd, at the planning level "
        f"{followup.planning_alpha():g}. The controls: grpo, and v1's best_global "
        + ", ".join(f"{m} ({r})" for r, m in sorted(results["best_global"].items()))
        + ", trained at v1's tuned values.",
        "",
        "## Rows",
    ]
    lines += _summary_lines(results)
    lines += [
        "",
        "## How these numbers were made",
        "",
        f"- Command: `{results.get('command') or 'n/a'}`; regenerate this page from its runs with "
        f"`dynashape results {results.get('folder') or 'OUT'} --report docs/results-v2.md`.",
        f"- Wall time (all invocations): {fmt_clock(results.get('wall_seconds'))}; the runs' own time summed: "
        f"{fmt_clock(results.get('run_seconds'))} over {done} finished runs, {results.get('jobs') or 'n/a'} at a time; "
        "machine: " + (", ".join(f"{k} {v}" for k, v in machine.items()) or "n/a"),
        f"- Seeds per row so far: {', '.join(f'{m} ({r}) {n}' for (r, m), n in sorted(seeds_of.items())) or 'none'}.",
        f"- Base model sha256 `{results['plan']['base_sha256']}`; every number of this page, each part's per-seed "
        "differences included, is in the JSON beside it.",
        "",
    ]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def plot_paired_differences(results: Mapping[str, Any], folder: Path) -> list[Path]:
    """One panel per part: each seed's paired difference, the mean with its 95 % t-interval, the bound."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np

    parts = [p for c in results["claims"] for p in c["parts"]]
    if not any(p["n"] for p in parts):
        return []
    cols = 5
    fig, axes = plt.subplots(-(-len(parts) // cols), cols, figsize=(15, 3.2 * -(-len(parts) // cols)), squeeze=False)
    for ax, p in zip(axes.flat, parts):
        d = np.array(p["differences"], dtype=float)
        x = np.linspace(-0.15, 0.15, len(d)) if len(d) > 1 else np.zeros(len(d))
        ax.scatter(x, d, s=14, color="tab:blue", alpha=0.7)
        if p["interval"] is not None:
            lo, hi = p["interval"]
            ax.errorbar([0.4], [p["estimate"]], yerr=[[p["estimate"] - lo], [hi - p["estimate"]]], fmt="D",
                        color="black", capsize=4)  # fmt: skip
        ax.axhline(p["bound"], color="tab:red", linestyle="--", linewidth=1)
        if p["bound"] != 0:
            ax.axhline(0, color="grey", linewidth=0.6)
        ax.set_xlim(-0.5, 0.7)
        ax.set_xticks([])
        ax.set_title(f"{p['part']}: {p['treatment']} - {p['control']} {p['relation']}\n{p['verdict']} (n={p['n']})",
                     fontsize=8)  # fmt: skip
        ax.set_ylabel(METRICS[p["metric"]].split(" (")[0], fontsize=7)
    for ax in list(axes.flat)[len(parts) :]:
        ax.axis("off")
    from matplotlib.lines import Line2D

    handles = [
        Line2D([], [], marker="o", linestyle="", color="tab:blue", label="one seed's paired difference"),
        Line2D([], [], marker="D", color="black", label="mean, 95 % t-interval"),
        Line2D([], [], linestyle="--", color="tab:red", label="the part's bound (margin)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=3, fontsize=8, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    folder.mkdir(parents=True, exist_ok=True)
    path = folder / "paired_differences.png"
    fig.savefig(path, dpi=90)
    plt.close(fig)
    return [path]


def write_followup_results(out: str | Path, report: str | Path, *, n_boot: int = 2000) -> list[Path]:
    """Write the follow-up's page ``report``, its JSON (same stem) and plots (folder of the same stem)."""
    report = Path(report)
    results = build_followup_results(out, n_boot=n_boot)
    plot_dir = report.with_suffix("")
    written: list[Path] = []
    try:
        from dynashape.study.results_plots import plot_results

        written = plot_paired_differences(results, plot_dir) + plot_results(results, plot_dir)
    except ImportError:  # matplotlib missing: tables only
        pass
    if CLAIMS_BEGIN in (report.read_text() if report.exists() else ""):
        kept = kept_claims(report)  # the committed pre-registration, verbatim
    else:  # a new page (another --report path): the pre-registration as the code states it
        from dynashape.study.followup_page import preregistration_markdown

        kept = preregistration_markdown().replace(CLAIMS_BEGIN, "").replace(CLAIMS_END, "").strip("\n") + "\n"
    rel = [str(p.relative_to(report.parent)) for p in written]
    report.parent.mkdir(parents=True, exist_ok=True)
    state.write_text(report.with_suffix(".json"), json.dumps(json_clean(results), indent=1, allow_nan=False))
    state.write_text(report, followup_markdown(results, kept, rel))
    return [report, report.with_suffix(".json"), *written]
