"""Shaper state beside verl's checkpoints: one file per estimator in each ``global_step_N`` folder.

Why per step: verl resumes from a chosen ``global_step_N`` (the latest, or ``trainer.resume_from_path``); a single
state file rewritten after every call would hand a resumed run the EMA / MEDS memory of a *later* step, and a new
run in the same directory the state of an old one. So the state is written when verl writes a checkpoint, into
that checkpoint's folder, and read back from the folder of the step verl resumes from.

File ``<root>/global_step_N/dynashape_<estimator>_state.pt`` (``root`` = ``algorithm.<name>.state_dir`` or
``trainer.default_local_dir``; for ``resume_mode=resume_path`` without a ``state_dir``, the resume folder itself)
holds plain values and tensors only and is loaded with ``torch.load(weights_only=True)``::

    {"format": 1, "estimator": str, "global_step": int,
     "run": {"project_name": str, "experiment_name": str}, "shaper": <shaper.state_dict()>,
     "validated": bool}

``validated`` says the state already holds what verl's validation at that step told the shaper (AALC's accuracy,
LASER-D's monitor): verl saves a checkpoint *before* it validates at the same step, so the plugin rewrites the file
after the validation; a resumed run then skips observing its validation before training again (a file written
without the key counts as not validated).

A file whose ``run`` differs from the resuming run's ``trainer.project_name`` / ``trainer.experiment_name`` is
refused (a ``StateFileError``, a ValueError, naming the file and both runs), as is any file that is not such a
plain payload (empty, truncated, or needing arbitrary unpickling). Files are written and read through
``dynashape.io.state``.
"""

from __future__ import annotations

import os
from collections.abc import Mapping
from typing import Any

from dynashape.io.state import StateFileError, torch_load, torch_save

__all__ = [
    "STATE_FORMAT",
    "load_state_file",
    "read_state_file",
    "run_identity",
    "save_state_atomic",
    "state_file_name",
    "state_path",
    "write_state_file",
]

STATE_FORMAT = 1


def state_file_name(estimator: str) -> str:
    """``dynashape_<estimator>_state.pt``."""
    return f"dynashape_{estimator}_state.pt"


def _get(config: Any, key: str, default: Any = None) -> Any:
    if config is None:
        return default
    if isinstance(config, Mapping) or hasattr(config, "get"):
        return config.get(key, default)
    return getattr(config, key, default)


def run_identity(config: Any) -> dict[str, str]:
    """The run a state belongs to: verl's ``trainer.project_name`` and ``trainer.experiment_name``."""
    trainer = _get(config, "trainer")
    return {
        "project_name": str(_get(trainer, "project_name", "")),
        "experiment_name": str(_get(trainer, "experiment_name", "")),
    }


def _absolute(path: str) -> str:
    # verl resolves relative checkpoint folders against the working directory; so do we.
    return path if os.path.isabs(path) else os.path.join(os.getcwd(), path)


def state_path(config: Any, estimator: str, global_step: int, state_dir: str | None, *, resuming: bool) -> str:
    """Where the state of `estimator` at `global_step` lives.

    Args:
        config: verl's full config (``trainer.*`` is read).
        estimator: Estimator name.
        global_step: The step of the checkpoint being written or resumed.
        state_dir: ``algorithm.<name>.state_dir`` (None: beside verl's checkpoint).
        resuming: True when loading; ``resume_mode=resume_path`` then names the folder directly.
    """
    trainer = _get(config, "trainer")
    if state_dir is not None:
        folder = os.path.join(_absolute(state_dir), f"global_step_{global_step}")
    elif resuming and _get(trainer, "resume_mode", "auto") == "resume_path":
        folder = _absolute(str(_get(trainer, "resume_from_path")))
    else:
        folder = os.path.join(_absolute(str(_get(trainer, "default_local_dir"))), f"global_step_{global_step}")
    return os.path.join(folder, state_file_name(estimator))


def save_state_atomic(state: Mapping[str, Any], path: str) -> None:
    """``torch.save`` of ``state`` (as a dict) to ``path`` atomically (``dynashape.io.state.torch_save``)."""
    torch_save(path, dict(state))


def write_state_file(
    path: str,
    *,
    estimator: str,
    global_step: int,
    run: Mapping[str, str],
    shaper_state: Any,
    validated: bool = False,
) -> None:
    """Write one state payload (see the module docstring) atomically."""
    payload = {
        "format": STATE_FORMAT,
        "estimator": estimator,
        "global_step": int(global_step),
        "run": {str(k): str(v) for k, v in run.items()},
        "shaper": shaper_state,
        "validated": bool(validated),
    }
    save_state_atomic(payload, path)


def load_state_file(path: str, *, estimator: str, global_step: int, run: Mapping[str, str]) -> Any:
    """The shaper state in a payload written by :func:`write_state_file` (:func:`read_state_file`'s checks)."""
    return read_state_file(path, estimator=estimator, global_step=global_step, run=run)["shaper"]


def read_state_file(path: str, *, estimator: str, global_step: int, run: Mapping[str, str]) -> dict[str, Any]:
    """Read and check a payload written by :func:`write_state_file`; returns the whole payload.

    Only plain values and tensors are accepted (``weights_only=True``): a file that would need arbitrary
    unpickling (code execution) is refused, never run.

    Raises:
        StateFileError: (a ValueError) naming `path`, when the file is not a plain payload (empty, truncated,
            corrupt, or needing arbitrary unpickling), belongs to another estimator or run, or was written at
            another step.
    """
    try:
        payload = torch_load(path, map_location="cpu")
    except StateFileError as err:
        raise StateFileError(
            path,
            f"not a dynashape shaper state of plain values and tensors ({err.problem}); move it away to start the "
            "shaper fresh",
        ) from None
    if not isinstance(payload, dict) or payload.get("format") != STATE_FORMAT or "shaper" not in payload:
        raise StateFileError(path, f"not a dynashape shaper state (format {STATE_FORMAT}); got keys {_keys(payload)}")
    if payload.get("estimator") != estimator:
        raise StateFileError(path, f"state of estimator '{payload.get('estimator')}', this run uses '{estimator}'")
    saved_run = payload.get("run") if isinstance(payload.get("run"), dict) else {}
    if saved_run != dict(run):
        raise StateFileError(
            path,
            f"shaper state of another run ({_describe(saved_run)}); this run is {_describe(run)}. "
            "Resume with the same trainer.project_name and trainer.experiment_name, or move the file away to "
            "start the shaper fresh",
        )
    saved_step = payload.get("global_step")
    if type(saved_step) is not int or saved_step != int(global_step):
        raise StateFileError(path, f"written at global step {saved_step}, but verl resumes from step {global_step}")
    return payload


def _keys(value: Any) -> list[str]:
    return sorted(map(str, value)) if isinstance(value, dict) else [type(value).__name__]


def _describe(run: Mapping[str, str]) -> str:
    return f"project_name={run.get('project_name')!r}, experiment_name={run.get('experiment_name')!r}"
