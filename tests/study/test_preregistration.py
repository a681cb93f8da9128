"""The follow-up comparison's pre-registration (studies/v2.toml read by ``study.plan_file``, decided by
``study.preregistration``): its parts and margins, the pass@k subset's rule, the power analysis against v1's
committed runs, the seeds per row, the reuse of v1's tuned values, and the claims' verdicts under Holm on hand-made
runs."""

import json
import math
from pathlib import Path

import pytest

from dynashape.study import preregistration
from dynashape.study.claims import Part
from dynashape.study.compare import COMPARISON_PLAN
from dynashape.study.decide import power
from dynashape.study.results import load_runs, runs_by_row

ROOT = Path(__file__).resolve().parents[2]
V1 = ROOT / "results" / "comparison"
V2 = COMPARISON_PLAN["v2"]
CLAIMS = COMPARISON_PLAN["full"].claims


def test_the_parts_ask_v1s_questions_with_a_margin_each():
    assert [c.id for c in V2.claims] == [c.id for c in CLAIMS]
    v1_best = json.loads((ROOT / "docs" / "results.json").read_text())["best_global"]
    for old, new in zip(CLAIMS, V2.claims):
        assert len(old.parts) == len(new.parts)
        for a, b in zip(old.parts, new.parts):
            control = v1_best[a.regime] if a.control == "best_global" else a.control
            assert (a.regime, a.treatment, control, a.relation) == (b.regime, b.treatment, b.control, b.relation)
            # the same metric, except (d)'s trap pass@k, read at k = 32 on the larger subset
            assert a.metric == b.metric or (a.metric, b.metric) == ("trap_pass@64", "trap_pass@32")
    for part in V2.parts:
        assert part.margin > 0 and part.why
        if part.comparison.relation in (">=", "<="):  # every non-inferiority part has a nonzero margin
            assert part.comparison.bound == (-part.margin if part.comparison.relation == ">=" else part.margin)
        else:
            assert part.comparison.bound == 0.0


def test_a_part_whose_bound_disagrees_with_its_margin_is_refused():
    part = V2.parts[1]
    with pytest.raises(ValueError, match="bound"):
        Part(id="x", comparison=part.comparison, margin=part.margin * 2, why="?")


def test_the_subset_rule_by_hand():
    keys = ["a", "b", "c", "d", "e", "f"]
    pass8 = [0.9, 0.5, 0.81, 0.8, 0.95, 0.85]
    # kept: b (0.5), d (0.8, the boundary is kept); filled to 4 with c (0.81) and f (0.85); in the split's order
    assert preregistration.choose_passk_subset(keys, pass8, at_least=4) == ["b", "c", "d", "f"]
    # enough below the threshold: no filling, and every one of them is kept
    assert preregistration.choose_passk_subset(keys, pass8, at_least=1) == ["b", "d"]
    # a tie above the threshold goes to the earlier candidate
    assert preregistration.choose_passk_subset(["x", "y", "z"], [0.9, 0.9, 0.95], at_least=1) == ["x"]
    with pytest.raises(ValueError, match="at_least"):
        preregistration.choose_passk_subset(keys, pass8, at_least=7)
    with pytest.raises(ValueError, match="one length"):
        preregistration.choose_passk_subset(keys, pass8[:3])


def test_the_committed_subset_follows_its_rule_on_the_shipped_base():
    plan = preregistration.frozen_data(V2)
    cand = plan["subset"]["candidates"]
    keys = plan["subset"]["keys"]
    assert keys == preregistration.choose_passk_subset(cand["keys"], cand["pass8"])
    assert len(keys) >= 40
    assert all(p <= 0.8 for k, p in zip(cand["keys"], cand["pass8"]) if k in keys) or len(keys) == 40
    manifest = json.loads((ROOT / "src" / "dynashape" / "world" / "chain" / "base_model" / "manifest.json").read_text())
    assert cand["base_sha256"] in json.dumps(manifest)  # chosen on the base that ships
    assert cand["seed"] == preregistration.SELECTION_SEED
    from dynashape.world import get_world

    test = {p.key: p for p in get_world().split("test")}
    hardest = sorted({p.difficulty for p in test.values()})[-2:]
    assert all(k in test and (test[k].is_trap or test[k].difficulty in hardest) for k in cand["keys"])
    assert V2.eval["passk_keys"] == tuple(keys)


def test_the_power_table_recomputes_from_v1s_runs():
    plan = preregistration.frozen_data(V2)
    table = preregistration.power_table(runs_by_row(load_runs(V1)), V2)
    assert [t["part"] for t in table] == [p.id for p in V2.parts]
    for got, kept in zip(table, plan["power"]["parts"]):
        assert got["v1_seeds"] == kept["v1_seeds"] == 5
        assert got["needed"] == kept["needed"] and got["planned"] == kept["planned"]
        assert got["v1_sd"] == pytest.approx(kept["v1_sd"])
        assert preregistration.MIN_PLANNED <= got["planned"] <= preregistration.MAX_PLANNED
        if got["decidable"]:
            assert got["power_planned"] >= 0.8
        else:  # said in advance: the cap cannot give this part 80 % power
            assert got["planned"] == preregistration.MAX_PLANNED and got["power_planned"] < 0.8
    # a1 by hand: v1's paired sd of AES(lead) - AES(grpo_length) over seeds 0-4 is 0.0881
    a1 = table[0]
    assert a1["v1_sd"] == pytest.approx(0.0881, abs=5e-4)
    assert power(a1["needed"], a1["v1_sd"], 0.10, 0.005) >= 0.8 > power(a1["needed"] - 1, a1["v1_sd"], 0.10, 0.005)


def test_seeds_per_row_and_the_plan():
    plan = preregistration.frozen_data(V2)
    assert preregistration.row_seeds(plan["power"]["parts"], V2) == plan["row_seeds"]
    v2 = V2
    assert dict(v2.rows) == {
        "tight": ("grpo", "lead", "lead_static", "grpo_length", "gdpo", "dapo", "meds", "meds_single_cluster"),
        "loose": ("grpo", "lead", "gdpo"),
    }  # as registered on docs/results-v2.md
    assert not v2.tune
    assert v2.row_seeds == plan["row_seeds"]
    # every row reads the first seeds of one list: rows stay paired
    assert set(v2.seeds) == set(range(5, 25))
    v1 = json.loads((V1 / "comparison.json").read_text())
    assert not set(v2.seeds) & (set(v1["seeds"]) | {100, 101})  # new seeds, none of v1's
    assert v2.eval["n_samples"] >= 16 and v2.eval["passk_samples"] >= 32


def test_the_fixed_values_are_v1s_tuned_values():
    tuning = json.loads((V1 / "tuning.json").read_text())
    assert len(V2.fixed) == 4
    for row, overrides in V2.fixed.items():
        regime, method = row.split("/")
        ((key, value),) = overrides.items()
        if key == "shaper_kwargs":
            ((key, value),) = value.items()
        assert tuning[regime][method]["chosen"] == value, row
        assert tuning[regime][method]["key"].removeprefix("shaper_kwargs.") == key
    best = json.loads((ROOT / "docs" / "results.json").read_text())["best_global"]
    assert best == {"tight": "grpo_length", "loose": "gdpo"} == V2.best_global  # the controls the parts name


def _ev(**final):
    aes = final.pop("aes", None)
    return {"final": {"accuracy": 0.5, "mean_length": 50.0, **final}, "aes": aes}


def _runs(values, metric):
    """(regime, method) -> {seed: eval} with ``metric`` set per seed."""
    return {row: {s: _ev(**{metric: v}) for s, v in enumerate(vs)} for row, vs in values.items()}


def test_claim_c_holds_by_hand_and_holm_counts_every_part():
    # AES lead - lead_static per seed: 0.10, 0.20, 0.10, 0.20, 0.15 -> mean 0.15, sd 0.05; bound -0.05:
    # t = 0.20 / (0.05 / sqrt 5) = 8.944, p = 2 P(T_4 > 8.944) = 0.000864; the other 9 parts are untested (p = 1)
    # so Holm's first step compares 0.000864 with 0.05 / 10: adjusted 10 * 0.000864 = 0.00864 -> holds
    runs = _runs({("tight", "lead"): [0.30, 0.40, 0.30, 0.40, 0.35], ("tight", "lead_static"): [0.2] * 5}, "aes")
    claims = {c["id"]: c for c in preregistration.decide_claims(runs, V2)}
    (c1,) = claims["c"]["parts"]
    from scipy.stats import t

    p = 2 * t.sf(0.20 / (0.05 / math.sqrt(5)), 4)
    assert c1["p_value"] == pytest.approx(p) and c1["p_adjusted"] == pytest.approx(10 * p)
    assert c1["verdict"] == "holds" and claims["c"]["verdict"] == "holds"
    assert claims["a"]["verdict"] == "inconclusive" and "paired seeds" in claims["a"]["parts"][0]["reason"]


def test_a_part_that_holds_alone_is_inconclusive_after_holm():
    # the same claim with p ~ 0.02: below 0.05 alone, above 0.05 / 10 at Holm's first step
    lead = [0.10, 0.00, -0.02, 0.06, 0.01, 0.05]
    runs = _runs({("tight", "lead"): lead, ("tight", "lead_static"): [0.0] * 6}, "aes")
    (c1,) = {c["id"]: c for c in preregistration.decide_claims(runs, V2)}["c"]["parts"]
    assert c1["p_value"] < 0.05 < c1["p_adjusted"]
    assert c1["verdict"] == "inconclusive"


def test_a_clearly_worse_treatment_fails_and_fails_its_claim():
    runs = _runs({("tight", "lead"): [0.1, 0.12, 0.1, 0.11, 0.1], ("tight", "lead_static"): [0.4] * 5}, "aes")
    claims = {c["id"]: c for c in preregistration.decide_claims(runs, V2)}
    assert claims["c"]["parts"][0]["verdict"] == "fails" and claims["c"]["verdict"] == "fails"


def test_the_ceiling_rule_in_a_claim():
    # meds and meds_single_cluster both at accuracy 1.0 on every seed: (e) is inconclusive, never "fails"
    runs = _runs({("tight", "meds"): [1.0] * 8, ("tight", "meds_single_cluster"): [1.0] * 8}, "accuracy")
    (e1,) = {c["id"]: c for c in preregistration.decide_claims(runs, V2)}["e"]["parts"]
    assert e1["verdict"] == "inconclusive" and "ceiling" in e1["reason"]


@pytest.mark.parametrize("name", ["results-v2.md", "results-v2-as-run.md"])
def test_the_committed_pages_state_the_preregistration_the_study_file_decides_with(name):
    """The re-run's page and the as-run page kept beside it both carry the registration verbatim."""
    from dynashape.study.preregistration_page import preregistration_markdown
    from dynashape.study.results_page import CLAIMS_BEGIN, CLAIMS_END, kept_claims

    page = ROOT / "docs" / name
    section = preregistration_markdown(V2).replace(CLAIMS_BEGIN, "").replace(CLAIMS_END, "")
    assert kept_claims(page).strip() == section.strip()
