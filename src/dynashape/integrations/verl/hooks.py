"""What the plugin attaches to verl's trainers (v1 ``PPOTrainer`` and legacy ``RayPPOTrainer``), in every path.

Armed by :func:`dynashape.integrations.verl.register` with ``when_imported``, so each process patches exactly the
trainer modules it loads. Every wrapper is a no-op unless ``algorithm.adv_estimator`` is one of our estimators.

* ``__init__``: :func:`dynashape.integrations.verl.checks.check_config` first, so a configuration we cannot run
  fails when verl builds the trainer, before workers, rollout servers or the first rollout.
* ``_save_checkpoint``: writes the shaper state into the checkpoint's ``global_step_N`` folder (see
  :mod:`dynashape.integrations.verl.state`) *before* verl writes ``latest_checkpointed_iteration.txt``, so the
  tracker never points at a step without our state.
* ``_validate``: hands the shaper what it reads from verl's validation (AALC's accuracy, LASER-D's monitor
  rollouts collected by the ``dynashape`` trainer mode) and, since verl saves a checkpoint before validating at
  the same step, rewrites that step's state file after the observation (:func:`observe_validation`).
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
import math
import os
import re
from collections.abc import Callable, Mapping
from typing import Any

import numpy as np
import torch

from dynashape.integrations.verl.checks import check_config
from dynashape.integrations.verl.convert import budgets_from_non_tensor, flags_from_info, truncated_from_lengths
from dynashape.integrations.verl.estimators import (
    EstimatorExtras,
    correct_from_acc,
    estimator_names,
    last_metrics,
    pending_extras,
    provide_extras,
    session_for,
)
from dynashape.integrations.verl.settings import FIRST_VALIDATION_METRIC
from dynashape.integrations.verl.state import read_state_file, run_identity, state_path, write_state_file
from dynashape.io.state import StateFileError
from dynashape.shapers import shaper_needs

__all__ = [
    "load_shaper_state",
    "observe_validation",
    "patch_advantage_metrics",
    "patch_compute_advantage",
    "patch_refusal",
    "patch_trainer_class",
    "save_shaper_state",
    "validation_accuracy",
    "wrap_validate",
]

logger = logging.getLogger(__name__)

_MARK = "_dynashape_patched"
#: verl's validation metric of a data source's mean reward over N samples (``val-core/gsm8k/reward/mean@4``).
_REWARD_MEAN = re.compile(r"val-(core|aux)/[^/]+/reward/mean@\d+")


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
        path,
        estimator=name,
        global_step=step,
        run=run_identity(config),
        shaper_state=session.shaper.state_dict(),
        validated=session.observed_step == step,
    )
    session.saved_step = step
    logger.info("dynashape: saved the '%s' shaper state to %s", name, path)
    return path


def validation_accuracy(metrics: Mapping[str, Any], key: str) -> tuple[str, float]:
    """The metric handed to a shaper that reads the validation accuracy (AALC), and its name.

    Args:
        metrics: what verl's ``_validate`` returned (``val-core/<data_source>/<var>/mean@N``, ``val-aux/...``).
        key: ``algorithm.<name>.validation_metric``: a key of `metrics`, or ``first`` for the first
            ``val-*/<data_source>/reward/mean@N`` in verl's order: the mean reward of the first data source, the
            first metric verl's validation reports and the one AALC's code reads.

    Raises:
        ValueError: no such metric (naming the setting and the keys verl reported), or not a finite number.
    """
    if key == FIRST_VALIDATION_METRIC:
        found = [k for k in metrics if _REWARD_MEAN.fullmatch(str(k))]
        if not found:
            raise ValueError(
                f"validation_metric=first: verl's validation reported no val-*/<data_source>/reward/mean@N metric "
                f"(it reported {sorted(map(str, metrics))}); name one with +algorithm.<name>.validation_metric=KEY"
            )
        key = found[0]
    elif key not in metrics:
        raise ValueError(f"validation_metric={key}: not among verl's validation metrics {sorted(map(str, metrics))}")
    value = metrics[key]
    if (
        isinstance(value, bool)
        or not isinstance(value, (int, float, np.integer, np.floating))
        or not math.isfinite(value)
    ):
        raise ValueError(f"validation_metric={key}: verl reported {value!r}, not a finite number")
    return key, float(value)


def observe_validation(trainer: Any, metrics: Mapping[str, Any]) -> dict[str, float]:
    """After one of verl's validations: hand the shaper what it reads from it (``Shaper.needs``: the validation
    accuracy, AALC; the monitor rollouts, LASER-D, collected by the dynashape trainer mode), then rewrite this
    step's state file if this process saved one before validating (verl saves, then validates). Returns the
    metrics to log (``dynashape/validation_accuracy``); {} when the shaper reads nothing of it.

    The first validation of a resumed run (verl's ``val_before_train``) at the step whose saved state already holds
    that step's validation is not observed again: the state is the uninterrupted run's.
    """
    name = _our_estimator(trainer.config)
    if name is None:
        return {}
    needs = shaper_needs(name)
    if not (needs.validation_accuracy or needs.monitor_rollouts):
        return {}
    session = session_for(name, trainer.config.algorithm)
    step = int(getattr(trainer, "global_steps", 0) or 0)
    collect = getattr(trainer, "dynashape_monitor_batch", None)
    monitor = collect() if needs.monitor_rollouts and collect is not None else None
    if session.restored_validated_step == step:
        session.restored_validated_step = None
        logger.info("dynashape: the '%s' state restored at step %d holds this validation already", name, step)
        return {}
    signals: dict[str, Any] = {}
    logged: dict[str, float] = {}
    if needs.validation_accuracy:
        _, signals["validation_accuracy"] = validation_accuracy(metrics, session.settings.validation_metric)
        logged["dynashape/validation_accuracy"] = signals["validation_accuracy"]
    if needs.monitor_rollouts:
        if monitor is None:
            raise ValueError(
                f"the '{name}' shaper reads the monitor rollouts of verl's validation, which only the dynashape "
                "trainer mode collects: set trainer.use_v1=true trainer.v1.trainer_mode=dynashape"
            )
        signals["monitor"] = monitor
        logged["dynashape/monitor_rows"] = float(monitor.lengths.shape[0])
    session.shaper.observe(**signals)
    session.observed_step = step
    if session.saved_step == step:
        save_shaper_state(trainer)  # the file of this step now holds its validation too
    return logged


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
    payload = read_state_file(path, estimator=name, global_step=step, run=run_identity(config))
    state = payload["shaper"]
    session.restored_validated_step = step if payload.get("validated", False) else None
    try:
        session.shaper.load_state_dict(state)
    except (KeyError, TypeError, ValueError, RuntimeError) as err:
        raise StateFileError(path, f"the '{name}' shaper cannot load this state: {err}") from err
    logger.info("dynashape: restored the '%s' shaper state from %s", name, path)
    return path


def _config_arg(args: tuple, kwargs: dict) -> Any:
    return kwargs["config"] if "config" in kwargs else (args[0] if args else None)


def wrap_validate(validate: Callable[..., Any]) -> Callable[..., Any]:
    """verl's ``_validate(self) -> metrics`` followed by :func:`observe_validation` (its metrics are added)."""

    @functools.wraps(validate)
    def _validate(self: Any, *args: Any, **kwargs: Any) -> Any:
        metrics = validate(self, *args, **kwargs)
        logged = observe_validation(self, metrics or {})
        return {**metrics, **logged} if logged and isinstance(metrics, dict) else metrics

    return _validate


def patch_trainer_class(cls: type) -> None:
    """Wrap ``cls.__init__``, ``_save_checkpoint``, ``_load_checkpoint`` and ``_validate`` once (idempotent)."""
    if cls.__dict__.get(_MARK, False):
        return
    init, save, load, validate = cls.__init__, cls._save_checkpoint, cls._load_checkpoint, cls._validate

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
    cls._validate = wrap_validate(validate)
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


def legacy_truncated(tensors: Any) -> torch.Tensor | None:
    """Bool [bs] of the rows the legacy trainer's rollout cut: verl's legacy ``DataProto`` pads ``responses`` to
    the rollout's ``response_length``, so a row whose response mask fills that width reached the cap. None when
    the batch lacks ``responses`` or ``response_mask``."""
    if tensors is None or "responses" not in tensors.keys() or "response_mask" not in tensors.keys():
        return None
    cap = int(tensors["responses"].shape[-1])
    return truncated_from_lengths(tensors["response_mask"].sum(-1).cpu(), cap) if cap > 0 else None


def patch_compute_advantage(module: Any) -> None:
    """Wrap ``module.compute_advantage`` (verl's legacy ``ray_trainer``) so that, when no trainer mode has handed
    extras over already, ``non_tensor_batch['acc']`` becomes the verdict of our estimators and, for a shaper that
    reads budgets (L1), ``algorithm.<name>.budget_key`` of the dataset's fields the budgets (idempotent)."""
    original: Callable[..., Any] = module.compute_advantage
    if getattr(original, _MARK, False):
        return

    @functools.wraps(original)
    def compute_advantage(data: Any, *args: Any, **kwargs: Any) -> Any:
        estimator = str(kwargs.get("adv_estimator", args[0] if args else None))
        non_tensor = getattr(data, "non_tensor_batch", None) or {}
        if estimator in estimator_names() and not pending_extras():
            correct = correct_from_acc(non_tensor["acc"]) if "acc" in non_tensor else None
            budgets = None
            if shaper_needs(estimator).budgets:
                config = kwargs.get("config", args[5] if len(args) > 5 else None)
                key = session_for(estimator, config).settings.budget_key
                budgets = budgets_from_non_tensor(non_tensor, key)
            formatted = flags_from_info(non_tensor.get("formatted"), "formatted")
            truncated = legacy_truncated(getattr(data, "batch", None))
            if any(v is not None for v in (correct, budgets, formatted, truncated)):
                extras = EstimatorExtras(correct=correct, budgets=budgets, truncated=truncated, formatted=formatted)
                with provide_extras(extras):
                    return original(data, *args, **kwargs)
        return original(data, *args, **kwargs)

    setattr(compute_advantage, _MARK, True)
    module.compute_advantage = compute_advantage
