"""What ShapedGRPOTrainer accepts from TRL: the supported TRL versions and the GRPOConfig options it refuses.

Plain checks on values (no TRL import), so they run before TRL loads a model and the messages name the setting.
"""

from __future__ import annotations

import os
from typing import Any

__all__ = ["SUPPORTED_TRL", "check_trl_version", "check_unhonoured_options"]

#: TRL versions this adapter was checked against (the overridden private methods change between releases).
SUPPORTED_TRL = ("1.16.0", "1.17.0")  # [lower, upper)


def _version_tuple(text: str) -> tuple[int, ...]:
    parts = []
    for piece in text.split(".")[:3]:
        digits = "".join(ch for ch in piece if ch.isdigit())
        parts.append(int(digits) if digits else 0)
    return tuple(parts)


def check_trl_version(version: str) -> None:
    """Raise when `version` is outside SUPPORTED_TRL (set DYNASHAPE_TRL_UNCHECKED=1 to try anyway)."""
    low, high = (_version_tuple(v) for v in SUPPORTED_TRL)
    if not low <= _version_tuple(version) < high and os.environ.get("DYNASHAPE_TRL_UNCHECKED") != "1":
        raise ImportError(
            f"dynashape.integrations.trl supports trl>={SUPPORTED_TRL[0]},<{SUPPORTED_TRL[1]}, found {version}; "
            "install a supported TRL or set DYNASHAPE_TRL_UNCHECKED=1 to try at your own risk"
        )


# GRPOConfig options that shape TRL's own advantages. ShapedGRPOTrainer replaces those advantages with the
# shaper's, so a non-default value would be silently ignored: refused instead (option -> accepted defaults).
_UNHONOURED_OPTIONS: dict[str, tuple[Any, ...]] = {
    "scale_rewards": ("group",),
    "multi_objective_aggregation": ("sum_then_normalize",),
}


def check_unhonoured_options(args: Any) -> None:
    """Raise a ValueError naming each TRL option ShapedGRPOTrainer would ignore (set to a non-default value)."""
    if args is None:  # TRL builds a default GRPOConfig
        return
    problems = []
    for name, accepted in _UNHONOURED_OPTIONS.items():
        value = getattr(args, name, accepted[0])
        if value not in accepted:
            problems.append(f"{name}={value!r} (leave it at {accepted[0]!r})")
    weights = getattr(args, "reward_weights", None)
    if weights is not None and any(float(w) != 1.0 for w in weights):
        problems.append(
            f"reward_weights={list(weights)!r} (leave it None; the verdict comes from correctness_reward and other "
            "rewards enter as reward_channels)"
        )
    if problems:
        raise ValueError(
            "ShapedGRPOTrainer: the shaper computes the advantages, so these GRPOConfig options would be ignored: "
            + "; ".join(problems)
            + ". Normalisation is the shaper's own setting (e.g. get_shaper('lead', whiten='sequence'))."
        )
