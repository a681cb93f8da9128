"""Method presets: data, not branches. Each is a set of ``TrainConfig`` fields over a shared default.

Every preset shares the base model, seed, prompts per step, group size and step budget; only the reward,
shaper and loss differ. Length parameters are scaled to the toy task from the papers' ratios:

* training budget B = ``max_new_tokens``, set by the budget regime (``--regime``) from the audit of the base
  model (``world/chain/rules.json``, from ``dynashape audit --write-rules``): ``tight`` = the base's
  median length on the hardest problems (the budget binds there, as LEAD's 4K budget binds on hard problems),
  ``loose`` = the base's 97th percentile (at most 3 % truncated; any compression is the method's own);
* LEAD: b_max = B, l_min = B / 4 (the paper's 1000 / 4000);
* grpo_length / gdpo: global threshold T = B / 2 (docs/algorithms.md "Baselines": T = 2000 for a 4000 budget), too
  tight for a 5- or 6-operand concise trace (~40 / ~47 tokens) and loose for a 2-operand one (~17);
* ShorterBetter: alpha = 2, beta per token scaled by 4000 / B ~ 60 from the paper's 0.001 -> 0.06;
* DAPO / MEDS: overlong buffer B / 6 (DAPO: 4096 of 20480 is 1 / 5), dual clip 10 for MEDS;
* fingerprints, for every shaper that declares it reads them (``Shaper.needs``: meds, lead_meds): all 4
  decoder layers of the toy model (``TRAINER_FINGERPRINT_LAYERS``);
* cosine: max_len = B (the cosine spans the whole budget, as the paper's max_len is its generation limit);
  its reward values are dimensionless and keep open-r1's defaults;
* kimi_length: weight 1, unscaled: lambda uses only (l - min) / (max - min) within a group, free of units;
* pass_rate_linear: budget = B (prime-rl divides by its sequence length), coef 0.25 unscaled (the penalty is
  already a fraction of the budget);
* length_zscore: alpha 0.05 and the -1 wrong reward unscaled (a z-score has no units);
* ablations for the comparison: lead_min_correct / lead_mean_all (LEAD's target aggregator), lead_upper_only
  (the one-sided efficiency reward), meds_single_cluster (MEDS with one cluster per error bank);
* the field's length methods (l1_exact ... gfpo): lengths the same fraction of B as of the paper's own maximum
  response length, per-token coefficients scaled by P / B (``study.field_presets`` states each).

``TUNING_GRIDS`` is the small stated grid that the comparison tunes each global baseline on (validation split
only): for each preset, one key in ``--set`` form (``shaper_kwargs.x`` or a ``TrainConfig`` field) and its values,
the preset's own value in the middle, halved and doubled for a weight or coefficient; thresholds B/4, B/2, 3B/4;
lead_static's lambda_c = 1 / (1 + rho) for rho = 0.25, 1, 4 of the paper's ratio sweep.
"""

from __future__ import annotations

import dataclasses
from types import MappingProxyType
from typing import Any

from dynashape.shapers import shaper_needs
from dynashape.train.config import TRAINER_FINGERPRINT_LAYERS, TrainConfig, train_sections
from dynashape.train.field_presets import field_table

__all__ = [
    "PRESETS",
    "REGIMES",
    "TUNING_GRIDS",
    "make_train_config",
    "preset_values",
    "regime_budget",
    "tuning_grids",
    "tuning_overrides",
]

REGIMES: tuple[str, ...] = ("tight", "loose")
FALLBACK_BUDGET = 128  # only when rules.json is missing (a fresh world version before its audit)


def regime_budget(regime: str = "tight") -> int:
    """The training budget B of ``regime`` from the saved audit rules (``world/chain/rules.json``)."""
    from dynashape.world.chain.rules import load_rules

    if regime not in REGIMES:
        raise ValueError(f"regime must be one of {REGIMES}, got {regime!r}")
    try:
        return int(load_rules()["regimes"][regime]["budget"])
    except ValueError as err:  # said aloud: a run on the fallback budget is not the audited world's regime
        import logging

        logging.getLogger(__name__).warning("no audited budget rules (%s); using %d tokens", err, FALLBACK_BUDGET)
        return FALLBACK_BUDGET


def _table(budget: int) -> dict[str, dict[str, Any]]:
    """Every preset's ``TrainConfig`` fields at training budget ``budget`` as written (``preset_values`` adds what
    follows from the shaper's declaration and the budget itself)."""
    l_min, threshold, overlong = budget // 4, budget // 2, max(1, budget // 6)
    dapo: dict[str, Any] = {
        "eps_low": 0.2,
        "eps_high": 0.28,
        "loss_agg": "token-mean",
        "dynamic_sampling": True,
        "reward_columns": ("correct_overlong",),
        "overlong": {"buffer": overlong},
    }
    return {
        "grpo": {"shaper": "grpo"},
        "grpo_length": {
            "shaper": "grpo_length",
            "shaper_kwargs": {"mode": "conditioned", "threshold": threshold, "weights": (0.5, 0.5)},
        },
        "gdpo": {
            "shaper": "gdpo",
            "reward_columns": ("correct", "correct_short"),
            "length_threshold": threshold,
            "shaper_kwargs": {"weights": (1.0, 1.0), "whiten": "token"},
        },
        "lead": {"shaper": "lead", "shaper_kwargs": {"b_max": budget, "l_min": l_min}},
        "lead_static": {
            "shaper": "lead",
            "shaper_kwargs": {"b_max": budget, "l_min": l_min, "static_lambda_c": 0.5},
        },
        "shorterbetter": {"shaper": "shorterbetter", "shaper_kwargs": {"alpha": 2.0, "beta": 0.06}},
        "drpo": {"shaper": "grpo", "loss": "drpo"},
        "dapo": {"shaper": "grpo", **dapo},
        "meds": {
            "shaper": "meds",
            **dapo,
            "reward_columns": ("overlong",),  # the meds shaper adds its columns to the correctness it reads
            "dual_clip": 10.0,
            "shaper_kwargs": {"alpha": 0.1, "beta": 0.2},
        },
        "lead_meds": {
            "shaper": "lead_meds",
            "shaper_kwargs": {"b_max": budget, "l_min": l_min, "meds": {"alpha": 0.1, "beta": 0.2}},
        },
        # the length rewards engines ship; defaults are the sources', scaled as the docstring says
        "cosine": {"shaper": "cosine", "shaper_kwargs": {"max_len": budget}},
        "kimi_length": {"shaper": "kimi_length", "shaper_kwargs": {"weight": 1.0}},
        "pass_rate_linear": {"shaper": "pass_rate_linear", "shaper_kwargs": {"coef": 0.25, "budget": budget}},
        "length_zscore": {"shaper": "length_zscore", "shaper_kwargs": {"alpha": 0.05, "wrong_reward": -1.0}},
        # LEAD's ablations (arXiv 2605.09806): the target aggregator and the one-sided efficiency reward
        "lead_min_correct": {
            "shaper": "lead",
            "shaper_kwargs": {"b_max": budget, "l_min": l_min, "target": "min_correct"},
        },
        "lead_mean_all": {"shaper": "lead", "shaper_kwargs": {"b_max": budget, "l_min": l_min, "target": "mean_all"}},
        "lead_upper_only": {
            "shaper": "lead",
            "shaper_kwargs": {"b_max": budget, "l_min": l_min, "efficiency": "upper_only"},
        },
        # MEDS's clustering ablation: the whole error bank of a prompt is one cluster (no HDBSCAN)
        "meds_single_cluster": {
            "shaper": "meds",
            **dapo,
            "reward_columns": ("overlong",),
            "dual_clip": 10.0,
            "shaper_kwargs": {"alpha": 0.1, "beta": 0.2, "cluster_method": "single"},
        },
        # the field's length methods, carried from their papers by the rules of study.field_presets
        **field_table(budget),
    }


def preset_values(method: str, budget: int) -> dict[str, Any]:
    """The ``TrainConfig`` fields of preset ``method`` at training budget ``budget`` (tokens)."""
    if budget < 8:
        raise ValueError(f"budget must be >= 8, got {budget}")
    table = _table(budget)
    if method not in table:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(table)}")
    entry = table[method]
    if shaper_needs(entry["shaper"]).fingerprints:  # the shaper's declaration, not a list of MEDS presets
        entry = {**entry, "fingerprint_layers": TRAINER_FINGERPRINT_LAYERS}
    return {"max_new_tokens": budget, **entry}


def tuning_grids(budget: int) -> dict[str, dict[str, tuple[float, ...]]]:
    """preset -> {key in --set form: grid} at training budget ``budget``; see the module docstring."""
    return {
        "grpo_length": {"shaper_kwargs.threshold": (budget // 4, budget // 2, 3 * budget // 4)},
        "gdpo": {"length_threshold": (budget // 4, budget // 2, 3 * budget // 4)},
        "shorterbetter": {"shaper_kwargs.beta": (0.03, 0.06, 0.12)},
        "lead_static": {"shaper_kwargs.static_lambda_c": (0.8, 0.5, 0.2)},
        "cosine": {"shaper_kwargs.min_value_correct": (0.25, 0.5, 0.75)},
        "kimi_length": {"shaper_kwargs.weight": (0.5, 1.0, 2.0)},
        "pass_rate_linear": {"shaper_kwargs.coef": (0.125, 0.25, 0.5)},
        "length_zscore": {"shaper_kwargs.alpha": (0.025, 0.05, 0.1)},
    }


BUDGET = regime_budget("tight")
# The presets at the tight regime's budget (the default); other regimes: preset_values(method, budget).
PRESETS: MappingProxyType[str, dict[str, Any]] = MappingProxyType({m: preset_values(m, BUDGET) for m in _table(BUDGET)})
TUNING_GRIDS: MappingProxyType[str, dict[str, tuple[float, ...]]] = MappingProxyType(tuning_grids(BUDGET))


def make_train_config(method: str, *, regime: str = "tight", **overrides: Any) -> TrainConfig:
    """The ``TrainConfig`` of preset ``method`` in budget regime ``regime`` with ``overrides`` on top.

    The regime sets the training budget (``max_new_tokens``) and every length parameter derived from it
    (``regime_budget``); ``shaper_kwargs`` and section overrides are merged into the preset's, so
    ``shaper_kwargs={"b_max": 80}`` keeps l_min and ``overlong={"factor": 0.5}`` keeps the preset's buffer.
    """
    if method not in PRESETS:
        raise ValueError(f"unknown method {method!r}; available: {', '.join(PRESETS)}")
    fields = {f.name for f in dataclasses.fields(TrainConfig)}
    unknown = set(overrides) - fields
    if unknown:
        raise ValueError(f"unknown TrainConfig fields {sorted(unknown)}")
    values: dict[str, Any] = {"method": method, "regime": regime, **preset_values(method, regime_budget(regime))}
    values["shaper_kwargs"] = {**values.get("shaper_kwargs", {}), **overrides.pop("shaper_kwargs", {})}
    for name in train_sections():
        if name in overrides:
            values[name] = {**_fields(values.get(name)), **_fields(overrides.pop(name))}
    values.update(overrides)
    return TrainConfig(**values)


def _fields(section: Any) -> dict[str, Any]:
    """A section given as a dataclass, a mapping or None, as a dict of its fields."""
    if section is None:
        return {}
    return dataclasses.asdict(section) if dataclasses.is_dataclass(section) else dict(section)


def tuning_overrides(method: str, *, regime: str = "tight") -> list[dict[str, Any]]:
    """The ``make_train_config`` overrides of each point of ``method``'s tuning grid in ``regime`` (one key per
    grid; ``TUNING_GRIDS`` is the tight regime's)."""
    grids = tuning_grids(regime_budget(regime))
    if method not in grids:
        raise ValueError(f"method {method!r} has no tuning grid; grids: {', '.join(grids)}")
    ((key, values),) = grids[method].items()
    if key.startswith("shaper_kwargs."):
        return [{"shaper_kwargs": {key.split(".", 1)[1]: v}} for v in values]
    return [{key: v} for v in values]
