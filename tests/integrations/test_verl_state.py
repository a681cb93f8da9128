"""Shaper state saved with verl 0.9.1's own checkpoints and restored from the step verl resumes from (CPU).

verl's real ``_save_checkpoint`` / ``_load_checkpoint`` run (v1 ``PPOTrainer``, the ``dynashape`` trainer mode and
the legacy ``RayPPOTrainer``), wrapped by the plugin; only the worker groups and the dataloader are stand-ins.

Risks guarded (issue 14, "Why" 4): resuming from an older checkpoint restored a newer EMA / memory; a new run in
the same directory inherited old state; state files were unpickled with ``weights_only=False`` (code execution).
"""

from __future__ import annotations

import os
import pathlib
from types import SimpleNamespace

import numpy as np
import pytest
import torch

pytest.importorskip("verl")
omegaconf = pytest.importorskip("omegaconf")
ray_trainer = pytest.importorskip("verl.trainer.ppo.ray_trainer")
v1 = pytest.importorskip("verl.trainer.ppo.v1")

from verl import DataProto  # noqa: E402
from verl.trainer.ppo.v1.trainer_base import PPOTrainer  # noqa: E402

from dynashape import RolloutBatch, get_shaper  # noqa: E402
from dynashape.integrations.verl import estimators as verl_estimators  # noqa: E402
from dynashape.integrations.verl.state import state_file_name  # noqa: E402

LEAD = {"b_max": 40, "l_min": 10}
GROUP = 4


def batch(seed: int, prompts: int = 3, width: int = 40):
    gen = torch.Generator().manual_seed(seed)
    bs = prompts * GROUP
    lengths = torch.randint(1, width + 1, (bs,), generator=gen)
    correct = torch.rand(bs, generator=gen) < 0.5
    mask = (torch.arange(width)[None, :] < lengths[:, None]).float()
    rewards = torch.zeros(bs, width)
    rewards[torch.arange(bs), lengths - 1] = correct.float()
    uids = np.array([f"s{seed}-{i // GROUP}" for i in range(bs)], dtype=object)
    data = DataProto.from_dict(
        tensors={"token_level_rewards": rewards, "response_mask": mask}, non_tensors={"uid": uids}
    )
    return data, RolloutBatch(group_ids=torch.arange(bs) // GROUP, correct=correct, lengths=lengths)


def make_config(tmp_path, *, mode="sync", experiment="exp-a", resume_mode="auto", resume_from=None, section=None):
    return omegaconf.OmegaConf.create(
        {
            "algorithm": {"adv_estimator": "lead", "lead": dict(LEAD if section is None else section)},
            "actor_rollout_ref": {"actor": {"checkpoint": {"async_save": False}}, "rollout": {"n": GROUP}},
            "trainer": {
                "project_name": "proj",
                "experiment_name": experiment,
                "default_local_dir": str(tmp_path / "ckpt"),
                "default_hdfs_dir": None,
                "resume_mode": resume_mode,
                "resume_from_path": resume_from,
                "del_local_ckpt_after_load": False,
                "use_v1": mode != "legacy",
                "v1": {"trainer_mode": "dynashape" if mode == "dynashape" else "sync"},
            },
        }
    )


class Loader:
    def __len__(self) -> int:
        return 1000

    def state_dict(self) -> dict:
        return {"position": 7}

    def load_state_dict(self, state: dict) -> None:
        self.loaded = state


def trainer_of(kind: str, config):
    """A trainer object of verl's class with the attributes its checkpoint methods read; no Ray, no workers."""
    cls = {
        "v1": v1.PPOTrainerSync,  # verl's default trainer.v1.trainer_mode=sync
        "dynashape": v1.get_trainer_cls("dynashape"),
        "legacy": ray_trainer.RayPPOTrainer,
    }[kind]
    trainer = object.__new__(cls)
    trainer.config = config
    if kind != "dynashape":
        trainer.trainer_mode = "sync"
    workers = SimpleNamespace(save_checkpoint=lambda *a, **k: None, load_checkpoint=lambda *a, **k: None)
    trainer.actor_rollout_wg = workers
    trainer.use_critic = False
    trainer.train_dataloader = Loader()
    trainer.checkpoint_callback = SimpleNamespace(on_save=lambda **k: None)
    trainer.global_steps = 0
    return trainer


def run_step(seed: int) -> torch.Tensor:
    data, _ = batch(seed)
    config = omegaconf.OmegaConf.create({"adv_estimator": "lead", "lead": LEAD})
    return ray_trainer.compute_advantage(data, adv_estimator="lead", config=config).batch["advantages"]


KINDS = ["v1", "dynashape", "legacy"]


def test_the_plugin_wraps_verls_trainers():
    for cls in (PPOTrainer, ray_trainer.RayPPOTrainer):
        assert cls.__dict__.get("_dynashape_patched") is True, cls


@pytest.mark.parametrize("kind", KINDS)
def test_state_is_saved_per_step_and_restored_from_the_step_verl_resumes(kind, tmp_path):
    config = make_config(tmp_path, mode={"v1": "sync"}.get(kind, kind))
    trainer = trainer_of(kind, config)
    saved = {}
    for step in (1, 2, 3, 4):
        run_step(step)
        if step % 2 == 0:
            trainer.global_steps = step
            trainer._save_checkpoint()
            saved[step] = verl_estimators.session_for("lead", config.algorithm).shaper.state_dict()
    root = tmp_path / "ckpt"
    assert (root / "latest_checkpointed_iteration.txt").read_text() == "4"  # verl's own tracker
    for step in (2, 4):
        assert (root / f"global_step_{step}" / state_file_name("lead")).exists()
    assert saved[2] != saved[4]

    # Restart, resuming from the OLDER checkpoint: the state of step 2 comes back, not the newer one of step 4.
    verl_estimators.reset_sessions()
    older = make_config(
        tmp_path,
        mode={"v1": "sync"}.get(kind, kind),
        resume_mode="resume_path",
        resume_from=str(root / "global_step_2"),
    )
    resumed = trainer_of(kind, older)
    resumed._load_checkpoint()
    assert resumed.global_steps == 2
    assert verl_estimators.session_for("lead", older.algorithm).shaper.state_dict() == saved[2]

    # ... and training on from there equals an uninterrupted shaper that saw steps 1, 2 and then step 5.
    reference = get_shaper("lead", **LEAD)
    for step in (1, 2):
        reference(batch(step)[1])
    data, truth = batch(5)
    expected = reference(truth).advantages[:, None] * data.batch["response_mask"]
    torch.testing.assert_close(run_step(5), expected, rtol=0, atol=0)

    # resume_mode=auto picks verl's latest step, 4, and our state of step 4.
    verl_estimators.reset_sessions()
    latest = trainer_of(kind, make_config(tmp_path, mode={"v1": "sync"}.get(kind, kind)))
    latest._load_checkpoint()
    assert latest.global_steps == 4
    assert verl_estimators.session_for("lead", config.algorithm).shaper.state_dict() == saved[4]


def test_state_dir_moves_the_files_but_keeps_them_per_step(tmp_path):
    section = {**LEAD, "state_dir": str(tmp_path / "states")}
    config = make_config(tmp_path, section=section)
    trainer = trainer_of("v1", config)
    data, _ = batch(0)
    ray_trainer.compute_advantage(
        data, adv_estimator="lead", config=omegaconf.OmegaConf.create({"adv_estimator": "lead", "lead": section})
    )
    trainer.global_steps = 3
    trainer._save_checkpoint()
    assert (tmp_path / "states" / "global_step_3" / state_file_name("lead")).exists()
    assert not (tmp_path / "ckpt" / "global_step_3" / state_file_name("lead")).exists()
    verl_estimators.reset_sessions()
    resumed = trainer_of("v1", config)
    resumed._load_checkpoint()
    assert verl_estimators.session_for("lead", config.algorithm).shaper.state_dict() != {}


def test_a_new_run_in_the_same_directory_refuses_the_old_state(tmp_path):
    trainer = trainer_of("v1", make_config(tmp_path, experiment="exp-a"))
    run_step(0)
    trainer.global_steps = 1
    trainer._save_checkpoint()
    verl_estimators.reset_sessions()
    other = trainer_of("v1", make_config(tmp_path, experiment="exp-b"))
    path = tmp_path / "ckpt" / "global_step_1" / state_file_name("lead")
    with pytest.raises(ValueError, match=rf"{path}: shaper state of another run .*exp-a.*this run is .*exp-b"):
        other._load_checkpoint()


def _checkpoint_without_state(tmp_path):
    trainer = trainer_of("v1", make_config(tmp_path))
    run_step(0)
    trainer.global_steps = 2
    trainer._save_checkpoint()
    path = tmp_path / "ckpt" / "global_step_2" / state_file_name("lead")
    os.remove(path)
    verl_estimators.reset_sessions()
    return path


def test_missing_state_on_resume_is_refused_naming_the_path(tmp_path):
    path = _checkpoint_without_state(tmp_path)
    resumed = trainer_of("v1", make_config(tmp_path))
    with pytest.raises(ValueError, match=rf"{path}: no 'lead' shaper state .*\+algorithm.lead.fresh_state=true"):
        resumed._load_checkpoint()


def test_missing_state_on_resume_starts_fresh_only_when_asked(tmp_path, caplog):
    path = _checkpoint_without_state(tmp_path)
    resumed = trainer_of("v1", make_config(tmp_path, section={**LEAD, "fresh_state": True}))
    with caplog.at_level("WARNING", logger="dynashape.integrations.verl.hooks"):
        resumed._load_checkpoint()
    assert f"{path} not found; the 'lead' shaper starts fresh at step 2" in caplog.text
    fresh = get_shaper("lead", **LEAD).state_dict()
    session = verl_estimators.session_for("lead", resumed.config.algorithm)
    torch.testing.assert_close(session.shaper.state_dict(), fresh, rtol=0, atol=0)


class Evil:
    """Unpickling this creates the marker file: what a weights_only=False load would execute."""

    def __init__(self, marker: pathlib.Path) -> None:
        self.marker = marker

    def __reduce__(self):
        return (pathlib.Path.touch, (self.marker,))


@pytest.mark.parametrize("kind", KINDS)
def test_a_state_file_that_would_run_code_is_refused_and_never_run(kind, tmp_path):
    mode = {"v1": "sync"}.get(kind, kind)
    trainer = trainer_of(kind, make_config(tmp_path, mode=mode))
    trainer.global_steps = 2
    trainer._save_checkpoint()  # a genuine checkpoint, then its state file is replaced by a hostile pickle
    path = tmp_path / "ckpt" / "global_step_2" / state_file_name("lead")
    marker = tmp_path / "pwned"
    torch.save({"format": 1, "shaper": Evil(marker)}, path)
    verl_estimators.reset_sessions()
    resumed = trainer_of(kind, make_config(tmp_path, mode=mode))
    with pytest.raises(ValueError, match=rf"{path}: not a dynashape shaper state of plain values and tensors"):
        resumed._load_checkpoint()
    assert not marker.exists()
