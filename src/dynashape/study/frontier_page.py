"""The frontier page (``page = "frontiers"``): markdown, its JSON (same stem) and plots (folder of the same stem),
a function of the comparison folder's runs and the study file (``frontier_results``).

The page opens with its plan block, written from the study file: the file's own opening comment (the registration,
committed before the first run) and every row with what it fixes. Then the rows, the frontiers, accuracy at matched
lengths, the frontiers at the single rows' lengths, which method when, L1 at its fixed budgets and the controllers.
Every figure is a seed mean with a 95 % Student's t-interval over seeds (paired where it is a difference).
"""

from __future__ import annotations

import time
from collections.abc import Mapping
from pathlib import Path
from typing import Any

from dynashape.core.text import counted
from dynashape.io import state
from dynashape.study.frontier_math import MATCHED_STEP
from dynashape.study.frontier_plots import plot_frontiers
from dynashape.study.frontier_results import build_frontier_results
from dynashape.study.plan_file import ComparisonPlan, studies_dir

__all__ = ["frontier_markdown", "plan_block", "write_frontier_results"]


def _ci(e: Mapping[str, Any] | None, digits: int = 3, sign: bool = False) -> str:
    if not e or e.get("estimate") is None:
        return "n/a"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    if e["low"] is None:
        return f.format(e["estimate"]) + f" (n={e['n']})"
    return f"{f.format(e['estimate'])} [{f.format(e['low'])}, {f.format(e['high'])}]"


def _opening_comment(text: str) -> list[str]:
    """The study file's opening comment lines, without their '# '."""
    lines = []
    for line in text.splitlines():
        if not line.startswith("#"):
            break
        lines.append(line[2:] if line.startswith("# ") else line[1:])
    return lines


def _fixed_text(fixed: Mapping[str, Any], prefix: str = "") -> list[str]:
    out = []
    for k, v in fixed.items():
        out += _fixed_text(v, f"{prefix}{k}.") if isinstance(v, Mapping) else [f"{prefix}{k} = {v}"]
    return out


def plan_block(plan: ComparisonPlan, study_text: str | None) -> list[str]:
    """The plan block: the study file's opening comment, verbatim, and its rows with what each fixes."""
    lines = ["## The plan", ""]
    if study_text is not None:
        lines += ["Registered in the study file before its first run (its opening comment, verbatim):", ""]
        lines += ["> " + line if line else ">" for line in _opening_comment(study_text)]
        lines.append("")
    base = ", ".join(f"{k} = {v}" for k, v in plan.warmup.items()) or "the default base"
    lines += [f"Seeds {', '.join(map(str, plan.seeds))}, paired across rows; base model: {base}; evaluation: "
              + ", ".join(f"{k} = {v}" for k, v in plan.eval.items() if k != "passk_keys")
              + (f", the {len(plan.eval['passk_keys'])}-problem pass@k subset" if "passk_keys" in plan.eval else "")
              + ".", ""]  # fmt: skip
    for regime, rows in plan.rows.items():
        lines += [f"| {regime}: row | preset | fixed |", "|---|---|---|"]
        for row in rows:
            fixed = "; ".join(_fixed_text(plan.fixed.get(f"{regime}/{row}", {}))) or "(the preset)"
            lines.append(f"| {row} | {plan.preset(row)} | {fixed} |")
        lines.append("")
    return lines


def _rows_table(regime: Mapping[str, Any]) -> list[str]:
    lines = ["| row | seeds | accuracy | mean length | tokens sampled (k) | rounds per step |", "|---" * 6 + "|"]
    base = regime["base"]
    lines.append(f"| base model | {base['accuracy']['n']} | {_ci(base['accuracy'])} | {_ci(base['mean_length'], 1)} "
                 "| - | - |")  # fmt: skip
    for r in regime["rows"]:
        tokens = r.get("tokens_sampled")
        k = {"estimate": tokens["estimate"] / 1e3, "low": None, "n": tokens["n"]} if tokens else None
        lines.append(f"| {r['row']} | {len(r['seeds'])} | {_ci(r['accuracy'])} | {_ci(r['mean_length'], 1)} | "
                     f"{_ci(k, 1) if k else 'n/a'} | {_ci(r.get('rounds_per_step'), 2)} |")  # fmt: skip
    return lines


def _matched_table(regime: Mapping[str, Any]) -> list[str]:
    if not regime["matched"]:
        return ["No length is spanned by two frontiers at every seed (yet)."]
    lines = ["| length | method | accuracy | minus the best |", "|---|---|---|---|"]
    for m in regime["matched"]:
        for method, e in sorted(m["methods"].items(), key=lambda kv: -kv[1]["estimate"]):
            diff = "(best)" if method == m["best"] else _ci(e["minus_best"], sign=True)
            lines.append(f"| {m['length']} | {method} | {_ci(e)} | {diff} |")
    return lines


def _versus_table(regime: Mapping[str, Any]) -> list[str]:
    singles = list(dict.fromkeys(v["row"] for v in regime["versus_rows"]))
    if not singles:
        return ["No single row has finished runs (yet)."]
    lines = ["| method | " + " | ".join(f"at {s}'s length, minus {s}" for s in singles) + " |"]
    lines.append("|---" * (1 + len(singles)) + "|")
    for method in regime["frontiers"]:
        cells = []
        for s in singles:
            v = next((v for v in regime["versus_rows"] if v["row"] == s and v["method"] == method), None)
            cells.append("not spanned" if v is None or not v["spanned"] else _ci(v["minus_row"], sign=True))
        lines.append(f"| {method} | " + " | ".join(cells) + " |")
    return lines


def _which_when_table(regime: Mapping[str, Any]) -> list[str]:
    if not regime["which_when"]:
        return ["No matched length (yet)."]
    header = "| length | highest mean accuracy | not distinguished from it (its interval covers 0, or under 2 seeds) |"
    lines = [header, "|---|---|---|"]
    for w in regime["which_when"]:
        lines.append(f"| {w['length']} | {w['best']} | {', '.join(w['not_distinguished']) or '-'} |")
    return lines


def _at_budget_table(regime: Mapping[str, Any]) -> list[str]:
    if not regime["at_budget"]:
        return []
    lines = ["", "### L1 at its fixed budgets", "", "Each L1 row evaluated with the budget in its prompt "
             "(its preset's evaluation budgets, at the training budget's scale).", "",
             "| row | budget | accuracy | mean length | following error |", "|---|---|---|---|---|"]  # fmt: skip
    for b in regime["at_budget"]:
        lines.append(f"| {b['row']} | {b['budget']} | {_ci(b['accuracy'])} | {_ci(b['mean_length'], 1)} | "
                     f"{_ci(b['following_error'], 2)} |")  # fmt: skip
    return lines


def _runs_block(runs: Mapping[str, Any]) -> list[str]:  # runs: the results' ``invocations``
    """How the finished runs were trained (their history.jsonl): commits, resumes, restarts from step 0."""
    resumed = [f"{run} (from step {', '.join(map(str, steps))})" for run, steps in runs.get("resumed", {}).items()]
    restarted = list(runs.get("restarted", {}))
    commits = ", ".join(f"`{c[:12]}`" for c in runs.get("commits", [])) or "n/a"
    resumed_text = counted(len(resumed), "run") + (": " + "; ".join(resumed) if resumed else "")
    restarted_text = counted(len(restarted), "run") + (": " + ", ".join(restarted) if restarted else "")
    return [
        "## The runs", "",
        f"- Trained at {commits}, on {'; '.join(runs.get('machines', [])) or 'n/a'} (every finished run's "
        "history.jsonl).",
        f"- Resumed from a checkpoint after a stop: {resumed_text}. A resumed run is bit-identical to one trained "
        "without a stop, on the same machine: every metric, the weights and the evaluation "
        "(tests/train/test_field_trainer.py for each field method and dynamic sampling, tests/train/test_run.py for "
        "LEAD).",
        f"- Trained again from step 0 after an earlier start that left no checkpoint here: {restarted_text}.",
        "",
    ]  # fmt: skip


def frontier_markdown(results: Mapping[str, Any], plan: ComparisonPlan, study_text: str | None, written: str,
                      plots: Mapping[str, str]) -> str:  # fmt: skip
    """The page: the plan block, then per regime its tables and plots (``plots``: file name -> relative path)."""
    runs = {"finished": results["finished_runs"], "planned": results["planned_runs"]}
    lines = [f"# Results: {results['study']}", "",
             f"Written {written} by `dynashape results` from the runs' eval.json and metrics.jsonl: "
             f"{runs['finished']} of {runs['planned']} runs finished. Seed means with 95 % Student's t-intervals over "
             "seeds (paired where a difference); descriptive, no claim is decided.", ""]  # fmt: skip
    deviations = (results.get("evaluation") or {}).get("deviations")
    if deviations:  # written only with `dynashape results --deviating`
        lines += [f"**Deviating from the plan's evaluation:** {'; '.join(deviations)}.", ""]
    lines += plan_block(plan, study_text)
    lines += _runs_block(results["invocations"])
    for name, regime in results["regimes"].items():
        lines += [f"## The {name} regime", "", "### Rows", "", *_rows_table(regime)]
        lines += ["", "### Frontiers", "", "Each method through its strengths (the panel's coloured line, labelled by "
                  "each strength's value), over the single rows and the base; the other methods in grey."]  # fmt: skip
        if f"frontiers_{name}.png" in plots:
            lines += ["", f"![frontiers]({plots[f'frontiers_{name}.png']})"]
        lines += ["", "### Accuracy at matched lengths", "",
                  f"Per seed, a method's accuracy at length l is linear between its strengths' points around l; the "
                  f"matched lengths are the multiples of {MATCHED_STEP} tokens where two or more methods' frontiers "
                  "span l at every seed. Against the best-mean method there, paired by seed.", ""]  # fmt: skip
        lines += _matched_table(regime)
        if f"matched_{name}.png" in plots:
            lines += ["", f"![matched lengths]({plots[f'matched_{name}.png']})"]
        lines += ["", "### The frontiers at the single rows' lengths", "",
                  "Each frontier's accuracy at the single row's own length, seed by seed, minus that row's accuracy "
                  "(not spanned: some seed's frontier does not reach that length).", ""]  # fmt: skip
        lines += _versus_table(regime)
        lines += ["", "### Which method when", "", *_which_when_table(regime)]
        lines += _at_budget_table(regime)
        if f"controllers_{name}.png" in plots:
            lines += ["", "### The controllers", "", f"![controllers]({plots[f'controllers_{name}.png']})"]
        lines.append("")
    return "\n".join(lines)


def _study_text(out: Path, plan: ComparisonPlan) -> str | None:
    """The study file the folder ran: its own copy (a user's study), else the committed file of that name."""
    for path in (out / "study.toml", studies_dir() / f"{plan.name}.toml"):
        if path.is_file():
            return path.read_text()
    return None


def write_frontier_results(
    out: str | Path, report: str | Path, plan: ComparisonPlan, *, evaluation: Mapping[str, Any] | None = None
) -> list[Path]:
    """Write ``report``, its JSON and its plots for the frontier study ``plan`` run into ``out``; returns the
    paths written. ``evaluation``: the plan's and the runs' own settings (``pages.evaluation_record``)."""
    out, report = Path(out), Path(report)
    results = build_frontier_results(out, plan)
    if evaluation is not None:
        results["evaluation"] = dict(evaluation)
    plot_folder = report.with_suffix("")
    written = plot_frontiers(results, plot_folder)
    plots = {p.name: f"{plot_folder.name}/{p.name}" for p in written}
    state.make_folder(report.parent)
    state.write_json(report.with_suffix(".json"), results, indent=1)
    text = frontier_markdown(results, plan, _study_text(out, plan), time.strftime("%Y-%m-%d %H:%M UTC", time.gmtime()),
                             plots)  # fmt: skip
    state.write_text(report, text)
    return [report, report.with_suffix(".json"), *written]
