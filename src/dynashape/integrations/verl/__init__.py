"""dynashape as a verl 0.9.x plugin: LEAD, MEDS and the baselines as verl advantage estimators.

Install ``dynashape[verl]``; verl loads this module through the ``verl.plugins`` entry point on every
``import verl`` (driver, actor and reward workers). Then, in any verl launch command::

    algorithm.adv_estimator=lead +algorithm.lead.b_max=4000 +algorithm.lead.l_min=1000
    reward.custom_reward_function.path=pkg://dynashape.integrations.verl
    reward.custom_reward_function.name=compute_score
    # optional, for verifier verdicts, padding flags and MEDS fingerprints:
    trainer.use_v1=true trainer.v1.trainer_mode=dynashape

Check every node image once (imports the plugin as verl does, lists the estimators, fails loudly)::

    python -m dynashape.integrations.verl --check

Importing this module:
  * registers every dynashape shaper as a verl estimator of the same name (``lead``, ``lead_meds``, ``meds``,
    ``shorterbetter``, ``grpo_length``, the length rewards ...; not ``grpo`` and ``gdpo``, which verl has) with
    ``verl.trainer.ppo.core_algos.register_adv_est`` (see :mod:`dynashape.integrations.verl.estimators`);
  * arranges, per process and only when that process imports them, that the v1 trainer ``dynashape`` is
    registered (:mod:`dynashape.integrations.verl.trainer`), that the FSDP actor's ``forward_step`` can return
    MEDS fingerprints when the trainer asks for them (:mod:`dynashape.integrations.verl.fingerprint`), and that
    verl's trainers validate the configuration at start-up and save/restore the shaper state with their
    checkpoints (:mod:`dynashape.integrations.verl.hooks`).

Without verl installed the module still imports (``compute_score`` works anywhere) and registers nothing. On a
verl release the engine suite does not test (:mod:`dynashape.integrations.verl.versions`) it registers nothing
either: it logs one line naming what it would override and ``DYNASHAPE_VERL_ANY_VERSION=1``, the setting that
skips the check, and verl's trainers refuse our estimators with that line when they are built.
Interfaces of verl 0.9.1 we rely on (checked by tests/integrations/test_verl_*.py):
  * ``core_algos.register_adv_est(name)(fn)``; ``ray_trainer.compute_advantage(data, adv_estimator, gamma, lam,
    num_repeat, norm_adv_by_std_in_grpo, config)`` calls ``fn(token_level_rewards=, response_mask=, config=,
    index=)``.
  * ``verl.trainer.ppo.v1.trainer_base.register_trainer(name)`` on a ``PPOTrainer`` subclass.
  * ``FSDPEngineWithLMHead.forward_step(self, micro_batch: TensorDict, loss_function, forward_only)
    -> (loss, {"model_output": dict, "loss": float, "metrics": dict})``.
"""

from __future__ import annotations

import importlib.util
import logging
import os
import sys
from typing import Any

__all__ = ["ESTIMATOR_NAMES", "compute_score", "register"]


def __getattr__(name: str) -> Any:
    # The estimators load lazily (here and in register(), under its error handling), so that a plugin that
    # cannot import them (a dependency missing on a node image) still lets `python -m ... --check` report it.
    if name == "ESTIMATOR_NAMES":  # read from the shaper registry each time (estimators.estimator_names)
        from dynashape.integrations.verl.estimators import estimator_names

        return estimator_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")


logger = logging.getLogger(__name__)

#: Set to "0" to keep the FSDP forward untouched in every process (fingerprints then stay unavailable).
PATCH_ENV = "DYNASHAPE_VERL_PATCH_FSDP"
TRAINER_NAME = "dynashape"


def compute_score(data_source: Any, solution_str: str, ground_truth: Any, extra_info: Any = None, **kwargs: Any) -> Any:
    """verl custom reward function: the dynashape verifier (``dynashape.rewards.scoring.compute_score``).

    Use with ``reward.custom_reward_function.path=pkg://dynashape.integrations.verl`` and ``.name=compute_score``.
    verl calls it from a thread pool in its reward workers; the verifier imports lazily and never imports verl.
    """
    from dynashape.rewards.scoring import compute_score as _score

    return _score(data_source, solution_str, ground_truth, extra_info, **kwargs)


def register() -> list[str]:
    """Register our estimators with verl (idempotent) and arm the lazy trainer/FSDP hooks.

    Returns:
        The estimator names registered: every registered shaper but verl's own names
        (``estimators.estimator_names``); call it again after registering a shaper of your own.
    """
    from verl.trainer.ppo import core_algos

    from dynashape.integrations._post_import import when_imported
    from dynashape.integrations.verl.estimators import estimator_names, make_estimator
    from dynashape.integrations.verl.versions import VerlVersionError, installed_verl, version_problem

    problem = version_problem(installed_verl())
    if problem is not None:
        # verl swallows a plugin's import error and would fail only after the first rollout ("Unknown advantage
        # estimator"): leave the trainers a constructor that refuses our estimators with this line instead.
        when_imported("verl.trainer.ppo.v1.trainer_base", lambda module: _refuse(module.PPOTrainer, problem))
        when_imported("verl.trainer.ppo.ray_trainer", lambda module: _refuse(module.RayPPOTrainer, problem))
        raise VerlVersionError(problem)

    registered = []
    for name in estimator_names():
        existing = core_algos.ADV_ESTIMATOR_REGISTRY.get(name)
        if existing is not None and getattr(existing, "__module__", "") == make_estimator.__module__:
            registered.append(name)  # registered by an earlier import of this module (e.g. a reload)
            continue
        core_algos.register_adv_est(name)(make_estimator(name))
        registered.append(name)

    when_imported("verl.trainer.ppo.v1.trainer_base", _patch_v1_trainer)
    when_imported("verl.trainer.ppo.ray_trainer", _patch_legacy_trainer)
    when_imported("verl.trainer.ppo.v1", _register_trainer)
    if os.environ.get(PATCH_ENV, "1") != "0":
        when_imported("verl.workers.engine.fsdp.transformer_impl", _patch_fsdp)
    return registered


def _refuse(cls: type, problem: str) -> None:
    from dynashape.integrations.verl.hooks import patch_refusal

    patch_refusal(cls, problem)


def _patch_v1_trainer(module: Any) -> None:
    from dynashape.integrations.verl.hooks import patch_advantage_metrics, patch_trainer_class

    patch_trainer_class(module.PPOTrainer)
    patch_advantage_metrics(module.PPOTrainer)


def _patch_legacy_trainer(module: Any) -> None:
    from dynashape.integrations.verl.hooks import patch_compute_advantage, patch_trainer_class

    patch_trainer_class(module.RayPPOTrainer)
    patch_compute_advantage(module)


def _register_trainer(_module: Any) -> None:
    from dynashape.integrations.verl.trainer import register_trainer

    register_trainer(TRAINER_NAME)


def _patch_fsdp(module: Any) -> None:
    from dynashape.integrations.verl.fingerprint import patch_forward_step

    patch_forward_step(module.FSDPEngineWithLMHead)


REGISTER_ERROR: BaseException | None = None
"""Why registering failed, when this package was imported by ``python -m dynashape.integrations.verl --check``
(which must report the error rather than die of it) or verl's release is untested; None otherwise."""

if importlib.util.find_spec("verl") is not None:
    # verl swallows plugin import errors at debug level; log ours loudly instead of vanishing silently.
    from dynashape.integrations.verl.versions import VerlVersionError

    try:
        register()
    except VerlVersionError as err:
        # One line, not a traceback: it says what to do. Not raised: the refusing trainer hooks import this
        # package again (a failed import would re-run it), and verl's loader would swallow the error anyway.
        logger.error("%s", err)
        REGISTER_ERROR = err
    except Exception as err:
        logger.exception("dynashape: registering the verl plugin failed")
        # While `python -m` resolves this package as its target, argv[0] is still "-m": the doctor in
        # __main__.py then reports the failure as its step 2 instead of never running.
        if sys.argv[:1] != ["-m"]:
            raise
        REGISTER_ERROR = err
