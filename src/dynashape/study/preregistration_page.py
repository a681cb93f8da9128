"""The follow-up's page (docs/results-v2.md): its pre-registered section, written from ``study.preregistration`` and its
frozen data before the first run and kept verbatim after (``results_page.CLAIMS_BEGIN`` / ``CLAIMS_END``)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynashape.study import preregistration
from dynashape.study.claims import METRICS
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.results_page import CLAIMS_BEGIN, CLAIMS_END

__all__ = ["preregistration_markdown"]


def _g(x: float | None, digits: int = 3) -> str:
    return "n/a" if x is None else f"{x:.{digits}g}"


def _value(overrides: Mapping[str, Any] | None) -> str:
    """``threshold=25`` for ``{"shaper_kwargs": {"threshold": 25}}``; 'preset' for none."""
    if not overrides:
        return "preset"
    flat = {**overrides.get("shaper_kwargs", {}), **{k: v for k, v in overrides.items() if k != "shaper_kwargs"}}
    return ", ".join(f"`{k}={v}`" for k, v in flat.items())


def _subset_lines(subset: Mapping[str, Any]) -> list[str]:
    cand = subset["candidates"]
    kept = set(subset["keys"])
    chosen = [
        (p, t, d) for k, p, t, d in zip(cand["keys"], cand["pass8"], cand["is_trap"], cand["difficulty"]) if k in kept
    ]
    traps = sum(t for _, t, _ in chosen)
    mean = sum(p for p, _, _ in chosen) / len(chosen)
    return [
        f"- Rule: {subset['rule']}.",
        f"- Result: {len(chosen)} of {len(cand['keys'])} candidates, {traps} of them trap prompts; the base's "
        f"pass@8 on them: mean {mean:.3f}, at most {max(p for p, _, _ in chosen):.3f} (every key and every "
        "candidate's pass@8 are in `src/dynashape/study/followup.json`). Claim (d) reads pass@32 on the trap "
        "prompts among them.",
        f"- Base model: the shipped one, sha256 `{cand['base_sha256']}`.",
    ]


def preregistration_markdown(study: ComparisonPlan) -> str:
    """The section between the claims markers of a ``decide = "holm"`` study: rules, parts with margins, the power
    table, rows and seeds."""
    plan = preregistration.frozen_data(study)
    power = {t["part"]: t for t in plan["power"]["parts"]}
    ev = study.eval
    lines = [
        CLAIMS_BEGIN,
        "## Pre-registration (written before the first run, kept verbatim)",
        "",
        "The same questions as the first comparison ([results.md](results.md), claims (a)-(e)), on new seeds, with "
        "rules that can decide them.",
        "",
        "### Rules",
        "",
        "- Each part is `treatment - control <relation> bound` on per-seed paired differences. Its margin m: for a "
        "superiority part (`>` / `<`) the bound is 0 and m is the smallest effect of interest; for a non-inferiority "
        "part (`>=` / `<=`) the bound is -m / +m.",
        "- Test: two-sided one-sample t-test of the mean paired difference against the bound.",
        f"- Multiplicity: Holm's step-down over all {len(study.parts)} parts at family-wise alpha "
        f"{study.alpha}. A rejected part **holds** when its mean lies on the relation's side of the bound and "
        "**fails** otherwise; a part not rejected is **inconclusive**.",
        "- Ceiling rule: a part whose paired differences are all equal (both arms pinned at an end, e.g. pass@k = 1 "
        "on every seed) is inconclusive. So is a part with fewer than 5 paired seeds. Both enter Holm with p = 1.",
        "- A claim holds when all its parts hold and fails when any part fails; otherwise it is inconclusive.",
        "- Reported per part: the estimate, the 95 % t-interval (unadjusted, for reading), p, Holm's adjusted p, the "
        "margin, and the power the part had.",
        "",
        "### Parts and margins",
        "",
        "| part | regime | comparison | metric | relation | margin | why this margin |",
        "|---|---|---|---|---|---|---|",
    ]
    lines += _parts_lines(study)
    lines += _power_lines(study, power)
    d1 = next(p for p in study.parts if p.id == "d1")
    lines += [
        "",
        f"d1's metric is new (the subset below). Its sd is v1's {d1.v1_metric} of meds - dapo on v1's 6 trap prompts, "
        "from 64 samples each: the same metric on a smaller subset.",
        "",
        "### Rows, seeds, values",
        "",
        "Each row takes the first n of the seeds "
        f"{study.seeds[0]}-{study.seeds[-1]}, so every pair of rows shares its seeds (v1 used 0-4, and "
        "100-101 for tuning). n is the largest planned count of the parts that read the row, or "
        f"{preregistration.MIN_PLANNED} for a row no part reads:",
        "",
        "| row | seeds | value |",
        "|---|---|---|",
    ]
    for row, n in plan["row_seeds"].items():
        lines.append(f"| {row} | {n} | {_value(study.fixed.get(row))} |")
    lines += [
        "",
        f"{sum(plan['row_seeds'].values())} runs in all.",
        "",
        "The fixed values are v1's tuned values (validation split; `results/comparison/tuning.json`), reused. "
        "Nothing is tuned again. v1's best_global is grpo_length in the tight regime and gdpo in the loose one.",
        "",
        "### Evaluation",
        "",
        f"- {ev['n_samples']} samples per test problem (200 problems), temperature 1.0, cap 256; the same frozen "
        "world (chain-v3) and the base model that ships with the package.",
        f"- Pass@k subset: {ev['passk_samples']} samples per problem; pass@8 and pass@32 (unbiased).",
        *_subset_lines(plan["subset"]),
        "",
        "### How it runs",
        "",
        "`dynashape compare --plan v2 --jobs 2 --out results/comparison-v2` (the study engine on a local Ray). It "
        "resumes when rerun. Finished runs are committed as they land; this section was committed before the first.",
        CLAIMS_END,
    ]
    return "\n".join(lines) + "\n"


def _parts_lines(study: ComparisonPlan) -> list[str]:
    """One table row per part with its margin, then the claims."""
    lines: list[str] = []
    for p in study.parts:
        c = p.comparison
        lines.append(
            f"| {p.id} | {c.regime} | {c.treatment} - {c.control} | {METRICS[c.metric]} | `{c.relation} {c.bound:g}` "
            f"| {p.margin:g} | {p.why} |"
        )
    lines += ["", "Claims:", ""]
    lines += [f"- **({c.id})** {c.text}." for c in study.claims]
    return lines


def _power_lines(study: ComparisonPlan, power: Mapping[str, Mapping[str, Any]]) -> list[str]:
    """The power analysis: how the seeds were planned, the table, and what the cap cannot decide."""
    lines: list[str] = []
    lines += [
        "",
        "### Power analysis (from the first comparison's 5 paired seeds)",
        "",
        f"Per part: the paired sd of v1's seeds 0-4; no credit taken for the quieter evaluation. The seeds for "
        f"{round(100 * preregistration.TARGET_POWER)} % power at an effect equal to the margin are computed at "
        f"Bonferroni's level {study.alpha} / {len(study.parts)} = {preregistration.planning_alpha(study):g}. That is "
        "Holm's strictest step, so the power under Holm is at least this. The count is clipped to "
        f"[{preregistration.MIN_PLANNED}, {preregistration.MAX_PLANNED}]. Noncentral t: `study.decide.power`.",
        "",
        "| part | v1 estimate | v1 paired sd | margin | seeds for 80 % | planned | power at planned (alpha/10) "
        "| (alpha 0.05) | decidable at the cap |",
        "|---|---|---|---|---|---|---|---|---|",
    ]
    for pid, t in power.items():
        lines.append(
            f"| {pid} | {_g(t['v1_estimate'])} | {_g(t['v1_sd'])} | {t['margin']:g} | "
            f"{t['needed'] if t['needed'] is not None else '> 1000'} | {t['planned']} | {_g(t['power_planned'], 2)} | "
            f"{_g(t['power_planned_at_alpha'], 2)} | {'yes' if t['decidable'] else '**no**'} |"
        )
    undecidable = [pid for pid, t in power.items() if not t["decidable"]]
    if undecidable:
        lines += [
            "",
            f"Said before the runs: with at most {preregistration.MAX_PLANNED} seeds, parts {', '.join(undecidable)} "
            f"cannot reach 80 % power at their margins if v1's sd holds. They are run at the cap and reported as "
            "they come out. An inconclusive verdict there is what the plan expects.",
        ]
    return lines
