"""Start-up validation of verl 0.9.1 configurations and the ``--check`` command (CPU).

Configurations are composed from verl's own ``ppo_trainer.yaml`` / ``ppo_megatron_trainer.yaml`` with Hydra, exactly
as ``python -m verl.trainer.main_ppo <overrides>`` builds them. Risks guarded (issue 14, "Why" 2 and 4): MEDS on an
engine or mode where no fingerprints are written failed after a full rollout; a threshold verdict on a reward that
carries a KL or overlong term; plugin import errors swallowed by verl's entry-point loader.
"""

from __future__ import annotations

import os
import subprocess
import sys
import textwrap

import pytest

verl = pytest.importorskip("verl")
hydra = pytest.importorskip("hydra")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
v1 = pytest.importorskip("verl.trainer.ppo.v1")

from dynashape.integrations.verl.checks import VerlConfigError, check_config, config_problems  # noqa: E402

CONFIG_DIR = os.path.join(os.path.dirname(verl.__file__), "trainer", "config")
OURS = ["reward.custom_reward_function.path=pkg://dynashape.integrations.verl"]
MEDS_OK = ["algorithm.adv_estimator=meds", "trainer.v1.trainer_mode=dynashape"]


def compose(overrides, name="ppo_trainer"):
    from hydra import compose as hydra_compose
    from hydra import initialize_config_dir

    with initialize_config_dir(config_dir=CONFIG_DIR, version_base=None):
        return hydra_compose(config_name=name, overrides=list(overrides))


@pytest.mark.parametrize(
    "overrides",
    [
        ["algorithm.adv_estimator=lead", "+algorithm.lead.b_max=4000"],  # plain v1 path, verl's defaults
        ["algorithm.adv_estimator=lead", "trainer.v1.trainer_mode=dynashape"],
        MEDS_OK,
        [*MEDS_OK, "actor_rollout_ref.actor.strategy=fsdp2"],
        # KL in the reward is fine when the verdict comes from acc: our reward function, or the user says so.
        ["algorithm.adv_estimator=lead", "trainer.v1.trainer_mode=dynashape", "algorithm.use_kl_in_reward=true", *OURS],
        ["algorithm.adv_estimator=lead", "trainer.use_v1=false", "algorithm.use_kl_in_reward=true", *OURS],
        [
            "algorithm.adv_estimator=lead",
            "trainer.v1.trainer_mode=dynashape",
            "+reward.reward_kwargs.overlong_buffer_cfg.enable=true",
            "+algorithm.lead.verdict=acc",
        ],
        ["algorithm.adv_estimator=grpo", "actor_rollout_ref.actor.strategy=megatron"],  # not ours: never refused
    ],
)
def test_runnable_configurations_pass(overrides):
    assert config_problems(compose(overrides)) == []


REFUSED = [
    # (overrides, config file, the setting the message must name)
    (["algorithm.adv_estimator=meds"], "ppo_trainer", r"trainer\.v1\.trainer_mode=sync: 'meds' needs"),
    (["algorithm.adv_estimator=lead_meds", "trainer.use_v1=false"], "ppo_trainer", r"trainer\.use_v1=false"),
    (MEDS_OK, "ppo_megatron_trainer", r"actor_rollout_ref\.actor\.strategy=megatron: MEDS fingerprints"),
    ([*MEDS_OK, "actor_rollout_ref.actor.strategy=fsdp_turbo"], "ppo_trainer", r"strategy=fsdp_turbo"),
    (
        [*MEDS_OK, "actor_rollout_ref.actor.ulysses_sequence_parallel_size=2"],
        "ppo_trainer",
        r"ulysses_sequence_parallel_size=2: with Ulysses",
    ),
    ([*MEDS_OK, "actor_rollout_ref.model.use_remove_padding=false"], "ppo_trainer", r"use_remove_padding=false"),
    ([*MEDS_OK, "actor_rollout_ref.model.use_fused_kernels=true"], "ppo_trainer", r"use_fused_kernels=true"),
    (
        [*MEDS_OK, "algorithm.rollout_correction.bypass_mode=true"],
        "ppo_trainer",
        r"rollout_correction\.bypass_mode=true: bypass mode",
    ),
    (
        ["algorithm.adv_estimator=lead", "algorithm.use_kl_in_reward=true"],
        "ppo_trainer",
        r"use_kl_in_reward=true changes the summed reward.*trainer_mode=dynashape",
    ),
    (
        ["algorithm.adv_estimator=lead", "+reward.reward_kwargs.overlong_buffer_cfg.enable=true"],
        "ppo_trainer",
        r"overlong_buffer_cfg\.enable=true changes the summed reward",
    ),
    (
        ["algorithm.adv_estimator=lead", "trainer.v1.trainer_mode=dynashape", "algorithm.use_kl_in_reward=true"],
        "ppo_trainer",
        r"use_kl_in_reward=true .*verdict=acc",  # a reward function of the user's: say it returns acc
    ),
    (
        ["algorithm.adv_estimator=lead", "algorithm.use_kl_in_reward=true", "+algorithm.lead.verdict=threshold", *OURS],
        "ppo_trainer",
        r"algorithm\.lead\.verdict=threshold",
    ),
    (["algorithm.adv_estimator=lead", "+algorithm.lead.verdict=acc"], "ppo_trainer", r"verdict=acc: the reward"),
    (["algorithm.adv_estimator=lead", "+algorithm.lead.bmax=3"], "ppo_trainer", r"algorithm\.lead\.bmax: not a param"),
    (
        ["algorithm.adv_estimator=lead", "actor_rollout_ref.rollout.multi_turn.enable=true"],
        "ppo_trainer",
        r"  - actor_rollout_ref\.rollout\.multi_turn\.enable=true: multi-turn responses .*; set .*enable=false$",
    ),
]


@pytest.mark.parametrize(("overrides", "name", "match"), REFUSED)
def test_each_refused_configuration_names_what_to_change(overrides, name, match):
    with pytest.raises(VerlConfigError, match=match):
        check_config(compose(overrides, name))


def test_a_setting_that_cannot_be_read_is_an_error_not_a_default():
    # an interpolation that does not resolve: verl itself would fail on it later, so must the check (the default,
    # remove-padding on, would have passed it)
    config = compose([*MEDS_OK, "actor_rollout_ref.model.use_remove_padding=${nowhere.flag}"])
    with pytest.raises(
        VerlConfigError, match=r"^actor_rollout_ref\.model\.use_remove_padding: cannot be read \("
    ) as info:
        check_config(config)
    assert "\n" not in str(info.value)


def test_one_error_lists_every_change(monkeypatch):
    monkeypatch.setenv("DYNASHAPE_VERL_PATCH_FSDP", "0")
    config = compose(
        [
            "algorithm.adv_estimator=meds",
            "actor_rollout_ref.actor.strategy=megatron",
            "actor_rollout_ref.actor.ulysses_sequence_parallel_size=4",
            "actor_rollout_ref.model.use_fused_kernels=true",
            "algorithm.rollout_correction.bypass_mode=true",
        ]
    )
    with pytest.raises(VerlConfigError) as info:
        check_config(config)
    lines = [line for line in str(info.value).splitlines() if line.startswith("  - ")]
    named = ["trainer_mode=sync", "strategy=megatron", "ulysses", "use_fused_kernels", "bypass_mode", "PATCH_FSDP"]
    assert len(lines) == len(named), lines
    for key, line in zip(named, lines, strict=True):
        assert key in line, (key, line)


@pytest.mark.parametrize(
    "build",
    [
        lambda cfg: v1.PPOTrainerSync(cfg),  # verl's default v1 trainer (plain path)
        lambda cfg: v1.get_trainer_cls("dynashape")(cfg),  # our trainer mode
        lambda cfg: ray_trainer.RayPPOTrainer(
            config=cfg, tokenizer=None, role_worker_mapping={}, resource_pool_manager=None
        ),
    ],
    ids=["v1-sync", "dynashape", "legacy"],
)
def test_verl_trainers_refuse_at_construction_before_any_worker(build, monkeypatch):
    """The hook runs before verl's own __init__: nothing of verl's (replay buffer, Ray pools) is touched."""
    touched = []  # verl's PPOTrainer.__init__ starts with build_checkpoint_callback: it must never be reached
    monkeypatch.setattr(
        v1.trainer_base, "build_checkpoint_callback", lambda *a, **k: touched.append("verl") or None, raising=True
    )
    config = compose(["algorithm.adv_estimator=meds", "actor_rollout_ref.actor.strategy=megatron"])
    with pytest.raises(VerlConfigError, match="strategy=megatron"):
        build(config)
    assert touched == []


def test_check_command_reports_the_registered_estimators():
    out = subprocess.run(
        [sys.executable, "-m", "dynashape.integrations.verl", "--check"],
        capture_output=True,
        text=True,
        timeout=300,
        env=dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="auto"),
    )
    assert out.returncode == 0, out.stdout + out.stderr[-3000:]
    estimators = next(line for line in out.stdout.splitlines() if "registered advantage estimators" in line)
    for name in ("lead*", "lead_meds*", "meds*", "shorterbetter*", "grpo_length*", "gdpo,"):
        assert name in estimators, estimators
    assert "trainer mode 'dynashape' registered" in out.stdout
    assert out.stdout.strip().splitlines()[-1].startswith("OK")


BROKEN = textwrap.dedent(
    """
    # Simulates a node image where the plugin cannot import (e.g. a dependency missing or broken).
    import importlib.abc, sys

    class _Broken(importlib.abc.MetaPathFinder):
        def find_spec(self, name, path=None, target=None):
            if name == "dynashape.integrations.verl.estimators":
                raise ImportError("simulated: a dependency of the plugin is missing on this image")
            return None

    sys.meta_path.insert(0, _Broken())
    """
)


def test_check_command_fails_loudly_where_verl_would_swallow_the_error(tmp_path):
    (tmp_path / "sitecustomize.py").write_text(BROKEN)
    env = dict(os.environ, PYTHONPATH=str(tmp_path), VERL_USE_EXTERNAL_PLUGINS="auto")
    # What verl itself does with the broken plugin: imports fine, our estimators silently absent.
    code = "import verl\nfrom verl.trainer.ppo import core_algos\nprint('lead' in core_algos.ADV_ESTIMATOR_REGISTRY)"
    silent = subprocess.run([sys.executable, "-c", code], capture_output=True, text=True, env=env, timeout=300)
    assert silent.returncode == 0 and silent.stdout.strip().splitlines()[-1] == "False", silent.stderr[-2000:]
    # The check: non-zero exit, the traceback, and what verl would have shown instead.
    out = subprocess.run(
        [sys.executable, "-m", "dynashape.integrations.verl", "--check"],
        capture_output=True,
        text=True,
        env=env,
        timeout=300,
    )
    assert out.returncode == 1
    assert "Traceback (most recent call last)" in out.stdout
    assert "ImportError: simulated: a dependency of the plugin is missing" in out.stdout
    last = out.stdout.strip().splitlines()[-1]
    assert last.startswith("FAIL loading the plugin dynashape.integrations.verl failed")
    assert "Unknown advantage estimator" in last


def test_check_command_fails_when_verl_is_told_to_skip_plugins():
    out = subprocess.run(
        [sys.executable, "-m", "dynashape.integrations.verl", "--check"],
        capture_output=True,
        text=True,
        env=dict(os.environ, VERL_USE_EXTERNAL_PLUGINS="none"),
        timeout=300,
    )
    assert out.returncode == 1
    assert "FAIL VERL_USE_EXTERNAL_PLUGINS=none" in out.stdout


def test_dynashape_doctor_runs_the_same_check(capsys, monkeypatch):
    from dynashape.cli import main

    assert main(["doctor"]) == 0
    assert "lead*" in capsys.readouterr().out
    monkeypatch.setenv("VERL_USE_EXTERNAL_PLUGINS", "lead_only_plugin")
    assert main(["doctor"]) == 1
    assert "does not name 'dynashape'" in capsys.readouterr().out


@pytest.mark.parametrize("script", ["verl_lead_r1_distill_1.5b.sh", "verl_dapo_meds_qwen2.5_math_7b.sh"])
def test_the_example_launch_scripts_pass_the_start_up_checks(script):
    import shlex

    root = os.path.dirname(os.path.dirname(os.path.dirname(os.path.abspath(__file__))))
    text = open(os.path.join(root, "examples", script)).read()
    body = text.split("python3 -m verl.trainer.main_ppo", 1)[1].split('"$@"', 1)[0].replace("\\\n", " ")
    for var, value in {"DATA": "/data", "MODEL": "/model", "NGPUS": "8", "OUT": "/out", "MAX_RESPONSE": "3072"}.items():
        body = body.replace(f'"${var}"', value).replace(f"${var}", value)
    assert config_problems(compose(shlex.split(body))) == []


def test_check_command_runs_the_start_up_checks_on_launch_overrides(capsys):
    """Before Ray starts: --check with the launch overrides composes verl's config and refuses what would fail."""
    from dynashape.integrations.verl.doctor import main

    assert main(["--check", "algorithm.adv_estimator=meds", "trainer.v1.trainer_mode=dynashape"]) == 0
    assert "passes the start-up checks" in capsys.readouterr().out
    assert main(["--check", "--config-name", "ppo_megatron_trainer", "algorithm.adv_estimator=meds"]) == 1
    fails = [line for line in capsys.readouterr().out.splitlines() if line.startswith("FAIL")]
    assert len(fails) == 2 and "trainer_mode=sync" in fails[0] and "strategy=megatron" in fails[1]
