import pytest

from dynashape import Shaper, available_shapers, config_class, get_shaper, register_shaper
from dynashape.shapers.grpo import GrpoConfig


def test_builtin_names_are_registered():
    assert {"grpo", "grpo_length", "gdpo", "lead", "shorterbetter"} <= set(available_shapers())


def test_unknown_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="b_maxx"):
        get_shaper("lead", b_maxx=3)


def test_unknown_name_lists_the_available_ones():
    with pytest.raises(ValueError, match=r"unknown shaper 'leda'.*lead"):
        get_shaper("leda")


def test_positional_config_is_refused():
    with pytest.raises(TypeError):
        GrpoConfig("none")  # keyword-only


def test_registering_a_taken_name_raises():
    with pytest.raises(ValueError, match="already registered"):

        @register_shaper("lead")
        class Other(Shaper):
            config_cls = GrpoConfig

            def shape(self, batch):  # pragma: no cover - never called
                raise AssertionError


def test_config_class_lookup():
    assert config_class("grpo") is GrpoConfig


@pytest.mark.parametrize(
    ("name", "params", "message"),
    [
        ("lead", dict(beta=1.5), r"beta=1.5 is out of range; allowed: \[0.0, 1.0\)"),
        ("lead", dict(target="max"), r"target='max' is not allowed"),
        ("lead", dict(l_min=5000, b_max=4000), r"b_max=4000 must be >= l_min=5000"),
        ("lead", dict(lambda_min=float("nan")), r"lambda_min=nan must be a finite number"),
        ("grpo", dict(std="biased"), r"std='biased' is not allowed"),
        ("grpo_length", dict(weights=(1.0,)), r"weights=\(1.0,\) must be a pair"),
        ("gdpo", dict(whiten="batch"), r"whiten='batch' is not allowed"),
        ("shorterbetter", dict(beta=-1), r"beta=-1 is out of range"),
    ],
)
def test_config_errors_name_field_and_range(name, params, message):
    with pytest.raises(ValueError, match=message):
        get_shaper(name, **params)
