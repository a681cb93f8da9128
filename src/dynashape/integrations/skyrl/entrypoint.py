"""SkyRL's trainer with a dynashape estimator: SkyRL's own ``main_base`` entrypoint, plus the shaper.

``python -m dynashape.integrations.skyrl <SkyRL overrides>`` (or SkyRL's
``trainer.override_entrypoint=dynashape.integrations.skyrl.entrypoint``) does what SkyRL's
``skyrl.train.entrypoints.main_base.main`` does (parse, ``validate_cfg``, ``initialize_ray``, run
``BasePPOExp`` in one Ray task) with four additions:

* the config class has a section ``trainer.algorithm.<name>`` for every estimator (SkyRL's ``make_config`` with
  an ``AlgorithmConfig`` subclass: SkyRL refuses keys its dataclasses do not declare), checked with
  :func:`check_config` before Ray starts, each error naming the key;
* the estimators are registered (:func:`dynashape.integrations.skyrl.register`) in the driver, before SkyRL
  syncs its registries to their Ray actor, and again in the trainer's Ray task;
* the trainer gets :func:`dynashape.integrations.skyrl.callbacks.make_callback` (state with each checkpoint,
  restored on resume, metrics in SkyRL's logs);
* the estimator is told the response cap (``generator.sampling_params.max_generate_length``) for ``truncated``.
"""

from __future__ import annotations

import dataclasses
import sys
from collections.abc import Sequence
from typing import Any

from dynashape.integrations.skyrl import register
from dynashape.integrations.skyrl.callbacks import make_callback
from dynashape.integrations.skyrl.estimators import configure_run, estimator_names, reset_sessions
from dynashape.integrations.skyrl.settings import parse_settings

__all__ = ["check_config", "config_class", "main", "run_experiment", "with_shaper"]

#: SkyRL options that would change what the shaper computed, refused with one of ours.
_REFUSED = (
    ("generator.step_wise_trajectories", "SkyRL then hands estimators an all-ones response mask (no lengths)"),
    ("trainer.algorithm.advantage_batch_normalize", "it re-normalises the shaped advantages over the batch"),
)


def config_class() -> type:
    """SkyRL's ``SkyRLTrainConfig`` with a ``trainer.algorithm.<name>`` dict for every dynashape estimator."""
    from skyrl.train.config.config import AlgorithmConfig, make_config

    sections = [
        (name, dict[str, Any], dataclasses.field(default_factory=dict))  # type: ignore[misc]
        for name in estimator_names()
    ]
    algorithm = dataclasses.make_dataclass("DynashapeAlgorithmConfig", sections, bases=(AlgorithmConfig,))
    return make_config(algorithm_cls=algorithm)


def _option(cfg: Any, dotted: str) -> Any:
    value = cfg
    for part in dotted.split("."):
        value = getattr(value, part)
    return value


def check_config(cfg: Any) -> None:
    """Refuse, before Ray starts, a run whose dynashape estimator cannot run as configured (errors name keys)."""
    name = cfg.trainer.algorithm.advantage_estimator
    if name not in estimator_names():
        return  # one of SkyRL's own estimators: nothing of ours to check
    parse_settings(name, cfg.trainer.algorithm)
    for dotted, why in _REFUSED:
        if _option(cfg, dotted):
            raise ValueError(f"{dotted}=true is refused with the '{name}' estimator: {why}")


def with_shaper(base: type) -> type:
    """`base` (SkyRL's ``BasePPOExp`` or a subclass of it) whose trainer carries the dynashape callback."""

    class DynashapeExp(base):  # type: ignore[misc,valid-type]
        def get_trainer(self, *args: Any, **kwargs: Any) -> Any:
            trainer = super().get_trainer(*args, **kwargs)
            trainer.add_callback(make_callback(self.cfg))
            return trainer

    return DynashapeExp


def run_experiment(cfg: Any, base: type | None = None) -> None:
    """SkyRL's ``skyrl_entrypoint`` body with the shaper: runs inside the Ray task that owns the trainer.

    Args:
        cfg: The parsed config (:func:`config_class`).
        base: The experiment class to extend (default SkyRL's ``main_base.BasePPOExp``; a subclass replaces
            parts of SkyRL's set-up, as SkyRL's own examples do).
    """
    if base is None:
        from skyrl.train.entrypoints.main_base import BasePPOExp as base

    register()
    reset_sessions()
    configure_run(max_response_length=cfg.generator.sampling_params.max_generate_length)
    with_shaper(base)(cfg).run()


def main(argv: Sequence[str] | None = None, *, base: type | None = None) -> None:
    """Parse SkyRL overrides (``trainer.override_entrypoint=...`` dropped), check, start Ray, train
    (``base``: :func:`run_experiment`'s)."""
    import ray
    from skyrl.train.utils import validate_cfg
    from skyrl.train.utils.utils import initialize_ray

    args = [a for a in (sys.argv[1:] if argv is None else argv) if not a.startswith("trainer.override_entrypoint=")]
    register()
    cfg = config_class().from_cli_overrides(args)
    check_config(cfg)
    validate_cfg(cfg)
    initialize_ray(cfg)
    ray.get(ray.remote(num_cpus=1)(run_experiment).remote(cfg, base))


if __name__ == "__main__":
    main()
