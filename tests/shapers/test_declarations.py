"""What a method declares about itself beside its needs (issue 48: no study dispatches on a method's name): its
display name, the controller state it logs every step (its trajectory) and whether it is the reference method a
study compares with when it names no control."""

import pytest
import torch

from dynashape.core.batch import RolloutBatch
from dynashape.methods.grpo import GrpoConfig
from dynashape.shapers import (
    Shaper,
    Strength,
    Trajectory,
    available_shapers,
    display_name,
    get_shaper,
    recipe,
    reference_shaper,
    register_shaper,
    registry,
    shaper_strength,
    shaper_trajectory,
)
from dynashape.shapers.parts import Chain, GroupNormalise, ScalarReward


def _batch() -> RolloutBatch:
    n = 8
    return RolloutBatch(
        group_ids=torch.arange(n) // 4,
        correct=torch.tensor([1, 0, 1, 0, 0, 1, 0, 0], dtype=torch.bool),
        lengths=torch.tensor([5, 9, 7, 12, 3, 8, 10, 6]),
        truncated=torch.zeros(n, dtype=torch.bool),
        formatted=torch.ones(n, dtype=torch.bool),
    )


def test_the_field_pages_names_are_the_methods_own():
    names = {n: display_name(n) for n in ("grpo", "lead", "l1_exact", "l1_max", "laser_d", "adlp", "aalc", "gfpo")}
    assert names == {
        "grpo": "GRPO", "lead": "LEAD", "l1_exact": "L1-Exact", "l1_max": "L1-Max", "laser_d": "LASER-D",
        "adlp": "A-DLP", "aalc": "AALC", "gfpo": "GFPO",
    }  # fmt: skip
    assert display_name("meds") == "MEDS"
    assert display_name("cosine") == "cosine"  # none declared: the registry name


def test_the_controllers_declare_their_trajectories():
    declared = {n: shaper_trajectory(n).keys for n in available_shapers() if shaper_trajectory(n) is not None}
    assert declared == {
        "aalc": ("aalc/alpha",),
        "adlp": ("adlp/lambda",),
        "laser_d": ("laser_d/target_low", "laser_d/target_medium", "laser_d/target_high"),
        "lead": ("lead/lambda_l",),
        "thinkprune": ("thinkprune/max_length",),
    }
    assert shaper_trajectory("adlp").title == "length weight lambda"


@pytest.mark.parametrize("name", [n for n in available_shapers() if shaper_trajectory(n) is not None])
def test_a_declared_trajectory_is_what_the_shaper_logs(name):
    shaper = get_shaper(name)
    if shaper.needs.validation_accuracy:  # AALC logs alpha once a validation accuracy is known
        shaper.observe(validation_accuracy=0.5)
    metrics = shaper(_batch()).metrics
    missing = [k for k in shaper_trajectory(name).keys if k not in metrics]
    assert missing == [], f"{name} declares {missing} but does not log them"


def test_grpo_is_the_one_reference_method():
    assert reference_shaper() == "grpo"
    assert [n for n in available_shapers() if registry.shaper_class(n).reference] == ["grpo"]


def test_a_second_reference_method_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(ValueError, match=r"shaper 'plain2' cannot be the reference method: 'grpo' already is"):

        @recipe("plain2", reference=True)
        def plain2() -> Chain:
            return Chain(ScalarReward(), GroupNormalise())

    assert "plain2" not in available_shapers()


def test_a_trajectory_outside_the_namespace_is_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(
        ValueError, match=r"shaper 'mine': trajectory key 'lead/lambda_l' is not in its namespace 'mine/'"
    ):

        @recipe("mine", trajectory=Trajectory(keys=("lead/lambda_l",), title="LEAD's weight"))
        def mine() -> Chain:
            return Chain(ScalarReward(), GroupNormalise())


def test_a_recipe_declares_its_name_and_trajectory(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @recipe("mine", display="Mine", trajectory=Trajectory(keys=("mine/w",), title="its weight"))
    def mine() -> Chain:
        return Chain(ScalarReward(), GroupNormalise())

    assert display_name("mine") == "Mine"
    assert shaper_trajectory("mine") == Trajectory(keys=("mine/w",), title="its weight")
    assert reference_shaper() == "grpo"


def test_bad_declarations_name_the_shaper_and_value(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    with pytest.raises(TypeError, match=r"shaper 'bad': display_name must be text, got 3"):

        @register_shaper("bad")
        class Bad(Shaper):
            config_cls = GrpoConfig
            display_name = 3

            def shape(self, batch):  # pragma: no cover - never called
                raise AssertionError

    with pytest.raises(ValueError, match=r"Trajectory.keys must be a non-empty tuple of metric keys, got \[\]"):
        Trajectory(keys=[], title="x")
    with pytest.raises(ValueError, match=r"Trajectory.title must be non-empty text, got ''"):
        Trajectory(keys=("a/b",), title="")


def test_a_recipe_declares_its_strength_and_bad_ones_are_refused(monkeypatch):
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))
    knob = Strength(key="shaper_kwargs.w", kind="penalty", what="its weight")

    @recipe("mine", strength=knob)
    def mine(*, w: float = 1.0) -> Chain:
        return Chain(ScalarReward(), GroupNormalise())

    assert shaper_strength("mine") == knob and shaper_strength("grpo") is None
    assert shaper_strength("alp") == Strength(
        key="shaper_kwargs.beta", kind="penalty", what="beta, the per-token penalty"
    )
    with pytest.raises(ValueError, match=r"Strength.kind must be one of \('penalty', .*\), got 'louder'"):
        Strength(key="shaper_kwargs.w", kind="louder", what="x")
    with pytest.raises(ValueError, match=r"Strength.key must be a --set key, got ''"):
        Strength(key="", kind="length", what="x")
    with pytest.raises(TypeError, match=r"shaper 'bad': strength must be a Strength, got 'beta'"):

        @recipe("bad", strength="beta")
        def bad() -> Chain:  # pragma: no cover - never called
            return Chain(ScalarReward(), GroupNormalise())
