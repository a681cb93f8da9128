"""``algorithm.<name>.*`` of a verl config -> a validated shaper config plus our adapter options.

Shaper parameters are checked by the shaper's own frozen config class (``dynashape.shapers.config_class``);
errors name the full verl key (``algorithm.lead.b_max: ...``) so a typo in a launch command is obvious.
"""

from __future__ import annotations

import dataclasses
from collections.abc import Mapping
from dataclasses import dataclass
from typing import Any

import numpy as np

from dynashape.integrations.verl.convert import DEFAULT_BUDGET_KEY
from dynashape.meds.capture import OFFICIAL_FINGERPRINT_LAYERS
from dynashape.shapers import Shaper, config_class, get_shaper, shaper_needs
from dynashape.shapers.parts.penalties import PENALTY_KEYS

__all__ = [
    "ADAPTER_KEYS",
    "DEFAULT_BUDGET_KEY",
    "FIRST_VALIDATION_METRIC",
    "VERDICTS",
    "EstimatorSettings",
    "parse_settings",
]

#: Values of algorithm.<name>.verdict (see EstimatorSettings.verdict).
VERDICTS: tuple[str, ...] = ("auto", "acc", "threshold")

#: Keys under algorithm.<name> that configure the adapter rather than the shaper.
ADAPTER_KEYS: tuple[str, ...] = (
    "state_dir",
    "fresh_state",
    "verdict",
    "correct_threshold",
    "residual_reward",
    "fingerprint_layers",
    "fingerprint_diff",
    "fingerprint_norm",
    "budget_key",
    "validation_metric",
)

#: algorithm.<name>.validation_metric's default: the first ``val-core/<data_source>/.../mean@N`` verl reports.
FIRST_VALIDATION_METRIC = "first"


# ---------------------------------------------------------------------------------------------------------
# Settings: algorithm.<name>.* -> validated shaper config + adapter options
# ---------------------------------------------------------------------------------------------------------


@dataclass(frozen=True, kw_only=True)
class EstimatorSettings:
    """What one ``algorithm.<name>`` section resolves to.

    Attributes:
        name: Estimator (= shaper) name.
        shaper_params: Keyword parameters of the shaper, already accepted by its config class.
        state_dir: Root of the ``global_step_N/dynashape_<name>_state.pt`` files written with each verl checkpoint
            (None: inside verl's own ``trainer.default_local_dir/global_step_N``).
        fresh_state: When verl resumes from a step whose shaper state file is missing: False (default) fails,
            naming the file looked for; True starts the shaper fresh (LEAD's EMA, the MEDS memory) with a
            warning. Only for a resume from a checkpoint written without the plugin.
        verdict: Where a rollout's correctness comes from. ``auto`` (default): the reward function's ``acc``
            (``reward_extra_info["acc"]``) when every row has it, else the threshold; ``acc``: always ``acc``, an
            error when it is missing; ``threshold``: always ``sum(token_level_rewards) > correct_threshold``.
        correct_threshold: The threshold verdict: correct when the summed token-level reward exceeds this
            (default 0.5, the 0/1 score's midpoint). Refused with KL-in-reward or an overlong penalty, which
            change the summed reward.
        residual_reward: Pass ``score - correct`` (what verl's score adds to the 0/1 verdict, e.g. DAPO's
            overlong penalty or its -1 for wrong answers) to the shaper as one extra ``rewards`` channel, so that
            MEDS's base reward equals verl's score. Only for shapers that take reward channels (``Shaper.needs``).
        fingerprint_layers: MEDS fingerprint width: the last this many layer logits (default: the official
            ``OFFICIAL_FINGERPRINT_LAYERS``, 14).
        fingerprint_diff: Consecutive layer differences first (the paper's "diff" ablation).
        fingerprint_norm: "raw" (official) or "final" (final norm on every layer).
        budget_key: For a shaper that reads budgets (L1): the dotted path of each row's token budget in verl's
            per-row dataset fields (``non_tensor_batch``), default ``reward_model.num_tokens``.
        validation_metric: For a shaper that reads the validation accuracy (AALC): the key of verl's validation
            metrics handed to it after each validation; ``first`` (default) takes the first
            ``val-core/<data_source>/<reward key>/mean@N`` verl reports (AALC's code reads the first metric).
    """

    name: str
    shaper_params: tuple[tuple[str, Any], ...]
    state_dir: str | None = None
    fresh_state: bool = False
    verdict: str = "auto"
    correct_threshold: float = 0.5
    residual_reward: bool = False
    fingerprint_layers: int = OFFICIAL_FINGERPRINT_LAYERS
    fingerprint_diff: bool = False
    fingerprint_norm: str = "raw"
    budget_key: str = DEFAULT_BUDGET_KEY
    validation_metric: str = FIRST_VALIDATION_METRIC

    def build_shaper(self) -> Shaper:
        return get_shaper(self.name, **dict(self.shaper_params))


def _plain(value: Any) -> Any:
    """OmegaConf containers -> Python values; lists -> tuples (our configs are frozen, tuple-typed)."""
    to_container = getattr(value, "_metadata", None) is not None
    if to_container:  # DictConfig / ListConfig without importing omegaconf here
        from omegaconf import OmegaConf

        value = OmegaConf.to_container(value, resolve=True)
    if isinstance(value, Mapping):
        return {str(k): _plain(v) for k, v in value.items()}
    if isinstance(value, (list, tuple)):
        return tuple(_plain(v) for v in value)
    return value


def _section(config: Any, name: str) -> dict[str, Any]:
    """``config.<name>`` as a plain dict; {} when absent. `config` is verl's algorithm DictConfig, an
    AlgoConfig dataclass, a plain mapping, or None."""
    if config is None:
        return {}
    if isinstance(config, Mapping) or hasattr(config, "get"):
        section = config.get(name, None)
    else:
        section = getattr(config, name, None)
    if section is None:
        return {}
    section = _plain(section)
    if not isinstance(section, dict):
        raise ValueError(
            f"algorithm.{name}: expected a mapping of parameters (e.g. +algorithm.{name}.b_max=4000), got {section!r}"
        )
    return section


def parse_settings(name: str, config: Any) -> EstimatorSettings:
    """Validate ``algorithm.<name>.*`` with the shaper's own config class; errors name the full key.

    Raises:
        ValueError: An unknown key, or a value the shaper's config rejects, as ``algorithm.<name>.<key>: ...``.
    """
    section = _section(config, name)
    state_dir = section.pop("state_dir", None)
    if state_dir is not None and (not isinstance(state_dir, str) or not state_dir):
        raise ValueError(f"algorithm.{name}.state_dir: must be a non-empty path string, got {state_dir!r}")
    fresh_state = section.pop("fresh_state", False)
    if not isinstance(fresh_state, bool):
        raise ValueError(f"algorithm.{name}.fresh_state: must be true or false, got {fresh_state!r}")
    verdict = section.pop("verdict", "auto")
    if verdict not in VERDICTS:
        raise ValueError(f"algorithm.{name}.verdict: must be one of {', '.join(VERDICTS)}, got {verdict!r}")
    threshold = section.pop("correct_threshold", 0.5)
    if isinstance(threshold, bool) or not isinstance(threshold, (int, float)) or not np.isfinite(threshold):
        raise ValueError(f"algorithm.{name}.correct_threshold: must be a finite number, got {threshold!r}")
    residual = section.pop("residual_reward", False)
    if not isinstance(residual, bool):
        raise ValueError(f"algorithm.{name}.residual_reward: must be true or false, got {residual!r}")
    if residual and shaper_needs(name).reward_channels == "refused":
        raise ValueError(
            f"algorithm.{name}.residual_reward=true: the '{name}' shaper takes no reward channels; leave it false"
        )
    layers = section.pop("fingerprint_layers", OFFICIAL_FINGERPRINT_LAYERS)
    if isinstance(layers, bool) or not isinstance(layers, int) or layers < 1:
        raise ValueError(f"algorithm.{name}.fingerprint_layers: must be a positive int, got {layers!r}")
    diff = section.pop("fingerprint_diff", False)
    if not isinstance(diff, bool):
        raise ValueError(f"algorithm.{name}.fingerprint_diff: must be true or false, got {diff!r}")
    norm = section.pop("fingerprint_norm", "raw")
    if norm not in ("raw", "final"):
        raise ValueError(f"algorithm.{name}.fingerprint_norm: must be 'raw' or 'final', got {norm!r}")
    needs = shaper_needs(name)
    budget_key = _signal_key(name, section, "budget_key", DEFAULT_BUDGET_KEY, needs.budgets, "budgets")
    metric = _signal_key(
        name, section, "validation_metric", FIRST_VALIDATION_METRIC, needs.validation_accuracy, "validation accuracy"
    )
    cls = config_class(name)
    penalties = {key: section.pop(key) for key in PENALTY_KEYS if key in section}
    if penalties:  # the engines' penalties (overlong, stop_properly), checked as get_shaper builds them
        try:
            get_shaper(name, **penalties)
        except (TypeError, ValueError) as err:
            raise ValueError(f"algorithm.{name}: invalid penalty {penalties}: {err}") from err
    fields = {f.name for f in dataclasses.fields(cls)}
    unknown = sorted(set(section) - fields)
    if unknown:
        allowed = ", ".join(sorted(fields | set(ADAPTER_KEYS) | set(PENALTY_KEYS)))
        raise ValueError(
            f"algorithm.{name}.{unknown[0]}: not a parameter of the '{name}' advantage estimator; "
            f"allowed keys under algorithm.{name}: {allowed}"
        )
    try:
        cls(**section)
    except (TypeError, ValueError) as err:
        raise ValueError(f"algorithm.{name}: invalid parameters {section}: {err}") from err
    return EstimatorSettings(
        name=name,
        shaper_params=tuple(sorted({**section, **penalties}.items())),
        state_dir=state_dir,
        fresh_state=fresh_state,
        verdict=verdict,
        correct_threshold=float(threshold),
        residual_reward=residual,
        fingerprint_layers=layers,
        fingerprint_diff=diff,
        fingerprint_norm=norm,
        budget_key=budget_key,
        validation_metric=metric,
    )


def _signal_key(name: str, section: dict[str, Any], key: str, default: str, needed: bool, what: str) -> str:
    """An adapter key that only a shaper reading `what` takes (no key is accepted and ignored)."""
    value = section.pop(key, None)
    if value is None:
        return default
    if not needed:
        raise ValueError(f"algorithm.{name}.{key}: the '{name}' shaper reads no {what}; leave it out")
    if not isinstance(value, str) or not value or any(not part for part in value.split(".")):
        raise ValueError(f"algorithm.{name}.{key}: must be a non-empty key string, got {value!r}")
    return value
