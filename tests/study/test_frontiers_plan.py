"""The frontier study's plan (studies/frontiers.toml) is its rule's: three strengths per method, set by
``strength_rule`` before any run, every row from the budget-tolerant base, the official forms, the controls."""

from __future__ import annotations

import dataclasses
from pathlib import Path

import pytest

from dynashape.shapers import config_class, shaper_strength
from dynashape.study.compare import RunSpec, spec_config
from dynashape.study.plan_file import committed_plans
from dynashape.study.strength_rule import knob, strengths, toml_row
from dynashape.train.base_model import world_of
from dynashape.train.config import EvalConfig, RunConfig, WarmupConfig
from dynashape.train.field_presets import FIELD_METHODS
from dynashape.train.presets import PRESETS, preset_values, regime_budget
from dynashape.train.warmup import base_model_key, shipped_manifest

B = regime_budget("loose")
BUDGET_BASE_KEY = "88082b43b9b20aa3"


# ------------------------------------------------------------------------------------------- the rule, by hand
def test_the_rule_by_hand_at_the_loose_budget():
    assert B == 164
    # a coefficient: halved (weaker), the paper's, doubled (stronger)
    beta = 1e-7 * 16384 / 164
    assert strengths("alp", B).values == pytest.approx((beta / 2, beta, 2 * beta), rel=1e-12)
    assert strengths("aalc", B).values == (5e-7, 1e-6, 2e-6)
    # a length: doubled (weaker), the paper's (4096 of 16384 -> 41 of 164), halved and rounded half up (20.5 -> 21)
    assert strengths("laser", B).values == (82, 41, 21)
    # the weaker step would be inert (a cap of 328 >= B; keeping 16 of 16): the paper's and two stronger steps
    assert strengths("dler", B).values == (164, 82, 41)
    assert strengths("saw", B).values == (82, 41, 21)  # the paper's T = B/2; 2T = B would make every answer short
    assert strengths("gfpo", B).values == (8, 4, 2)
    # ThinkPrune: the final cap B/2 -> B/4 -> B/8 (20.5 -> 21); the middle round's cap the midpoint of B and it
    tp = strengths("thinkprune", B)
    assert tp.values == (((16, 123), (33, 82)), ((16, 103), (33, 41)), ((16, 93), (33, 21)))
    assert tp.labels == ("82", "41", "21")
    # LASER-D: the paper's grid (4096..16384 by 1024 of 16384) scaled by 2, 1, 1/2, then carried to B
    ld = strengths("laser_d", B)
    assert ld.values[1] == preset_values("laser_d", B)["shaper_kwargs"]["grid"]
    assert ld.values[1][:3] == (41, 51, 62) and ld.values[0][:2] == (82, 103) and ld.values[2][:2] == (21, 26)
    assert ld.labels == ("x2", "x1", "x0.5")


@pytest.mark.parametrize("method", FIELD_METHODS)
def test_every_field_method_has_a_knob_whose_middle_or_weakest_value_is_the_papers(method):
    with pytest.raises(ValueError, match=r"method 'grpo' \(shaper 'grpo'\) declares no strength to sweep"):
        knob("grpo")
    s = strengths(method, B)
    paper = preset_values(method, B)
    head, _, tail = s.knob.key.partition(".")
    value = paper[head][tail] if tail else paper[head]
    assert s.values[s.factors.index(1.0)] == value
    assert len(set(map(str, s.values))) == 3


# ------------------------------------------------------------------------------------------------ the file
def _plan():
    return committed_plans()["frontiers"]


def test_the_file_sweeps_the_rules_values_and_nothing_is_tuned():
    plan = _plan()
    assert plan.page == "frontiers" and not plan.tune and plan.seeds == (5, 6, 7, 8, 9)
    assert set(plan.rows) == {"loose"}
    rows = plan.rows["loose"]
    assert rows[:4] == ("grpo", "lead", "grpo_dynamic_sampling", "grpo_g16")
    assert len(rows) == 4 + 3 * len(FIELD_METHODS) == 37
    # the methods that declare a knob (Shaper.strength) are the field's, and only they are swept
    assert {m for m, p in PRESETS.items() if shaper_strength(p["shaper"])} == set(FIELD_METHODS)
    for method in FIELD_METHODS:
        mine = [r for r in rows if plan.preset(r) == method]
        want = toml_row(method, B)
        key = next(iter(want["sweep"]))
        values = want["sweep"][key]
        assert len(mine) == 3
        for row, value in zip(mine, values, strict=True):
            fixed = plan.fixed[f"loose/{row}"]
            head, _, tail = key.partition(".")
            assert (fixed[head][tail] if tail else fixed[head]) == value, row


def test_the_controls_and_the_official_forms():
    plan = _plan()
    assert plan.preset("grpo_dynamic_sampling") == "grpo" and plan.fixed["loose/grpo_dynamic_sampling"] == {
        "dynamic_sampling": True
    }
    assert plan.preset("grpo_g16") == "grpo" and plan.fixed["loose/grpo_g16"] == {"group_size": 16}
    assert preset_values("gfpo", B)["group_size"] == 16 and preset_values("dler", B)["dynamic_sampling"] is True
    # LASER, LASER-D, DLER and AALC run their shapers' defaults (the official code's), not the field's pinned forms
    for row, fixed in plan.fixed.items():
        method = plan.preset(row.split("/", 1)[1])
        defaults = config_class(method)()
        for key, value in fixed.get("shaper_kwargs", {}).items():
            swept = knob(method).key.removeprefix("shaper_kwargs.") if method in FIELD_METHODS else None
            if key != swept:
                assert getattr(defaults, key) == value, (row, key)
    forms = {m: set(plan.fixed.get(f"loose/{r}", {}).get("shaper_kwargs", {})) for r in plan.rows["loose"]
             for m in [plan.preset(r)]}  # fmt: skip
    assert {"base"} <= forms["laser"] and {"base"} <= forms["laser_d"] and {"precision"} <= forms["aalc"]
    assert {"stop_properly_coef", "correct_boost"} <= forms["dler"]


def test_every_row_starts_from_the_shipped_budget_tolerant_base():
    plan = _plan()
    template = RunConfig(eval=EvalConfig(**plan.eval), warmup=WarmupConfig(**plan.warmup))
    for row in plan.rows["loose"]:
        spec = RunSpec(method=plan.preset(row), regime="loose", seed=5, overrides=plan.fixed.get(f"loose/{row}", {}),
                       row=row if row != plan.preset(row) else None)  # fmt: skip
        cfg = spec_config(spec, template)
        assert cfg.warmup == dataclasses.replace(WarmupConfig(), budget_prompt_share=0.5)
        assert cfg.train.max_new_tokens == B and cfg.eval.n_samples == 16 and len(cfg.eval.passk_keys) == 40
    world = world_of(cfg)
    assert base_model_key(world, cfg.model, cfg.warmup) == BUDGET_BASE_KEY
    shipped = shipped_manifest(world, BUDGET_BASE_KEY)
    assert shipped is not None and shipped[0].name == "base_model_budget"


def test_every_committed_run_is_as_registered():
    """Each run of the study committed so far (results/comparison-frontiers, summaries only) wrote the config.yaml
    its row's registration makes (the plan's base, evaluation, preset and fixed values), whole."""
    import yaml

    plan = _plan()
    folder = Path(__file__).resolve().parents[2] / "results" / "comparison-frontiers"
    configs = sorted(folder.glob("runs/*/*/config.yaml"))
    assert configs, "the study's first runs are committed with this test"
    template = RunConfig(eval=EvalConfig(**plan.eval), warmup=WarmupConfig(**plan.warmup))
    for path in configs:
        regime, (row, _, seed) = path.parent.parent.name, path.parent.name.rpartition("-seed")
        assert row in plan.rows[regime], path
        named = row if row != plan.preset(row) else None
        point = plan.fixed.get(f"{regime}/{row}", {})
        spec = RunSpec(method=plan.preset(row), regime=regime, seed=int(seed), overrides=point, row=named)
        want = yaml.safe_load(yaml.safe_dump(spec_config(spec, template).to_dict()))
        assert yaml.safe_load(path.read_text()) == want, path
