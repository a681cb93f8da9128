"""``trainer.algorithm.<name>.*`` of a SkyRL config -> validated shaper parameters plus the adapter's options.

Shaper parameters are checked by the shaper's own config class (``dynashape.shapers.check_shaper_params``, the
check ``get_shaper`` runs); every error names the full SkyRL key (``trainer.algorithm.lead.b_max: ...``). The
section exists in the config class of :mod:`dynashape.integrations.skyrl.entrypoint` (one dict field per
estimator on SkyRL's ``AlgorithmConfig``, made with SkyRL's ``make_config``).
"""

from __future__ import annotations

from collections.abc import Mapping
from dataclasses import dataclass, fields
from typing import Any

import numpy as np

from dynashape.shapers import Shaper, check_shaper_params, config_class, get_shaper, shaper_needs
from dynashape.shapers.parts.penalties import PENALTY_KEYS

__all__ = ["ADAPTER_KEYS", "UNAVAILABLE", "EstimatorSettings", "parse_settings", "unavailable_reason"]

#: Keys under trainer.algorithm.<name> that configure the adapter rather than the shaper.
ADAPTER_KEYS: tuple[str, ...] = ("fresh_state", "correct_threshold", "residual_reward")

#: What a shaper may read (``ShaperNeeds`` fields) that SkyRL 0.4.0 does not hand its advantage estimators, and
#: why; a shaper that reads one of them is refused with that line.
UNAVAILABLE: dict[str, str] = {
    "fingerprints": (
        "MEDS fingerprints, which SkyRL cannot give: its policy forward runs inside its FSDP/Megatron worker "
        "actors, which return only log-probs to the trainer, and it has no hook there without patching the worker"
    ),
    "prompt_keys": "stable prompt keys across steps, which SkyRL's estimators do not get (uids are per step)",
    "budgets": "each prompt's token budget, which SkyRL does not pass to its estimators",
    "formatted": "the verifier's 'formatted' flag, which SkyRL's scalar rewards do not carry",
    "validation_accuracy": "the validation accuracy after each evaluation, which the adapter does not hand over",
    "monitor_rollouts": "a monitor set's rollouts, which SkyRL's trainer does not sample",
    "drops_rows": "rows dropped from the loss, which SkyRL's trainer cannot do from an estimator",
}


def unavailable_reason(name: str) -> str | None:
    """Why shaper `name` cannot run as a SkyRL estimator (one line), or None when it can."""
    needs = shaper_needs(name)
    missing = [why for field, why in UNAVAILABLE.items() if getattr(needs, field)]
    if not missing:
        return None
    return f"the '{name}' advantage estimator is not available in SkyRL: it reads {missing[0]}"


@dataclass(frozen=True, kw_only=True)
class EstimatorSettings:
    """What one ``trainer.algorithm.<name>`` section resolves to.

    Attributes:
        name: Estimator (= shaper) name.
        shaper_params: Keyword parameters of the shaper, already accepted by its config class.
        fresh_state: When SkyRL resumes from a checkpoint without this estimator's state file: False (default)
            refuses, naming the file; True starts the shaper fresh (LEAD's EMA, A-DLP's multiplier).
        correct_threshold: The verdict: a rollout is correct when its summed token-level reward exceeds this
            (default 0.5, the midpoint of a 0/1 score). SkyRL's reward is one float per response (its
            environment's ``step`` reward), so this is the only verdict; refused with
            ``trainer.algorithm.use_kl_in_reward=true``, which changes the summed reward.
        residual_reward: Pass ``score - correct`` to the shaper as one extra ``rewards`` channel (for shapers
            that take reward channels).
    """

    name: str
    shaper_params: tuple[tuple[str, Any], ...]
    fresh_state: bool = False
    correct_threshold: float = 0.5
    residual_reward: bool = False

    def build_shaper(self) -> Shaper:
        return get_shaper(self.name, **dict(self.shaper_params))


def _plain(value: Any) -> Any:
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def section_of(config: Any, name: str) -> dict[str, Any]:
    """``config.<name>`` (SkyRL's algorithm config, a dataclass or a mapping) as a plain dict; {} when absent."""
    if config is None:
        return {}
    section = config.get(name) if isinstance(config, Mapping) else getattr(config, name, None)
    if section is None:
        return {}
    if not isinstance(section, Mapping):
        raise ValueError(
            f"trainer.algorithm.{name}: expected a mapping of parameters (e.g. trainer.algorithm.{name}.b_max=4000), "
            f"got {section!r}"
        )
    return _plain(section)


def _flag(name: str, section: dict[str, Any], key: str) -> bool:
    value = section.pop(key, False)
    if not isinstance(value, bool):
        raise ValueError(f"trainer.algorithm.{name}.{key}: must be true or false, got {value!r}")
    return value


def parse_settings(name: str, config: Any) -> EstimatorSettings:
    """Validate ``trainer.algorithm.<name>.*``; errors name the full key.

    Raises:
        ValueError: the shaper cannot run in SkyRL (:func:`unavailable_reason`), an unknown key, a value the
            shaper's config rejects, or a threshold verdict with KL in the reward.
    """
    reason = unavailable_reason(name)
    if reason is not None:
        raise ValueError(reason)
    section = section_of(config, name)
    fresh_state = _flag(name, section, "fresh_state")
    residual = _flag(name, section, "residual_reward")
    if residual and shaper_needs(name).reward_channels == "refused":
        raise ValueError(f"trainer.algorithm.{name}.residual_reward=true: the '{name}' shaper takes no reward channels")
    threshold = section.pop("correct_threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
        raise ValueError(f"trainer.algorithm.{name}.correct_threshold: must be a finite number, got {threshold!r}")
    if _get(config, "use_kl_in_reward", False):
        raise ValueError(
            f"trainer.algorithm.use_kl_in_reward=true: the '{name}' estimator reads correctness from the summed "
            "reward, which the KL penalty changes; use trainer.algorithm.use_kl_loss=true instead"
        )
    allowed = {f.name for f in fields(config_class(name))} | set(PENALTY_KEYS)
    unknown = sorted(set(section) - allowed)
    if unknown:
        keys = ", ".join(sorted(allowed | set(ADAPTER_KEYS)))
        raise ValueError(
            f"trainer.algorithm.{name}.{unknown[0]}: not a parameter of the '{name}' advantage estimator; "
            f"allowed keys under trainer.algorithm.{name}: {keys}"
        )
    try:
        check_shaper_params(name, **section)
    except (TypeError, ValueError) as err:
        raise ValueError(f"trainer.algorithm.{name}: invalid parameters {section}: {err}") from err
    return EstimatorSettings(
        name=name,
        shaper_params=tuple(sorted(section.items())),
        fresh_state=fresh_state,
        correct_threshold=float(threshold),
        residual_reward=residual,
    )


def _get(config: Any, key: str, default: Any) -> Any:
    if config is None:
        return default
    return config.get(key, default) if isinstance(config, Mapping) else getattr(config, key, default)
