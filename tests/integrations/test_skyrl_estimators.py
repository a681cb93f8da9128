"""dynashape's estimators in SkyRL 0.4.0's own registry, called through SkyRL's own
``ppo_utils.compute_advantages_and_returns`` with its own config classes (CPU, no Ray, seconds).

The reference is the core shaper replayed on the same rows by test-local code: groups from the uids, verdicts
from the summed reward, lengths from the response masks.
"""

from __future__ import annotations

import cloudpickle
import numpy as np
import pytest
import torch

pytest.importorskip("skyrl")
ppo_utils = pytest.importorskip("skyrl.backends.skyrl_train.utils.ppo_utils")

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations import skyrl as adapter  # noqa: E402
from dynashape.integrations.skyrl import estimators  # noqa: E402
from dynashape.integrations.skyrl.entrypoint import check_config, config_class  # noqa: E402

LEAD = {"b_max": 16, "l_min": 4}


@pytest.fixture(scope="module", autouse=True)
def _registered():
    adapter.register()


def cfg(*overrides: str):
    return config_class().from_cli_overrides(list(overrides))


def skyrl_batch(seed: int, prompts: int = 3, group: int = 4, width: int = 16, pad: int = 0):
    """What SkyRL's trainer hands an estimator: rewards on the last response token, uids, padding copies."""
    gen = torch.Generator().manual_seed(seed)
    bs = prompts * group
    lengths = torch.randint(1, width + 1, (bs,), generator=gen)
    score = torch.where(torch.rand(bs, generator=gen) < 0.5, 1.0, 0.7 * torch.rand(bs, generator=gen))
    mask = (torch.arange(width)[None, :] < lengths[:, None]).long()
    rewards = torch.zeros(bs, width)
    rewards[torch.arange(bs), lengths - 1] = score
    uids = [f"prompt-{i // group}" for i in range(bs)]
    if pad:  # pad_training_input_batch: copies of row 0 under the uids pad0..pad{k-1}
        mask = torch.cat([mask, mask[[0] * pad]])
        rewards = torch.cat([rewards, rewards[[0] * pad]])
        uids = uids + [f"pad{i}" for i in range(pad)]
    return rewards, mask, uids


def reference(rewards, mask, uids, shaper, *, rows: int | None = None):
    """Test-local replay on the core shaper: the first `rows` rows (the rest are padding)."""
    rows = len(uids) if rows is None else rows
    keys = sorted(set(uids[:rows]))
    batch = RolloutBatch(
        group_ids=torch.tensor([keys.index(u) for u in uids[:rows]]),
        correct=rewards[:rows].sum(-1) > 0.5,
        lengths=mask[:rows].sum(-1),
    )
    return shaper(batch).advantages


def skyrl_advantages(config, rewards, mask, uids, name: str):
    return ppo_utils.compute_advantages_and_returns(
        token_level_rewards=rewards,
        response_mask=mask,
        index=uids,
        adv_estimator=name,
        config=config.trainer.algorithm,
        values=None,
        gamma=1.0,
        lambd=1.0,
        grpo_norm_by_std=True,
    )


def test_every_shaper_skyrl_lacks_is_registered_and_grpo_is_skyrls():
    names = ppo_utils.AdvantageEstimatorRegistry.list_available()
    assert {"lead", "adlp", "thinkprune", "dler", "meds"} <= set(names)
    assert ppo_utils.AdvantageEstimatorRegistry.get("grpo") is not None
    assert "grpo" not in estimators.estimator_names()
    assert adapter.register() == ()  # a second call adds nothing


@pytest.mark.parametrize("name, params", [("lead", LEAD), ("adlp", {"eta": 0.5}), ("thinkprune", {"max_length": 12})])
def test_skyrl_calls_the_shaper_and_its_state_carries_across_steps(name, params):
    overrides = [f"trainer.algorithm.advantage_estimator={name}"]
    overrides += [f"trainer.algorithm.{name}.{k}={v}" for k, v in params.items()]
    config = cfg(*overrides)
    shaper = get_shaper(name, **params)
    for step in range(3):
        rewards, mask, uids = skyrl_batch(step, pad=2)
        adv, ret = skyrl_advantages(config, rewards, mask, uids, name)
        want = reference(rewards, mask, uids, shaper, rows=len(uids) - 2)
        torch.testing.assert_close(adv[:-2], want[:, None] * mask[:-2], rtol=0, atol=1e-6)
        assert torch.equal(adv[-2:], torch.zeros_like(adv[-2:]))  # SkyRL's padding rows get nothing
        assert adv is ret
    session = estimators.sessions()[name]
    assert str(session.shaper.state_dict()) == str(shaper.state_dict())
    assert str(shaper.state_dict()) != str(get_shaper(name, **params).state_dict())  # the state moved
    assert estimators.last_metrics(name)["dynashape/excluded_rows"] == 2.0


def test_a_hand_worked_lead_step_reads_the_verdict_from_the_summed_reward():
    # two groups of two: a summed reward of 0.7 is above the 0.5 threshold (correct), 0.3 below (wrong)
    rewards = torch.tensor([[0.0, 1.0], [0.3, 0.0], [0.0, 0.7], [0.0, 0.0]])
    mask = torch.ones(4, 2, dtype=torch.long)
    config = cfg("trainer.algorithm.advantage_estimator=grpo_length")
    adv, _ = skyrl_advantages(config, rewards, mask, ["a", "a", "b", "b"], "grpo_length")
    want = reference(rewards, mask, ["a", "a", "b", "b"], get_shaper("grpo_length"))
    torch.testing.assert_close(adv[:, 0], want, rtol=0, atol=1e-6)
    assert adv[0, 0] > 0 > adv[1, 0] and adv[2, 0] > 0 > adv[3, 0]  # verdicts 1, 0 | 1, 0


@pytest.mark.parametrize(
    "overrides, message",
    [
        (["trainer.algorithm.lead.bmax=3"], "trainer.algorithm.lead.bmax: not a parameter"),
        (["trainer.algorithm.lead.b_max=16"], "trainer.algorithm.lead: invalid parameters"),
        (["trainer.algorithm.lead.fresh_state=1"], "trainer.algorithm.lead.fresh_state: must be true or false"),
        (["trainer.algorithm.lead.correct_threshold=x"], "trainer.algorithm.lead.correct_threshold"),
        (
            ["trainer.algorithm.use_kl_in_reward=true", "trainer.algorithm.use_kl_loss=false"],
            "trainer.algorithm.use_kl_in_reward=true",
        ),
        (["generator.step_wise_trajectories=true"], "generator.step_wise_trajectories=true is refused"),
        (["trainer.algorithm.advantage_batch_normalize=true"], "trainer.algorithm.advantage_batch_normalize"),
    ],
)
def test_config_errors_name_the_key(overrides, message):
    config = cfg("trainer.algorithm.advantage_estimator=lead", *overrides)
    with pytest.raises(ValueError, match=message.replace(".", r"\.").replace("=", "=")):
        check_config(config)


@pytest.mark.parametrize("name", ["meds", "lead_meds", "l1_exact", "gfpo", "aalc", "laser"])
def test_what_skyrl_cannot_hand_an_estimator_is_refused_in_one_line(name):
    with pytest.raises(ValueError, match=f"the '{name}' advantage estimator is not available in SkyRL") as err:
        check_config(cfg(f"trainer.algorithm.advantage_estimator={name}"))
    assert "\n" not in str(err.value)


def test_truncation_is_read_from_the_response_cap_the_entrypoint_passes():
    rewards, mask, uids = skyrl_batch(5)
    config = cfg("trainer.algorithm.advantage_estimator=dler")
    with pytest.raises(ValueError, match="reads truncated"):
        skyrl_advantages(config, rewards, mask, uids, "dler")
    estimators.configure_run(max_response_length=16)
    adv, _ = skyrl_advantages(config, rewards, mask, uids, "dler")
    lengths = mask.sum(-1)
    keys = sorted(set(uids))
    batch = RolloutBatch(
        group_ids=torch.tensor([keys.index(u) for u in uids]),
        correct=rewards.sum(-1) > 0.5,
        lengths=lengths,
        truncated=lengths >= 16,
    )
    assert bool(batch.truncated.any())  # the check below could tell a missing flag apart
    torch.testing.assert_close(adv[:, 0] * (lengths > 0), get_shaper("dler")(batch).advantages, rtol=0, atol=1e-6)


def test_padding_uids_are_only_skyrls_trailing_pad0_to_padk():
    assert estimators.padding_rows(["a", "b", "pad0", "pad1"]) == 2
    assert estimators.padding_rows(["a", "pad1", "pad0"]) == 1
    assert estimators.padding_rows(["pad0", "a"]) == 0
    assert estimators.padding_rows(["padding", "pad7"]) == 0


def test_the_registered_function_travels_to_ray_by_reference():
    # SkyRL syncs its registry through a Ray actor with cloudpickle: a copy of a closure would carry its own
    # shaper, which the checkpoint callback would never see.
    fn = cloudpickle.loads(cloudpickle.dumps(ppo_utils.AdvantageEstimatorRegistry.get("lead")))
    assert fn.func is estimators.skyrl_estimator and fn.args == ("lead",)


def test_an_untested_skyrl_is_refused_in_one_line_naming_the_setting(monkeypatch):
    from dynashape.integrations.skyrl import versions

    monkeypatch.setattr(versions, "installed_skyrl", lambda: "0.5.0")
    monkeypatch.delenv(versions.ANY_VERSION_ENV, raising=False)
    with pytest.raises(adapter.SkyRLVersionError, match="DYNASHAPE_SKYRL_ANY_VERSION=1") as err:
        adapter.register()
    assert "\n" not in str(err.value) and "0.5.0" in str(err.value)
    monkeypatch.setenv(versions.ANY_VERSION_ENV, "1")
    assert adapter.register() == ()
    assert versions.version_problem("0.4.0") is None
    np.testing.assert_equal(versions.TESTED_VERSIONS, ("0.4.0",))


def test_the_tested_release_is_the_one_ci_installs_and_the_extra_pins():
    import pathlib

    import tomllib

    from dynashape.integrations.skyrl.versions import TESTED_VERSIONS

    root = pathlib.Path(__file__).resolve().parents[2]
    extra = tomllib.loads((root / "pyproject.toml").read_text())["project"]["optional-dependencies"]["skyrl"]
    assert extra == [f"skyrl[skyrl-train]=={TESTED_VERSIONS[-1]}"]
    assert f"skyrl=={TESTED_VERSIONS[-1]}" in (root / "ci" / "integration.sh").read_text()
