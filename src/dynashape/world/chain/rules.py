"""The chain world's budget rules: the two regimes' training budgets, set by a stated rule from the audit.

``rules.json`` beside this module is world data, frozen with the world's version: written once by
``dynashape audit --write-rules FILE`` (copied here by a developer), read by the presets. Nothing a method
does feeds back into it.
"""

from __future__ import annotations

import json
import math
from pathlib import Path
from typing import Any

from dynashape.world.chain.config import WORLD_VERSION

__all__ = ["RULES_COMMAND", "RULES_PATH", "eval_cap", "load_rules", "rules_from_audit"]

RULES_PATH = Path(__file__).with_name("rules.json")
RULES_COMMAND = "dynashape audit --write-rules FILE"


def eval_cap(loose: int, current: int) -> int:
    """The evaluation cap: the configured one when it is at least 1.25 x the loose budget, else the next
    power of two above 1.25 x loose (the cap must sit well above both training budgets)."""
    need = 1.25 * loose
    return current if current >= need else 2 ** math.ceil(math.log2(need))


def rules_from_audit(audit: dict[str, Any], *, base_key: str | None, cap: int) -> dict[str, Any]:
    """The budget rules of an audit, with the world's version and the audit's headline numbers."""
    b = audit["budgets"]
    rules = {
        "world_version": WORLD_VERSION,
        "base_key": base_key,
        "command": "dynashape audit --write-rules",
        "regimes": {
            "tight": {
                "budget": b["tight"],
                "rule": f"median sampled length of the base model at the hardest difficulty ({b['hardest']} ops)",
                "base_truncated": audit["trunc_tight"],
            },
            "loose": {
                "budget": b["loose"],
                "rule": "97th percentile of the base model's sampled lengths (at most 3 % truncated)",
                "base_truncated": audit["trunc_loose"],
            },
        },
        "derived": "LEAD b_max = budget, l_min = budget // 4; global thresholds T = budget // 2; overlong buffer "
        "budget // 6; cosine max_len and pass_rate_linear budget = budget",
        "eval_cap": cap,
        "audit": {
            "n_responses": audit["n_responses"],
            "accuracy": audit["accuracy"],
            "mean_length": audit["mean_length"],
        },
    }
    return rules


def load_rules(path: Path = RULES_PATH) -> dict[str, Any]:
    """The budget rules shipped with the world (``rules.json``); a clear error when they are missing or belong
    to another world version."""
    if not path.exists():
        raise ValueError(f"no budget rules at {path}; run `{RULES_COMMAND}`")
    rules = json.loads(path.read_text())
    if rules.get("world_version") != WORLD_VERSION:
        raise ValueError(
            f"{path} holds rules of world {rules.get('world_version')!r}, not {WORLD_VERSION!r}; run `{RULES_COMMAND}`"
        )
    return rules
