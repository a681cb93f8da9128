"""Every registered method is a recipe on one page (shapers/recipes.py) or a whole class with a stated reason;
a recipe with a config class validates through it, its defaults written once; the length parts by hand."""

from __future__ import annotations

import dataclasses
import inspect
import math

import pytest
import torch

from dynashape import RolloutBatch, available_shapers, config_class, get_shaper, recipe
from dynashape.shapers import recipes, registry, shaper_class
from dynashape.shapers.composed import ComposedShaper
from dynashape.shapers.parts import (
    Chain,
    Correctness,
    CosineLength,
    GroupNormalise,
    KimiLength,
    LengthZscore,
    PassRateLinear,
    RewardColumns,
    SumRewardColumns,
    start,
)

# The methods that stay whole Shaper classes, each with the reason (recipes.py's docstring says it to users).
WHOLE = {
    "meds": "the error memory: HDBSCAN fits and refit worker processes, not a part's plain-value state",
    "lead_meds": "the same error memory before LEAD's chain",
}


def test_every_registered_method_is_a_recipe_on_the_page_or_a_listed_whole_class():
    for name in available_shapers():
        cls = shaper_class(name)
        if name in WHOLE:
            assert not issubclass(cls, ComposedShaper), f"{name} is a chain now: take it off WHOLE"
            assert "HDBSCAN" in recipes.__doc__ and f"``{name}``" in recipes.__doc__
            continue
        assert issubclass(cls, ComposedShaper) and hasattr(cls, "recipe"), f"{name} is neither a recipe nor WHOLE"
        assert cls.recipe.__module__ == "dynashape.shapers.recipes", name
        assert getattr(recipes, name) is cls.recipe, name  # one function per name on the page
        doc = cls.recipe.__doc__ or ""
        assert "arXiv" in doc or "docs/" in doc, f"{name}'s recipe cites no paper or page"


@pytest.mark.parametrize("name", [n for n in sorted(registry._REGISTRY) if n not in WHOLE])
def test_a_recipes_signature_is_its_config_with_the_configs_defaults(name):
    params = inspect.signature(shaper_class(name).recipe).parameters
    cfg = config_class(name)()
    assert [f.name for f in dataclasses.fields(cfg)] == list(params)
    assert all(p.kind is inspect.Parameter.KEYWORD_ONLY for p in params.values())
    assert {k: p.default for k, p in params.items()} == {f.name: getattr(cfg, f.name) for f in dataclasses.fields(cfg)}


def test_a_recipe_with_a_config_class_refuses_an_unknown_keyword_and_a_bad_value_naming_the_field():
    with pytest.raises(TypeError, match="lambda_min"):
        get_shaper("alp", lambda_min=0.3)  # LEAD's parameter, not ALP's
    with pytest.raises(ValueError, match=r"beta=-1\.0 is out of range"):
        get_shaper("alp", beta=-1.0)
    # calling the recipe directly validates through the same config
    with pytest.raises(ValueError, match=r"beta=-1\.0 is out of range"):
        recipes.alp(beta=-1.0)
    with pytest.raises(TypeError, match="lambda_min"):
        recipes.alp(lambda_min=0.3)
    with pytest.raises(ValueError, match=r"b_max=500\.0 must be >= l_min=1000"):
        recipes.lead(b_max=500.0)
    assert isinstance(recipes.lead(b_max=4000.0), Chain)


def test_a_recipes_written_default_must_be_its_configs(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class CapConfig:
        cap: int = 4

    with pytest.raises(TypeError, match=r"cap=5 differs from CapConfig's default 4 \(leave the default out"):

        @recipe("drifted", config=CapConfig)
        def drifted(*, cap: int = 5) -> Chain:
            return Chain(Correctness(), GroupNormalise())

    @recipe("single_sourced", config=CapConfig)
    def single_sourced(*, cap: int) -> Chain:
        return Chain(Correctness(), GroupNormalise())

    assert get_shaper("single_sourced").config == CapConfig()
    assert inspect.signature(single_sourced).parameters["cap"].default == 4


def test_own_penalties_are_refused_by_get_shaper_and_by_the_check_alone(monkeypatch):
    from dynashape.shapers import check_shaper_params

    for call in (get_shaper, check_shaper_params):
        with pytest.raises(ValueError, match="dler applies its own stop-properly penalty from its config"):
            call("dler", stop_properly=0.1)
    assert get_shaper("dler", overlong={"max_length": 64, "buffer": 8}).penalties  # the other one it takes
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(ValueError, match="own_penalties names 'format'"):
        recipe("bad_penalty", own_penalties=("format",))


def test_held_reads_leads_controller_and_names_the_parts_that_hold_state():
    shaper = get_shaper("lead")
    batch = RolloutBatch(group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]),
                         lengths=torch.tensor([2000, 3000, 1200, 3600]))  # fmt: skip
    shaper(batch)
    assert shaper.held("controller").n_updates_ == 1
    with pytest.raises(KeyError, match=r"has no part holding 'memory'; it has \['controller'\]"):
        shaper.held("memory")


# ------------------------------------------------------------------------------------ the length parts
BATCH = RolloutBatch(
    group_ids=torch.tensor([0, 0, 0, 1, 1]),
    correct=torch.tensor([True, False, True, False, False]),
    lengths=torch.tensor([0, 500, 1000, 200, 600]),
    rewards=torch.tensor([[0.5, -1.0], [0.0, 0.0], [1.0, 0.0], [0.0, 0.25], [0.0, 0.0]]),
)


def run(*parts):
    flow, _ = Chain(*parts).update(start(BATCH), Chain(*parts).init())
    return flow


def test_cosine_length_by_hand():
    flow = run(CosineLength(-1.0, -0.5, 0.5, 1.0, 1000.0))
    # correct: 0.5 + 0.25 (1 + cos(pi l / 1000)): l=0 -> 1, l=1000 -> 0.5; wrong: -0.5 - 0.25 (1 + cos):
    # l=500 -> -0.75, l=200 -> -0.5 - 0.25 (1 + cos(0.2 pi)), l=600 -> -0.5 - 0.25 (1 + cos(0.6 pi))
    c2, c6 = (
        torch.cos(torch.tensor(0.2 * torch.pi, dtype=torch.float64)),
        torch.cos(torch.tensor(0.6 * torch.pi, dtype=torch.float64)),
    )
    expected = [1.0, -0.75, 0.5, float(-0.5 - 0.25 * (1 + c2)), float(-0.5 - 0.25 * (1 + c6))]
    assert flow.channels[:, 0].tolist() == pytest.approx(expected, abs=1e-15)
    assert flow.metrics["cosine/beyond_max_len_frac"] == 0.2  # one of five at l >= 1000


def test_kimi_length_by_hand():
    flow = run(KimiLength(weight=2.0))
    # group 0 lengths 0, 500, 1000: lambda 0.5, 0, -0.5; correct 1 + 2 lambda, wrong 2 min(0, lambda)
    # group 1 lengths 200, 600, both wrong: lambda 0.5, -0.5 -> 0 and -1
    assert flow.channels[:, 0].tolist() == [2.0, 0.0, 0.0, 0.0, -1.0]
    assert flow.metrics["kimi_length/length_reward_mean"] == pytest.approx((0.5 + 0 - 0.5 + 0 - 0.5) / 5)


def test_pass_rate_linear_by_hand():
    flow = run(PassRateLinear(coef=0.3, budget=1000.0))
    # group 0 pass rate 2/3: penalty 0.3 * 2/3 * l / 1000 = 0, 0.1, 0.2; group 1 pass rate 0: no penalty
    assert flow.channels[:, 0].tolist() == pytest.approx([1.0, -0.1, 0.8, 0.0, 0.0], abs=1e-15)
    assert flow.metrics["pass_rate_linear/penalty_mean"] == pytest.approx(0.3 / 5, abs=1e-15)


def test_length_zscore_by_hand():
    flow = run(LengthZscore(alpha=0.1, wrong_reward=-1.0, z_eps=0.0))
    # group 0's correct lengths 0 and 1000: mean 500, Bessel std 707.1...; z = -/+ 0.7071; r = exp(-0.1 z)
    z = 500.0 / (500.0 * 2**0.5)
    expected = [math.exp(0.1 * z), -1.0, math.exp(-0.1 * z), -1.0, -1.0]
    assert flow.channels[:, 0].tolist() == pytest.approx(expected, rel=1e-14)
    assert flow.metrics["length_zscore/correct_reward_mean"] == pytest.approx((expected[0] + expected[2]) / 2)


def test_sum_reward_columns_adds_every_column_onto_channel_zero():
    flow = run(Correctness(), SumRewardColumns())
    assert flow.channels[:, 0].tolist() == [0.5, 0.0, 2.0, 0.25, 0.0]  # c + both columns
    plain = RolloutBatch(group_ids=BATCH.group_ids, correct=BATCH.correct, lengths=BATCH.lengths)
    flow, _ = Chain(Correctness(), SumRewardColumns()).update(start(plain), (None, None))
    assert flow.channels[:, 0].tolist() == [1.0, 0.0, 1.0, 0.0, 0.0]  # no rewards: nothing added


def test_declared_reward_columns_refuse_columns_that_were_not_declared():
    with pytest.raises(ValueError, match=r"shaper 'lead' got rewards of shape \(5, 2\) but reward_ranges is empty"):
        run(Correctness(), RewardColumns("lead", required=False, metrics=False, declared=True))
    with pytest.raises(ValueError, match=r"lead reward_ranges declares 1 extra channels but batch rewards has"):
        run(Correctness(), RewardColumns("lead", ranges=((0.0, 1.0),), required=False, declared=True))
    flow = run(Correctness(), RewardColumns("lead", ranges=((0.0, 1.0), (-1.0, 1.0)), required=False, declared=True))
    assert flow.channels.shape == (5, 3)


@pytest.mark.parametrize(
    ("name", "params", "keys"),
    [
        ("lead", {}, {"version", "controller"}),
        ("adlp", {}, {"version", "controller"}),
        ("aalc", {}, {"version", "schedule"}),
        ("thinkprune", {}, {"version", "schedule"}),
        ("laser_d", {}, {"version", "buckets"}),
        ("gfpo", {"adaptive_keep": (4, 6, 8, 8)}, {"version", "difficulty"}),
        ("grpo", {}, set()),
    ],
)
def test_the_recipes_keep_the_state_keys_checkpoints_hold(name, params, keys):
    """A checkpoint written before the methods were recipes loads: the same keys under the same version."""
    shaper = get_shaper(name, **params)
    state = shaper.state_dict()
    assert set(state) == keys
    assert state.get("version", 1) == 1
    fresh = get_shaper(name, **params)
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state
