"""The field page's section "What these points can and cannot say": what holds up first (the differences that
survive Holm's step-down over the page's accuracy and length intervals against the study's control), then each
limit of the comparison, every figure from results-field.json's ``caveats`` (``caveats.caveats``), the wording
fixed. Which rows a caveat names comes from the study's roles (``roles.StudyRoles``) and the methods' own
declarations; a row is named as ``StudyRoles.label`` says (its method's display name)."""

from __future__ import annotations

from collections.abc import Mapping
from typing import Any

from dynashape.shapers import available_shapers, shaper_needs
from dynashape.study.roles import StudyRoles

__all__ = ["caveat_lines"]

MEASURE_WORDS = {"accuracy": "accuracy", "mean_length": "length"}


def _iv(entry: Mapping[str, Any] | None, digits: int, sign: bool = True) -> str:
    """``estimate [low, high]`` (or ``mean [low, high]``) with ``digits`` decimals."""
    if not entry:
        return "n/a"
    f = f"{{:{'+' if sign else ''}.{digits}f}}"
    x = entry.get("estimate", entry.get("mean"))
    text = f.format(x)
    if entry.get("interval"):
        text += f" [{f.format(entry['interval'][0])}, {f.format(entry['interval'][1])}]"
    return text


def _p(x: float) -> str:
    return "< 0.001" if x < 0.001 else f"{x:.3f}" if x < 0.1 else f"{x:.2f}"


def _samplers(results: Mapping[str, Any], regime: str | None = None) -> list[str]:
    """The methods that drew more than one sampling round per step (dynamic sampling; ``compute``), in
    ``regime`` (None: any)."""
    found = results["caveats"]["compute"]["methods"]
    return sorted({m["method"] for m in found if m["rounds"]["max"] > 1.0 and regime in (None, m["regime"])})


def _holm_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    c = results["caveats"]["holm"]
    if not c["family"]:
        return []
    label, versus = roles.label, roles.label(roles.control)
    grpo = {(d["regime"], d["method"], d["metric"]): d for d in results["differences"] if "p_holm" in d}
    held = [f"{label(m)} {MEASURE_WORDS[x]} ({r}, {_iv(grpo[(r, m, x)], 3 if x == 'accuracy' else 1)}, "
            f"Holm p {_p(grpo[(r, m, x)]['p_holm'])})" for r, m, x in c["below_0.05"]]  # fmt: skip
    gains = "".join(
        f", {label(m)}'s accuracy gain included (Holm p "
        + (", ".join(f"{r} {_p(grpo[(r, m, 'accuracy')]['p_holm'])}" for r in _regimes(results)
                     if (r, m, "accuracy") in grpo) or "n/a")
        + ")"
        for m in _samplers(results)
    )  # fmt: skip
    return [
        f"- **What holds up.** Every row and paired difference below recomputes from the runs' eval.json (the JSON "
        f"keeps each per-seed value). Of the page's {c['family']} accuracy and length differences against {versus} "
        f"(every field method, both regimes), {len(held)} have a Holm-adjusted p below 0.05 (two-sided paired "
        "t-test of a zero mean, Holm's step-down over the "
        f"{c['family']}; the tables against {versus} print each): {'; '.join(held) or 'none'}. Every other "
        f"difference{gains}{',' if gains else ''} does not survive the page's own multiplicity.",
    ]


def _regimes(results: Mapping[str, Any]) -> list[str]:
    return sorted({r["regime"] for r in results["summary"]}, reverse=True)  # tight before loose


def _points_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    rows = {(r["regime"], r["method"]): r for r in results["summary"]}
    example = ""
    if roles.example is not None:
        regime, names = roles.example
        pair = [rows.get((regime, m)) for m in names]
        if all(p and "accuracy" in p and "mean_length" in p for p in pair):
            example = (
                f" {roles.label(names[0])} at "
                + f" may lie on the same curve as {roles.label(names[1])} at ".join(
                    f"({p['mean_length']['mean']:.1f} tokens, accuracy {p['accuracy']['mean']:.3f})"
                    for p in pair  # type: ignore[index]
                )
                + f" ({regime}), each at another strength."
            )
    return [
        "- **Points, not frontiers.** Each method is one point, at the strength the plan's scaling rule gave it; a "
        "length method is a family indexed by its strength (ALP's beta, A-DLP's eta and target accuracy, LASER's "
        "target, SAW's second channel, DLER's cap, GFPO's k, L1's alpha, ThinkPrune's final cap), and one point mixes "
        f"the method with the strength.{example} Methods compare by their frontiers, accuracy at matched length; "
        "this page compares points, and a method shorter and less accurate than another may lie on the same frontier."
    ]


def _compute_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    c = results["caveats"]["compute"]
    versus = roles.label(roles.control)
    parts = []
    for m in c["methods"]:
        label = roles.label(m["method"])
        if m["rounds"]["max"] > 1.0:
            parts.append(f"{label} ({m['regime']}) drew {m['rounds']['mean']:.2f} sampling rounds per step "
                         f"({m['rounds']['min']:.2f}-{m['rounds']['max']:.2f} over seeds; dynamic sampling), "
                         f"{m['ratio']['mean']:.2f}x {versus}'s rollouts")  # fmt: skip
        else:
            parts.append(f"{label} ({m['regime']}) sampled {'/'.join(map(str, m['group_size']))} rollouts per prompt, "
                         f"{m['ratio']['mean']:.2f}x {versus}'s rollouts")  # fmt: skip
    lines = [
        f"- **Compute is not matched.** Generation per step against {versus}'s at the same seed (prompts x rollouts "
        "per prompt x sampling rounds, from config.yaml and metrics.jsonl's `sampling_rounds`): "
        + ("; ".join(parts) or f"every method as {versus}")
        + f". No run records the tokens it generated ({c['runs_with_tokens']} of the {c['runs']} runs' "
        "metrics.jsonl), so the tokens are not matched either."
    ]
    return lines + _sampling_lines(results, roles)


def _sampling_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    """Each dynamic sampler minus the controls' sampling control (``roles.sampling_control``), per regime."""
    row, versus = roles.sampling_control, roles.label(roles.control)
    grpo = {(d["regime"], d["method"], d["metric"]): d for d in results["differences"] if d["versus"] == roles.control}
    lines = []
    for s in results["caveats"]["sampling_control"]:
        dapo = s[row]
        columns = dapo["reward_columns"]
        also = f", with {roles.label(row)}'s reward column{'s' if len(columns) > 1 else ''} " + ", ".join(
            f"`{x}`" for x in columns) if columns else ""  # fmt: skip
        for m in _samplers(results, s["regime"]):
            name = roles.label(m)
            lines.append(
                f"  {name} minus the follow-up's `{row}` row ({s['folder']}: {versus} with the same dynamic sampling, "
                f"{dapo['rounds']['mean']:.2f} rounds per step{also}, and no length term), {s['regime']}, "
                f"{s['accuracy']['n']} paired seeds: accuracy {_iv(s['accuracy'], 3)}, length "
                f"{_iv(s['mean_length'], 1)}; against {versus}, {name}'s accuracy is "
                f"{_iv(grpo.get((s['regime'], m, 'accuracy')), 3)}. {name}'s gain over {versus} is most likely its "
                "sampling, not its length control."
            )
    return lines


def _l1_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    rows = results["caveats"]["l1"]
    if not rows:
        return []
    label = roles.label
    first = "; ".join(
        f"{label(r['method'])} {r['regime']} {r['first_batch_accuracy']['mean']:.3f} "
        f"({r['first_batch_accuracy']['min']:.3f}-{r['first_batch_accuracy']['max']:.3f})"
        for r in rows if r["first_batch_accuracy"]
    )  # fmt: skip
    grpo = {r["regime"]: r["grpo_first_batch_accuracy"] for r in rows if r["grpo_first_batch_accuracy"]}
    plain = "; ".join(
        f"{label(r['method'])} {r['regime']} {r['accuracy']:.3f}" for r in rows if r["accuracy"] is not None
    )
    base = next((r["base_accuracy"] for r in rows if r["base_accuracy"] is not None), None)
    flat = "; ".join(
        f"{label(r['method'])} {r['regime']} {r['lengths'][0]:.1f}-{r['lengths'][1]:.1f} tokens at budgets "
        f"{r['budgets'][0]}-{r['budgets'][-1]} (largest spread of one run {r['length_spread_max']:.1f})"
        for r in rows if r["lengths"]
    )  # fmt: skip
    return [
        '- **L1 never had a fair instrument.** The character-level base never read a budget prompt (" Think for N '
        f"tokens.\"): L1's first training batch, on budget prompts, is correct at {first} (mean, range over seeds), "
        f"against {label(roles.control)}'s first batch at the same seeds "
        + ", ".join(f"{g} {v['mean']:.3f}" for g, v in sorted(grpo.items(), reverse=True))
        + ". Its rows above are evaluated on prompts without a budget, which L1 never trained on, so they measure "
        f"damage to plain prompts: accuracy {plain}, against the untrained base's {base:.3f}. At the fixed budgets its "
        f"length is flat: {flat}; it follows no budget."
    ]


def _gated_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    """Per method gated on held-out accuracy (its shaper reads ``validation_accuracy``; ``caveats._gated``)."""
    gated = [m for m in sorted(available_shapers()) if shaper_needs(m).validation_accuracy]
    return [line for m in gated if results["caveats"].get(m) for line in _gated_method(results, roles, m)]


def _gated_method(results: Mapping[str, Any], roles: StudyRoles, method: str) -> list[str]:
    rows = results["caveats"][method]
    equal = sum(len(r["equal"]) for r in rows)
    total = equal + sum(len(r["first_difference"]) for r in rows)
    which = "; ".join(f"{r['regime']} seeds {', '.join(map(str, r['equal'])) or 'none'}" for r in rows)
    parted = sorted(int(s) for r in rows for s in r["first_difference"].values())
    steps = max(r["steps"] for r in rows)
    versus = roles.label(roles.control)
    c = f"With c = {rows[0]['c']:g}, its" if rows[0].get("c") is not None else "Its"
    return [
        f"- **{roles.label(method)} is {versus} here.** {c} training rollouts (accuracy, lengths, truncation, "
        f"per difficulty, every step of metrics.jsonl) equal {versus}'s at the same seed value for value over all "
        f"{steps} steps in {equal} of {total} runs ({which})"
        + (f"; the others first part at step {parted[0]}-{parted[-1]}." if parted else ".")
    ]


def _horizon_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    if roles.horizon is None:
        return []
    method, weight = roles.horizon.split("/", 1)
    rows = results["caveats"].get(method)
    if not rows:
        return []
    parts = []
    for r in sorted(rows, key=lambda r: r["regime"] != "tight"):
        zero = r["zero_steps"]
        span = f"{len(zero)} of its steps {zero[0]}-{zero[-1]}" if zero else "no step"
        change = f", {r['tail_change']:+.3f} over its last {r['tail']} steps" if r["tail_change"] is not None else ""
        parts.append(f"{r['regime']}: 0 in every seed at {span}, and at step {r['last_step']} "
                     f"{_iv({'mean': r['last'], 'interval': r['last_interval']}, 3, sign=False)}{change}")  # fmt: skip
    return [
        f"- **The horizon cuts the controllers short.** {roles.label(method)}'s {weight} (mean over seeds) starts at "
        "lambda0 = eta, "
        "falls to 0 while accuracy is below its target, and is still rising when the 50 steps end: "
        + "; ".join(parts)
        + ". Its length penalty had little time to act; a longer run could land elsewhere."
    ]


def _covering_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    rows = results["caveats"]["covering"]
    if not rows:
        return []
    worst = min(rows, key=lambda r: r["low"])
    listed = "; ".join(f"{roles.label(r['method'])} {r['regime']} [{r['low']:+.3f}, {r['high']:+.3f}]"
                       for r in sorted(rows, key=lambda r: (r["regime"] != "tight", r["method"])))  # fmt: skip
    return [
        '- **An interval that covers 0 is not "no cost".** The methods shorter than '
        f"{roles.label(roles.control)} whose accuracy interval covers 0: {listed}. Their intervals allow a loss down "
        f"to {worst['low']:+.3f} ({roles.label(worst['method'])}, {worst['regime']})."
    ]


def _forms_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    rows = results["caveats"]["forms"]
    if not rows:
        return []
    parts = []
    for r in rows:
        keys = ", ".join(f"{k}={v!r}" for k, v in r["keys"].items())
        absent = (f"; config.yaml has no {', '.join(f'`{k}`' for k in r['absent_keys'])}, its code predating the "
                  "option") if r["absent_keys"] else ""  # fmt: skip
        commits = ", ".join(c[:7] for c in r["commits"])
        parts.append(f"{roles.label(r['method'])}: {r['earlier']} of {r['runs']} runs ({', '.join(r['regimes'])}, at "
                     f"{commits}) ran {r['form']}{f' (`{keys}`' if keys else ''}{absent}{')' if keys else ''}; "
                     f"the default now: {r['now']}")  # fmt: skip
    return [
        "- **Earlier forms.** Since these runs, the shapers' defaults follow the official code "
        "([field-methods.md](field-methods.md)); "
        "the field presets pin the forms these rows trained, so they replay (GFPO's excepted, which has no switch "
        "back). " + "; ".join(parts) + "."
    ]


def _restart_lines(results: Mapping[str, Any]) -> list[str]:
    rows = results["caveats"]["restarted"]
    if not rows:
        return []
    listed = ", ".join(f"{r['run_dir']} (again at {', '.join(r['restarts'])})" for r in rows)
    same = all(len(r["commits"]) == 1 for r in rows)
    return [
        f"- **Trained again from step 0: {len(rows)} runs.** Each history.jsonl holds a further invocation that began "
        f"at step 0{', at the same commit' if same else ''} after the first was cut off mid-run: {listed}. Their "
        "numbers "
        "are the last, complete training's; none resumed from a checkpoint."
    ]


def caveat_lines(results: Mapping[str, Any], roles: StudyRoles) -> list[str]:
    """The page's section "What these points can and cannot say": what holds up first, then each limit, every
    figure from ``results["caveats"]``; ``roles``: the study's (its control, sampling control, horizon, labels)."""
    if "caveats" not in results or not results["finished_runs"]:
        return []
    body = [
        *_holm_lines(results, roles), *_points_lines(results, roles), *_compute_lines(results, roles),
        *_l1_lines(results, roles), *_gated_lines(results, roles), *_horizon_lines(results, roles),
        *_covering_lines(results, roles), *_forms_lines(results, roles), *_restart_lines(results),
    ]  # fmt: skip
    return ["## What these points can and cannot say", "", *body, ""]
