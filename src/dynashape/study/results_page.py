"""The results page of a comparison: the pre-registered claims kept verbatim, verdicts, tables, plots' links.

A pure function of ``report.results.build_results``'s dict; ``claims_section`` is the claims' default text.
"""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.core.text import counted
from dynashape.study.claims import METRICS, MIN_SEEDS, Claim
from dynashape.study.tables import PUBLISHED_LEAD, PUBLISHED_MEDS

__all__ = [
    "CLAIMS_BEGIN",
    "CLAIMS_END",
    "NOTES_BEGIN",
    "NOTES_END",
    "claims_section",
    "deviation_lines",
    "fmt_clock",
    "fmt_interval",
    "fmt_value",
    "kept_block",
    "kept_claims",
    "results_markdown",
    "summary_cells",
]

CLAIMS_BEGIN, CLAIMS_END = "<!-- claims:begin -->", "<!-- claims:end -->"
NOTES_BEGIN, NOTES_END = "<!-- notes:begin -->", "<!-- notes:end -->"
"""A hand-written section (why a deviation happened, errata of the registration's wording) that regenerating a
page keeps verbatim, as it keeps the claims."""
TABLE_METRICS = ("accuracy", "mean_length", "aes")


def fmt_value(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None or x != x else f"{x:.{digits}f}"


def fmt_interval(lo: float | None, hi: float | None, digits: int = 3) -> str:
    return "n/a" if lo is None or hi is None or lo != lo else f"[{lo:.{digits}f}, {hi:.{digits}f}]"


def claims_section(claims: Sequence[Claim]) -> str:
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
    for claim in claims:
        lines.append(f"- **({claim.id})** {claim.text}.")
        for p in claim.parts:
            lines.append(f"  - {p.regime}: {METRICS[p.metric]}: `{p.treatment} - {p.control} {p.relation} {p.bound:g}`")
    return "\n".join(lines) + "\n"


def kept_block(path: Path, begin: str, end: str) -> str:
    """The text between ``begin`` and ``end`` of the file at ``path`` ('' when it has none)."""
    text = path.read_text() if path.exists() else ""
    if begin in text and end in text.split(begin, 1)[1]:
        return text.split(begin, 1)[1].split(end, 1)[0].strip("\n") + "\n"
    return ""


def deviation_lines(evaluation: Mapping[str, Any] | None, notes: str = "") -> list[str]:
    """The "Deviation from the registration" section: what the runs' own config.yaml files say against the plan
    (``pages.evaluation_record``), and the hand-written ``notes`` (kept between ``NOTES_BEGIN`` and
    ``NOTES_END``); nothing when the runs match and there are no notes."""
    deviations = (evaluation or {}).get("deviations") or []
    if not deviations and not notes:
        return []
    lines = ["## Deviation from the registration", ""]
    if deviations:
        n = len(evaluation["deviating_runs"])  # type: ignore[index]
        lines += [
            f"**This page is marked as deviating**: {n} of the {len(evaluation['runs'])} finished runs were not "  # type: ignore[index]
            "evaluated as registered (read from each run's own config.yaml):",
            "",
        ]
        lines += [f"- {d}" for d in deviations]
        lines.append("")
    else:
        lines += ["Every finished run's config.yaml has the registered evaluation.", ""]
    if notes:
        lines += [NOTES_BEGIN, notes.rstrip("\n"), NOTES_END, ""]
    return lines


def kept_claims(path: Path, claims: Sequence[Claim] = ()) -> str:
    """The claims block kept in the page at ``path``, or the ``claims`` as a new block (``claims_section``)."""
    return kept_block(path, CLAIMS_BEGIN, CLAIMS_END) or claims_section(claims)


def fmt_clock(seconds: float | None) -> str:
    if seconds is None:
        return "n/a"
    h, rest = divmod(int(seconds), 3600)
    return f"{h} h {rest // 60:02d} min" if h else f"{rest // 60} min {rest % 60:02d} s"


def _difficulty_cell(entry: Mapping[str, Any], control: str) -> str:
    acc, length = entry["accuracy"], entry["mean_length"]
    text = f"{acc['mean']:.2f} / {length['mean']:.0f}"
    if f"vs_{control}" in acc and f"vs_{control}" in length:
        a, b = acc[f"vs_{control}"], length[f"vs_{control}"]
        text += f"<br>Δ {a['estimate']:+.2f} {fmt_interval(*a['interval'], digits=2)} / {b['estimate']:+.0f} "
        text += fmt_interval(*b["interval"], digits=0)
    return text


def summary_cells(row: Mapping[str, Any], metrics: Sequence[str]) -> list[str]:
    """A summary row's cells: ``mean ± sd [bootstrap interval]`` per metric (lengths to 0.1), 'n/a' without one."""
    cells = []
    for metric in metrics:
        e = row.get(metric)
        if e is None:
            cells.append("n/a")
            continue
        digits = 1 if "length" in metric else 3
        text = f"{e['mean']:.{digits}f}" + ("" if e["sd"] is None else f" ± {e['sd']:.{digits}f}")
        if "bootstrap_interval" in e:
            text += " " + fmt_interval(*e["bootstrap_interval"], digits=digits)
        cells.append(text)
    return cells


def results_markdown(
    results: Mapping[str, Any], claims_text: str | None, plots: Sequence[str] = (), control: str | None = None
) -> str:
    """The markdown page of ``results`` (``build_results``), with ``claims_text`` kept verbatim on top; None for
    a comparison that registered no claims (``dynashape compare --methods``): its page reports what ran, with
    intervals and no verdicts. ``control``: the study's control, the reference of the per-difficulty differences
    (None: the reference method, ``dynashape.shapers.reference_shaper``)."""
    from dynashape.shapers import reference_shaper

    control = control or reference_shaper()
    seeds_of = {(r["regime"], r["method"]): r["n"] for r in results["summary"]}
    n_min = min(seeds_of.values(), default=0)
    if claims_text is None:
        lines = _adhoc_header(results, seeds_of)
    else:
        lines = _claims_header(results, claims_text, seeds_of, n_min)
    lines += _body(results, seeds_of, control)
    if plots:
        lines += ["## Plots", ""] + [f"![{Path(p).stem}]({p})" for p in plots] + [""]
    return "\n".join(lines)


def _adhoc_header(results: Mapping[str, Any], seeds_of: Mapping[tuple[str, str], int]) -> list[str]:
    methods = sorted({m for _, m in seeds_of})
    regimes = sorted({r for r, _ in seeds_of}, reverse=True)
    seeds = results.get("seeds") or []
    return [
        "# Results of an ad-hoc comparison",
        "",
        f"{len(methods)} method{'s' if len(methods) != 1 else ''} ({', '.join(methods) or 'none yet'}) in the "
        f"{', '.join(regimes) or 'n/a'} regime{'s' if len(regimes) != 1 else ''}, seeds "
        f"{', '.join(map(str, seeds)) or 'n/a'}. No claims were registered for this comparison, so this page "
        "reports estimates with their intervals and no verdicts; everything on it is rewritten from the runs.",
        "",
    ]


def _claims_header(
    results: Mapping[str, Any], claims_text: str, seeds_of: Mapping[tuple[str, str], int], n_min: int
) -> list[str]:
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
        lines += [
            f"Partial results: {counted(n_min, 'seed')} so far on the row with fewest (at least {MIN_SEEDS} needed).",
            "",
        ]
    lines += [
        "| claim | verdict | estimate | 95 % t-interval | bootstrap | n | note |",
        "|---|---|---|---|---|---|---|",
    ]
    for c in results["claims"]:
        boot = c["parts"][0].get("bootstrap_interval")
        verdict = c["verdict"] + (f" (n < {MIN_SEEDS})" if c["n"] < MIN_SEEDS else "")
        lines.append(
            f"| ({c['id']}) | **{verdict}** | {fmt_value(c['estimate'])} | {fmt_interval(*c['interval'])} | "
            f"{fmt_interval(*(boot or (None, None)))} | {c['n']} | {c.get('reason', '')} |"
        )
        for p in c["parts"][1:] if len(c["parts"]) > 1 else []:
            lines.append(
                f"|  part: {p['metric']} {p['treatment']} - {p['control']} {p['relation']} {p['bound']:g} | "
                f"{p['verdict']} | {fmt_value(p['estimate'])} | {fmt_interval(*p['interval'])} | "
                f"{fmt_interval(*(p.get('bootstrap_interval') or (None, None)))} | {p['n']} | |"
            )
    return lines


def _body(results: Mapping[str, Any], seeds_of: Mapping[tuple[str, str], int], control: str) -> list[str]:
    """Everything after the verdicts: how the numbers were made, tuning, per-regime tables, published numbers."""
    machine = results.get("machine") or {}
    lines = [
        "",
        "## How these numbers were made",
        "",
        f"- Command: `{results.get('command') or 'n/a'}`; regenerate this page from its runs with "
        f"`dynashape results {results.get('folder') or 'OUT'} --report <this page>`.",
        f"- Wall time (all invocations, each up to its last finished run): {fmt_clock(results.get('wall_seconds'))}; "
        f"the runs' own time summed: {fmt_clock(results.get('run_seconds'))} over {results.get('finished_runs', 0)} "
        f"finished runs (test and tuning), {results.get('jobs') or 'n/a'} at a time; machine: "
        + (", ".join(f"{k} {v}" for k, v in machine.items()) or "n/a"),
        f"- Seeds per row: {', '.join(f'{m} ({r}) {n}' for (r, m), n in sorted(seeds_of.items())) or 'none yet'}.",
        "- Intervals: paired t-interval over seeds (95 %); bootstrap = seeds, then problems within each seed "
        "(2000 replicates, 95 % percentile).",
        "",
    ]
    lines += _tuning_lines(results.get("tuning", {}))
    by_regime: dict[str, list[dict[str, Any]]] = {}
    for row in results["summary"]:
        by_regime.setdefault(row["regime"], []).append(row)
    for regime, rows in sorted(by_regime.items(), reverse=True):
        lines += _regime_lines(results, regime, rows, control)
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
    return lines


def _tuning_lines(tuning: Mapping[str, Any]) -> list[str]:
    """The tuning table (validation split only); none when nothing was tuned."""
    if not tuning:
        return []
    lines: list[str] = []
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
                cells.append(f"{v['value']:g}: {fmt_value(sum(aes) / len(aes) if aes else None)}")
            lines.append(f"| {regime} | {method} | {t['key']} | {'; '.join(cells)} | **{t['chosen']:g}** |")
        if isinstance(methods.get("best_global"), str):
            lines.append(f"| {regime} | best_global | | | **{methods['best_global']}** |")
    lines.append("")
    return lines


def _regime_lines(
    results: Mapping[str, Any], regime: str, rows: Sequence[Mapping[str, Any]], control: str
) -> list[str]:
    """One regime's tables: accuracy, length and AES; paired differences; per difficulty."""
    lines: list[str] = []
    lines += [
        f"## {regime}: accuracy, length, AES (mean ± sd over seeds; bootstrap 95 %)",
        "",
        "| method | seeds | accuracy | mean length | AES | hardest acc. | easiest length | trap pass@64 |",
        "|---|---|---|---|---|---|---|---|",
    ]
    base = rows[0]["base"]
    lines.append(f"| base | | {base['accuracy']:.3f} | {base['mean_length']:.1f} | 0 | | | |")
    for row in rows:
        cells = summary_cells(row, (*TABLE_METRICS, "accuracy@hardest", "mean_length@easiest", "trap_pass@64"))
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
            cells.append(f"{d['estimate']:+.{digits}f} {fmt_interval(*d['interval'], digits=digits)}")
        lines.append(f"| {method} | {versus} | " + " | ".join(cells) + " |")
    lines += [
        "",
        f"### {regime}: per difficulty (accuracy / mean length, mean over seeds; Δ vs {control} with its t-interval)",
        "",
    ]
    pd = [r for r in results["per_difficulty"] if r["regime"] == regime]
    ds = sorted({r["difficulty"] for r in pd})
    lines += ["| method | " + " | ".join(f"d={d}" for d in ds) + " |", "|---|" + "---|" * len(ds)]
    cell = {(r["method"], r["difficulty"]): r for r in pd}
    for method in sorted({r["method"] for r in pd}):
        cells = [_difficulty_cell(cell[(method, d)], control) if (method, d) in cell else "n/a" for d in ds]
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    lines.append("")
    return lines
