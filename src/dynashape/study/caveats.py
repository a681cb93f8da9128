"""What the field page's points can and cannot say, computed from the runs' files (results-field.json's
``caveats``): the multiplicity-adjusted p of the page's accuracy and length differences against the study's
control, the generation each method spent per step, the methods that sample dynamically beside the controls'
sampling control, the training of a method whose length term waits on held-out accuracy beside the control's, a
controller at the horizon, the instrument of the methods that read budget prompts, and which rows ran a method's
earlier form.

Which rows each caveat reads comes from declarations, never from a method's name: the study's roles
(``roles.StudyRoles``: the control, the sampling control, the horizon's trajectory), each run's config.yaml
(``dynamic_sampling``, its shaper) and that shaper's needs (``budgets``, ``validation_accuracy``).

Every figure is a function of the runs (config.yaml, metrics.jsonl, eval.json, history.jsonl) and of the page's own
numbers; nothing is typed in by hand. Descriptive: the Holm step-down is reported to show how much of the page
survives its own multiplicity, not to rank the methods.
"""

from __future__ import annotations

import math
from collections.abc import Mapping, Sequence
from pathlib import Path
from typing import Any

from dynashape.io import state
from dynashape.shapers import available_shapers, shaper_needs
from dynashape.study.controls_runs import Rows, RunRef, _paired_keys, history, read_jsonl, run_ref
from dynashape.study.decide import assess_part, holm
from dynashape.study.roles import StudyRoles
from dynashape.study.stats import paired_values, t_interval
from dynashape.train.field_presets import EARLIER_FORMS  # the earlier forms the committed rows trained

__all__ = ["HOLM_FAMILY", "add_holm", "caveats", "reads"]

HOLM_FAMILY: tuple[str, ...] = ("accuracy", "mean_length")
"""The page's family for Holm's step-down: every field method's accuracy and mean-length difference against the
control, in every regime (11 methods x 2 regimes x 2 measures = 44 intervals on the field page)."""
ROLLOUT_KEYS: tuple[str, ...] = ("accuracy", "length", "truncated_frac")
"""The metrics.jsonl keys (and their per-difficulty forms) that describe a step's training rollouts."""


def reads(ref: RunRef, need: str) -> bool:
    """Whether the shaper a run trained (its config.yaml's ``train.shaper``) declares ``need`` (``ShaperNeeds``:
    ``budgets``, ``validation_accuracy``, ...); False for a shaper no longer registered."""
    shaper = (ref["config"].get("train") or {}).get("shaper")
    return shaper in available_shapers() and bool(getattr(shaper_needs(shaper), need))


def _samples_dynamically(ref: RunRef) -> bool:
    return bool((ref["config"].get("train") or {}).get("dynamic_sampling"))


def add_holm(differences: list[dict[str, Any]], control: str) -> int:
    """Add ``p`` (two-sided paired t-test of a zero mean, ``decide.assess_part``) and ``p_holm`` (Holm's step-down
    over the family ``HOLM_FAMILY`` against the row ``control``) to each difference of the family, in place; returns
    its size."""
    family = [d for d in differences if d["versus"] == control and d["metric"] in HOLM_FAMILY]
    if not family:
        return 0
    p = [assess_part(d["differences"], 0.0, min_seeds=2).p_value for d in family]  # any n a t-interval has
    adjusted, _ = holm(p)
    for d, raw, adj in zip(family, p, adjusted):
        d["p"], d["p_holm"] = raw, float(adj)
    return len(family)


def _first_steps(ref: RunRef) -> list[dict[str, Any]]:
    return read_jsonl(ref["dir"] / "metrics.jsonl")


def _generation(ref: RunRef) -> dict[str, Any] | None:
    """Rollouts sampled per step (prompts x group size x sampling rounds, the rounds' mean over its steps)."""
    lines = _first_steps(ref)
    train = ref["config"].get("train") or {}
    if not lines or "group_size" not in train or "prompts_per_step" not in train:
        return None
    rounds = [float(x.get("sampling_rounds", 1.0)) for x in lines]
    mean_rounds = sum(rounds) / len(rounds)
    return {"rounds": mean_rounds, "group_size": int(train["group_size"]),
            "rollouts": mean_rounds * int(train["group_size"]) * int(train["prompts_per_step"]),
            "tokens_recorded": any("token" in k for x in lines for k in x)}  # fmt: skip


def _summary(values: Sequence[float]) -> dict[str, Any]:
    ti = t_interval(list(values))
    return {"mean": ti.estimate, "min": min(values), "max": max(values), "n": ti.n,
            "interval": [ti.low, ti.high] if math.isfinite(ti.low) else None}  # fmt: skip


def _tight_first(item: tuple[tuple[str, str], Any]) -> tuple[bool, str, str]:
    (regime, method), _ = item
    return regime != "tight", regime, method


def _compute(field: Rows, controls: Rows, control: str) -> dict[str, Any]:
    """Per regime and method, the generation per step against the row ``control``'s at the same seed (a ratio per
    seed), for every method whose ratio is not 1; how many runs record the tokens they generated."""
    out: dict[str, Any] = {"methods": [], "runs": 0, "runs_with_tokens": 0}
    for (regime, method), by_seed in sorted({**field, **controls}.items(), key=_tight_first):
        grpo = controls.get((regime, control), {})
        ratios, rounds, group = [], [], set()
        for seed, ref in sorted(by_seed.items()):
            mine = _generation(ref)
            out["runs"] += 1
            if mine is None:
                continue
            out["runs_with_tokens"] += int(mine["tokens_recorded"])
            theirs = _generation(grpo[seed]) if seed in grpo else None
            rounds.append(mine["rounds"])
            group.add(mine["group_size"])
            if theirs:
                ratios.append(mine["rollouts"] / theirs["rollouts"])
        if ratios and any(abs(r - 1.0) > 1e-9 for r in ratios):
            out["methods"].append({"regime": regime, "method": method, "rounds": _summary(rounds),
                                   "group_size": sorted(group), "ratio": _summary(ratios)})  # fmt: skip
    return out


def _sampling_control(field: Rows, controls_dir: Path, row: str | None) -> list[dict[str, Any]]:
    """Each method whose runs sample dynamically (config.yaml's ``dynamic_sampling``) minus the controls' row
    ``row`` (the same dynamic sampling, no length term; None: no such caveat) at each seed where both ran and are
    paired (evaluation, training seed, budget, base): accuracy and length, with the row's own rounds, under the
    row's name. One such method per regime: the entries name their regime, not their method (the committed JSON's
    schema)."""
    out: list[dict[str, Any]] = []
    if row is None:
        return out
    samplers = [(r, m) for (r, m), by_seed in sorted(field.items()) if any(map(_samples_dynamically, by_seed.values()))]
    regimes = [r for r, _ in samplers]
    if len(set(regimes)) != len(regimes):
        raise ValueError(f"the sampling control's caveat reads one dynamic sampler per regime, got {samplers}")
    for regime, method in samplers:
        by_seed = field[(regime, method)]
        dapo: dict[int, RunRef] = {}
        for seed, ref in by_seed.items():
            path = controls_dir / f"runs/{regime}/{row}-seed{seed}"
            if not (path / "eval.json").exists():
                continue
            other = run_ref(path, state.read_json(path / "eval.json"))
            same_eval = (other["config"].get("eval") or {}) == (ref["config"].get("eval") or {})
            if same_eval and _paired_keys(other) == _paired_keys(ref):
                dapo[seed] = other
        if not dapo:
            continue
        entry: dict[str, Any] = {"regime": regime, "seeds": sorted(dapo), "folder": str(controls_dir)}
        train = dapo[min(dapo)]["config"].get("train") or {}
        entry[row] = {"dynamic_sampling": train.get("dynamic_sampling"),
                         "reward_columns": list(train.get("reward_columns") or []),
                         "rounds": _summary([g["rounds"] for g in map(_generation, dapo.values()) if g])}  # fmt: skip
        for metric, key in (("accuracy", "accuracy"), ("mean_length", "mean_length")):
            diffs = paired_values({s: by_seed[s]["eval"]["final"][key] for s in dapo},
                                  {s: r["eval"]["final"][key] for s, r in dapo.items()})  # fmt: skip
            ti = t_interval(list(diffs.values()))
            entry[metric] = {"estimate": ti.estimate, "n": ti.n, "differences": list(diffs.values()),
                             "interval": [ti.low, ti.high] if math.isfinite(ti.low) else None}  # fmt: skip
        out.append(entry)
    return out


def _same_rollouts(a: Sequence[Mapping[str, Any]], b: Sequence[Mapping[str, Any]]) -> int | None:
    """The first step whose training-rollout statistics differ between two metrics.jsonl, None when every step's
    are equal value for value (and both logged the same steps)."""
    if len(a) != len(b):
        return min(len(a), len(b)) + 1
    for x, y in zip(a, b):
        keys = {k for k in (*x, *y) if k.startswith(ROLLOUT_KEYS)}
        if any(x.get(k) != y.get(k) for k in keys):
            return int(x.get("step", 0))
    return None


def _gated(field: Rows, controls: Rows, control: str) -> dict[str, list[dict[str, Any]]]:
    """Per method whose length term waits on held-out accuracy (its shaper reads ``validation_accuracy``, AALC) and
    regime: its runs whose training rollouts equal the row ``control``'s at the same seed at every step (where the
    gate never opened, the method trained as the control), under the method's name."""
    out: dict[str, list[dict[str, Any]]] = {}
    for (regime, method), by_seed in sorted(field.items(), key=_tight_first):
        if not any(reads(ref, "validation_accuracy") for ref in by_seed.values()):
            continue
        grpo = controls.get((regime, control), {})
        runs = {seed: _same_rollouts(_first_steps(ref), _first_steps(grpo[seed]))
                for seed, ref in sorted(by_seed.items()) if seed in grpo}  # fmt: skip
        steps = max((len(_first_steps(ref)) for ref in by_seed.values()), default=0)
        c = ((by_seed[min(by_seed)]["config"].get("train") or {}).get("shaper_kwargs") or {}).get("c")
        out.setdefault(method, []).append({
            "regime": regime, "c": c, "steps": steps, "equal": [s for s, f in runs.items() if f is None],
            "first_difference": {s: f for s, f in runs.items() if f is not None}})  # fmt: skip
    return out


def _horizon(trajectories: Sequence[Mapping[str, Any]], metric: str, tail: int = 5) -> list[dict[str, Any]]:
    """Per regime, the trajectory ``metric`` (mean over seeds; the study's ``roles.horizon``, A-DLP's lambda on the
    field page): the steps at which every seed's is 0, its last value and its change over the last ``tail``
    steps."""
    out = []
    for t in trajectories:
        if t["metric"] != metric:
            continue
        zero = [s for s, m in zip(t["steps"], t["mean"]) if m <= 0.0]
        out.append({"regime": t["regime"], "zero_steps": zero, "first": t["mean"][0], "last": t["mean"][-1],
                    "last_step": t["steps"][-1], "last_interval": t["interval"][-1], "tail": tail,
                    "tail_change": t["mean"][-1] - t["mean"][-1 - tail] if len(t["mean"]) > tail else None,
                    })  # fmt: skip
    return out


def _step_accuracy(ref: RunRef) -> float | None:
    lines = _first_steps(ref)
    return float(lines[0]["accuracy"]) if lines and "accuracy" in lines[0] else None


def _budget_readers(field: Rows, controls: Rows, results: Mapping[str, Any], control: str) -> list[dict[str, Any]]:
    """Per regime and method that reads budget prompts (its shaper's ``budgets``: L1's forms): its first training
    batch's accuracy (budget prompts) against the row ``control``'s first batch at the same seeds; its main row's
    accuracy (plain prompts) against the base's; the range of its mean lengths over the fixed budgets (means over
    seeds) and the largest spread across budgets of any one run."""
    out = []
    base = results["base"]
    for (regime, method), by_seed in sorted(field.items(), key=_tight_first):
        if not any(reads(ref, "budgets") for ref in by_seed.values()):
            continue
        grpo = controls.get((regime, control), {})
        first = [a for a in map(_step_accuracy, by_seed.values()) if a is not None]
        grpo_first = [a for s in by_seed if s in grpo for a in [_step_accuracy(grpo[s])] if a is not None]
        spreads = []
        for ref in by_seed.values():
            per = [float(v["mean_length"]) for v in (ref["eval"].get("at_budget") or {}).values()]
            if per:
                spreads.append(max(per) - min(per))
        at = [r for r in results["at_budget"] if (r["regime"], r["method"]) == (regime, method) and "mean_length" in r]
        lengths = [r["mean_length"]["mean"] for r in at]
        row = next((r for r in results["summary"] if (r["regime"], r["method"]) == (regime, method)), {})
        out.append({
            "regime": regime, "method": method,
            "first_batch_accuracy": _summary(first) if first else None,
            "grpo_first_batch_accuracy": _summary(grpo_first) if grpo_first else None,
            "accuracy": (row.get("accuracy") or {}).get("mean"),
            "base_accuracy": (base.get(regime, {}).get("accuracy") or {}).get("mean"),
            "budgets": sorted(r["budget"] for r in at), "length_spread_max": max(spreads) if spreads else None,
            "lengths": [min(lengths), max(lengths)] if lengths else None,
        })  # fmt: skip
    return out


def _forms(field: Rows) -> list[dict[str, Any]]:
    """Per method of ``EARLIER_FORMS``: the runs whose config.yaml ran the earlier form (its pinned value, or no
    such key: the runs' code predates the option) and the commits they were trained at."""
    out = []
    for method, (pinned, form, now) in EARLIER_FORMS.items():
        runs, earlier, regimes, commits = 0, 0, set(), set()
        for (regime, m), by_seed in sorted(field.items()):
            if m != method:
                continue
            for ref in by_seed.values():
                runs += 1
                commits |= set(history(ref)["commits"])
                kwargs = (ref["config"].get("train") or {}).get("shaper_kwargs") or {}
                if all(kwargs.get(k, v) == v for k, v in pinned.items()):
                    earlier += 1
                    regimes.add(regime)
        if runs:
            given = [set((r["config"].get("train") or {}).get("shaper_kwargs") or {})
                     for (_, m), by in field.items() if m == method for r in by.values()]  # fmt: skip
            absent = sorted({k for k in pinned for keys in given if k not in keys})
            out.append({"method": method, "runs": runs, "earlier": earlier, "regimes": sorted(regimes, reverse=True),
                        "form": form, "now": now, "keys": dict(pinned), "absent_keys": absent,
                        "commits": sorted(commits)})  # fmt: skip
    return out


def _covering(results: Mapping[str, Any], control: str) -> list[dict[str, Any]]:
    """The methods shorter than the row ``control`` (length interval below 0) whose accuracy interval covers 0,
    per regime, with the interval's lower end: how much accuracy an interval that covers 0 still allows."""
    grpo = {(d["regime"], d["method"], d["metric"]): d for d in results["differences"] if d["versus"] == control}
    out = []
    for (regime, method, metric), d in sorted(grpo.items()):
        length = grpo.get((regime, method, "mean_length"))
        if metric != "accuracy" or not d.get("interval") or not (length and length.get("interval")):
            continue
        if d["interval"][0] < 0 < d["interval"][1] and length["interval"][1] < 0:
            out.append({"regime": regime, "method": method, "low": d["interval"][0], "high": d["interval"][1],
                        "length": length["estimate"]})  # fmt: skip
    return out


def caveats(
    field: Rows, controls: Rows, controls_dir: Path, results: Mapping[str, Any], roles: StudyRoles
) -> dict[str, Any]:
    """results-field.json's ``caveats`` (see the module docstring); ``results`` holds the page's numbers
    (differences with their Holm p already added, trajectories, summary, base, runs); ``roles``: the study's. A
    method gated on held-out accuracy has its entry under its name, the horizon's trajectory under its shaper's."""
    family = [d for d in results["differences"] if "p_holm" in d]
    horizon = {}
    if roles.horizon is not None:
        horizon[roles.horizon.split("/", 1)[0]] = _horizon(results["trajectories"], roles.horizon)
    return {
        "holm": {
            "family": len(family),
            "measures": list(HOLM_FAMILY),
            "versus": roles.control,
            "below_0.05": sorted(
                ((d["regime"], d["method"], d["metric"]) for d in family if d["p_holm"] < 0.05),
                key=lambda k: (k[0] != "tight", k[1], k[2]),
            ),
        },
        "covering": _covering(results, roles.control),
        "compute": _compute(field, controls, roles.control),
        "sampling_control": _sampling_control(field, controls_dir, roles.sampling_control),
        **_gated(field, controls, roles.control),
        **horizon,
        "l1": _budget_readers(field, controls, results, roles.control),
        "forms": _forms(field),
        "restarted": [
            {"run_dir": r["run_dir"], "restarts": r["restarts"], "commits": r["commits"]}
            for r in results["runs"]
            if r.get("restarts")
        ],
    }
