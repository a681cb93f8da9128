"""Method presets: data, not branches. Each is a set of ``TrainConfig`` fields over a shared default.

Every preset shares the base model, seed, prompts per step, group size and step budget; only the reward,
shaper and loss differ. Length parameters are scaled to the toy task from the papers' ratios:

* training budget B = ``max_new_tokens`` = 64 tokens: below the base model's natural length on the hardest
  problems (a verbose 6-operand trace averages ~90 characters, up to ~140; 40-45 % of the teacher's 5- and
  6-operand traces exceed 64), as LEAD's 4K budget binds on hard problems;
* LEAD: b_max = B, l_min = B / 4 (the paper's 1000 / 4000);
* grpo_length / gdpo: global threshold T = B / 2 (baselines.md: T = 2000 for a 4000 budget), too tight for
  a 5- or 6-operand concise trace (~40 / ~47 tokens) and loose for a 2-operand one (~17);
* ShorterBetter: alpha = 2, beta per token scaled by 4000 / B ~ 60 from the paper's 0.001 -> 0.06;
* DAPO / MEDS: overlong buffer B / 6 (DAPO: 4096 of 20480 is 1 / 5), dual clip 10 for MEDS;
* MEDS fingerprints: the last half of the decoder layers (the paper: 14 of 28), i.e. 2 of 4.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from dynashape.train.config import TrainConfig

__all__ = ["PRESETS", "available_presets", "make_train_config"]

BUDGET = 64
L_MIN = BUDGET // 4
THRESHOLD = BUDGET // 2
OVERLONG_BUFFER = BUDGET // 6

_DAPO: dict[str, Any] = {
    "eps_low": 0.2,
    "eps_high": 0.28,
    "loss_agg": "token-mean",
    "dynamic_sampling": True,
    "reward_columns": ("correct_overlong",),
    "overlong_buffer": OVERLONG_BUFFER,
}

PRESETS: MappingProxyType[str, dict[str, Any]] = MappingProxyType(
    {
        "grpo": {"shaper": "grpo"},
        "grpo_length": {
            "shaper": "grpo_length",
            "shaper_kwargs": {"mode": "conditioned", "threshold": THRESHOLD, "weights": (0.5, 0.5)},
        },
        "gdpo": {
            "shaper": "gdpo",
            "reward_columns": ("correct", "correct_short"),
            "length_threshold": THRESHOLD,
            "shaper_kwargs": {"weights": (1.0, 1.0), "whiten": "token"},
        },
        "lead": {"shaper": "lead", "shaper_kwargs": {"b_max": BUDGET, "l_min": L_MIN}},
        "lead_static": {
            "shaper": "lead",
            "shaper_kwargs": {"b_max": BUDGET, "l_min": L_MIN, "static_lambda_c": 0.5},
        },
        "shorterbetter": {"shaper": "shorterbetter", "shaper_kwargs": {"alpha": 2.0, "beta": 0.06}},
        "drpo": {"shaper": "grpo", "loss": "drpo"},
        "dapo": {"shaper": "grpo", **_DAPO},
        "meds": {
            "shaper": "meds",
            **_DAPO,
            "reward_columns": ("overlong",),  # the meds shaper adds its columns to the correctness it reads
            "dual_clip": 10.0,
            "fingerprint_layers": 2,
            "shaper_kwargs": {"alpha": 0.1, "beta": 0.2},
        },
        "lead_meds": {
            "shaper": "lead_meds",
            "fingerprint_layers": 2,
            "shaper_kwargs": {"b_max": BUDGET, "l_min": L_MIN, "meds": {"alpha": 0.1, "beta": 0.2}},
        },
    }
)


def available_presets() -> list[str]:
    return list(PRESETS)


def make_train_config(method: str, **overrides: Any) -> TrainConfig:
    """The ``TrainConfig`` of preset ``method`` with ``overrides`` applied on top (then validated).

    ``shaper_kwargs`` overrides are merged into the preset's, so ``shaper_kwargs={"b_max": 80}`` keeps l_min.
    """
    if method not in PRESETS:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {sorted(unknown)}")
    values: dict[str, Any] = {"method": method, **PRESETS[method]}
    values["shaper_kwargs"] = {**values.get("shaper_kwargs", {}), **overrides.pop("shaper_kwargs", {})}
    values.update(overrides)
    return TrainConfig(**values)
