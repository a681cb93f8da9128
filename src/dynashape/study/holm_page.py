"""The follow-up comparison's results (``dynashape results OUT`` on a folder of ``--plan v2``): results-v2.json in
results.json's schema with the follow-up's claims (``preregistration.decide_claims``: every part's seeds, per-seed
differences, n, p, Holm's p, power), its page (the pre-registration kept verbatim) and its plots.

A pure function of the files the runner wrote (runs.json, comparison.json, each run's eval.json), so partial
results regenerate at any time ("n seeds so far").
"""

from __future__ import annotations

import json
import textwrap
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.study import preregistration
from dynashape.study.claims import METRICS, metric_value
from dynashape.study.decide import MIN_SEEDS
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.results import SUMMARY_METRICS, build_results, json_clean, load_runs, runs_by_row
from dynashape.study.results_page import (
    CLAIMS_BEGIN,
    CLAIMS_END,
    NOTES_BEGIN,
    NOTES_END,
    deviation_lines,
    fmt_clock,
    fmt_interval,
    fmt_value,
    kept_block,
    kept_claims,
    summary_cells,
)
from dynashape.study.roles import roles_of

__all__ = ["HOLM_METRICS", "build_holm_results", "write_holm_results"]

"""v1's best_global per regime (validation AES, docs/results.json), the control the follow-up's parts name."""
HOLM_METRICS = (
    *(m for m in SUMMARY_METRICS if m != "trap_pass@64"),
    "trap_pass@8",
    "trap_pass@32",
)


def build_holm_results(
    out: str | Path, study: ComparisonPlan, *, n_boot: int = 2000, evaluation: Mapping[str, Any] | None = None
) -> dict[str, Any]:
    """Everything results-v2.json holds, from the follow-up's folder ``out``; ``evaluation``: the registered and
    each run's own evaluation settings (``pages.evaluation_record``), kept beside the plan's."""
    results = build_results(
        out, n_boot=n_boot, summary_metrics=HOLM_METRICS, best_global=study.best_global, roles=roles_of(study)
    )
    runs = runs_by_row(load_runs(out))
    meta = state.read_json(Path(out) / "comparison.json")
    plan = preregistration.frozen_data(study)
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
                "evaluation": {k: v for k, v in study.eval.items() if k != "passk_keys"},
                "passk_keys": plan["subset"]["keys"],
                "subset_rule": plan["subset"]["rule"],
                "base_sha256": plan["subset"]["candidates"]["base_sha256"],
                "power": plan["power"],
            },
            "best_global": dict(study.best_global),
            "claims": preregistration.decide_claims(runs, study),
            "rules": {
                "test": "two-sided one-sample t-test of the mean paired difference against the part's bound",
                "multiplicity": f"Holm's step-down over {len(study.parts)} parts, family-wise alpha {study.alpha}",
                "ceiling": "all paired differences equal: inconclusive (p = 1 in Holm)",
                "min_seeds": MIN_SEEDS,
            },
        }
    )
    if evaluation is not None:
        results["evaluation"] = dict(evaluation)
    for claim in results["claims"]:
        for part in claim["parts"]:
            part["post_hoc"] = post_hoc_reading(part)
    results.pop("tuning", None)  # nothing is tuned: the fixed values are in plan.fixed
    results.pop("published", None)
    return results


POST_HOC_POWER = 0.8
"""The observed power from which an inconclusive part whose interval excludes the hoped-for effect gets a post-hoc
reading (never a verdict: the registered rule has no futility verdict)."""


def hoped_effect(part: Mapping[str, Any]) -> float:
    """The effect a part hoped for: the bound moved by the margin for superiority (``>`` / ``<``), the bound of
    no difference (0) for non-inferiority (``>=`` / ``<=``)."""
    relation, bound, margin = part["relation"], part["bound"], part["margin"]
    return {">": bound + margin, "<": bound - margin}.get(relation, 0.0)


def post_hoc_reading(part: Mapping[str, Any]) -> str | None:
    """A reading of an inconclusive part with high observed power whose 95 % interval lies wholly on the far side
    of the hoped-for effect, marked as post hoc; None for every other part."""
    if part["verdict"] != "inconclusive" or part["interval"] is None or (part["power"] or 0) < POST_HOC_POWER:
        return None
    lo, hi = part["interval"]
    hoped = hoped_effect(part)
    wants_up = part["relation"] in (">", ">=")
    if (wants_up and hi < hoped) or (not wants_up and lo > hoped):
        return (
            f"post hoc, not a verdict: with observed power {part['power']:.2f} at the margin, the interval "
            f"[{lo:.3g}, {hi:.3g}] excludes the hoped-for effect {hoped:+.3g}"
        )
    return None


def _verdict_lines(results: Mapping[str, Any]) -> list[str]:
    lines = [
        "| claim / part | comparison | estimate | 95 % t-interval | bound (margin) | p | Holm p | n | observed power "
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
    readings = [(p["part"], p["post_hoc"]) for c in results["claims"] for p in c["parts"] if p.get("post_hoc")]
    if readings:
        lines += ["", "Post-hoc readings (not verdicts; the registered rule has none of this kind):", ""]
        lines += [f"- {part}: {text}." for part, text in readings]
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


def holm_markdown(
    results: Mapping[str, Any],
    study: ComparisonPlan,
    kept: str,
    plots: Sequence[str] = (),
    notes: str = "",
    page: str = "docs/results-v2.md",
) -> str:
    """The follow-up's page: ``kept`` (the pre-registration) verbatim, the deviation from it (generated from the
    runs' own evaluation settings, with the hand-written ``notes`` kept verbatim), then verdicts, tables, plots.
    ``page``: the page's own path as the command that rewrites it names it (the as-run page lives elsewhere)."""
    seeds_of = {(r["regime"], r["method"]): r["n"] for r in results["summary"]}
    machine = results.get("machine") or {}
    lines = [
        "# Results of the follow-up comparison (v2)",
        "",
        "The first comparison ([results.md](results.md), 187 runs) could decide one part of one claim. This one asks "
        "the same questions with margins, a power analysis, a quieter evaluation and more seeds, all fixed in the "
        f"section below before its first run. Generated by `dynashape results {results.get('folder') or 'OUT'} "
        f"--report {page}`; the pre-registered section is kept verbatim, everything below it is rewritten "
        "from the runs."
        + (
            " **These runs deviate from the registered evaluation**: see the section after the registration."
            if (results.get("evaluation") or {}).get("deviations")
            else ""
        ),
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
    lines += deviation_lines(results.get("evaluation"), notes)
    if done < planned:
        lines += [f"Partial results: {done} of the {planned} planned runs so far; verdicts are provisional.", ""]
    lines += _verdict_lines(results)
    lines += [
        "",
        "Observed power: what the part's seeds gave at its margin with its own observed sd (not the planned "
        "power, which used v1's sd), at the planning level "
        f"{preregistration.planning_alpha(study):g}. The controls: grpo, and v1's best_global "
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
        f"`dynashape results {results.get('folder') or 'OUT'} --report {page}"
        + (" --deviating" if (results.get("evaluation") or {}).get("deviations") else "")
        + "`.",
        f"- Wall time (all invocations): {fmt_clock(results.get('wall_seconds'))}; the runs' own time summed: "
        f"{fmt_clock(results.get('run_seconds'))} over {done} finished runs, {results.get('jobs') or 'n/a'} at a time; "
        "machine: " + (", ".join(f"{k} {v}" for k, v in machine.items()) or "n/a"),
        f"- Seeds per row{' so far' if done < planned else ''}: "
        f"{', '.join(f'{m} ({r}) {n}' for (r, m), n in sorted(seeds_of.items())) or 'none'}.",
        f"- Base model sha256 `{results['plan']['base_sha256']}`; every number of this page, each part's per-seed "
        "differences included, is in the JSON beside it.",
        "",
    ]
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def plot_paired_differences(results: Mapping[str, Any], folder: Path) -> list[Path]:
    """One panel per part: each seed's paired difference, the mean with its 95 % t-interval, the part's bound
    (where the test is made), the effect it hoped for (the margin), and its Holm-adjusted p and verdict."""
    import matplotlib

    matplotlib.use("Agg")
    import matplotlib.pyplot as plt
    import numpy as np
    from matplotlib.lines import Line2D

    parts = [p for c in results["claims"] for p in c["parts"]]
    if not any(p["n"] for p in parts):
        return []
    cols = 5
    nrows = -(-len(parts) // cols)
    fig, axes = plt.subplots(nrows, cols, figsize=(16, 4.6 * nrows), squeeze=False)
    for ax, p in zip(axes.flat, parts):
        d = np.array(p["differences"], dtype=float)
        x = np.linspace(-0.2, 0.2, len(d)) if len(d) > 1 else np.zeros(len(d))
        ax.scatter(x, d, s=16, color="tab:blue", alpha=0.7)
        if p["interval"] is not None:
            lo, hi = p["interval"]
            ax.errorbar([0.45], [p["estimate"]], yerr=[[p["estimate"] - lo], [hi - p["estimate"]]], fmt="D",
                        color="black", capsize=4)  # fmt: skip
        ax.axhline(p["bound"], color="tab:red", linestyle="--", linewidth=1.2)
        hoped = hoped_effect(p)
        if hoped != p["bound"]:
            ax.axhline(hoped, color="tab:green", linestyle=":", linewidth=1.6)
        ax.set_xlim(-0.5, 0.75)
        ax.set_xticks([])
        holm = "n/a" if p.get("p_adjusted") is None else f"{p['p_adjusted']:.2g}"
        what = textwrap.fill(f"{p['part']}: {p['treatment']} − {p['control']} ({p['regime']})", 30)
        ax.set_title(f"{what}\n{p['relation']} {p['bound']:g}, Holm p {holm}\n{p['verdict']} (n={p['n']})",
                     fontsize=10)  # fmt: skip
        ax.set_ylabel(textwrap.fill(METRICS[p["metric"]].split(" (")[0], 34), fontsize=9)
        ax.tick_params(labelsize=9)
    for ax in list(axes.flat)[len(parts) :]:
        ax.axis("off")
    handles = [
        Line2D([], [], marker="o", linestyle="", color="tab:blue", label="one seed's paired difference"),
        Line2D([], [], marker="D", color="black", label="mean, 95 % t-interval"),
        Line2D([], [], linestyle="--", color="tab:red", label="the part's bound (what is tested)"),
        Line2D([], [], linestyle=":", color="tab:green", label="the effect hoped for (bound and margin)"),
    ]
    fig.legend(handles=handles, loc="lower center", ncol=4, fontsize=10, bbox_to_anchor=(0.5, 0.0))
    fig.tight_layout(rect=(0, 0.05, 1, 1))
    state.make_folder(folder)
    path = folder / "paired_differences.png"
    state.save_figure(fig, path, dpi=100)
    plt.close(fig)
    return [path]


def write_holm_results(
    out: str | Path,
    report: str | Path,
    study: ComparisonPlan,
    *,
    n_boot: int = 2000,
    evaluation: Mapping[str, Any] | None = None,
) -> list[Path]:
    """Write the follow-up's page ``report``, its JSON (same stem) and plots (folder of the same stem)."""
    report = Path(report)
    results = build_holm_results(out, study, n_boot=n_boot, evaluation=evaluation)
    plot_dir = report.with_suffix("")
    written: list[Path] = []
    try:
        from dynashape.study.results_plots import plot_results

        written = plot_paired_differences(results, plot_dir) + plot_results(
            results, plot_dir, control=roles_of(study).control
        )
    except ImportError:  # matplotlib missing: tables only
        pass
    if CLAIMS_BEGIN in (report.read_text() if report.exists() else ""):
        kept = kept_claims(report)  # the committed pre-registration, verbatim
    else:  # a new page (another --report path): the pre-registration as the code states it
        from dynashape.study.preregistration_page import preregistration_markdown

        kept = preregistration_markdown(study).replace(CLAIMS_BEGIN, "").replace(CLAIMS_END, "").strip("\n") + "\n"
    rel = [str(p.relative_to(report.parent)) for p in written]
    state.make_folder(report.parent)
    state.write_text(report.with_suffix(".json"), json.dumps(json_clean(results), indent=1, allow_nan=False))
    notes = kept_block(report, NOTES_BEGIN, NOTES_END)
    state.write_text(report, holm_markdown(results, study, kept, rel, notes=notes, page=str(report)))
    return [report, report.with_suffix(".json"), *written]
