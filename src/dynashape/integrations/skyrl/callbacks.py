"""Shaper state beside SkyRL's checkpoints, through SkyRL's own ``TrainingCallback`` (skyrl/train/utils/callbacks.py).

SkyRL writes each checkpoint to ``trainer.ckpt_path/global_step_N/`` and then fires ``on_save`` with that folder;
the callback writes ``global_step_N/dynashape_<estimator>_state.pt`` there. On resume SkyRL loads its checkpoint
(``trainer.resume_mode=latest``: the step in ``latest_ckpt_global_step.txt``; ``from_path``:
``trainer.resume_path``) before it fires ``on_train_start``; the callback then reads the state file of that
step's folder into the shaper. A resumed run whose folder has no state file is refused (naming the file) unless
``trainer.algorithm.<name>.fresh_state=true``.

The file holds plain values and tensors only (read with ``torch.load(weights_only=True)`` by
``dynashape.io.state``)::

    {"format": 1, "estimator": str, "global_step": int, "run": {"project_name": str, "run_name": str},
     "shaper": <shaper.state_dict()>}

A file of another estimator, run (SkyRL's ``trainer.project_name`` / ``trainer.run_name``) or step is refused.
"""

from __future__ import annotations

import logging
import os
from typing import Any

from dynashape.integrations.skyrl.estimators import last_metrics, session_for
from dynashape.io.state import StateFileError, torch_load, torch_save

__all__ = ["STATE_FORMAT", "load_state", "make_callback", "resume_folder", "save_state", "state_file_name"]

logger = logging.getLogger(__name__)

STATE_FORMAT = 1


def state_file_name(estimator: str) -> str:
    """``dynashape_<estimator>_state.pt``."""
    return f"dynashape_{estimator}_state.pt"


def _run(cfg: Any) -> dict[str, str]:
    return {"project_name": str(cfg.trainer.project_name), "run_name": str(cfg.trainer.run_name)}


def save_state(cfg: Any, folder: str, global_step: int) -> str:
    """Write the state of ``cfg.trainer.algorithm.advantage_estimator``'s shaper into `folder`; returns the path."""
    name = cfg.trainer.algorithm.advantage_estimator
    session = session_for(name, cfg.trainer.algorithm)
    path = os.path.join(folder, state_file_name(name))
    payload = {
        "format": STATE_FORMAT,
        "estimator": name,
        "global_step": int(global_step),
        "run": _run(cfg),
        "shaper": session.shaper.state_dict(),
    }
    torch_save(path, payload)
    return path


def resume_folder(cfg: Any, global_step: int) -> str:
    """The checkpoint folder SkyRL resumed from (``trainer.resume_path`` or ``ckpt_path/global_step_N``)."""
    if str(getattr(cfg.trainer, "resume_mode", "latest")) in ("from_path", "ResumeMode.FROM_PATH"):
        return os.fspath(cfg.trainer.resume_path)
    return os.path.join(os.fspath(cfg.trainer.ckpt_path), f"global_step_{global_step}")


def load_state(cfg: Any, folder: str, global_step: int) -> bool:
    """Restore the shaper from `folder`'s state file; returns False when it started fresh (``fresh_state``).

    Raises:
        StateFileError: the file is missing (without ``fresh_state``), not a plain payload, or belongs to another
            estimator, run or step; the message names the file.
    """
    name = cfg.trainer.algorithm.advantage_estimator
    session = session_for(name, cfg.trainer.algorithm)
    path = os.path.join(folder, state_file_name(name))
    if not os.path.exists(path):
        if session.settings.fresh_state:
            logger.warning("dynashape: %s not found; the '%s' shaper starts fresh (fresh_state=true)", path, name)
            return False
        raise StateFileError(
            path,
            f"SkyRL resumes from step {global_step} but the '{name}' shaper's state is missing; resume from a "
            f"checkpoint written with it, or set trainer.algorithm.{name}.fresh_state=true to start the shaper fresh",
        )
    payload = torch_load(path, map_location="cpu", expect=dict)
    problem = None
    if payload.get("format") != STATE_FORMAT or "shaper" not in payload:
        problem = f"not a dynashape shaper state (format {STATE_FORMAT})"
    elif payload.get("estimator") != name:
        problem = f"state of estimator {payload.get('estimator')!r}, this run uses {name!r}"
    elif payload.get("run") != _run(cfg):
        problem = f"state of run {payload.get('run')}, this run is {_run(cfg)}"
    elif payload.get("global_step") != int(global_step):
        problem = f"written at step {payload.get('global_step')}, SkyRL resumes from step {global_step}"
    if problem:
        raise StateFileError(path, problem)
    session.shaper.load_state_dict(payload["shaper"])
    return True


def make_callback(cfg: Any) -> Any:
    """A SkyRL ``TrainingCallback`` that saves, restores and logs the run's shaper (skyrl imported here)."""
    from skyrl.train.utils.callbacks import TrainingCallback

    class DynashapeCallback(TrainingCallback):
        """dynashape's shaper state with SkyRL's checkpoints, its metrics in SkyRL's logs."""

        def on_train_start(self, trainer: Any, callback_input: Any, control: Any) -> None:
            if trainer.global_step > 0:  # SkyRL has just loaded a checkpoint
                load_state(cfg, resume_folder(cfg, trainer.global_step), trainer.global_step)

        def on_save(self, trainer: Any, callback_input: Any, control: Any) -> None:
            if callback_input.ckpt_path:
                save_state(cfg, callback_input.ckpt_path, trainer.global_step)

        def on_log(self, trainer: Any, callback_input: Any, control: Any) -> None:
            if callback_input.logs is not None:
                callback_input.logs.update(last_metrics(cfg.trainer.algorithm.advantage_estimator))

    return DynashapeCallback()
