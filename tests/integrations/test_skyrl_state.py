"""Shaper state beside SkyRL 0.4.0's checkpoints, through SkyRL's own ``TrainingCallback`` events and its own
config class (CPU, no Ray): written into ``global_step_N/`` on ``on_save``, read back on ``on_train_start`` of a
resumed run, refused when missing unless a fresh state is asked for.

The trainer is a stand-in holding only what the callback reads (``global_step``); SkyRL's ``_fire`` builds the
same ``CallbackInput`` (skyrl/train/trainer.py, ``save_checkpoints`` then ``on_save`` with its folder).
"""

from __future__ import annotations

import os
from types import SimpleNamespace

import pytest
import torch

pytest.importorskip("skyrl")
callbacks_mod = pytest.importorskip("skyrl.train.utils.callbacks")

from test_skyrl_estimators import reference, skyrl_advantages, skyrl_batch  # noqa: E402

from dynashape import get_shaper  # noqa: E402
from dynashape.integrations import skyrl as adapter  # noqa: E402
from dynashape.integrations.skyrl import estimators  # noqa: E402
from dynashape.integrations.skyrl.callbacks import make_callback, state_file_name  # noqa: E402
from dynashape.integrations.skyrl.entrypoint import config_class  # noqa: E402
from dynashape.io.state import StateFileError  # noqa: E402


@pytest.fixture(scope="module", autouse=True)
def _registered():
    adapter.register()


def run_cfg(tmp_path, *extra: str, run_name: str = "r1"):
    return config_class().from_cli_overrides(
        [
            "trainer.algorithm.advantage_estimator=adlp",
            "trainer.algorithm.adlp.eta=0.5",
            f"trainer.ckpt_path={tmp_path}/ckpts",
            f"trainer.run_name={run_name}",
            *extra,
        ]
    )


def fire(callback, event: str, step: int, **fields):
    info = callbacks_mod.CallbackInput(global_step=step, epoch=0, total_steps=4, steps_per_epoch=4, **fields)
    getattr(callback, event)(SimpleNamespace(global_step=step), info, callbacks_mod.TrainingControl())


def train_steps(cfg, steps):
    for step in steps:
        rewards, mask, uids = skyrl_batch(step)
        skyrl_advantages(cfg, rewards, mask, uids, "adlp")


def test_state_is_saved_with_each_checkpoint_and_restored_on_resume(tmp_path):
    cfg = run_cfg(tmp_path)
    callback = make_callback(cfg)
    assert isinstance(callback, callbacks_mod.TrainingCallback)
    train_steps(cfg, [1, 2])
    folder = tmp_path / "ckpts" / "global_step_2"
    folder.mkdir(parents=True)
    fire(callback, "on_save", 2, ckpt_path=str(folder))
    assert (folder / state_file_name("adlp")).exists()
    train_steps(cfg, [3])
    uninterrupted = estimators.sessions()["adlp"].shaper.state_dict()

    estimators.reset_sessions()  # a new process: SkyRL resumed from global_step_2
    resumed_cfg = run_cfg(tmp_path, "trainer.resume_mode=latest")
    fire(make_callback(resumed_cfg), "on_train_start", 2)
    train_steps(resumed_cfg, [3])
    assert str(estimators.sessions()["adlp"].shaper.state_dict()) == str(uninterrupted)

    # and the reference: a fresh core shaper fed steps 1..3 by test-local code
    shaper = get_shaper("adlp", eta=0.5)
    for step in [1, 2, 3]:
        reference(*skyrl_batch(step), shaper)
    assert str(shaper.state_dict()) == str(uninterrupted)
    assert str(shaper.state_dict()) != str(get_shaper("adlp", eta=0.5).state_dict())


def test_a_resume_without_the_state_is_refused_unless_fresh_state(tmp_path):
    (tmp_path / "ckpts" / "global_step_2").mkdir(parents=True)
    cfg = run_cfg(tmp_path)
    with pytest.raises(StateFileError, match="fresh_state=true") as err:
        fire(make_callback(cfg), "on_train_start", 2)
    assert os.path.join("global_step_2", state_file_name("adlp")) in str(err.value)
    fresh = run_cfg(tmp_path, "trainer.algorithm.adlp.fresh_state=true")
    fire(make_callback(fresh), "on_train_start", 2)  # starts fresh, with a warning
    fire(make_callback(cfg), "on_train_start", 0)  # a run from scratch reads nothing


def test_state_of_another_run_or_step_is_refused(tmp_path):
    cfg = run_cfg(tmp_path)
    train_steps(cfg, [1])
    folder = tmp_path / "ckpts" / "global_step_2"
    folder.mkdir(parents=True)
    fire(make_callback(cfg), "on_save", 2, ckpt_path=str(folder))
    with pytest.raises(StateFileError, match="state of run"):
        fire(make_callback(run_cfg(tmp_path, run_name="other")), "on_train_start", 2)
    os.rename(folder, tmp_path / "ckpts" / "global_step_3")
    with pytest.raises(StateFileError, match="written at step 2, SkyRL resumes from step 3"):
        fire(make_callback(cfg), "on_train_start", 3)


def test_the_shapers_metrics_reach_skyrls_logs(tmp_path):
    cfg = run_cfg(tmp_path)
    train_steps(cfg, [1])
    logs: dict[str, float] = {"policy/loss": 0.0}
    fire(make_callback(cfg), "on_log", 1, logs=logs)
    assert logs["dynashape/excluded_rows"] == 0.0 and "adlp/lambda" in logs and "policy/loss" in logs
    assert torch.isfinite(torch.tensor(logs["adlp/lambda"]))


def test_a_resume_from_path_reads_the_state_in_that_folder(tmp_path):
    cfg = run_cfg(tmp_path)
    train_steps(cfg, [1])
    elsewhere = tmp_path / "kept" / "global_step_1"
    elsewhere.mkdir(parents=True)
    fire(make_callback(cfg), "on_save", 1, ckpt_path=str(elsewhere))
    saved = estimators.sessions()["adlp"].shaper.state_dict()
    estimators.reset_sessions()
    resumed = run_cfg(tmp_path, "trainer.resume_mode=from_path", f"trainer.resume_path={elsewhere}")
    fire(make_callback(resumed), "on_train_start", 1)  # not ckpt_path/global_step_1, which does not exist
    assert str(estimators.sessions()["adlp"].shaper.state_dict()) == str(saved)
