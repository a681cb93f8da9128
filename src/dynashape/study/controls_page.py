"""The field comparison's page (docs/results-field.md): the head through ``<!-- plan:end -->`` kept byte for byte,
then the rows, the paired differences, the plots, L1 at its fixed budgets and what this world can say, from the
numbers of ``controls_results.build_controls_results``. Descriptive: intervals, never verdicts."""

from __future__ import annotations

from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.study.caveats import HOLM_FAMILY
from dynashape.study.caveats_page import caveat_lines
from dynashape.study.controls_plots import ZOOM_ACCURACY  # matplotlib-free at import: it loads in plot_controls
from dynashape.study.results_page import NOTES_BEGIN, NOTES_END, deviation_lines, fmt_clock
from dynashape.study.roles import StudyRoles, roles_of

__all__ = ["PLAN_BEGIN", "PLAN_END", "controls_markdown", "kept_head", "this_world_cell"]

PLAN_BEGIN, PLAN_END = "<!-- plan:begin -->", "<!-- plan:end -->"
NAMES: Mapping[str, tuple[str, int]] = {  # measure -> (column name, digits)
    "accuracy": ("accuracy", 3),
    "mean_length": ("mean length", 1),
    "truncated_frac": ("truncated", 3),
    "aes": ("AES", 2),
    "trap_pass@32": ("trap pass@32", 3),
    "truncated_at_budget": ("longer than B", 3),
    "following_error": ("following error", 3),
}

WORLD_LIMITS = """\
## What this world can and cannot say

- It can say where each method, at the values its paper's setting gives by the plan's rules, lands on one small
  world: a 4-layer transformer of width 128 on synthetic arithmetic chains, 50 steps from one base, at two
  budgets, with five paired seeds. The intervals are over those seeds; they say how much the numbers move
  from seed to seed here, not how a method does elsewhere.
- It cannot rank the methods as their papers would. The papers train models of billions of parameters for hundreds
  of steps on competition mathematics with budgets of thousands of tokens; here responses are at most 101 or 164
  tokens, a method's lengths and coefficients are rescaled by a stated rule, and no value was tuned. A method that
  needs longer training, a larger model, its KL term or its paper's batch can look worse (or better) here than
  it would there.
- Five seeds give wide intervals: a paired difference whose interval excludes 0 is reported as such, not as a
  finding, and one whose interval covers 0 is not evidence of no difference. No test was made and none is implied.
- The chain world's verbosity is of a few planted kinds (restated problems, repeated results, checks, set by each
  problem's phrasing) and its trap prompts invite a dropped parenthesis; length methods that act on other kinds
  of redundancy have less to find here. Trap pass@32 is measured on the trap prompts of the follow-up's fixed
  40-problem subset, 64 samples each: a few dozen prompts.
- L1's fixed-budget numbers are bounded by the 256-token evaluation cap, which limits how far above a large budget
  a response can land.
"""


def kept_head(report: Path) -> str:
    """The page from its top through ``<!-- plan:end -->``, byte for byte.

    Raises:
        ValueError: the page is missing, or has no ``<!-- plan:begin -->`` followed by ``<!-- plan:end -->`` (the
            plan was committed before the runs; a page without it is not this comparison's).
    """
    text = report.read_text() if report.exists() else ""
    begin = text.find(PLAN_BEGIN)
    end = text.find(PLAN_END, begin + len(PLAN_BEGIN)) if begin >= 0 else -1
    if begin < 0 or end < 0:
        raise ValueError(
            f"{report} has no plan block ({PLAN_BEGIN} ... {PLAN_END}): the field page keeps the plan committed "
            "before the runs verbatim and rewrites only what follows it; nothing was written"
        )
    return text[: end + len(PLAN_END)]


def _num(x: float, digits: int, sign: bool) -> str:
    x = 0.0 if abs(x) < 0.5 * 10.0**-digits else x  # no "-0.000" for a rounding residue
    return f"{x:+.{digits}f}" if sign else f"{x:.{digits}f}"


def _cell(entry: Mapping[str, Any] | None, digits: int, sign: bool = False) -> str:
    """``mean [low, high]`` of an entry (``mean`` or ``estimate``, ``interval``); the mean alone for one seed."""
    if not entry:
        return "n/a"
    text = _num(entry.get("mean", entry.get("estimate")), digits, sign)  # type: ignore[arg-type]
    if entry.get("interval"):
        lo, hi = entry["interval"]
        text += f" [{_num(lo, digits, sign)}, {_num(hi, digits, sign)}]"
    return text


def this_world_cell(results: Mapping[str, Any], methods: Sequence[str], versus: str | None = None) -> str:
    """The chain world's figures for docs/algorithms.md's "which method when" table, beside each paper's headline:
    per method and regime, its paired differences against ``versus`` (None: the page's control, the reference of
    its Holm family) in accuracy and mean length, mean [95 %
    t-interval] over the paired seeds, as the page's difference tables print them. Methods joined by ``<br>``
    (one table row can hold two, L1's forms or LASER and LASER-D); a method without runs says so."""
    versus = versus or results["caveats"]["holm"]["versus"]
    parts = []
    for method in methods:
        cells = {(d["regime"], d["metric"]): d for d in results["differences"]
                 if d["method"] == method and d["versus"] == versus}  # fmt: skip
        regimes = [r for r in _regimes(results) if (r, "accuracy") in cells]
        if not regimes:
            parts.append(f"`{method}`: no finished run")
            continue
        ns = {r: cells[(r, "accuracy")]["n"] for r in regimes}
        same_n = len(set(ns.values())) == 1  # the seed count once, or per regime while runs are missing
        per_regime = [
            f"{r}{'' if same_n else f' (n = {ns[r]})'} accuracy "
            f"{_cell(cells[(r, 'accuracy')], NAMES['accuracy'][1], sign=True)}, "
            f"length {_cell(cells.get((r, 'mean_length')), NAMES['mean_length'][1], sign=True)}"
            for r in regimes
        ]
        parts.append(f"`{method}`{f' (n = {ns[regimes[0]]})' if same_n else ''}: " + "; ".join(per_regime))
    return "<br>".join(parts)


def _regimes(results: Mapping[str, Any]) -> list[str]:
    return sorted({r["regime"] for r in results["summary"]}, reverse=True)  # tight before loose


def _row_lines(results: Mapping[str, Any], regime: str) -> list[str]:
    measures = results["row_measures"]
    lines = [
        f"### {regime}: mean over seeds [95 % t-interval]",
        "",
        "Truncated: cut at the evaluation's cap (256 tokens); longer than B: longer than the regime's training budget.",
        "",
        "| method | seeds | " + " | ".join(NAMES[m][0] for m in measures) + " |",
        "|---|---|" + "---|" * len(measures),
    ]
    base = results["base"].get(regime, {})
    lines.append(f"| base | {len(base.get('seeds', []))} | " + " | ".join(
        "0 (by definition)" if m == "aes" else _cell(base.get(m), NAMES[m][1]) for m in measures) + " |")  # fmt: skip
    rows = [r for r in results["summary"] if r["regime"] == regime]
    rows.sort(key=lambda r: (r["source"] != "controls", r["method"]))
    finished = {r["method"] for r in rows}
    for method in sorted(set((results.get("rows") or {}).get(regime, ())) - finished):  # every planned method
        lines.append(f"| {method} | 0 (no finished run) | " + " | ".join("n/a" for _ in measures) + " |")
    for row in rows:
        name = f"{row['method']} (control)" if row["source"] == "controls" else row["method"]
        lines.append(f"| {name} | {row['n']} | " + " | ".join(_cell(row.get(m), NAMES[m][1]) for m in measures) + " |")
    return [*lines, ""]


def _difference_lines(results: Mapping[str, Any], regime: str) -> list[str]:
    measures = results["measures"]
    lines: list[str] = []
    for control in results["controls"]["methods"]:
        entries = [d for d in results["differences"] if d["regime"] == regime and d["versus"] == control]
        if not entries:
            continue
        by_method: dict[str, dict[str, Mapping[str, Any]]] = {}
        for d in entries:
            by_method.setdefault(d["method"], {})[d["metric"]] = d
        holm = any("p_holm" in d for d in entries)  # the family of Holm's step-down is against the control
        lines += [
            f"### {regime}: field run minus {control} at the same seed, mean [95 % t-interval]",
            "",
            "| method | paired seeds | "
            + " | ".join(NAMES[m][0] for m in measures)
            + (" | Holm p: accuracy, length" if holm else "")
            + " |",
            "|---|---|" + "---|" * (len(measures) + holm),
        ]
        for method, cells in sorted(by_method.items()):
            n = max(c["n"] for c in cells.values())
            p = [f"{cells[m]['p_holm']:.3f}" if "p_holm" in cells.get(m, {}) else "n/a" for m in HOLM_FAMILY]
            lines.append(f"| {method} | {n} | " + " | ".join(_cell(cells.get(m), NAMES[m][1], sign=True)
                                                             for m in measures)
                         + (f" | {', '.join(p)}" if holm else "") + " |")  # fmt: skip
        lines.append("")
    return lines


def _at_budget_lines(results: Mapping[str, Any]) -> list[str]:
    rows = results["at_budget"]
    if not rows:
        return ["No L1 run has finished its fixed-budget evaluation yet.", ""]
    measures = ("accuracy", "mean_length", "following_error", "truncated_frac")
    lines = [
        "Every held-out prompt names the same budget; mean over seeds [95 % t-interval]; following error = mean "
        "|length - budget| / budget.",
        "",
        "| regime | method | budget | seeds | " + " | ".join(NAMES[m][0] for m in measures) + " |",
        "|---|---|---|---|" + "---|" * len(measures),
    ]
    order = {r: i for i, r in enumerate(_regimes(results))}
    for row in sorted(rows, key=lambda r: (order.get(r["regime"], 9), r["method"], r["budget"])):
        n = max((row[m]["n"] for m in measures if m in row), default=0)
        lines.append(f"| {row['regime']} | {row['method']} | {row['budget']} | {n} | "
                     + " | ".join(_cell(row.get(m), NAMES[m][1]) for m in measures) + " |")  # fmt: skip
    return [*lines, ""]


def _notes_lines(notes: str) -> list[str]:
    """The hand-written notes (the outcome of the plan's same-numbers check, anything a reader must know that the
    runs' files do not say), kept verbatim between their markers when the page is rewritten."""
    return [
        "## Notes",
        "",
        "Hand-written; rewriting the page keeps what stands between the two notes markers below.",
        "",
        NOTES_BEGIN,
        *([notes.rstrip("\n")] if notes.strip() else []),
        NOTES_END,
        "",
    ]


def _provenance_lines(results: Mapping[str, Any], report: str, notes: str = "") -> list[str]:
    c = results["controls"]
    commits_differ = bool(c["commits"] and c["field_commits"]) and set(c["commits"]) != set(c["field_commits"])
    same_numbers = (
        [
            "- The controls and the field runs were trained at different commits: the plan's check that `dynashape "
            "train` gives the same numbers at both (`scripts/same_run_numbers.py`) belongs in the notes above"
            + ("." if notes.strip() else "; none is recorded there yet.")
        ]
        if commits_differ
        else []
    )
    resumed = [
        f"{r['run_dir']} (from step {', '.join(map(str, r['resumes']))})" for r in results["runs"] if r["resumes"]
    ]
    restarted = [r["run_dir"] for r in results["runs"] if r.get("restarts")]
    machine = results.get("machine") or {}
    return [
        "## How these numbers were made",
        "",
        f"- Command: `{results.get('command') or 'n/a'}`; this page: `dynashape results {results['folder']} "
        f"--report {report}" + ("" if c["default"] else f" --controls {c['folder']}") + "`.",
        f"- Controls: {' and '.join(f'`{m}`' for m in c['methods'])} from "
        f"`{c['folder']}/runs/<regime>/<method>-seed<s>`"
        + (
            f" (the default: the field folder's sibling `{Path(c['folder']).name}`)"
            if c["default"]
            else " (named by --controls)"
        )
        + f", trained at {', '.join(f'`{x[:12]}`' for x in c['commits']) or 'n/a'}; the field runs at "
        f"{', '.join(f'`{x[:12]}`' for x in c['field_commits']) or 'n/a'}. Each control is checked against its "
        f"field runs: registered evaluation, and the same {', '.join(c['paired_on'])}.",
        *same_numbers,
        f"- Wall time (all invocations): {fmt_clock(results.get('wall_seconds'))}; the field runs' own time summed: "
        f"{fmt_clock(results.get('run_seconds'))}; machine (comparison.json keeps the last invocation's): "
        + (", ".join(f"{k} {v}" for k, v in machine.items()) or "n/a")
        + ".",
        f"- Failed runs: {', '.join(results['failed']) or 'none'}. Resumed from a checkpoint (history.jsonl): "
        f"{', '.join(resumed) or 'none'}. Trained again from step 0 after an earlier start (history.jsonl): "
        f"{', '.join(restarted) or 'none'}.",
        "- Every number here, each paired difference's per-seed values included, is in the JSON beside this page.",
        "",
    ]


def controls_markdown(
    results: Mapping[str, Any],
    head: str,
    plots: Sequence[str] = (),
    roles: StudyRoles | None = None,
    report: str = "",
    notes: str = "",
) -> str:
    """The page: ``head`` (through the plan's end marker) verbatim, then everything from ``results``, with the
    hand-written ``notes`` kept verbatim; ``roles``: the study's (None: the defaults, ``roles.roles_of``)."""
    roles = roles or roles_of(None)
    versus = roles.label(roles.control)
    report = report or "docs/results-field.md"
    done, planned = results["finished_runs"], results.get("planned_runs")
    lines = [
        "",
        "",
        "## Results",
        "",
        f"Written from the runs by `dynashape results {results['folder']} --report {report}` "
        f"({results['generated']}); descriptive, as the plan says: no test, no verdict.",
        "",
    ]
    if planned and done < planned:
        lines += [f"Partial results: {done} of the {planned} planned field runs so far.", ""]
    elif not done:
        lines += ["No field run has finished yet.", ""]
    lines += caveat_lines(results, roles)
    lines += deviation_lines(results.get("evaluation"))
    lines += _notes_lines(notes)
    lines += ["## Rows", ""]
    for regime in _regimes(results):
        lines += _row_lines(results, regime)
    against = " and ".join(roles.label(m) for m in results["controls"]["methods"])
    lines += [f"## Paired differences against {against}", ""]
    paired = [p for p in plots if Path(p).stem.startswith("differences")]
    if paired:
        lines += [f"The comparison itself: each method minus {versus} at the same seed, accuracy and mean length, mean "
                  "over the paired seeds with its 95 % t-interval, per regime.", ""]  # fmt: skip
        lines += [f"![{Path(p).stem}]({p})" for p in paired] + [""]
    if any("p_holm" in d for d in results["differences"]):
        lines += [f"Holm p: Holm's step-down over the page's accuracy and length differences against {versus} (the "
                  "family of every field method, both regimes), on each difference's two-sided paired t-test of a "
                  "zero mean; descriptive, as the section above says.", ""]  # fmt: skip
    for regime in _regimes(results):
        lines += _difference_lines(results, regime)
    frontier = [p for p in plots if Path(p).stem.startswith("frontier_")]
    if frontier:
        lines += ["## Frontier", "", "Accuracy against mean length, each point's bars its 95 % t-interval over "
                  "seeds on both axes; each point is one strength of its method, not its frontier (the section on "
                  "what these points can say). Below, where rows lie far apart, the same zoomed on the rows within "
                  f"{ZOOM_ACCURACY} accuracy of {versus}.", ""]  # fmt: skip
        lines += [f"![{Path(p).stem}]({p})" for p in frontier] + [""]
    lines += ["## The controllers over steps", ""]
    trajectories = [p for p in plots if Path(p).stem.startswith("controllers_")]
    if trajectories:
        lines += ["Mean over seeds per step, the band its 95 % t-interval (from each run's metrics.jsonl): "
                  "A-DLP's `adlp/lambda`, AALC's `aalc/alpha` (alpha_t, once a validation has run), LASER-D's "
                  "`laser_d/target_low|medium|high` (groups whose accuracy is below 1/3, in [1/3, 2/3), at least 2/3), "
                  "ThinkPrune's `thinkprune/max_length`, "
                  "LEAD's `lead/lambda_l`.", ""] + [f"![{Path(p).stem}]({p})" for p in trajectories] + [""]  # fmt: skip
    else:
        lines += ["No controller trajectory yet.", ""]
    lines += ["## L1 at fixed budgets", "", *_at_budget_lines(results)]
    lines += [WORLD_LIMITS]
    lines += _provenance_lines(results, report, notes)
    return head + "\n".join(lines)
