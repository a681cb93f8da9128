"""Everyone reads a shaper's declaration (Shaper.needs), no list of names: the trainer config, the presets and
the verl adapter treat a newly registered shaper by what it declares (the TRL adapter: test_trl_engine.py)."""

from __future__ import annotations

import numpy as np
import pytest
import torch

from dynashape import Shaped, Shaper, ShaperNeeds, register_shaper, shaper_needs
from dynashape.integrations.verl import checks as verl_checks
from dynashape.integrations.verl import estimators as ve
from dynashape.integrations.verl.settings import parse_settings
from dynashape.methods.grpo import GrpoConfig
from dynashape.shapers import registry
from dynashape.shapers.registry import shaper_class
from dynashape.train.config import TRAINER_FINGERPRINT_LAYERS, EvalConfig, RunConfig, TrainConfig
from dynashape.train.presets import PRESETS, preset_values


class _Zeros(Shaper):
    config_cls = GrpoConfig

    def shape(self, batch):
        if self.needs.fingerprints and batch.fingerprints is None:
            raise ValueError("needs fingerprints")
        zeros = torch.zeros(len(batch))
        return Shaped(advantages=zeros, rewards=zeros[:, None])


@pytest.fixture
def toys(monkeypatch):
    """``toy_fp`` declares fingerprints and prompt keys, ``toy_plain`` nothing; both gone after the test."""
    monkeypatch.setattr(registry, "_REGISTRY", dict(registry._REGISTRY))

    @register_shaper("toy_fp")
    class ToyFingerprints(_Zeros):
        needs = ShaperNeeds(fingerprints=True, prompt_keys=True)

    @register_shaper("toy_plain")
    class ToyPlain(_Zeros):
        pass

    return ToyFingerprints, ToyPlain


# ------------------------------------------------------------------------------------------ TrainConfig
def test_train_config_holds_the_fingerprint_width_to_the_declaration(toys):
    with pytest.raises(ValueError, match=r"fingerprint_layers=None: shaper 'toy_fp' reads fingerprints: set"):
        TrainConfig(shaper="toy_fp")
    assert TrainConfig(shaper="toy_fp", fingerprint_layers=2).fingerprint_layers == 2
    with pytest.raises(ValueError, match=r"fingerprint_layers=2: shaper 'toy_plain' reads no fingerprints"):
        TrainConfig(shaper="toy_plain", fingerprint_layers=2)


def test_train_config_holds_the_reward_columns_to_the_declaration(toys):
    with pytest.raises(ValueError, match=r"reward_columns=\('correct',\): shaper 'toy_plain' takes no reward channels"):
        TrainConfig(shaper="toy_plain", reward_columns=("correct",))
    with pytest.raises(ValueError, match=r"reward_columns=\(\): shaper 'gdpo' needs at least one reward channel"):
        TrainConfig(shaper="gdpo")
    assert TrainConfig(shaper="grpo", reward_columns=("correct_overlong",)).reward_columns == ("correct_overlong",)
    with pytest.raises(ValueError, match=r"shaper='nope': unknown shaper 'nope'; available: .*toy_fp"):
        TrainConfig(shaper="nope")


# --------------------------------------------------------------------------------------------- presets
def test_presets_take_fingerprints_from_the_declaration(monkeypatch):
    for method, values in PRESETS.items():
        declared = shaper_needs(values["shaper"]).fingerprints
        assert values.get("fingerprint_layers") == (TRAINER_FINGERPRINT_LAYERS if declared else None), method
    assert "fingerprint_layers" not in preset_values("grpo", 64)
    monkeypatch.setattr(shaper_class("grpo"), "needs", ShaperNeeds(fingerprints=True))  # grpo now says it reads them
    assert preset_values("grpo", 64)["fingerprint_layers"] == TRAINER_FINGERPRINT_LAYERS
    assert preset_values("dapo", 64)["fingerprint_layers"] == TRAINER_FINGERPRINT_LAYERS


# ------------------------------------------------------------------------------------------------ verl
def _verl_config(name, **actor):
    return {
        "algorithm": {"adv_estimator": name},
        "trainer": {"use_v1": True, "v1": {"trainer_mode": "sync"}},
        "actor_rollout_ref": {"actor": {"strategy": "megatron", **actor}},
    }


def test_verl_registers_every_shaper_but_its_own_names(toys):
    from dynashape.integrations import verl as plugin

    names = ve.estimator_names()
    assert {"toy_fp", "toy_plain", "lead", "lead_meds", "meds", "shorterbetter", "grpo_length"} <= set(names)
    assert not set(names) & ve.VERL_OWN_ESTIMATORS
    assert ve.VERL_OWN_ESTIMATORS == {"grpo", "gdpo"}
    assert plugin.ESTIMATOR_NAMES == ve.ESTIMATOR_NAMES == names


def test_verl_checks_a_declared_fingerprint_shaper_as_meds(toys):
    problems = verl_checks.config_problems(_verl_config("toy_fp"))
    assert any(
        "'toy_fp' needs stable prompt keys and fingerprints" in p and "trainer_mode=dynashape" in p for p in problems
    )
    assert any(p.startswith("actor_rollout_ref.actor.strategy=megatron") for p in problems)
    assert verl_checks.config_problems(_verl_config("toy_plain")) == []
    assert ve.trainer_extras("toy_fp") == "stable prompt keys and fingerprints" and ve.trainer_extras("toy_plain") == ""


def test_verl_estimator_refuses_a_declared_fingerprint_shaper_without_the_trainer_mode(toys):
    rewards = torch.tensor([[0.0, 1.0], [0.0, 0.0]])
    mask = torch.ones(2, 2)
    index = np.array(["a", "a"], dtype=object)
    with pytest.raises(ValueError, match="'toy_fp' advantage estimator needs stable prompt keys and fingerprints"):
        ve.make_estimator("toy_fp")(token_level_rewards=rewards, response_mask=mask, index=index)
    advantages, _ = ve.make_estimator("toy_plain")(token_level_rewards=rewards, response_mask=mask, index=index)
    assert torch.equal(advantages, torch.zeros(2, 2))


def test_verl_residual_reward_follows_the_reward_channels_declaration(toys):
    with pytest.raises(ValueError, match=r"algorithm\.toy_plain\.residual_reward=true: .* takes no reward channels"):
        parse_settings("toy_plain", {"toy_plain": {"residual_reward": True}})
    assert parse_settings("meds", {"meds": {"residual_reward": True}}).residual_reward is True


# ------------------------------------------------------------------------------------ fingerprint width
def test_the_fingerprint_widths_come_from_two_constants_with_their_values():
    """The trainer's width (all layers of the chain world's base model) and the paper's (the engines' default)."""
    import inspect

    from dynashape.integrations.verl.settings import EstimatorSettings
    from dynashape.meds import OFFICIAL_FINGERPRINT_LAYERS, FingerprintCapture, fingerprint
    from dynashape.train.presets import make_train_config

    assert TRAINER_FINGERPRINT_LAYERS == RunConfig().model.num_layers == 4
    assert EvalConfig().fingerprint_layers == make_train_config("meds").fingerprint_layers == 4
    assert make_train_config("lead_meds").fingerprint_layers == 4
    assert OFFICIAL_FINGERPRINT_LAYERS == 14
    assert EstimatorSettings(name="meds", shaper_params=()).fingerprint_layers == 14
    assert parse_settings("meds", {}).fingerprint_layers == 14
    for fn in (FingerprintCapture, fingerprint):
        assert inspect.signature(fn).parameters["layers"].default == 14
