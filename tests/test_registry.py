from dataclasses import fields

import pytest

from dynashape import Shaper, available_shapers, config_class, get_shaper, register_shaper
from dynashape.shapers.grpo import GrpoConfig

BUILTIN = ("grpo", "grpo_length", "gdpo", "lead", "shorterbetter", "meds", "lead_meds")


def test_builtin_names_are_registered():
    assert set(BUILTIN) <= set(available_shapers())


@pytest.mark.parametrize("name", BUILTIN)
def test_every_builtin_builds_from_defaults_and_names_its_config(name):
    shaper = get_shaper(name)
    assert shaper.name == name
    assert isinstance(shaper.config, config_class(name))
    assert type(shaper).config_cls is config_class(name)


@pytest.mark.parametrize("name", [n for n in available_shapers() if "eps" in {f.name for f in fields(config_class(n))}])
@pytest.mark.parametrize("eps", [0.0, -1e-6, float("nan")])
def test_eps_must_be_positive_in_every_config(name, eps):
    with pytest.raises(ValueError, match=r"eps=.* must be a finite number|eps=.* is out of range; allowed: \(0.0"):
        get_shaper(name, eps=eps)


def test_unknown_parameter_is_a_type_error():
    with pytest.raises(TypeError, match="b_maxx"):
        get_shaper("lead", b_maxx=3)
    with pytest.raises(TypeError, match=r"meds\..*'kk'"):
        get_shaper("lead_meds", meds={"kk": 3})


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
        ("grpo", dict(eps=0.0), r"eps=0.0 is out of range; allowed: \(0.0, inf\]"),
        ("meds", dict(target="all"), r"target='all' is not allowed"),
        ("meds", dict(alpha=-0.1), r"alpha=-0.1 is out of range"),
        ("meds", dict(cluster_method="kmeans"), r"cluster_method"),
        ("lead_meds", dict(meds={"alpha": -1.0}), r"meds\.alpha=-1.0 is out of range"),
        ("lead_meds", dict(beta=2.0), r"beta=2.0 is out of range; allowed: \[0.0, 1.0\)"),
    ],
)
def test_config_errors_name_field_and_range(name, params, message):
    with pytest.raises(ValueError, match=message):
        get_shaper(name, **params)
