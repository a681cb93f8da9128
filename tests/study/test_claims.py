"""The first comparison's claims (studies/v1.toml): the verdict rule, the metrics they read, and whole claims on
hand-made runs."""

from __future__ import annotations

import math

import pytest

from dynashape.study.claims import (
    Comparison,
    evaluate_claims,
    metric_per_problem,
    metric_value,
    verdict,
)
from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.stats import Interval

CLAIMS = COMPARISON_PLAN["full"].claims  # studies/v1.toml's claims

T975_4 = 2.7764451051977987  # Student's t_{0.975, 4} from a table


def _iv(low, high):
    return Interval((low + high) / 2, low, high, 5)


@pytest.mark.parametrize(
    ("low", "high", "relation", "bound", "expected"),
    [
        (0.1, 0.3, ">", 0.0, "holds"),
        (-0.1, 0.3, ">", 0.0, "inconclusive"),
        (-0.3, 0.0, ">", 0.0, "fails"),  # the whole interval is <= 0
        (0.0, 0.2, ">=", 0.0, "holds"),
        (-0.3, -0.01, ">=", 0.0, "fails"),
        (-0.015, 0.01, ">=", -0.02, "holds"),  # within 2 points
        (-0.05, -0.03, ">=", -0.02, "fails"),
        (-0.04, 0.01, ">=", -0.02, "inconclusive"),
        (-9.0, -1.0, "<", 0.0, "holds"),
        (0.0, 3.0, "<", 0.0, "fails"),
        (-1.0, 0.0, "<=", 0.0, "holds"),
        (0.5, 1.0, "<=", 0.0, "fails"),
        (float("nan"), float("nan"), ">", 0.0, "inconclusive"),
    ],
)
def test_verdict_reads_the_whole_interval(low, high, relation, bound, expected):
    assert verdict(_iv(low, high), relation, bound) == expected


def test_comparisons_validate_their_fields():
    with pytest.raises(ValueError, match="relation"):
        Comparison(regime="tight", treatment="lead", control="grpo", metric="aes", relation="=>")
    with pytest.raises(ValueError, match="metric"):
        Comparison(regime="tight", treatment="lead", control="grpo", metric="speed", relation=">")
    with pytest.raises(ValueError, match="bound"):
        Comparison(regime="tight", treatment="lead", control="grpo", metric="aes", relation=">", bound=math.nan)


def _ev(*, aes=None, n_correct=(2, 2, 2, 2), lengths=(10.0, 20.0, 30.0, 40.0), hard=None, eigen=None):
    """A run's eval.json: 4 problems of difficulties 1, 1, 2, 2 with 4 samples each."""
    n = 4
    difficulty = [1, 1, 2, 2]
    per_d = {}
    for d in (1, 2):
        idx = [i for i, x in enumerate(difficulty) if x == d]
        per_d[str(d)] = {
            "accuracy": sum(n_correct[i] for i in idx) / (n * len(idx)),
            "mean_length": sum(lengths[i] for i in idx) / len(idx),
        }
    final = {
        "accuracy": sum(n_correct) / (n * 4),
        "mean_length": sum(lengths) / 4,
        "n_samples": n,
        "per_difficulty": per_d,
        "per_problem": {
            "difficulty": difficulty,
            "is_trap": [False, True, False, True],
            "n_correct": list(n_correct),
            "mean_length": list(lengths),
        },
        "wrong_eigen_ratio": eigen,
    }
    if hard is not None:
        final["per_problem_hard"] = hard
    return {"aes": aes, "base": {"accuracy": 0.5, "mean_length": 30.0}, "final": final}


def test_metrics_by_hand():
    ev = _ev(aes=0.2, n_correct=(4, 3, 1, 0), lengths=(12.0, 14.0, 50.0, 70.0))
    assert metric_value(ev, "aes") == 0.2
    assert metric_value(ev, "accuracy") == pytest.approx(8 / 16)
    assert metric_value(ev, "accuracy@hardest") == pytest.approx(1 / 8)
    assert metric_value(ev, "mean_length@easiest") == pytest.approx(13.0)
    assert list(metric_per_problem(ev, "accuracy")) == [1.0, 0.75, 0.25, 0.0]
    assert list(metric_per_problem(ev, "accuracy@hardest")) == [0.25, 0.0]
    assert list(metric_per_problem(ev, "mean_length@easiest")) == [12.0, 14.0]
    assert metric_per_problem(ev, "aes") is None
    assert metric_value(ev, "trap_pass@64") is None  # no pass@k subset


def test_trap_pass_at_64_is_the_unbiased_estimator_on_trap_prompts_only():
    # 64 samples: pass@64 = 1[c > 0]; the non-trap problem (c = 5) is left out
    hard64 = {"is_trap": [True, False, True], "n_correct": [0, 5, 1], "n_samples": 64, "difficulty": [3, 3, 1]}
    assert metric_value(_ev(hard=hard64), "trap_pass@64") == pytest.approx(0.5)
    # 128 samples, c = 1: 1 - C(127, 64) / C(128, 64) = 1 - 64 / 128
    hard128 = {"is_trap": [True], "n_correct": [1], "n_samples": 128, "difficulty": [3]}
    assert metric_value(_ev(hard=hard128), "trap_pass@64") == pytest.approx(0.5)
    # fewer than 64 samples: k is the subset's sample count (pass@8 with 8 samples = 1[c > 0])
    hard8 = {"is_trap": [True, True], "n_correct": [0, 8], "n_samples": 8, "difficulty": [3, 3]}
    assert list(metric_per_problem(_ev(hard=hard8), "trap_pass@64")) == [0.0, 1.0]


def _runs(regime, values_by_method, metric_kw):
    """(regime, method) -> {seed: eval} with ``metric_kw`` set to each seed's value."""
    return {(regime, m): {s: _ev(**{metric_kw: v}) for s, v in enumerate(vals)} for m, vals in values_by_method.items()}


def test_claim_c_by_hand():
    lead = [0.30, 0.40, 0.30, 0.40, 0.35]
    static = [0.20, 0.20, 0.20, 0.20, 0.20]
    runs = _runs("tight", {"lead": lead, "lead_static": static}, "aes")
    (c,) = [x for x in evaluate_claims(runs, {}, claims=CLAIMS) if x["id"] == "c"]
    # differences 0.10, 0.20, 0.10, 0.20, 0.15: mean 0.15, sd sqrt(0.01 / 4) = 0.05
    half = T975_4 * 0.05 / math.sqrt(5)
    assert c["estimate"] == pytest.approx(0.15)
    assert c["interval"] == pytest.approx([0.15 - half, 0.15 + half])
    assert c["n"] == 5 and c["verdict"] == "holds"  # the lower end 0.088 >= -0.05


def test_claim_c_fails_when_lead_is_clearly_worse_and_waits_for_five_seeds():
    runs = _runs("tight", {"lead": [0.1, 0.12, 0.1, 0.11, 0.1], "lead_static": [0.4] * 5}, "aes")
    (c,) = [x for x in evaluate_claims(runs, {}, claims=CLAIMS) if x["id"] == "c"]
    assert c["verdict"] == "fails"
    few = {k: {s: v for s, v in by_seed.items() if s < 3} for k, by_seed in runs.items()}
    (c3,) = [x for x in evaluate_claims(few, {}, claims=CLAIMS) if x["id"] == "c"]
    assert c3["verdict"] == "inconclusive" and c3["n"] == 3 and "n = 3 < 5" in c3["reason"]
    assert c3["interval"][0] < c3["estimate"] < c3["interval"][1]  # still estimated, just not judged


def test_claim_a_is_compound_and_resolves_best_global():
    seeds = range(5)
    # AES: lead clearly above gdpo (the chosen best_global), grpo_length far above (must not be used)
    runs = {("tight", "lead"): {}, ("tight", "gdpo"): {}, ("tight", "grpo_length"): {}, ("tight", "grpo"): {}}
    for s in seeds:
        runs[("tight", "lead")][s] = _ev(aes=0.5 + 0.01 * s, n_correct=(4, 4, 4, 4))
        runs[("tight", "gdpo")][s] = _ev(aes=0.1 + 0.02 * s)
        runs[("tight", "grpo_length")][s] = _ev(aes=0.9)
        runs[("tight", "grpo")][s] = _ev(aes=0.0, n_correct=(2, 2, 2, 2))
    (a,) = [x for x in evaluate_claims(runs, {"tight": "gdpo"}, claims=CLAIMS) if x["id"] == "a"]
    assert a["parts"][0]["control"] == "gdpo" and a["verdict"] == "holds"
    # differences 0.4 - 0.01 s: mean 0.38
    assert a["estimate"] == pytest.approx(0.38)
    # accuracy: 1.0 vs 0.5 on every seed: zero spread, a zero-width interval at 0.5
    assert a["parts"][1]["interval"] == pytest.approx([0.5, 0.5])
    assert a["parts"][1]["bootstrap_interval"] == pytest.approx([0.5, 0.5])
    # against grpo_length the AES part fails, and so does the claim
    (a2,) = [x for x in evaluate_claims(runs, {"tight": "grpo_length"}, claims=CLAIMS) if x["id"] == "a"]
    assert a2["parts"][0]["verdict"] == "fails" and a2["verdict"] == "fails"
    # without a chosen best_global the claim waits
    (a3,) = [x for x in evaluate_claims(runs, {}, claims=CLAIMS) if x["id"] == "a"]
    assert a3["verdict"] == "inconclusive" and "best_global" in a3["reason"]


def test_every_claim_of_the_issue_is_there():
    assert [c.id for c in CLAIMS] == ["a", "b", "c", "d", "e"]
    regimes = {c.id: {p.regime for p in c.parts} for c in CLAIMS}
    assert regimes == {"a": {"tight"}, "b": {"loose"}, "c": {"tight"}, "d": {"tight"}, "e": {"tight"}}


def test_a_comparison_at_the_ceiling_fails_by_the_rule_and_the_page_says_why():
    # trap pass@64 = 1 for both arms on all 5 seeds: the difference is 0 with a zero-width interval, so "> 0"
    # fails by the pre-registered rule; the note says both arms sit at the ceiling.
    trap_all_solved = {"is_trap": [True, True], "n_correct": [3, 64], "n_samples": 64, "difficulty": [3, 3]}
    runs = {
        ("tight", m): {s: _ev(hard=trap_all_solved, n_correct=(4, 4, 4, 4), eigen=0.5) for s in range(5)}
        for m in ("meds", "dapo")
    }
    (d,) = [x for x in evaluate_claims(runs, {}, claims=CLAIMS) if x["id"] == "d"]
    assert d["parts"][0]["interval"] == pytest.approx([0.0, 0.0])
    assert d["parts"][0]["verdict"] == "fails"
    assert "trap_pass@64: both arms at 1 on every paired seed" in d["reason"]
    # accuracy 1.0 for both arms: noted too; the eigen ratio (not a bounded fraction) never is
    assert "accuracy: both arms at 1" in d["parts"][1]["reason"]
    assert "reason" not in d["parts"][2]
    # one seed of one arm below the ceiling: no note
    runs[("tight", "dapo")][2] = _ev(hard={**trap_all_solved, "n_correct": [0, 64]}, n_correct=(4, 4, 4, 4))
    (d2,) = [x for x in evaluate_claims(runs, {}, claims=CLAIMS) if x["id"] == "d"]
    assert "reason" not in d2["parts"][0]
