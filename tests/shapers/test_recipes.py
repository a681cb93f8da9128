"""A method is one recipe: a decorated function whose keyword arguments are its config (shapers/recipe.py)."""

from __future__ import annotations

import dataclasses
import math

import pytest
import torch

from dynashape import RolloutBatch, config_class, get_shaper, recipe
from dynashape.shapers import registry
from dynashape.shapers.parts import BatchWhiten, Chain, Correctness, DecoupledNormalise, LeadEfficiency
from user_recipe import register_lead_saw

BATCH = dict(
    group_ids=torch.tensor([0, 0, 1, 1]), correct=torch.tensor([1, 0, 1, 1]), lengths=torch.tensor([20, 30, 12, 36])
)


@pytest.fixture
def lead_saw(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))  # the registration ends with the test
    return register_lead_saw()


def test_a_recipe_is_a_registered_shaper_with_hand_worked_numbers(lead_saw):
    out = get_shaper("lead_saw", l_min=10, b_max=40)(RolloutBatch(**BATCH))
    # L* = 20 (group 0), 24 (group 1, mean of 12 and 36); r_l = 1 - |l - L*| / L*: [1, .5], [.5, .5]
    assert out.rewards[:, 1].tolist() == [1.0, 0.5, 0.5, 0.5]
    # SAW's CVs: correctness + 3 = [4, 3, 4, 4] (mean 3.75, Bessel std .5), r_l (mean .625, std .25)
    cv = torch.tensor([0.5 / 3.75, 0.25 / 0.625], dtype=torch.float64)
    assert out.metrics["saw/weight_0"] == pytest.approx(float(2 * cv[0] / cv.sum()))
    assert out.metrics["lead/target_len_mean"] == 22.0
    # the function still builds the bare chain, and the shaper's chain is that one
    assert isinstance(lead_saw(l_min=10.0), Chain)
    assert type(get_shaper("lead_saw")).recipe is lead_saw


def test_a_recipes_keywords_are_its_config_and_nothing_is_accepted_and_ignored(lead_saw):
    cfg = config_class("lead_saw")
    assert [f.name for f in dataclasses.fields(cfg)] == ["l_min", "b_max", "cv_eps", "whiten"]
    assert cfg().b_max == 4000.0 and get_shaper("lead_saw").config == cfg()
    with pytest.raises(TypeError, match="lambda_min"):
        get_shaper("lead_saw", lambda_min=0.9)  # PSI's parameter: this method has no PSI
    with pytest.raises(TypeError, match=r"lead_saw: b_max must be a number, got str '4000'"):
        get_shaper("lead_saw", b_max="4000")
    with pytest.raises(ValueError, match=r"lead_saw: l_min must be finite, got nan"):
        get_shaper("lead_saw", l_min=math.nan)
    with pytest.raises(TypeError, match=r"whiten must be a str, got bool True"):
        get_shaper("lead_saw", whiten=True)
    with pytest.raises(dataclasses.FrozenInstanceError):
        cfg().l_min = 1.0  # type: ignore[misc]


def test_a_recipes_state_is_its_chains(monkeypatch):
    from dynashape.shapers.parts import PSIWeights

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @recipe("lead_static_psi")
    def lead_static_psi(*, l_min: float = 10.0):
        return Chain(Correctness(), LeadEfficiency(l_min, 40), PSIWeights(), DecoupledNormalise(), BatchWhiten())

    shaper = get_shaper("lead_static_psi")
    shaper(RolloutBatch(**BATCH))
    state = shaper.state_dict()
    assert state["controller"]["n_updates"] == 1
    fresh = get_shaper("lead_static_psi")
    fresh.load_state_dict(state)
    assert fresh.state_dict() == state


def test_a_recipe_is_refused_when_it_cannot_be_a_config(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(TypeError, match="parameter 'b_max' must be keyword-only"):
        recipe("bad_positional")(lambda b_max=1.0: Chain())
    with pytest.raises(TypeError, match="parameter 'b_max' needs a default"):

        @recipe("bad_default")
        def bad_default(*, b_max: float):
            return Chain()

    with pytest.raises(TypeError, match="annotate b_max"):

        @recipe("bad_annotation")
        def bad_annotation(*, b_max=1.0):
            return Chain()

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class OtherConfig:
        l_min: float = 1.0

    with pytest.raises(TypeError, match=r"fields \['l_min'\] differ from the function's keywords \['b_max'\]"):

        @recipe("bad_config", config=OtherConfig)
        def bad_config(*, b_max: float = 1.0):
            return Chain()

    @recipe("not_a_chain")
    def not_a_chain(*, x: int = 1):
        return [Correctness()]

    with pytest.raises(TypeError, match="recipe 'not_a_chain' must return a Chain, got list"):
        get_shaper("not_a_chain")
    with pytest.raises(ValueError, match="already registered"):
        recipe("lead")(not_a_chain)


def test_a_recipe_with_its_own_config_class_validates_with_it(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @dataclasses.dataclass(frozen=True, kw_only=True)
    class CapConfig:
        cap: int = 4

        def __post_init__(self):
            if self.cap < 1:
                raise ValueError(f"cap must be >= 1, got {self.cap}")

    @recipe("capped", config=CapConfig)
    def capped(*, cap: int = 4):
        return Chain(Correctness(), DecoupledNormalise(), BatchWhiten())

    assert config_class("capped") is CapConfig
    with pytest.raises(ValueError, match="cap must be >= 1, got 0"):
        get_shaper("capped", cap=0)


def test_the_users_recipe_trains_in_the_reference_trainer(lead_saw, tiny_config, parity_verifier, tmp_path):
    from dynashape.train.run import train

    cfg = tiny_config("grpo", shaper="lead_saw", shaper_kwargs={"l_min": 4.0, "b_max": 24.0})
    seen = []
    shaper_cls = type(get_shaper("lead_saw"))
    original = shaper_cls.shape
    shaper_cls.shape = lambda self, batch: (seen.append((batch, self.config)), original(self, batch))[1]
    try:
        result = train(cfg, tmp_path / "run", progress=False, verifier=parity_verifier, report=False)
    finally:
        shaper_cls.shape = original
    assert [m["step"] for m in result.metrics] == [1.0, 2.0, 3.0]
    assert len(seen) == 3 and all(c.l_min == 4.0 and c.b_max == 24.0 for _, c in seen)
    # its own parts logged: SAW's weights and LEAD's target, every step
    assert all("saw/weight_0" in m and "lead/target_len_mean" in m for m in result.metrics)
    with pytest.raises(ValueError, match="lambda_min"):
        tiny_config("grpo", shaper="lead_saw", shaper_kwargs={"lambda_min": 0.9})


@pytest.mark.parametrize("page", ["README.md", "docs/architecture.md"])
def test_the_recipe_examples_in_the_docs_run(page, monkeypatch):
    """The recipe a reader copies from the README and architecture.md registers and shapes a batch."""
    from pathlib import Path

    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    text = (Path(__file__).resolve().parents[2] / page).read_text()
    (block,) = [b for b in text.split("```python\n")[1:] if '@recipe("lead_saw")' in b.split("```")[0]]
    exec(block.split("```")[0], {})  # our own docs, not model output
    out = get_shaper("lead_saw", l_min=10.0, b_max=40.0)(RolloutBatch(**BATCH))
    assert out.rewards[:, 1].tolist() == [1.0, 0.5, 0.5, 0.5]


def test_a_config_without_a_preset_reports_the_method_it_runs(lead_saw):
    from dynashape.train.config import TrainConfig

    assert TrainConfig(shaper="lead_saw").method == "lead_saw"
    assert TrainConfig().method == "lead" and TrainConfig(shaper="grpo", method="mine").method == "mine"
