"""Claims decided with margins and Holm's step-down (a study file's ``decide = "holm"``), their power analysis
from an earlier study's paired seeds, and the pass@k subset fixed by a stated rule on the shipped base model: the
follow-up comparison's protocol (studies/v2.toml), written before its first run.

Each claim part carries a margin (``decide.part_bound``): superiority parts keep bound 0 and name the smallest
effect of interest; every non-inferiority part (``>=`` / ``<=``) gets a margin. Decisions (``decide``): a two-sided
t-test per part against its bound, Holm's step-down over all the plan's parts at family-wise ``alpha``, the ceiling
rule, at least ``MIN_SEEDS`` paired seeds. Planning: per part, the seeds that give 80 % power at an effect equal to
the margin, with the earlier study's paired sd of that part (no credit taken for a quieter evaluation), at
Bonferroni's level ``alpha / len(parts)`` (Holm's strictest step, so the power under Holm is at least that),
clipped to [``MIN_PLANNED``, ``MAX_PLANNED``]; a part that the cap cannot power is said so before the runs
(``power_table``). A row's seed count is the largest of its parts' (rows no part reads get ``MIN_PLANNED``); every
row takes the first of the study's seeds, so rows stay paired.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from typing import Any

import numpy as np

from dynashape.study.claims import Comparison, Part, metric_value
from dynashape.study.decide import assess_part, holm, power, seeds_for_power
from dynashape.study.plan_file import ComparisonPlan
from dynashape.study.stats import paired_values, t_interval

__all__ = [
    "MAX_PLANNED",
    "MIN_PLANNED",
    "SELECTION_SEED",
    "SUBSET_RULE",
    "base_pass_at_8",
    "choose_passk_subset",
    "decide_claims",
    "frozen_data",
    "planning_alpha",
    "power_table",
    "row_seeds",
]

MIN_PLANNED, MAX_PLANNED = 8, 20
TARGET_POWER = 0.8


def planning_alpha(plan: ComparisonPlan) -> float:
    """The level the seeds are planned at: Bonferroni's ``alpha / len(parts)``, Holm's strictest step."""
    return plan.alpha / len(plan.parts)


RunMap = Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]]


def _differences(comparison: Comparison, runs: RunMap, metric: str | None = None) -> dict[int, float]:
    """seed -> treatment - control of ``metric`` (default: the comparison's) over the seeds both rows have."""
    c, metric = comparison, metric or comparison.metric
    a = {s: metric_value(ev, metric) for s, ev in runs.get((c.regime, c.treatment), {}).items()}
    b = {s: metric_value(ev, metric) for s, ev in runs.get((c.regime, c.control), {}).items()}
    return paired_values(a, b)


# ------------------------------------------------------------------------------------------- decisions
def decide_claims(runs: RunMap, plan: ComparisonPlan) -> list[dict[str, Any]]:
    """Every claim's verdict from its parts' t-tests with Holm's step-down over all the plan's parts at its
    ``alpha`` (``decide``).

    Args:
        runs: (regime, method) -> {seed: eval.json} of the study's test-split runs.
        plan: a study with ``decide = "holm"`` (its ``claims`` and ``parts``).

    Returns: one dict per claim (``id``, ``text``, ``verdict``, ``parts``); each part has its ``estimate``, 95 %
    t-interval (unadjusted, for reading), ``p_value``, Holm's ``p_adjusted``, ``verdict``, ``n``, ``seeds``,
    ``sd``, its margin and bound, and ``power``: what its seeds gave at the margin with its own sd, at
    ``planning_alpha`` (``reason`` when it could not be tested).
    """
    tests, rows = [], []
    for part in plan.parts:
        diffs = _differences(part.comparison, runs)
        res = assess_part(list(diffs.values()), part.comparison.bound)
        tests.append(res)
        interval = t_interval(list(diffs.values())) if res.n >= 2 else None
        rows.append(
            {
                "part": part.id,
                **{k: getattr(part.comparison, k) for k in ("regime", "treatment", "control", "metric", "relation")},
                "bound": part.comparison.bound,
                "margin": part.margin,
                "estimate": None if res.n == 0 else res.estimate,
                "interval": None if interval is None else [interval.low, interval.high],
                "n": res.n,
                "seeds": sorted(diffs),
                "differences": [diffs[s] for s in sorted(diffs)],
                "sd": None if res.n < 2 else res.sd,
                "p_value": res.p_value,
                "power": power(res.n, res.sd, part.margin, planning_alpha(plan)) if res.n >= 2 and res.sd > 0 else None,
                **({"reason": res.reason} if res.reason else {}),
            }
        )
    adjusted, rejected = holm([t.p_value for t in tests], plan.alpha)
    for row, t, p_adj, rej in zip(rows, tests, adjusted, rejected):
        on_side = t.estimate > row["bound"] if row["relation"] in (">", ">=") else t.estimate < row["bound"]
        row["p_adjusted"] = float(p_adj)
        row["verdict"] = ("holds" if on_side else "fails") if rej else "inconclusive"
    out = []
    for claim in plan.claims:
        mine = [r for r, p in zip(rows, plan.parts) if p.comparison in claim.parts]
        verdicts = [r["verdict"] for r in mine]
        overall = "fails" if "fails" in verdicts else "holds" if verdicts and all(v == "holds" for v in verdicts) else (
            "inconclusive"
        )  # fmt: skip
        out.append({"id": claim.id, "text": claim.text, "verdict": overall, "parts": mine})
    return out


# ------------------------------------------------------------------------------------------------ power
def _v1_differences(part: Part, runs: RunMap) -> dict[int, float]:
    return _differences(part.comparison, runs, part.v1_metric)


def power_table(runs: RunMap, plan: ComparisonPlan) -> list[dict[str, Any]]:
    """Per part: v1's paired sd, the seeds for 80 % power at the margin (``planning_alpha``), the seeds planned
    (clipped to [MIN_PLANNED, MAX_PLANNED]) and the power they give at that level and at ``ALPHA``.

    Args:
        runs: v1's (regime, method) -> {seed: eval.json} of its test-split runs (``results.load_runs``).
    """
    level = planning_alpha(plan)
    out = []
    for part in plan.parts:
        diffs = list(_v1_differences(part, runs).values())
        sd = float(np.std(diffs, ddof=1)) if len(diffs) > 1 else math.nan
        needed = seeds_for_power(sd, part.margin, level, target=TARGET_POWER) if sd > 0 else None
        planned = MAX_PLANNED if needed is None else min(MAX_PLANNED, max(MIN_PLANNED, needed))
        out.append(
            {
                "part": part.id,
                "v1_seeds": len(diffs),
                "v1_estimate": sum(diffs) / len(diffs) if diffs else None,
                "v1_sd": sd,
                "margin": part.margin,
                "needed": needed,
                "planned": planned,
                "power_planned": power(planned, sd, part.margin, level) if sd > 0 else None,
                "power_planned_at_alpha": power(planned, sd, part.margin, plan.alpha) if sd > 0 else None,
                "decidable": needed is not None and needed <= MAX_PLANNED,
            }
        )
    return out


def row_seeds(table: Sequence[Mapping[str, Any]], plan: ComparisonPlan) -> dict[str, int]:
    """Seeds of each row ("regime/method"): the largest planned count of the parts that read it, else
    ``MIN_PLANNED``."""
    planned = {t["part"]: int(t["planned"]) for t in table}
    out = {f"{regime}/{m}": MIN_PLANNED for regime, methods in plan.rows.items() for m in methods}
    for part in plan.parts:
        c = part.comparison
        for method in (c.treatment, c.control):
            key = f"{c.regime}/{method}"
            if key not in out:
                raise ValueError(f"part {part.id} reads {key}, which is not a row of the follow-up")
            out[key] = max(out[key], planned[part.id])
    return out


# --------------------------------------------------------------------------------------- the pass@k subset
SUBSET_RULE = (
    "candidates: the test split's trap prompts and its problems of the two hardest difficulties; the shipped base "
    "model's pass@8 on each, from {samples} samples at the evaluation's temperature and cap with the selection seed "
    "{seed} (no evaluation seed); kept: every candidate with pass@8 <= {max_pass}, in the split's order; when fewer "
    "than {at_least}, filled with the candidates of lowest pass@8 above it (ties: the split's order)"
)


def choose_passk_subset(
    keys: Sequence[str], pass8: Sequence[float], *, max_pass: float = 0.8, at_least: int = 40
) -> list[str]:
    """The subset ``SUBSET_RULE`` keeps from candidates ``keys`` (in the split's order) with their base pass@8."""
    if len(keys) != len(pass8):
        raise ValueError(f"keys and pass8 must be of one length, got {len(keys)} and {len(pass8)}")
    if len(set(keys)) != len(keys):
        raise ValueError("keys must be distinct")
    if at_least > len(keys):
        raise ValueError(f"at_least={at_least} exceeds the {len(keys)} candidates")
    kept = [i for i, p in enumerate(pass8) if p <= max_pass]
    rest = sorted((i for i, p in enumerate(pass8) if p > max_pass), key=lambda i: (pass8[i], i))
    kept += rest[: max(0, at_least - len(kept))]
    return [keys[i] for i in sorted(kept)]


SELECTION_SEED = 777
"""The selection's sampling seed: no run's evaluation seed (``1234 + 1000 s`` and ``+ 1``) equals it."""
SELECTION_SAMPLES = 64


def base_pass_at_8(*, samples: int = SELECTION_SAMPLES, seed: int = SELECTION_SEED) -> dict[str, Any]:
    """The candidates of ``SUBSET_RULE`` (test split, in its order) and the shipped base model's unbiased pass@8
    on each, sampled at the default evaluation's temperature, top-p and cap."""
    from dynashape.core.metrics import pass_at_k
    from dynashape.rewards import MathVerifier
    from dynashape.train.base_model import load_base
    from dynashape.train.config import RunConfig

    cfg = RunConfig()
    base = load_base(cfg)
    if base.meta.get("source") != "shipped":
        raise RuntimeError(f"the subset is chosen on the shipped base model, got {base.meta}")
    hardest = sorted({p.difficulty for p in base.held_out})[-2:]
    candidates = [p for p in base.held_out if p.is_trap or p.difficulty in hardest]
    with MathVerifier(timeout=5.0, workers=1) as verifier:  # the trainer's own verifier settings
        s = _sample(base, candidates, verifier, cfg, samples, seed)
    counts = s.correct.reshape(len(candidates), samples).sum(1)
    return {
        "keys": [p.key for p in candidates],
        "pass8": [float(pass_at_k(samples, int(c), 8)) for c in counts],
        "difficulty": [int(p.difficulty) for p in candidates],
        "is_trap": [bool(p.is_trap) for p in candidates],
        "samples": samples,
        "seed": seed,
        "base_sha256": base.meta.get("sha256"),
    }


def _sample(base: Any, problems: Sequence[Any], verifier: Any, cfg: Any, samples: int, seed: int) -> Any:
    from dynashape.train.base_model import prompt_format
    from dynashape.train.evaluation import sample_responses

    return sample_responses(
        base.model,
        base.tokenizer,
        problems,
        verifier,
        n=samples,
        max_new_tokens=cfg.eval.max_new_tokens,
        temperature=cfg.eval.temperature,
        top_p=cfg.eval.top_p,
        seed=seed,
        batch_size=cfg.eval.batch_size,
        prompt_format=prompt_format(cfg, base.tokenizer, base.world),
    )


def frozen_data(study: ComparisonPlan) -> dict[str, Any]:
    """A study's data frozen before its runs (its file's ``frozen``, a JSON file beside the committed studies:
    ``studies/v2-frozen.json``, made once by ``scripts/followup_plan.py``): ``subset`` (the pass@k subset's
    ``keys`` and every candidate's base pass@8, the rule, the seed, the base model's sha256), ``power``
    (``power_table`` of the earlier study's runs) and ``row_seeds``; empty for a study without one."""
    from dynashape.study.plan_file import studies_dir

    if not study.frozen:
        return {}
    return json.loads((studies_dir() / study.frozen).read_text())
