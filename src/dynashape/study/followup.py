"""The follow-up comparison (v2), fixed before its first run: its claims with a margin per part, the power
analysis from the first comparison's paired seeds, its rows and seeds per row, v1's tuned values, and its
evaluation (16 samples per test problem, a pass@k subset fixed by a stated rule on the shipped base model).

The same questions as v1's claims (a)-(e) (``claims.CLAIMS``), each part restated with a margin
(``decide.part_bound``): superiority parts keep bound 0 and name the smallest effect of interest; every
non-inferiority part (``>=`` / ``<=``) gets a margin. v1's ``best_global`` is resolved once, from v1's tuning
(validation AES): grpo_length in the tight regime, gdpo in the loose one; they and lead_static train at v1's
tuned values, and nothing is tuned again.

Decisions (``decide``): a two-sided t-test per part against its bound, Holm's step-down over all ``PARTS`` at
family-wise ``ALPHA``, the ceiling rule, at least ``MIN_SEEDS`` paired seeds. Planning: per part, the seeds that
give 80 % power at an effect equal to the margin, with v1's paired sd of that part (no credit taken for the
quieter evaluation), at Bonferroni's level ``ALPHA / len(PARTS)`` (Holm's strictest step, so the power under Holm
is at least that), clipped to [``MIN_PLANNED``, ``MAX_PLANNED``]; a part that the cap cannot power is said so
before the runs (``power_table``). A row's seed count is the largest of its parts' (rows no part reads get
``MIN_PLANNED``); every row takes the first seeds of ``SEEDS``, so rows stay paired.
"""

from __future__ import annotations

import json
import math
from collections.abc import Mapping, Sequence
from dataclasses import dataclass
from importlib import resources
from typing import Any

import numpy as np

from dynashape.study.claims import Claim, Comparison, metric_value
from dynashape.study.decide import assess_part, holm, part_bound, power, seeds_for_power
from dynashape.study.stats import paired_values, t_interval

__all__ = [
    "ALPHA",
    "CLAIMS_V2",
    "FIXED_VALUES",
    "MAX_PLANNED",
    "MIN_PLANNED",
    "PARTS",
    "ROWS",
    "SEEDS",
    "SELECTION_SEED",
    "SUBSET_RULE",
    "Part",
    "base_pass_at_8",
    "choose_passk_subset",
    "decide_claims",
    "eval_overrides",
    "load_plan",
    "planning_alpha",
    "power_table",
    "row_seeds",
]

ALPHA = 0.05
MIN_PLANNED, MAX_PLANNED = 8, 20
TARGET_POWER = 0.8
SEEDS: tuple[int, ...] = tuple(range(5, 5 + MAX_PLANNED))
"""New seeds: v1's test seeds were 0-4 and its tuning seeds 100-101."""


@dataclass(frozen=True, kw_only=True)
class Part:
    """One comparison of a claim with its margin: ``treatment - control  relation  bound`` with the bound
    ``decide.part_bound(relation, margin)``."""

    id: str
    comparison: Comparison
    margin: float
    """Superiority: the smallest effect of interest; non-inferiority: the margin (in the metric's units)."""
    why: str
    """Where the margin comes from."""
    v1_metric: str | None = None
    """The metric of v1's runs that stands in for the part's own in the power analysis (None: the same)."""

    def __post_init__(self) -> None:
        want = part_bound(self.comparison.relation, self.margin)
        if self.comparison.bound != want:
            raise ValueError(f"part {self.id}: bound {self.comparison.bound} is not the margin's bound {want}")


def _part(
    id: str, regime: str, treatment: str, control: str, metric: str, relation: str, margin: float, why: str, **kw: Any
) -> Part:
    comparison = Comparison(
        regime=regime,
        treatment=treatment,
        control=control,
        metric=metric,
        relation=relation,
        bound=part_bound(relation, margin),
    )
    return Part(id=id, comparison=comparison, margin=margin, why=why, **kw)


AES_EFFECT = "0.10 AES: 10 % shorter at equal accuracy, or about 3 % more accuracy (AES weights accuracy 3:1)"
PARTS: tuple[Part, ...] = (
    _part("a1", "tight", "lead", "grpo_length", "aes", ">", 0.10, AES_EFFECT),
    _part("a2", "tight", "lead", "grpo", "accuracy", ">=", 0.01, "1 accuracy point (v1's (d) margin)"),
    _part(
        "b1", "loose", "lead", "grpo", "mean_length", "<", 2.0, "2 tokens, 3 % of the base's mean length (65.9 tokens)"
    ),
    _part("b2", "loose", "lead", "grpo", "accuracy@hardest", ">=", 0.02, "2 accuracy points (v1's bound)"),
    _part(
        "b3",
        "loose",
        "lead",
        "gdpo",
        "mean_length@easiest",
        "<=",
        1.0,
        "1 token, 4 % of the easiest problems' length (about 24 tokens)",
    ),
    _part("c1", "tight", "lead", "lead_static", "aes", ">=", 0.05, "0.05 AES (v1's bound)"),
    _part(
        "d1",
        "tight",
        "meds",
        "dapo",
        "trap_pass@32",
        ">",
        0.05,
        "5 points of pass@32",
        v1_metric="trap_pass@32",  # v1's 64 samples on its 6 trap prompts give the same metric on a smaller subset
    ),
    _part("d2", "tight", "meds", "dapo", "accuracy", ">=", 0.01, "1 accuracy point (v1's bound)"),
    _part(
        "d3",
        "tight",
        "meds",
        "dapo",
        "wrong_eigen_ratio",
        "<",
        0.05,
        "0.05 of the top-1 eigen ratio (a ratio in [0, 1])",
    ),
    _part(
        "e1", "tight", "meds", "meds_single_cluster", "accuracy", ">", 0.01, "1 accuracy point (the paper's ablation)"
    ),
)

_TEXTS = {
    "a": "tight regime: LEAD's AES is above the best tuned global-threshold baseline's (v1's best_global, "
    "grpo_length), and its accuracy is not below plain GRPO's at the same budget by more than the margin",
    "b": "loose regime: LEAD ends shorter than plain GRPO; on the hardest difficulty its accuracy is within 2 points "
    "of GRPO's; it cuts the easiest problems' length at least as much as the best global-threshold baseline (v1's "
    "best_global, gdpo), within the margin",
    "c": "tight regime: dynamic weighting (lead) is not worse than the best static ratio (lead_static at v1's tuned "
    "ratio) by more than 0.05 AES, without tuning",
    "d": "tight regime: MEDS raises pass@32 on the trap prompts of the pass@k subset over DAPO, with pass@1 not "
    "below DAPO's by more than 1 point, and lowers the top-1 eigen ratio of wrong-answer fingerprints",
    "e": "tight regime: HDBSCAN clustering beats a single cluster per bank (meds vs meds_single_cluster, pass@1)",
}
CLAIMS_V2: tuple[Claim, ...] = tuple(
    Claim(id=cid, text=text, parts=tuple(p.comparison for p in PARTS if p.id[0] == cid)) for cid, text in _TEXTS.items()
)

ROWS: Mapping[str, tuple[str, ...]] = {
    "tight": ("grpo", "lead", "lead_static", "grpo_length", "gdpo", "dapo", "meds", "meds_single_cluster"),
    "loose": ("grpo", "lead", "gdpo"),
}
FIXED_VALUES: Mapping[str, Mapping[str, Any]] = {
    # v1's chosen values (results/comparison/tuning.json, validation split); reused, never tuned again
    "tight/grpo_length": {"shaper_kwargs": {"threshold": 25}},
    "tight/gdpo": {"length_threshold": 50},
    "tight/lead_static": {"shaper_kwargs": {"static_lambda_c": 0.8}},
    "loose/gdpo": {"length_threshold": 82},
}


def planning_alpha() -> float:
    """The level the seeds are planned at: Bonferroni's ``ALPHA / len(PARTS)``, Holm's strictest step."""
    return ALPHA / len(PARTS)


RunMap = Mapping[tuple[str, str], Mapping[int, Mapping[str, Any]]]


def _differences(comparison: Comparison, runs: RunMap, metric: str | None = None) -> dict[int, float]:
    """seed -> treatment - control of ``metric`` (default: the comparison's) over the seeds both rows have."""
    c, metric = comparison, metric or comparison.metric
    a = {s: metric_value(ev, metric) for s, ev in runs.get((c.regime, c.treatment), {}).items()}
    b = {s: metric_value(ev, metric) for s, ev in runs.get((c.regime, c.control), {}).items()}
    return paired_values(a, b)


# ------------------------------------------------------------------------------------------- decisions
def decide_claims(runs: RunMap, *, parts: Sequence[Part] = PARTS, alpha: float = ALPHA) -> list[dict[str, Any]]:
    """Every claim's verdict from its parts' t-tests with Holm's step-down over all ``parts`` (``decide``).

    Args:
        runs: (regime, method) -> {seed: eval.json} of the follow-up's test-split runs.

    Returns: one dict per claim (``id``, ``text``, ``verdict``, ``parts``); each part has its ``estimate``, 95 %
    t-interval (unadjusted, for reading), ``p_value``, Holm's ``p_adjusted``, ``verdict``, ``n``, ``seeds``,
    ``sd``, its margin and bound, and ``power``: what its seeds gave at the margin with its own sd, at
    ``planning_alpha`` (``reason`` when it could not be tested).
    """
    tests, rows = [], []
    for part in parts:
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
                "power": power(res.n, res.sd, part.margin, planning_alpha()) if res.n >= 2 and res.sd > 0 else None,
                **({"reason": res.reason} if res.reason else {}),
            }
        )
    adjusted, rejected = holm([t.p_value for t in tests], alpha)
    for row, t, p_adj, rej in zip(rows, tests, adjusted, rejected):
        on_side = t.estimate > row["bound"] if row["relation"] in (">", ">=") else t.estimate < row["bound"]
        row["p_adjusted"] = float(p_adj)
        row["verdict"] = ("holds" if on_side else "fails") if rej else "inconclusive"
    out = []
    for claim in CLAIMS_V2:
        mine = [r for r in rows if r["part"][0] == claim.id]
        verdicts = [r["verdict"] for r in mine]
        overall = "fails" if "fails" in verdicts else "holds" if verdicts and all(v == "holds" for v in verdicts) else (
            "inconclusive"
        )  # fmt: skip
        out.append({"id": claim.id, "text": claim.text, "verdict": overall, "parts": mine})
    return out


# ------------------------------------------------------------------------------------------------ power
def _v1_differences(part: Part, runs: RunMap) -> dict[int, float]:
    return _differences(part.comparison, runs, part.v1_metric)


def power_table(runs: RunMap) -> list[dict[str, Any]]:
    """Per part: v1's paired sd, the seeds for 80 % power at the margin (``planning_alpha``), the seeds planned
    (clipped to [MIN_PLANNED, MAX_PLANNED]) and the power they give at that level and at ``ALPHA``.

    Args:
        runs: v1's (regime, method) -> {seed: eval.json} of its test-split runs (``results.load_runs``).
    """
    level = planning_alpha()
    out = []
    for part in PARTS:
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
                "power_planned_at_alpha": power(planned, sd, part.margin, ALPHA) if sd > 0 else None,
                "decidable": needed is not None and needed <= MAX_PLANNED,
            }
        )
    return out


def row_seeds(table: Sequence[Mapping[str, Any]]) -> dict[str, int]:
    """Seeds of each row ("regime/method"): the largest planned count of the parts that read it, else
    ``MIN_PLANNED``."""
    planned = {t["part"]: int(t["planned"]) for t in table}
    out = {f"{regime}/{m}": MIN_PLANNED for regime, methods in ROWS.items() for m in methods}
    for part in PARTS:
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


PLAN_FILE = "followup.json"


def load_plan() -> dict[str, Any]:
    """The follow-up's frozen data (package data ``study/followup.json``, made once before the runs by
    ``scripts/followup_plan.py``): ``subset`` (the pass@k subset's ``keys`` and every candidate's base pass@8, the
    rule, the seed, the base model's sha256), ``power`` (``power_table`` of v1's runs) and ``row_seeds``."""
    return json.loads(resources.files("dynashape.study").joinpath(PLAN_FILE).read_text())


def eval_overrides() -> dict[str, Any]:
    """The follow-up's ``EvalConfig`` fields: 16 samples per test problem, 64 per problem of the fixed subset
    (pass@8 and pass@32 from them)."""
    return {"n_samples": 16, "passk_samples": 64, "passk_keys": tuple(load_plan()["subset"]["keys"])}
