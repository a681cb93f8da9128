"""dynashape in SkyRL 0.4.0: LEAD and the field's length methods as SkyRL advantage estimators.

Install ``dynashape[skyrl]`` and launch SkyRL's trainer through dynashape's entrypoint, which adds the shaper's
config section, registers the estimators and saves the shaper's state with SkyRL's checkpoints::

    python -m dynashape.integrations.skyrl trainer.algorithm.advantage_estimator=lead \\
        trainer.algorithm.lead.b_max=4000 ...                 # any of SkyRL's own overrides

or through SkyRL's own entry point::

    python -m skyrl.train.entrypoints.main_base \\
        trainer.override_entrypoint=dynashape.integrations.skyrl.entrypoint ...

``register()`` adds every dynashape shaper SkyRL lacks (all but ``grpo``) to SkyRL's
``AdvantageEstimatorRegistry`` (skyrl/backends/skyrl_train/utils/ppo_utils.py) under its own name; the estimators
are in :mod:`dynashape.integrations.skyrl.estimators` (the vocabulary: docs/engines.md). A shaper that reads what
SkyRL does not hand an estimator (MEDS fingerprints, budgets, ...) is registered but refused with one line
naming what it lacks (:data:`dynashape.integrations.skyrl.settings.UNAVAILABLE`) when the run is configured.

On a SkyRL release the engine suite does not test, ``register()`` raises one line naming what the adapter relies
on and ``DYNASHAPE_SKYRL_ANY_VERSION=1``, the setting that skips the check
(:mod:`dynashape.integrations.skyrl.versions`).
"""

from __future__ import annotations

from typing import Any

__all__ = ["SkyRLVersionError", "register"]


class SkyRLVersionError(RuntimeError):
    """SkyRL's installed release is not one the adapter was tested on (one line: what and how to skip)."""


def register() -> tuple[str, ...]:
    """Register every estimator in :func:`~dynashape.integrations.skyrl.estimators.estimator_names` with SkyRL's
    registry (a name already there is left alone); returns the names registered now.

    Raises:
        SkyRLVersionError: an untested SkyRL release, unless ``DYNASHAPE_SKYRL_ANY_VERSION=1``.
        ImportError: SkyRL is not installed.
    """
    from dynashape.integrations.skyrl.estimators import estimator_names, make_estimator
    from dynashape.integrations.skyrl.versions import installed_skyrl, version_problem

    problem = version_problem(installed_skyrl())
    if problem is not None:
        raise SkyRLVersionError(problem)
    from skyrl.backends.skyrl_train.utils.ppo_utils import AdvantageEstimatorRegistry

    present = set(AdvantageEstimatorRegistry.list_available())
    added = []
    for name in estimator_names():
        if name not in present:
            AdvantageEstimatorRegistry.register(name, make_estimator(name))
            added.append(name)
    return tuple(added)


def __getattr__(name: str) -> Any:
    if name == "ESTIMATOR_NAMES":
        from dynashape.integrations.skyrl.estimators import estimator_names

        return estimator_names()
    raise AttributeError(f"module {__name__!r} has no attribute {name!r}")
