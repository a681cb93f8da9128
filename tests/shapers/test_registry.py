from dataclasses import fields

import pytest

from dynashape import Shaper, available_shapers, config_class, get_shaper, register_shaper
from dynashape.methods.grpo import GrpoConfig

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


# ------------------------------------------------------------------------------------- what a shaper needs
# Configs under which a shaper with reward_channels="optional" takes one extra column (lead declares its range).
TAKES_ONE_CHANNEL = {"lead": {"reward_ranges": ((-1.0, 1.0),)}, "lead_meds": {"reward_ranges": ((-1.0, 1.0),)}}


def _batch(*, fingerprints=True, prompt_keys=True, rewards=False, budgets=True, truncated=True, formatted=True):
    import torch

    from dynashape import RolloutBatch

    gen = torch.Generator().manual_seed(0)
    n = 8
    return RolloutBatch(
        group_ids=torch.arange(n) // 4,
        correct=torch.tensor([1, 0, 1, 0, 0, 1, 0, 0], dtype=torch.bool),
        lengths=torch.tensor([5, 9, 7, 12, 3, 8, 10, 6]),
        rewards=torch.rand(n, 1, generator=gen) - 0.5 if rewards else None,
        prompt_keys=[f"p{i // 4}" for i in range(n)] if prompt_keys else None,
        fingerprints=torch.randn(n, 3, generator=gen) if fingerprints else None,
        budgets=torch.tensor([6, 6, 6, 6, 9, 9, 9, 9]) if budgets else None,
        truncated=torch.tensor([0, 0, 0, 1, 0, 0, 1, 0], dtype=torch.bool) if truncated else None,
        formatted=torch.tensor([1, 1, 1, 0, 1, 1, 0, 1], dtype=torch.bool) if formatted else None,
    )


def _runs(name, batch, **params):
    try:
        get_shaper(name, **params)(batch)
    except ValueError:
        return False
    return True


def test_the_builtin_declarations():
    from dynashape import ShaperNeeds, shaper_needs

    assert shaper_needs("grpo") == ShaperNeeds(reward_channels="optional")
    assert shaper_needs("grpo_length") == shaper_needs("shorterbetter") == ShaperNeeds()
    assert shaper_needs("gdpo") == ShaperNeeds(reward_channels="required")
    for name in ("meds", "lead_meds"):
        assert shaper_needs(name).fingerprints and shaper_needs(name).prompt_keys
    assert [n for n in available_shapers() if shaper_needs(n).fingerprints] == ["lead_meds", "meds"]


@pytest.mark.parametrize("name", available_shapers())
def test_each_declaration_matches_what_the_shaper_reads(name):
    """Refused without what it declares it needs; runs without what it does not; rewards as declared."""
    from dynashape import shaper_needs

    needs = shaper_needs(name)
    channels = needs.reward_channels == "required"
    assert _runs(name, _batch(rewards=channels)), "a batch with everything it declares"
    assert _runs(name, _batch(fingerprints=False, rewards=channels)) is not needs.fingerprints
    assert _runs(name, _batch(prompt_keys=False, rewards=channels)) is not needs.prompt_keys
    assert _runs(name, _batch(budgets=False, rewards=channels)) is not needs.budgets
    assert _runs(name, _batch(truncated=False, rewards=channels)) is not needs.truncated
    assert _runs(name, _batch(formatted=False, rewards=channels)) is not needs.formatted
    with_rewards = _runs(name, _batch(rewards=True), **TAKES_ONE_CHANNEL.get(name, {}))
    assert with_rewards is (needs.reward_channels != "refused")
    assert _runs(name, _batch(rewards=False)) is (needs.reward_channels != "required")


def test_a_declaration_must_be_a_shaper_needs():
    with pytest.raises(TypeError, match=r"needs must be a ShaperNeeds"):

        @register_shaper("bad_needs")
        class Bad(Shaper):
            config_cls = GrpoConfig
            needs = ("fingerprints",)

            def shape(self, batch):  # pragma: no cover - never called
                raise AssertionError

    from dynashape import ShaperNeeds

    with pytest.raises(ValueError, match=r"reward_channels must be one of \('refused', 'optional', 'required'\)"):
        ShaperNeeds(reward_channels="some")
    assert "bad_needs" not in available_shapers()
