"""What the plugin attaches to verl's trainers (v1 ``PPOTrainer`` and legacy ``RayPPOTrainer``), in every path.

Armed by :func:`dynashape.integrations.verl.register` with ``when_imported``, so each process patches exactly the
trainer modules it loads. Every wrapper is a no-op unless ``algorithm.adv_estimator`` is one of our estimators.

* ``__init__``: :func:`dynashape.integrations.verl.checks.check_config` first, so a configuration we cannot run
  fails when verl builds the trainer, before workers, rollout servers or the first rollout.
* ``_save_checkpoint``: writes the shaper state into the checkpoint's ``global_step_N`` folder (see
  :mod:`dynashape.integrations.verl.state`) *before* verl writes ``latest_checkpointed_iteration.txt``, so the
  tracker never points at a step without our state.
* ``_load_checkpoint``: after verl has chosen the step it resumes from (``self.global_steps``), restores the state
  saved at that step, refusing one from another run.
* v1 ``_compute_advantage``: adds the shaper's metrics (``lead/*``, ``meds/*``, ``dynashape/*``) to verl's step
  metrics, in every v1 trainer mode (verl's default ``sync`` one included, which calls our estimator through
  ``compute_advantage`` but logs nothing of it).
* legacy ``ray_trainer.compute_advantage``: verl's legacy trainer copies ``reward_extra_info`` into
  ``non_tensor_batch``; its ``acc`` becomes the estimator's verdict (the v1 trainer only fetches it in the
  ``dynashape`` trainer mode).

verl 0.9.1 signatures relied on: ``PPOTrainer.__init__(self, config)``, ``RayPPOTrainer.__init__(self, config,
...)``, ``_save_checkpoint(self)``, ``_load_checkpoint(self)`` (sets ``self.global_steps``), ``compute_advantage(data,
adv_estimator, ...)`` with ``data.non_tensor_batch``.
"""

from __future__ import annotations

import functools
import logging
import os
from collections.abc import Callable
from typing import Any

from dynashape.integrations.verl.checks import check_config
from dynashape.integrations.verl.estimators import (
    EstimatorExtras,
    correct_from_acc,
    estimator_names,
    last_metrics,
    pending_extras,
    provide_extras,
    session_for,
)
from dynashape.integrations.verl.state import load_state_file, run_identity, state_path, write_state_file
from dynashape.state import StateFileError

__all__ = [
    "load_shaper_state",
    "patch_advantage_metrics",
    "patch_compute_advantage",
    "patch_refusal",
    "patch_trainer_class",
    "save_shaper_state",
]

logger = logging.getLogger(__name__)

_MARK = "_dynashape_patched"


def _our_estimator(config: Any) -> str | None:
    try:
        name = str(config.algorithm.adv_estimator)
    except AttributeError:
        return None
    return name if name in estimator_names() else None


def save_shaper_state(trainer: Any) -> str | None:
    """Write the shaper state for ``trainer.global_steps``; returns the file written (None: not ours)."""
    config = trainer.config
    name = _our_estimator(config)
    if name is None:
        return None
    session = session_for(name, config.algorithm)
    step = int(trainer.global_steps)
    path = state_path(config, name, step, session.settings.state_dir, resuming=False)
    write_state_file(
        path, estimator=name, global_step=step, run=run_identity(config), shaper_state=session.shaper.state_dict()
    )
    logger.info("dynashape: saved the '%s' shaper state to %s", name, path)
    return path


def load_shaper_state(trainer: Any) -> str | None:
    """Restore the shaper state saved at the step verl resumed from; returns the file read (None: none read).

    Raises:
        StateFileError: (a ValueError naming the file) the file is missing (unless ``algorithm.<name>.fresh_state``
            is true), is not a plain dynashape state, belongs to another run or step, or the shaper cannot load it.
    """
    config = trainer.config
    name = _our_estimator(config)
    step = int(getattr(trainer, "global_steps", 0) or 0)
    if name is None or step == 0:
        return None
    session = session_for(name, config.algorithm)
    path = state_path(config, name, step, session.settings.state_dir, resuming=True)
    if not os.path.exists(path):
        # A silent fresh start would train on a reset EMA / memory (a wrong state_dir, a checkpoint copied
        # without our file): only an explicit setting allows it.
        if not session.settings.fresh_state:
            raise StateFileError(
                path,
                f"no '{name}' shaper state for the step verl resumes from ({step}); point "
                f"algorithm.{name}.state_dir at the folder holding global_step_{step}/, or set "
                f"+algorithm.{name}.fresh_state=true to start the shaper fresh",
            )
        logger.warning("dynashape: %s not found; the '%s' shaper starts fresh at step %d", path, name, step)
        return None
    state = load_state_file(path, estimator=name, global_step=step, run=run_identity(config))
    try:
        session.shaper.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise StateFileError(path, f"the '{name}' shaper cannot load this state: {err}") from err
    logger.info("dynashape: restored the '%s' shaper state from %s", name, path)
    return path


def _config_arg(args: tuple, kwargs: dict) -> Any:
    return kwargs["config"] if "config" in kwargs else (args[0] if args else None)


def patch_trainer_class(cls: type) -> None:
    """Wrap ``cls.__init__``, ``_save_checkpoint`` and ``_load_checkpoint`` once (idempotent)."""
    if cls.__dict__.get(_MARK, False):
        return
    init, save, load = cls.__init__, cls._save_checkpoint, cls._load_checkpoint

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        config = _config_arg(args, kwargs)
        if config is not None:
            check_config(config)
        init(self, *args, **kwargs)

    @functools.wraps(save)
    def _save_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        save_shaper_state(self)
        return save(self, *args, **kwargs)

    @functools.wraps(load)
    def _load_checkpoint(self: Any, *args: Any, **kwargs: Any) -> Any:
        result = load(self, *args, **kwargs)
        load_shaper_state(self)
        return result

    cls.__init__ = __init__
    cls._save_checkpoint = _save_checkpoint
    cls._load_checkpoint = _load_checkpoint
    setattr(cls, _MARK, True)


def patch_refusal(cls: type, problem: str) -> None:
    """Wrap ``cls.__init__`` alone so that a trainer configured with one of our estimators raises
    :class:`~dynashape.integrations.verl.versions.VerlVersionError` (`problem`) before it builds anything; other
    estimators construct as verl alone would (idempotent). Armed instead of every other hook on an untested verl."""
    from dynashape.integrations.verl.versions import VerlVersionError

    if cls.__dict__.get(_MARK, False):
        return
    init = cls.__init__

    @functools.wraps(init)
    def __init__(self: Any, *args: Any, **kwargs: Any) -> None:
        config = _config_arg(args, kwargs)
        if config is not None and _our_estimator(config) is not None:
            raise VerlVersionError(problem)
        init(self, *args, **kwargs)

    cls.__init__ = __init__
    setattr(cls, _MARK, True)


def patch_advantage_metrics(cls: type) -> None:
    """Wrap ``cls._compute_advantage(self, batch, metrics)`` (verl's v1 ``PPOTrainer``) once so that the shaper's
    metrics of the call join verl's step ``metrics`` (idempotent)."""
    original = cls.__dict__["_compute_advantage"]
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def _compute_advantage(self: Any, batch: Any, metrics: dict, *args: Any, **kwargs: Any) -> Any:
        result = original(self, batch, metrics, *args, **kwargs)
        name = _our_estimator(self.config)
        if name is not None:
            metrics.update(last_metrics(name))
        return result

    setattr(_compute_advantage, _MARK, True)
    cls._compute_advantage = _compute_advantage


def patch_compute_advantage(module: Any) -> None:
    """Wrap ``module.compute_advantage`` (verl's legacy ``ray_trainer``) so ``non_tensor_batch['acc']`` becomes the
    verdict of our estimators when no trainer mode has handed extras over already (idempotent)."""
    original: Callable[..., Any] = module.compute_advantage
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        estimator = kwargs.get("adv_estimator", args[0] if args else None)
        non_tensor = getattr(data, "non_tensor_batch", None) or {}
        if str(estimator) in estimator_names() and not pending_extras() and "acc" in non_tensor:
            correct = correct_from_acc(non_tensor["acc"])
            if correct is not None:
                with provide_extras(EstimatorExtras(correct=correct)):
                    return original(data, *args, **kwargs)
        return original(data, *args, **kwargs)

    setattr(compute_advantage, _MARK, True)
    module.compute_advantage = compute_advantage
